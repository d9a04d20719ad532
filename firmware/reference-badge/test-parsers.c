/*
 * The parsers and printers of the C core on their own: MD5, the version rule, the request
 * builder, the letter-line answer parser (whole, cut, and offers that must be refused), the
 * console command parser and the event printer; then the fuzz of all of them.
 */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "test.h"

void test_md5(void) {
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

void test_versions(void) {
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

void test_request(void) {
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

void test_response_parser(void) {
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
void test_cut_answers(void) {
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

void test_bad_offers(void) {
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

void test_console_commands(void) {
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

void test_event_quoting(void) {
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

void fuzz(long rounds, uint64_t fuzz_seed) {
    seed = fuzz_seed;
    static char text[BB_ANSWER_MAX + 1];
    static const char alphabet[] = "V1\n\n\r .SUBZMPLNXTAOR0123456789abcdef|-/?=\x01\x7f\xc2\x85\xff";
    long offers = 0, signed_offers = 0;
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
            /* a valid offer (unsigned, or signed), then cut, flipped, or with bytes put in */
            const char *valid = kind == 2 ? offer_text : signed_offer_text;
            len = strlen(valid);
            memcpy(text, valid, len);
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
            /* a signature is read only from a G line of exactly a key id, a space and 88 characters of canonical base64 */
            if (check.offer.is_signed) {
                signed_offers++;
                char again[BB_SIGNATURE_BASE64 + 1];
                sodium_bin2base64(again, sizeof again, check.offer.signature, BB_SIGNATURE_BYTES, sodium_base64_VARIANT_ORIGINAL);
                char line[BB_KEY_ID_HEX + BB_SIGNATURE_BASE64 + 4];
                snprintf(line, sizeof line, "%s %s", check.offer.key_id, again);
                static char reread[BB_ANSWER_MAX + 1];
                memcpy(reread, text, len);
                bb_response lines;
                CHECK(bb_response_parse(reread, len, &lines, NULL, 0) && strcmp(bb_response_value(&lines, 'G'), line) == 0);
            }
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
    printf("fuzz: %ld rounds, %ld parsed as offers, %ld of them signed\n", rounds, offers, signed_offers);
    CHECK(offers > 0 && signed_offers > 0);
}
