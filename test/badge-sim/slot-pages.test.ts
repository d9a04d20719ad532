// The flash's copy-on-write slots (badge-sim/hardware/slot-pages.ts): badges of one thread share
// the pages they hold alike, and a page written differently stays the badge's own, never leaking
// into the shared pages or another badge; torn writes stay visible; what a slot reads back (and
// so its MD5) is exactly what was written into it.
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { buildAppImage, OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { Battery, PowerLostError } from "../../badge-sim/hardware/battery.ts";
import { loadBootImage } from "../../badge-sim/hardware/bootloader.ts";
import { Flash, SECTOR_BYTES } from "../../badge-sim/hardware/flash.ts";
import { PAGES_PER_SLOT } from "../../badge-sim/hardware/slot-pages.ts";
import { VirtualClock } from "../../badge-sim/hardware/virtual-clock.ts";

const md5 = (bytes: Uint8Array) => createHash("md5").update(bytes).digest("hex");

function badgeFlash(battery = new Battery({ volts: 4.0, charging: true })) {
  return new Flash({ clock: new VirtualClock(), battery });
}

/** Writes an image the way a download does: erase, then 4 KiB buffers in order. */
function download(flash: Flash, image: Uint8Array, totalBytes = image.length) {
  flash.eraseSlot("ota_1", image.length);
  for (let offset = 0; offset < image.length; offset += SECTOR_BYTES) {
    const chunk = image.subarray(offset, offset + SECTOR_BYTES);
    flash.writeSlot("ota_1", offset, chunk, { activity: "download.write", offset, length: chunk.length, total: totalBytes });
  }
}

/** The whole slot as it should read: the image, then erased flash. */
const slotOf = (image: Uint8Array) => {
  const slot = new Uint8Array(OTA_SLOT_BYTES).fill(0xff);
  slot.set(image);
  return slot;
};

// A full-size image (the whole 1,966,080-byte slot), built once: each test uses its own version
// so that the pages it shares are its own too.
const fullImage = (version: string) => buildAppImage({ version, size: OTA_SLOT_BYTES });

describe("copy-on-write flash slots", () => {
  it("badges that download the same full-size image share its pages and each reads it back whole (MD5 right)", () => {
    const image = fullImage("7.0.0");
    const badges = [badgeFlash(), badgeFlash(), badgeFlash()];
    for (const flash of badges) download(flash, image);
    for (const flash of badges) {
      expect(flash.ownPages("ota_1")).toBe(0);
      expect(md5(flash.slot("ota_1"))).toBe(md5(image));
      // otadata is blank and ota_0 empty, so the bootloader falls back to ota_1 and verifies it (SHA-256 included).
      expect(loadBootImage(flash)).toMatchObject({ slot: "ota_1", version: "7.0.0" });
    }
    expect(PAGES_PER_SLOT).toBe(480);
  });

  it("a page written differently is kept apart: the badge reads its own byte, every other badge the release's", () => {
    const image = fullImage("7.1.0");
    const first = badgeFlash();
    download(first, image);
    // within a page, in its first bytes (which the pool looks at before it compares a page) and its last
    const changed = [200_000, 10 * SECTOR_BYTES, 20 * SECTOR_BYTES + 1, 30 * SECTOR_BYTES - 1];
    const odd = image.slice();
    for (const at of changed) odd[at] = image[at]! ^ 0x5a;
    const second = badgeFlash();
    download(second, odd);
    const third = badgeFlash();
    download(third, image);

    expect(md5(second.slot("ota_1"))).toBe(md5(slotOf(odd)));
    expect(md5(first.slot("ota_1"))).toBe(md5(slotOf(image)));
    expect(md5(third.slot("ota_1"))).toBe(md5(slotOf(image)));
    for (const at of changed) expect(third.peekSlot("ota_1", at, 1)[0]).toBe(image[at]);
  });

  it("programming over a shared page (NOR: clearing bits) copies it first; erasing one badge's slot leaves the others", () => {
    const image = fullImage("7.2.0");
    const a = badgeFlash();
    const b = badgeFlash();
    download(a, image);
    download(b, image);
    b.writeSlot("ota_1", 10, Uint8Array.of(0x00));
    expect(b.peekSlot("ota_1", 10, 1)[0]).toBe(0x00);
    expect(b.ownPages("ota_1")).toBe(1);
    expect(a.peekSlot("ota_1", 10, 1)[0]).toBe(image[10]);

    b.eraseSlot("ota_1", OTA_SLOT_BYTES);
    expect(b.slot("ota_1").every((byte) => byte === 0xff)).toBe(true);
    expect(md5(a.slot("ota_1"))).toBe(md5(image));
    const c = badgeFlash();
    download(c, image);
    expect(md5(c.slot("ota_1"))).toBe(md5(image));
  });

  it("a download torn by a brownout shows exactly the bytes written before the power died, and no other badge sees them", () => {
    const image = fullImage("7.3.0");
    const battery = new Battery({ volts: 4.0, charging: true });
    const torn = badgeFlash(battery);
    const cutAt = 300_000 + 123;
    battery.brownoutAt({ atDownloadByte: cutAt });
    expect(() => download(torn, image)).toThrow(PowerLostError);
    const expected = new Uint8Array(OTA_SLOT_BYTES).fill(0xff);
    expected.set(image.subarray(0, cutAt));
    expect(md5(torn.slot("ota_1"))).toBe(md5(expected));
    expect(torn.ownPages("ota_1")).toBe(1);
    expect(torn.log.at(-1)).toMatchObject({ region: "ota_1", op: "write", offset: cutAt - (cutAt % SECTOR_BYTES), length: cutAt % SECTOR_BYTES });

    const whole = badgeFlash();
    download(whole, image);
    expect(md5(whole.slot("ota_1"))).toBe(md5(image));
    expect(whole.ownPages("ota_1")).toBe(0);
  });
});
