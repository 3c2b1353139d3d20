/* tilestack tile language: the compiler front end (tilec) as a library call.
 *
 * The language is described in docs/tile-language.md. This header declares what exists
 * today: translating a .tile source into its checked AST, its lowered IR (both printed in
 * the surface syntax, re-parseable) or C11. ts_tile_compile / ts_tile_launch (JIT into a
 * shared object with a disk cache) come with phase 2 and will be declared here then. */
#ifndef TILESTACK_TILE_H
#define TILESTACK_TILE_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_tile_emit {
    TS_TILE_EMIT_AST = 0, /* the parsed module, pretty-printed (not checked) */
    TS_TILE_EMIT_IR = 1,  /* checked, macros expanded, tile operations lowered into loops */
    TS_TILE_EMIT_C = 2    /* C11 with one validating ts_status wrapper per kernel */
} ts_tile_emit;

/* Translate `len` bytes of tile-language source. `filename` is used in diagnostics only
 * (NULL: "<input>"); `symbol_prefix` prefixes the generated wrappers (NULL: "ts_").
 * On success *output is a NUL-terminated malloc'd string (free with ts_tile_free).
 * When `diagnostics` is non-NULL it always receives a malloc'd string (possibly empty) with
 * every message as "file:line:col: error: text", the source line and a caret.
 * Errors: TS_ERR_NULL_POINTER (source with len > 0, or output, NULL), TS_ERR_INVALID_ARGUMENT
 * (bad `what`, or the program has errors: ts_last_error() holds the first one),
 * TS_ERR_OUT_OF_MEMORY. *output is NULL on any error. */
TS_API ts_status ts_tile_translate(const char *source, size_t len, const char *filename,
                                   ts_tile_emit what, const char *symbol_prefix, char **output,
                                   char **diagnostics);

/* Free a string returned by ts_tile_translate. NULL is fine. */
TS_API void ts_tile_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
