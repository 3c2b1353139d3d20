/* Fuzz target for the tile compiler's front end: any bytes through parse -> check -> lower ->
 * C emission must end in output or diagnostics, never a crash, hang or leak. A program that
 * parses must also print back to source that parses to the same printout (the AST printer's
 * round-trip promise, docs/tile-language.md §11).
 *
 * Built two ways: with libFuzzer (scripts/run_fuzz.sh, clang -fsanitize=fuzzer) and with the
 * self-contained driver fuzz_driver.c (the CMake target tilestack_fuzz_tile). */
#include "tilestack/tile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *out = NULL, *diag = NULL;
    /* the whole pipeline; the status does not matter, only that it returns cleanly */
    (void)ts_tile_translate((const char *)data, size, "fuzz.tile", TS_TILE_EMIT_C, NULL, &out, &diag);
    ts_tile_free(out);
    ts_tile_free(diag);
    out = NULL;
    if (ts_tile_translate((const char *)data, size, "fuzz.tile", TS_TILE_EMIT_AST, NULL, &out, NULL) == TS_OK) {
        char *again = NULL;
        ts_status s = ts_tile_translate(out, strlen(out), "printed.tile", TS_TILE_EMIT_AST, NULL, &again, NULL);
        if (s != TS_OK || strcmp(out, again) != 0) {
            fprintf(stderr, "fuzz_tile: the printed AST does not round-trip (status %d)\n--- printed:\n%s\n", (int)s, out);
            abort();
        }
        ts_tile_free(again);
    }
    ts_tile_free(out);
    return 0;
}
