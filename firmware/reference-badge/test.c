/*
 * Unit tests of the C core and a fuzz of its parsers, built with -fsanitize=address,undefined
 * (`make test`). The badge runs against a fake platform: flash and NVS in memory, the server's
 * answers scripted. Usage: test [CONSOLE_FILE [FUZZ_ROUNDS [SEED]]]; everything the badge prints
 * goes to CONSOLE_FILE, whose `@bb` lines test/firmware/reference-badge.test.ts parses with the
 * TypeScript codec. Exit 0 when every check held; each failure prints its line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "badge.h"

static int failures = 0;
static int checks = 0;
#define CHECK(cond)                                                                 \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* ---- the fake platform ---- */

typedef struct {
    int status;
    long content_length; /* -1: no Content-Length */
    const char *body;
    size_t body_len;
    long ending; /* what read returns after the body: BB_HTTP_END, BB_HTTP_CUT, BB_HTTP_STALLED */
    bool unreachable;
} scripted;

#define NVS_KEYS 160
static struct {
    FILE *console;
    char console_text[1 << 20];
    size_t console_len;
    uint64_t now_ms;
    bb_power power;
    char keys[NVS_KEYS][16];
    char values[NVS_KEYS][BB_REPORT_MAX + 64];
    bool used[NVS_KEYS];
    uint8_t slots[2][BB_SLOT_BYTES];
    bool erased[2];
    int writes_to[2];
    int writes_after_switch;
    int switches;
    bb_slot boots;
    scripted answers[8];
    int answer_count, answer_next;
    const scripted *open;
    size_t read_at;
    char last_request[BB_REQUEST_MAX]; /* the last POST body */
    char last_path[BB_PATH_MAX + 1];
    const char *typed[4]; /* console lines the badge hears while it is busy */
    int typed_count, typed_next;
} fake;

static void console_write(void *ctx, const char *text, size_t len) {
    (void)ctx;
    if (fake.console) fwrite(text, 1, len, fake.console);
    if (fake.console_len + len < sizeof fake.console_text) {
        memcpy(fake.console_text + fake.console_len, text, len);
        fake.console_len += len;
        fake.console_text[fake.console_len] = '\0';
    }
}
static bool console_poll(void *ctx, char *line, size_t cap) {
    (void)ctx;
    if (fake.typed_next == fake.typed_count) return false;
    snprintf(line, cap, "%s", fake.typed[fake.typed_next++]);
    return true;
}
static uint64_t uptime_ms(void *ctx) { (void)ctx; return fake.now_ms; }
static uint64_t rtc_ms(void *ctx) { (void)ctx; return fake.now_ms; }
static void delay_ms(void *ctx, uint32_t ms) { (void)ctx; fake.now_ms += ms; }
static bb_power power(void *ctx) { (void)ctx; return fake.power; }

static int nvs_find(const char *key) {
    for (int i = 0; i < NVS_KEYS; i++) {
        if (fake.used[i] && strcmp(fake.keys[i], key) == 0) return i;
    }
    return -1;
}
static bool nvs_get(void *ctx, const char *key, char *out, size_t cap) {
    (void)ctx;
    int i = nvs_find(key);
    if (i < 0 || strlen(fake.values[i]) >= cap) return false;
    strcpy(out, fake.values[i]);
    return true;
}
static bool nvs_set(void *ctx, const char *key, const char *value) {
    (void)ctx;
    if (strlen(key) > 15 || strlen(value) >= sizeof fake.values[0]) return false;
    int i = nvs_find(key);
    for (int j = 0; i < 0 && j < NVS_KEYS; j++) {
        if (!fake.used[j]) i = j;
    }
    if (i < 0) return false;
    fake.used[i] = true;
    strcpy(fake.keys[i], key);
    strcpy(fake.values[i], value);
    return true;
}
static bool nvs_erase(void *ctx, const char *key) {
    (void)ctx;
    int i = nvs_find(key);
    if (i >= 0) fake.used[i] = false;
    return i >= 0;
}
static bool ota_begin(void *ctx, bb_slot slot, uint32_t size) {
    (void)ctx;
    if (slot == fake.boots || size > BB_SLOT_BYTES) return false; /* ESP_ERR_OTA_PARTITION_CONFLICT */
    memset(fake.slots[slot], 0xff, size);
    fake.erased[slot] = true;
    return true;
}
static bool ota_write(void *ctx, bb_slot slot, uint32_t offset, const uint8_t *data, size_t len) {
    (void)ctx;
    if (slot == fake.boots || offset + len > BB_SLOT_BYTES || !fake.erased[slot]) return false;
    memcpy(fake.slots[slot] + offset, data, len);
    fake.writes_to[slot]++;
    if (fake.switches > 0) fake.writes_after_switch++;
    return true;
}
static bool ota_set_boot(void *ctx, bb_slot slot) {
    (void)ctx;
    fake.switches++;
    fake.boots = slot;
    return true;
}
static bool http_open(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len, int *status,
                      long *content_length, char *why, size_t why_cap) {
    (void)ctx;
    (void)method;
    (void)token;
    snprintf(fake.last_path, sizeof fake.last_path, "%s", path);
    if (body) snprintf(fake.last_request, sizeof fake.last_request, "%.*s", (int)body_len, body);
    if (fake.answer_next == fake.answer_count) {
        snprintf(why, why_cap, "nothing scripted");
        return false;
    }
    fake.open = &fake.answers[fake.answer_next++];
    if (fake.open->unreachable) {
        snprintf(why, why_cap, "connection refused");
        return false;
    }
    *status = fake.open->status;
    *content_length = fake.open->content_length;
    fake.read_at = 0;
    return true;
}
/* after this many body bytes USB power goes (0: never); reset_fake keeps it, so update_with can use it */
static size_t unplug_at;

/* hands the body out in uneven pieces, as TCP does */
static long http_read(void *ctx, uint8_t *buf, size_t cap) {
    (void)ctx;
    if (unplug_at > 0 && fake.read_at >= unplug_at) fake.power.source = BB_POWER_BATTERY;
    size_t left = fake.open->body_len - fake.read_at;
    if (left == 0) return fake.open->ending;
    size_t n = 1 + (fake.read_at * 7919 + 13) % 1500;
    if (n > left) n = left;
    if (n > cap) n = cap;
    memcpy(buf, fake.open->body + fake.read_at, n);
    fake.read_at += n;
    return (long)n;
}
static void http_close(void *ctx) { (void)ctx; }

static const bb_platform platform = {
    .ctx = NULL, .console_write = console_write, .console_poll = console_poll, .uptime_ms = uptime_ms, .rtc_ms = rtc_ms, .delay_ms = delay_ms, .power = power,
    .nvs_get = nvs_get, .nvs_set = nvs_set, .nvs_erase = nvs_erase, .ota_begin = ota_begin, .ota_write = ota_write,
    .ota_set_boot = ota_set_boot, .http_open = http_open, .http_read = http_read, .http_close = http_close, .stall_timeout_ms = 5000,
};

static bb_badge badge;

/* A fresh badge at 1.4.0 on ota_0, provisioned, charging; the console file keeps everything. */
static void reset_fake(void) {
    FILE *console = fake.console;
    memset(&fake, 0, sizeof fake);
    fake.console = console;
    fake.power = (bb_power){.mv = 3950, .source = BB_POWER_CHARGING};
    fake.boots = BB_OTA_0;
    fake.now_ms = 1000;
    nvs_set(NULL, "token", "dtk_test_abc");
}

static void script(int status, long content_length, const char *body, size_t len, long ending) {
    fake.answers[fake.answer_count++] = (scripted){status, content_length, body, len, ending, false};
}
static void script_text(int status, const char *body) { script(status, (long)strlen(body), body, strlen(body), BB_HTTP_END); }

static bb_next start(const char *version, bb_slot slot) {
    bb_boot_info boot = {.slot = slot, .cause = "power-on", .crashes = false};
    snprintf(boot.version, sizeof boot.version, "%s", version);
    fake.boots = slot;
    return bb_badge_start(&badge, &platform, &boot);
}

static bool printed(const char *text) { return strstr(fake.console_text, text) != NULL; }
static const char *nvs(const char *key) {
    int i = nvs_find(key);
    return i < 0 ? NULL : fake.values[i];
}

/* ---- an image and its offer ---- */

#define IMAGE_BYTES (200 * 1024 + 123)
static uint8_t image[IMAGE_BYTES];
static char image_md5[33];
static char offer_text[512];

static void make_image(void) {
    uint32_t x = 12345;
    for (size_t i = 0; i < IMAGE_BYTES; i++) image[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    bb_md5 md5;
    bb_md5_init(&md5);
    bb_md5_update(&md5, image, IMAGE_BYTES);
    bb_md5_hex(&md5, image_md5);
    snprintf(offer_text, sizeof offer_text,
             "V1\nS 3600\nU 1.5.0\nB Badge 1.5.0\nZ %u\nM %s\nP /api/badge/ota/download?v=1.5.0\nL Faster card reads\n.\n", IMAGE_BYTES, image_md5);
}

/* ---- tests ---- */

static void test_md5(void) {
    const char *inputs[] = {"", "abc", "message digest", "12345678901234567890123456789012345678901234567890123456789012345678901234567890"};
    const char *wanted[] = {"d41d8cd98f00b204e9800998ecf8427e", "900150983cd24fb0d6963f7d28e17f72", "f96b697d7cb7938d525a2f31aaf161d0",
                            "57edf4a22be3c955ac49da2e2107b67a"};
    for (int i = 0; i < 4; i++) {
        bb_md5 md5;
        char hex[33];
        bb_md5_init(&md5);
        bb_md5_update(&md5, (const uint8_t *)inputs[i], strlen(inputs[i]));
        bb_md5_hex(&md5, hex);
        CHECK(strcmp(hex, wanted[i]) == 0);
    }
}

static void test_versions(void) {
    const char *good[] = {"1.4.0", "0.0.0", "1.2.3-rc.1", "1.2.3+abc.5", "1.6.0-dev", "999999999.0.1", "1.2.3-a-b+c-d"};
    const char *bad[] = {"", "1.4", "1.4.0.1", "01.4.0", "1.4.0-", "1.4.0+", "1.4.0-a..b", "1234567890.0.0", " 1.4.0", "1.4.0 ", "v1.4.0",
                         "1.2.3-rc1+0123456789012345678901"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK(bb_version_parse(good[i], NULL));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(!bb_version_parse(bad[i], NULL));
    bb_version a, b;
    CHECK(bb_version_parse("1.2.3-rc1", &a) && bb_version_parse("1.2.3+abc", &b) && bb_version_compare(&a, &b) == 0);
    CHECK(bb_version_parse("1.10.0", &a) && bb_version_parse("1.9.9", &b) && bb_version_compare(&a, &b) == 1);
    CHECK(bb_version_parse("1.6.0-dev", &a) && bb_version_parse("1.5.0", &b) && bb_version_compare(&b, &a) == -1);
}

static void test_request(void) {
    bb_request r;
    bb_request_init(&r);
    CHECK(bb_request_add(&r, "v", "1") && bb_request_add(&r, "ota", "err|1.5.0|cut at 51% = half"));
    CHECK(strcmp(r.text, "v=1\nota=err|1.5.0|cut at 51% = half\n") == 0 && !r.broken);
    CHECK(!bb_request_add(&r, "Bad", "x") && r.broken);
    bb_request_init(&r);
    CHECK(!bb_request_add(&r, "fw", "a\nsv=9.9.9") && r.broken);
    bb_request_init(&r);
    CHECK(!bb_request_add(&r, "fw", "C1 \xc2\x85 control"));
    bb_request_init(&r);
    CHECK(!bb_request_add(&r, "a234567890123456x", "1"));
    static char big[BB_REQUEST_MAX + 10];
    memset(big, 'x', sizeof big - 1);
    bb_request_init(&r);
    CHECK(!bb_request_add(&r, "tap", big) && r.broken);
}

static void test_response_parser(void) {
    char text[600];
    bb_response response;
    char why[120];
    strcpy(text, "V1\r\nS 900\r\nN 1.5.0\r\n.\r\n");
    CHECK(bb_response_parse(text, strlen(text), &response, why, sizeof why) && response.count == 2 && response.version == 1);
    CHECK(strcmp(bb_response_value(&response, 'N'), "1.5.0") == 0);
    strcpy(text, "V1\nA\n.");
    CHECK(bb_response_parse(text, strlen(text), &response, why, sizeof why) && strcmp(bb_response_value(&response, 'A'), "") == 0);
    const char *bad[] = {"", "\n", "V1\n", "V1\nS 900\n", "V\n.\n", "X1\n.\n", "V1\n.\n\n", "V1\n.\nU 1\n", "V1\nu 1\n.\n", "V1\nUx\n.\n",
                         "V1\nU a\tb\n.\n", "V1\n\n.\n", "V1\nU \x7f\n.\n", "V1\nB \xc2\x9b[31m\n.\n", "V1\nU 1\r\r\n.\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        strcpy(text, bad[i]);
        CHECK(!bb_response_parse(text, strlen(text), &response, why, sizeof why));
    }
    memcpy(text, "V1\nU 1.5.0\0x\n.\n", 16);
    CHECK(!bb_response_parse(text, 16, &response, why, sizeof why) && strstr(why, "NUL"));
    strcpy(text, "V1\nS 900");
    CHECK(!bb_response_parse(text, strlen(text), &response, why, sizeof why) && strstr(why, "cut"));
}

/* Every cut of a valid offer is refused; only the whole answer (with or without its last newline) is an offer. */
static void test_cut_answers(void) {
    static char text[BB_ANSWER_MAX + 1];
    bb_check_answer answer;
    size_t len = strlen(offer_text);
    for (size_t cut = 0; cut <= len; cut++) {
        memcpy(text, offer_text, cut);
        bb_check_answer_read(200, text, cut, &answer);
        CHECK((answer.kind == BB_CHECK_OFFER) == (cut >= len - 1));
    }
    memcpy(text, offer_text, len);
    bb_check_answer_read(200, text, len, &answer);
    CHECK(answer.kind == BB_CHECK_OFFER && answer.offer.size == IMAGE_BYTES && strcmp(answer.offer.md5, image_md5) == 0);
    CHECK(answer.recheck_s == 3600 && answer.offer.note_count == 1 && strcmp(answer.offer.display, "Badge 1.5.0") == 0);
}

static void check_of(const char *body, bb_check_answer *answer) {
    static char text[16384];
    size_t len = strlen(body);
    memcpy(text, body, len);
    bb_check_answer_read(200, text, len, answer);
}

static void test_bad_offers(void) {
    bb_check_answer a;
    check_of("V1\nU 1.5.0\nZ 262144\nM 0123456789ABCDEF0123456789abcdef\nP /d\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no valid M"));
    check_of("V1\nU 1.5.0\nZ 262144\nM 0123456789abcdef\nP /d\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no valid M"));
    check_of("V1\nU 1.5.0\nZ -1\nM 0123456789abcdef0123456789abcdef\nP /d\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no valid Z"));
    check_of("V1\nU 1.5.0\nZ 100000000000000000000\nM 0123456789abcdef0123456789abcdef\nP /d\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no valid Z"));
    check_of("V1\nU 1.5.0\nZ 262144\nM 0123456789abcdef0123456789abcdef\nP d\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no valid P"));
    /* an S of -1 or 10^20 is no S: the badge keeps its own backoff */
    check_of("V1\nS -1\nN 1.5.0\n.\n", &a);
    CHECK(a.kind == BB_CHECK_CURRENT && a.recheck_s == -1);
    check_of("V1\nS 100000000000000000000\nN 1.5.0\n.\n", &a);
    CHECK(a.kind == BB_CHECK_CURRENT && a.recheck_s == -1);
    check_of("V1\nS 21600\nX battery_low battery 3.7 V is below 3.85 V\n.\n", &a);
    CHECK(a.kind == BB_CHECK_REFUSED && strcmp(a.code, "battery_low") == 0 && strcmp(a.message, "battery 3.7 V is below 3.85 V") == 0);
    check_of("V1\nS 900\n.\n", &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "no U, N or X"));
    /* a 10,000-byte line: parsed, but a version, display or path that long is refused; a note is cut to 40 bytes */
    static char huge[12000];
    char line[10001];
    memset(line, '7', 10000);
    line[10000] = '\0';
    snprintf(huge, sizeof huge, "V1\nU %s\nZ 1\nM 0123456789abcdef0123456789abcdef\nP /d\n.\n", line);
    check_of(huge, &a);
    CHECK(a.kind == BB_CHECK_FAILED && strstr(a.message, "longer than"));
    snprintf(huge, sizeof huge, "V1\nU 1.5.0\nZ 1\nM 0123456789abcdef0123456789abcdef\nP /d\nL %s\n.\n", line);
    check_of(huge, &a);
    CHECK(a.kind == BB_CHECK_OFFER && strlen(a.offer.notes[0]) == BB_NOTE_MAX);
    /* an error status is a failure whatever the body says */
    static char text[200];
    strcpy(text, "V1\nS 300\nX server_error\n.\n");
    bb_check_answer_read(500, text, strlen(text), &a);
    CHECK(a.kind == BB_CHECK_FAILED && strcmp(a.message, "HTTP 500 server_error") == 0 && a.recheck_s == 300);
    strcpy(text, "not the text format");
    bb_check_answer_read(401, text, strlen(text), &a);
    CHECK(a.kind == BB_CHECK_UNAUTHORIZED);
}

static void test_console_commands(void) {
    bb_command c;
    char why[160];
    CHECK(bb_command_parse("  check \r", &c, why, sizeof why) == BB_PARSE_OK && c.name == BB_CMD_CHECK);
    CHECK(bb_command_parse("tap 04A1B2C3D0", &c, why, sizeof why) == BB_PARSE_OK && strcmp(c.uid, "04A1B2C3D0") == 0);
    CHECK(bb_command_parse("   ", &c, why, sizeof why) == BB_PARSE_EMPTY);
    CHECK(bb_command_parse("wait 0.5", &c, why, sizeof why) == BB_PARSE_OK && c.name == BB_CMD_WAIT);
    CHECK(bb_command_parse("brownout switch", &c, why, sizeof why) == BB_PARSE_OK);
    CHECK(bb_command_parse("rest powered", &c, why, sizeof why) == BB_PARSE_OK);
    const char *refused[] = {"tap 04a1b2c3d0", "tap 04A1", "tap", "check now", "wait 0", "wait -1", "wait 01", "brownout 100", "rest later",
                             "CHECK", "\x01\x02\xff", "status status status status", "brownout 1e3"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) CHECK(bb_command_parse(refused[i], &c, why, sizeof why) == BB_PARSE_REFUSED);
}

static void test_event_quoting(void) {
    bb_event e;
    bb_event_begin(&e, "screen");
    bb_event_field(&e, "text", "Updating to 1.5.0\nDownloading 25% \"x\" \\ \x01");
    CHECK(strcmp(e.text, "@bb screen text=\"Updating to 1.5.0\\nDownloading 25% \\\"x\\\" \\\\ \\x01\"") == 0);
    bb_event_begin(&e, "screen");
    bb_event_field(&e, "text", "");
    CHECK(strcmp(e.text, "@bb screen text=\"\"") == 0);
    bb_event_begin(&e, "progress");
    bb_event_field_u64(&e, "bytes", 65536);
    bb_event_field(&e, "slot", "ota_1");
    CHECK(strcmp(e.text, "@bb progress bytes=65536 slot=ota_1") == 0);
}

/* ---- the badge against the fake platform ---- */

static void test_happy_update(void) {
    reset_fake();
    script_text(200, "V1\nS 900\nT 1795000000\n.\n");
    CHECK(start("1.4.0", BB_OTA_0) == BB_NEXT_RUN && strcmp(badge.state, "awake.idle") == 0);
    CHECK(printed("@bb boot slot=ota_0 version=1.4.0 cause=power-on") && printed("@bb state path=online.syncing"));
    script_text(200, offer_text);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    /* typed while it downloads: answered (status), queued (tap), refused (check) */
    fake.typed[0] = "status";
    fake.typed[1] = "tap 04A1B2C3D9";
    fake.typed[2] = "check";
    fake.typed_count = 3;
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(printed("@bb status version=1.4.0 slot=ota_0 state=online.downloading") && printed("@bb tap.queued n=1 uid=04A1B2C3D9"));
    CHECK(printed("@bb refused command=check reason=\"busy: the badge is online.downloading\""));
    CHECK(strstr(fake.last_request, "sv=1.4.0\n") && strstr(fake.last_request, "bat=3.950\nchg=1\n"));
    CHECK(strcmp(fake.last_path, "/api/badge/ota/download?v=1.5.0") == 0);
    CHECK(fake.writes_to[BB_OTA_0] == 0 && fake.writes_to[BB_OTA_1] > 0 && fake.writes_after_switch == 0);
    CHECK(fake.switches == 1 && fake.boots == BB_OTA_1 && memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0);
    CHECK(printed("@bb md5 result=ok") && printed("@bb switch slot=ota_1") && printed("@bb progress bytes=204923 total=204923"));
    CHECK(strncmp(nvs("ota.install"), "switch|1.5.0|", 13) == 0);
    /* the restart boots 1.5.0: the install record becomes ok|1.5.0, sent and cleared at the boot sync */
    script_text(200, "V1\nS 900\nT 1795000100\nO ok|1.5.0\n.\n");
    start("1.5.0", BB_OTA_1);
    CHECK(printed("@bb report.stored report=ok|1.5.0") && printed("@bb report.sent report=ok|1.5.0") && printed("@bb report.cleared report=ok|1.5.0"));
    CHECK(strstr(fake.last_request, "ota=ok|1.5.0\n") && strstr(fake.last_request, "fw=Badge 1.5.0\n"));
    CHECK(nvs("ota.report") == NULL && nvs("ota.install") == NULL && strstr(badge.screen, "Updated to 1.5.0"));
}

/* The first download step: check, offer, then the scripted download. */
static bb_next update_with(const char *body, size_t len, long content_length, long ending) {
    reset_fake();
    fake.power.source = BB_POWER_EXTERNAL;
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    script(200, content_length, body, len, ending);
    return bb_badge_command(&badge, "check");
}

static void test_failed_downloads(void) {
    static uint8_t corrupt[IMAGE_BYTES];
    memcpy(corrupt, image, IMAGE_BYTES);
    corrupt[100000] ^= 1;
    CHECK(update_with((const char *)corrupt, IMAGE_BYTES, IMAGE_BYTES, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && fake.writes_to[BB_OTA_0] == 0 && printed("@bb md5 result=mismatch"));
    CHECK(strncmp(nvs("ota.report"), "err|1.5.0|MD5 mismatch: the image gives ", 40) == 0 && nvs("ota.install") == NULL);
    CHECK(printed("@bb state path=updateFailed") && printed("Restarting on 1.4.0"));

    CHECK(update_with((const char *)image, 131072, IMAGE_BYTES, BB_HTTP_CUT) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|download cut at 63% (128 of 200 KiB)") == 0);

    CHECK(update_with((const char *)image, 65536, IMAGE_BYTES, BB_HTTP_STALLED) == BB_NEXT_RESTART);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download stalled at 31% (64 of 200 KiB): no data for 5000 ms") == 0);

    /* a Content-Length that is not the offer's Z, and more bytes than Z without one */
    CHECK(update_with((const char *)image, IMAGE_BYTES, IMAGE_BYTES - 1, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|the server sends 204922 bytes; the offer said 204923") == 0);
    CHECK(!fake.erased[BB_OTA_1]);
    static uint8_t longer[IMAGE_BYTES + 10];
    memcpy(longer, image, IMAGE_BYTES);
    CHECK(update_with((const char *)longer, sizeof longer, -1, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|the server sent more than the offered 204923 bytes") == 0);

    /* USB power pulled halfway: the download ends there and the old firmware stays */
    unplug_at = IMAGE_BYTES / 2;
    CHECK(update_with((const char *)image, IMAGE_BYTES, IMAGE_BYTES, BB_HTTP_END) == BB_NEXT_RESTART);
    unplug_at = 0;
    CHECK(fake.switches == 0 && strstr(nvs("ota.report"), "err|1.5.0|external power removed during download at ") == nvs("ota.report"));
    CHECK(fake.read_at < IMAGE_BYTES && printed("@bb state path=updateFailed"));

}

static void test_download_401(void) {
    reset_fake();
    fake.power.source = BB_POWER_EXTERNAL;
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    script_text(401, "V1\nS 0\nX unauthorized device token refused\n.\n");
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(nvs("token") == NULL && printed("@bb token.cleared request=download"));
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download refused: HTTP 401 unauthorized device token refused") == 0);
}

static void test_no_install(void) {
    /* an offer of what runs already, one too big, the battery gate, a 10,000-byte answer */
    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.5.0", BB_OTA_0);
    script_text(200, offer_text);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RUN && strstr(badge.notice, "Ignored offer: 1.5.0 is not newer than 1.5.0"));
    CHECK(fake.answer_next == 1 && !fake.erased[BB_OTA_1] && strcmp(badge.state, "awake.idle") == 0);

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, "V1\nU 1.5.0\nZ 9999999999\nM 0123456789abcdef0123456789abcdef\nP /d\n.\n");
    bb_badge_command(&badge, "check");
    CHECK(strstr(badge.notice, "9999999999 bytes do not fit the 1966080-byte slot") && !fake.erased[BB_OTA_1]);

    reset_fake();
    fake.power = (bb_power){.mv = 3849, .source = BB_POWER_EXTERNAL};
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update 1.5.0 needs 3.85 V or charging (battery at 3.85 V)") == 0 && fake.answer_next == 1);
    CHECK(printed("@bb state path=online.offered"));

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    static char huge[10050];
    memset(huge, 'L', sizeof huge - 1);
    memcpy(huge, "V1\nL ", 5);
    script(200, -1, huge, sizeof huge - 1, BB_HTTP_END);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update check failed: the answer is larger than 4096 bytes") == 0 && !fake.erased[BB_OTA_1]);

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script(200, 500, offer_text, 40, BB_HTTP_CUT);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update check failed: answer cut after 40 bytes") == 0);
    CHECK(strcmp(nvs("contact.fails"), "1") == 0);

    /* on battery alone the radio stays off */
    reset_fake();
    fake.power = (bb_power){.mv = 4100, .source = BB_POWER_BATTERY};
    start("1.4.0", BB_OTA_0);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.state, "awake.plugInPrompt") == 0 && fake.answer_next == 0);
}

static void test_token_and_taps(void) {
    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    CHECK(bb_badge_command(&badge, "tap 04A1B2C3D0") == BB_NEXT_RUN && bb_badge_command(&badge, "tap 04A1B2C3D1") == BB_NEXT_RUN);
    CHECK(printed("@bb tap.queued n=1 uid=04A1B2C3D0 at=1") && printed("@bb tap.queued n=2 uid=04A1B2C3D1"));
    script_text(200, "V1\nS 900\nT 1795000000\nA 1\nR 2 unknown_card\n.\n");
    bb_badge_command(&badge, "sync");
    CHECK(strstr(fake.last_request, "tap=1|04A1B2C3D0|1\ntap=2|04A1B2C3D1|1\n"));
    CHECK(nvs("tap.0") == NULL && nvs("tap.1") == NULL && strcmp(nvs("tap.next"), "3") == 0);
    bb_badge_command(&badge, "tap 04A1B2C3D2");
    CHECK(strstr(nvs("tap.0"), "3|04A1B2C3D2|17950000"));

    /* a full queue (100 taps of the longest UIDs) and a report all go in one sync */
    for (int i = 0; i < 99; i++) bb_badge_command(&badge, "tap 0123456789ABCDEF0123");
    CHECK(bb_badge_command(&badge, "tap 04A1B2C3D3") == BB_NEXT_RUN && strstr(badge.notice, "not saved: 100 taps wait for a sync"));
    nvs_set(NULL, "ota.report", "err|1.5.0|download cut at 51% (983 of 1920 KiB)");
    script_text(200, "V1\nS 900\nT 1795000000\n.\n");
    bb_badge_command(&badge, "sync");
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|download cut at 51%") && strstr(fake.last_request, "tap=102|0123456789ABCDEF0123|"));
    CHECK(strcmp(badge.state, "awake.idle") == 0 && strstr(badge.screen, "Sync failed") == NULL);

    script_text(401, "V1\nS 0\nX unauthorized\n.\n");
    bb_badge_command(&badge, "check");
    CHECK(nvs("token") == NULL && printed("@bb token.cleared request=check") && strcmp(badge.state, "unprovisioned") == 0);
    bb_badge_command(&badge, "check");
    CHECK(printed("@bb refused command=check reason=\"not now: the badge is unprovisioned\""));
    start("1.4.0", BB_OTA_0);
    CHECK(strcmp(badge.state, "unprovisioned") == 0);
}

static void test_interrupted_installs(void) {
    reset_fake();
    nvs_set(NULL, "ota.install", "download|1.5.0|131072|262144|Badge 1.5.0");
    script_text(200, "V1\nS 900\nT 1795000000\nO err|1.5.0|power lost during download after 50% (128 of 256 KiB)\n.\n");
    start("1.4.0", BB_OTA_0);
    CHECK(printed("@bb report.stored report=\"err|1.5.0|power lost during download after 50% (128 of 256 KiB)\""));
    CHECK(printed("@bb report.cleared") && nvs("ota.report") == NULL && strstr(badge.screen, "Update to 1.5.0 failed: power lost during download"));

    reset_fake();
    nvs_set(NULL, "ota.install", "switch|1.5.0|262144|262144|Badge 1.5.0");
    script_text(503, "V1\nS 300\nX server_error\n.\n");
    start("1.4.0", BB_OTA_0);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|power lost during the partition switch") == 0);
    CHECK(strstr(badge.screen, "Sync failed: HTTP 503 server_error") && strcmp(badge.state, "awake.idle") == 0);

    /* a report waits for the next chance, whatever the backoff says */
    start("1.4.0", BB_OTA_0);
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|power lost during the partition switch"));
}

static void test_plugged_in(void) {
    reset_fake();
    fake.power.source = BB_POWER_BATTERY;
    nvs_set(NULL, "ota.report", "err|1.5.0|power lost during download after 25% (64 of 256 KiB)");
    CHECK(start("1.4.0", BB_OTA_0) == BB_NEXT_RUN && strcmp(badge.state, "awake.idle") == 0);
    /* on battery the radio is off: nothing goes out, even with a report waiting */
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 0);
    /* plugged in: the report goes out at once, without a sync being asked for */
    script_text(200, "V1\nS 900\nT 1795000000\nO err|1.5.0|power lost during download after 25% (64 of 256 KiB)\n.\n");
    fake.power.source = BB_POWER_CHARGING;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 1 && strcmp(badge.state, "awake.idle") == 0);
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|power lost during download after 25%") && nvs("ota.report") == NULL);
    /* still plugged in: no second sync */
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 1);
}

static void test_console_and_sleep(void) {
    reset_fake();
    start("1.4.0", BB_OTA_0);
    const char *garbage[] = {"\x1b[A\x1b[B", "plug", "wait 600", "rm -rf /", "tap ';DROP TABLE", "\xff\xfe\xfd", "status extra"};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) CHECK(bb_badge_command(&badge, garbage[i]) == BB_NEXT_RUN);
    CHECK(printed("@bb refused command=plug reason=\"the simulated badge only"));
    CHECK(printed("@bb refused command=\"\\xff\\xfe\\xfd\""));
    CHECK(bb_badge_command(&badge, "status") == BB_NEXT_RUN && printed("@bb status version=1.4.0 slot=ota_0 state=awake.idle mv=3950 power=charging token=yes taps=0"));
    CHECK(bb_badge_command(&badge, "reboot") == BB_NEXT_RESTART);
    fake.now_ms += BB_SLEEP_AFTER_MS - 1;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN);
    fake.now_ms += 1;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_SLEEP && strcmp(badge.state, "asleep") == 0 && printed("@bb screen text=\"\""));
    bb_badge_wake(&badge);
    CHECK(strcmp(badge.state, "wakingUp") == 0 && printed("@bb state path=asleep\r\n@bb screen text=\"\"\r\n@bb state path=wakingUp\r\n"));
    bb_boot_info crashing = {.slot = BB_OTA_1, .version = "1.5.0", .cause = "restart", .crashes = true};
    bb_badge_start(&badge, &platform, &crashing);
    CHECK(strcmp(badge.state, "bricked") == 0 && strstr(badge.screen, "Recovery: reflash over USB"));
}

/* ---- fuzz ---- */

static uint64_t seed;
static uint32_t next_random(void) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (uint32_t)seed;
}

static bool control_free(const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && (unsigned char)s[1] >= 0x80 && (unsigned char)s[1] <= 0x9f)) return false;
    }
    return true;
}

static void fuzz(long rounds) {
    static char text[BB_ANSWER_MAX + 1];
    static const char alphabet[] = "V1\n\n\r .SUBZMPLNXTAOR0123456789abcdef|-/?=\x01\x7f\xc2\x85\xff";
    long offers = 0;
    for (long round = 0; round < rounds; round++) {
        size_t len;
        uint32_t kind = next_random() % 4;
        if (kind == 0) {
            /* random bytes */
            len = next_random() % 300;
            for (size_t i = 0; i < len; i++) text[i] = (char)next_random();
        } else if (kind == 1) {
            /* bytes from the protocol's own alphabet */
            len = next_random() % 300;
            for (size_t i = 0; i < len; i++) text[i] = alphabet[next_random() % (sizeof alphabet - 1)];
        } else {
            /* a valid offer, then cut, flipped, or with bytes put in */
            len = strlen(offer_text);
            memcpy(text, offer_text, len);
            for (uint32_t edits = 1 + next_random() % 3; edits > 0; edits--) {
                uint32_t at = next_random() % (uint32_t)len;
                uint32_t how = next_random() % 3;
                if (how == 0) len = at;
                else if (how == 1) text[at] = (char)(text[at] ^ (1u << (next_random() % 8)));
                else if (len < BB_ANSWER_MAX) {
                    memmove(text + at + 1, text + at, len - at);
                    text[at] = alphabet[next_random() % (sizeof alphabet - 1)];
                    len++;
                }
                if (len == 0) break;
            }
        }
        static char copy[BB_ANSWER_MAX + 1];
        memcpy(copy, text, len);
        bb_response response;
        char why[120];
        if (bb_response_parse(copy, len, &response, why, sizeof why)) {
            CHECK(response.count <= BB_LINE_MAX);
            for (size_t i = 0; i < response.count; i++) CHECK(response.lines[i].letter >= 'A' && response.lines[i].letter <= 'Z' && control_free(response.lines[i].value));
        }
        memcpy(copy, text, len);
        bb_check_answer check;
        bb_check_answer_read(next_random() % 2 ? 200 : 503, copy, len, &check);
        if (check.kind == BB_CHECK_OFFER) {
            offers++;
            CHECK(strlen(check.offer.md5) == 32 && check.offer.path[0] == '/' && control_free(check.offer.display) && check.offer.note_count <= 3);
        }
        memcpy(copy, text, len);
        bb_sync_answer sync;
        bb_sync_answer_read(200, copy, len, &sync);
        CHECK(sync.tap_count <= BB_MAX_TAPS && control_free(sync.echoed));
        /* the console: random command lines, and random values through the event printer */
        char line[BB_CONSOLE_LINE_MAX + 20];
        size_t line_len = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, text, line_len);
        line[line_len] = '\0';
        bb_command command;
        bb_command_parse(line, &command, why, sizeof why);
        bb_event event;
        bb_event_begin(&event, "refused");
        bb_event_field(&event, "command", line);
        CHECK(event.overflow || (control_free(event.text) && strchr(event.text, '\n') == NULL));
    }
    printf("fuzz: %ld rounds, %ld parsed as offers\n", rounds, offers);
    CHECK(offers > 0);
}

int main(int argc, char **argv) {
    if (argc > 1) fake.console = fopen(argv[1], "w");
    long rounds = argc > 2 ? atol(argv[2]) : 200000;
    seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 88172645463325252ull;
    if (seed == 0) seed = 1;
    printf("seed %llu\n", (unsigned long long)seed);
    make_image();
    test_md5();
    test_versions();
    test_request();
    test_response_parser();
    test_cut_answers();
    test_bad_offers();
    test_console_commands();
    test_event_quoting();
    test_happy_update();
    test_failed_downloads();
    test_download_401();
    test_no_install();
    test_token_and_taps();
    test_interrupted_installs();
    test_plugged_in();
    test_console_and_sleep();
    fuzz(rounds);
    if (fake.console) fclose(fake.console);
    printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
