// Server-side request forgery guard for webhook URLs. Live endpoints must be https and every
// address their host resolves to must be a public unicast address; test endpoints may also be
// http, and loopback and private (RFC 1918, unique local) addresses when the operator allows
// local test targets (webhook-config.ts, localTestTargets). What is not public is read off
// the IANA special-purpose address registries (iana-ipv4-special-registry,
// iana-ipv6-special-registry), the multicast and reserved blocks, and the IPv6 address
// architecture: only 2000::/3 is global unicast, so every other IPv6 address is refused too,
// whatever the registries add later. Addresses that carry an IPv4 address reach it by translation
// or tunnelling (IPv4-compatible, SIIT, 6to4, Teredo, NAT64 of both prefixes) and are refused
// whatever they carry; an IPv4-mapped address (::ffff:a.b.c.d, in any spelling) is the IPv4
// address itself on a dual-stack socket and is judged as that address (net.BlockList matches
// mapped addresses against IPv4 rules). The check runs at creation and inside the connection's
// own DNS lookup at every delivery, on the addresses the socket will connect to, so DNS
// rebinding does not get through.
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

export type AddressPolicy = { allowLoopback: boolean; allowPrivate: boolean };

type Family = "ipv4" | "ipv6";

/** A range no webhook may reach, with the name a refusal gives it. */
export interface SpecialRange {
  network: string;
  prefix: number;
  family: Family;
  name: string;
}

const v4 = (network: string, prefix: number, name: string): SpecialRange => ({ network, prefix, family: "ipv4", name });
const v6 = (network: string, prefix: number, name: string): SpecialRange => ({ network, prefix, family: "ipv6", name });

/** Loopback: allowed for test endpoints only (AddressPolicy). */
export const LOOPBACK_RANGES: readonly SpecialRange[] = [v4("127.0.0.0", 8, "loopback"), v6("::1", 128, "loopback")];

/** Private networks: a receiver on the operator's LAN, for test endpoints only when the policy allows it. */
export const PRIVATE_RANGES: readonly SpecialRange[] = [
  v4("10.0.0.0", 8, "private-use"),
  v4("172.16.0.0", 12, "private-use"),
  v4("192.168.0.0", 16, "private-use"),
  v6("fc00::", 7, "unique local (AWS metadata fd00:ec2::254)"),
];

/** Every other special-purpose range: refused in both modes. */
export const SPECIAL_RANGES: readonly SpecialRange[] = [
  v4("0.0.0.0", 8, "'this network'"),
  v4("100.64.0.0", 10, "shared address space (CGNAT; Alibaba's metadata 100.100.100.200)"),
  v4("169.254.0.0", 16, "link-local (cloud metadata 169.254.169.254)"),
  v4("192.0.0.0", 24, "IETF protocol assignments (DS-Lite, PCP and TURN anycast, NAT64 discovery)"),
  v4("192.0.2.0", 24, "documentation (TEST-NET-1)"),
  v4("192.31.196.0", 24, "AS112"),
  v4("192.52.193.0", 24, "AMT"),
  v4("192.88.99.0", 24, "6to4 relay anycast"),
  v4("192.175.48.0", 24, "AS112 direct delegation"),
  v4("198.18.0.0", 15, "benchmarking"),
  v4("198.51.100.0", 24, "documentation (TEST-NET-2)"),
  v4("203.0.113.0", 24, "documentation (TEST-NET-3)"),
  v4("224.0.0.0", 4, "multicast"),
  v4("240.0.0.0", 4, "reserved and limited broadcast"),
  v6("::", 128, "unspecified"),
  v6("::", 96, "IPv4-compatible (deprecated)"),
  v6("::ffff:0:0:0", 96, "IPv4-translated (SIIT)"),
  v6("64:ff9b::", 96, "NAT64 (well-known prefix)"),
  v6("64:ff9b:1::", 48, "NAT64 (local-use prefix)"),
  v6("100::", 64, "discard-only"),
  v6("100:0:0:1::", 64, "dummy prefix"),
  v6("2001::", 32, "Teredo"),
  v6("2001::", 23, "IETF protocol assignments (benchmarking, AMT, AS112, ORCHID)"),
  v6("2001:db8::", 32, "documentation"),
  v6("2002::", 16, "6to4"),
  v6("2620:4f:8000::", 48, "AS112 direct delegation"),
  v6("3fff::", 20, "documentation"),
  v6("5f00::", 16, "segment routing (SRv6) SIDs"),
  v6("fe80::", 10, "link-local"),
  v6("fec0::", 10, "site-local (deprecated)"),
  v6("ff00::", 8, "multicast"),
];

function blockListOf(ranges: readonly SpecialRange[]): net.BlockList {
  const list = new net.BlockList();
  for (const range of ranges) list.addSubnet(range.network, range.prefix, range.family);
  return list;
}

const loopback = blockListOf(LOOPBACK_RANGES);
const privateUse = blockListOf(PRIVATE_RANGES);
const special = blockListOf(SPECIAL_RANGES);
const ipv4Mapped = blockListOf([v6("::ffff:0:0", 96, "IPv4-mapped")]);
const globalUnicast = blockListOf([v6("2000::", 3, "global unicast")]);

/** Why an address may not be a webhook target under `policy`, or null when it may. */
export function addressRefusal(address: string, policy: AddressPolicy): string | null {
  const family = net.isIP(address);
  if (family === 0) return `'${address}' is not an IP address`;
  const type: Family = family === 4 ? "ipv4" : "ipv6";
  if (loopback.check(address, type)) return policy.allowLoopback ? null : `${address} is a loopback address`;
  if (privateUse.check(address, type)) return policy.allowPrivate ? null : `${address} is a private address`;
  if (special.check(address, type)) {
    const range = SPECIAL_RANGES.find((r) => blockListOf([r]).check(address, type));
    return `${address} is a special-purpose address (${range?.name ?? "IPv4-mapped"}), not a public one`;
  }
  if (type === "ipv6" && !ipv4Mapped.check(address, type) && !globalUnicast.check(address, type)) {
    return `${address} is outside 2000::/3, the only IPv6 global unicast space`;
  }
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
