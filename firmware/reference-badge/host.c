/*
 * The host build: the reference badge on a POSIX machine. The platform functions of badge.h over
 * what a machine has: the flash is a file (otadata, then the two app slots, laid out and erased
 * as ESP-IDF does it), NVS a file of key=value lines replaced atomically on every commit, the
 * console a serial line (a pty from socat, or a real port), the network TCP sockets speaking
 * HTTP/1.0. A power cut is this process being killed with SIGKILL: the next start reads what the
 * files kept, as a badge reads its flash after a brownout.
 *
 *   reference-badge flash --flash FILE IMAGE
 *   reference-badge provision --nvs FILE --server http://HOST:PORT --token TOKEN
 *   reference-badge run --console TTY --flash FILE --nvs FILE [--mv 3950] [--power charging]
 *                       [--usb FILE] [--stall-ms 5000] [--link-kib-s 64] [--flash-timing on|off]
 *                       [--clock-factor 1] [--hold-switch 0]
 *
 * Flash writes take the time NOR flash takes and the download runs at a radio's speed (both
 * switchable), so the rig's power relay lands where it would on a badge. --clock-factor F runs the
 * badge's whole clock F times faster than the wall (uptime, RTC, delays, flash timing, the link,
 * the stall timeout, the 30 s to sleep): every time the badge prints or measures is badge time,
 * and a rig that knows F scales its own waits (hil/README.md). A real badge has F = 1. SIGUSR1 is the button:
 * it wakes the badge from deep sleep. SIGTERM ends the program (exit 0). With --usb, USB power is
 * what that file says, read each time the badge looks (its VBUS sense and charger pins):
 * `charging`, `external`, or anything else (`none`) for none; plugging in wakes a sleeping badge.
 * --hold-switch MS is a test build's hook for a power cut during the partition switch: the switch
 * waits MS ms of badge time after the otadata erase, before the write (host-flash.c), so a rig
 * whose relay takes less than that to cut lands its cut there (hil/README.md).
 *
 * This file holds the clock, the console, the power, NVS and the commands; the flash file and the
 * bootloader are host-flash.c, the HTTP client host-http.c, with what they share in host.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "host.h"

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("reference-badge: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

void host_sleep_ms(uint32_t ms) {
    struct timespec wait = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&wait, &wait) == -1 && errno == EINTR) continue;
}

uint64_t host_badge_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) * host.clock_factor / 1000000;
}

void host_badge_sleep_ms(uint64_t badge_ms) {
    uint64_t wall_ns = badge_ms * 1000000 / host.clock_factor;
    struct timespec wait = {.tv_sec = (time_t)(wall_ns / 1000000000u), .tv_nsec = (long)(wall_ns % 1000000000u)};
    while (nanosleep(&wait, &wait) == -1 && errno == EINTR) continue;
}

static void write_all(int fd, const void *data, size_t len) {
    const char *at = data;
    while (len > 0) {
        ssize_t n = write(fd, at, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return;
        at += n;
        len -= (size_t)n;
    }
}

host_state host = {.console = -1, .flash = -1, .stall_ms = 5000, .clock_factor = 1};

/* ---- console ---- */

void host_console_write(void *ctx, const char *text, size_t len) {
    (void)ctx;
    write_all(host.console, text, len);
}

uint64_t host_uptime_ms(void *ctx) {
    (void)ctx;
    return host_badge_ms() - host.started_ms;
}

/* The machine's monotonic clock runs on across a killed process, as a badge's RTC with its own cell. */
static uint64_t rtc_ms(void *ctx) {
    (void)ctx;
    return host_badge_ms();
}

static void delay_ms(void *ctx, uint32_t ms) {
    (void)ctx;
    host_badge_sleep_ms(ms);
}

/* --usb: the file holds `charging` or `external` while USB power is plugged in; without it, --power */
static bb_power power(void *ctx) {
    (void)ctx;
    bb_power now = host.power;
    if (!host.usb_path) return now;
    char word[16] = "";
    FILE *file = fopen(host.usb_path, "r");
    if (file) {
        if (fscanf(file, "%15s", word) != 1) word[0] = '\0';
        fclose(file);
    }
    now.source = strcmp(word, "charging") == 0 ? BB_POWER_CHARGING : strcmp(word, "external") == 0 ? BB_POWER_EXTERNAL : BB_POWER_BATTERY;
    return now;
}

static bool usb_plugged(void) { return power(NULL).source != BB_POWER_BATTERY; }

/* ---- NVS: key=value lines; a commit writes a new file and renames it over the old one ---- */

static void nvs_load(void) {
    memset(host.used, 0, sizeof host.used);
    FILE *file = fopen(host.nvs_path, "r");
    if (!file) return;
    char line[600];
    int slot = 0;
    while (fgets(line, sizeof line, file) && slot < NVS_KEYS) {
        line[strcspn(line, "\n")] = '\0';
        char *equals = strchr(line, '=');
        if (!equals || equals - line > 15 || strlen(equals + 1) >= sizeof host.values[0]) continue;
        *equals = '\0';
        strcpy(host.keys[slot], line);
        strcpy(host.values[slot], equals + 1);
        host.used[slot++] = true;
    }
    fclose(file);
}

static bool nvs_commit(void) {
    char temporary[4096];
    snprintf(temporary, sizeof temporary, "%s.new", host.nvs_path);
    FILE *file = fopen(temporary, "w");
    if (!file) return false;
    for (int i = 0; i < NVS_KEYS; i++) {
        if (host.used[i]) fprintf(file, "%s=%s\n", host.keys[i], host.values[i]);
    }
    bool written = fflush(file) == 0 && fsync(fileno(file)) == 0;
    written = fclose(file) == 0 && written;
    return written && rename(temporary, host.nvs_path) == 0;
}

static int nvs_find(const char *key) {
    for (int i = 0; i < NVS_KEYS; i++) {
        if (host.used[i] && strcmp(host.keys[i], key) == 0) return i;
    }
    return -1;
}

bool host_nvs_get(void *ctx, const char *key, char *out, size_t cap) {
    (void)ctx;
    int i = nvs_find(key);
    if (i < 0 || strlen(host.values[i]) >= cap) return false;
    strcpy(out, host.values[i]);
    return true;
}

static bool nvs_set(void *ctx, const char *key, const char *value) {
    (void)ctx;
    if (strlen(key) > 15 || strlen(value) >= sizeof host.values[0] || strchr(value, '\n')) return false;
    int i = nvs_find(key);
    for (int j = 0; i < 0 && j < NVS_KEYS; j++) {
        if (!host.used[j]) i = j;
    }
    if (i < 0) return false;
    host.used[i] = true;
    strcpy(host.keys[i], key);
    strcpy(host.values[i], value);
    return nvs_commit();
}

static bool nvs_erase(void *ctx, const char *key) {
    (void)ctx;
    int i = nvs_find(key);
    if (i < 0) return true;
    host.used[i] = false;
    return nvs_commit();
}

static const char *ROM_BANNER = "ets Jul 29 2019 12:21:46\r\n\r\nrst:%s,boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n";

/* ---- the commands ---- */

static volatile sig_atomic_t button_pressed = 0;
static volatile sig_atomic_t terminated = 0;
static void on_button(int signal_number) {
    (void)signal_number;
    button_pressed = 1;
}
static void on_terminate(int signal_number) {
    (void)signal_number;
    terminated = 1;
}

static const char *option(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 2; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    }
    return fallback;
}

static void open_flash(const char *path, bool create) {
    host.flash = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (host.flash < 0) die("cannot open the flash file %s: %s", path, strerror(errno));
}

/* esptool write_flash of the app at ota_0 and erase_region of otadata: the badge boots it next */
static int flash_command(int argc, char **argv) {
    const char *path = option(argc, argv, "--flash", NULL);
    const char *image_path = argc > 2 ? argv[argc - 1] : NULL;
    if (!path || !image_path || strcmp(image_path, path) == 0) die("usage: reference-badge flash --flash FILE IMAGE");
    static uint8_t image[BB_SLOT_BYTES + 1];
    FILE *file = fopen(image_path, "rb");
    if (!file) die("cannot read %s: %s", image_path, strerror(errno));
    size_t len = fread(image, 1, sizeof image, file);
    fclose(file);
    if (len == 0 || len > BB_SLOT_BYTES || image[0] != 0xe9) die("%s is not an app image of at most %u bytes starting with 0xE9", image_path, BB_SLOT_BYTES);
    open_flash(path, true);
    if (ftruncate(host.flash, FLASH_BYTES) != 0 || !host_flash_erase(0, (size_t)FLASH_BYTES) || !host_flash_write(SLOT_OFFSET(BB_OTA_0), image, len) || fsync(host.flash) != 0) {
        die("cannot write %s: %s", path, strerror(errno));
    }
    bb_boot_info boot;
    if (!host_image_in(BB_OTA_0, &boot)) die("%s has no app descriptor with a version", image_path);
    printf("flashed %s (%zu bytes, version %s) into ota_0 of %s; otadata erased\n", image_path, len, boot.version, path);
    return 0;
}

/* nvs_flash_erase, then the server and the device token */
static int provision_command(int argc, char **argv) {
    host.nvs_path = option(argc, argv, "--nvs", NULL);
    const char *server = option(argc, argv, "--server", NULL);
    const char *token = option(argc, argv, "--token", NULL);
    if (!host.nvs_path || !server || !token) die("usage: reference-badge provision --nvs FILE --server http://HOST:PORT --token TOKEN");
    memset(host.used, 0, sizeof host.used);
    char name[200], port[8];
    if (!nvs_set(NULL, "server", server) || !host_server_of(name, sizeof name, port, sizeof port)) die("--server must be http://HOST:PORT, got %s", server);
    if (!nvs_set(NULL, "token", token)) die("cannot write %s: %s", host.nvs_path, strerror(errno));
    printf("provisioned %s: server %s, a device token\n", host.nvs_path, server);
    return 0;
}

/*
 * The next whole command line, waiting up to `wait_ms` for bytes. A line that fills the buffer
 * is handed on as it is (the core refuses it as too long) and the rest of it is dropped.
 */
static bool next_line(char *out, size_t cap, int wait_ms) {
    static char line[BB_CONSOLE_LINE_MAX + 1];
    static size_t len = 0;
    static bool too_long = false;
    static char bytes[512];
    static size_t have = 0, used = 0;
    for (;;) {
        while (used < have) {
            char c = bytes[used++];
            if (c == '\r' || c == '\n') {
                bool whole = !too_long;
                line[len] = '\0';
                len = 0;
                too_long = false;
                if (whole) {
                    snprintf(out, cap, "%s", line);
                    return true;
                }
            } else if (!too_long) {
                line[len++] = c;
                line[len] = '\0';
                if (len == BB_CONSOLE_LINE_MAX) {
                    too_long = true;
                    snprintf(out, cap, "%s", line);
                    return true;
                }
            }
        }
        struct pollfd wait = {.fd = host.console, .events = POLLIN};
        if (poll(&wait, 1, wait_ms) <= 0) return false;
        ssize_t n = read(host.console, bytes, sizeof bytes);
        if (n <= 0) {
            host_sleep_ms((uint32_t)wait_ms); /* the host end is closed: nothing to hear */
            return false;
        }
        have = (size_t)n;
        used = 0;
    }
}

static bool console_poll(void *ctx, char *line, size_t cap) {
    (void)ctx;
    return next_line(line, cap, 0);
}

/* Drops what the UART holds, and what was read but not used: a reset empties the FIFO. */
static void console_reset(void) {
    char line[BB_CONSOLE_LINE_MAX + 1];
    while (next_line(line, sizeof line, 0)) continue;
    tcflush(host.console, TCIFLUSH);
}

static void open_console(const char *path) {
    host.console = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (host.console < 0) die("cannot open the console %s: %s", path, strerror(errno));
    struct termios mode;
    if (tcgetattr(host.console, &mode) == 0) {
        cfmakeraw(&mode);
        cfsetispeed(&mode, B115200);
        cfsetospeed(&mode, B115200);
        tcsetattr(host.console, TCSANOW, &mode);
    }
    /* what the host sent while the badge had no power never reached its UART */
    console_reset();
}

static int run_command(int argc, char **argv) {
    const char *console = option(argc, argv, "--console", NULL);
    const char *flash = option(argc, argv, "--flash", NULL);
    host.nvs_path = option(argc, argv, "--nvs", NULL);
    if (!console || !flash || !host.nvs_path) die("usage: reference-badge run --console TTY --flash FILE --nvs FILE [--mv 3950] [--power charging|external|battery] [--usb FILE] [--clock-factor 1]");
    const char *source = option(argc, argv, "--power", "charging");
    host.power.mv = (uint32_t)strtoul(option(argc, argv, "--mv", "3950"), NULL, 10);
    host.power.source = strcmp(source, "battery") == 0 ? BB_POWER_BATTERY : strcmp(source, "external") == 0 ? BB_POWER_EXTERNAL : BB_POWER_CHARGING;
    if (strcmp(source, "battery") != 0 && strcmp(source, "external") != 0 && strcmp(source, "charging") != 0) die("--power is battery, external or charging");
    host.stall_ms = (uint32_t)strtoul(option(argc, argv, "--stall-ms", "5000"), NULL, 10);
    host.usb_path = option(argc, argv, "--usb", NULL);
    host.link_bytes_per_s = (uint32_t)strtoul(option(argc, argv, "--link-kib-s", "64"), NULL, 10) * 1024;
    host.flash_timing = strcmp(option(argc, argv, "--flash-timing", "on"), "off") != 0;
    host.hold_switch_ms = (uint32_t)strtoul(option(argc, argv, "--hold-switch", "0"), NULL, 10);
    const char *factor = option(argc, argv, "--clock-factor", "1");
    char *factor_end;
    unsigned long clock_factor = strtoul(factor, &factor_end, 10);
    if (*factor == '\0' || *factor_end != '\0' || clock_factor < 1 || clock_factor > 1000) die("--clock-factor is a whole number from 1 to 1000, got %s", factor);
    host.clock_factor = (uint32_t)clock_factor;
    host.started_ms = host_badge_ms();
    open_flash(flash, false);
    nvs_load();
    open_console(console);
    signal(SIGUSR1, on_button);
    signal(SIGTERM, on_terminate);
    signal(SIGINT, on_terminate);

    static const bb_platform platform = {
        .console_write = host_console_write, .console_poll = console_poll, .uptime_ms = host_uptime_ms, .rtc_ms = rtc_ms, .delay_ms = delay_ms, .power = power,
        .nvs_get = host_nvs_get, .nvs_set = nvs_set, .nvs_erase = nvs_erase, .ota_begin = host_ota_begin, .ota_resume = host_ota_resume, .ota_write = host_ota_write,
        .ota_set_boot = host_ota_set_boot, .ota_map = host_ota_map, .http_open = host_http_open, .http_read = host_http_read, .http_close = host_http_close,
    };
    bb_platform hw = platform;
    hw.stall_timeout_ms = host.stall_ms;
    static bb_badge badge;
    const char *cause = option(argc, argv, "--cause", "power-on");
    const char *reset = "0x1 (POWERON_RESET)";
    while (!terminated) {
        char banner[160];
        snprintf(banner, sizeof banner, ROM_BANNER, reset);
        host_console_write(NULL, banner, strlen(banner));
        bb_boot_info boot = {.cause = cause};
        if (!host_bootloader(&boot)) {
            const char *none = "E (0) boot: No bootable app partitions in the partition table\r\n";
            host_console_write(NULL, none, strlen(none));
            while (!terminated) pause();
            break;
        }
        bb_next next = bb_badge_start(&badge, &hw, &boot);
        char line[BB_CONSOLE_LINE_MAX + 1];
        while (next == BB_NEXT_RUN && !terminated) {
            if (!next_line(line, sizeof line, 100)) {
                next = bb_badge_idle(&badge);
                continue;
            }
#ifdef BB_TEST_BUILD
            if (host_test_command(line, &next)) continue;
#endif
            next = bb_badge_command(&badge, line);
        }
        console_reset();
        if (next == BB_NEXT_RESTART) {
            cause = "restart";
            reset = "0xc (SW_CPU_RESET)";
        } else if (next == BB_NEXT_SLEEP) {
            /* deep sleep: the console is off until the button (SIGUSR1) or USB power plugged in wakes the badge */
            button_pressed = 0;
            bool plugged = usb_plugged(), was_plugged = plugged;
            while (!button_pressed && !(plugged && !was_plugged) && !terminated) {
                console_reset();
                host_sleep_ms(100);
                was_plugged = plugged;
                plugged = usb_plugged();
            }
            if (terminated) break;
            bb_badge_wake(&badge);
            cause = "wake";
            reset = "0x5 (DEEPSLEEP_RESET)";
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "flash") == 0) return flash_command(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "provision") == 0) return provision_command(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return run_command(argc, argv);
    die("usage: reference-badge flash|provision|run ... (see the header of host.c, or README.md)");
    return 2;
}
