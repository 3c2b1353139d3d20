/* `tilestack serve` in a build without libmicrohttpd (CMakeLists.txt leaves tools/serve_*.c
 * out): the command says what is missing. */
#include "cli.h"

#include <stdio.h>

static int missing(const char *cmd) {
    fprintf(stderr, "tilestack %s: this build has no HTTP server: install libmicrohttpd-dev "
            "(apt-get install libmicrohttpd-dev) and rebuild\n", cmd);
    return 2;
}

int ts__cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    return missing("serve");
}

int ts__bench_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    return missing("bench serve");
}
