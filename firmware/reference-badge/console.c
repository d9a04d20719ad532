/*
 * The badge test console (firmware/README.md "The badge test console", firmware/console.ts):
 * `@bb` event lines the badge prints beside its ESP-IDF log, and the commands it takes.
 * Printed with the core's own formatter, never through ESP_LOG, whose prefix would hide them.
 */
#include <stdio.h>
#include <string.h>

#include "badge.h"

static void put(bb_event *event, const char *text, size_t len) {
    if (event->len + len >= sizeof event->text) {
        event->overflow = true;
        return;
    }
    memcpy(event->text + event->len, text, len);
    event->len += len;
    event->text[event->len] = '\0';
}

void bb_event_begin(bb_event *event, const char *kind) {
    event->len = 0;
    event->text[0] = '\0';
    event->overflow = false;
    put(event, "@bb ", 4);
    put(event, kind, strlen(kind));
}

/* Length of the valid UTF-8 sequence at s, or 0 when the byte there does not start one. */
static size_t utf8_length(const unsigned char *s, size_t left) {
    size_t n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || n > left) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
    }
    return n;
}

/* The code point of a control character at s (C0, DEL, C1), or -1. */
static int control_code(const unsigned char *s, size_t n) {
    if (n == 1 && (s[0] < 0x20 || s[0] == 0x7f)) return s[0];
    if (n == 2 && s[0] == 0xc2 && s[1] <= 0x9f) return s[1];
    return -1;
}

static bool needs_quotes(const char *value) {
    if (value[0] == '\0') return true;
    const unsigned char *s = (const unsigned char *)value;
    size_t left = strlen(value);
    while (left > 0) {
        size_t n = utf8_length(s, left);
        if (n == 0 || control_code(s, n) >= 0 || *s == ' ' || *s == '"' || *s == '\\') return true;
        s += n;
        left -= n;
    }
    return false;
}

void bb_event_field(bb_event *event, const char *key, const char *value) {
    put(event, " ", 1);
    put(event, key, strlen(key));
    put(event, "=", 1);
    if (!needs_quotes(value)) {
        put(event, value, strlen(value));
        return;
    }
    put(event, "\"", 1);
    const unsigned char *s = (const unsigned char *)value;
    size_t left = strlen(value);
    while (left > 0) {
        size_t n = utf8_length(s, left);
        /* a byte that is not UTF-8 (console garbage echoed back) is shown as \xHH too */
        int code = n == 0 ? s[0] : control_code(s, n);
        char escaped[8];
        if (n == 1 && (*s == '"' || *s == '\\')) {
            escaped[0] = '\\';
            escaped[1] = (char)*s;
            put(event, escaped, 2);
        } else if (code == '\n' || code == '\r' || code == '\t') {
            put(event, code == '\n' ? "\\n" : code == '\r' ? "\\r" : "\\t", 2);
        } else if (code >= 0) {
            snprintf(escaped, sizeof escaped, "\\x%02x", (unsigned)code & 0xffu);
            put(event, escaped, 4);
        } else {
            put(event, (const char *)s, n);
        }
        if (n == 0) n = 1;
        s += n;
        left -= n;
    }
    put(event, "\"", 1);
}

void bb_event_field_u64(bb_event *event, const char *key, uint64_t value) {
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
    bb_event_field(event, key, digits);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/* a plain decimal such as 30, 0.5 or 40: its whole part in *whole (capped), false if not one */
static bool decimal(const char *word, unsigned long *whole, bool *nonzero) {
    const char *p = word;
    *whole = 0;
    *nonzero = false;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (*whole < 1000) *whole = *whole * 10 + (unsigned long)(*p - '0');
        if (*p != '0') *nonzero = true;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return false;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (*p != '0') *nonzero = true;
        }
    }
    return *p == '\0';
}

static bool is_uid(const char *word) {
    size_t n = strlen(word);
    if (n < 8 || n > BB_UID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        if (!((word[i] >= '0' && word[i] <= '9') || (word[i] >= 'A' && word[i] <= 'F'))) return false;
    }
    return true;
}

bb_parse bb_command_parse(const char *line, bb_command *out, char *why, size_t why_cap) {
    /* words, split on whitespace; more than three is always wrong */
    char copy[BB_CONSOLE_LINE_MAX];
    if (strlen(line) >= sizeof copy) {
        snprintf(why, why_cap, "the line is longer than %u bytes", BB_CONSOLE_LINE_MAX - 1);
        return BB_PARSE_REFUSED;
    }
    strcpy(copy, line);
    char *words[3];
    size_t count = 0;
    for (char *p = copy; *p;) {
        while (is_space(*p)) *p++ = '\0';
        if (!*p) break;
        if (count == 3) {
            snprintf(why, why_cap, "too many words; a command is a name and at most one argument");
            return BB_PARSE_REFUSED;
        }
        words[count++] = p;
        while (*p && !is_space(*p)) p++;
    }
    if (count == 0) return BB_PARSE_EMPTY;
    static const struct {
        const char *name;
        bb_command_name command;
    } names[] = {
        {"check", BB_CMD_CHECK}, {"sync", BB_CMD_SYNC},     {"tap", BB_CMD_TAP},         {"reboot", BB_CMD_REBOOT},
        {"status", BB_CMD_STATUS}, {"plug", BB_CMD_PLUG},   {"unplug", BB_CMD_UNPLUG},   {"wait", BB_CMD_WAIT},
        {"brownout", BB_CMD_BROWNOUT}, {"rest", BB_CMD_REST},
    };
    size_t known = sizeof names / sizeof names[0];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(words[0], names[i].name) == 0) known = i;
    }
    if (known == sizeof names / sizeof names[0]) {
        snprintf(why, why_cap, "unknown command; the commands are check, sync, tap, reboot, status, plug, unplug, wait, brownout, rest");
        return BB_PARSE_REFUSED;
    }
    out->name = names[known].command;
    out->uid[0] = '\0';
    const char *arg = count > 1 ? words[1] : NULL;
    unsigned long whole;
    bool nonzero;
    switch (out->name) {
    case BB_CMD_TAP:
        if (count != 2 || !is_uid(arg)) {
            snprintf(why, why_cap, "tap takes one card UID, 8 to 20 upper-case hex digits, such as tap 04A1B2C3D0");
            return BB_PARSE_REFUSED;
        }
        strcpy(out->uid, arg);
        return BB_PARSE_OK;
    case BB_CMD_WAIT:
        if (count != 2 || !decimal(arg, &whole, &nonzero) || !nonzero) {
            snprintf(why, why_cap, "wait takes a number of seconds above 0, such as wait 30");
            return BB_PARSE_REFUSED;
        }
        return BB_PARSE_OK;
    case BB_CMD_BROWNOUT:
        if (count != 2 || (strcmp(arg, "switch") != 0 && (!decimal(arg, &whole, &nonzero) || whole >= 100))) {
            snprintf(why, why_cap, "brownout takes a download percent from 0 to below 100, or switch, such as brownout 40");
            return BB_PARSE_REFUSED;
        }
        return BB_PARSE_OK;
    case BB_CMD_REST:
        if (count > 2 || (count == 2 && strcmp(arg, "powered") != 0)) {
            snprintf(why, why_cap, "rest takes nothing or powered");
            return BB_PARSE_REFUSED;
        }
        return BB_PARSE_OK;
    default:
        if (count > 1) {
            snprintf(why, why_cap, "%s takes no arguments", names[known].name);
            return BB_PARSE_REFUSED;
        }
        return BB_PARSE_OK;
    }
}
