// The webhook address guard (server/webhooks/address-guard.ts) against the IANA special-purpose
// registries (issue 28, row 6): every range, with one address inside it, is refused for live
// and test endpoints alike; loopback and private networks only for test endpoints when the
// operator allows local test targets (row 3); public addresses pass. Nothing here
// connects anywhere: the guard is asked about each address.
import { describe, expect, it } from "vitest";
import { addressRefusal, LOOPBACK_RANGES, PRIVATE_RANGES, SPECIAL_RANGES } from "../../server/webhooks/address-guard.ts";

const live = { allowLoopback: false, allowPrivate: false };
const test = { allowLoopback: true, allowPrivate: true };

/** The private networks, refused unless local test targets are allowed, and one address inside each. */
const PRIVATE_INSIDE: Array<[range: string, address: string]> = [
  ["10.0.0.0/8", "10.20.30.40"],
  ["172.16.0.0/12", "172.31.255.1"],
  ["192.168.0.0/16", "192.168.1.1"],
  ["fc00::/7", "fd00:ec2::254"],
];

/** Each special-purpose range (as the guard's table writes it) and one address inside it, written independently. */
const INSIDE: Array<[range: string, address: string]> = [
  ["0.0.0.0/8", "0.1.2.3"],
  ["100.64.0.0/10", "100.100.100.200"],
  ["169.254.0.0/16", "169.254.169.254"],
  ["192.0.0.0/24", "192.0.0.170"],
  ["192.0.2.0/24", "192.0.2.1"],
  ["192.31.196.0/24", "192.31.196.1"],
  ["192.52.193.0/24", "192.52.193.1"],
  ["192.88.99.0/24", "192.88.99.1"],
  ["192.175.48.0/24", "192.175.48.6"],
  ["198.18.0.0/15", "198.19.255.255"],
  ["198.51.100.0/24", "198.51.100.7"],
  ["203.0.113.0/24", "203.0.113.9"],
  ["224.0.0.0/4", "239.255.255.250"],
  ["240.0.0.0/4", "255.255.255.255"],
  ["::/128", "::"],
  ["::/96", "::7f00:1"],
  ["::ffff:0:0:0/96", "::ffff:0:7f00:1"],
  ["64:ff9b::/96", "64:ff9b::a9fe:a9fe"],
  ["64:ff9b:1::/48", "64:ff9b:1::7f00:1"],
  ["100::/64", "100::1"],
  ["100:0:0:1::/64", "100:0:0:1::1"],
  ["2001::/32", "2001:0:4136:e378:8000:63bf:3fff:fdd2"],
  ["2001::/23", "2001:2::1"],
  ["2001:db8::/32", "2001:db8::1"],
  ["2002::/16", "2002:7f00:1::1"],
  ["2620:4f:8000::/48", "2620:4f:8000::42"],
  ["3fff::/20", "3fff:0fff::1"],
  ["5f00::/16", "5f00::1"],
  ["fe80::/10", "fe80::1"],
  ["fec0::/10", "fec0::1"],
  ["ff00::/8", "ff02::1"],
];

describe("the webhook address guard", () => {
  it("lists every special-purpose range the test names, and no other", () => {
    expect(SPECIAL_RANGES.map((r) => `${r.network}/${r.prefix}`).sort()).toEqual(INSIDE.map(([range]) => range).sort());
  });

  it("lists the private networks the test names, and no other", () => {
    expect(PRIVATE_RANGES.map((r) => `${r.network}/${r.prefix}`).sort()).toEqual(PRIVATE_INSIDE.map(([range]) => range).sort());
  });

  it.each(PRIVATE_INSIDE)("refuses the private network %s (%s) unless local test targets are allowed", (_range, address) => {
    expect(addressRefusal(address, live)).toMatch(/private address/);
    expect(addressRefusal(address, test)).toBeNull();
  });

  it.each(INSIDE)("refuses %s (%s) for live and test endpoints", (_range, address) => {
    expect(addressRefusal(address, live)).toMatch(/special-purpose address/);
    expect(addressRefusal(address, test)).toMatch(/special-purpose address/);
  });

  it.each([
    ["IPv4-compatible loopback", "::7f00:1"],
    ["IPv4-compatible metadata", "::a9fe:a9fe"],
    ["IPv4-translated loopback", "::ffff:0:7f00:1"],
    ["6to4 of loopback", "2002:7f00:0001::"],
    ["Teredo", "2001::1"],
    ["local NAT64", "64:ff9b:1:ffff::1"],
    ["site-local", "fec0::1"],
    ["unallocated IPv6 outside 2000::/3", "4000::1"],
  ])("refuses the forms that reached other ranges: %s (%s)", (_what, address) => {
    expect(addressRefusal(address, test)).not.toBeNull();
  });

  it.each([
    ["::ffff:127.0.0.1", true],
    ["::ffff:7f00:1", true],
    ["0:0:0:0:0:ffff:7f00:0001", true],
    ["::FFFF:7F00:1", true],
    ["::ffff:10.0.0.1", true],
    ["::ffff:c0a8:101", true],
    ["0:0:0:0:0:ffff:a9fe:a9fe", false],
  ])("judges an IPv4-mapped address as its IPv4 address, in every spelling: %s", (address, isLocal) => {
    expect(addressRefusal(address, live)).not.toBeNull();
    if (isLocal) expect(addressRefusal(address, test)).toBeNull();
    else expect(addressRefusal(address, test)).toMatch(/special-purpose/);
  });

  it.each(LOOPBACK_RANGES.map((r) => r.network === "::1" ? "::1" : "127.1.2.3"))("allows loopback %s for test endpoints only", (address) => {
    expect(addressRefusal(address, live)).toMatch(/loopback/);
    expect(addressRefusal(address, test)).toBeNull();
  });

  it.each(["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"])("lets a public address through: %s", (address) => {
    expect(addressRefusal(address, live)).toBeNull();
  });
});
