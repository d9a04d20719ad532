// POST /api/badge/ota/check as SPEC 4.8 defines it, and every bad request a badge (or anyone
// holding its token) can send: each gets a defined answer and changes nothing.
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { md5Hex } from "../../firmware/index.ts";
import { RECHECK_SPREAD, spreadRecheckS } from "../../server/services/load-shaping.ts";
import { createDevice } from "../../server/services/devices.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { TEST_STORE } from "./test-database.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
});
afterAll(() => h.close());

const deviceRow = (id: string) => h.server.store.db.selectFrom("devices").selectAll().where("id", "=", id).executeTakeFirstOrThrow();

describe("before anything is published", () => {
  it("answers X no_release", async () => {
    const answer = await h.check(h.devices.r2.token, lines("v=1", "sv=1.0.0", "bat=4.01"));
    expect(answer.status).toBe(200);
    expect(answer.get("X")).toMatch(/^no_release /);
    expect(answer.get("U")).toBeUndefined();
  });
});

describe("with 1.4.0 published to the fleet", () => {
  let image: Uint8Array;
  beforeAll(async () => {
    image = await h.publish("1.4.0", { notes: ["Faster card reads", "Fixes the clock drift"], projectName: "badge" });
  });

  it("offers a strictly newer release with the lines in the specified order", async () => {
    const answer = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.2", "fw=Badge 1.3.2", "bat=3.97", "chg=0"));
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(answer.text).toBe(
      [
        "V1",
        `S ${spreadRecheckS(3600, h.devices.r1.id)}`,
        "U 1.4.0",
        "B 1.4.0",
        `Z ${image.length}`,
        `M ${md5Hex(image)}`,
        "P /api/badge/ota/download?v=1.4.0",
        "L Faster card reads",
        "L Fixes the clock drift",
        ".",
        "",
      ].join("\n"),
    );
    const row = await deviceRow(h.devices.r1.id);
    expect(row).toMatchObject({ installed_version: "1.3.2", installed_display: "Badge 1.3.2", battery_volts: 3.97, charging: 0, offered_version: "1.4.0" });
  });

  it.each([
    ["the same version", "1.4.0"],
    ["the same numbers with a pre-release tag", "1.4.0-rc1"],
    ["the same numbers with build metadata", "1.4.0+build.7"],
    ["a newer hand-flashed dev build", "1.5.0-dev"],
    ["a newer patch", "1.4.1"],
  ])("answers N for %s (never moves a badge back)", async (_name, sv) => {
    const answer = await h.check(h.devices.r1.token, lines("v=1", `sv=${sv}`, "bat=3.97"));
    expect(answer.status).toBe(200);
    expect(answer.lines).toEqual([
      { letter: "S", value: String(spreadRecheckS(6 * 3600, h.devices.r1.id)) },
      { letter: "N", value: "1.4.0" },
    ]);
  });

  it("compares numerically, not as text (1.10.0 is newer than 1.4.0, 1.3.99 older)", async () => {
    expect((await h.check(h.devices.r1.token, lines("v=1", "sv=1.10.0", "bat=4"))).get("N")).toBe("1.4.0");
    expect((await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.99", "bat=4"))).get("U")).toBe("1.4.0");
  });

  it("refuses below 3.85 V on battery, and offers the same badge while charging", async () => {
    const low = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.0", "bat=3.84", "chg=0"));
    expect(low.status).toBe(200);
    expect(low.get("X")).toMatch(/^battery_low .*3\.84 V/);
    // 15 minutes, spread per badge by up to RECHECK_SPREAD (services/load-shaping.ts).
    expect(Number(low.get("S"))).toBeGreaterThanOrEqual(900);
    expect(Number(low.get("S"))).toBeLessThan(900 * (1 + RECHECK_SPREAD));
    expect(low.get("U")).toBeUndefined();
    const charging = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.0", "bat=3.60", "chg=1"));
    expect(charging.get("U")).toBe("1.4.0");
    const exactly = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.0", "bat=3.85"));
    expect(exactly.get("U")).toBe("1.4.0");
  });

  it("accepts CRLF line ends and ignores keys it does not know", async () => {
    const answer = await h.check(h.devices.r1.token, "v=1\r\nsv=1.3.0\r\nbat=3.9\r\nheap=81234\r\n");
    expect(answer.get("U")).toBe("1.4.0");
  });

  describe("bad requests get a 4xx with an X line and change nothing", () => {
    const huge = `v=1\nsv=1.3.0\nbat=3.9\nfw=${"x".repeat(10 * 1024 * 1024)}\n`;
    const cases: [string, string, number, string][] = [
      ["an empty body", "", 400, "malformed_request"],
      ["a body that is not key=value lines", "hello badge server\n", 400, "malformed_request"],
      ["JSON", '{"v":1,"sv":"1.3.0"}', 400, "malformed_request"],
      ["a blank line in the middle", "v=1\n\nsv=1.3.0\nbat=3.9\n", 400, "malformed_request"],
      ["a key given twice", lines("v=1", "sv=1.3.0", "sv=1.2.0", "bat=3.9"), 400, "malformed_request"],
      ["a missing v", lines("sv=1.3.0", "bat=3.9"), 400, "unsupported_request"],
      ["an unknown v", lines("v=2", "sv=1.3.0", "bat=3.9"), 400, "unsupported_request"],
      ["a missing sv", lines("v=1", "bat=3.9"), 400, "malformed_sv"],
      ["sv 1.2", lines("v=1", "sv=1.2", "bat=3.9"), 400, "malformed_sv"],
      ["sv 1.2.3.4", lines("v=1", "sv=1.2.3.4", "bat=3.9"), 400, "malformed_sv"],
      ["sv x.y.z", lines("v=1", "sv=x.y.z", "bat=3.9"), 400, "malformed_sv"],
      ["sv of 200 characters", lines("v=1", `sv=1.2.${"3".repeat(196)}`, "bat=3.9"), 400, "malformed_sv"],
      ["a non-numeric bat", lines("v=1", "sv=1.3.0", "bat=full"), 400, "malformed_bat"],
      ["bat as a percentage", lines("v=1", "sv=1.3.0", "bat=87"), 400, "malformed_bat"],
      ["a missing bat", lines("v=1", "sv=1.3.0"), 400, "malformed_bat"],
      ["chg that is not 0 or 1", lines("v=1", "sv=1.3.0", "bat=3.9", "chg=yes"), 400, "malformed_chg"],
      ["a control character in a value", "v=1\nsv=1.3.0\nbat=3.9\nfw=a\u001b[2Jb\n", 400, "malformed_request"],
      ["a 10 MB body", huge, 413, "body_too_large"],
    ];
    it.each(cases)("%s", async (_name, body, status, code) => {
      const before = await deviceRow(h.devices.r2.id);
      const answer = await h.check(h.devices.r2.token, body);
      expect(answer.status).toBe(status);
      expect(answer.text.startsWith("V1\n")).toBe(true);
      expect(answer.text.endsWith("\n.\n")).toBe(true);
      expect(answer.get("X")?.split(" ")[0]).toBe(code);
      expect(answer.text).not.toMatch(/at .*\.ts|Error:/);
      expect(await deviceRow(h.devices.r2.id)).toEqual(before);
    });
  });

  describe("authentication", () => {
    it.each([
      ["no Authorization header", null],
      ["an unknown token", "dtk_test_notARealTokenAtAll0000000000000"],
      ["an API key", "API_KEY"],
    ])("%s gets 401 with an X unauthorized line", async (_name, token) => {
      const answer = await h.check(token === "API_KEY" ? h.keys.write : token!, lines("v=1", "sv=1.3.0", "bat=3.9"));
      expect(answer.status).toBe(401);
      expect(answer.headers.get("www-authenticate")).toMatch(/^Bearer/);
      expect(answer.get("X")).toMatch(/^unauthorized /);
    });
  });
});

// A check is answered before its record commits (services/ota-offer.ts): a fleet checking at
// once does not wait for each other's group commits. On PostgreSQL another connection can hold
// the badge's row locked, so the record waits while the answer goes out; SQLite's writes block
// the whole process, so there the record cannot be held back from outside.
describe.runIf(TEST_STORE === "postgres")("a check's record, written after its answer", () => {
  /** How long the lock stays at most: only a server that makes the answer or the read wait meets it. */
  const MAX_LOCK_MS = 10_000;

  it("answers while the badge's row is locked, and a device read sent after the answer shows the record", async () => {
    const device = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "badge-v2" });
    const locker = new pg.Client({ connectionString: h.databaseUrl });
    await locker.connect();
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await locker.query("commit");
    };
    try {
      await locker.query("begin");
      await locker.query("select 1 from devices where id = $1 for update", [device.id]);
      const fallback = setTimeout(() => void release(), MAX_LOCK_MS);
      try {
        const check = await fetch(`${h.url}/api/badge/ota/check`, {
          method: "POST",
          headers: { authorization: `Bearer ${device.token}`, "content-type": "text/plain" },
          body: lines("v=1", "sv=1.3.2", "bat=3.71", "chg=1"),
        });
        expect(await check.text()).toMatch(/^V1\n/);
        expect(released, "the check was answered only once its record could commit").toBe(false);

        // The read waits for the record: were it answered from the rows as they are, it would
        // come back while the lock holds, without the check's status.
        let readAnswered = false;
        const read = h.api(`/v1/devices/${device.id}`, h.keys.admin).finally(() => (readAnswered = true));
        await Promise.race([read, delay(1_000)]);
        expect(readAnswered, "the read was answered while the record could not commit").toBe(false);
        await release();
        const seen = await read;
        expect(seen.status).toBe(200);
        expect(seen.body).toMatchObject({ battery: { volts: 3.71, charging: true } });
        expect(seen.body.last_check_at).not.toBeNull();
      } finally {
        clearTimeout(fallback);
      }
    } finally {
      await release();
      await locker.end();
    }
  });
});
