// ESP32 application images (the .bin that goes into an OTA slot), as described in
// /work/shared/notes/esp32-app-image.md: reading one for the publish checks and the simulated
// badge, and building small valid ones for tests. Little-endian throughout.
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { hasControlCharacter } from "./line-codec.ts";
import { MAX_TRUSTED_KEYS, PUBLIC_KEY_BYTES, trustedKeyStrings } from "./signature.ts";

export const IMAGE_MAGIC = 0xe9;
export const APP_DESC_MAGIC = 0xabcd5432;
/** An image whose segment data holds this text crashes on boot in the simulated badge. */
export const CRASH_ON_BOOT_MARKER = "BADGEBENCH:CRASH_ON_BOOT";

export const IMAGE_HEADER_BYTES = 24;
export const SEGMENT_HEADER_BYTES = 8;
/** The bootloader refuses an image header with more segments than this. */
export const MAX_SEGMENTS = 16;
export const APP_DESC_BYTES = 256;
const CHECKSUM_SEED = 0xef;
const DIGEST_BYTES = 32;
const HASH_FLAG_OFFSET = 0x17;

// esp_app_desc_t, relative to the start of the first segment's data (file offset 0x20).
const DESC_SECURE_VERSION = 0x04;
const DESC_VERSION = 0x10;
const DESC_PROJECT_NAME = 0x30;
const DESC_TIME = 0x50;
const DESC_DATE = 0x60;
const DESC_IDF_VERSION = 0x70;
const DESC_ELF_SHA256 = 0x90;

export interface AppDescriptor {
  magic: number;
  secureVersion: number;
  version: string;
  projectName: string;
  time: string;
  date: string;
  idfVersion: string;
}

export interface ImageSegment {
  loadAddress: number;
  /** File offset of the segment's data (after its 8-byte header). */
  offset: number;
  length: number;
}

export interface ImageInspection {
  size: number;
  magic: number;
  segmentCount: number;
  chipId: number;
  entryAddress: number;
  hashAppended: boolean;
  segments: ImageSegment[];
  /** null when the image ends before its checksum byte. */
  checksum: { stored: number; computed: number } | null;
  /** null when no digest is appended or the image ends before it. */
  sha256: { stored: string; computed: string } | null;
  /** null unless the first segment starts with a descriptor carrying the right magic. */
  appDesc: AppDescriptor | null;
  /** Empty for a valid image; otherwise one sentence per problem found. */
  problems: string[];
}

const hex2 = (value: number) => `0x${value.toString(16).toUpperCase().padStart(2, "0")}`;
const hex8 = (value: number) => `0x${value.toString(16).toUpperCase().padStart(8, "0")}`;

/** A Buffer over the same memory (no copy), for its native indexOf. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function readCString(bytes: Uint8Array, start: number, capacity: number): string {
  const field = bytes.subarray(start, start + capacity);
  const nul = field.indexOf(0);
  return new TextDecoder().decode(nul === -1 ? field : field.subarray(0, nul));
}

/** 0xEF xor every byte of segment data. */
function segmentChecksum(bytes: Uint8Array, segments: ImageSegment[]): number {
  let checksum = CHECKSUM_SEED;
  for (const segment of segments) {
    const end = segment.offset + segment.length;
    for (let i = segment.offset; i < end; i++) checksum ^= bytes[i]!;
  }
  return checksum;
}

/** Where the checksum byte goes: after zero padding that leaves the length one short of a multiple of 16. */
function checksumOffsetAfter(segmentsEnd: number): number {
  return segmentsEnd + 15 - (segmentsEnd % 16);
}

function readAppDescriptor(bytes: Uint8Array, view: DataView, first: ImageSegment, problems: string[]): AppDescriptor | null {
  if (first.length < APP_DESC_BYTES) {
    problems.push(`first segment is ${first.length} bytes, too short for the ${APP_DESC_BYTES}-byte app descriptor`);
    return null;
  }
  const start = first.offset;
  const magic = view.getUint32(start, true);
  if (magic !== APP_DESC_MAGIC) {
    problems.push(`app descriptor magic is ${hex8(magic)} not ${hex8(APP_DESC_MAGIC)} (no esp_app_desc_t at offset ${start})`);
    return null;
  }
  return {
    magic,
    secureVersion: view.getUint32(start + DESC_SECURE_VERSION, true),
    version: readCString(bytes, start + DESC_VERSION, 32),
    projectName: readCString(bytes, start + DESC_PROJECT_NAME, 32),
    time: readCString(bytes, start + DESC_TIME, 16),
    date: readCString(bytes, start + DESC_DATE, 16),
    idfVersion: readCString(bytes, start + DESC_IDF_VERSION, 32),
  };
}

/** Reads an image and lists what is wrong with it. Never throws, whatever the bytes. */
export function inspectAppImage(bytes: Uint8Array): ImageInspection {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = bytes.length;
  const problems: string[] = [];
  const inspection: ImageInspection = {
    size,
    magic: bytes[0] ?? 0,
    segmentCount: 0,
    chipId: 0,
    entryAddress: 0,
    hashAppended: false,
    segments: [],
    checksum: null,
    sha256: null,
    appDesc: null,
    problems,
  };
  if (size === 0) {
    problems.push("image is empty (0 bytes)");
    return inspection;
  }
  if (inspection.magic !== IMAGE_MAGIC) problems.push(`first byte is ${hex2(inspection.magic)} not ${hex2(IMAGE_MAGIC)}`);
  if (size < IMAGE_HEADER_BYTES) {
    problems.push(`image is ${size} bytes, shorter than the ${IMAGE_HEADER_BYTES}-byte header (truncated)`);
    return inspection;
  }

  inspection.segmentCount = bytes[1]!;
  inspection.entryAddress = view.getUint32(4, true);
  inspection.chipId = view.getUint16(0x0c, true);
  const hashFlag = bytes[HASH_FLAG_OFFSET]!;
  inspection.hashAppended = hashFlag === 1;
  if (hashFlag > 1) problems.push(`hash flag at offset 0x17 is ${hex2(hashFlag)}, expected 0 or 1`);
  if (inspection.segmentCount > MAX_SEGMENTS) {
    problems.push(`too many segments: the header says ${inspection.segmentCount}, at most ${MAX_SEGMENTS} are allowed`);
    return inspection;
  }

  let offset = IMAGE_HEADER_BYTES;
  let complete = true;
  for (let index = 0; index < inspection.segmentCount; index++) {
    if (offset + SEGMENT_HEADER_BYTES > size) {
      problems.push(`segment ${index} header at offset ${offset} runs past the end of the ${size}-byte file (truncated)`);
      complete = false;
      break;
    }
    const segment = { loadAddress: view.getUint32(offset, true), offset: offset + SEGMENT_HEADER_BYTES, length: view.getUint32(offset + 4, true) };
    if (segment.offset + segment.length > size) {
      problems.push(
        `segment ${index} (${segment.length} bytes at offset ${segment.offset}) runs past the end of the ${size}-byte file (truncated)`,
      );
      complete = false;
      break;
    }
    inspection.segments.push(segment);
    offset = segment.offset + segment.length;
  }

  const first = inspection.segments[0];
  if (first) inspection.appDesc = readAppDescriptor(bytes, view, first, problems);
  else if (inspection.segmentCount === 0) problems.push("no app descriptor: the image has no segments");
  if (!complete) return inspection;

  const checksumOffset = checksumOffsetAfter(offset);
  if (checksumOffset >= size) {
    problems.push(`checksum byte at offset ${checksumOffset} is missing: the file ends at ${size} (truncated)`);
    return inspection;
  }
  inspection.checksum = { stored: bytes[checksumOffset]!, computed: segmentChecksum(bytes, inspection.segments) };
  if (inspection.checksum.stored !== inspection.checksum.computed) {
    problems.push(`checksum mismatch: stored ${hex2(inspection.checksum.stored)}, segment data gives ${hex2(inspection.checksum.computed)}`);
  }

  let imageEnd = checksumOffset + 1;
  if (inspection.hashAppended) {
    if (imageEnd + DIGEST_BYTES > size) {
      problems.push(`SHA-256 digest (${DIGEST_BYTES} bytes at offset ${imageEnd}) is missing: the file ends at ${size} (truncated)`);
      return inspection;
    }
    inspection.sha256 = {
      stored: Buffer.from(bytes.subarray(imageEnd, imageEnd + DIGEST_BYTES)).toString("hex"),
      computed: sha256Hex(bytes.subarray(0, imageEnd)),
    };
    if (inspection.sha256.stored !== inspection.sha256.computed) {
      problems.push(`SHA-256 mismatch: stored ${inspection.sha256.stored}, bytes 0..${checksumOffset} give ${inspection.sha256.computed}`);
    }
    imageEnd += DIGEST_BYTES;
  }
  if (size > imageEnd) problems.push(`${size - imageEnd} trailing bytes after the image, which ends at offset ${imageEnd}`);
  return inspection;
}

const isVersionTokenByte = (byte: number | undefined) => byte !== undefined && (byte === 0x2e || (byte >= 0x30 && byte <= 0x39));

/**
 * True when `version` occurs as ASCII with no digit or '.' right before or after it, so 1.2.3
 * is not found inside 11.2.34 or 1.2.3.4, but is found in "v1.2.3", "1.2.3\0" or "1.2.3-rc1".
 */
export function findVersionString(bytes: Uint8Array, version: string): boolean {
  if (version === "") return false;
  const haystack = asBuffer(bytes);
  const needle = Buffer.from(version, "utf8");
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1)) {
    if (!isVersionTokenByte(haystack[at - 1]) && !isVersionTokenByte(haystack[at + needle.length])) return true;
  }
  return false;
}

/** An empty needle is never "contained": a check for an unset password must not pass by accident. */
export function containsBytes(haystack: Uint8Array, needle: Uint8Array): boolean {
  return needle.length > 0 && asBuffer(haystack).indexOf(asBuffer(needle)) !== -1;
}

export function md5Hex(bytes: Uint8Array): string {
  return createHash("md5").update(bytes).digest("hex");
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

// ---------------------------------------------------------------------------------------------
// Building test images

export interface BuildImageOptions {
  version: string;
  /**
   * Total file size in bytes (default 64 KiB). A valid image is always a multiple of 16 bytes
   * long, so other sizes are rounded down to one.
   */
  size?: number;
  /** Default "badge". */
  projectName?: string;
  /** Embedded as ASCII in a fake Wi-Fi config string (`WIFI_PASS=...`), as a careless build would. */
  wifiPassword?: string;
  /** Embeds CRASH_ON_BOOT_MARKER. */
  crashOnBoot?: boolean;
  /** Seed of the filler bytes; default derived from the version, so a build is reproducible. */
  seed?: number;
  /** Default 0 (ESP32). */
  chipId?: number;
  /** Append the SHA-256 digest (default true), as ESP-IDF and Arduino builds do. */
  hashAppended?: boolean;
  /** Raw Ed25519 public keys the firmware trusts for signed releases (signature.ts), at most MAX_TRUSTED_KEYS. */
  trustedKeys?: Uint8Array[];
}

/** A bad BuildImageOptions field; the message names it. */
export class ImageOptionsError extends TypeError {
  override name = "ImageOptionsError";
}

export const DEFAULT_IMAGE_BYTES = 64 * 1024;
/** The largest ESP32 flash; a bigger request is a typo, not a test case. */
export const MAX_IMAGE_BYTES = 16 * 1024 * 1024;

const DROM_LOAD_ADDRESS = 0x3f400020;
const IROM_LOAD_ADDRESS = 0x400d0020;
const ENTRY_ADDRESS = 0x400d1234;
const SPI_MODE_DIO = 2;
const FLASH_4MB_40MHZ = 0x20;
const WP_PIN_DISABLED = 0xee;
/** ESP-IDF 5.1's max_chip_rev_full for the ESP32 (v3.99). */
const MAX_CHIP_REV_FULL = 399;
// Fixed build stamp, so the same options always give the same bytes.
const BUILD_TIME = "12:00:00";
const BUILD_DATE = "Nov 22 2026";
const IDF_VERSION = "v5.1.4";
const WIFI_SSID = "badgebench-lab";
const MIN_FILLER_BYTES = 4;

function checkOptions(options: BuildImageOptions): void {
  const { version, projectName, wifiPassword, size, seed, chipId, trustedKeys = [] } = options;
  if (trustedKeys.length > MAX_TRUSTED_KEYS || trustedKeys.some((key) => key.length !== PUBLIC_KEY_BYTES)) {
    throw new ImageOptionsError(`trustedKeys must be at most ${MAX_TRUSTED_KEYS} raw Ed25519 public keys of ${PUBLIC_KEY_BYTES} bytes`);
  }
  const fitsDescriptorString = (text: string) => text.length > 0 && Buffer.byteLength(text) <= 31 && !hasControlCharacter(text);
  if (!fitsDescriptorString(version)) {
    throw new ImageOptionsError(`version ${JSON.stringify(version)} must be 1 to 31 bytes with no control characters (esp_app_desc_t.version)`);
  }
  if (projectName !== undefined && !fitsDescriptorString(projectName)) {
    throw new ImageOptionsError(`projectName ${JSON.stringify(projectName)} must be 1 to 31 bytes with no control characters (esp_app_desc_t.project_name)`);
  }
  // The filler is cleaned of the password, but the header and the digests cannot be; 8 or more
  // characters keep it from turning up there by chance.
  if (wifiPassword !== undefined && !/^[\x20-\x7e]{8,63}$/.test(wifiPassword)) {
    throw new ImageOptionsError("wifiPassword must be a WPA2 passphrase: 8 to 63 printable ASCII characters");
  }
  if (size !== undefined && (!Number.isInteger(size) || size > MAX_IMAGE_BYTES)) {
    throw new ImageOptionsError(`size ${size} must be a whole number of bytes, at most ${MAX_IMAGE_BYTES}`);
  }
  if (seed !== undefined && !Number.isInteger(seed)) throw new ImageOptionsError(`seed ${seed} must be an integer`);
  if (chipId !== undefined && !(Number.isInteger(chipId) && chipId >= 0 && chipId <= 0xffff)) {
    throw new ImageOptionsError(`chipId ${chipId} must be an integer from 0 to 0xFFFF`);
  }
}

/** FNV-1a, to turn the version into a default seed. */
function hashText(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, "utf8")) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash;
}

/** mulberry32: small, fast and deterministic; these bytes only need to look like code. */
function fillPseudoRandom(target: Uint8Array, seed: number): void {
  let state = seed >>> 0;
  for (let i = 0; i < target.length; i += 4) {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const word = (t ^ (t >>> 14)) >>> 0;
    target[i] = word & 0xff;
    target[i + 1] = (word >>> 8) & 0xff;
    target[i + 2] = (word >>> 16) & 0xff;
    target[i + 3] = word >>> 24;
  }
}

/**
 * Zeroes the first byte of every occurrence of each needle, so the filler never holds the
 * version or the password by chance (a test asking "is the password in there?" must get the
 * answer it set up). A zero cannot start a new occurrence: the needles hold no NUL.
 */
function removeOccurrences(target: Uint8Array, needles: string[]): void {
  const haystack = asBuffer(target);
  for (const needle of needles) {
    for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1)) haystack[at] = 0;
  }
}

function appDescriptorBytes(version: string, projectName: string, seed: number): Uint8Array {
  const desc = Buffer.alloc(APP_DESC_BYTES);
  desc.writeUInt32LE(APP_DESC_MAGIC, 0);
  desc.write(version, DESC_VERSION, "utf8");
  desc.write(projectName, DESC_PROJECT_NAME, "utf8");
  desc.write(BUILD_TIME, DESC_TIME, "ascii");
  desc.write(BUILD_DATE, DESC_DATE, "ascii");
  desc.write(IDF_VERSION, DESC_IDF_VERSION, "ascii");
  createHash("sha256").update(`${projectName}\0${version}\0${seed}`).digest().copy(desc, DESC_ELF_SHA256);
  return desc;
}

/** Segment 1 (DROM): the app descriptor, then the strings a firmware would carry, padded to 4 bytes. */
function dromSegment(options: BuildImageOptions, projectName: string, seed: number): Uint8Array {
  const strings = [`${projectName} firmware ${options.version}`];
  if (options.wifiPassword !== undefined) strings.push(`WIFI_SSID=${WIFI_SSID}`, `WIFI_PASS=${options.wifiPassword}`);
  if (options.crashOnBoot) strings.push(CRASH_ON_BOOT_MARKER);
  strings.push(...trustedKeyStrings(options.trustedKeys ?? []));
  const text = Buffer.from(strings.map((s) => `${s}\0`).join(""), "utf8");
  const length = Math.ceil((APP_DESC_BYTES + text.length) / 4) * 4;
  const data = new Uint8Array(length);
  data.set(appDescriptorBytes(options.version, projectName, seed), 0);
  data.set(text, APP_DESC_BYTES);
  return data;
}

/**
 * A valid ESP32 app image of two segments (DROM with the app descriptor, IROM of seeded filler)
 * that is exactly `size` bytes long, rounded down to a multiple of 16. Throws ImageOptionsError
 * for bad options, including a size too small to hold the segments (the message gives the minimum).
 */
export function buildAppImage(options: BuildImageOptions): Uint8Array {
  checkOptions(options);
  const projectName = options.projectName ?? "badge";
  const seed = options.seed ?? hashText(options.version);
  const hashAppended = options.hashAppended ?? true;
  const digestBytes = hashAppended ? DIGEST_BYTES : 0;
  const drom = dromSegment(options, projectName, seed);

  // Segment data lengths are multiples of 4, so the segments end 4-aligned; the filler is sized
  // so that they end 3 bytes (of zero padding) before the checksum.
  const fillerStart = IMAGE_HEADER_BYTES + SEGMENT_HEADER_BYTES + drom.length + SEGMENT_HEADER_BYTES;
  const smallest = checksumOffsetAfter(fillerStart + MIN_FILLER_BYTES) + 1 + digestBytes;
  const requested = options.size ?? DEFAULT_IMAGE_BYTES;
  const size = requested - (requested % 16);
  if (size < smallest) throw new ImageOptionsError(`size ${requested} is too small: these options need at least ${smallest} bytes`);
  const checksumOffset = size - 1 - digestBytes;
  const fillerLength = Math.floor((checksumOffset - fillerStart) / 4) * 4;

  const image = new Uint8Array(size);
  const view = new DataView(image.buffer);
  image[0] = IMAGE_MAGIC;
  image[1] = 2;
  image[2] = SPI_MODE_DIO;
  image[3] = FLASH_4MB_40MHZ;
  view.setUint32(4, ENTRY_ADDRESS, true);
  image[8] = WP_PIN_DISABLED;
  view.setUint16(0x0c, options.chipId ?? 0, true);
  view.setUint16(0x11, MAX_CHIP_REV_FULL, true);
  image[HASH_FLAG_OFFSET] = hashAppended ? 1 : 0;

  const dromHeader = IMAGE_HEADER_BYTES;
  view.setUint32(dromHeader, DROM_LOAD_ADDRESS, true);
  view.setUint32(dromHeader + 4, drom.length, true);
  image.set(drom, dromHeader + SEGMENT_HEADER_BYTES);

  const iromHeader = fillerStart - SEGMENT_HEADER_BYTES;
  view.setUint32(iromHeader, IROM_LOAD_ADDRESS, true);
  view.setUint32(iromHeader + 4, fillerLength, true);
  const filler = image.subarray(fillerStart, fillerStart + fillerLength);
  fillPseudoRandom(filler, seed);
  removeOccurrences(filler, options.wifiPassword === undefined ? [options.version] : [options.version, options.wifiPassword]);

  const segments = [
    { loadAddress: DROM_LOAD_ADDRESS, offset: dromHeader + SEGMENT_HEADER_BYTES, length: drom.length },
    { loadAddress: IROM_LOAD_ADDRESS, offset: fillerStart, length: fillerLength },
  ];
  image[checksumOffset] = segmentChecksum(image, segments);
  if (hashAppended) image.set(createHash("sha256").update(image.subarray(0, checksumOffset + 1)).digest(), checksumOffset + 1);
  return image;
}
