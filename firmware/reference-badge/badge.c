/*
 * The badge firmware's behaviour (SPEC 3.4; badge-sim/README.md "The machine"), written the way
 * firmware is: one task that does what the wearer asked from start to end, printing each state
 * of the badge statechart on the console as it enters it, so the rig's model oracle can follow.
 *
 * The order of an install is ESP-IDF's (../../shared/notes/esp-idf-ota-api.md): the install
 * record goes to NVS before the inactive slot is erased, every buffer is written and hashed as
 * it arrives, and otadata is switched only after the MD5 matched. A power cut at any point leaves
 * NVS and flash so that the next start knows what happened and reports it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "badge.h"

/* NVS keys (at most 15 characters, as nvs_set_str wants) */
#define KEY_TOKEN "token"
#define KEY_REPORT "ota.report"
#define KEY_INSTALL "ota.install"
#define KEY_DISPLAY "fw.display"
#define KEY_CONTACT_AFTER "contact.after"
#define KEY_FAILURES "contact.fails"
#define KEY_CLOCK_OFFSET "clock.offset"
#define KEY_TAP_NEXT "tap.next"
/* taps live in tap.0 ... tap.99, one per key, so queueing one is one NVS commit */
#define TAP_KEY "tap.%u"

#define FIRST_BACKOFF_MS 60000ull
#define MAX_BACKOFF_MS 3600000ull

static void write_line(bb_badge *b, const char *text) {
    b->hw->console_write(b->hw->ctx, text, strlen(text));
    b->hw->console_write(b->hw->ctx, "\r\n", 2);
}

static void emit(bb_badge *b) {
    if (!b->event.overflow) write_line(b, b->event.text);
}

/* An ESP-IDF style log line: noise to the rig, useful to a person. */
static void log_line(bb_badge *b, const char *tag, const char *format, ...) {
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

static const char *slot_name(bb_slot slot) { return slot == BB_OTA_0 ? "ota_0" : "ota_1"; }

static void serve_console(bb_badge *b);

/* ---- NVS helpers ---- */

static bool nvs_get(bb_badge *b, const char *key, char *out, size_t cap) {
    out[0] = '\0';
    return b->hw->nvs_get(b->hw->ctx, key, out, cap);
}

static void nvs_set(bb_badge *b, const char *key, const char *value) {
    if (!b->hw->nvs_set(b->hw->ctx, key, value)) log_line(b, "nvs", "cannot commit %s", key);
}

static void nvs_erase(bb_badge *b, const char *key) { b->hw->nvs_erase(b->hw->ctx, key); }

static long long nvs_number(bb_badge *b, const char *key, long long fallback) {
    char text[32];
    if (!nvs_get(b, key, text, sizeof text)) return fallback;
    char *end;
    long long value = strtoll(text, &end, 10);
    return *end == '\0' && end != text ? value : fallback;
}

static void nvs_set_number(bb_badge *b, const char *key, long long value) {
    char text[32];
    snprintf(text, sizeof text, "%lld", value);
    nvs_set(b, key, text);
}

static bool has_token(bb_badge *b) {
    char token[BB_TOKEN_MAX];
    return nvs_get(b, KEY_TOKEN, token, sizeof token) && token[0] != '\0';
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

static void save_install(bb_badge *b, const char *stage, unsigned long long bytes) {
    char text[BB_VERSION_MAX + BB_DISPLAY_MAX + 64];
    snprintf(text, sizeof text, "%s|%s|%llu|%llu|%s", stage, b->offer.version, bytes, (unsigned long long)b->offer.size, b->offer.display);
    nvs_set(b, KEY_INSTALL, text);
}

static bool read_install(bb_badge *b, install_record *out) {
    char text[BB_VERSION_MAX + BB_DISPLAY_MAX + 64];
    if (!nvs_get(b, KEY_INSTALL, text, sizeof text)) return false;
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
static void progress_text(char *out, size_t cap, unsigned long long bytes, unsigned long long total) {
    snprintf(out, cap, "%llu%% (%llu of %llu KiB)", total ? bytes * 100 / total : 0, bytes / 1024, total / 1024);
}

/* ---- the screen: what screenOf in badge-sim/badge-machine.ts shows in each state ---- */

static void show(bb_badge *b) {
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
        progress_text(progress, sizeof progress, b->received, b->offer.size);
        snprintf(text, sizeof text, "Updating to %s\nDownloading %s", b->offer.version, progress);
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
    emit(b);
}

static void enter(bb_badge *b, const char *state) {
    snprintf(b->state, sizeof b->state, "%s", state);
    bb_event_begin(&b->event, "state");
    bb_event_field(&b->event, "path", state);
    emit(b);
    show(b);
}

static void notify(bb_badge *b, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(b->notice, sizeof b->notice, format, args);
    va_end(args);
}

static void print_report(bb_badge *b, const char *kind, const char *report) {
    bb_event_begin(&b->event, kind);
    bb_event_field(&b->event, "report", report);
    emit(b);
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
    if (strcmp(copy, "ok") == 0) notify(b, "Updated to %s", version);
    else notify(b, "Update to %s failed: %s. Still running %s", version, second ? second + 1 : "", b->boot.version);
}

static void store_report(bb_badge *b, const char *report) {
    nvs_set(b, KEY_REPORT, report);
    nvs_erase(b, KEY_INSTALL);
    print_report(b, "report.stored", report);
}

static void forget_token(bb_badge *b, const char *request) {
    nvs_erase(b, KEY_TOKEN);
    bb_event_begin(&b->event, "token.cleared");
    bb_event_field(&b->event, "request", request);
    emit(b);
}

static void contact_succeeded(bb_badge *b, long recheck_s) {
    nvs_set_number(b, KEY_CONTACT_AFTER, unix_ms(b) + (recheck_s > 0 ? recheck_s * 1000LL : 0));
    nvs_erase(b, KEY_FAILURES);
}

/* backs off 1, 2, 4 ... minutes up to an hour, or longer when the server's S says so */
static void contact_failed(bb_badge *b, long recheck_s) {
    long long failures = nvs_number(b, KEY_FAILURES, 0) + 1;
    unsigned long long backoff = failures > 6 ? MAX_BACKOFF_MS : FIRST_BACKOFF_MS << (failures - 1);
    if (backoff > MAX_BACKOFF_MS) backoff = MAX_BACKOFF_MS;
    unsigned long long asked = recheck_s > 0 ? (unsigned long long)recheck_s * 1000ull : 0;
    nvs_set_number(b, KEY_FAILURES, failures);
    nvs_set_number(b, KEY_CONTACT_AFTER, unix_ms(b) + (long long)(asked > backoff ? asked : backoff));
}

/* ---- the tap queue ---- */

static size_t queued_taps(bb_badge *b) {
    size_t count = 0;
    char key[16], value[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (nvs_get(b, key, value, sizeof value)) count++;
    }
    return count;
}

static bool queue_tap(bb_badge *b, const char *uid) {
    char key[16], value[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (nvs_get(b, key, value, sizeof value)) continue;
        long long n = nvs_number(b, KEY_TAP_NEXT, 1);
        long long at = unix_ms(b) / 1000;
        snprintf(value, sizeof value, "%lld|%s|%lld", n, uid, at);
        nvs_set(b, key, value);
        nvs_set_number(b, KEY_TAP_NEXT, n + 1);
        bb_event_begin(&b->event, "tap.queued");
        bb_event_field_u64(&b->event, "n", (uint64_t)n);
        bb_event_field(&b->event, "uid", uid);
        bb_event_field_u64(&b->event, "at", at > 0 ? (uint64_t)at : 0);
        emit(b);
        return true;
    }
    return false;
}

/* ---- talking to the server ---- */

static void add_status(bb_badge *b) {
    char display[BB_VERSION_MAX + BB_DISPLAY_MAX + 4];
    const char *fw = b->boot.version;
    /* the display string of the installed version, kept as version|display */
    if (nvs_get(b, KEY_DISPLAY, display, sizeof display)) {
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

/*
 * POSTs the request and reads the answer into b->answer. Returns the HTTP status, or 0 when the
 * exchange failed (the reason in `why`): unreachable, cut, stalled, or larger than BB_ANSWER_MAX.
 */
static int post(bb_badge *b, const char *path, size_t *len, char *why, size_t why_cap) {
    char token[BB_TOKEN_MAX];
    *len = 0;
    if (!nvs_get(b, KEY_TOKEN, token, sizeof token)) token[0] = '\0';
    if (b->request.broken) {
        snprintf(why, why_cap, "the request could not be built");
        return 0;
    }
    int status = 0;
    long content_length = -1;
    log_line(b, "http", "POST %s", path);
    if (!b->hw->http_open(b->hw->ctx, "POST", path, token, b->request.text, b->request.len, &status, &content_length, why, why_cap)) return 0;
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

static void sync_now(bb_badge *b) {
    enter(b, "online.syncing");
    add_status(b);
    char report[BB_REPORT_MAX];
    bool has_report = nvs_get(b, KEY_REPORT, report, sizeof report);
    if (has_report) bb_request_add(&b->request, "ota", report);
    char key[16], tap[64];
    for (unsigned i = 0; i < BB_MAX_TAPS; i++) {
        snprintf(key, sizeof key, TAP_KEY, i);
        if (nvs_get(b, key, tap, sizeof tap)) bb_request_add(&b->request, "tap", tap);
    }
    if (has_report) print_report(b, "report.sent", report);
    size_t len;
    char why[120];
    int status = post(b, "/api/badge/sync", &len, why, sizeof why);
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
        forget_token(b, "sync");
        enter(b, "unprovisioned");
        return;
    }
    if (answer->kind == BB_SYNC_FAILED) {
        log_line(b, "sync", "failed: %s", answer->message);
        contact_failed(b, answer->recheck_s);
        notify(b, "Sync failed: %s", answer->message);
        enter(b, "awake.idle");
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
            if (!nvs_get(b, key, tap, sizeof tap)) continue;
            if (strtoull(tap, NULL, 10) == answer->taps[t].n) nvs_erase(b, key);
        }
    }
    contact_succeeded(b, answer->recheck_s);
    enter(b, "awake.idle");
}

/* ---- the update ---- */

static bb_next restart(bb_badge *b) {
    enter(b, "restarting");
    return BB_NEXT_RESTART;
}

/* updateFailed: says why, stores the report, and restarts on the firmware it runs (SPEC 3.4 item 4) */
static bb_next update_failed(bb_badge *b) {
    enter(b, "updateFailed");
    char report[BB_REPORT_MAX];
    snprintf(report, sizeof report, "err|%s|%s", b->offer.version, b->notice);
    store_report(b, report);
    contact_failed(b, -1);
    for (uint64_t shown = b->hw->uptime_ms(b->hw->ctx); b->hw->uptime_ms(b->hw->ctx) - shown < BB_FAILURE_SCREEN_MS;) {
        serve_console(b);
        b->hw->delay_ms(b->hw->ctx, 50);
    }
    return restart(b);
}

static bb_next fail(bb_badge *b, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(b->notice, sizeof b->notice, format, args);
    va_end(args);
    log_line(b, "ota", "update failed: %s", b->notice);
    return update_failed(b);
}

static void show_progress(bb_badge *b, uint32_t written) {
    bb_event_begin(&b->event, "progress");
    bb_event_field_u64(&b->event, "bytes", written);
    bb_event_field_u64(&b->event, "total", b->offer.size);
    emit(b);
    show(b);
}

/* the last act of an install: otadata names the new slot, then the restart boots it */
static bb_next switch_slot(bb_badge *b, bb_slot slot) {
    save_install(b, "switch", b->offer.size);
    char display[BB_VERSION_MAX + BB_DISPLAY_MAX + 4];
    snprintf(display, sizeof display, "%s|%s", b->offer.version, b->offer.display);
    nvs_set(b, KEY_DISPLAY, display);
    enter(b, "online.switching");
    if (!b->hw->ota_set_boot(b->hw->ctx, slot)) {
        log_line(b, "ota", "esp_ota_set_boot_partition(%s) failed", slot_name(slot));
        return fail(b, "the partition switch failed");
    }
    bb_event_begin(&b->event, "switch");
    bb_event_field(&b->event, "slot", slot_name(slot));
    emit(b);
    return restart(b);
}

/* esp_ota_begin / esp_ota_write over the HTTP/1.0 download, MD5 as it writes */
static bool on_external_power(bb_badge *b) { return b->hw->power(b->hw->ctx).source != BB_POWER_BATTERY; }

static bb_next download(bb_badge *b) {
    char token[BB_TOKEN_MAX];
    char why[120];
    char at[64];
    bb_offer *offer = &b->offer;
    bb_slot slot = b->boot.slot == BB_OTA_0 ? BB_OTA_1 : BB_OTA_0;
    b->received = 0;
    b->notice[0] = '\0';
    enter(b, "online.downloading");
    if (!nvs_get(b, KEY_TOKEN, token, sizeof token)) return fail(b, "no device token");
    int status = 0;
    long content_length = -1;
    log_line(b, "http", "GET %s", offer->path);
    if (!b->hw->http_open(b->hw->ctx, "GET", offer->path, token, NULL, 0, &status, &content_length, why, sizeof why)) {
        return fail(b, "server unreachable (%s)", why);
    }
    if (status != 200) {
        size_t len = 0;
        for (long n; len < BB_ANSWER_MAX && (n = b->hw->http_read(b->hw->ctx, (uint8_t *)b->answer + len, BB_ANSWER_MAX - len)) > 0;) len += (size_t)n;
        b->hw->http_close(b->hw->ctx);
        bb_response response;
        const char *refusal = bb_response_parse(b->answer, len, &response, NULL, 0) ? bb_response_value(&response, 'X') : NULL;
        char shown[120];
        snprintf(shown, sizeof shown, "%s", refusal ? refusal : "");
        if (status == 401) forget_token(b, "download");
        return fail(b, "download refused: HTTP %d%s%s", status, shown[0] ? " " : "", shown);
    }
    if (content_length >= 0 && (unsigned long long)content_length != offer->size) {
        b->hw->http_close(b->hw->ctx);
        return fail(b, "the server sends %ld bytes; the offer said %llu", content_length, (unsigned long long)offer->size);
    }
    save_install(b, "download", 0);
    if (!b->hw->ota_begin(b->hw->ctx, slot, (uint32_t)offer->size)) {
        b->hw->http_close(b->hw->ctx);
        return fail(b, "esp_ota_begin(%s) failed", slot_name(slot));
    }
    bb_md5 md5;
    bb_md5_init(&md5);
    uint32_t written = 0;
    size_t buffered = 0;
    unsigned long long percent = 0;
    show_progress(b, 0);
    for (;;) {
        serve_console(b);
        if (!on_external_power(b)) {
            b->hw->http_close(b->hw->ctx);
            progress_text(at, sizeof at, b->received, offer->size);
            return fail(b, "external power removed during download at %s", at);
        }
        long n = b->hw->http_read(b->hw->ctx, b->chunk + buffered, sizeof b->chunk - buffered);
        if (n > 0 && b->received + (unsigned long long)n > offer->size) {
            b->hw->http_close(b->hw->ctx);
            return fail(b, "the server sent more than the offered %llu bytes", (unsigned long long)offer->size);
        }
        if (n > 0) {
            b->received += (uint32_t)n;
            buffered += (size_t)n;
        }
        bool last = n == BB_HTTP_END && b->received == offer->size && buffered > 0;
        if (buffered == sizeof b->chunk || last) {
            if (!b->hw->ota_write(b->hw->ctx, slot, written, b->chunk, buffered)) {
                b->hw->http_close(b->hw->ctx);
                return fail(b, "esp_ota_write at %u failed", (unsigned)written);
            }
            bb_md5_update(&md5, b->chunk, buffered);
            written += (uint32_t)buffered;
            buffered = 0;
            if (written % BB_CHECKPOINT_BYTES == 0) save_install(b, "download", written);
            unsigned long long now = (unsigned long long)written * 100 / offer->size;
            if (now != percent || written == offer->size) show_progress(b, written);
            percent = now;
        }
        if (n > 0) continue;
        b->hw->http_close(b->hw->ctx);
        progress_text(at, sizeof at, b->received, offer->size);
        if (n == BB_HTTP_STALLED) return fail(b, "download stalled at %s: no data for %u ms", at, (unsigned)b->hw->stall_timeout_ms);
        if (n == BB_HTTP_CUT || b->received < offer->size) return fail(b, "download cut at %s", at);
        break;
    }
    char got[33];
    bb_md5_hex(&md5, got);
    bool intact = strcmp(got, offer->md5) == 0;
    bb_event_begin(&b->event, "md5");
    bb_event_field(&b->event, "result", intact ? "ok" : "mismatch");
    bb_event_field(&b->event, "got", got);
    bb_event_field(&b->event, "want", offer->md5);
    emit(b);
    if (!intact) return fail(b, "MD5 mismatch: the image gives %s, the offer said %s", got, offer->md5);
    return switch_slot(b, slot);
}

/* Why an offer cannot be installed whatever the battery says, or NULL (offerProblem in the model). */
static const char *offer_problem(bb_badge *b, char *why, size_t cap) {
    bb_version offered, running;
    if (!bb_version_parse(b->offer.version, &offered)) {
        snprintf(why, cap, "%s is not a version", b->offer.version);
        return why;
    }
    if (bb_version_parse(b->boot.version, &running) && bb_version_compare(&offered, &running) <= 0) {
        snprintf(why, cap, "%s is not newer than %s", b->offer.version, b->boot.version);
        return why;
    }
    if (b->offer.size > BB_SLOT_BYTES) {
        snprintf(why, cap, "%llu bytes do not fit the %u-byte slot", (unsigned long long)b->offer.size, BB_SLOT_BYTES);
        return why;
    }
    return NULL;
}

static bb_next check_now(bb_badge *b) {
    enter(b, "online.checking");
    add_status(b);
    size_t len;
    char why[120];
    int status = post(b, "/api/badge/ota/check", &len, why, sizeof why);
    bb_check_answer *answer = &b->check;
    if (status == 0) {
        memset(answer, 0, sizeof *answer);
        answer->kind = BB_CHECK_FAILED;
        answer->recheck_s = -1;
        snprintf(answer->message, sizeof answer->message, "%s", why);
    } else {
        bb_check_answer_read(status, b->answer, len, answer);
    }
    char problem[BB_TEXT_MAX];
    switch (answer->kind) {
    case BB_CHECK_UNAUTHORIZED:
        forget_token(b, "check");
        enter(b, "unprovisioned");
        return BB_NEXT_RUN;
    case BB_CHECK_FAILED:
        contact_failed(b, answer->recheck_s);
        notify(b, "Update check failed: %s", answer->message);
        enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_CURRENT:
        contact_succeeded(b, answer->recheck_s);
        notify(b, "Up to date (latest release %s)", answer->latest);
        enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_REFUSED:
        contact_succeeded(b, answer->recheck_s);
        notify(b, "No update: %s", answer->message[0] ? answer->message : answer->code);
        enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_OFFER:
        break;
    }
    contact_succeeded(b, answer->recheck_s);
    b->offer = answer->offer;
    if (offer_problem(b, problem, sizeof problem)) {
        notify(b, "Ignored offer: %s", problem);
        enter(b, "awake.idle");
        return BB_NEXT_RUN;
    }
    enter(b, "online.offered");
    bb_power power = b->hw->power(b->hw->ctx);
    /* the badge's own gate: it holds even when the server offered (SPEC 3.4) */
    if (power.mv < BB_MIN_INSTALL_MV && power.source != BB_POWER_CHARGING) {
        unsigned centivolts = (unsigned)((power.mv + 5) / 10);
        notify(b, "Update %s needs 3.85 V or charging (battery at %u.%02u V)", b->offer.version, centivolts / 100, centivolts % 100);
        enter(b, "awake.idle");
        return BB_NEXT_RUN;
    }
    return download(b);
}

/* ---- start, commands, sleep ---- */

bb_next bb_badge_start(bb_badge *b, const bb_platform *hw, const bb_boot_info *boot) {
    memset(b, 0, sizeof *b);
    b->hw = hw;
    b->boot = *boot;
    bb_event_begin(&b->event, "boot");
    bb_event_field(&b->event, "slot", slot_name(boot->slot));
    bb_event_field(&b->event, "version", boot->version);
    bb_event_field(&b->event, "cause", boot->cause);
    emit(b);
    enter(b, "booting");
    b->last_input_ms = hw->uptime_ms(hw->ctx);
    if (boot->crashes) {
        enter(b, "bricked");
        return BB_NEXT_RUN;
    }
    if (!has_token(b)) {
        enter(b, "unprovisioned");
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
            progress_text(at, sizeof at, install.bytes, install.total);
            snprintf(report, sizeof report, "err|%s|power lost during download after %s", install.version, at);
        }
        store_report(b, report);
    }
    bool pending = nvs_get(b, KEY_REPORT, report, sizeof report);
    if (pending) notify_report(b, report);
    b->contact_due = pending || unix_ms(b) >= nvs_number(b, KEY_CONTACT_AFTER, 0);
    b->external = on_external_power(b);
    if (b->external && b->contact_due) sync_now(b);
    else enter(b, "awake.idle");
    return BB_NEXT_RUN;
}

static void print_status(bb_badge *b) {
    bb_power power = b->hw->power(b->hw->ctx);
    char report[BB_REPORT_MAX];
    bb_event_begin(&b->event, "status");
    bb_event_field(&b->event, "version", b->boot.version);
    bb_event_field(&b->event, "slot", slot_name(b->boot.slot));
    bb_event_field(&b->event, "state", b->state);
    bb_event_field_u64(&b->event, "mv", power.mv);
    bb_event_field(&b->event, "power", power.source == BB_POWER_BATTERY ? "battery" : power.source == BB_POWER_EXTERNAL ? "external" : "charging");
    bb_event_field(&b->event, "token", has_token(b) ? "yes" : "no");
    if (nvs_get(b, KEY_REPORT, report, sizeof report)) bb_event_field(&b->event, "report", report);
    bb_event_field_u64(&b->event, "taps", queued_taps(b));
    emit(b);
}

static void refuse(bb_badge *b, const char *line, const char *reason) {
    /* a long line is echoed shortened, so the event stays within one printed line */
    char shown[68];
    snprintf(shown, sizeof shown, strlen(line) > 60 ? "%.60s..." : "%s", line);
    bb_event_begin(&b->event, "refused");
    bb_event_field(&b->event, "command", shown);
    bb_event_field(&b->event, "reason", reason);
    emit(b);
}

static bool is_awake(bb_badge *b) { return strncmp(b->state, "awake.", 6) == 0; }

/*
 * The console while the badge is busy (a download, a failure on screen): as a console task
 * would, it answers status and queues a card tap at once; anything else waits for nothing and
 * is refused, since the wearer's menu is not open either.
 */
static void serve_console(bb_badge *b) {
    char line[BB_CONSOLE_LINE_MAX + 1];
    while (b->hw->console_poll(b->hw->ctx, line, sizeof line)) {
        bb_command command;
        char why[160];
        bb_parse parsed = bb_command_parse(line, &command, why, sizeof why);
        if (parsed == BB_PARSE_EMPTY) continue;
        if (parsed == BB_PARSE_REFUSED) {
            refuse(b, line, why);
        } else if (command.name == BB_CMD_STATUS) {
            print_status(b);
        } else if (command.name == BB_CMD_TAP) {
            queue_tap(b, command.uid);
        } else {
            snprintf(why, sizeof why, "busy: the badge is %s", b->state);
            refuse(b, line, why);
        }
    }
}

bb_next bb_badge_command(bb_badge *b, const char *line) {
    bb_command command;
    char why[160];
    bb_parse parsed = bb_command_parse(line, &command, why, sizeof why);
    if (parsed == BB_PARSE_EMPTY) return BB_NEXT_RUN;
    if (parsed == BB_PARSE_REFUSED) {
        refuse(b, line, why);
        return BB_NEXT_RUN;
    }
    log_line(b, "console", "%s", line);
    switch (command.name) {
    case BB_CMD_STATUS:
        print_status(b);
        return BB_NEXT_RUN;
    case BB_CMD_REBOOT:
        return BB_NEXT_RESTART;
    case BB_CMD_PLUG:
    case BB_CMD_UNPLUG:
    case BB_CMD_WAIT:
    case BB_CMD_BROWNOUT:
    case BB_CMD_REST:
        refuse(b, line, "the simulated badge only: a real badge's power and time are the world's, not the console's");
        return BB_NEXT_RUN;
    default:
        break;
    }
    if (!is_awake(b)) {
        snprintf(why, sizeof why, "not now: the badge is %s", b->state);
        refuse(b, line, why);
        return BB_NEXT_RUN;
    }
    b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
    bb_next next = BB_NEXT_RUN;
    if (command.name == BB_CMD_TAP) {
        if (queue_tap(b, command.uid)) notify(b, "Card %s saved", command.uid);
        else notify(b, "Card %s not saved: %u taps wait for a sync", command.uid, BB_MAX_TAPS);
        enter(b, "awake.idle");
    } else if (!on_external_power(b)) {
        enter(b, "awake.plugInPrompt");
    } else if (command.name == BB_CMD_CHECK) {
        next = check_now(b);
    } else {
        sync_now(b);
    }
    b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
    return next;
}

bb_next bb_badge_idle(bb_badge *b) {
    bool plugged = on_external_power(b) && !b->external;
    b->external = on_external_power(b);
    if (plugged && is_awake(b)) {
        /* awake.opportunity: a pending report, or a contact due, goes out now */
        b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
        char report[BB_REPORT_MAX];
        if (nvs_get(b, KEY_REPORT, report, sizeof report) || unix_ms(b) >= nvs_number(b, KEY_CONTACT_AFTER, 0)) sync_now(b);
        return BB_NEXT_RUN;
    }
    bool can_sleep = is_awake(b) || strcmp(b->state, "unprovisioned") == 0;
    if (!can_sleep || b->hw->uptime_ms(b->hw->ctx) - b->last_input_ms < BB_SLEEP_AFTER_MS) return BB_NEXT_RUN;
    enter(b, "asleep");
    return BB_NEXT_SLEEP;
}

void bb_badge_wake(bb_badge *b) { enter(b, "wakingUp"); }
