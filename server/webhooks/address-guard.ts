// Server-side request forgery guard for webhook URLs. Live endpoints must be https and every
// address their host resolves to must be public; test endpoints may also be http and
// loopback (local testing; this service is self-hosted). Private, link-local (including the
// 169.254.169.254 metadata address), CGNAT and reserved ranges are refused in both modes.
// The same check runs at creation and inside the connection's DNS lookup at every delivery,
// on the addresses the socket will actually connect to, so DNS rebinding does not get through.
import dns from "node:dns";
import net from "node:net";

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address a connection might use. Injectable for tests. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) =>
  (await dns.promises.lookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

export type AddressPolicy = { allowLoopback: boolean };

const loopback = new net.BlockList();
loopback.addSubnet("127.0.0.0", 8, "ipv4");
loopback.addAddress("::1", "ipv6");

// Never a webhook target: RFC 6890 special-purpose ranges.
const blocked = new net.BlockList();
for (const [network, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10], // CGNAT (also Alibaba's metadata address 100.100.100.200)
  ["169.254.0.0", 16], // link-local, cloud metadata 169.254.169.254
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  blocked.addSubnet(network, prefix, "ipv4");
}
for (const [network, prefix] of [
  ["::", 128],
  ["64:ff9b::", 96], // NAT64: could reach any IPv4 address
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7], // unique local, AWS metadata fd00:ec2::254
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  blocked.addSubnet(network, prefix, "ipv6");
}

/** Why an address may not be a webhook target under `policy`, or null when it may. */
export function addressRefusal(address: string, policy: AddressPolicy): string | null {
  const family = net.isIP(address);
  if (family === 0) return `'${address}' is not an IP address`;
  const mapped = family === 6 ? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address) : null;
  if (mapped) return addressRefusal(mapped[1]!, policy);
  const type = family === 4 ? "ipv4" : "ipv6";
  if (loopback.check(address, type)) return policy.allowLoopback ? null : `${address} is a loopback address`;
  if (blocked.check(address, type)) return `${address} is a private, link-local, CGNAT or reserved address`;
  return null;
}

export class UrlRefusedError extends Error {
  override name = "UrlRefusedError";
}

/** Throws UrlRefusedError when some address of `hostname` is refused (or it resolves to none). */
export async function checkHost(hostname: string, policy: AddressPolicy, resolve: Resolver): Promise<void> {
  const bare = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  if (net.isIP(bare)) {
    const refusal = addressRefusal(bare, policy);
    if (refusal) throw new UrlRefusedError(refusal);
    return;
  }
  let addresses: ResolvedAddress[];
  try {
    addresses = await resolve(bare);
  } catch (error) {
    throw new UrlRefusedError(`${bare} does not resolve (${(error as Error).message})`);
  }
  if (addresses.length === 0) throw new UrlRefusedError(`${bare} does not resolve`);
  for (const { address } of addresses) {
    const refusal = addressRefusal(address, policy);
    if (refusal) throw new UrlRefusedError(`${bare} resolves to ${refusal}`);
  }
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/**
 * A `lookup` for http.request / net.connect: resolves with `resolve` and fails the connection
 * before it is made when any address is refused. It answers both the single-address and the
 * `all: true` form Node asks for (the latter when it races IPv4 and IPv6).
 */
export function guardedLookup(policy: AddressPolicy, resolve: Resolver) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback) => {
    resolve(hostname).then(
      (addresses) => {
        if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} does not resolve`), { code: "ENOTFOUND" }), "");
        for (const { address } of addresses) {
          const refusal = addressRefusal(address, policy);
          if (refusal) return callback(Object.assign(new UrlRefusedError(`${hostname} resolves to ${refusal}`), { code: "EADDRREFUSED" }), "");
        }
        const usable = options.family ? addresses.filter((a) => a.family === options.family) : addresses;
        if (usable.length === 0) return callback(Object.assign(new Error(`${hostname} has no IPv${options.family} address`), { code: "ENOTFOUND" }), "");
        if (options.all) return callback(null, usable);
        return callback(null, usable[0]!.address, usable[0]!.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, ""),
    );
  };
}
