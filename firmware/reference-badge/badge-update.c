/*
 * The update (SPEC 3.4; the model's online.* states): a check and what its answer means, the
 * offer's problems and the battery gate, the download written to the inactive slot and hashed as
 * it arrives, the switch after the MD5 matched, and a failure shown, reported and restarted from.
 * The order of an install is ESP-IDF's (badge.c says how a power cut at any point is reported).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "badge-core.h"

static bb_next restart(bb_badge *b) {
    badge_enter(b, "restarting");
    return BB_NEXT_RESTART;
}

/* updateFailed: says why, stores the report, and restarts on the firmware it runs (SPEC 3.4 item 4) */
static bb_next update_failed(bb_badge *b) {
    badge_enter(b, "updateFailed");
    char report[BB_REPORT_MAX];
    snprintf(report, sizeof report, "err|%s|%s", b->offer.version, b->notice);
    badge_store_report(b, report);
    badge_contact_failed(b, -1);
    for (uint64_t shown = b->hw->uptime_ms(b->hw->ctx); b->hw->uptime_ms(b->hw->ctx) - shown < BB_FAILURE_SCREEN_MS;) {
        badge_serve_console(b);
        b->hw->delay_ms(b->hw->ctx, 50);
    }
    return restart(b);
}

static bb_next fail(bb_badge *b, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(b->notice, sizeof b->notice, format, args);
    va_end(args);
    badge_log_line(b, "ota", "update failed: %s", b->notice);
    return update_failed(b);
}

static void show_progress(bb_badge *b, uint32_t written) {
    bb_event_begin(&b->event, "progress");
    bb_event_field_u64(&b->event, "bytes", written);
    bb_event_field_u64(&b->event, "total", b->offer.size);
    badge_emit(b);
    badge_show(b);
}

/* the last act of an install: otadata names the new slot, then the restart boots it */
static bb_next switch_slot(bb_badge *b, bb_slot slot) {
    badge_save_install(b, "switch", b->offer.size);
    char display[BB_VERSION_MAX + BB_DISPLAY_MAX + 4];
    snprintf(display, sizeof display, "%s|%s", b->offer.version, b->offer.display);
    badge_nvs_set(b, KEY_DISPLAY, display);
    badge_enter(b, "online.switching");
    if (!b->hw->ota_set_boot(b->hw->ctx, slot)) {
        badge_log_line(b, "ota", "esp_ota_set_boot_partition(%s) failed", badge_slot_name(slot));
        return fail(b, "the partition switch failed");
    }
    bb_event_begin(&b->event, "switch");
    bb_event_field(&b->event, "slot", badge_slot_name(slot));
    badge_emit(b);
    return restart(b);
}

/* The trusted key the offer names (the caller checked there is one). */
static const uint8_t *offer_key(bb_badge *b) {
    char id[BB_KEY_ID_HEX + 1];
    for (unsigned i = 0; i < b->boot.trusted_key_count; i++) {
        bb_key_id(b->boot.trusted_keys[i], id);
        if (strcmp(id, b->offer.key_id) == 0) return b->boot.trusted_keys[i];
    }
    return NULL;
}

/* online.verifying: the Ed25519 signature over the whole image as written, before otadata changes */
static bb_next verify_then_switch(bb_badge *b, bb_slot slot) {
    badge_enter(b, "online.verifying");
    const uint8_t *image = b->hw->ota_map(b->hw->ctx, slot, (uint32_t)b->offer.size);
    if (!image) return fail(b, "esp_partition_mmap(%s) failed", badge_slot_name(slot));
    if (!bb_signature_verify(image, (size_t)b->offer.size, b->offer.signature, offer_key(b))) {
        return fail(b, "the signature by key %s does not verify over the %llu-byte image", b->offer.key_id, (unsigned long long)b->offer.size);
    }
    badge_log_line(b, "ota", "signature by key %s verified", b->offer.key_id);
    return switch_slot(b, slot);
}

/* Why a badge holding release keys will not take the offer, or NULL (signatureProblem in the model). */
static const char *signature_problem(bb_badge *b, char *why, size_t cap) {
    if (b->boot.trusted_key_count == 0) return NULL;
    if (!b->offer.is_signed) {
        snprintf(why, cap, "%s is not signed; this badge installs signed releases only", b->offer.version);
        return why;
    }
    if (offer_key(b)) return NULL;
    char held[BB_TRUSTED_KEYS][BB_KEY_ID_HEX + 1];
    for (unsigned i = 0; i < b->boot.trusted_key_count; i++) bb_key_id(b->boot.trusted_keys[i], held[i]);
    snprintf(why, cap, "%s is signed by key %s, which this badge does not hold (it holds %s%s%s)", b->offer.version, b->offer.key_id, held[0],
             b->boot.trusted_key_count > 1 ? ", " : "", b->boot.trusted_key_count > 1 ? held[1] : "");
    return why;
}

/* esp_ota_begin / esp_ota_write over the HTTP/1.0 download, MD5 as it writes */
/* ---- where a cut download resumes (issue 23) ---- */

/*
 * The checkpoint NVS keeps every 64 KiB beside the install record: the offer it belongs to, the
 * bytes written, and MD5's state over them. At a 64 KiB boundary MD5 has no partial block, so its
 * state is four words and the length (the bytes), and hashing goes on from it after a reboot.
 */
typedef struct {
    uint32_t bytes;
    bb_md5 md5;
} resume_point;

static void save_resume(bb_badge *b, uint32_t bytes, const bb_md5 *md5) {
    char text[BB_VERSION_MAX + 128];
    snprintf(text, sizeof text, "%s|%llu|%s|%u|%08x|%08x|%08x|%08x", b->offer.version, (unsigned long long)b->offer.size, b->offer.md5, (unsigned)bytes,
             (unsigned)md5->state[0], (unsigned)md5->state[1], (unsigned)md5->state[2], (unsigned)md5->state[3]);
    badge_nvs_set(b, KEY_RESUME, text);
}

static void drop_resume(bb_badge *b) { b->hw->nvs_erase(b->hw->ctx, KEY_RESUME); }

/* The checkpoint of the offer in hand, or false: one of another offer (or unreadable) is dropped. */
static bool load_resume(bb_badge *b, resume_point *out) {
    char text[BB_VERSION_MAX + 128];
    if (!badge_nvs_get(b, KEY_RESUME, text, sizeof text)) return false;
    char version[BB_VERSION_MAX + 1], md5[33];
    unsigned long long size;
    unsigned bytes, state[4];
    int end = 0;
    bool read = sscanf(text, "%31[^|]|%llu|%32[0-9a-f]|%u|%8x|%8x|%8x|%8x%n", version, &size, md5, &bytes, &state[0], &state[1], &state[2], &state[3], &end) == 8 &&
                text[end] == '\0';
    if (!read || strcmp(version, b->offer.version) != 0 || size != b->offer.size || strcmp(md5, b->offer.md5) != 0 || bytes == 0 ||
        bytes % BB_CHECKPOINT_BYTES != 0 || bytes >= size) {
        badge_log_line(b, "ota", "checkpoint dropped: %s", read ? "the offer changed" : "unreadable");
        drop_resume(b);
        return false;
    }
    bb_md5_init(&out->md5);
    for (int i = 0; i < 4; i++) out->md5.state[i] = state[i];
    out->md5.length = bytes;
    out->bytes = bytes;
    return true;
}

/* ---- the download: esp_ota_begin (or _resume) / esp_ota_write over HTTP/1.0, MD5 as it writes ---- */

static bool open_image(bb_badge *b, const char *token, const resume_point *resume, bb_http_head *head, char *why, size_t cap) {
    bb_range_request range;
    if (resume) {
        range.from = resume->bytes;
        snprintf(range.md5, sizeof range.md5, "%s", b->offer.md5);
        badge_log_line(b, "http", "GET %s Range: bytes=%u-", b->offer.path, (unsigned)resume->bytes);
    } else {
        badge_log_line(b, "http", "GET %s", b->offer.path);
    }
    return b->hw->http_open(b->hw->ctx, "GET", b->offer.path, token, NULL, 0, resume ? &range : NULL, head, why, cap);
}

/* the body of an answer that is not the image, into b->answer; its parsed lines when it reads */
static bool read_refusal(bb_badge *b, bb_response *response) {
    size_t len = 0;
    for (long n; len < BB_ANSWER_MAX && (n = b->hw->http_read(b->hw->ctx, (uint8_t *)b->answer + len, BB_ANSWER_MAX - len)) > 0;) len += (size_t)n;
    b->hw->http_close(b->hw->ctx);
    return bb_response_parse(b->answer, len, response, NULL, 0);
}

/*
 * 503 with Retry-After: the server's download cap. The checkpoint stays, and the badge comes back
 * no sooner than asked (the larger of Retry-After and the body's S), whoever presses Check.
 */
static bb_next server_busy(bb_badge *b, long retry_after_s) {
    bb_response response;
    const char *recheck = read_refusal(b, &response) ? bb_response_value(&response, 'S') : NULL;
    long wait_s = retry_after_s;
    if (recheck && strlen(recheck) <= 9 && strspn(recheck, "0123456789") == strlen(recheck) && atol(recheck) > wait_s) wait_s = atol(recheck);
    char until[24];
    snprintf(until, sizeof until, "%llu", (unsigned long long)(b->hw->rtc_ms(b->hw->ctx) + (uint64_t)wait_s * 1000));
    badge_nvs_set(b, KEY_SERVER_WAIT, until);
    badge_contact_failed(b, wait_s);
    badge_log_line(b, "ota", "server busy (HTTP 503): the update continues in %ld s", wait_s);
    badge_notify(b, "Server busy: the update continues in %ld s", wait_s);
    badge_enter(b, "awake.idle");
    return BB_NEXT_RUN;
}

/* The image from the checkpoint on (`written` bytes already in the slot, `md5` their state), hashed and checked whole. */
static bb_next receive(bb_badge *b, bb_slot slot, uint32_t written, bb_md5 *md5) {
    bb_offer *offer = &b->offer;
    char at[64];
    size_t buffered = 0;
    unsigned long long percent = (unsigned long long)written * 100 / offer->size;
    b->received = written;
    show_progress(b, written);
    for (;;) {
        badge_serve_console(b);
        if (!badge_on_external_power(b)) {
            b->hw->http_close(b->hw->ctx);
            badge_progress_text(at, sizeof at, b->received, offer->size);
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
            bb_md5_update(md5, b->chunk, buffered);
            written += (uint32_t)buffered;
            buffered = 0;
            if (written % BB_CHECKPOINT_BYTES == 0) {
                badge_save_install(b, "download", written);
                save_resume(b, written, md5);
            }
            unsigned long long now = (unsigned long long)written * 100 / offer->size;
            if (now != percent || written == offer->size) show_progress(b, written);
            percent = now;
        }
        if (n > 0) continue;
        b->hw->http_close(b->hw->ctx);
        badge_progress_text(at, sizeof at, b->received, offer->size);
        if (n == BB_HTTP_STALLED) return fail(b, "download stalled at %s: no data for %u ms", at, (unsigned)b->hw->stall_timeout_ms);
        if (n == BB_HTTP_CUT || b->received < offer->size) return fail(b, "download cut at %s", at);
        break;
    }
    /* the checkpoint belongs to an image now whole: the next download starts from 0 */
    drop_resume(b);
    char got[33];
    bb_md5_hex(md5, got);
    bool intact = strcmp(got, offer->md5) == 0;
    bb_event_begin(&b->event, "md5");
    bb_event_field(&b->event, "result", intact ? "ok" : "mismatch");
    bb_event_field(&b->event, "got", got);
    bb_event_field(&b->event, "want", offer->md5);
    badge_emit(b);
    if (!intact) return fail(b, "MD5 mismatch: the image gives %s, the offer said %s", got, offer->md5);
    if (b->boot.trusted_key_count > 0) return verify_then_switch(b, slot);
    return switch_slot(b, slot);
}

/*
 * A download of the offer: from the checkpoint when NVS has one of this offer (Range and
 * If-Range), else from byte 0. A 206 must start at the checkpoint and name the offer's size, else
 * it is refused and the checkpoint dropped; a 200 starts over from byte 0, overwriting; a 416
 * asks again from byte 0 at once; a 503 with Retry-After keeps the checkpoint for later.
 */
static bb_next download(bb_badge *b) {
    char token[BB_TOKEN_MAX];
    char why[120];
    char at[64];
    bb_offer *offer = &b->offer;
    bb_slot slot = b->boot.slot == BB_OTA_0 ? BB_OTA_1 : BB_OTA_0;
    b->received = 0;
    b->notice[0] = '\0';
    badge_enter(b, "online.downloading");
    if (!badge_nvs_get(b, KEY_TOKEN, token, sizeof token)) return fail(b, "no device token");
    resume_point resume;
    bool resuming = load_resume(b, &resume);
    bb_http_head head;
    if (!open_image(b, token, resuming ? &resume : NULL, &head, why, sizeof why)) return fail(b, "server unreachable (%s)", why);
    if (head.status == 416 && resuming) {
        b->hw->http_close(b->hw->ctx);
        drop_resume(b);
        resuming = false;
        badge_log_line(b, "ota", "HTTP 416: the server cannot resume at %u", (unsigned)resume.bytes);
        badge_notify(b, "the server cannot resume at %u (HTTP 416): starting over from byte 0", (unsigned)resume.bytes);
        badge_show(b);
        if (!open_image(b, token, NULL, &head, why, sizeof why)) return fail(b, "server unreachable (%s)", why);
    }
    if (head.status == 503 && head.retry_after_s >= 0) return server_busy(b, head.retry_after_s);
    if (head.status != 200 && head.status != 206) {
        bb_response response;
        const char *refusal = read_refusal(b, &response) ? bb_response_value(&response, 'X') : NULL;
        char shown[120];
        snprintf(shown, sizeof shown, "%s", refusal ? refusal : "");
        if (head.status == 401) badge_forget_token(b, "download");
        return fail(b, "download refused: HTTP %d%s%s", head.status, shown[0] ? " " : "", shown);
    }
    if (head.status == 206) {
        bb_content_range range;
        if (!resuming || !bb_content_range_parse(head.content_range, &range) || range.first != resume.bytes || range.last + 1 != offer->size ||
            range.total != offer->size) {
            b->hw->http_close(b->hw->ctx);
            drop_resume(b);
            char sent[80];
            snprintf(sent, sizeof sent, head.content_range[0] ? "\"%s\"" : "a part without Content-Range", head.content_range);
            return fail(b, "resume refused: the server sent %s; the badge asked for bytes %u- of %llu", sent, resuming ? (unsigned)resume.bytes : 0u,
                        (unsigned long long)offer->size);
        }
        badge_save_install(b, "download", resume.bytes);
        if (!b->hw->ota_resume(b->hw->ctx, slot, (uint32_t)offer->size, resume.bytes)) {
            b->hw->http_close(b->hw->ctx);
            return fail(b, "esp_ota_resume(%s) failed", badge_slot_name(slot));
        }
        badge_progress_text(at, sizeof at, resume.bytes, offer->size);
        badge_log_line(b, "ota", "resuming at %u of %llu", (unsigned)resume.bytes, (unsigned long long)offer->size);
        badge_notify(b, "Resuming at %s", at);
        return receive(b, slot, resume.bytes, &resume.md5);
    }
    if (head.content_length >= 0 && (unsigned long long)head.content_length != offer->size) {
        b->hw->http_close(b->hw->ctx);
        return fail(b, "the server sends %ld bytes; the offer said %llu", head.content_length, (unsigned long long)offer->size);
    }
    if (resuming) {
        /* a proxy or server that ignored Range: the whole image again, written over, never appended */
        drop_resume(b);
        badge_log_line(b, "ota", "HTTP 200 to a resume at %u: starting over", (unsigned)resume.bytes);
        badge_notify(b, "the server sent the whole image instead of bytes %u-: starting over from byte 0", (unsigned)resume.bytes);
    }
    badge_save_install(b, "download", 0);
    if (!b->hw->ota_begin(b->hw->ctx, slot, (uint32_t)offer->size)) {
        b->hw->http_close(b->hw->ctx);
        return fail(b, "esp_ota_begin(%s) failed", badge_slot_name(slot));
    }
    bb_md5 md5;
    bb_md5_init(&md5);
    return receive(b, slot, 0, &md5);
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

/* Seconds a 503's Retry-After still asks the badge to wait (on the RTC, which runs through reboots), or 0. */
static long server_wait_s(bb_badge *b) {
    char text[24];
    if (!badge_nvs_get(b, KEY_SERVER_WAIT, text, sizeof text)) return 0;
    unsigned long long until = strtoull(text, NULL, 10), now = b->hw->rtc_ms(b->hw->ctx);
    return until > now ? (long)((until - now + 999) / 1000) : 0;
}

bb_next badge_check_now(bb_badge *b) {
    badge_enter(b, "online.checking");
    bb_check_answer *answer = &b->check;
    long wait_s = server_wait_s(b);
    size_t len = 0;
    char why[120];
    int status = 0;
    if (wait_s > 0) {
        snprintf(why, sizeof why, "the server is busy; it asked to wait %ld s more", wait_s);
    } else {
        badge_add_status(b);
        badge_announce_signatures(b);
        status = badge_post(b, "/api/badge/ota/check", &len, why, sizeof why);
    }
    if (status == 0) {
        memset(answer, 0, sizeof *answer);
        answer->kind = BB_CHECK_FAILED;
        answer->recheck_s = wait_s > 0 ? wait_s : -1;
        snprintf(answer->message, sizeof answer->message, "%s", why);
    } else {
        bb_check_answer_read(status, b->answer, len, answer);
    }
    char problem[BB_TEXT_MAX];
    switch (answer->kind) {
    case BB_CHECK_UNAUTHORIZED:
        badge_forget_token(b, "check");
        badge_enter(b, "unprovisioned");
        return BB_NEXT_RUN;
    case BB_CHECK_FAILED:
        badge_contact_failed(b, answer->recheck_s);
        badge_notify(b, "Update check failed: %s", answer->message);
        badge_enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_CURRENT:
        badge_contact_succeeded(b, answer->recheck_s);
        badge_notify(b, "Up to date (latest release %s)", answer->latest);
        badge_enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_REFUSED:
        badge_contact_succeeded(b, answer->recheck_s);
        badge_notify(b, "No update: %s", answer->message[0] ? answer->message : answer->code);
        badge_enter(b, "awake.idle");
        return BB_NEXT_RUN;
    case BB_CHECK_OFFER:
        break;
    }
    badge_contact_succeeded(b, answer->recheck_s);
    b->offer = answer->offer;
    if (offer_problem(b, problem, sizeof problem)) {
        badge_notify(b, "Ignored offer: %s", problem);
        badge_enter(b, "awake.idle");
        return BB_NEXT_RUN;
    }
    badge_enter(b, "online.offered");
    if (signature_problem(b, problem, sizeof problem)) return fail(b, "%s", problem);
    bb_power power = b->hw->power(b->hw->ctx);
    /* the badge's own gate: it holds even when the server offered (SPEC 3.4) */
    if (power.mv < BB_MIN_INSTALL_MV && power.source != BB_POWER_CHARGING) {
        unsigned centivolts = (unsigned)((power.mv + 5) / 10);
        badge_notify(b, "Update %s needs 3.85 V or charging (battery at %u.%02u V)", b->offer.version, centivolts / 100, centivolts % 100);
        badge_enter(b, "awake.idle");
        return BB_NEXT_RUN;
    }
    return download(b);
}
