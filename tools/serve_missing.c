/* `tilestack serve` in a build without libmicrohttpd (CMakeLists.txt leaves tools/serve_*.c
 * out): the command says what is missing. */
#include "cli.h"

#include <stdio.h>

int ts__cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "tilestack serve: this build has no HTTP server: install libmicrohttpd-dev "
            "(apt-get install libmicrohttpd-dev) and rebuild\n");
    return 2;
}
