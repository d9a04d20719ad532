// The second-stage bootloader's choice: the slot otadata selects (ota_0 when otadata is blank),
// verified like ESP-IDF verifies an app image (header, segments, checksum, appended SHA-256);
// when that image does not verify, the other slot is tried, as the ESP-IDF bootloader falls
// back. The image's own app descriptor says which version runs.
//
// A slot made of the same shared pages as one verified before (SlotPages.fingerprint: the same
// bytes, compared when they were written) gets that verdict again, with the read's simulated
// time charged as before: the SHA-256 and checksum of a 1.9 MB image were most of a simulated
// update's wall time, and a fleet boots the same release thousands of times.
import { containsBytes, CRASH_ON_BOOT_MARKER, inspectAppImage, IMAGE_HEADER_BYTES, IMAGE_MAGIC, MAX_SEGMENTS, OTA_SLOT_BYTES, SEGMENT_HEADER_BYTES, trustedKeysIn } from "../../firmware/index.ts";
import type { Flash } from "./flash.ts";
import { otherSlot, selectedSlot, type SlotName } from "./otadata.ts";

const HASH_FLAG_OFFSET = 0x17;
const DIGEST_BYTES = 32;

export interface BootImage {
  slot: SlotName;
  version: string;
  /** the image holds CRASH_ON_BOOT_MARKER: a test build that crashes as it starts */
  crashesOnBoot: boolean;
  /** the release keys the image trusts (firmware/signature.ts): the badge verifies signed releases with them */
  trustedKeys: Uint8Array[];
  /** the slot otadata selected, when its image did not verify and the other slot booted instead */
  rejected: { slot: SlotName; problem: string } | null;
}

/** Thrown when neither slot holds an image that verifies: the chip cannot start. */
export class NoBootableImageError extends Error {
  override name = "NoBootableImageError";
}

export function loadBootImage(flash: Flash): BootImage {
  const selected = selectedSlot(flash.otadata) ?? "ota_0";
  const first = verifySlot(flash, selected);
  if (first.ok) return { slot: selected, version: first.version, crashesOnBoot: first.crashesOnBoot, trustedKeys: first.trustedKeys, rejected: null };
  const fallback = otherSlot(selected);
  const second = verifySlot(flash, fallback);
  if (second.ok) return { slot: fallback, version: second.version, crashesOnBoot: second.crashesOnBoot, trustedKeys: second.trustedKeys, rejected: { slot: selected, problem: first.problem } };
  throw new NoBootableImageError(`no bootable image: ${selected}: ${first.problem}; ${fallback}: ${second.problem}`);
}

type Verification = { ok: true; version: string; crashesOnBoot: boolean; trustedKeys: Uint8Array[] } | { ok: false; problem: string };

/** Verdicts by slot fingerprint; the oldest goes first once there are this many. */
const VERDICTS_KEPT = 64;
const verdicts = new Map<string, Verification>();
const CRASH_MARKER = new TextEncoder().encode(CRASH_ON_BOOT_MARKER);

function verifySlot(flash: Flash, slot: SlotName): Verification {
  const length = imageLength((offset, count) => flash.peekSlot(slot, offset, count));
  if (typeof length === "string") return { ok: false, problem: length };
  const fingerprint = flash.slotFingerprint(slot, length);
  const known = fingerprint === null ? undefined : verdicts.get(fingerprint);
  if (known) {
    flash.timeSlotRead(slot, length);
    return known;
  }
  const verdict = inspect(flash.readSlot(slot, 0, length));
  if (fingerprint !== null) {
    if (verdicts.size >= VERDICTS_KEPT) verdicts.delete(verdicts.keys().next().value!);
    verdicts.set(fingerprint, verdict);
  }
  return verdict;
}

function inspect(image: Uint8Array): Verification {
  const inspection = inspectAppImage(image);
  if (inspection.problems.length > 0) return { ok: false, problem: inspection.problems.join("; ") };
  if (!inspection.appDesc) return { ok: false, problem: "no app descriptor" };
  return { ok: true, version: inspection.appDesc.version, crashesOnBoot: containsBytes(image, CRASH_MARKER), trustedKeys: trustedKeysIn(image) };
}

/** Where the image in a slot ends, read from its header and segment headers, or why it cannot be read. */
function imageLength(peek: (offset: number, length: number) => Uint8Array): number | string {
  const header = peek(0, IMAGE_HEADER_BYTES);
  if (header[0] !== IMAGE_MAGIC) return `first byte is 0x${header[0]!.toString(16)}, not an app image`;
  const segments = header[1]!;
  if (segments === 0 || segments > MAX_SEGMENTS) return `${segments} segments`;
  let end = IMAGE_HEADER_BYTES;
  for (let i = 0; i < segments; i++) {
    if (end + SEGMENT_HEADER_BYTES > OTA_SLOT_BYTES) return "segment headers run past the slot";
    const segmentHeader = peek(end, SEGMENT_HEADER_BYTES);
    end += SEGMENT_HEADER_BYTES + new DataView(segmentHeader.buffer).getUint32(4, true);
  }
  const checksumAt = end + 15 - (end % 16);
  const length = checksumAt + 1 + (header[HASH_FLAG_OFFSET] === 1 ? DIGEST_BYTES : 0);
  return length > OTA_SLOT_BYTES ? "segments run past the slot" : length;
}
