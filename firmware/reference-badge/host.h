/*
 * What the host build's files share (host.c, host-flash.c, host-http.c): the flash file's layout,
 * the host's state (the console, the flash file, NVS, the power, the link speed), and the
 * platform functions each file gives the others.
 */
#ifndef BB_HOST_H
#define BB_HOST_H

#include <sys/types.h>

#include "badge.h"

/* the flash file: otadata (two 4 KiB copies), then ota_0 and ota_1 */
#define SECTOR 0x1000u
#define OTADATA_BYTES (2 * SECTOR)
#define SLOT_OFFSET(slot) (OTADATA_BYTES + (off_t)(slot) * BB_SLOT_BYTES)
#define FLASH_BYTES (OTADATA_BYTES + 2 * (off_t)BB_SLOT_BYTES)
#define NVS_KEYS 200

typedef struct {
    int console;
    int flash;
    const char *nvs_path;
    const char *usb_path;
    char keys[NVS_KEYS][16];
    char values[NVS_KEYS][512];
    bool used[NVS_KEYS];
    uint64_t started_ms; /* badge ms (host_badge_ms) at the start of `run` */
    uint32_t clock_factor; /* --clock-factor: badge ms per wall ms (1: a real badge's time) */
    bb_power power;
    bool flash_timing;
    uint32_t link_bytes_per_s;
    uint32_t stall_ms; /* a socket silent this long is a stall */
    uint32_t hold_switch_ms; /* --hold-switch: badge ms the partition switch waits after the otadata erase */
} host_state;

extern host_state host;

/* host.c: time, the console, NVS */
void host_sleep_ms(uint32_t ms);
/* the badge's clock: the monotonic clock run --clock-factor times faster than the wall */
uint64_t host_badge_ms(void);
/* waits `badge_ms` on the badge's clock (badge_ms / --clock-factor of wall time) */
void host_badge_sleep_ms(uint64_t badge_ms);
uint64_t host_uptime_ms(void *ctx);
void host_console_write(void *ctx, const char *text, size_t len);
bool host_nvs_get(void *ctx, const char *key, char *out, size_t cap);

/* host-flash.c: the flash file, the OTA writes and switch, the bootloader */
bool host_flash_write(off_t offset, const void *data, size_t len);
bool host_flash_erase(off_t offset, size_t len);
bool host_ota_begin(void *ctx, bb_slot slot, uint32_t size);
bool host_ota_resume(void *ctx, bb_slot slot, uint32_t size, uint32_t from);
bool host_ota_write(void *ctx, bb_slot slot, uint32_t offset, const uint8_t *data, size_t len);
bool host_ota_set_boot(void *ctx, bb_slot slot);
const uint8_t *host_ota_map(void *ctx, bb_slot slot, uint32_t size);
bool host_image_in(bb_slot slot, bb_boot_info *out);
bool host_bootloader(bb_boot_info *out);

/* host-http.c: HTTP/1.0 over TCP to the server NVS names */
bool host_server_of(char *host_name, size_t cap, char *port, size_t port_cap);
bool host_http_open(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len, const bb_range_request *range,
                    bb_http_head *head, char *why, size_t why_cap);
long host_http_read(void *ctx, uint8_t *buf, size_t cap);
void host_http_close(void *ctx);

/* host-panic.c, the test build only (-DBB_TEST_BUILD): `panic [load|abort|wdt]` crashes as ESP-IDF reports it */
#ifdef BB_TEST_BUILD
bool host_test_command(const char *line, bb_next *next);
#endif

#endif
