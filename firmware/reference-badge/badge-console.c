/*
 * The console's commands (firmware/README.md, "The badge test console"): `status`, `tap`,
 * `check`, `sync`, `reboot`, the simulated badge's power and time commands refused, and the
 * console served while the badge is busy. Every refusal is a `refused` event naming the reason.
 */
#include <stdio.h>
#include <string.h>

#include "badge-core.h"

static void print_status(bb_badge *b) {
    bb_power power = b->hw->power(b->hw->ctx);
    char report[BB_REPORT_MAX];
    bb_event_begin(&b->event, "status");
    bb_event_field(&b->event, "version", b->boot.version);
    bb_event_field(&b->event, "slot", badge_slot_name(b->boot.slot));
    bb_event_field(&b->event, "state", b->state);
    bb_event_field_u64(&b->event, "mv", power.mv);
    bb_event_field(&b->event, "power", power.source == BB_POWER_BATTERY ? "battery" : power.source == BB_POWER_EXTERNAL ? "external" : "charging");
    bb_event_field(&b->event, "token", badge_has_token(b) ? "yes" : "no");
    if (badge_nvs_get(b, KEY_REPORT, report, sizeof report)) bb_event_field(&b->event, "report", report);
    bb_event_field_u64(&b->event, "taps", badge_queued_taps(b));
    badge_emit(b);
}

static void refuse(bb_badge *b, const char *line, const char *reason) {
    /* a long line is echoed shortened, so the event stays within one printed line */
    char shown[68];
    snprintf(shown, sizeof shown, strlen(line) > 60 ? "%.60s..." : "%s", line);
    bb_event_begin(&b->event, "refused");
    bb_event_field(&b->event, "command", shown);
    bb_event_field(&b->event, "reason", reason);
    badge_emit(b);
}


/*
 * The console while the badge is busy (a download, a failure on screen): as a console task
 * would, it answers status and queues a card tap at once; anything else waits for nothing and
 * is refused, since the wearer's menu is not open either.
 */
void badge_serve_console(bb_badge *b) {
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
            badge_queue_tap(b, command.uid);
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
    badge_log_line(b, "console", "%s", line);
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
    if (!badge_is_awake(b)) {
        snprintf(why, sizeof why, "not now: the badge is %s", b->state);
        refuse(b, line, why);
        return BB_NEXT_RUN;
    }
    b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
    bb_next next = BB_NEXT_RUN;
    if (command.name == BB_CMD_TAP) {
        if (badge_queue_tap(b, command.uid)) badge_notify(b, "Card %s saved", command.uid);
        else badge_notify(b, "Card %s not saved: %u taps wait for a sync", command.uid, BB_MAX_TAPS);
        badge_enter(b, "awake.idle");
    } else if (!badge_on_external_power(b)) {
        badge_enter(b, "awake.plugInPrompt");
    } else if (command.name == BB_CMD_CHECK) {
        next = badge_check_now(b);
    } else {
        badge_sync_now(b);
    }
    b->last_input_ms = b->hw->uptime_ms(b->hw->ctx);
    return next;
}
