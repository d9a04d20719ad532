/*
 * Resuming a cut download (issue 23) on the fake platform: the Content-Range parser (cases and a
 * differential fuzz against POSIX regex), the checkpoint NVS keeps with MD5's state, the resume
 * with Range and If-Range, and every answer a resume can get: 206 at the checkpoint, 200 (start
 * over, overwriting), 206 elsewhere or of another total (refused, checkpoint dropped), 416 (from
 * byte 0 at once), a changed offer, and 503 with Retry-After (checkpoint kept, no request before
 * the wait ends).
 */
#define _POSIX_C_SOURCE 200809L
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

void test_content_range(void) {
    bb_content_range range;
    CHECK(bb_content_range_parse("bytes 131072-204922/204923", &range) && range.first == 131072 && range.last == 204922 && range.total == 204923);
    CHECK(bb_content_range_parse("bytes 0-0/1", &range) && range.first == 0 && range.last == 0 && range.total == 1);
    CHECK(bb_content_range_parse(" \tbytes 5-9/10 ", &range) && range.first == 5 && range.total == 10);
    CHECK(bb_content_range_parse("bytes 0000000005-9999999998/9999999999", &range) && range.first == 5 && range.last == 9999999998ull);
    const char *refused[] = {
        NULL, "", "bytes", "bytes */204923", "bytes 0-1/*", "bytes 5-2/10", "bytes 0-10/10", "bytes 00000000005-9/10", "bytes 0-9/99999999999",
        "bytes=0-1/2", "Bytes 0-1/2", "bytes  0-1/2", "bytes 0- 1/2", "bytes 0-1/2x", "bytes -1/2", "bytes 0-1/2 3", "bytes 0-1", "bytes 0-1/",
        "bytes +1-2/3", "bytes 1-2/3\x01",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        bool parsed = bb_content_range_parse(refused[i], &range);
        if (parsed) fprintf(stderr, "Content-Range %s parsed\n", refused[i]);
        CHECK(!parsed);
    }
}

/* An update cut after `bytes` of the image, from a fresh badge on external power: the checkpoint stays in NVS. */
static void cut_at(size_t bytes) {
    reset_fake();
    fake.power.source = BB_POWER_EXTERNAL;
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    script(200, IMAGE_BYTES, (const char *)image, bytes, BB_HTTP_CUT);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
}

/* The boot after the failure (its sync echoes the report) and a check offering `offer`; the download's answer is scripted next. */
static void reboot_and_offer(const char *offer) {
    static char sync[BB_REPORT_MAX + 64];
    snprintf(sync, sizeof sync, "V1\nS 900\nT 1795000000\nO %s\n.\n", nvs("ota.report") ? nvs("ota.report") : "");
    fake.answer_count = fake.answer_next = 0;
    script_text(200, sync);
    start("1.4.0", BB_OTA_0);
    CHECK(nvs("ota.report") == NULL);
    script_text(200, offer);
}

/* `bytes FIRST-LAST/TOTAL` */
static const char *content_range(size_t first, size_t last, size_t total) {
    static char text[8][64];
    static int next;
    char *out = text[next++ % 8];
    snprintf(out, sizeof text[0], "bytes %zu-%zu/%zu", first, last, total);
    return out;
}

void test_resume(void) {
    /* cut at 150,000 bytes: the checkpoint is 131072 (two 64 KiB), with MD5's state there */
    cut_at(150000);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download cut at 73% (146 of 200 KiB)") == 0);
    const char *point = nvs("ota.resume");
    char want[120];
    snprintf(want, sizeof want, "1.5.0|%u|%s|131072|", IMAGE_BYTES, image_md5);
    CHECK(point && strncmp(point, want, strlen(want)) == 0);
    bb_md5 md5;
    bb_md5_init(&md5);
    bb_md5_update(&md5, image, 131072);
    char state[40];
    snprintf(state, sizeof state, "%08x|%08x|%08x|%08x", (unsigned)md5.state[0], (unsigned)md5.state[1], (unsigned)md5.state[2], (unsigned)md5.state[3]);
    CHECK(point && strcmp(point + strlen(want), state) == 0);

    /* the next check asks for the rest and gets exactly it */
    reboot_and_offer(offer_text);
    script(206, IMAGE_BYTES - 131072, (const char *)image + 131072, IMAGE_BYTES - 131072, BB_HTTP_END);
    script_head(content_range(131072, IMAGE_BYTES - 1, IMAGE_BYTES), -1);
    int writes_before = fake.writes_to[BB_OTA_1];
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(fake.range_from[2] == 131072);
    snprintf(want, sizeof want, "\"%s\"", image_md5);
    CHECK(strcmp(fake.if_range[2], want) == 0);
    CHECK(printed("Resuming at 63% (128 of 200 KiB)") && printed("@bb progress bytes=131072 total=204923"));
    CHECK(printed("@bb md5 result=ok") && fake.switches == 1 && fake.boots == BB_OTA_1);
    CHECK(memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0);
    /* only the bytes after the checkpoint were written again: 73,851 bytes in 1 KiB writes */
    CHECK(fake.writes_to[BB_OTA_1] - writes_before == (IMAGE_BYTES - 131072 + 1023) / 1024);
    CHECK(nvs("ota.resume") == NULL && strncmp(nvs("ota.install"), "switch|1.5.0|", 13) == 0);

    /* a checkpoint of another offer (the release replaced between the cut and the resume): from byte 0, no Range */
    cut_at(100000);
    static char other_offer[512];
    snprintf(other_offer, sizeof other_offer, "V1\nU 1.5.0\nB Badge 1.5.0\nZ %u\nM %s\nP /api/badge/ota/download?v=1.5.0\n.\n", IMAGE_BYTES,
             "0123456789abcdef0123456789abcdef");
    reboot_and_offer(other_offer);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(fake.range_from[2] == -1 && printed("checkpoint dropped: the offer changed") && nvs("ota.resume") == NULL);
    CHECK(printed("@bb md5 result=mismatch") && fake.switches == 0);
}

void test_resume_refused(void) {
    /* a proxy that ignores Range: the whole image from byte 0, written over what the slot held */
    cut_at(150000);
    reboot_and_offer(offer_text);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    fake.slots[BB_OTA_1][1000] ^= 0xff; /* a byte before the checkpoint: a start-over must write it again */
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(fake.range_from[2] == 131072 && printed("the server sent the whole image instead of bytes 131072-: starting over from byte 0"));
    CHECK(printed("@bb md5 result=ok") && fake.switches == 1 && memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0);
    CHECK(!printed("@bb progress bytes=131072 total=204923\r\n@bb progress bytes=0"));

    /* a 206 that starts elsewhere, names another total, or has no Content-Range: refused, the checkpoint dropped */
    const char *wrong[] = {content_range(126976, IMAGE_BYTES - 1, IMAGE_BYTES), content_range(131072, IMAGE_BYTES, IMAGE_BYTES + 1),
                           content_range(131072, 200000, IMAGE_BYTES), NULL, "bytes */204923"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        cut_at(150000);
        reboot_and_offer(offer_text);
        script(206, IMAGE_BYTES - 126976, (const char *)image + 126976, IMAGE_BYTES - 126976, BB_HTTP_END);
        script_head(wrong[i], -1);
        CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
        CHECK(fake.switches == 0 && nvs("ota.resume") == NULL && fake.writes_to[BB_OTA_1] == 146);
        CHECK(strncmp(nvs("ota.report"), "err|1.5.0|resume refused: the server sent ", 42) == 0);
        CHECK(strstr(nvs("ota.report"), wrong[i] ? wrong[i] : "a part without Content-Range") && strstr(nvs("ota.report"), "asked for bytes 131072- of 204923"));
    }
    /* and the next attempt asks from byte 0 */
    reboot_and_offer(offer_text);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART && fake.range_from[2] == -1 && fake.switches == 1);

    /* 416: the same download asks again from byte 0 at once */
    cut_at(150000);
    reboot_and_offer(offer_text);
    script_text(416, "");
    script_head("bytes */204923", -1);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(fake.range_from[2] == 131072 && fake.range_from[3] == -1 && printed("the server cannot resume at 131072 (HTTP 416): starting over from byte 0"));
    CHECK(fake.switches == 1 && memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0 && nvs("ota.resume") == NULL);
}

void test_server_busy(void) {
    /* 503 with Retry-After 120 (the body's S 90 is less): the checkpoint stays, the badge rests */
    cut_at(150000);
    reboot_and_offer(offer_text);
    script_text(503, "V1\nS 90\nX busy too many downloads, retry later\n.\n");
    script_head(NULL, 120);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RUN);
    CHECK(strcmp(badge.state, "awake.idle") == 0 && strcmp(badge.notice, "Server busy: the update continues in 120 s") == 0);
    CHECK(nvs("ota.resume") != NULL && nvs("ota.report") == NULL && fake.switches == 0);
    /* Check for Update before the wait ends reaches no server */
    fake.now_ms += 60000;
    int asked = fake.answer_next;
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RUN && fake.answer_next == asked);
    CHECK(strcmp(badge.notice, "Update check failed: the server is busy; it asked to wait 60 s more") == 0);
    /* after it: the check, and the resume from the checkpoint kept */
    fake.now_ms += 60000;
    script_text(200, offer_text);
    script(206, IMAGE_BYTES - 131072, (const char *)image + 131072, IMAGE_BYTES - 131072, BB_HTTP_END);
    script_head(content_range(131072, IMAGE_BYTES - 1, IMAGE_BYTES), -1);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(fake.range_from[asked + 1] == 131072 && fake.switches == 1 && memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0);

    /* an S larger than Retry-After is what the badge waits */
    cut_at(150000);
    reboot_and_offer(offer_text);
    script_text(503, "V1\nS 900\nX busy too many downloads, retry later\n.\n");
    script_head(NULL, 30);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RUN && strcmp(badge.notice, "Server busy: the update continues in 900 s") == 0);

    /* a 503 without Retry-After is a refusal like any other */
    cut_at(150000);
    reboot_and_offer(offer_text);
    script_text(503, "V1\nX unavailable the database is down\n.\n");
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download refused: HTTP 503 unavailable the database is down") == 0 && nvs("ota.resume") != NULL);
}

/* ---- the fuzz: bb_content_range_parse against the regular expression of firmware/badge-protocol.ts ---- */

static uint64_t fuzz_seed;
static uint32_t next_random(void) {
    fuzz_seed ^= fuzz_seed << 13;
    fuzz_seed ^= fuzz_seed >> 7;
    fuzz_seed ^= fuzz_seed << 17;
    return (uint32_t)fuzz_seed;
}

/* what parseContentRange accepts: the trimmed text matches, and FIRST <= LAST < TOTAL */
static bool reference_parse(const regex_t *pattern, const char *text, bb_content_range *out) {
    size_t start = strspn(text, " \t\r\n\v\f"), len = strlen(text);
    while (len > start && strchr(" \t\r\n\v\f", text[len - 1])) len--;
    char trimmed[128];
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)(len - start), text + start);
    regmatch_t match[4];
    if (regexec(pattern, trimmed, 4, match, 0) != 0) return false;
    out->first = strtoull(trimmed + match[1].rm_so, NULL, 10);
    out->last = strtoull(trimmed + match[2].rm_so, NULL, 10);
    out->total = strtoull(trimmed + match[3].rm_so, NULL, 10);
    return out->first <= out->last && out->last < out->total;
}

void fuzz_content_range(long rounds, uint64_t seed) {
    fuzz_seed = seed;
    regex_t pattern;
    if (regcomp(&pattern, "^bytes ([0-9]{1,10})-([0-9]{1,10})/([0-9]{1,10})$", REG_EXTENDED) != 0) {
        CHECK(false);
        return;
    }
    static const char alphabet[] = "bytes -/*0123456789 \t\r\n=,x\x01\xff";
    long accepted = 0;
    for (long round = 0; round < rounds; round++) {
        char text[100];
        size_t len;
        if (next_random() % 2) {
            /* a valid range, then edited: cut, a byte flipped, or a byte put in */
            uint64_t total = 1 + next_random() % 3000000, first = next_random() % total, last = first + next_random() % (total - first);
            len = (size_t)snprintf(text, sizeof text, "bytes %llu-%llu/%llu", (unsigned long long)first, (unsigned long long)last, (unsigned long long)total);
            for (uint32_t edits = next_random() % 3; edits > 0 && len > 0; edits--) {
                size_t at = next_random() % len;
                uint32_t how = next_random() % 3;
                if (how == 0) len = at;
                else if (how == 1) text[at] = (char)(text[at] ^ (1u << (next_random() % 8)));
                else if (len < sizeof text - 2) {
                    memmove(text + at + 1, text + at, len - at);
                    text[at] = alphabet[next_random() % (sizeof alphabet - 1)];
                    len++;
                }
            }
        } else {
            len = next_random() % 40;
            for (size_t i = 0; i < len; i++) text[i] = alphabet[next_random() % (sizeof alphabet - 1)];
        }
        text[len] = '\0';
        bb_content_range got, want;
        bool parsed = bb_content_range_parse(text, &got), expected = reference_parse(&pattern, text, &want);
        CHECK(parsed == expected);
        if (parsed && expected) {
            accepted++;
            CHECK(got.first == want.first && got.last == want.last && got.total == want.total);
        }
    }
    regfree(&pattern);
    printf("%ld of %ld fuzzed Content-Range values parsed\n", accepted, rounds);
}
