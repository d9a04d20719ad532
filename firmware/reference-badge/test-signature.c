/*
 * Signed releases on the fake platform: the G line read as the server writes it and refused
 * otherwise; a badge trusting release keys announces sig=ed25519, verifies the whole written image
 * before the switch, and refuses a tampered image (its MD5 recomputed), an unknown key or an
 * unsigned offer into updateFailed with a report; a badge without keys updates as before; and a
 * rotation: the old key's release that trusts both, then the new key's release.
 */
#include <string.h>

#include <sodium.h>

#include "test.h"

static char text[1024];

void test_signature_line(void) {
    make_image();
    char g[128], id[BB_KEY_ID_HEX + 1];
    uint8_t signature[BB_SIGNATURE_BYTES];
    signature_line(image, IMAGE_BYTES, release_secret_key, release_public_key, g);
    CHECK(bb_signature_parse(g + 2, id, signature) && strcmp(id, release_key_id) == 0);
    CHECK(bb_signature_verify(image, IMAGE_BYTES, signature, release_public_key));
    CHECK(!bb_signature_verify(image, IMAGE_BYTES - 1, signature, release_public_key));
    const char *base64 = g + 2 + BB_KEY_ID_HEX + 1;
    const char *bad[] = {"", "1e0b53aa36bdb94d", base64, "1E0B53AA36BDB94D x", "1e0b53aa36bdb94d  x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!bb_signature_parse(bad[i], id, signature));
    /* one character short, one too many, not base64, stray bits in the last character (not canonical), no padding */
    snprintf(text, sizeof text, "%s %.*s=", release_key_id, (int)BB_SIGNATURE_BASE64 - 2, base64);
    CHECK(!bb_signature_parse(text, id, signature));
    snprintf(text, sizeof text, "%s %sA", release_key_id, base64);
    CHECK(!bb_signature_parse(text, id, signature));
    snprintf(text, sizeof text, "%s %.*s!!==", release_key_id, (int)BB_SIGNATURE_BASE64 - 4, base64);
    CHECK(!bb_signature_parse(text, id, signature));
    snprintf(text, sizeof text, "%s %.*sB==", release_key_id, (int)BB_SIGNATURE_BASE64 - 3, base64);
    CHECK(!bb_signature_parse(text, id, signature));
    snprintf(text, sizeof text, "%s %.*sAAA", release_key_id, (int)BB_SIGNATURE_BASE64 - 3, base64);
    CHECK(!bb_signature_parse(text, id, signature));
    /* a byte with its top bit set where a letter belongs (libsodium alone would read 0xD0 as 'P') */
    snprintf(text, sizeof text, "%s %s", release_key_id, base64);
    text[BB_KEY_ID_HEX + 1 + 10] = (char)(text[BB_KEY_ID_HEX + 1 + 10] | 0x80);
    CHECK(!bb_signature_parse(text, id, signature));
    /* an offer with such a line is a failed check, as a bad M is */
    snprintf(text, sizeof text, "V1\nU 1.5.0\nZ 1024\nM %s\nP /x\nG %s not-base64\n.\n", image_md5, release_key_id);
    bb_check_answer answer;
    bb_check_answer_read(200, text, strlen(text), &answer);
    CHECK(answer.kind == BB_CHECK_FAILED && strcmp(answer.message, "offer of 1.5.0 has no valid G (signature) line: not a 16-hex-digit key id and an 88-character base64 signature") == 0);
    /* the keys an image trusts */
    static uint8_t with_keys[4096];
    uint8_t keys[BB_TRUSTED_KEYS][BB_PUBLIC_KEY_BYTES];
    char hex[BB_PUBLIC_KEY_BYTES * 2 + 1];
    sodium_bin2hex(hex, sizeof hex, release_public_key, BB_PUBLIC_KEY_BYTES);
    int at = snprintf((char *)with_keys + 100, sizeof with_keys - 100, "BADGEBENCH:ED25519_KEY=%s", hex);
    CHECK(at > 0 && bb_trusted_keys_scan(with_keys, sizeof with_keys, keys) == 1 && memcmp(keys[0], release_public_key, BB_PUBLIC_KEY_BYTES) == 0);
    CHECK(bb_trusted_keys_scan(image, IMAGE_BYTES, keys) == 0);
}

/* A badge trusting `keys` checks (answered with `offer`) and downloads `served`. */
static bb_next signed_update(const uint8_t *keys, unsigned count, const char *offer, const uint8_t *served) {
    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start_trusting("1.4.0", BB_OTA_0, keys, count);
    script_text(200, offer);
    script(200, IMAGE_BYTES, (const char *)served, IMAGE_BYTES, BB_HTTP_END);
    return bb_badge_command(&badge, "check");
}

void test_signed_updates(void) {
    make_image();
    const uint8_t *release = release_public_key;
    uint8_t other_public[BB_PUBLIC_KEY_BYTES], other_secret[64];
    uint8_t seed[crypto_sign_SEEDBYTES] = {7};
    crypto_sign_seed_keypair(other_public, other_secret, seed);
    char other_id[BB_KEY_ID_HEX + 1];
    bb_key_id(other_public, other_id);

    /* signed by a key it holds: announced, verified, switched */
    CHECK(signed_update(release, 1, signed_offer_text, image) == BB_NEXT_RESTART);
    CHECK(strstr(fake.last_request, "chg=1\nsig=ed25519\n") != NULL);
    CHECK(printed("@bb state path=online.verifying") && fake.switches == 1 && fake.boots == BB_OTA_1);

    /* tampered, its MD5 recomputed: the MD5 matches, the signature does not; the old slot stays */
    static uint8_t tampered[IMAGE_BYTES];
    memcpy(tampered, image, IMAGE_BYTES);
    tampered[100000] ^= 1;
    bb_md5 md5;
    char tampered_md5[33];
    bb_md5_init(&md5);
    bb_md5_update(&md5, tampered, IMAGE_BYTES);
    bb_md5_hex(&md5, tampered_md5);
    static char mitm[640];
    snprintf(mitm, sizeof mitm, "%s", signed_offer_text);
    memcpy(strstr(mitm, image_md5), tampered_md5, 32);
    CHECK(signed_update(release, 1, mitm, tampered) == BB_NEXT_RESTART);
    CHECK(printed("@bb md5 result=ok") && printed("@bb state path=online.verifying") && fake.switches == 0 && fake.boots == BB_OTA_0);
    snprintf(text, sizeof text, "err|1.5.0|the signature by key %s does not verify over the %u-byte image", release_key_id, IMAGE_BYTES);
    CHECK(strcmp(nvs("ota.report"), text) == 0 && strcmp(badge.state, "restarting") == 0);

    /* signed by a key it does not hold: refused before the download */
    char g[128];
    signature_line(image, IMAGE_BYTES, other_secret, other_public, g);
    static char unknown[640];
    snprintf(unknown, sizeof unknown, "V1\nS 3600\nU 1.5.0\nZ %u\nM %s\nP /api/badge/ota/download?v=1.5.0\n%s\n.\n", IMAGE_BYTES, image_md5, g);
    CHECK(signed_update(release, 1, unknown, image) == BB_NEXT_RESTART);
    snprintf(text, sizeof text, "err|1.5.0|1.5.0 is signed by key %s, which this badge does not hold (it holds %s)", other_id, release_key_id);
    CHECK(strcmp(nvs("ota.report"), text) == 0 && fake.writes_to[BB_OTA_1] == 0 && fake.switches == 0);

    /* unsigned, to a badge that verifies: refused */
    CHECK(signed_update(release, 1, offer_text, image) == BB_NEXT_RESTART);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|1.5.0 is not signed; this badge installs signed releases only") == 0 && fake.switches == 0);

    /* a badge without keys (firmware before signed releases): announces nothing, verifies nothing */
    CHECK(signed_update(NULL, 0, signed_offer_text, image) == BB_NEXT_RESTART);
    CHECK(strstr(fake.last_request, "sig=") == NULL && !printed("online.verifying") && fake.switches == 1);

    /* rotation: trusting both, the new key's release is accepted; its image then trusts the new key only */
    uint8_t both[2 * BB_PUBLIC_KEY_BYTES];
    memcpy(both, release_public_key, BB_PUBLIC_KEY_BYTES);
    memcpy(both + BB_PUBLIC_KEY_BYTES, other_public, BB_PUBLIC_KEY_BYTES);
    CHECK(signed_update(both, 2, unknown, image) == BB_NEXT_RESTART && fake.switches == 1 && fake.boots == BB_OTA_1);
    CHECK(signed_update(other_public, 1, signed_offer_text, image) == BB_NEXT_RESTART && fake.switches == 0);
    snprintf(text, sizeof text, "err|1.5.0|1.5.0 is signed by key %s, which this badge does not hold (it holds %s)", release_key_id, other_id);
    CHECK(strcmp(nvs("ota.report"), text) == 0);
}
