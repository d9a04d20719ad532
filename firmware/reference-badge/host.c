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
 *
 * Flash writes take the time NOR flash takes and the download runs at a radio's speed (both
 * switchable), so the rig's power relay lands where it would on a badge. SIGUSR1 is the button:
 * it wakes the badge from deep sleep. SIGTERM ends the program (exit 0). With --usb, USB power is
 * what that file says, read each time the badge looks (its VBUS sense and charger pins):
 * `charging`, `external`, or anything else (`none`) for none; plugging in wakes a sleeping badge.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "badge.h"

/* the flash file: otadata (two 4 KiB copies), then ota_0 and ota_1 */
#define SECTOR 0x1000u
#define OTADATA_BYTES (2 * SECTOR)
#define SLOT_OFFSET(slot) (OTADATA_BYTES + (off_t)(slot) * BB_SLOT_BYTES)
#define FLASH_BYTES (OTADATA_BYTES + 2 * (off_t)BB_SLOT_BYTES)
#define CRASH_MARKER "BADGEBENCH:CRASH_ON_BOOT"
#define NVS_KEYS 200
#define HEAD_MAX 16384

/* timing of the badge's NOR flash (the simulated badge's figures, badge-sim/README.md) */
#define ERASE_MS_PER_64K 150
#define WRITE_MS_PER_4K 12
#define OTADATA_ERASE_MS 45

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("reference-badge: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(2);
}

static uint64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

static void sleep_ms(uint32_t ms) {
    struct timespec wait = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
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

static struct {
    int console;
    int flash;
    const char *nvs_path;
    const char *usb_path;
    char keys[NVS_KEYS][16];
    char values[NVS_KEYS][512];
    bool used[NVS_KEYS];
    uint64_t started_ms;
    bb_power power;
    bool flash_timing;
    uint32_t link_bytes_per_s;
    /* the HTTP exchange under way */
    int socket;
    char head[HEAD_MAX + 1];
    size_t spare_at, spare_len; /* body bytes that came with the head */
    long content_length;
    size_t body_read;
    uint64_t opened_ms;
} host = {.console = -1, .flash = -1, .socket = -1};

/* ---- console ---- */

static void console_write(void *ctx, const char *text, size_t len) {
    (void)ctx;
    write_all(host.console, text, len);
}

static uint64_t uptime_ms(void *ctx) {
    (void)ctx;
    return monotonic_ms() - host.started_ms;
}

/* The machine's monotonic clock runs on across a killed process, as a badge's RTC with its own cell. */
static uint64_t rtc_ms(void *ctx) {
    (void)ctx;
    return monotonic_ms();
}

static void delay_ms(void *ctx, uint32_t ms) {
    (void)ctx;
    sleep_ms(ms);
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

static bool nvs_get(void *ctx, const char *key, char *out, size_t cap) {
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

/* ---- flash: the slots and otadata ---- */

static bool flash_write(off_t offset, const void *data, size_t len) { return pwrite(host.flash, data, len, offset) == (ssize_t)len; }

static bool flash_erase(off_t offset, size_t len) {
    static uint8_t blank[SECTOR];
    memset(blank, 0xff, sizeof blank);
    for (size_t done = 0; done < len; done += SECTOR) {
        if (!flash_write(offset + (off_t)done, blank, SECTOR)) return false;
    }
    return true;
}

/* esp_ota_select_entry_t: the sequence number picks the slot, the CRC says the copy is whole */
typedef struct {
    uint32_t seq;
    uint8_t label[20];
    uint32_t state;
    uint32_t crc;
} otadata_entry;

static uint32_t crc32(const uint8_t *data, size_t len) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

static bool entry_valid(const otadata_entry *entry) {
    return entry->seq != 0xffffffffu && entry->seq != 0 && entry->crc == crc32((const uint8_t *)&entry->seq, sizeof entry->seq);
}

/* the valid copy with the higher sequence, or -1 when otadata is blank */
static int active_copy(otadata_entry copies[2]) {
    for (int i = 0; i < 2; i++) {
        if (pread(host.flash, &copies[i], sizeof copies[i], (off_t)i * SECTOR) != (ssize_t)sizeof copies[i]) memset(&copies[i], 0xff, sizeof copies[i]);
    }
    bool valid0 = entry_valid(&copies[0]), valid1 = entry_valid(&copies[1]);
    if (valid0 && valid1) return copies[0].seq >= copies[1].seq ? 0 : 1;
    return valid0 ? 0 : valid1 ? 1 : -1;
}

static bool ota_begin(void *ctx, bb_slot slot, uint32_t size) {
    (void)ctx;
    size_t bytes = ((size_t)size + SECTOR - 1) / SECTOR * SECTOR;
    if (bytes > BB_SLOT_BYTES) return false;
    if (host.flash_timing) sleep_ms((uint32_t)((bytes + 65535) / 65536 * ERASE_MS_PER_64K));
    return flash_erase(SLOT_OFFSET(slot), bytes);
}

static bool ota_write(void *ctx, bb_slot slot, uint32_t offset, const uint8_t *data, size_t len) {
    (void)ctx;
    if ((size_t)offset + len > BB_SLOT_BYTES) return false;
    if (host.flash_timing) sleep_ms((uint32_t)((len * WRITE_MS_PER_4K + 4095) / 4096));
    return flash_write(SLOT_OFFSET(slot) + offset, data, len);
}

/* esp_ota_set_boot_partition: a new entry in the copy not in use, erased first, then written */
static bool ota_set_boot(void *ctx, bb_slot slot) {
    (void)ctx;
    otadata_entry copies[2];
    int active = active_copy(copies);
    uint32_t seq = active < 0 ? 1 : copies[active].seq + 1;
    if ((seq - 1) % 2 != (uint32_t)slot) seq++;
    int target = active < 0 ? 0 : 1 - active;
    otadata_entry entry;
    memset(&entry, 0xff, sizeof entry);
    entry.seq = seq;
    entry.state = 0xffffffffu;
    entry.crc = crc32((const uint8_t *)&entry.seq, sizeof entry.seq);
    if (!flash_erase((off_t)target * SECTOR, SECTOR) || fsync(host.flash) != 0) return false;
    if (host.flash_timing) sleep_ms(OTADATA_ERASE_MS);
    return flash_write((off_t)target * SECTOR, &entry, sizeof entry) && fsync(host.flash) == 0;
}

/* ---- HTTP/1.0 over TCP, as esp_http_client does it ---- */

static bool server_of(char *host_name, size_t cap, char *port, size_t port_cap) {
    char url[256];
    if (!nvs_get(NULL, "server", url, sizeof url) || strncmp(url, "http://", 7) != 0) return false;
    const char *start = url + 7;
    const char *colon = strrchr(start, ':');
    const char *slash = strchr(start, '/');
    if (slash && slash[1] != '\0') return false;
    size_t host_len = colon ? (size_t)(colon - start) : (slash ? (size_t)(slash - start) : strlen(start));
    if (host_len == 0 || host_len >= cap) return false;
    memcpy(host_name, start, host_len);
    host_name[host_len] = '\0';
    size_t port_len = colon ? (slash ? (size_t)(slash - colon - 1) : strlen(colon + 1)) : 2;
    if (port_len == 0 || port_len >= port_cap) return false;
    if (colon) memcpy(port, colon + 1, port_len);
    else memcpy(port, "80", 2);
    port[port_len] = '\0';
    return true;
}

static uint32_t stall_ms = 5000;

/* waits for the socket to be readable; false after stall_ms of silence */
static bool readable(void) {
    struct pollfd wait = {.fd = host.socket, .events = POLLIN};
    int ready;
    while ((ready = poll(&wait, 1, (int)stall_ms)) == -1 && errno == EINTR) continue;
    return ready > 0;
}

static void http_close(void *ctx) {
    (void)ctx;
    if (host.socket >= 0) close(host.socket);
    host.socket = -1;
}

static bool http_open(void *ctx, const char *method, const char *path, const char *token, const char *body, size_t body_len, int *status,
                      long *content_length, char *why, size_t why_cap) {
    (void)ctx;
    char name[200], port[8];
    if (!server_of(name, sizeof name, port, sizeof port)) {
        snprintf(why, why_cap, "no server URL (http://HOST:PORT) in NVS");
        return false;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found;
    int error = getaddrinfo(name, port, &hints, &found);
    if (error != 0) {
        snprintf(why, why_cap, "%s: %s", name, gai_strerror(error));
        return false;
    }
    host.socket = -1;
    for (struct addrinfo *at = found; at && host.socket < 0; at = at->ai_next) {
        host.socket = socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol);
        if (host.socket >= 0 && connect(host.socket, at->ai_addr, at->ai_addrlen) != 0) http_close(NULL);
    }
    freeaddrinfo(found);
    if (host.socket < 0) {
        snprintf(why, why_cap, "%s:%s: %s", name, port, strerror(errno));
        return false;
    }
    char request[1024];
    int len = snprintf(request, sizeof request, "%s %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n", method, path, name, port, token);
    if (body) len += snprintf(request + len, sizeof request - (size_t)len, "Content-Type: text/plain\r\nContent-Length: %zu\r\n", body_len);
    len += snprintf(request + len, sizeof request - (size_t)len, "\r\n");
    if ((size_t)len >= sizeof request) {
        http_close(NULL);
        snprintf(why, why_cap, "request head too long");
        return false;
    }
    signal(SIGPIPE, SIG_IGN);
    if (send(host.socket, request, (size_t)len, 0) != len || (body && send(host.socket, body, body_len, 0) != (ssize_t)body_len)) {
        snprintf(why, why_cap, "send: %s", strerror(errno));
        http_close(NULL);
        return false;
    }
    /* the head, up to the blank line */
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        if (have == HEAD_MAX || !readable()) {
            snprintf(why, why_cap, have == HEAD_MAX ? "response head longer than %d bytes" : "no answer for %u ms", have == HEAD_MAX ? HEAD_MAX : (int)stall_ms);
            http_close(NULL);
            return false;
        }
        ssize_t n = recv(host.socket, host.head + have, HEAD_MAX - have, 0);
        if (n <= 0) {
            snprintf(why, why_cap, "answer cut after %zu bytes", have);
            http_close(NULL);
            return false;
        }
        have += (size_t)n;
        host.head[have] = '\0';
        /* over the bytes, not as a string: a NUL in a garbled head must not hide its end */
        end = memmem(host.head, have, "\r\n\r\n", 4);
    }
    if (sscanf(host.head, "HTTP/1.%*1[01] %3d", status) != 1) {
        snprintf(why, why_cap, "not an HTTP response");
        http_close(NULL);
        return false;
    }
    *content_length = -1;
    for (char *line = strstr(host.head, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) *content_length = strtol(line + 17, NULL, 10);
    }
    host.content_length = *content_length;
    host.spare_at = (size_t)(end + 4 - host.head);
    host.spare_len = have - host.spare_at;
    host.body_read = 0;
    host.opened_ms = monotonic_ms();
    return true;
}

static long http_read(void *ctx, uint8_t *buf, size_t cap) {
    (void)ctx;
    if (host.content_length >= 0 && host.body_read >= (size_t)host.content_length) return BB_HTTP_END;
    if (host.content_length >= 0 && cap > (size_t)host.content_length - host.body_read) cap = (size_t)host.content_length - host.body_read;
    long n;
    if (host.spare_len > 0) {
        n = (long)(cap < host.spare_len ? cap : host.spare_len);
        memcpy(buf, host.head + host.spare_at, (size_t)n);
        host.spare_at += (size_t)n;
        host.spare_len -= (size_t)n;
    } else {
        if (!readable()) return BB_HTTP_STALLED;
        ssize_t got = recv(host.socket, buf, cap, 0);
        if (got < 0) return BB_HTTP_CUT;
        if (got == 0) return host.content_length >= 0 ? BB_HTTP_CUT : BB_HTTP_END;
        n = (long)got;
    }
    host.body_read += (size_t)n;
    /* the radio's speed: the body may not arrive faster than the link carries it */
    if (host.link_bytes_per_s > 0) {
        uint64_t due = host.opened_ms + (uint64_t)host.body_read * 1000 / host.link_bytes_per_s;
        uint64_t now = monotonic_ms();
        if (due > now) sleep_ms((uint32_t)(due - now));
    }
    return n;
}

/* ---- the bootloader ---- */

static const char *ROM_BANNER = "ets Jul 29 2019 12:21:46\r\n\r\nrst:%s,boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n";

/* An app image in `slot`: magic 0xE9, then esp_app_desc_t (magic 0xABCD5432) at 0x20, version at 0x30. */
static bool image_in(bb_slot slot, bb_boot_info *out) {
    uint8_t head[0x50];
    if (pread(host.flash, head, sizeof head, SLOT_OFFSET(slot)) != (ssize_t)sizeof head) return false;
    if (head[0] != 0xe9 || head[0x20] != 0x32 || head[0x21] != 0x54 || head[0x22] != 0xcd || head[0x23] != 0xab) return false;
    if (!memchr(head + 0x30, '\0', 32)) return false;
    memcpy(out->version, head + 0x30, 32);
    if (!bb_version_parse(out->version, NULL)) return false;
    out->slot = slot;
    static uint8_t image[BB_SLOT_BYTES];
    ssize_t got = pread(host.flash, image, sizeof image, SLOT_OFFSET(slot));
    out->crashes = got > 0 && memmem(image, (size_t)got, CRASH_MARKER, strlen(CRASH_MARKER)) != NULL;
    return true;
}

/* otadata's slot if it holds an app, else the other one (as ESP-IDF's bootloader falls back) */
static bool bootloader(bb_boot_info *out) {
    otadata_entry copies[2];
    int active = active_copy(copies);
    bb_slot chosen = active < 0 ? BB_OTA_0 : (bb_slot)((copies[active].seq - 1) % 2);
    char line[120];
    snprintf(line, sizeof line, "I (%llu) boot: Loaded app from partition %s\r\n", (unsigned long long)uptime_ms(NULL), chosen == BB_OTA_0 ? "ota_0" : "ota_1");
    if (image_in(chosen, out)) {
        console_write(NULL, line, strlen(line));
        return true;
    }
    snprintf(line, sizeof line, "E (%llu) boot: %s has no valid app image\r\n", (unsigned long long)uptime_ms(NULL), chosen == BB_OTA_0 ? "ota_0" : "ota_1");
    console_write(NULL, line, strlen(line));
    return image_in(chosen == BB_OTA_0 ? BB_OTA_1 : BB_OTA_0, out);
}

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
    if (ftruncate(host.flash, FLASH_BYTES) != 0 || !flash_erase(0, (size_t)FLASH_BYTES) || !flash_write(SLOT_OFFSET(BB_OTA_0), image, len) || fsync(host.flash) != 0) {
        die("cannot write %s: %s", path, strerror(errno));
    }
    bb_boot_info boot;
    if (!image_in(BB_OTA_0, &boot)) die("%s has no app descriptor with a version", image_path);
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
    if (!nvs_set(NULL, "server", server) || !server_of(name, sizeof name, port, sizeof port)) die("--server must be http://HOST:PORT, got %s", server);
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
            sleep_ms((uint32_t)wait_ms); /* the host end is closed: nothing to hear */
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
    if (!console || !flash || !host.nvs_path) die("usage: reference-badge run --console TTY --flash FILE --nvs FILE [--mv 3950] [--power charging|external|battery] [--usb FILE]");
    const char *source = option(argc, argv, "--power", "charging");
    host.power.mv = (uint32_t)strtoul(option(argc, argv, "--mv", "3950"), NULL, 10);
    host.power.source = strcmp(source, "battery") == 0 ? BB_POWER_BATTERY : strcmp(source, "external") == 0 ? BB_POWER_EXTERNAL : BB_POWER_CHARGING;
    if (strcmp(source, "battery") != 0 && strcmp(source, "external") != 0 && strcmp(source, "charging") != 0) die("--power is battery, external or charging");
    stall_ms = (uint32_t)strtoul(option(argc, argv, "--stall-ms", "5000"), NULL, 10);
    host.usb_path = option(argc, argv, "--usb", NULL);
    host.link_bytes_per_s = (uint32_t)strtoul(option(argc, argv, "--link-kib-s", "64"), NULL, 10) * 1024;
    host.flash_timing = strcmp(option(argc, argv, "--flash-timing", "on"), "off") != 0;
    host.started_ms = monotonic_ms();
    open_flash(flash, false);
    nvs_load();
    open_console(console);
    signal(SIGUSR1, on_button);
    signal(SIGTERM, on_terminate);
    signal(SIGINT, on_terminate);

    static const bb_platform platform = {
        .console_write = console_write, .console_poll = console_poll, .uptime_ms = uptime_ms, .rtc_ms = rtc_ms, .delay_ms = delay_ms, .power = power,
        .nvs_get = nvs_get, .nvs_set = nvs_set, .nvs_erase = nvs_erase, .ota_begin = ota_begin, .ota_write = ota_write,
        .ota_set_boot = ota_set_boot, .http_open = http_open, .http_read = http_read, .http_close = http_close,
    };
    bb_platform hw = platform;
    hw.stall_timeout_ms = stall_ms;
    static bb_badge badge;
    const char *cause = option(argc, argv, "--cause", "power-on");
    const char *reset = "0x1 (POWERON_RESET)";
    while (!terminated) {
        char banner[160];
        snprintf(banner, sizeof banner, ROM_BANNER, reset);
        console_write(NULL, banner, strlen(banner));
        bb_boot_info boot = {.cause = cause};
        if (!bootloader(&boot)) {
            const char *none = "E (0) boot: No bootable app partitions in the partition table\r\n";
            console_write(NULL, none, strlen(none));
            while (!terminated) pause();
            break;
        }
        bb_next next = bb_badge_start(&badge, &hw, &boot);
        char line[BB_CONSOLE_LINE_MAX + 1];
        while (next == BB_NEXT_RUN && !terminated) {
            next = next_line(line, sizeof line, 100) ? bb_badge_command(&badge, line) : bb_badge_idle(&badge);
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
                sleep_ms(100);
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
