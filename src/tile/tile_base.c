/* tilec plumbing: arena, text buffers, diagnostics, dtype and operator tables. */
#include "tile/tile_internal.h"
#include "tilestack/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ts__tile_arena_blk {
    ts__tile_arena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ts__tile_alloc(ts__tile_arena *a, size_t bytes) {
    if (a->exhausted) return NULL;
    bytes = (bytes + 15) & ~(size_t)15;
    ts__tile_arena_blk *h = a->head;
    if (!h || h->cap - h->used < bytes) {
        size_t cap = bytes > (size_t)(1 << 16) ? bytes : (size_t)(1 << 16);
        /* The cap bounds memory on adversarial input (deep macro expansion, huge files). */
        if (a->used_total + cap > TS__TILE_MAX_ARENA) {
            a->exhausted = true;
            return NULL;
        }
        h = malloc(sizeof *h + cap);
        if (!h) {
            a->exhausted = true;
            return NULL;
        }
        h->next = a->head;
        h->used = 0;
        h->cap = cap;
        a->head = h;
        a->used_total += cap;
    }
    void *p = h->data + h->used;
    h->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *ts__tile_strdup(ts__tile_arena *a, const char *s, size_t n) {
    char *p = ts__tile_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ts__tile_arena_free(ts__tile_arena *a) {
    ts__tile_arena_blk *h = a->head;
    while (h) {
        ts__tile_arena_blk *n = h->next;
        free(h);
        h = n;
    }
    a->head = NULL;
    a->used_total = 0;
}

static void buf_reserve(ts__tile_buf *b, size_t extra) {
    if (b->oom) return;
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->data = p;
    b->cap = cap;
}

void ts__tile_buf_puts(ts__tile_buf *b, const char *s) {
    size_t n = strlen(s);
    buf_reserve(b, n);
    if (b->oom) return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void ts__tile_buf_printf(ts__tile_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_reserve(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ts__tile_buf_free(ts__tile_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* The source line of loc and a caret under its column; bytes outside printable ASCII are
 * shown as '?' so a terminal never sees raw invalid UTF-8 or control codes. */
static void show_line(ts__tile_diag *d, ts__tile_loc loc) {
    if (!d->src || loc.line < 1) return;
    const char *p = d->src, *end = d->src + d->src_len;
    for (int l = 1; l < loc.line && p < end; p++)
        if (*p == '\n') l++;
    if (p > end) return;
    const char *e = p;
    while (e < end && *e != '\n' && e - p < 400) e++;
    ts__tile_buf_puts(&d->out, "  ");
    char line[404];
    size_t n = 0;
    for (const char *q = p; q < e; q++) {
        unsigned char c = (unsigned char)*q;
        line[n++] = (c == '\t' || (c >= 0x20 && c < 0x7f)) ? (char)c : '?';
    }
    line[n] = 0;
    ts__tile_buf_puts(&d->out, line);
    ts__tile_buf_puts(&d->out, "\n  ");
    for (int i = 1; i < loc.col && i <= 400; i++)
        ts__tile_buf_puts(&d->out, (i - 1 < (int)n && line[i - 1] == '\t') ? "\t" : " ");
    ts__tile_buf_puts(&d->out, "^\n");
}

void ts__tile_error(ts__tile_diag *d, ts__tile_loc loc, const char *fmt, ...) {
    if (d->stopped) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *file = d->file ? d->file : "<input>";
    if (d->nerrors == 0) {
        if (d->note)
            snprintf(d->first, sizeof d->first, "%.60s:%d:%d: %.300s (%.100s at %d:%d)", file, loc.line,
                     loc.col, msg, d->note, d->note_loc.line, d->note_loc.col);
        else
            snprintf(d->first, sizeof d->first, "%.60s:%d:%d: %.400s", file, loc.line, loc.col, msg);
    }
    d->nerrors++;
    ts__tile_buf_printf(&d->out, "%s:%d:%d: error: %s\n", file, loc.line, loc.col, msg);
    show_line(d, loc);
    if (d->note) {
        ts__tile_buf_printf(&d->out, "%s:%d:%d: note: %s\n", file, d->note_loc.line, d->note_loc.col, d->note);
        show_line(d, d->note_loc);
    }
    if (d->nerrors >= TS__TILE_MAX_ERRORS) {
        ts__tile_buf_printf(&d->out, "%s: too many errors, stopping\n", file);
        d->stopped = true;
    }
}

static const struct {
    const char *name;
    int bytes;
    int ts;
} k_dt[TT_DT_COUNT] = {
    [TT_NONE] = {"?", 0, -1},
    [TT_BOOL] = {"bool", 1, TS_BOOL},   [TT_I8] = {"i8", 1, TS_I8},
    [TT_I16] = {"i16", 2, TS_I16},      [TT_I32] = {"i32", 4, TS_I32},
    [TT_I64] = {"i64", 8, TS_I64},      [TT_U8] = {"u8", 1, TS_U8},
    [TT_U16] = {"u16", 2, -1},          [TT_U32] = {"u32", 4, -1},
    [TT_U64] = {"u64", 8, -1},          [TT_F16] = {"f16", 2, TS_F16},
    [TT_BF16] = {"bf16", 2, TS_BF16},   [TT_F32] = {"f32", 4, TS_F32},
    [TT_F64] = {"f64", 8, TS_F64},      [TT_E4M3] = {"e4m3", 1, TS_E4M3},
    [TT_E5M2] = {"e5m2", 1, TS_E5M2},   [TT_E2M1] = {"e2m1", 1, -1},
    [TT_UE8M0] = {"ue8m0", 1, TS_UE8M0}, [TT_E5M6] = {"e5m6", 2, -1},
    [TT_E2M1X2] = {"e2m1x2", 1, TS_E2M1X2}, [TT_UE8M0X4] = {"ue8m0x4", 4, TS_UE8M0X4},
    [TT_E5M6X8] = {"e5m6x8", 1, TS_E5M6X8},
};

const char *ts__tile_dt_name(int dt) {
    if (dt > TT_NONE && dt < TT_DT_COUNT) return k_dt[dt].name;
    switch (dt) {
    case TT_INTLIT: return "integer literal";
    case TT_FLOATLIT: return "float literal";
    case TT_VOID: return "void";
    case TT_STRING: return "string";
    default: return "<error>";
    }
}

int ts__tile_dt_from_name(const char *s) {
    for (int i = 1; i < TT_DT_COUNT; i++)
        if (!strcmp(s, k_dt[i].name)) return i;
    return TT_NONE;
}

int ts__tile_dt_bytes(int dt) { return dt > TT_NONE && dt < TT_DT_COUNT ? k_dt[dt].bytes : 0; }
int ts__tile_dt_to_ts(int dt) { return dt > TT_NONE && dt < TT_DT_COUNT ? k_dt[dt].ts : -1; }

bool ts__tile_dt_is_int(int dt) {
    return (dt >= TT_I8 && dt <= TT_U64) || dt == TT_INTLIT;
}
bool ts__tile_dt_is_signed(int dt) { return (dt >= TT_I8 && dt <= TT_I64) || dt == TT_INTLIT; }
bool ts__tile_dt_is_float(int dt) { return dt == TT_F32 || dt == TT_F64 || dt == TT_FLOATLIT; }
bool ts__tile_dt_is_narrow(int dt) {
    return dt == TT_F16 || dt == TT_BF16 || (dt >= TT_E4M3 && dt <= TT_E5M6);
}
int ts__tile_dt_packed_raw(int dt) {
    switch (dt) {
    case TT_E2M1X2: return TT_U8;
    case TT_UE8M0X4: return TT_I32;
    case TT_E5M6X8: return TT_U8;
    default: return dt;
    }
}

const char *ts__tile_op_str(int op) {
    static const char *s[] = {"?", "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^",
                              "&&", "||", "==", "!=", "<", "<=", ">", ">=", "-", "!", "~", "="};
    return op >= 0 && op <= TO_SET ? s[op] : "?";
}
