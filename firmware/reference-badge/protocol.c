/*
 * The badge's text messages (SPEC 4.8, firmware/README.md "Badge messages"): the version rule,
 * the key=value request builder, and the letter-line answer parser with what the check and the
 * sync answers mean. The same rules as firmware/version.ts, firmware/line-codec.ts,
 * firmware/badge-protocol.ts and badge-sim/network/badge-client.ts, so the server and both
 * badges read a message alike.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "badge.h"

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
static bool is_ident(char c) { return is_digit(c) || is_lower(c) || (c >= 'A' && c <= 'Z') || c == '-'; }

/* 0, or 1-9 digits without a leading zero; advances *at */
static bool read_number(const char **at, uint32_t *out) {
    const char *p = *at;
    if (!is_digit(*p)) return false;
    if (*p == '0') {
        *out = 0;
        *at = p + 1;
        return !is_digit(p[1]);
    }
    uint32_t value = 0;
    int digits = 0;
    while (is_digit(*p)) {
        if (++digits > 9) return false;
        value = value * 10 + (uint32_t)(*p - '0');
        p++;
    }
    *out = value;
    *at = p;
    return true;
}

/* dot-separated identifiers of 0-9 A-Z a-z - */
static bool read_identifiers(const char **at) {
    const char *p = *at;
    for (;;) {
        if (!is_ident(*p)) return false;
        while (is_ident(*p)) p++;
        if (*p != '.') break;
        p++;
    }
    *at = p;
    return true;
}

bool bb_version_parse(const char *text, bb_version *out) {
    if (strlen(text) > BB_VERSION_MAX) return false;
    const char *p = text;
    bb_version v;
    if (!read_number(&p, &v.major) || *p++ != '.') return false;
    if (!read_number(&p, &v.minor) || *p++ != '.') return false;
    if (!read_number(&p, &v.patch)) return false;
    if (*p == '-' && (++p, !read_identifiers(&p))) return false;
    if (*p == '+' && (++p, !read_identifiers(&p))) return false;
    if (*p != '\0') return false;
    if (out) *out = v;
    return true;
}

int bb_version_compare(const bb_version *a, const bb_version *b) {
    if (a->major != b->major) return a->major < b->major ? -1 : 1;
    if (a->minor != b->minor) return a->minor < b->minor ? -1 : 1;
    if (a->patch != b->patch) return a->patch < b->patch ? -1 : 1;
    return 0;
}

/*
 * Length of the control character at s (C0, DEL, or a UTF-8 encoded C1 U+0080-U+009F), or 0.
 * No badge text may hold one: values end up on the screen and in fixed buffers.
 */
static size_t control_at(const char *s, size_t left) {
    unsigned char c = (unsigned char)s[0];
    if (c < 0x20 || c == 0x7f) return 1;
    if (c == 0xc2 && left > 1 && (unsigned char)s[1] >= 0x80 && (unsigned char)s[1] <= 0x9f) return 2;
    return 0;
}

static bool has_control(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (control_at(s + i, len - i)) return true;
    }
    return false;
}

void bb_request_init(bb_request *request) {
    request->len = 0;
    request->text[0] = '\0';
    request->broken = false;
}

bool bb_request_add(bb_request *request, const char *key, const char *value) {
    size_t key_len = strlen(key);
    size_t value_len = strlen(value);
    bool key_ok = key_len >= 1 && key_len <= 16 && is_lower(key[0]);
    for (size_t i = 1; key_ok && i < key_len; i++) key_ok = is_lower(key[i]) || is_digit(key[i]) || key[i] == '_';
    if (!key_ok || has_control(value, value_len) || request->len + key_len + value_len + 2 >= sizeof request->text) {
        request->broken = true;
        return false;
    }
    char *at = request->text + request->len;
    memcpy(at, key, key_len);
    at[key_len] = '=';
    memcpy(at + key_len + 1, value, value_len);
    at[key_len + 1 + value_len] = '\n';
    request->len += key_len + value_len + 2;
    request->text[request->len] = '\0';
    return true;
}

static void say(char *why, size_t cap, const char *format, ...) {
    if (!why || cap == 0) return;
    va_list args;
    va_start(args, format);
    vsnprintf(why, cap, format, args);
    va_end(args);
}

bool bb_response_parse(char *text, size_t len, bb_response *out, char *why, size_t why_cap) {
    out->count = 0;
    out->version = 0;
    if (len == 0) {
        say(why, why_cap, "the answer is empty");
        return false;
    }
    text[len] = '\0';
    size_t body = text[len - 1] == '\n' ? len - 1 : len;
    /* split on \n (a \r before it belongs to the line end), checking each line */
    size_t start = 0;
    unsigned line = 0;
    bool ended = false;
    while (start <= body) {
        size_t end = start;
        while (end < body && text[end] != '\n') end++;
        size_t stop = end;
        if (stop > start && text[stop - 1] == '\r') stop--;
        text[stop] = '\0';
        const char *content = text + start;
        size_t content_len = stop - start;
        line++;
        if (memchr(content, '\0', content_len)) {
            say(why, why_cap, "line %u holds a NUL byte", line);
            return false;
        }
        if (ended) {
            say(why, why_cap, "line %u follows the final '.' line", line);
            return false;
        }
        if (line == 1) {
            const char *p = content + 1;
            uint32_t version = 0;
            if (content[0] != 'V' || !is_digit(*p)) {
                say(why, why_cap, "line 1 is not V<number> such as V1");
                return false;
            }
            for (int digits = 0; is_digit(*p); p++) {
                if (++digits > 9) break;
                version = version * 10 + (uint32_t)(*p - '0');
            }
            if (*p != '\0') {
                say(why, why_cap, "line 1 is not V<number> such as V1");
                return false;
            }
            out->version = version;
        } else if (content_len == 1 && content[0] == '.') {
            ended = true;
        } else {
            bool shaped = content[0] >= 'A' && content[0] <= 'Z' && (content_len == 1 || content[1] == ' ');
            if (!shaped) {
                say(why, why_cap, "line %u is not '<LETTER> <value>'", line);
                return false;
            }
            const char *value = content_len == 1 ? content + 1 : content + 2;
            if (has_control(value, strlen(value))) {
                say(why, why_cap, "line %u holds a control character", line);
                return false;
            }
            if (out->count == BB_LINE_MAX) {
                say(why, why_cap, "more than %u lines in one answer", BB_LINE_MAX);
                return false;
            }
            out->lines[out->count].letter = content[0];
            out->lines[out->count].value = value;
            out->count++;
        }
        start = end + 1;
    }
    if (!ended) {
        say(why, why_cap, "the answer was cut: no final '.' line after %u lines", line);
        return false;
    }
    return true;
}

const char *bb_response_value(const bb_response *response, char letter) {
    for (size_t i = 0; i < response->count; i++) {
        if (response->lines[i].letter == letter) return response->lines[i].value;
    }
    return NULL;
}

/* all digits, 1 to `max` of them */
static bool digits_only(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max) return false;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) return false;
    }
    return true;
}

static uint64_t to_u64(const char *digits) {
    uint64_t value = 0;
    for (; *digits; digits++) value = value * 10 + (uint64_t)(*digits - '0');
    return value;
}

/* copies at most cap-1 bytes, never cutting a UTF-8 character in two */
static void copy_text(char *out, size_t cap, const char *text) {
    size_t n = strlen(text);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) n--;
    }
    memcpy(out, text, n);
    out[n] = '\0';
}

static long recheck_of(const bb_response *response) {
    const char *s = bb_response_value(response, 'S');
    return s && digits_only(s, 9) ? (long)to_u64(s) : -1;
}

static bool is_md5(const char *s) {
    if (strlen(s) != 32) return false;
    for (int i = 0; i < 32; i++) {
        if (!is_digit(s[i]) && !(s[i] >= 'a' && s[i] <= 'f')) return false;
    }
    return true;
}

/* Reads the offer lines; false with the reason in out->message. */
static bool read_offer(const bb_response *response, bb_check_answer *out) {
    const char *version = bb_response_value(response, 'U');
    const char *display = bb_response_value(response, 'B');
    const char *size = bb_response_value(response, 'Z');
    const char *md5 = bb_response_value(response, 'M');
    const char *path = bb_response_value(response, 'P');
    const char *signature = bb_response_value(response, 'G');
    bb_offer *offer = &out->offer;
    char shown[BB_VERSION_MAX + 1];
    copy_text(shown, sizeof shown, version);
    if (strlen(version) > BB_VERSION_MAX) {
        snprintf(out->message, sizeof out->message, "the offered version %s... is longer than %u characters", shown, BB_VERSION_MAX);
        return false;
    }
    if (!size || !digits_only(size, 10)) {
        snprintf(out->message, sizeof out->message, "offer of %s has no valid Z (size) line", shown);
        return false;
    }
    if (!md5 || !is_md5(md5)) {
        snprintf(out->message, sizeof out->message, "offer of %s has no valid M (MD5) line", shown);
        return false;
    }
    if (!path || path[0] != '/' || strlen(path) > BB_PATH_MAX) {
        snprintf(out->message, sizeof out->message, "offer of %s has no valid P (path) line", shown);
        return false;
    }
    if (display && strlen(display) > BB_DISPLAY_MAX) {
        snprintf(out->message, sizeof out->message, "offer of %s has a B (display) line longer than %u bytes", shown, BB_DISPLAY_MAX);
        return false;
    }
    if (signature && !bb_signature_parse(signature, offer->key_id, offer->signature)) {
        snprintf(out->message, sizeof out->message, "offer of %s has no valid G (signature) line: not a %u-hex-digit key id and an %u-character base64 signature",
                 shown, BB_KEY_ID_HEX, BB_SIGNATURE_BASE64);
        return false;
    }
    offer->is_signed = signature != NULL;
    copy_text(offer->version, sizeof offer->version, version);
    copy_text(offer->display, sizeof offer->display, display ? display : version);
    offer->size = to_u64(size);
    copy_text(offer->md5, sizeof offer->md5, md5);
    copy_text(offer->path, sizeof offer->path, path);
    offer->note_count = 0;
    for (size_t i = 0; i < response->count && offer->note_count < 3; i++) {
        if (response->lines[i].letter == 'L') copy_text(offer->notes[offer->note_count++], BB_NOTE_MAX + 1, response->lines[i].value);
    }
    return true;
}

/*
 * What the check and sync readers share: parse the answer and take its S line; for a status other
 * than 200, the message is "HTTP <status>" and the X line. True when a 200 answer's lines follow.
 */
static bool read_answer_head(int status, char *body, size_t len, bb_response *response, long *recheck_s, char *message, size_t cap) {
    char why[120];
    if (!bb_response_parse(body, len, response, why, sizeof why)) {
        snprintf(message, cap, "unreadable answer (HTTP %d): %s", status, why);
        return false;
    }
    *recheck_s = recheck_of(response);
    if (status == 200) return true;
    const char *refusal = bb_response_value(response, 'X');
    char shown[120];
    copy_text(shown, sizeof shown, refusal ? refusal : "");
    snprintf(message, cap, "HTTP %d%s%s", status, shown[0] ? " " : "", shown);
    return false;
}

void bb_check_answer_read(int status, char *body, size_t len, bb_check_answer *out) {
    memset(out, 0, sizeof *out);
    out->recheck_s = -1;
    if (status == 401) {
        out->kind = BB_CHECK_UNAUTHORIZED;
        return;
    }
    bb_response response;
    out->kind = BB_CHECK_FAILED;
    if (!read_answer_head(status, body, len, &response, &out->recheck_s, out->message, sizeof out->message)) return;
    const char *refusal = bb_response_value(&response, 'X');
    if (refusal) {
        const char *space = strchr(refusal, ' ');
        size_t code_len = space ? (size_t)(space - refusal) : strlen(refusal);
        if (code_len >= sizeof out->code) code_len = sizeof out->code - 1;
        memcpy(out->code, refusal, code_len);
        out->code[code_len] = '\0';
        copy_text(out->message, sizeof out->message, space ? space + 1 : "");
        out->kind = BB_CHECK_REFUSED;
        return;
    }
    const char *latest = bb_response_value(&response, 'N');
    if (latest) {
        copy_text(out->latest, sizeof out->latest, latest);
        out->kind = BB_CHECK_CURRENT;
        return;
    }
    if (!bb_response_value(&response, 'U')) {
        snprintf(out->message, sizeof out->message, "the answer has no U, N or X line");
        return;
    }
    if (read_offer(&response, out)) out->kind = BB_CHECK_OFFER;
}

void bb_sync_answer_read(int status, char *body, size_t len, bb_sync_answer *out) {
    memset(out, 0, sizeof *out);
    out->recheck_s = -1;
    if (status == 401) {
        out->kind = BB_SYNC_UNAUTHORIZED;
        return;
    }
    bb_response response;
    out->kind = BB_SYNC_FAILED;
    if (!read_answer_head(status, body, len, &response, &out->recheck_s, out->message, sizeof out->message)) return;
    const char *time = bb_response_value(&response, 'T');
    if (!time || !digits_only(time, 12)) {
        snprintf(out->message, sizeof out->message, "the sync answer has no T line");
        return;
    }
    out->server_unix_s = to_u64(time);
    const char *echoed = bb_response_value(&response, 'O');
    if (echoed) copy_text(out->echoed, sizeof out->echoed, echoed);
    for (size_t i = 0; i < response.count && out->tap_count < BB_MAX_TAPS; i++) {
        char letter = response.lines[i].letter;
        if (letter != 'A' && letter != 'R') continue;
        const char *value = response.lines[i].value;
        size_t digits = 0;
        while (is_digit(value[digits])) digits++;
        if (digits == 0 || digits > 9 || (value[digits] != '\0' && value[digits] != ' ')) continue;
        char number[10];
        memcpy(number, value, digits);
        number[digits] = '\0';
        out->taps[out->tap_count].n = (uint32_t)to_u64(number);
        out->taps[out->tap_count].accepted = letter == 'A';
        out->tap_count++;
    }
    out->kind = BB_SYNC_SYNCED;
}

/* ---- Content-Range (issue 23) ---- */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/* 1 to 10 digits at *at, up to `stop` */
static bool read_range_number(const char **at, char stop, uint64_t *out) {
    const char *start = *at;
    uint64_t value = 0;
    while (is_digit(**at) && *at - start < 10) value = value * 10 + (uint64_t)(*(*at)++ - '0');
    if (*at == start || **at != stop) return false;
    *out = value;
    return true;
}

bool bb_content_range_parse(const char *text, bb_content_range *out) {
    if (!text) return false;
    while (is_blank(*text)) text++;
    size_t len = strlen(text);
    while (len > 0 && is_blank(text[len - 1])) len--;
    if (len < 6 || strncmp(text, "bytes ", 6) != 0) return false;
    const char *at = text + 6;
    const char *end = text + len;
    bb_content_range range;
    if (!read_range_number(&at, '-', &range.first)) return false;
    at++;
    if (!read_range_number(&at, '/', &range.last)) return false;
    at++;
    /* the total runs to the end of the trimmed text */
    const char *start = at;
    range.total = 0;
    while (at < end && is_digit(*at) && at - start < 10) range.total = range.total * 10 + (uint64_t)(*at++ - '0');
    if (at == start || at != end) return false;
    if (range.first > range.last || range.last >= range.total) return false;
    *out = range;
    return true;
}
