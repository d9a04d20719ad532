/*
 * The test build's `panic [load|abort|wdt]` console command (build/reference-badge-test, made
 * with -DBB_TEST_BUILD; only that build compiles this file): the badge crashes the way an ESP32 running ESP-IDF does, printing its
 * panic handler's report (the Guru Meditation line, a register dump, `Backtrace: PC:SP ...`, or
 * the abort() and interrupt watchdog variants), then restarts. The addresses are this program's
 * own, read by unwinding its real stack (libgcc's unwinder: the PC and the canonical frame address
 * of each frame), so the rig's decoder can be tested end to end against the host build's ELF.
 * The test build is linked without PIE, so the addresses are the ELF's own and addr2line reads
 * them as printed. Every frame's IP the unwinder gives is a return address (the crashing frame's
 * too: its call of _Unwind_Backtrace), so, like ESP-IDF (esp_cpu_process_stack_pc), each is
 * printed one byte back, inside the call it returns from.
 */
#include <stdio.h>
#include <string.h>
#include <unwind.h>

#include "host.h"

#define MAX_FRAMES 16

typedef struct {
    uintptr_t pc[MAX_FRAMES];
    uintptr_t sp[MAX_FRAMES];
    int count;
} frames;

static _Unwind_Reason_Code one_frame(struct _Unwind_Context *context, void *arg) {
    frames *out = arg;
    if (out->count == MAX_FRAMES) return _URC_END_OF_STACK;
    uintptr_t pc = (uintptr_t)_Unwind_GetIP(context);
    if (pc == 0) return _URC_END_OF_STACK;
    out->pc[out->count] = pc - 1;
    out->sp[out->count] = (uintptr_t)_Unwind_GetCFA(context);
    out->count++;
    return _URC_NO_REASON;
}

static void say(const char *text) {
    host_console_write(NULL, text, strlen(text));
}

static void print_backtrace(const frames *stack) {
    char line[40 * MAX_FRAMES + 16] = "\r\n\r\nBacktrace:";
    size_t used = strlen(line);
    for (int i = 0; i < stack->count; i++) {
        used += (size_t)snprintf(line + used, sizeof line - used, " 0x%08lx:0x%08lx", (unsigned long)stack->pc[i], (unsigned long)stack->sp[i]);
    }
    snprintf(line + used, sizeof line - used, "\r\n\r\n");
    say(line);
}

/* noinline: the frame that crashes is a function of its own, as a faulting driver call would be */
__attribute__((noinline)) static void crash(const char *kind) {
    frames stack = {.count = 0};
    _Unwind_Backtrace(one_frame, &stack);
    char text[256];
    if (strcmp(kind, "abort") == 0) {
        snprintf(text, sizeof text, "\r\nabort() was called at PC 0x%08lx on core 0\r\n", (unsigned long)stack.pc[0]);
        say(text);
    } else {
        const char *reason = strcmp(kind, "wdt") == 0 ? "Interrupt wdt timeout on CPU0" : "LoadProhibited";
        snprintf(text, sizeof text, "Guru Meditation Error: Core  0 panic'ed (%s). Exception was unhandled.\r\n\r\nCore  0 register dump:\r\n", reason);
        say(text);
        snprintf(text, sizeof text, "PC      : 0x%08lx  PS      : 0x00060030  A0      : 0x%08lx  A1      : 0x%08lx  \r\n", (unsigned long)stack.pc[0],
                 (unsigned long)(stack.count > 1 ? stack.pc[1] : 0), (unsigned long)stack.sp[0]);
        say(text);
        say("EXCCAUSE: 0x0000001c  EXCVADDR: 0x00000000  \r\n");
    }
    print_backtrace(&stack);
    say("ELF file SHA256: 0000000000000000\r\n\r\nRebooting...\r\n");
}

bool host_test_command(const char *line, bb_next *next) {
    if (strncmp(line, "panic", 5) != 0 || (line[5] != '\0' && line[5] != ' ')) return false;
    const char *kind = line[5] == ' ' ? line + 6 : "load";
    if (strcmp(kind, "load") != 0 && strcmp(kind, "abort") != 0 && strcmp(kind, "wdt") != 0) return false;
    crash(kind);
    *next = BB_NEXT_RESTART;
    return true;
}
