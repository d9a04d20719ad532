// The download's MD5 (badge-sim/hardware/slot-md5.ts): a step over a shared slot page is taken
// from memory the second time, and every state it saves and every digest it gives must be the
// bytes hash-wasm gives hashing the same bytes from scratch, whether the path was remembered,
// left for a page of the badge's own, or resumed from a checkpoint's saved state.
import { createMD5 } from "hash-wasm";
import { describe, expect, it } from "vitest";
import { buildAppImage } from "../../firmware/index.ts";
import { Battery } from "../../badge-sim/hardware/battery.ts";
import { Flash, SECTOR_BYTES } from "../../badge-sim/hardware/flash.ts";
import { SlotMd5 } from "../../badge-sim/hardware/slot-md5.ts";
import { VirtualClock } from "../../badge-sim/hardware/virtual-clock.ts";

const IMAGE_BYTES = 64 * SECTOR_BYTES + 100;

/** A download into a fresh badge's ota_1, 4 KiB at a time, hashed as it goes: the states after each buffer (as bytes and as a checkpoint's base64), and the digest. */
async function downloadHashed(image: Uint8Array, resume?: { at: number; state: Uint8Array }) {
  const flash = new Flash({ clock: new VirtualClock(), battery: new Battery({ volts: 4.0, charging: true }) });
  const md5 = await SlotMd5.create();
  flash.eraseSlot("ota_1", image.length);
  if (resume) md5.load(resume.state);
  else md5.init();
  const states: Uint8Array[] = [];
  const base64: string[] = [];
  for (let offset = resume?.at ?? 0; offset < image.length; offset += SECTOR_BYTES) {
    const buffer = image.subarray(offset, offset + SECTOR_BYTES);
    md5.update(buffer, flash.writeSlot("ota_1", offset, buffer));
    states.push(md5.save());
    base64.push(md5.saveBase64());
  }
  return { states, base64, digest: md5.digest() };
}

/** The same from scratch with hash-wasm alone. */
async function hashedFromScratch(image: Uint8Array, from = 0) {
  const md5 = await createMD5();
  md5.init();
  md5.update(image.subarray(0, from));
  const states: Uint8Array[] = [];
  for (let offset = from; offset < image.length; offset += SECTOR_BYTES) {
    md5.update(image.subarray(offset, offset + SECTOR_BYTES));
    states.push(md5.save());
  }
  return { states, base64: states.map((state) => Buffer.from(state).toString("base64")), digest: md5.digest("hex") };
}

describe("the download's MD5 over slot pages", () => {
  it("gives hash-wasm's own states and digest the first time and when every step is remembered", async () => {
    const image = buildAppImage({ version: "7.1.0", size: IMAGE_BYTES });
    const expected = await hashedFromScratch(image);
    const first = await downloadHashed(image);
    const again = await downloadHashed(image);
    expect(first).toEqual(expected);
    expect(again).toEqual(expected);
  });

  it("hashes on correctly past a page of the badge's own, and from a checkpoint's saved state", async () => {
    const image = buildAppImage({ version: "7.2.0", size: IMAGE_BYTES });
    await downloadHashed(image); // the pages become shared, their steps remembered
    const tampered = image.slice();
    tampered[20 * SECTOR_BYTES + 7]! ^= 0x40;
    expect(await downloadHashed(tampered)).toEqual(await hashedFromScratch(tampered));
    const checkpoint = 16 * SECTOR_BYTES;
    const saved = (await hashedFromScratch(image)).states[15]!;
    expect(await downloadHashed(image, { at: checkpoint, state: saved })).toEqual(await hashedFromScratch(image, checkpoint));
  });

  it("does not take a remembered step for bytes that only share the page's offset", async () => {
    const a = buildAppImage({ version: "7.3.0", size: IMAGE_BYTES });
    const b = buildAppImage({ version: "7.3.1", size: IMAGE_BYTES });
    await downloadHashed(a);
    expect(await downloadHashed(b)).toEqual(await hashedFromScratch(b));
    expect(await downloadHashed(a)).toEqual(await hashedFromScratch(a));
  });

  it("keeps two downloads hashed at once apart (one hasher serves both, each loads its own state)", async () => {
    const image = buildAppImage({ version: "7.4.0", size: IMAGE_BYTES });
    const tampered = image.slice();
    tampered[3 * SECTOR_BYTES + 1]! ^= 0x01;
    const flashes = [image, tampered].map(() => new Flash({ clock: new VirtualClock(), battery: new Battery({ volts: 4.0, charging: true }) }));
    const hashes = [await SlotMd5.create(), await SlotMd5.create()];
    const checkpoint = 8 * SECTOR_BYTES;
    hashes[0]!.init();
    hashes[1]!.load((await hashedFromScratch(tampered)).states[7]!);
    flashes.forEach((flash) => flash.eraseSlot("ota_1", image.length));
    for (let offset = 0; offset < image.length; offset += SECTOR_BYTES) {
      const first = image.subarray(offset, offset + SECTOR_BYTES);
      hashes[0]!.update(first, flashes[0]!.writeSlot("ota_1", offset, first));
      if (offset < checkpoint) continue;
      const second = tampered.subarray(offset, offset + SECTOR_BYTES);
      hashes[1]!.update(second, flashes[1]!.writeSlot("ota_1", offset, second));
    }
    expect(hashes[0]!.digest()).toBe((await hashedFromScratch(image)).digest);
    expect(hashes[1]!.digest()).toBe((await hashedFromScratch(tampered)).digest);
  });
});
