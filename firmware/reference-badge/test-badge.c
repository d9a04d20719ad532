/*
 * The badge against the fake platform (test-platform.c): an update from offer to switch and
 * report, downloads that fail every way, a 401, no install (battery, power), the token and the
 * tap queue, installs interrupted by a power cut, USB power plugged in, the console and sleep.
 */
#include <string.h>

#include "test.h"

void test_happy_update(void) {
    reset_fake();
    script_text(200, "V1\nS 900\nT 1795000000\n.\n");
    CHECK(start("1.4.0", BB_OTA_0) == BB_NEXT_RUN && strcmp(badge.state, "awake.idle") == 0);
    CHECK(printed("@bb boot slot=ota_0 version=1.4.0 cause=power-on") && printed("@bb state path=online.syncing"));
    script_text(200, offer_text);
    script(200, IMAGE_BYTES, (const char *)image, IMAGE_BYTES, BB_HTTP_END);
    /* typed while it downloads: answered (status), queued (tap), refused (check) */
    fake.typed[0] = "status";
    fake.typed[1] = "tap 04A1B2C3D9";
    fake.typed[2] = "check";
    fake.typed_count = 3;
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(printed("@bb status version=1.4.0 slot=ota_0 state=online.downloading") && printed("@bb tap.queued n=1 uid=04A1B2C3D9"));
    CHECK(printed("@bb refused command=check reason=\"busy: the badge is online.downloading\""));
    CHECK(strstr(fake.last_request, "sv=1.4.0\n") && strstr(fake.last_request, "bat=3.950\nchg=1\n"));
    CHECK(strcmp(fake.last_path, "/api/badge/ota/download?v=1.5.0") == 0);
    CHECK(fake.writes_to[BB_OTA_0] == 0 && fake.writes_to[BB_OTA_1] > 0 && fake.writes_after_switch == 0);
    CHECK(fake.switches == 1 && fake.boots == BB_OTA_1 && memcmp(fake.slots[BB_OTA_1], image, IMAGE_BYTES) == 0);
    CHECK(printed("@bb md5 result=ok") && printed("@bb switch slot=ota_1") && printed("@bb progress bytes=204923 total=204923"));
    CHECK(strncmp(nvs("ota.install"), "switch|1.5.0|", 13) == 0);
    /* the restart boots 1.5.0: the install record becomes ok|1.5.0, sent and cleared at the boot sync */
    script_text(200, "V1\nS 900\nT 1795000100\nO ok|1.5.0\n.\n");
    start("1.5.0", BB_OTA_1);
    CHECK(printed("@bb report.stored report=ok|1.5.0") && printed("@bb report.sent report=ok|1.5.0") && printed("@bb report.cleared report=ok|1.5.0"));
    CHECK(strstr(fake.last_request, "ota=ok|1.5.0\n") && strstr(fake.last_request, "fw=Badge 1.5.0\n"));
    CHECK(nvs("ota.report") == NULL && nvs("ota.install") == NULL && strstr(badge.screen, "Updated to 1.5.0"));
}

/* The first download step: check, offer, then the scripted download. */
static bb_next update_with(const char *body, size_t len, long content_length, long ending) {
    reset_fake();
    fake.power.source = BB_POWER_EXTERNAL;
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    script(200, content_length, body, len, ending);
    return bb_badge_command(&badge, "check");
}

void test_failed_downloads(void) {
    static uint8_t corrupt[IMAGE_BYTES];
    memcpy(corrupt, image, IMAGE_BYTES);
    corrupt[100000] ^= 1;
    CHECK(update_with((const char *)corrupt, IMAGE_BYTES, IMAGE_BYTES, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && fake.writes_to[BB_OTA_0] == 0 && printed("@bb md5 result=mismatch"));
    CHECK(strncmp(nvs("ota.report"), "err|1.5.0|MD5 mismatch: the image gives ", 40) == 0 && nvs("ota.install") == NULL);
    CHECK(printed("@bb state path=updateFailed") && printed("Restarting on 1.4.0"));

    CHECK(update_with((const char *)image, 131072, IMAGE_BYTES, BB_HTTP_CUT) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|download cut at 63% (128 of 200 KiB)") == 0);

    CHECK(update_with((const char *)image, 65536, IMAGE_BYTES, BB_HTTP_STALLED) == BB_NEXT_RESTART);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download stalled at 31% (64 of 200 KiB): no data for 5000 ms") == 0);

    /* a Content-Length that is not the offer's Z, and more bytes than Z without one */
    CHECK(update_with((const char *)image, IMAGE_BYTES, IMAGE_BYTES - 1, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|the server sends 204922 bytes; the offer said 204923") == 0);
    CHECK(!fake.erased[BB_OTA_1]);
    static uint8_t longer[IMAGE_BYTES + 10];
    memcpy(longer, image, IMAGE_BYTES);
    CHECK(update_with((const char *)longer, sizeof longer, -1, BB_HTTP_END) == BB_NEXT_RESTART);
    CHECK(fake.switches == 0 && strcmp(nvs("ota.report"), "err|1.5.0|the server sent more than the offered 204923 bytes") == 0);

    /* USB power pulled halfway: the download ends there and the old firmware stays */
    unplug_at = IMAGE_BYTES / 2;
    CHECK(update_with((const char *)image, IMAGE_BYTES, IMAGE_BYTES, BB_HTTP_END) == BB_NEXT_RESTART);
    unplug_at = 0;
    CHECK(fake.switches == 0 && strstr(nvs("ota.report"), "err|1.5.0|external power removed during download at ") == nvs("ota.report"));
    CHECK(fake.read_at < IMAGE_BYTES && printed("@bb state path=updateFailed"));

}

void test_download_401(void) {
    reset_fake();
    fake.power.source = BB_POWER_EXTERNAL;
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    script_text(401, "V1\nS 0\nX unauthorized device token refused\n.\n");
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RESTART);
    CHECK(nvs("token") == NULL && printed("@bb token.cleared request=download"));
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|download refused: HTTP 401 unauthorized device token refused") == 0);
}

void test_no_install(void) {
    /* an offer of what runs already, one too big, the battery gate, a 10,000-byte answer */
    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.5.0", BB_OTA_0);
    script_text(200, offer_text);
    CHECK(bb_badge_command(&badge, "check") == BB_NEXT_RUN && strstr(badge.notice, "Ignored offer: 1.5.0 is not newer than 1.5.0"));
    CHECK(fake.answer_next == 1 && !fake.erased[BB_OTA_1] && strcmp(badge.state, "awake.idle") == 0);

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, "V1\nU 1.5.0\nZ 9999999999\nM 0123456789abcdef0123456789abcdef\nP /d\n.\n");
    bb_badge_command(&badge, "check");
    CHECK(strstr(badge.notice, "9999999999 bytes do not fit the 1966080-byte slot") && !fake.erased[BB_OTA_1]);

    reset_fake();
    fake.power = (bb_power){.mv = 3849, .source = BB_POWER_EXTERNAL};
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script_text(200, offer_text);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update 1.5.0 needs 3.85 V or charging (battery at 3.85 V)") == 0 && fake.answer_next == 1);
    CHECK(printed("@bb state path=online.offered"));

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    static char huge[10050];
    memset(huge, 'L', sizeof huge - 1);
    memcpy(huge, "V1\nL ", 5);
    script(200, -1, huge, sizeof huge - 1, BB_HTTP_END);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update check failed: the answer is larger than 4096 bytes") == 0 && !fake.erased[BB_OTA_1]);

    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    script(200, 500, offer_text, 40, BB_HTTP_CUT);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.notice, "Update check failed: answer cut after 40 bytes") == 0);
    CHECK(strcmp(nvs("contact.fails"), "1") == 0);

    /* on battery alone the radio stays off */
    reset_fake();
    fake.power = (bb_power){.mv = 4100, .source = BB_POWER_BATTERY};
    start("1.4.0", BB_OTA_0);
    bb_badge_command(&badge, "check");
    CHECK(strcmp(badge.state, "awake.plugInPrompt") == 0 && fake.answer_next == 0);
}

void test_token_and_taps(void) {
    reset_fake();
    nvs_set(NULL, "contact.after", "99999999999999");
    start("1.4.0", BB_OTA_0);
    CHECK(bb_badge_command(&badge, "tap 04A1B2C3D0") == BB_NEXT_RUN && bb_badge_command(&badge, "tap 04A1B2C3D1") == BB_NEXT_RUN);
    CHECK(printed("@bb tap.queued n=1 uid=04A1B2C3D0 at=1") && printed("@bb tap.queued n=2 uid=04A1B2C3D1"));
    script_text(200, "V1\nS 900\nT 1795000000\nA 1\nR 2 unknown_card\n.\n");
    bb_badge_command(&badge, "sync");
    CHECK(strstr(fake.last_request, "tap=1|04A1B2C3D0|1\ntap=2|04A1B2C3D1|1\n"));
    CHECK(nvs("tap.0") == NULL && nvs("tap.1") == NULL && strcmp(nvs("tap.next"), "3") == 0);
    bb_badge_command(&badge, "tap 04A1B2C3D2");
    CHECK(strstr(nvs("tap.0"), "3|04A1B2C3D2|17950000"));

    /* a full queue (100 taps of the longest UIDs) and a report all go in one sync */
    for (int i = 0; i < 99; i++) bb_badge_command(&badge, "tap 0123456789ABCDEF0123");
    CHECK(bb_badge_command(&badge, "tap 04A1B2C3D3") == BB_NEXT_RUN && strstr(badge.notice, "not saved: 100 taps wait for a sync"));
    nvs_set(NULL, "ota.report", "err|1.5.0|download cut at 51% (983 of 1920 KiB)");
    script_text(200, "V1\nS 900\nT 1795000000\n.\n");
    bb_badge_command(&badge, "sync");
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|download cut at 51%") && strstr(fake.last_request, "tap=102|0123456789ABCDEF0123|"));
    CHECK(strcmp(badge.state, "awake.idle") == 0 && strstr(badge.screen, "Sync failed") == NULL);

    script_text(401, "V1\nS 0\nX unauthorized\n.\n");
    bb_badge_command(&badge, "check");
    CHECK(nvs("token") == NULL && printed("@bb token.cleared request=check") && strcmp(badge.state, "unprovisioned") == 0);
    bb_badge_command(&badge, "check");
    CHECK(printed("@bb refused command=check reason=\"not now: the badge is unprovisioned\""));
    start("1.4.0", BB_OTA_0);
    CHECK(strcmp(badge.state, "unprovisioned") == 0);
}

void test_interrupted_installs(void) {
    reset_fake();
    nvs_set(NULL, "ota.install", "download|1.5.0|131072|262144|Badge 1.5.0");
    script_text(200, "V1\nS 900\nT 1795000000\nO err|1.5.0|power lost during download after 50% (128 of 256 KiB)\n.\n");
    start("1.4.0", BB_OTA_0);
    CHECK(printed("@bb report.stored report=\"err|1.5.0|power lost during download after 50% (128 of 256 KiB)\""));
    CHECK(printed("@bb report.cleared") && nvs("ota.report") == NULL && strstr(badge.screen, "Update to 1.5.0 failed: power lost during download"));

    reset_fake();
    nvs_set(NULL, "ota.install", "switch|1.5.0|262144|262144|Badge 1.5.0");
    script_text(503, "V1\nS 300\nX server_error\n.\n");
    start("1.4.0", BB_OTA_0);
    CHECK(strcmp(nvs("ota.report"), "err|1.5.0|power lost during the partition switch") == 0);
    CHECK(strstr(badge.screen, "Sync failed: HTTP 503 server_error") && strcmp(badge.state, "awake.idle") == 0);

    /* a report waits for the next chance, whatever the backoff says */
    start("1.4.0", BB_OTA_0);
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|power lost during the partition switch"));
}

void test_plugged_in(void) {
    reset_fake();
    fake.power.source = BB_POWER_BATTERY;
    nvs_set(NULL, "ota.report", "err|1.5.0|power lost during download after 25% (64 of 256 KiB)");
    CHECK(start("1.4.0", BB_OTA_0) == BB_NEXT_RUN && strcmp(badge.state, "awake.idle") == 0);
    /* on battery the radio is off: nothing goes out, even with a report waiting */
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 0);
    /* plugged in: the report goes out at once, without a sync being asked for */
    script_text(200, "V1\nS 900\nT 1795000000\nO err|1.5.0|power lost during download after 25% (64 of 256 KiB)\n.\n");
    fake.power.source = BB_POWER_CHARGING;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 1 && strcmp(badge.state, "awake.idle") == 0);
    CHECK(strstr(fake.last_request, "ota=err|1.5.0|power lost during download after 25%") && nvs("ota.report") == NULL);
    /* still plugged in: no second sync */
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN && fake.answer_next == 1);
}

void test_console_and_sleep(void) {
    reset_fake();
    start("1.4.0", BB_OTA_0);
    const char *garbage[] = {"\x1b[A\x1b[B", "plug", "wait 600", "rm -rf /", "tap ';DROP TABLE", "\xff\xfe\xfd", "status extra"};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) CHECK(bb_badge_command(&badge, garbage[i]) == BB_NEXT_RUN);
    CHECK(printed("@bb refused command=plug reason=\"the simulated badge only"));
    CHECK(printed("@bb refused command=\"\\xff\\xfe\\xfd\""));
    CHECK(bb_badge_command(&badge, "status") == BB_NEXT_RUN && printed("@bb status version=1.4.0 slot=ota_0 state=awake.idle mv=3950 power=charging token=yes taps=0"));
    CHECK(bb_badge_command(&badge, "reboot") == BB_NEXT_RESTART);
    fake.now_ms += BB_SLEEP_AFTER_MS - 1;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_RUN);
    fake.now_ms += 1;
    CHECK(bb_badge_idle(&badge) == BB_NEXT_SLEEP && strcmp(badge.state, "asleep") == 0 && printed("@bb screen text=\"\""));
    bb_badge_wake(&badge);
    CHECK(strcmp(badge.state, "wakingUp") == 0 && printed("@bb state path=asleep\r\n@bb screen text=\"\"\r\n@bb state path=wakingUp\r\n"));
    bb_boot_info crashing = {.slot = BB_OTA_1, .version = "1.5.0", .cause = "restart", .crashes = true};
    bb_badge_start(&badge, &platform, &crashing);
    CHECK(strcmp(badge.state, "bricked") == 0 && strstr(badge.screen, "Recovery: reflash over USB"));
}
