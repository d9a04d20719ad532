/*
 * What the badge core's files share (badge.c, badge-update.c, badge-console.c), and nothing a
 * target includes: a firmware team includes badge.h. The functions are badge.c's unless noted.
 */
#ifndef BB_BADGE_CORE_H
#define BB_BADGE_CORE_H

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
/* where a cut download resumes (badge-update.c): version|size|md5|bytes|MD5 state, four words in hex */
#define KEY_RESUME "ota.resume"
/* until when (the RTC's ms) a 503's Retry-After asked the badge not to come back */
#define KEY_SERVER_WAIT "srv.wait"
/* taps live in tap.0 ... tap.99, one per key, so queueing one is one NVS commit */
#define TAP_KEY "tap.%u"

/* the console: events, ESP-IDF style log lines, the slot names */
void badge_emit(bb_badge *b);
void badge_log_line(bb_badge *b, const char *tag, const char *format, ...);
const char *badge_slot_name(bb_slot slot);

/* the state of the badge */
bool badge_on_external_power(bb_badge *b);
bool badge_is_awake(bb_badge *b);
void badge_enter(bb_badge *b, const char *state);
void badge_show(bb_badge *b);
void badge_notify(bb_badge *b, const char *format, ...);

/* NVS: values, the install record, the pending report, the token, the tap queue */
bool badge_nvs_get(bb_badge *b, const char *key, char *out, size_t cap);
void badge_nvs_set(bb_badge *b, const char *key, const char *value);
bool badge_has_token(bb_badge *b);
void badge_save_install(bb_badge *b, const char *stage, unsigned long long bytes);
void badge_progress_text(char *out, size_t cap, unsigned long long bytes, unsigned long long total);
void badge_store_report(bb_badge *b, const char *report);
void badge_forget_token(bb_badge *b, const char *request);
size_t badge_queued_taps(bb_badge *b);
bool badge_queue_tap(bb_badge *b, const char *uid);

/* the server: the status every request carries, one POST, the contact schedule, the sync */
void badge_add_status(bb_badge *b);
void badge_announce_signatures(bb_badge *b);
int badge_post(bb_badge *b, const char *path, size_t *len, char *why, size_t why_cap);
void badge_contact_succeeded(bb_badge *b, long recheck_s);
void badge_contact_failed(bb_badge *b, long recheck_s);
void badge_sync_now(bb_badge *b);

/* badge-update.c: a check, and the update it offers */
bb_next badge_check_now(bb_badge *b);

/* badge-console.c: the console while the badge is busy */
void badge_serve_console(bb_badge *b);

#endif
