// The otadata partition, kept simple but laid out like ESP-IDF's: two copies of one
// esp_ota_select_entry_t (32 bytes: ota_seq, seq_label[20], ota_state, crc), each in its own
// erase unit. The bootloader boots slot (seq - 1) % 2 of the valid copy with the higher
// sequence; a copy is valid when its seq is not 0xFFFFFFFF (erased) and its CRC matches. A
// switch writes the NEW entry into the OTHER copy, so the copy in use is never touched: if the
// power dies after the erase or half way through the write, that copy is invalid and the old
// one still boots. That is the whole atomicity argument (no rollback states are modelled:
// rollback is not enabled on the badge, SPEC 3.4 item 6).
import { crc32 } from "node:zlib";

export type SlotName = "ota_0" | "ota_1";
export const SLOTS: readonly SlotName[] = ["ota_0", "ota_1"];

export const OTADATA_ENTRY_BYTES = 32;
export const OTADATA_COPIES = 2;
const ERASED_SEQ = 0xffffffff;
const STATE_OFFSET = 24;
const CRC_OFFSET = 28;

export function otherSlot(slot: SlotName): SlotName {
  return slot === "ota_0" ? "ota_1" : "ota_0";
}

/** The CRC covers the 4 sequence bytes, as ESP-IDF's does. */
function crcOfSeq(seq: number): number {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, seq, true);
  return crc32(bytes);
}

export function encodeEntry(seq: number): Uint8Array {
  const entry = new Uint8Array(OTADATA_ENTRY_BYTES).fill(0xff);
  const view = new DataView(entry.buffer);
  view.setUint32(0, seq, true);
  view.setUint32(STATE_OFFSET, ERASED_SEQ, true); // ESP_OTA_IMG_UNDEFINED: no rollback
  view.setUint32(CRC_OFFSET, crcOfSeq(seq), true);
  return entry;
}

/** The sequence of one copy, or null when the copy is erased or torn. */
export function validSeq(otadata: Uint8Array, copy: number): number | null {
  const view = new DataView(otadata.buffer, otadata.byteOffset + copy * OTADATA_ENTRY_BYTES, OTADATA_ENTRY_BYTES);
  const seq = view.getUint32(0, true);
  if (seq === ERASED_SEQ || view.getUint32(CRC_OFFSET, true) !== crcOfSeq(seq)) return null;
  return seq;
}

/** The copy the bootloader believes: the valid one with the higher sequence. */
function activeCopy(otadata: Uint8Array): { copy: number; seq: number } | null {
  let best: { copy: number; seq: number } | null = null;
  for (let copy = 0; copy < OTADATA_COPIES; copy++) {
    const seq = validSeq(otadata, copy);
    if (seq !== null && (best === null || seq > best.seq)) best = { copy, seq };
  }
  return best;
}

/** The slot otadata selects, or null when neither copy is valid (then ota_0 boots). */
export function selectedSlot(otadata: Uint8Array): SlotName | null {
  const active = activeCopy(otadata);
  return active === null ? null : SLOTS[(active.seq - 1) % SLOTS.length]!;
}

/** Where and what to write so that `target` boots next: the other copy, the next fitting sequence. */
export function nextEntry(otadata: Uint8Array, target: SlotName): { copy: number; entry: Uint8Array } {
  const active = activeCopy(otadata);
  const index = SLOTS.indexOf(target);
  let seq = active === null ? index + 1 : active.seq + 1;
  while ((seq - 1) % SLOTS.length !== index) seq++;
  return { copy: active === null ? 0 : (active.copy + 1) % OTADATA_COPIES, entry: encodeEntry(seq) };
}
