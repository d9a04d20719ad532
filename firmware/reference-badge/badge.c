/*
 * The badge firmware's behaviour (SPEC 3.4; badge-sim/README.md "The machine"), written the way
 * firmware is: one task that does what the wearer asked from start to end, printing each state
 * of the badge statechart on the console as it enters it, so the rig's model oracle can follow.
 *
 * The order of an install is ESP-IDF's (../../shared/notes/esp-idf-ota-api.md): the install
 * record goes to NVS before the inactive slot is erased, every buffer is written and hashed as
 * it arrives, and otadata is switched only after the MD5 matched. A power cut at any point leaves
 * NVS and flash so that the next start knows what happened and reports it.
 *
 * This file holds the start, the NVS record of an install, the screen, reports, the tap queue,
 * the sync and idling into sleep; the update (check, download, switch) is badge-update.c and the
 * console's commands badge-console.c, with what the three share declared in badge-core.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "badge-core.h"

#define FIRST_BACKOFF_MS 60000ull
#define MAX_BACKOFF_MS 3600000ull

static void write_line(bb_badge *b, const char *text) {
    b->hw->console_write(b->hw->ctx, text, strlen(text));
    b->hw->console_write(b->hw->ctx, "\r\n", 2);
}

void badge_emit(bb_badge *b) {
    if (!b->event.overflow) write_line(b, b->event.text);
}

/* An ESP-IDF style log line: noise to the rig, useful to a person. */
void badge_log_line(bb_badge *b, const char *tag, const char *format, ...) {
    char text[BB_TEXT_MAX + 64];
    int at = snprintf(text, sizeof text, "I (%llu) %s: ", (unsigned long long)b->hw->uptime_ms(b->hw->ctx), tag);
    va_list args;
    va_start(args, format);
    vsnprintf(text + at, sizeof text - (size_t)at, format, args);
    va_end(args);
    for (char *p = text; *p; p++) {
        if (*p == '\r' || *p == '\n') *p = ' ';
    }
    write_line(b, text);
}

const char *badge_slot_name(bb_slot slot) { return slot == BB_OTA_0 ? "ota_0" : "ota_1"; }

/* A battery badge cannot use its radio: anything but battery power counts (the bench supply, USB). */
bool badge_on_external_power(bb_badge *b) { return b->hw->power(b->hw->ctx).source != BB_POWER_BATTERY; }
bool badge_is_awake(bb_badge *b) { return strncmp(b->state, "awake.", 6) == 0; }


/* ---- NVS helpers ---- */

bool badge_nvs_get(bb_badge *b, const char *key, char *out, size_t cap) {
    out[0] = '\0';
    return b->hw->nvs_get(b->hw->ctx, key, out, cap);
}

void badge_nvs_set(bb_badge *b, const char *key, const char *value) {
    if (!b->hw->nvs_set(b->hw->ctx, key, value)) badge_log_line(b, "nvs", "cannot commit %s", key);
}

static void nvs_erase(bb_badge *b, const char *key) { b->hw->nvs_erase(b->hw->ctx, key); }

static long long nvs_number(bb_badge *b, const char *key, long long fallback) {
    char text[32];
    if (!badge_nvs_get(b, key, text, sizeof text)) return fallback;
    char *end;
    long long value = strtoll(text, &end, 10);
    return *end == '\0' && end != text ? value : fallback;
}

static void nvs_set_number(bb_badge *b, const char *key, long long value) {
    char text[32];
    snprintf(text, sizeof text, "%lld", value);
    badge_nvs_set(b, key, text);
}

bool badge_has_token(bb_badge *b) {
    char token[BB_TOKEN_MAX];
    return badge_nvs_get(b, KEY_TOKEN, token, sizeof token) && token[0] != '\0';
}

/* the badge's wall clock: its RTC plus the offset the last sync's T line set (1970 until then) */
static long long unix_ms(bb_badge *b) {
    return (long long)b->hw->rtc_ms(b->hw->ctx) + nvs_number(b, KEY_CLOCK_OFFSET, 0);
}

/* ---- the install record: stage|version|bytes|total|display ---- */

typedef struct {
    char stage[16];
    char version[BB_VERSION_MAX + 1];
    unsigned long long bytes, total;
} install_record;

void badge_save_install(bb_badge *b, const char *stage, unsigned long long bytes) {
    char text[BB_VERSION_MAX + BB_DISPLAY_MAX + 64];
    snprintf(text, sizeof text, "%s|%s|%llu|%llu|%s", stage, b->offer.version, bytes, (unsigned long long)b->offer.size, b->offer.display);
    badge_nvs_set(b, KEY_INSTALL, text);
}

static bool read_install(bb_badge *b, install_record *out) {
    char text[BB_VERSION_MAX + BB_DISPLAY_MAX + 64];
    if (!badge_nvs_get(b, KEY_INSTALL, text, sizeof text)) return false;
    char *stage = strtok(text, "|");
    char *version = strtok(NULL, "|");
    char *bytes = strtok(NULL, "|");
    char *total = strtok(NULL, "|");
    if (!stage || !version || !bytes || !total || strlen(stage) >= sizeof out->stage || strlen(version) >= sizeof out->version) return false;
    strcpy(out->stage, stage);
    strcpy(out->version, version);
    out->bytes = strtoull(bytes, NULL, 10);
    out->total = strtoull(total, NULL, 10);
    return out->total > 0;
}

/* `51% (983 of 1920 KiB)` */
void badge_progress_text(char *out, size_t cap, unsigned long long bytes, unsigned long long total) {
    snprintf(out, cap, "%llu%% (%llu of %llu KiB)", total ? bytes * 100 / total : 0, bytes / 1024, total / 1024);
}

/* ---- the screen: what screenOf in badge-sim/model/badge-machine.ts shows in each state ---- */

void badge_show(bb_badge *b) {
    char text[sizeof b->screen];
    const char *s = b->state;
    const char *running = b->boot.version;
    char progress[64];
    if (strcmp(s, "booting") == 0) {
        snprintf(text, sizeof text, "Starting...");
    } else if (strcmp(s, "awake.idle") == 0 || strcmp(s, "awake.opportunity") == 0) {
        snprintf(text, sizeof text, "Badge %s - ready%s%s", running, b->notice[0] ? "\n" : "", b->notice);
    } else if (strcmp(s, "awake.plugInPrompt") == 0) {
        snprintf(text, sizeof text, "Plug in to reach the server\nThe radio only works on external power");
    } else if (strcmp(s, "online.syncing") == 0) {
        snprintf(text, sizeof text, "Syncing...%s%s", b->notice[0] ? "\n" : "", b->notice);
    } else if (strcmp(s, "online.checking") == 0 || strcmp(s, "online.offered") == 0) {
        snprintf(text, sizeof text, "Checking for update...");
    } else if (strcmp(s, "online.downloading") == 0) {
        /* a resume's notice (where it resumes, or why it starts over) stays under the progress */
        badge_progress_text(progress, sizeof progress, b->received, b->offer.size);
        snprintf(text, sizeof text, "Updating to %s\nDownloading %s%s%s", b->offer.version, progress, b->notice[0] ? "\n" : "", b->notice);
    } else if (strcmp(s, "online.verifying") == 0) {
        snprintf(text, sizeof text, "Updating to %s\nChecking the signature", b->offer.version);
    } else if (strcmp(s, "online.switching") == 0) {
        snprintf(text, sizeof text, "Updating to %s\nInstalling, keep the badge plugged in", b->offer.version);
    } else if (strcmp(s, "updateFailed") == 0) {
        snprintf(text, sizeof text, "Update to %s failed\n%s\nRestarting on %s", b->offer.version, b->notice, running);
    } else if (strcmp(s, "unprovisioned") == 0) {
        snprintf(text, sizeof text, "Not provisioned\nThis badge has no device token; ask IT to set it up again");
    } else if (strcmp(s, "bricked") == 0) {
        snprintf(text, sizeof text, "Firmware %s crashes at start\nRecovery: reflash over USB", running);
    } else if (strcmp(s, "restarting") == 0) {
        snprintf(text, sizeof text, "Restarting...");
    } else {
        text[0] = '\0';
    }
    if (strcmp(text, b->screen) == 0) return;
    strcpy(b->screen, text);
    bb_event_begin(&b->event, "screen");
    bb_event_field(&b->event, "text", text);
    badge_emit(b);
}

void badge_enter(bb_badge *b, const char *state) {
    snprintf(b->state, sizeof b->state, "%s", state);
    bb_event_begin(&b->event, "state");
    bb_event_field(&b->event, "path", state);
    badge_emit(b);
    badge_show(b);
}

void badge_notify(bb_badge *b, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(b->notice, sizeof b->notice, format, args);
    va_end(args);
}

static void print_report(bb_badge *b, const char *kind, const char *report) {
    bb_event_begin(&b->event, kind);
    bb_event_field(&b->event, "report", report);
    badge_emit(b);
}

/* What the wearer is told about a stored report. */
static void notify_report(bb_badge *b, const char *report) {
    char copy[BB_REPORT_MAX];
    snprintf(copy, sizeof copy, "%s", report);
    char *first = strchr(copy, '|');
    if (!first) return;
    *first = '\0';
    char *version = first + 1;
    char *second = strchr(version, '|');
    if (second) *second = '\0';
    if (strcmp(copy, "ok") == 0) badge_notify(b, "Updated to %s", version);
    else badge_notify(b, "Update to %s failed: %s. Still running %s", version, second ? second + 1 : "", b->boot.version);
}

void badge_store_report(bb_badge *b, const char *report) {
    badge_nvs_set(b, KEY_REPORT, report);
    nvs_erase(b, KEY_INSTALL);
    print_report(b, "report.stored", report);
}

void badge_forget_token(bb_badge *b, const char *request) {
    nvs_erase(b, KEY_TOKEN);
    bb_event_begin(&b->event, "token.cleared");
    bb_event_field(&b->event, "request", request);
    badge_emit(b);
}

void badge_contact_succeeded(bb_badge *b, long recheck_s) {
    nvs_set_number(b, KEY_CONTACT_AFTER, unix_ms(b) + (recheck_s > 0 ? recheck_s * 1000LL : 0));
    nvs_erase(b, KEY_FAILURES);
}

/* backs off 1, 2, 4 ... minutes up to an hour, or longer when the server's S says so */
void badge_contact_failed(bb_badge *b, long recheck_s) {
    long long failures = nvs_number(b, KEY_FAILURES, 0) + 1;
    unsigned long long backoff = failures > 6 ? MAX_BACKOFF_MS : FIRST_BACKOFF_MS << (failures - 1);
    if (backoff > MAX_BACKOFF_MS) backoff = MAX_BACKOFF_MS;
    unsigned long long asked = recheck_s > 0 ? (unsigned long long)recheck_s * 1000ull : 0;
    nvs_set_number(b, KEY_FAILURES, failures);
    nvs_set_number(b, KEY_CONTACT_AFTER, unix_ms(b) + (long long)(asked > backoff ? asked : backoff));
}

/* ---- the tap queue ---- */

size_t badge_queued_taps(bb_badge *b) {
    size_t count = 0;
    char key[16], value[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (badge_nvs_get(b, key, value, sizeof value)) count++;
    }
    return count;
}

bool badge_queue_tap(bb_badge *b, const char *uid) {
    char key[16], value[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (badge_nvs_get(b, key, value, sizeof value)) continue;
        long long n = nvs_number(b, KEY_TAP_NEXT, 1);
        long long at = unix_ms(b) / 1000;
        snprintf(value, sizeof value, "%lld|%s|%lld", n, uid, at);
        badge_nvs_set(b, key, value);
        nvs_set_number(b, KEY_TAP_NEXT, n + 1);
        bb_event_begin(&b->event, "tap.queued");
        bb_event_field_u64(&b->event, "n", (uint64_t)n);
        bb_event_field(&b->event, "uid", uid);
        bb_event_field_u64(&b->event, "at", at > 0 ? (uint64_t)at : 0);
        badge_emit(b);
        return true;
    }
    return false;
}

/* ---- talking to the server ---- */

void badge_add_status(bb_badge *b) {
    char display[BB_VERSION_MAX + BB_DISPLAY_MAX + 4];
    const char *fw = b->boot.version;
    /* the display string of the installed version, kept as version|display */
    if (badge_nvs_get(b, KEY_DISPLAY, display, sizeof display)) {
        char *bar = strchr(display, '|');
        if (bar && (size_t)(bar - display) == strlen(b->boot.version) && strncmp(display, b->boot.version, (size_t)(bar - display)) == 0) fw = bar + 1;
    }
    bb_power power = b->hw->power(b->hw->ctx);
    char volts[16];
    snprintf(volts, sizeof volts, "%u.%03u", (unsigned)(power.mv / 1000), (unsigned)(power.mv % 1000));
    bb_request_init(&b->request);
    bb_request_add(&b->request, "v", "1");
    bb_request_add(&b->request, "sv", b->boot.version);
    bb_request_add(&b->request, "fw", fw);
    bb_request_add(&b->request, "bat", volts);
    bb_request_add(&b->request, "chg", power.source == BB_POWER_CHARGING ? "1" : "0");
}

/* A badge whose image trusts release keys announces that it verifies signatures (check requests only). */
void badge_announce_signatures(bb_badge *b) {
    if (b->boot.trusted_key_count > 0) bb_request_add(&b->request, "sig", "ed25519");
}

/*
 * POSTs the request and reads the answer into b->answer. Returns the HTTP status, or 0 when the
 * exchange failed (the reason in `why`): unreachable, cut, stalled, or larger than BB_ANSWER_MAX.
 */
int badge_post(bb_badge *b, const char *path, size_t *len, char *why, size_t why_cap) {
    char token[BB_TOKEN_MAX];
    *len = 0;
    if (!badge_nvs_get(b, KEY_TOKEN, token, sizeof token)) token[0] = '\0';
    if (b->request.broken) {
        snprintf(why, why_cap, "the request could not be built");
        return 0;
    }
    bb_http_head head;
    badge_log_line(b, "http", "POST %s", path);
    if (!b->hw->http_open(b->hw->ctx, "POST", path, token, b->request.text, b->request.len, NULL, &head, why, why_cap)) return 0;
    int status = head.status;
    for (;;) {
        if (*len == BB_ANSWER_MAX) {
            uint8_t probe;
            long more = b->hw->http_read(b->hw->ctx, &probe, 1);
            if (more == BB_HTTP_END) break;
            b->hw->http_close(b->hw->ctx);
            if (more > 0) snprintf(why, why_cap, "the answer is larger than %u bytes", BB_ANSWER_MAX);
            else snprintf(why, why_cap, more == BB_HTTP_STALLED ? "no answer for %u ms" : "answer cut after %u bytes",
                          more == BB_HTTP_STALLED ? (unsigned)b->hw->stall_timeout_ms : (unsigned)*len);
            return 0;
        }
        long n = b->hw->http_read(b->hw->ctx, (uint8_t *)b->answer + *len, BB_ANSWER_MAX - *len);
        if (n > 0) {
            *len += (size_t)n;
            continue;
        }
        b->hw->http_close(b->hw->ctx);
        if (n == BB_HTTP_END) break;
        if (n == BB_HTTP_STALLED) snprintf(why, why_cap, "no answer for %u ms", (unsigned)b->hw->stall_timeout_ms);
        else snprintf(why, why_cap, "answer cut after %u bytes", (unsigned)*len);
        return 0;
    }
    b->hw->http_close(b->hw->ctx);
    b->answer[*len] = '\0';
    return status;
}

void badge_sync_now(bb_badge *b) {
    badge_enter(b, "online.syncing");
    badge_add_status(b);
    char report[BB_REPORT_MAX];
    bool has_report = badge_nvs_get(b, KEY_REPORT, report, sizeof report);
    if (has_report) bb_request_add(&b->request, "ota", report);
    char key[16], tap[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (badge_nvs_get(b, key, tap, sizeof tap)) bb_request_add(&b->request, "tap", tap);
    }
    if (has_report) print_report(b, "report.sent", report);
    size_t len;
    char why[120];
    int status = badge_post(b, "/api/badge/sync", &len, why, sizeof why);
    if (status == 0) {
        bb_sync_answer *failed = &b->sync;
        failed->kind = BB_SYNC_FAILED;
        failed->recheck_s = -1;
        snprintf(failed->message, sizeof failed->message, "%s", why);
    } else {
        bb_sync_answer_read(status, b->answer, len, &b->sync);
    }
    bb_sync_answer *answer = &b->sync;
    b->contact_due = false;
    if (answer->kind == BB_SYNC_UNAUTHORIZED) {
        badge_forget_token(b, "sync");
        badge_enter(b, "unprovisioned");
        return;
    }
    if (answer->kind == BB_SYNC_FAILED) {
        badge_log_line(b, "sync", "failed: %s", answer->message);
        badge_contact_failed(b, answer->recheck_s);
        badge_notify(b, "Sync failed: %s", answer->message);
        badge_enter(b, "awake.idle");
        return;
    }
    nvs_set_number(b, KEY_CLOCK_OFFSET, (long long)answer->server_unix_s * 1000 - (long long)b->hw->rtc_ms(b->hw->ctx));
    if (has_report && strcmp(answer->echoed, report) == 0) {
        nvs_erase(b, KEY_REPORT);
        print_report(b, "report.cleared", report);
    }
    for (size_t t = 0; t < answer->tap_count; t++) {
        for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
            snprintf(key, sizeof key, TAP_KEY, i);
            if (!badge_nvs_get(b, key, tap, sizeof tap)) continue;
            if (strtoull(tap, NULL, 10) == answer->taps[t].n) nvs_erase(b, key);
        }
    }
    badge_contact_succeeded(b, answer->recheck_s);
    badge_enter(b, "awake.idle");
}

/* ---- start, idle, sleep ---- */

bb_next bb_badge_start(bb_badge *b, const bb_platform *hw, const bb_boot_info *boot) {
    memset(b, 0, sizeof *b);
    b->hw = hw;
    b->boot = *boot;
    /* libsodium picks its implementations once, before the first signature check */
    if (!bb_signature_init()) badge_log_line(b, "ota", "sodium_init failed");
    bb_event_begin(&b->event, "boot");
    bb_event_field(&b->event, "slot", badge_slot_name(boot->slot));
    bb_event_field(&b->event, "version", boot->version);
    bb_event_field(&b->event, "cause", boot->cause);
    badge_emit(b);
    badge_enter(b, "booting");
    b->last_input_ms = hw->uptime_ms(hw->ctx);
    if (boot->crashes) {
        badge_enter(b, "bricked");
        return BB_NEXT_RUN;
    }
    if (!badge_has_token(b)) {
        badge_enter(b, "unprovisioned");
        return BB_NEXT_RUN;
    }
    char report[BB_REPORT_MAX];
    install_record install;
    if (read_install(b, &install)) {
        /* an install was under way when the badge last stopped: its outcome is known now */
        if (strcmp(install.version, boot->version) == 0) {
            snprintf(report, sizeof report, "ok|%s", install.version);
        } else if (strcmp(install.stage, "switch") == 0) {
            snprintf(report, sizeof report, "err|%s|power lost during the partition switch", install.version);
        } else {
            char at[64];
            badge_progress_text(at, sizeof at, install.bytes, install.total);
            snprintf(report, sizeof report, "err|%s|power lost during download after %s", install.version, at);
        }
        badge_store_report(b, report);
    }
    bool pending = badge_nvs_get(b, KEY_REPORT, report, sizeof report);
    if (pending) notify_report(b, report);
    b->contact_due = pending || unix_ms(b) >= nvs_number(b, KEY_CONTACT_AFTER, 0);
    b->external = badge_on_external_power(b);
    if (b->external && b->contact_due) badge_sync_now(b);
    else badge_enter(b, "awake.idle");
    return BB_NEXT_RUN;
}

bb_next bb_badge_idle(bb_badge *b) {
    bool plugged = badge_on_external_power(b) && !b->external;
    b->external = badge_on_external_power(b);
    if (plugged && badge_is_awake(b)) {
        /* awake.opportunity: a pending report, or a contact due, goes out now */
        b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
        char report[BB_REPORT_MAX];
        if (badge_nvs_get(b, KEY_REPORT, report, sizeof report) || unix_ms(b) >= nvs_number(b, KEY_CONTACT_AFTER, 0)) badge_sync_now(b);
        return BB_NEXT_RUN;
    }
    bool can_sleep = badge_is_awake(b) || strcmp(b->state, "unprovisioned") == 0;
    if (!can_sleep || b->hw->uptime_ms(b->hw->ctx) - b->last_input_ms < BB_SLEEP_AFTER_MS) return BB_NEXT_RUN;
    badge_enter(b, "asleep");
    return BB_NEXT_SLEEP;
}

void bb_badge_wake(bb_badge *b) { badge_enter(b, "wakingUp"); }
