/*
 * The reference badge: the badge side of the badgebench contract (SPEC 3.4, 4.8-4.10,
 * firmware/README.md) in portable C11, as a firmware team would write it. This header is what
 * firmware includes. Nothing here allocates: every buffer is a fixed array inside the structs
 * below, so one `bb_badge` (a static in firmware) is all the memory the core needs.
 *
 * The core does not touch hardware. It calls the `bb_platform` functions, which map one to one
 * onto ESP-IDF (README.md beside this file): the console UART, NVS, the OTA partitions and
 * esp_http_client. host.c implements them over files, a serial line and TCP sockets.
 */
#ifndef BB_BADGE_H
#define BB_BADGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits (SPEC 8 and firmware/README.md) ---- */
#define BB_SLOT_BYTES 0x1E0000u         /* one OTA app slot */
#define BB_MIN_INSTALL_MV 3850u         /* no install below this unless charging */
#define BB_SLEEP_AFTER_MS 30000u        /* deep sleep after this long without an input */
#define BB_FAILURE_SCREEN_MS 3000u      /* a failed update stays on screen this long */
#define BB_CHECKPOINT_BYTES 65536u      /* install progress is kept in NVS this often */
#define BB_WRITE_BYTES 1024u            /* one esp_ota_write, as ESP-IDF's OTA example */
#define BB_ANSWER_MAX 4096u             /* a check or sync answer larger than this is refused */
#define BB_REQUEST_MAX 8192u            /* one check or sync request: 100 taps and a report fit */
#define BB_LINE_MAX 32u                 /* response lines kept from one answer */
#define BB_VERSION_MAX 31u              /* esp_app_desc_t.version less its NUL */
#define BB_DISPLAY_MAX 64u              /* the fw= display string */
#define BB_NOTE_MAX 40u                 /* one release note (L line), in bytes */
#define BB_PATH_MAX 160u                /* the P line */
#define BB_TEXT_MAX 200u                /* a screen notice, a report message */
#define BB_REPORT_MAX 256u              /* an ota= value */
#define BB_TOKEN_MAX 128u
#define BB_MAX_TAPS 100u                /* queued card taps, and taps per sync */
#define BB_UID_MAX 20u
#define BB_CONSOLE_LINE_MAX 256u        /* a console command line */
#define BB_EVENT_MAX 512u               /* one printed @bb line */
/* signed releases (firmware/signature.ts) */
#define BB_KEY_ID_HEX 16u               /* a key id: the first 8 bytes of SHA-256(public key), in hex */
#define BB_PUBLIC_KEY_BYTES 32u         /* an Ed25519 public key */
#define BB_SIGNATURE_BYTES 64u          /* an Ed25519 signature */
#define BB_SIGNATURE_BASE64 88u         /* the G line's signature: standard base64 with its == */
#define BB_TRUSTED_KEYS 2u              /* release keys one image trusts: the current one and the next */

/* ---- MD5 (RFC 1321), hashed while the image is written ---- */
typedef struct {
    uint32_t state[4];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} bb_md5;
void bb_md5_init(bb_md5 *md5);
void bb_md5_update(bb_md5 *md5, const uint8_t *data, size_t len);
/* 32 lowercase hex digits and a NUL into hex[33] */
void bb_md5_hex(bb_md5 *md5, char hex[33]);

/* ---- versions: MAJOR.MINOR.PATCH[-pre][+build], compared on the three numbers only ---- */
typedef struct {
    uint32_t major, minor, patch;
} bb_version;
bool bb_version_parse(const char *text, bb_version *out);
int bb_version_compare(const bb_version *a, const bb_version *b);

/* ---- requests: key=value lines (firmware/line-codec.ts) ---- */
typedef struct {
    char text[BB_REQUEST_MAX];
    size_t len;
    bool broken; /* a bad key, a control character in a value, or no room: never sent */
} bb_request;
void bb_request_init(bb_request *request);
bool bb_request_add(bb_request *request, const char *key, const char *value);

/* ---- answers: `V1`, `<LETTER> <value>` lines, `.` ---- */
typedef struct {
    char letter;
    const char *value; /* points into the parsed text */
} bb_line;
typedef struct {
    unsigned version;
    size_t count;
    bb_line lines[BB_LINE_MAX];
} bb_response;
/*
 * Parses `len` bytes of `text` in place (line ends become NULs; `text` needs room for one more
 * byte). False, with why in `why`, for an answer that is cut (no final `.`), malformed, holds a
 * control character or a NUL, or has more than BB_LINE_MAX lines.
 */
bool bb_response_parse(char *text, size_t len, bb_response *out, char *why, size_t why_cap);
/* The value of the first line with `letter`, or NULL. */
const char *bb_response_value(const bb_response *response, char letter);

/* ---- the check answer (SPEC 4.8) ---- */
typedef struct {
    char version[BB_VERSION_MAX + 1];
    char display[BB_DISPLAY_MAX + 1];
    uint64_t size; /* the Z line, 1 to 10 digits: may not fit the slot, which the badge then says */
    char md5[33];
    char path[BB_PATH_MAX + 1];
    char notes[3][BB_NOTE_MAX + 1];
    unsigned note_count;
    /* the G line, when the answer had one: `<key id> <base64 signature>` */
    bool is_signed;
    char key_id[BB_KEY_ID_HEX + 1];
    uint8_t signature[BB_SIGNATURE_BYTES];
} bb_offer;
typedef enum { BB_CHECK_OFFER, BB_CHECK_CURRENT, BB_CHECK_REFUSED, BB_CHECK_UNAUTHORIZED, BB_CHECK_FAILED } bb_check_kind;
typedef struct {
    bb_check_kind kind;
    bb_offer offer;
    char latest[BB_VERSION_MAX + 1];
    char code[48];
    char message[BB_TEXT_MAX];   /* the refusal's message, or why the check failed */
    long recheck_s;              /* the S line; -1 when absent or not a number of 1-9 digits */
} bb_check_answer;
/* Reads an answer: `status` is the HTTP status, `body` the bytes (parsed in place, room for one more). */
void bb_check_answer_read(int status, char *body, size_t len, bb_check_answer *out);

/* ---- the sync answer ---- */
typedef struct {
    uint32_t n;
    bool accepted;
} bb_tap_answer;
typedef enum { BB_SYNC_SYNCED, BB_SYNC_UNAUTHORIZED, BB_SYNC_FAILED } bb_sync_kind;
typedef struct {
    bb_sync_kind kind;
    uint64_t server_unix_s;
    char echoed[BB_REPORT_MAX]; /* the O line, "" when none */
    bb_tap_answer taps[BB_MAX_TAPS];
    size_t tap_count;
    char message[BB_TEXT_MAX];
    long recheck_s;
} bb_sync_answer;
void bb_sync_answer_read(int status, char *body, size_t len, bb_sync_answer *out);

/* ---- signed releases: Ed25519 with libsodium (signature.c), as ESP-IDF's libsodium component offers it ---- */
/* Call once before the others (sodium_init); false when libsodium cannot start. */
bool bb_signature_init(void);
/* The key id of a raw public key: 16 lowercase hex digits and a NUL into out[17]. */
void bb_key_id(const uint8_t key[BB_PUBLIC_KEY_BYTES], char out[BB_KEY_ID_HEX + 1]);
/* Reads a G value `<16 hex> <88 base64>` (canonical base64 of 64 bytes); false for anything else. */
bool bb_signature_parse(const char *value, char key_id[BB_KEY_ID_HEX + 1], uint8_t signature[BB_SIGNATURE_BYTES]);
/* Whether `signature` is `key`'s Ed25519 signature of all `len` bytes of `image`. */
bool bb_signature_verify(const uint8_t *image, size_t len, const uint8_t signature[BB_SIGNATURE_BYTES], const uint8_t key[BB_PUBLIC_KEY_BYTES]);
/*
 * The keys a test image trusts: each `BADGEBENCH:ED25519_KEY=<64 hex>` string in it, at most
 * BB_TRUSTED_KEYS. Firmware compiles its keys in instead; the host badge and the tests read them so.
 */
unsigned bb_trusted_keys_scan(const uint8_t *image, size_t len, uint8_t keys[BB_TRUSTED_KEYS][BB_PUBLIC_KEY_BYTES]);
/* ---- a resumed download's answer (issue 23) ---- */
/*
 * A 206's `Content-Range: bytes FIRST-LAST/TOTAL`, strictly as parseContentRange in
 * firmware/badge-protocol.ts: digits only (1-10 each), FIRST <= LAST < TOTAL, blanks around the
 * whole allowed. False for anything else: an unknown total (an asterisk after the slash), the
 * 416 form (an asterisk in place of FIRST-LAST), garbage.
 */
typedef struct {
    uint64_t first, last, total;
} bb_content_range;
bool bb_content_range_parse(const char *text, bb_content_range *out);

/* ---- the test console (firmware/console.ts) ---- */
typedef struct {
    char text[BB_EVENT_MAX];
    size_t len;
    bool overflow;
} bb_event;
/* `@bb <kind>`, then fields in the order of the table in firmware/README.md */
void bb_event_begin(bb_event *event, const char *kind);
/* ` key=value`, quoted with C escapes when the value is empty or holds a space, `"`, `\` or a control character */
void bb_event_field(bb_event *event, const char *key, const char *value);
void bb_event_field_u64(bb_event *event, const char *key, uint64_t value);

typedef enum {
    BB_CMD_CHECK, BB_CMD_SYNC, BB_CMD_TAP, BB_CMD_REBOOT, BB_CMD_STATUS,
    /* the simulated badge's; a real one answers refused */
    BB_CMD_PLUG, BB_CMD_UNPLUG, BB_CMD_WAIT, BB_CMD_BROWNOUT, BB_CMD_REST
} bb_command_name;
typedef struct {
    bb_command_name name;
    char uid[BB_UID_MAX + 1];
} bb_command;
typedef enum { BB_PARSE_EMPTY, BB_PARSE_OK, BB_PARSE_REFUSED } bb_parse;
/* One command line (its line end removed). */
bb_parse bb_command_parse(const char *line, bb_command *out, char *why, size_t why_cap);

/* ---- what the hardware gives the core ---- */
typedef enum { BB_OTA_0 = 0, BB_OTA_1 = 1 } bb_slot;
typedef enum { BB_POWER_BATTERY, BB_POWER_EXTERNAL, BB_POWER_CHARGING } bb_power_source;
typedef struct {
    uint32_t mv;
    bb_power_source source;
} bb_power;
/* how an HTTP read ended when it returned no bytes */
enum { BB_HTTP_END = 0, BB_HTTP_CUT = -1, BB_HTTP_STALLED = -2 };

/* A resume asks for the rest of the image: `Range: bytes=<from>-` and `If-Range: "<md5>"` (issue 23). */
typedef struct {
    uint32_t from;
    char md5[33];
} bb_range_request;
/* What an answer's head says, as esp_http_client_get_status_code / _get_header read it. */
typedef struct {
    int status;
    long content_length;      /* -1: no Content-Length */
    char content_range[64];   /* the Content-Range value, "" when none (or longer than this) */
    long retry_after_s;       /* Retry-After as 1-9 digits of seconds; -1 when absent or another form (an HTTP date) */
} bb_http_head;

typedef struct {
    void *ctx;
    /* the console UART: text as is, line ends included */
    void (*console_write)(void *ctx, const char *text, size_t len);
    /* a whole command line if one has come (without waiting), its line end removed */
    bool (*console_poll)(void *ctx, char *line, size_t cap);
    /* ms since power-on (esp_timer_get_time / 1000) and the RTC that keeps time across resets */
    uint64_t (*uptime_ms)(void *ctx);
    uint64_t (*rtc_ms)(void *ctx);
    void (*delay_ms)(void *ctx, uint32_t ms);
    bb_power (*power)(void *ctx);
    /* NVS: one committed key at a time (nvs_set_str + nvs_commit); get is false when absent */
    bool (*nvs_get)(void *ctx, const char *key, char *out, size_t cap);
    bool (*nvs_set)(void *ctx, const char *key, const char *value);
    bool (*nvs_erase)(void *ctx, const char *key);
    /* OTA: esp_ota_begin (erases what `size` needs), esp_ota_write, esp_ota_set_boot_partition */
    bool (*ota_begin)(void *ctx, bb_slot slot, uint32_t size);
    /*
     * esp_ota_resume: a resumed download goes on writing at `from` (a 64 KiB checkpoint), so only
     * the sectors from there to `size` are erased; the bytes before `from` stay as written.
     */
    bool (*ota_resume)(void *ctx, bb_slot slot, uint32_t size, uint32_t from);
    bool (*ota_write)(void *ctx, bb_slot slot, uint32_t offset, const uint8_t *data, size_t len);
    bool (*ota_set_boot)(void *ctx, bb_slot slot);
    /* esp_partition_mmap: the first `size` bytes of `slot` as written, to verify a signature over; NULL on failure */
    const uint8_t *(*ota_map)(void *ctx, bb_slot slot, uint32_t size);
    /*
     * esp_http_client over HTTP/1.0: one request per connection. open sends it (with `range`'s
     * Range and If-Range headers when it is not NULL) and reads the head into `head`; false when
     * the server cannot be reached or the head never came whole (`why` says). read returns bytes
     * (> 0), BB_HTTP_END, BB_HTTP_CUT or BB_HTTP_STALLED.
     */
    bool (*http_open)(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len,
                      const bb_range_request *range, bb_http_head *head, char *why, size_t why_cap);
    long (*http_read)(void *ctx, uint8_t *buf, size_t cap);
    void (*http_close)(void *ctx);
    /* how long http_read waits for a byte before BB_HTTP_STALLED, for the badge's messages */
    uint32_t stall_timeout_ms;
} bb_platform;

/* What the bootloader found: the slot it started and that image's app descriptor. */
typedef struct {
    bb_slot slot;
    char version[BB_VERSION_MAX + 1];
    const char *cause; /* power-on, restart, wake, brownout, panic, watchdog, other */
    bool crashes;      /* the image crashes as it starts (SPEC 3.4 item 6) */
    /* the release keys this image trusts; none: it verifies no signatures, as firmware before them */
    uint8_t trusted_keys[BB_TRUSTED_KEYS][BB_PUBLIC_KEY_BYTES];
    unsigned trusted_key_count;
} bb_boot_info;

/* What the main loop does next. */
typedef enum { BB_NEXT_RUN, BB_NEXT_RESTART, BB_NEXT_SLEEP } bb_next;

typedef struct {
    const bb_platform *hw;
    bb_boot_info boot;
    char state[32];
    char screen[BB_TEXT_MAX * 2];
    char notice[BB_TEXT_MAX];
    bb_offer offer;
    uint32_t received;
    uint64_t last_input_ms;
    bool contact_due;
    /* USB power as last seen, so idle can tell a plug-in (the model's power.plugged) */
    bool external;
    /* scratch buffers, so nothing big lives on the stack */
    char answer[BB_ANSWER_MAX + 1];
    bb_request request;
    uint8_t chunk[BB_WRITE_BYTES];
    bb_check_answer check;
    bb_sync_answer sync;
    bb_event event;
} bb_badge;

/* One start of the app: prints the boot line, reads NVS, and syncs if it should. */
bb_next bb_badge_start(bb_badge *badge, const bb_platform *hw, const bb_boot_info *boot);
/* One console command line (line end removed). */
bb_next bb_badge_command(bb_badge *badge, const char *line);
/*
 * Called between inputs: USB power plugged in while awake is a chance to sync (awake.opportunity);
 * deep sleep once the badge has been left alone long enough.
 */
bb_next bb_badge_idle(bb_badge *badge);
/*
 * Deep sleep ends (the button, a card, USB power plugged in): prints `state wakingUp`, the run's
 * last state. On an ESP32 the deep-sleep wake stub says it, before the reset into the next boot.
 */
void bb_badge_wake(bb_badge *badge);

#endif
