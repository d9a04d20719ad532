/*
 * Unit tests of the C core and a fuzz of its parsers, built with -fsanitize=address,undefined
 * (`make test`): the parsers in test-parsers.c, the badge in test-badge.c, resuming downloads in test-resume.c, on the fake platform of
 * test-platform.c (flash and NVS in memory, the server's answers scripted). Usage: test [CONSOLE_FILE [FUZZ_ROUNDS [SEED]]]; everything the badge prints
 * goes to CONSOLE_FILE, whose `@bb` lines test/firmware/reference-badge.test.ts parses with the
 * TypeScript codec. Exit 0 when every check held; each failure prints its line.
 */
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

int test_failures = 0;
int test_checks = 0;

int main(int argc, char **argv) {
    if (argc > 1) fake.console = fopen(argv[1], "w");
    long rounds = argc > 2 ? atol(argv[2]) : 200000;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 88172645463325252ull;
    if (seed == 0) seed = 1;
    printf("seed %llu\n", (unsigned long long)seed);
    make_image();
    test_md5();
    test_versions();
    test_request();
    test_response_parser();
    test_cut_answers();
    test_bad_offers();
    test_console_commands();
    test_event_quoting();
    test_happy_update();
    test_failed_downloads();
    test_download_401();
    test_no_install();
    test_token_and_taps();
    test_interrupted_installs();
    test_plugged_in();
    test_console_and_sleep();
    test_signature_line();
    test_signed_updates();
    test_content_range();
    test_resume();
    test_resume_refused();
    test_server_busy();
    fuzz(rounds, seed);
    fuzz_content_range(rounds, seed);
    if (fake.console) fclose(fake.console);
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures == 0 ? 0 : 1;
}

