/*
 * The fake platform the unit tests run the badge on: flash slots and NVS in memory, the clock
 * moved by the badge's own delays, the server's answers scripted (test.h, `script`), everything
 * the badge prints kept in memory and in the console file test.c was given.
 */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "test.h"

fake_platform fake;

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
bool nvs_set(void *ctx, const char *key, const char *value) {
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
static bool ota_resume(void *ctx, bb_slot slot, uint32_t size, uint32_t from) {
    (void)ctx;
    if (slot == fake.boots || size > BB_SLOT_BYTES || from > size || from % 4096 != 0) return false;
    memset(fake.slots[slot] + from, 0xff, size - from);
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
static const uint8_t *ota_map(void *ctx, bb_slot slot, uint32_t size) {
    (void)ctx;
    return size <= BB_SLOT_BYTES ? fake.slots[slot] : NULL;
}
static bool http_open(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len, const bb_range_request *range,
                      bb_http_head *head, char *why, size_t why_cap) {
    (void)ctx;
    (void)method;
    (void)token;
    snprintf(fake.last_path, sizeof fake.last_path, "%s", path);
    if (body) snprintf(fake.last_request, sizeof fake.last_request, "%.*s", (int)body_len, body);
    if (fake.answer_next == fake.answer_count) {
        snprintf(why, why_cap, "nothing scripted");
        return false;
    }
    fake.range_from[fake.answer_next] = range ? (long)range->from : -1;
    if (range) snprintf(fake.if_range[fake.answer_next], sizeof fake.if_range[0], "\"%s\"", range->md5);
    fake.open = &fake.answers[fake.answer_next++];
    if (fake.open->unreachable) {
        snprintf(why, why_cap, "connection refused");
        return false;
    }
    head->status = fake.open->status;
    head->content_length = fake.open->content_length;
    snprintf(head->content_range, sizeof head->content_range, "%s", fake.open->content_range ? fake.open->content_range : "");
    head->retry_after_s = fake.open->retry_after_s;
    fake.read_at = 0;
    return true;
}
/* after this many body bytes USB power goes (0: never); reset_fake keeps it, so update_with can use it */
size_t unplug_at;

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

const bb_platform platform = {
    .ctx = NULL, .console_write = console_write, .console_poll = console_poll, .uptime_ms = uptime_ms, .rtc_ms = rtc_ms, .delay_ms = delay_ms, .power = power,
    .nvs_get = nvs_get, .nvs_set = nvs_set, .nvs_erase = nvs_erase, .ota_begin = ota_begin, .ota_resume = ota_resume, .ota_write = ota_write,
    .ota_set_boot = ota_set_boot, .ota_map = ota_map, .http_open = http_open, .http_read = http_read, .http_close = http_close, .stall_timeout_ms = 5000,
};

bb_badge badge;

void reset_fake(void) {
    FILE *console = fake.console;
    memset(&fake, 0, sizeof fake);
    fake.console = console;
    fake.power = (bb_power){.mv = 3950, .source = BB_POWER_CHARGING};
    fake.boots = BB_OTA_0;
    fake.now_ms = 1000;
    nvs_set(NULL, "token", "dtk_test_abc");
}

void script(int status, long content_length, const char *body, size_t len, long ending) {
    fake.answers[fake.answer_count++] = (scripted){status, content_length, body, len, ending, false, NULL, -1};
}
void script_head(const char *content_range, long retry_after_s) {
    fake.answers[fake.answer_count - 1].content_range = content_range;
    fake.answers[fake.answer_count - 1].retry_after_s = retry_after_s;
}
void script_text(int status, const char *body) { script(status, (long)strlen(body), body, strlen(body), BB_HTTP_END); }

bb_next start_trusting(const char *version, bb_slot slot, const uint8_t *keys, unsigned count) {
    bb_boot_info boot = {.slot = slot, .cause = "power-on", .crashes = false, .trusted_key_count = count};
    snprintf(boot.version, sizeof boot.version, "%s", version);
    for (unsigned i = 0; i < count; i++) memcpy(boot.trusted_keys[i], keys + i * BB_PUBLIC_KEY_BYTES, BB_PUBLIC_KEY_BYTES);
    fake.boots = slot;
    return bb_badge_start(&badge, &platform, &boot);
}

bb_next start(const char *version, bb_slot slot) {
    bb_boot_info boot = {.slot = slot, .cause = "power-on", .crashes = false};
    snprintf(boot.version, sizeof boot.version, "%s", version);
    fake.boots = slot;
    return bb_badge_start(&badge, &platform, &boot);
}

bool printed(const char *text) { return strstr(fake.console_text, text) != NULL; }
const char *nvs(const char *key) {
    int i = nvs_find(key);
    return i < 0 ? NULL : fake.values[i];
}

/* ---- an image and its offer ---- */

uint8_t image[IMAGE_BYTES];
char image_md5[33];
char offer_text[512];
uint8_t release_public_key[BB_PUBLIC_KEY_BYTES], release_secret_key[64];
char release_key_id[BB_KEY_ID_HEX + 1];
char signed_offer_text[640];

void signature_line(const uint8_t *data, size_t len, const uint8_t *secret_key, const uint8_t *public_key, char g[128]) {
    uint8_t signature[BB_SIGNATURE_BYTES];
    crypto_sign_detached(signature, NULL, data, len, secret_key);
    char id[BB_KEY_ID_HEX + 1], base64[BB_SIGNATURE_BASE64 + 1];
    bb_key_id(public_key, id);
    sodium_bin2base64(base64, sizeof base64, signature, sizeof signature, sodium_base64_VARIANT_ORIGINAL);
    snprintf(g, 128, "G %s %s", id, base64);
}

void make_image(void) {
    uint32_t x = 12345;
    for (size_t i = 0; i < IMAGE_BYTES; i++) image[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    bb_md5 md5;
    bb_md5_init(&md5);
    bb_md5_update(&md5, image, IMAGE_BYTES);
    bb_md5_hex(&md5, image_md5);
    snprintf(offer_text, sizeof offer_text,
             "V1\nS 3600\nU 1.5.0\nB Badge 1.5.0\nZ %u\nM %s\nP /api/badge/ota/download?v=1.5.0\nL Faster card reads\n.\n", IMAGE_BYTES, image_md5);
    uint8_t seed[crypto_sign_SEEDBYTES] = {42};
    crypto_sign_seed_keypair(release_public_key, release_secret_key, seed);
    bb_key_id(release_public_key, release_key_id);
    char g[128];
    signature_line(image, IMAGE_BYTES, release_secret_key, release_public_key, g);
    snprintf(signed_offer_text, sizeof signed_offer_text,
             "V1\nS 3600\nU 1.5.0\nB Badge 1.5.0\nZ %u\nM %s\nP /api/badge/ota/download?v=1.5.0\n%s\nL Faster card reads\n.\n", IMAGE_BYTES, image_md5, g);
}
