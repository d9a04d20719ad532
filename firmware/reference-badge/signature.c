/*
 * Signed releases (firmware/signature.ts): key ids, the G line, and the Ed25519 check over the
 * whole image, with libsodium (ESP-IDF ships it as a component; Debian as libsodium-dev). No
 * Ed25519 of our own: crypto_sign_verify_detached, crypto_hash_sha256 and sodium_base642bin.
 */
#include <string.h>

#include <sodium.h>

#include "badge.h"

#define TRUSTED_KEY_MARKER "BADGEBENCH:ED25519_KEY="

bool bb_signature_init(void) { return sodium_init() >= 0; }

void bb_key_id(const uint8_t key[BB_PUBLIC_KEY_BYTES], char out[BB_KEY_ID_HEX + 1]) {
    uint8_t digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(digest, key, BB_PUBLIC_KEY_BYTES);
    sodium_bin2hex(out, BB_KEY_ID_HEX + 1, digest, BB_KEY_ID_HEX / 2);
}

static bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
static bool is_base64(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/'; }

bool bb_signature_parse(const char *value, char key_id[BB_KEY_ID_HEX + 1], uint8_t signature[BB_SIGNATURE_BYTES]) {
    if (strlen(value) != BB_KEY_ID_HEX + 1 + BB_SIGNATURE_BASE64 || value[BB_KEY_ID_HEX] != ' ') return false;
    for (unsigned i = 0; i < BB_KEY_ID_HEX; i++)
        if (!is_lower_hex(value[i])) return false;
    const char *base64 = value + BB_KEY_ID_HEX + 1;
    /* the alphabet checked here: libsodium 1.0.18 reads a byte with its top bit set as the ASCII letter below it (the fuzz found 0xD0 taken for 'P') */
    for (unsigned i = 0; i < BB_SIGNATURE_BASE64 - 2; i++)
        if (!is_base64(base64[i])) return false;
    if (base64[BB_SIGNATURE_BASE64 - 2] != '=' || base64[BB_SIGNATURE_BASE64 - 1] != '=') return false;
    size_t decoded = 0;
    const char *end = NULL;
    /* libsodium refuses padding that is missing or bits left over: only canonical base64 decodes */
    if (sodium_base642bin(signature, BB_SIGNATURE_BYTES, base64, BB_SIGNATURE_BASE64, NULL, &decoded, &end, sodium_base64_VARIANT_ORIGINAL) != 0) return false;
    if (decoded != BB_SIGNATURE_BYTES || end != base64 + BB_SIGNATURE_BASE64) return false;
    memcpy(key_id, value, BB_KEY_ID_HEX);
    key_id[BB_KEY_ID_HEX] = '\0';
    return true;
}

bool bb_signature_verify(const uint8_t *image, size_t len, const uint8_t signature[BB_SIGNATURE_BYTES], const uint8_t key[BB_PUBLIC_KEY_BYTES]) {
    return crypto_sign_verify_detached(signature, image, len, key) == 0;
}

unsigned bb_trusted_keys_scan(const uint8_t *image, size_t len, uint8_t keys[BB_TRUSTED_KEYS][BB_PUBLIC_KEY_BYTES]) {
    const size_t marker = strlen(TRUSTED_KEY_MARKER);
    const size_t hex = BB_PUBLIC_KEY_BYTES * 2;
    unsigned count = 0;
    for (size_t at = 0; count < BB_TRUSTED_KEYS && at + marker + hex <= len; at++) {
        if (memcmp(image + at, TRUSTED_KEY_MARKER, marker) != 0) continue;
        size_t decoded = 0;
        if (sodium_hex2bin(keys[count], BB_PUBLIC_KEY_BYTES, (const char *)image + at + marker, hex, NULL, &decoded, NULL) == 0 && decoded == BB_PUBLIC_KEY_BYTES) count++;
    }
    return count;
}
