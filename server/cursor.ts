// Opaque list cursors. A cursor is the keyset position of the last item plus a fingerprint of
// the filters it was issued for, signed with a per-installation secret, so a forged, truncated
// or re-used-with-other-filters cursor is refused with a 400 instead of returning wrong pages.
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { invalidParam } from "./errors.ts";

export interface CursorPayload {
  /** keyset position: the sort value and id of the last item returned */
  after: [string, string];
  /** fingerprint of the filters the cursor belongs to */
  filters: string;
  /** values resolved on the first page (for example the default date window) */
  pinned?: Record<string, string>;
}

const MAC_BYTES = 16;

/** Names the list and its filters, so a cursor works only on the list and filters it came from. */
export function filterFingerprint(list: string, filters: Record<string, unknown>): string {
  const entries = Object.entries(filters).filter(([, v]) => v !== undefined).sort(([a], [b]) => a.localeCompare(b));
  return createHash("sha256").update(JSON.stringify([list, entries])).digest("base64url").slice(0, 16);
}

export class CursorCodec {
  readonly #secret: Buffer;
  constructor(secret: Buffer) {
    this.#secret = secret;
  }

  #mac(data: string): Buffer {
    return createHmac("sha256", this.#secret).update(data).digest().subarray(0, MAC_BYTES);
  }

  encode(payload: CursorPayload): string {
    const data = Buffer.from(JSON.stringify(payload)).toString("base64url");
    return `${data}.${this.#mac(data).toString("base64url")}`;
  }

  /** Decodes a cursor issued for `filters`, or throws a 400 naming the `cursor` parameter. */
  decode(cursor: string, filters: string): CursorPayload {
    const refuse = (why: string) =>
      invalidParam("cursor", `Invalid cursor: ${why}. Use the next_cursor of the previous page unchanged.`, "cursor_invalid");
    const [data, mac, extra] = cursor.split(".");
    if (!data || !mac || extra !== undefined) throw refuse("it is malformed");
    const given = Buffer.from(mac, "base64url");
    const expected = this.#mac(data);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw refuse("it was not issued by this server");
    const payload = JSON.parse(Buffer.from(data, "base64url").toString()) as CursorPayload;
    if (payload.filters !== filters) throw refuse("it was issued for different filters");
    return payload;
  }
}

export interface ListEnvelope<T> {
  object: "list";
  has_more: boolean;
  next_cursor: string | null;
  data: T[];
}

/**
 * Builds a page from rows fetched with `limit + 1`: the extra row only says whether more follow.
 */
export function toPage<Row, Item>(
  rows: Row[],
  limit: number,
  options: {
    codec: CursorCodec;
    filters: string;
    pinned?: Record<string, string>;
    keyOf: (row: Row) => [string, string];
    view: (row: Row) => Item;
  },
): ListEnvelope<Item> {
  const hasMore = rows.length > limit;
  const pageRows = hasMore ? rows.slice(0, limit) : rows;
  const last = pageRows.at(-1);
  return {
    object: "list",
    has_more: hasMore,
    next_cursor:
      hasMore && last
        ? options.codec.encode({ after: options.keyOf(last), filters: options.filters, pinned: options.pinned })
        : null,
    data: pageRows.map(options.view),
  };
}
