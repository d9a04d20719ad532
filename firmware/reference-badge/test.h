/*
 * What the unit tests of the C core share (test.c runs them): the CHECK macro and its counters,
 * the fake platform (flash and NVS in memory, the server's answers scripted, the console kept),
 * the badge under test, the image a scripted offer names, and the test groups.
 */
#ifndef BB_TEST_H
#define BB_TEST_H

#include <stdio.h>

#include "badge.h"

extern int test_failures;
extern int test_checks;
#define CHECK(cond)                                                                 \
    do {                                                                            \
        test_checks++;                                                              \
        if (!(cond)) {                                                              \
            test_failures++;                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* ---- the fake platform (test-platform.c) ---- */

typedef struct {
    int status;
    long content_length; /* -1: no Content-Length */
    const char *body;
    size_t body_len;
    long ending; /* what read returns after the body: BB_HTTP_END, BB_HTTP_CUT, BB_HTTP_STALLED */
    bool unreachable;
    const char *content_range; /* NULL: no Content-Range */
    long retry_after_s;        /* -1: no Retry-After */
} scripted;

#define NVS_KEYS 160
typedef struct {
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
    long range_from[8];      /* per request: the first byte its Range asked for, -1 without Range */
    char if_range[8][36];    /* per request: its If-Range, quoted */
    const char *typed[4]; /* console lines the badge hears while it is busy */
    int typed_count, typed_next;
} fake_platform;

extern fake_platform fake;
extern const bb_platform platform;
extern bb_badge badge;
/* after this many body bytes USB power goes (0: never); reset_fake keeps it, so a test can set it before an update */
extern size_t unplug_at;

/* A fresh badge at 1.4.0 on ota_0, provisioned, charging; the console file keeps everything. */
void reset_fake(void);
/* The next answer the fake server gives: status, Content-Length (-1: none), body, what follows it. */
void script(int status, long content_length, const char *body, size_t len, long ending);
void script_text(int status, const char *body);
/* Content-Range and Retry-After (-1: none) on the answer scripted last. */
void script_head(const char *content_range, long retry_after_s);
bb_next start(const char *version, bb_slot slot);
bool printed(const char *text);
/* The fake NVS: a key's value (NULL when unset), and setting one as the badge would. */
const char *nvs(const char *key);
bool nvs_set(void *ctx, const char *key, const char *value);

/* ---- an image and its offer ---- */

#define IMAGE_BYTES (200 * 1024 + 123)
extern uint8_t image[IMAGE_BYTES];
extern char image_md5[33];
extern char offer_text[512];
void make_image(void);
/* the release key that signs the image in the tests, and the same offer with its G line */
extern uint8_t release_public_key[BB_PUBLIC_KEY_BYTES], release_secret_key[64];
extern char release_key_id[BB_KEY_ID_HEX + 1];
extern char signed_offer_text[640];
/* `G <key id> <base64>` of a signature of `len` bytes of `data` by `secret_key` into g[128] */
void signature_line(const uint8_t *data, size_t len, const uint8_t *secret_key, const uint8_t *public_key, char g[128]);
/* A fresh start trusting `count` release keys (32 bytes each, one after the other), as an image built with them would. */
bb_next start_trusting(const char *version, bb_slot slot, const uint8_t *keys, unsigned count);

/* ---- the test groups ---- */

/* test-parsers.c: MD5, versions, requests, answers, offers, console commands and events, and the fuzz */
void test_md5(void);
void test_versions(void);
void test_request(void);
void test_response_parser(void);
void test_cut_answers(void);
void test_bad_offers(void);
void test_console_commands(void);
void test_event_quoting(void);
void fuzz(long rounds, uint64_t seed);

/* test-badge.c: the badge against the fake platform */
void test_happy_update(void);
void test_failed_downloads(void);
void test_download_401(void);
void test_no_install(void);
void test_token_and_taps(void);
void test_interrupted_installs(void);
void test_plugged_in(void);
void test_console_and_sleep(void);
/* test-signature.c: the G line, and signed updates verified, refused and rotated */
void test_signature_line(void);
void test_signed_updates(void);

/* test-resume.c: a cut download resumed from the NVS checkpoint, and every answer a resume can get */
void test_content_range(void);
void test_resume(void);
void test_resume_refused(void);
void test_server_busy(void);
void fuzz_content_range(long rounds, uint64_t seed);

#endif
