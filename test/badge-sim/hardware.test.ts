// The virtual hardware on its own: the simulated clock, the battery's brownout points, NOR
// flash with its running-slot protection and partial writes, otadata's two copies, NVS, and the
// bootloader's choice of image.
import { describe, expect, it } from "vitest";
import { buildAppImage } from "../../firmware/index.ts";
import { Battery, PowerLostError } from "../../badge-sim/hardware/battery.ts";
import { loadBootImage, NoBootableImageError } from "../../badge-sim/hardware/bootloader.ts";
import { Flash, PartitionConflictError } from "../../badge-sim/hardware/flash.ts";
import { Nvs } from "../../badge-sim/hardware/nvs.ts";
import { nextEntry, OTADATA_ENTRY_BYTES, selectedSlot, validSeq } from "../../badge-sim/hardware/otadata.ts";
import { Radio, RadioOffError } from "../../badge-sim/hardware/radio.ts";
import { VirtualClock } from "../../badge-sim/hardware/virtual-clock.ts";
import { BadgeStorage } from "../../badge-sim/model/badge-storage.ts";

function hardware(battery = new Battery({ volts: 4.0, charging: true })) {
  const clock = new VirtualClock();
  return { clock, battery, flash: new Flash({ clock, battery }) };
}

describe("VirtualClock", () => {
  it("fires timers in due order, reading each one's due time, including timers set by timers", () => {
    const clock = new VirtualClock();
    const fired: string[] = [];
    clock.setTimeout(() => fired.push(`b@${clock.now()}`), 200);
    clock.setTimeout(() => {
      fired.push(`a@${clock.now()}`);
      clock.setTimeout(() => fired.push(`c@${clock.now()}`), 50);
    }, 100);
    const cancelled = clock.setTimeout(() => fired.push("never"), 120);
    clock.clearTimeout(cancelled);
    clock.advance(1000);
    expect(fired).toEqual(["a@100", "c@150", "b@200"]);
    expect(clock.now()).toBe(1000);
  });

  it("runs timers that fall due while a timer moves time on, at their own time, and never goes back", () => {
    const clock = new VirtualClock();
    const seen: number[] = [];
    clock.setTimeout(() => clock.advance(500), 10);
    clock.setTimeout(() => seen.push(clock.now()), 20);
    clock.advance(30);
    expect(seen).toEqual([20]);
    expect(clock.now()).toBe(510);
  });

  it("knows the earliest timer as timers come and go: a cleared first one, one set earlier later, ties in the order set", () => {
    const clock = new VirtualClock();
    const fired: string[] = [];
    const first = clock.setTimeout(() => fired.push("first"), 100);
    clock.setTimeout(() => fired.push("tie 1"), 300);
    clock.setTimeout(() => fired.push("tie 2"), 300);
    expect(clock.nextDueAt()).toBe(100);
    clock.clearTimeout(first);
    expect(clock.nextDueAt()).toBe(300);
    clock.setTimeout(() => fired.push("earlier"), 200);
    expect(clock.nextDueAt()).toBe(200);
    clock.advance(250);
    clock.setTimeout(() => fired.push("tie 3"), 50);
    clock.advance(100);
    expect(fired).toEqual(["earlier", "tie 1", "tie 2", "tie 3"]);
    expect(clock.nextDueAt()).toBeUndefined();
  });

  it("runUntilIdle gives up on timers that never stop", () => {
    const clock = new VirtualClock();
    const again = () => clock.setTimeout(again, 1000);
    again();
    expect(() => clock.runUntilIdle(10_000)).toThrow(/timers are still set 10000 ms after/);
  });
});

describe("Battery", () => {
  it("refuses impossible options with a message naming them", () => {
    expect(() => new Battery({ volts: 7, charging: false })).toThrow(/battery\.volts 7/);
    expect(() => new Battery({ volts: 3.9, charging: true, externalPower: false })).toThrow(/charging needs external power/);
    expect(() => new Battery({ volts: 3.9, charging: false, drain: { perHour: 1 } as never })).toThrow(/battery\.drain\.perHour/);
    expect(() => new Battery({ volts: 3.9, charging: false }).brownoutAt({ atDownloadPercent: 100 })).toThrow(/atDownloadPercent 100/);
  });

  it("fires a download point once, at the exact byte of the write that crosses it", () => {
    const battery = new Battery({ volts: 4, charging: true });
    battery.brownoutAt({ atDownloadPercent: 50 });
    const write = (offset: number) => battery.powerFailsWithin({ activity: "download.write", offset, length: 4096, total: 100_000 });
    expect(write(45_056)).toBeNull();
    expect(write(49_152)).toBe(50_000 - 49_152);
    expect(write(49_152)).toBeNull();
  });

  it("drains only while not charging, and says so when the millivolts move", () => {
    const battery = new Battery({ volts: 3.9, charging: false, externalPower: true, drain: { perRequest: 0.01 } });
    const heard: number[] = [];
    battery.onEvent((event) => event.type === "reading" && heard.push(event.reading.volts));
    battery.drain("perRequest");
    battery.setCharging(true);
    battery.drain("perRequest");
    expect(heard.map((v) => v.toFixed(2))).toEqual(["3.89", "3.89"]);
  });
});

describe("Flash", () => {
  it("erases to 0xFF by sectors and programs like NOR: a write can only clear bits", () => {
    const { flash } = hardware();
    flash.writeSlot("ota_1", 0, Uint8Array.of(0xf0));
    flash.writeSlot("ota_1", 0, Uint8Array.of(0x3c));
    expect(flash.slot("ota_1")[0]).toBe(0x30);
    flash.eraseSlot("ota_1", 1);
    expect(flash.slot("ota_1")[0]).toBe(0xff);
    expect(flash.log.map((op) => `${op.op} ${op.region} ${op.length}`)).toEqual(["write ota_1 1", "write ota_1 1", "erase ota_1 4096"]);
  });

  it("refuses to erase or write the running slot", () => {
    const { flash } = hardware();
    flash.setRunningSlot("ota_0");
    expect(() => flash.eraseSlot("ota_0", 4096)).toThrow(PartitionConflictError);
    expect(() => flash.writeSlot("ota_0", 0, Uint8Array.of(0))).toThrow(PartitionConflictError);
    expect(flash.log).toEqual([]);
  });

  it("keeps the part of a write done before the power died, and does nothing more without power", () => {
    const { flash, battery } = hardware();
    battery.brownoutAt({ atDownloadByte: 10 });
    const data = new Uint8Array(16);
    expect(() => flash.writeSlot("ota_1", 0, data, { activity: "download.write", offset: 0, length: 16, total: 16 })).toThrow(PowerLostError);
    expect([...flash.slot("ota_1").subarray(0, 12)]).toEqual([...new Uint8Array(10), 0xff, 0xff]);
    expect(battery.isPowered).toBe(false);
    expect(() => flash.writeSlot("ota_1", 0, data)).toThrow(PowerLostError);
    expect(flash.log.at(-1)).toMatchObject({ region: "ota_1", op: "write", length: 10 });
  });
});

describe("otadata", () => {
  it("boots ota_0 when blank, then the slot of the valid copy with the higher sequence", () => {
    const otadata = new Uint8Array(2 * OTADATA_ENTRY_BYTES).fill(0xff);
    expect(selectedSlot(otadata)).toBeNull();
    const first = nextEntry(otadata, "ota_1");
    expect(first.copy).toBe(0);
    otadata.set(first.entry, first.copy * OTADATA_ENTRY_BYTES);
    expect(selectedSlot(otadata)).toBe("ota_1");
    const second = nextEntry(otadata, "ota_0");
    expect(second.copy).toBe(1);
    otadata.set(second.entry, second.copy * OTADATA_ENTRY_BYTES);
    expect([validSeq(otadata, 0), validSeq(otadata, 1)]).toEqual([2, 3]);
    expect(selectedSlot(otadata)).toBe("ota_0");
  });

  it("ignores a torn copy, so a switch cut half way leaves the old choice", () => {
    const otadata = new Uint8Array(2 * OTADATA_ENTRY_BYTES).fill(0xff);
    otadata.set(nextEntry(otadata, "ota_1").entry, 0);
    const { copy, entry } = nextEntry(otadata, "ota_0");
    otadata.set(entry.subarray(0, 16), copy * OTADATA_ENTRY_BYTES);
    expect(validSeq(otadata, copy)).toBeNull();
    expect(selectedSlot(otadata)).toBe("ota_1");
  });
});

describe("NVS", () => {
  it("keeps its keys in flash, so a new reader (the next boot) sees them", () => {
    const { flash } = hardware();
    new Nvs(flash).set("ota.report", "ok|1.5.0");
    const afterReboot = new Nvs(flash);
    expect(afterReboot.get("ota.report")).toBe("ok|1.5.0");
    afterReboot.delete("ota.report");
    expect(new Nvs(flash).entries()).toEqual(new Map());
    expect(() => afterReboot.set("a-key-of-16-char", "x")).toThrow(/1 to 15 characters/);
  });

  it("gives back any value as it was set after a reboot, each entry changed alone, and refuses a key holding a NUL without changing anything", () => {
    const { flash } = hardware();
    const nvs = new Nvs(flash);
    const values = { json: JSON.stringify({ md5: "a\"b", bytes: 65536 }), nul: "before\0after\0", lines: "one\ntwo|three", accents: "Mise à jour ✓" };
    for (const [key, value] of Object.entries(values)) nvs.set(key, value);
    nvs.set("json", `${values.json} `);
    const commits = flash.nvsCommits;
    expect(() => nvs.set("bad\0key", "x")).toThrow(/none of them NUL/);
    expect(flash.nvsCommits).toBe(commits);
    expect(new Nvs(flash).entries()).toEqual(new Map(Object.entries({ ...values, json: `${values.json} ` })));
    // a commit writes out the entry it changes, its key, NUL and value in UTF-8; a delete, none
    nvs.delete("lines");
    expect(flash.writesTo("nvs").at(-1)!.length).toBe(0);
    nvs.set("accents", "Mise à jour ✓✓");
    expect(flash.writesTo("nvs").at(-1)!.length).toBe(Buffer.byteLength("accents\0Mise à jour ✓✓"));
    expect(new Nvs(flash).entries().has("lines")).toBe(false);
  });

  it("a download's checkpoint commits the install record and then the resume point, as saveInstall and saveResumePoint write them", () => {
    const record = { version: "1.5.0", display: "1.5.0 \"spring\" ✓", stage: "download" as const, total: 1_966_080 };
    const point = { version: "1.5.0", size: 1_966_080, md5: "fbedb4c1ef6f0e6d036d614ab8b5239c" };
    /** the NVS region as each commit left it */
    const regions = (flash: Flash) => {
      const seen: string[][] = [];
      flash.onOperation((operation) => {
        if (operation.region === "nvs") seen.push([...flash.nvs]);
      });
      return seen;
    };
    const { flash } = hardware();
    const written = new BadgeStorage(new Nvs(flash));
    const writtenRegions = regions(flash);
    const checkpoint = written.checkpointWriter(record, point);
    const savedFlash = hardware().flash;
    const saved = new BadgeStorage(new Nvs(savedFlash));
    const savedRegions = regions(savedFlash);
    for (const bytes of [65_536, 131_072]) {
      checkpoint(bytes, `state+/${bytes}==`);
      // in the order of the record the download keeps (InstallRecord's)
      saved.saveInstall({ version: record.version, display: record.display, stage: record.stage, bytes, total: record.total });
      saved.saveResumePoint({ ...point, bytes, md5State: `state+/${bytes}==` });
      expect(written.install()).toEqual({ ...record, bytes });
    }
    expect(writtenRegions).toHaveLength(4);
    expect(writtenRegions).toEqual(savedRegions);
  });
});

describe("the bootloader", () => {
  it("falls back to the other slot when the selected image does not verify, and gives up when neither does", () => {
    const { flash } = hardware();
    flash.flashOverUsb("ota_0", buildAppImage({ version: "1.4.0" }));
    const half = buildAppImage({ version: "1.5.0" }).subarray(0, 30_000);
    flash.writeSlot("ota_1", 0, half);
    const { copy, entry } = nextEntry(flash.otadata, "ota_1");
    flash.writeOtadataCopy(copy, entry);
    const boot = loadBootImage(flash);
    expect(boot).toMatchObject({ slot: "ota_0", version: "1.4.0", rejected: { slot: "ota_1" } });
    expect(boot.rejected!.problem).toMatch(/truncated|mismatch/);
    flash.eraseSlot("ota_0", 4096);
    expect(() => loadBootImage(flash)).toThrow(NoBootableImageError);
  });
});

describe("the radio", () => {
  it("is up only on external power and charges the link's time to the simulated clock", () => {
    const battery = new Battery({ volts: 4.0, charging: false });
    const clock = new VirtualClock();
    const radio = new Radio({ clock, battery, link: { bytesPerSecond: 1000, requestMs: 100 } });
    expect(() => radio.request("check")).toThrow(RadioOffError);
    battery.plugIn();
    radio.request("check");
    radio.receive(500);
    expect(clock.now()).toBe(600);
  });
});
