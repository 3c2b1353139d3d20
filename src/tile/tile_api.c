/* Public entry point of tilec: parse -> check -> lower -> print / emit. */
#include "tilestack/tile.h"
#include "core/internal.h"
#include "tile/tile_internal.h"

#include <stdlib.h>
#include <string.h>

static char *dup_or_empty(const ts__tile_buf *b) {
    size_t n = b->data ? b->len : 0;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, b->data, n);
    s[n] = 0;
    return s;
}

ts_status ts_tile_translate(const char *source, size_t len, const char *filename, ts_tile_emit what,
                            const char *symbol_prefix, char **output, char **diagnostics) {
    if (diagnostics) *diagnostics = NULL;
    if (!output) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_translate: output is NULL");
    *output = NULL;
    if (!source && len) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_translate: source is NULL");
    if (what != TS_TILE_EMIT_AST && what != TS_TILE_EMIT_IR && what != TS_TILE_EMIT_C)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_translate: what = %d is not a ts_tile_emit", (int)what);
    if (symbol_prefix) {
        /* the prefix becomes part of C identifiers */
        for (const char *p = symbol_prefix; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                  (p != symbol_prefix && *p >= '0' && *p <= '9')))
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_translate: symbol_prefix must be a C identifier");
    }
    ts__tile_arena arena = {0};
    ts__tile_diag d = {.file = filename, .src = source ? source : "", .src_len = len};
    ts__tile_buf out = {0};
    bool ok = false;
    ts__tile_node *m = ts__tile_parse(&arena, &d);
    if (m && what == TS_TILE_EMIT_AST) {
        ts__tile_print(&out, m);
        ok = true;
    } else if (m) {
        ts__tile_program prog = {0};
        if (ts__tile_check(&arena, &d, m, &prog) && ts__tile_lower(&arena, &d, &prog)) {
            if (what == TS_TILE_EMIT_IR) {
                ts__tile_print_program(&out, &prog);
                ok = true;
            } else {
                ts__tile_emit_opts eo = {.prefix = symbol_prefix};
                ok = ts__tile_emit_c(&out, &d, &prog, &eo);
            }
        }
    }
    ts_status st = TS_OK;
    bool oom = out.oom || d.out.oom;
    if (ok && !oom) {
        *output = dup_or_empty(&out);
        if (!*output) oom = true;
    }
    if (diagnostics) {
        *diagnostics = dup_or_empty(&d.out);
        if (!*diagnostics) oom = true;
    }
    if (oom) {
        free(*output);
        *output = NULL;
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_translate: out of memory");
    } else if (!ok) {
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s", d.first[0] ? d.first : "tile program has errors");
    }
    ts__tile_buf_free(&out);
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&arena);
    return st;
}

void ts_tile_free(void *p) { free(p); }
