// The fault sweep's case generator (fast-check), shared by the property test
// (test/badge-sim/fault-sweep.test.ts) and the sweep benchmark (scripts/bench/bench-sim-sweep.ts).
// Each caller gives every case a fresh device; for a crash-on-boot case it also publishes a
// release that crashes, offered to that device alone (a canary), so the other cases keep the
// fleet's release.
import fc from "fast-check";
import { MIN_INSTALL_VOLTS } from "../../firmware/index.ts";
import { CHECKPOINT_BYTES } from "../model/badge-storage.ts";
import { DOWNLOAD_BUFFER_BYTES } from "../virtual-badge/badge-effects.ts";
import type { SweepCase, SweepFault } from "./fault-sweep.ts";

/**
 * Byte offsets inside an image of `size` bytes: anywhere, or on the edges that matter (the
 * first byte, either side of a 4 KiB download buffer and of a progress checkpoint, the last byte).
 */
export function imageOffset(size: number): fc.Arbitrary<number> {
  const edges = [0, 1, DOWNLOAD_BUFFER_BYTES - 1, DOWNLOAD_BUFFER_BYTES, DOWNLOAD_BUFFER_BYTES + 1, CHECKPOINT_BYTES - 1, CHECKPOINT_BYTES, size - DOWNLOAD_BUFFER_BYTES, size - 1];
  return fc.oneof(
    { arbitrary: fc.integer({ min: 0, max: size - 1 }), weight: 3 },
    { arbitrary: fc.constantFrom(...edges.filter((n) => n >= 0 && n < size)), weight: 1 },
  );
}

export function sweepFault(size: number): fc.Arbitrary<SweepFault> {
  const offset = imageOffset(size);
  return fc.oneof(
    fc.constant({ kind: "none" as const }),
    fc.record({ kind: fc.constant("brownout-download" as const), atByte: offset }),
    fc.record({ kind: fc.constant("brownout-switch" as const), step: fc.constantFrom("after-erase" as const, "mid-write" as const, "before-restart" as const) }),
    fc.record({ kind: fc.constant("drop" as const), atByte: offset }),
    fc.record({ kind: fc.constant("corrupt" as const), atByte: offset }),
    fc.record({ kind: fc.constant("stall" as const), atByte: offset }),
    fc.record({ kind: fc.constant("http-5xx" as const), status: fc.constantFrom(500, 502, 503, 504) }),
    fc.constant({ kind: "crash-on-boot" as const }),
  );
}

const GATE_MV = Math.round(MIN_INSTALL_VOLTS * 1000);

/** Whole millivolts, often within a few of the install gate (3.85 V). */
const volts = fc
  .oneof(
    { arbitrary: fc.integer({ min: 3300, max: 4200 }), weight: 2 },
    { arbitrary: fc.integer({ min: GATE_MV - 4, max: GATE_MV + 6 }), weight: 1 },
  )
  .map((mV) => mV / 1000);

/** Battery only (no radio), USB with the charger paused, or charging; mostly on USB, where updates happen. */
const power = fc.oneof(
  { arbitrary: fc.constant({ externalPower: false, charging: false }), weight: 1 },
  { arbitrary: fc.constant({ externalPower: true, charging: false }), weight: 2 },
  { arbitrary: fc.constant({ externalPower: true, charging: true }), weight: 3 },
);

/** Fault kind x byte offset x battery volts x charging / external power, for an image of `size` bytes. */
export function sweepCase(size: number): fc.Arbitrary<SweepCase> {
  return fc.record({ fault: sweepFault(size), volts, power }).map(({ fault, volts, power }) => ({ fault, volts, ...power }));
}
