/* `tilestack tilec`: compile a .tile file to its AST, lowered IR or C11. */
#include "cli.h"
#include "core/atomic_file.h"
#include "tilestack/tile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void tilec_usage(FILE *f) {
    fprintf(f, "usage: tilestack tilec <file.tile> [--emit-ast|--emit-ir|--emit-c] [-o out] [--prefix P]\n"
               "  --emit-ast  the parsed module, pretty-printed\n"
               "  --emit-ir   checked, macros expanded, tile operations lowered into loops\n"
               "  --emit-c    C11 with a validating ts_status wrapper per kernel (default)\n"
               "  --prefix P  prefix of the generated wrappers (default ts_)\n");
}

/* Reads at most limit+1 bytes so an oversized file reaches the compiler's size diagnostic
 * without loading all of it. */
static char *read_file(const char *path, size_t limit, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap > limit) break;
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

int ts__cmd_tilec(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *prefix = NULL;
    ts_tile_emit what = TS_TILE_EMIT_C;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--emit-ast")) what = TS_TILE_EMIT_AST;
        else if (!strcmp(a, "--emit-ir")) what = TS_TILE_EMIT_IR;
        else if (!strcmp(a, "--emit-c")) what = TS_TILE_EMIT_C;
        else if (!strcmp(a, "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(a, "--prefix") && i + 1 < argc) prefix = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tilec_usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tilestack tilec: unknown option '%s'\n", a);
            tilec_usage(stderr);
            return 2;
        } else if (!in) in = a;
        else {
            fprintf(stderr, "tilestack tilec: more than one input file\n");
            return 2;
        }
    }
    if (!in) {
        tilec_usage(stderr);
        return 2;
    }
    /* -o naming the input would replace the source with its own translation */
    if (out && ts__same_file(in, out)) {
        fprintf(stderr, "tilestack tilec: -o '%s' is the input file\n", out);
        return 2;
    }
    size_t len = 0;
    char *src = read_file(in, (size_t)8 << 20, &len);
    if (!src) {
        fprintf(stderr, "tilestack tilec: cannot read '%s'\n", in);
        return 1;
    }
    char *text = NULL, *diag = NULL;
    ts_status st = ts_tile_translate(src, len, in, what, prefix, &text, &diag);
    free(src);
    if (diag && diag[0]) fputs(diag, stderr);
    ts_tile_free(diag);
    if (st != TS_OK) {
        if (st != TS_ERR_INVALID_ARGUMENT) fprintf(stderr, "tilestack tilec: %s\n", ts_last_error());
        return 1;
    }
    int rc = 0;
    if (out) {
        /* a temporary file renamed over F once complete: a write that fails half way (disk
         * full, ulimit -f) leaves the previous F as it was */
        ts__atomic_file af;
        st = ts__atomic_open(&af, out);
        if (st == TS_OK) {
            fputs(text, af.f);
            st = ts__atomic_commit(&af);
        }
        if (st != TS_OK) {
            fprintf(stderr, "tilestack tilec: %s\n", ts_last_error());
            rc = 1;
        }
    } else if (fputs(text, stdout) < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "tilestack tilec: cannot write '<stdout>'\n");
        rc = 1;
    }
    ts_tile_free(text);
    return rc;
}
