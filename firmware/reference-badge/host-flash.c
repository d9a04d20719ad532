/*
 * The host badge's flash: one file laid out as ESP-IDF lays out the partitions (otadata's two
 * copies, then ota_0 and ota_1), erased and written with the time NOR flash takes, the switch
 * written copy by copy with fsync, and the bootloader that picks the slot to run.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "host.h"

#define CRASH_MARKER "BADGEBENCH:CRASH_ON_BOOT"

/* timing of the badge's NOR flash (the simulated badge's figures, badge-sim/README.md) */
#define ERASE_MS_PER_64K 150
#define WRITE_MS_PER_4K 12
#define OTADATA_ERASE_MS 45

bool host_flash_write(off_t offset, const void *data, size_t len) { return pwrite(host.flash, data, len, offset) == (ssize_t)len; }

bool host_flash_erase(off_t offset, size_t len) {
    static uint8_t blank[SECTOR];
    memset(blank, 0xff, sizeof blank);
    for (size_t done = 0; done < len; done += SECTOR) {
        if (!host_flash_write(offset + (off_t)done, blank, SECTOR)) return false;
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

bool host_ota_begin(void *ctx, bb_slot slot, uint32_t size) {
    (void)ctx;
    size_t bytes = ((size_t)size + SECTOR - 1) / SECTOR * SECTOR;
    if (bytes > BB_SLOT_BYTES) return false;
    if (host.flash_timing) host_badge_sleep_ms((bytes + 65535) / 65536 * ERASE_MS_PER_64K);
    return host_flash_erase(SLOT_OFFSET(slot), bytes);
}

/* esp_ota_resume: the sectors from the checkpoint (a sector boundary) to the image's end are erased; those before keep what was written */
bool host_ota_resume(void *ctx, bb_slot slot, uint32_t size, uint32_t from) {
    (void)ctx;
    size_t bytes = ((size_t)size + SECTOR - 1) / SECTOR * SECTOR;
    if (bytes > BB_SLOT_BYTES || from % SECTOR != 0 || from > bytes) return false;
    if (host.flash_timing) host_badge_sleep_ms((bytes - from + 65535) / 65536 * ERASE_MS_PER_64K);
    return host_flash_erase(SLOT_OFFSET(slot) + from, bytes - from);
}

bool host_ota_write(void *ctx, bb_slot slot, uint32_t offset, const uint8_t *data, size_t len) {
    (void)ctx;
    if ((size_t)offset + len > BB_SLOT_BYTES) return false;
    if (host.flash_timing) host_badge_sleep_ms((len * WRITE_MS_PER_4K + 4095) / 4096);
    return host_flash_write(SLOT_OFFSET(slot) + offset, data, len);
}

/* esp_ota_set_boot_partition: a new entry in the copy not in use, erased first, then written */
bool host_ota_set_boot(void *ctx, bb_slot slot) {
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
    if (!host_flash_erase((off_t)target * SECTOR, SECTOR) || fsync(host.flash) != 0) return false;
    if (host.flash_timing) host_badge_sleep_ms(OTADATA_ERASE_MS);
    /* --hold-switch: the rig cuts the power here (a cut during the switch); the badge waits for it,
     * so it lands before the write when the relay takes less than the hold */
    if (host.hold_switch_ms > 0) host_badge_sleep_ms(host.hold_switch_ms);
    return host_flash_write((off_t)target * SECTOR, &entry, sizeof entry) && fsync(host.flash) == 0;
}

/* ---- the host_bootloader ---- */

/* An app image in `slot`: magic 0xE9, then esp_app_desc_t (magic 0xABCD5432) at 0x20, version at 0x30. */
bool host_image_in(bb_slot slot, bb_boot_info *out) {
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
    out->trusted_key_count = got > 0 ? bb_trusted_keys_scan(image, (size_t)got, out->trusted_keys) : 0;
    return true;
}

/* esp_partition_mmap: the slot as written, read into memory (the chip maps it through its cache) */
const uint8_t *host_ota_map(void *ctx, bb_slot slot, uint32_t size) {
    (void)ctx;
    static uint8_t mapped[BB_SLOT_BYTES];
    if (size > sizeof mapped) return NULL;
    return pread(host.flash, mapped, size, SLOT_OFFSET(slot)) == (ssize_t)size ? mapped : NULL;
}

/* otadata's slot if it holds an app, else the other one (as ESP-IDF's host_bootloader falls back) */
bool host_bootloader(bb_boot_info *out) {
    otadata_entry copies[2];
    int active = active_copy(copies);
    bb_slot chosen = active < 0 ? BB_OTA_0 : (bb_slot)((copies[active].seq - 1) % 2);
    char line[120];
    snprintf(line, sizeof line, "I (%llu) boot: Loaded app from partition %s\r\n", (unsigned long long)host_uptime_ms(NULL), chosen == BB_OTA_0 ? "ota_0" : "ota_1");
    if (host_image_in(chosen, out)) {
        host_console_write(NULL, line, strlen(line));
        return true;
    }
    snprintf(line, sizeof line, "E (%llu) boot: %s has no valid app image\r\n", (unsigned long long)host_uptime_ms(NULL), chosen == BB_OTA_0 ? "ota_0" : "ota_1");
    host_console_write(NULL, line, strlen(line));
    return host_image_in(chosen == BB_OTA_0 ? BB_OTA_1 : BB_OTA_0, out);
}
