/* tilec back end: C11 from the lowered, checked program.
 *
 * Per kernel: an argument struct, one range function per launch (blocks of the grid, run by
 * ts__parallel_for; tiles live in the per-thread scratch arena at offsets fixed here), and a
 * validating wrapper returning ts_status. Innermost parallel loops and fold loops become 8- or
 * 16-lane vector code where they can (the SIMD lowering, tile_simd.c and tile_simd2.c), plain
 * C loops otherwise.
 * The file must be compiled with -ffp-contract=off: float expressions are emitted exactly as
 * written, one IEEE operation each.
 * Text from the user reaches the C only two ways: identifiers (the lexer admits
 * [A-Za-z_][A-Za-z0-9_]* alone, so they are safe in code, literals and comments alike) and
 * everything else - check messages, the file name - through ts__tile_buf_escape. */
#include "tile/tile_simd.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- types ---------------- */

const char *ts__em_ctype(int dt) {
    switch (dt) {
    case TT_BOOL: return "uint8_t";
    case TT_I8: return "int8_t";
    case TT_I16: return "int16_t";
    case TT_I32: return "int32_t";
    case TT_I64: case TT_INTLIT: return "int64_t";
    case TT_U8: case TT_E4M3: case TT_E5M2: case TT_E2M1: case TT_UE8M0: case TT_E2M1X2: case TT_E5M6X8:
        return "uint8_t";
    case TT_U16: case TT_F16: case TT_BF16: case TT_E5M6: return "uint16_t";
    case TT_U32: return "uint32_t";
    case TT_U64: return "uint64_t";
    case TT_F32: case TT_FLOATLIT: return "float";
    case TT_F64: return "double";
    case TT_UE8M0X4: return "int32_t";
    default: return "void";
    }
}
/* C type of a value (bool values are C bool; storage uses a byte) */
static const char *vtype(int t) { return t == TT_BOOL ? "bool" : ts__em_ctype(t); }

const char *ts__em_utype(int t) {
    switch (t) {
    case TT_I64: case TT_U64: return "uint64_t";
    default: return "uint32_t";
    }
}
const char *ts__em_helper_suffix(int t) {
    switch (t) {
    case TT_I64: return "i64";
    case TT_U64: return "u64";
    case TT_U8: case TT_U16: case TT_U32: return "u32";
    default: return "i32";
    }
}

int ts__em_natural(int t) { return t == TT_INTLIT ? TT_I64 : t == TT_FLOATLIT ? TT_F32 : t; }
int ts__em_arith(int t) { return ts__tile_dt_is_narrow(t) ? TT_F32 : t; }

int ts__em_irank(int t) {
    switch (t) {
    case TT_I8: case TT_U8: return 1;
    case TT_I16: case TT_U16: return 2;
    case TT_I32: case TT_U32: return 3;
    default: return 4;
    }
}

/* the operand type of a binary node (mirrors the checker's unify) */
int ts__em_join(int x, int y) {
    x = ts__em_arith(x);
    y = ts__em_arith(y);
    if (x == y) return ts__em_natural(x);
    if (x == TT_INTLIT && y == TT_FLOATLIT) return TT_F32;
    if (y == TT_INTLIT && x == TT_FLOATLIT) return TT_F32;
    if (x == TT_INTLIT || x == TT_FLOATLIT) return ts__em_natural(y);
    if (y == TT_INTLIT || y == TT_FLOATLIT) return ts__em_natural(x);
    return ts__em_irank(x) >= ts__em_irank(y) ? x : y;
}

static const char *to_f32_fn(int narrow) {
    switch (narrow) {
    case TT_F16: return "ts_f16_to_f32";
    case TT_BF16: return "ts_bf16_to_f32";
    case TT_E4M3: return "ts_e4m3_to_f32";
    case TT_E5M2: return "ts_e5m2_to_f32";
    case TT_E2M1: return "ts__tile_e2m1_to_f32";
    case TT_UE8M0: return "ts_ue8m0_to_f32";
    default: return "ts_e5m6_to_f32";
    }
}
static const char *from_f32_fn(int narrow) {
    switch (narrow) {
    case TT_F16: return "ts_f32_to_f16";
    case TT_BF16: return "ts_f32_to_bf16";
    case TT_E4M3: return "ts_f32_to_e4m3";
    case TT_E5M2: return "ts_f32_to_e5m2";
    case TT_E2M1: return "ts_f32_to_e2m1";
    case TT_UE8M0: return "ts_f32_to_ue8m0";
    default: return "ts_f32_to_e5m6";
    }
}

/* Wrap the C text `s` of type `from` into type `to`; returns a malloc'd string. */
char *ts__em_conv(const char *s, int from, int to) {
    from = ts__em_natural(from);
    to = ts__em_natural(to);
    ts__tile_buf b = {0};
    if (from == to) ts__tile_buf_puts(&b, s);
    else if (ts__tile_dt_is_narrow(from)) {
        ts__tile_buf w = {0};
        ts__tile_buf_printf(&w, "%s(%s)", to_f32_fn(from), s);
        char *r = ts__em_conv(w.data ? w.data : "", TT_F32, to);
        ts__tile_buf_free(&w);
        return r;
    } else if (ts__tile_dt_is_narrow(to)) {
        if (from == TT_F32) ts__tile_buf_printf(&b, "%s(%s)", from_f32_fn(to), s);
        else ts__tile_buf_printf(&b, "%s((float)(%s))", from_f32_fn(to), s);
    } else if (to == TT_F32 || to == TT_F64) {
        ts__tile_buf_printf(&b, "((%s)(%s))", ts__em_ctype(to), s);
    } else if (to == TT_BOOL) {
        ts__tile_buf_printf(&b, "((%s) != 0)", s);
    } else if (from == TT_F32 || from == TT_F64) {
        ts__tile_buf_printf(&b, "ts__tile_f2%s((double)(%s))", ts__tile_dt_name(to), s);
    } else {
        ts__tile_buf_printf(&b, "((%s)(%s))", ts__em_ctype(to), s);
    }
    if (!b.data) ts__tile_buf_puts(&b, "");
    return b.data;
}

/* ---------------- literal expressions (all operands compile-time) ---------------- */

bool ts__em_lit_int(const ts__tile_node *n, int64_t *v) {
    switch (n->kind) {
    case TN_INT: *v = n->ival; return true;
    case TN_NAME: {
        const ts__tile_sym *s = n->sym;
        if (s && s->kind == SYM_CONST && s->is_const_int) return *v = s->ival, true;
        return false;
    }
    case TN_UNARY: {
        int64_t x;
        if (!ts__em_lit_int(n->a, &x)) return false;
        if (n->op == TO_NEG) *v = (int64_t)(0 - (uint64_t)x);
        else if (n->op == TO_BNOT) *v = ~x;
        else return false;
        return true;
    }
    case TN_BINARY: {
        int64_t x, y;
        if (!ts__em_lit_int(n->a, &x) || !ts__em_lit_int(n->b, &y)) return false;
        uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
        switch (n->op) {
        case TO_ADD: *v = (int64_t)(ux + uy); return true;
        case TO_SUB: *v = (int64_t)(ux - uy); return true;
        case TO_MUL: *v = (int64_t)(ux * uy); return true;
        case TO_DIV: *v = y == 0 ? 0 : (y == -1 ? (int64_t)(0 - ux) : x / y); return true;
        case TO_MOD: *v = y == 0 ? x : (y == -1 ? 0 : x % y); return true;
        case TO_SHL: *v = (int64_t)(ux << (uy & 63)); return true;
        case TO_SHR: *v = x >> (uy & 63); return true;
        case TO_BAND: *v = x & y; return true;
        case TO_BOR: *v = x | y; return true;
        case TO_BXOR: *v = x ^ y; return true;
        default: return false;
        }
    }
    case TN_CALL: {
        int64_t x, y;
        if (n->nlist != 2 || !ts__em_lit_int(n->list[0], &x) || !ts__em_lit_int(n->list[1], &y)) return false;
        if (!strcmp(n->name, "min")) return *v = x < y ? x : y, true;
        if (!strcmp(n->name, "max")) return *v = x > y ? x : y, true;
        if (!strcmp(n->name, "ceildiv")) {
            if (y == 0) return *v = 0, true;
            int64_t q = y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y;
            if (y != -1 && x % y != 0 && ((x < 0) == (y < 0))) q++;
            return *v = q, true;
        }
        return false;
    }
    default: return false;
    }
}

/* Float literal expressions are evaluated in double, then rounded once to the target. */
bool ts__em_lit_float(const ts__tile_node *n, double *v) {
    int64_t i;
    if (n->ty == TT_INTLIT && ts__em_lit_int(n, &i)) return *v = (double)i, true;
    switch (n->kind) {
    case TN_FLOAT: *v = n->fval; return true;
    case TN_NAME: {
        const ts__tile_sym *s = n->sym;
        if (s && s->kind == SYM_CONST && !s->is_const_int) return *v = s->fval, true;
        return false;
    }
    case TN_UNARY: {
        double x;
        if (n->op != TO_NEG || !ts__em_lit_float(n->a, &x)) return false;
        return *v = -x, true;
    }
    case TN_BINARY: {
        double x, y;
        if (!ts__em_lit_float(n->a, &x) || !ts__em_lit_float(n->b, &y)) return false;
        switch (n->op) {
        case TO_ADD: *v = x + y; return true;
        case TO_SUB: *v = x - y; return true;
        case TO_MUL: *v = x * y; return true;
        case TO_DIV: *v = x / y; return true;
        default: return false;
        }
    }
    default: return false;
    }
}

static void put_float(ts__tile_buf *b, double v, int t) {
    if (t == TT_F64) {
        if (isinf(v)) ts__tile_buf_puts(b, v < 0 ? "(-(double)INFINITY)" : "((double)INFINITY)");
        else if (isnan(v)) ts__tile_buf_puts(b, "((double)NAN)");
        else ts__tile_buf_printf(b, "%a", v);
        return;
    }
    float f = (float)v;
    if (isinf(f)) ts__tile_buf_puts(b, f < 0 ? "(-INFINITY)" : "INFINITY");
    else if (isnan(f)) ts__tile_buf_puts(b, "NAN");
    else ts__tile_buf_printf(b, "%af", (double)f);
}

/* ---------------- expressions ---------------- */

static void ex(em *e, ts__tile_buf *b, const ts__tile_node *n, int want);

char *ts__em_ex_str(em *e, const ts__tile_node *n, int want) {
    ts__tile_buf t = {0};
    ex(e, &t, n, want);
    if (!t.data) ts__tile_buf_puts(&t, "");
    return t.data;
}

void ts__em_sym_ref(em *e, ts__tile_buf *b, const ts__tile_sym *s) {
    (void)e;
    switch (s->kind) {
    case SYM_DIM: case SYM_STRIDE: ts__tile_buf_printf(b, "a->d_%s", s->name); break;
    case SYM_SCALAR: ts__tile_buf_printf(b, "a->s_%s", s->name); break;
    case SYM_LET:
        if (s->index) ts__tile_buf_printf(b, "a->l_%s", s->name);
        else ts__tile_buf_printf(b, "v%d_%s", s->uid, s->name);
        break;
    default: ts__tile_buf_printf(b, "v%d_%s", s->uid, s->name);
    }
}

/* "* stride" of tensor dim i: constant strides are emitted as numbers (the wrapper checked
 * them; row-major views have stride 1 in the last dim), so the C compiler sees unit-stride
 * accesses */
void ts__em_stride_factor(ts__tile_buf *b, const ts__tile_sym *s, int i) {
    if (!s->strided && i == s->rank - 1) return;
    if (s->strided && !s->stridesym[i]) ts__tile_buf_printf(b, " * INT64_C(%lld)", (long long)s->cstrides[i]);
    else ts__tile_buf_printf(b, " * a->st_%s_%d", s->name, i);
}

/* the lvalue text of an element */
static void elem(em *e, ts__tile_buf *b, const ts__tile_node *n) {
    const ts__tile_sym *s = n->a->sym;
    if (s->kind == SYM_TENSOR) {
        ts__tile_buf_printf(b, "a->p_%s[", s->name);
        for (int32_t i = 0; i < n->nlist; i++) {
            char *ix = ts__em_ex_str(e, n->list[i], TT_I64);
            ts__tile_buf_printf(b, "%s(%s)", i ? " + " : "", ix);
            ts__em_stride_factor(b, s, i);
            free(ix);
        }
        ts__tile_buf_puts(b, "]");
        return;
    }
    ts__tile_buf_printf(b, "t%d_%s[", s->uid, s->name);
    /* row-major over the constant dims: ((i0 * D1 + i1) * D2 + i2) */
    for (int32_t i = 0; i + 1 < n->nlist; i++) ts__tile_buf_puts(b, "(");
    for (int32_t i = 0; i < n->nlist; i++) {
        char *ix = ts__em_ex_str(e, n->list[i], TT_I64);
        if (i) ts__tile_buf_printf(b, " + (%s))", ix);
        else ts__tile_buf_printf(b, "(%s)", ix);
        if (i + 1 < n->nlist) ts__tile_buf_printf(b, " * %lld", (long long)s->cdims[i + 1]);
        free(ix);
    }
    ts__tile_buf_puts(b, "]");
}

const char *ts__em_unary_fn(const char *f, int t) {
    bool d = t == TT_F64;
    if (!strcmp(f, "exp")) return "ts__tile_expf";
    if (!strcmp(f, "exp2")) return "ts__tile_exp2f";
    if (!strcmp(f, "log")) return "ts__tile_logf";
    if (!strcmp(f, "log2")) return "ts__tile_log2f";
    if (!strcmp(f, "sigmoid")) return "ts__tile_sigmoidf";
    if (!strcmp(f, "softplus")) return "ts__tile_softplusf";
    if (!strcmp(f, "rsqrt")) return "ts__tile_rsqrtf";
    if (!strcmp(f, "sqrt")) return d ? "sqrt" : "sqrtf";
    if (!strcmp(f, "floor")) return d ? "floor" : "floorf";
    if (!strcmp(f, "ceil")) return d ? "ceil" : "ceilf";
    if (!strcmp(f, "trunc")) return d ? "trunc" : "truncf";
    if (!strcmp(f, "round")) return d ? "rint" : "rintf"; /* ties to even (default mode) */
    return "?";
}

static void limit_value(ts__tile_buf *b, const char *f, int dt) {
    bool mx = !strcmp(f, "maxval");
    switch (dt) {
    case TT_I8: ts__tile_buf_puts(b, mx ? "INT8_MAX" : "INT8_MIN"); return;
    case TT_I16: ts__tile_buf_puts(b, mx ? "INT16_MAX" : "INT16_MIN"); return;
    case TT_I32: ts__tile_buf_puts(b, mx ? "INT32_MAX" : "INT32_MIN"); return;
    case TT_I64: ts__tile_buf_puts(b, mx ? "INT64_MAX" : "INT64_MIN"); return;
    case TT_U8: ts__tile_buf_puts(b, mx ? "UINT8_MAX" : "0"); return;
    case TT_U16: ts__tile_buf_puts(b, mx ? "UINT16_MAX" : "0"); return;
    case TT_U32: ts__tile_buf_puts(b, mx ? "UINT32_MAX" : "0"); return;
    case TT_U64: ts__tile_buf_puts(b, mx ? "UINT64_MAX" : "0"); return;
    case TT_F64: ts__tile_buf_puts(b, mx ? "DBL_MAX" : "(-DBL_MAX)"); return;
    default: break;
    }
    double v;
    switch (dt) {
    case TT_F16: v = 65504.0; break;
    case TT_BF16: v = 0x1.fep127; break;
    case TT_E4M3: v = 448.0; break;
    case TT_E5M2: v = 57344.0; break;
    case TT_E2M1: v = 6.0; break;
    case TT_UE8M0: v = 0x1p127; break;
    case TT_E5M6: v = 65024.0; break;
    default: v = 3.4028234663852886e38;
    }
    put_float(b, mx ? v : (dt == TT_UE8M0 ? 0x1p-127 : -v), TT_F32);
}

static void call_ex(em *e, ts__tile_buf *b, const ts__tile_node *n) {
    const char *f = n->name;
    int t = ts__em_natural(n->ty);
    if (!strcmp(f, "cast")) {
        int from = n->list[0]->ty;
        if (from == TT_INTLIT || from == TT_FLOATLIT) from = ts__em_natural(from);
        char *in = ts__em_ex_str(e, n->list[0], from);
        char *r = ts__em_conv(in, from, n->ty);
        ts__tile_buf_puts(b, r);
        free(in);
        free(r);
        return;
    }
    if (!strcmp(f, "bitcast")) {
        int from = n->list[0]->ty, to = n->ty;
        char *in = ts__em_ex_str(e, n->list[0], from);
        if (from == TT_F32) ts__tile_buf_printf(b, "((%s)ts__tile_f32_bits(%s))", ts__em_ctype(to), in);
        else if (from == TT_F64) ts__tile_buf_printf(b, "((%s)ts__tile_f64_bits(%s))", ts__em_ctype(to), in);
        else if (to == TT_F32) ts__tile_buf_printf(b, "ts__tile_bits_f32((uint32_t)(%s))", in);
        else if (to == TT_F64) ts__tile_buf_printf(b, "ts__tile_bits_f64((uint64_t)(%s))", in);
        else ts__tile_buf_printf(b, "((%s)(%s))", ts__em_ctype(to), in);
        free(in);
        return;
    }
    if (!strcmp(f, "inf")) {
        ts__tile_buf_puts(b, t == TT_F64 ? "((double)INFINITY)" : "INFINITY");
        return;
    }
    if (!strcmp(f, "maxval") || !strcmp(f, "minval")) {
        int dt = ts__tile_dt_packed_raw(n->dt);
        if (dt == TT_F32) ts__tile_buf_puts(b, f[1] == 'a' ? "FLT_MAX" : "(-FLT_MAX)");
        else limit_value(b, f, dt);
        return;
    }
    if (!strcmp(f, "select")) {
        char *c = ts__em_ex_str(e, n->list[0], TT_BOOL);
        char *x = ts__em_ex_str(e, n->list[1], t), *y = ts__em_ex_str(e, n->list[2], t);
        ts__tile_buf_printf(b, "((%s) ? (%s) : (%s))", c, x, y);
        free(c), free(x), free(y);
        return;
    }
    if (!strcmp(f, "isfinite") || !strcmp(f, "isnan")) {
        int at = ts__em_natural(ts__em_arith(n->list[0]->ty));
        if (at != TT_F64) at = TT_F32;
        char *x = ts__em_ex_str(e, n->list[0], at);
        ts__tile_buf_printf(b, "(%s(%s) != 0)", f, x);
        free(x);
        return;
    }
    if (!strcmp(f, "abs")) {
        char *x = ts__em_ex_str(e, n->list[0], t);
        if (t == TT_F32) ts__tile_buf_printf(b, "fabsf(%s)", x);
        else if (t == TT_F64) ts__tile_buf_printf(b, "fabs(%s)", x);
        else if (!ts__tile_dt_is_signed(t)) ts__tile_buf_printf(b, "(%s)", x);
        else ts__tile_buf_printf(b, "((%s)ts__tile_abs_%s(%s))", ts__em_ctype(t), ts__em_helper_suffix(t), x);
        free(x);
        return;
    }
    if (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "clamp") || !strcmp(f, "ceildiv")) {
        char *x = ts__em_ex_str(e, n->list[0], t), *y = ts__em_ex_str(e, n->list[1], t);
        char *z = n->nlist > 2 ? ts__em_ex_str(e, n->list[2], t) : NULL;
        bool fl = t == TT_F32 || t == TT_F64;
        const char *mx = t == TT_F64 ? "ts__tile_max64f" : "ts__tile_maxf";
        const char *mn = t == TT_F64 ? "ts__tile_min64f" : "ts__tile_minf";
        if (!strcmp(f, "ceildiv"))
            ts__tile_buf_printf(b, "((%s)ts__tile_ceildiv_%s(%s, %s))", ts__em_ctype(t), ts__em_helper_suffix(t), x, y);
        else if (!strcmp(f, "clamp")) {
            if (fl) ts__tile_buf_printf(b, "%s(%s(%s, %s), %s)", mn, mx, x, y, z);
            else {
                const char *sx = ts__tile_dt_is_signed(t) ? "i" : "u";
                ts__tile_buf_printf(b, "((%s)ts__tile_min%s(ts__tile_max%s(%s, %s), %s))", ts__em_ctype(t), sx, sx, x, y, z);
            }
        } else if (fl) ts__tile_buf_printf(b, "%s(%s, %s)", f[1] == 'a' ? mx : mn, x, y);
        else
            ts__tile_buf_printf(b, "((%s)ts__tile_%s%s(%s, %s))", ts__em_ctype(t), f[1] == 'a' ? "max" : "min",
                                ts__tile_dt_is_signed(t) ? "i" : "u", x, y);
        free(x), free(y), free(z);
        return;
    }
    if (!strcmp(f, "fma")) {
        char *x = ts__em_ex_str(e, n->list[0], t), *y = ts__em_ex_str(e, n->list[1], t), *z = ts__em_ex_str(e, n->list[2], t);
        ts__tile_buf_printf(b, "%s(%s, %s, %s)", t == TT_F64 ? "fma" : "fmaf", x, y, z);
        free(x), free(y), free(z);
        return;
    }
    /* unary math */
    char *x = ts__em_ex_str(e, n->list[0], t);
    ts__tile_buf_printf(b, "%s(%s)", ts__em_unary_fn(f, t), x);
    free(x);
}

/* natural-typed C text of n */
static void ex_natural(em *e, ts__tile_buf *b, const ts__tile_node *n) {
    switch (n->kind) {
    case TN_BOOL: ts__tile_buf_puts(b, n->ival ? "true" : "false"); return;
    case TN_NAME: ts__em_sym_ref(e, b, n->sym); return;
    case TN_INDEX: {
        const ts__tile_sym *s = n->a->sym;
        if (s->dt == TT_BOOL) {
            ts__tile_buf_puts(b, "(");
            elem(e, b, n);
            ts__tile_buf_puts(b, " != 0)");
        } else elem(e, b, n);
        return;
    }
    case TN_UNARY: {
        int t = ts__em_natural(n->ty);
        char *x = ts__em_ex_str(e, n->a, n->op == TO_NOT ? TT_BOOL : t);
        if (n->op == TO_NOT) ts__tile_buf_printf(b, "(!%s)", x);
        else if (n->op == TO_BNOT) ts__tile_buf_printf(b, "((%s)~%s)", ts__em_ctype(t), x);
        else if (t == TT_F32 || t == TT_F64) ts__tile_buf_printf(b, "(-%s)", x);
        else ts__tile_buf_printf(b, "((%s)((%s)0 - (%s)%s))", ts__em_ctype(t), ts__em_utype(t), ts__em_utype(t), x);
        free(x);
        return;
    }
    case TN_BINARY: {
        int op = n->op;
        int t = (op == TO_LAND || op == TO_LOR) ? TT_BOOL : ts__em_join(n->a->ty, n->b->ty);
        if ((op == TO_EQ || op == TO_NE || op == TO_BAND || op == TO_BOR || op == TO_BXOR) &&
            n->a->ty == TT_BOOL && n->b->ty == TT_BOOL)
            t = TT_BOOL;
        char *x = ts__em_ex_str(e, n->a, t), *y = ts__em_ex_str(e, n->b, t);
        const char *os = ts__tile_op_str(op);
        bool fl = t == TT_F32 || t == TT_F64;
        if (t == TT_BOOL || fl || op >= TO_LAND) {
            ts__tile_buf_printf(b, "(%s %s %s)", x, os, y);
        } else if (op == TO_ADD || op == TO_SUB || op == TO_MUL) {
            ts__tile_buf_printf(b, "((%s)((%s)%s %s (%s)%s))", ts__em_ctype(t), ts__em_utype(t), x, os, ts__em_utype(t), y);
        } else if (op == TO_DIV || op == TO_MOD || op == TO_SHL || op == TO_SHR) {
            static const char *const nm[] = {[TO_DIV] = "div", [TO_MOD] = "mod", [TO_SHL] = "shl", [TO_SHR] = "shr"};
            ts__tile_buf_printf(b, "((%s)ts__tile_%s_%s(%s, %s))", ts__em_ctype(t), nm[op], ts__em_helper_suffix(t), x, y);
        } else {
            ts__tile_buf_printf(b, "((%s)(%s %s %s))", ts__em_ctype(t), x, os, y);
        }
        free(x), free(y);
        return;
    }
    case TN_CALL: call_ex(e, b, n); return;
    default: ts__tile_buf_puts(b, "0 /* ? */");
    }
}

static void ex(em *e, ts__tile_buf *b, const ts__tile_node *n, int want) {
    int from = n->ty;
    if (want == TT_NONE) want = ts__em_natural(from);
    if (from == TT_INTLIT || from == TT_FLOATLIT) {
        int64_t iv;
        double fv;
        int w = ts__em_natural(want);
        if (from == TT_INTLIT && ts__em_lit_int(n, &iv)) {
            if (w == TT_F32 || w == TT_F64) put_float(b, (double)iv, w);
            else if (ts__tile_dt_is_narrow(w)) {
                char tmp[64];
                ts__tile_buf t = {0};
                put_float(&t, (double)iv, TT_F32);
                snprintf(tmp, sizeof tmp, "%s", t.data ? t.data : "0");
                ts__tile_buf_free(&t);
                char *r = ts__em_conv(tmp, TT_F32, w);
                ts__tile_buf_puts(b, r);
                free(r);
            } else if (w == TT_BOOL) ts__tile_buf_puts(b, iv ? "true" : "false");
            else if (w == TT_U64) ts__tile_buf_printf(b, "UINT64_C(%llu)", (unsigned long long)iv);
            else {
                /* -2^63 has no literal spelling in C */
                char lit[48];
                if (iv == INT64_MIN) snprintf(lit, sizeof lit, "INT64_MIN");
                else snprintf(lit, sizeof lit, "INT64_C(%lld)", (long long)iv);
                if (w == TT_I64) ts__tile_buf_puts(b, lit);
                else ts__tile_buf_printf(b, "((%s)%s)", ts__em_ctype(w), lit);
            }
            return;
        }
        if (from == TT_FLOATLIT && ts__em_lit_float(n, &fv)) {
            if (w == TT_F64) put_float(b, fv, TT_F64);
            else {
                ts__tile_buf t = {0};
                put_float(&t, fv, TT_F32);
                char *r = ts__em_conv(t.data ? t.data : "0", TT_F32, w);
                ts__tile_buf_puts(b, r);
                free(r);
                ts__tile_buf_free(&t);
            }
            return;
        }
    }
    ts__tile_buf t = {0};
    ex_natural(e, &t, n);
    char *r = ts__em_conv(t.data ? t.data : "", ts__em_natural(from), want);
    ts__tile_buf_puts(b, r);
    free(r);
    ts__tile_buf_free(&t);
}

/* ---------------- statements ---------------- */

void ts__em_ind(em *e, int lv) {
    for (int i = 0; i < lv; i++) ts__tile_buf_puts(e->o, "    ");
}


void ts__em_body(em *e, const ts__tile_node *blk, int lv) {
    for (int32_t i = 0; blk && i < blk->nlist; i++) {
        int m = 0;
        while (i + 1 + m < blk->nlist && ts__em_rowfold_match(e, blk->list[i], blk->list[i + 1 + m])) m++;
        ts__em_st(e, blk->list[i], lv);
        if (!m) continue;
        if (e->rf.done) i += m; /* the folds were emitted inside the loop */
        e->rf.loop = NULL, e->rf.n = 0, e->rf.done = false;
    }
}

/* A check's message, as the literal the launch prints with "%s" (not a format: a `%` stays). */
static void add_check(em *e, const ts__tile_node *call) {
    ts__tile_buf_puts(&e->checks, "    \"");
    ts__tile_buf_escape(&e->checks, e->d->file ? e->d->file : "<input>", TS__ESC_STRING);
    ts__tile_buf_printf(&e->checks, ":%d:%d: %s() failed", call->loc.line, call->loc.col, call->name);
    if (call->nlist > 1) {
        ts__tile_buf_puts(&e->checks, ": ");
        ts__tile_buf_escape(&e->checks, call->list[1]->name, TS__ESC_STRING);
    }
    ts__tile_buf_puts(&e->checks, "\",\n");
    e->nchecks++;
}

void ts__em_st(em *e, const ts__tile_node *n, int lv) {
    ts__tile_buf *o = e->o;
    switch (n->kind) {
    case TN_BLOCK:
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
        ts__em_body(e, n, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        break;
    case TN_TILE: {
        const ts__tile_sym *s = n->sym;
        ts__em_ind(e, lv);
        ts__tile_buf_printf(o, "%s *const t%d_%s = (%s *)(scr + %lld);\n", ts__em_ctype(s->dt), s->uid, s->name,
                            ts__em_ctype(s->dt), (long long)n->ival);
        ts__tile_buf_printf(o, "%*s(void)t%d_%s;\n", lv * 4, "", s->uid, s->name);
        break;
    }
    case TN_LET: {
        const ts__tile_sym *s = n->sym;
        char *v = ts__em_ex_str(e, n->a, s->dt);
        ts__em_ind(e, lv);
        if (s->index) ts__tile_buf_printf(o, "a->l_%s = %s;\n", s->name, v);
        else ts__tile_buf_printf(o, "const %s v%d_%s = %s; (void)v%d_%s;\n", vtype(s->dt), s->uid, s->name, v, s->uid, s->name);
        free(v);
        break;
    }
    case TN_VAR: {
        const ts__tile_sym *s = n->sym;
        char *v = n->a ? ts__em_ex_str(e, n->a, s->dt) : NULL;
        ts__em_ind(e, lv);
        ts__tile_buf_printf(o, "%s v%d_%s = %s; (void)v%d_%s;\n", vtype(s->dt), s->uid, s->name, v ? v : "0", s->uid, s->name);
        free(v);
        break;
    }
    case TN_ASSIGN: {
        const ts__tile_node *l = n->a;
        int dt = l->kind == TN_NAME ? ((const ts__tile_sym *)l->sym)->dt : ((const ts__tile_sym *)l->a->sym)->dt;
        int vt = ts__tile_dt_packed_raw(dt);
        ts__tile_buf lt = {0};
        if (l->kind == TN_NAME) ts__em_sym_ref(e, &lt, l->sym);
        else elem(e, &lt, l);
        char *val;
        if (n->op == TO_SET) val = ts__em_ex_str(e, n->b, vt);
        else {
            /* x op= y  is  x = x op y  in the operands' joined type */
            ts__tile_node tmp = *n->b, bn;
            memset(&bn, 0, sizeof bn);
            bn.kind = TN_BINARY;
            bn.op = n->op;
            bn.a = (ts__tile_node *)l;
            bn.b = &tmp;
            bn.ty = ts__em_join(l->ty ? l->ty : vt, n->b->ty);
            val = ts__em_ex_str(e, &bn, vt);
        }
        ts__em_ind(e, lv);
        if (dt == TT_BOOL && l->kind == TN_INDEX) ts__tile_buf_printf(o, "%s = (uint8_t)(%s);\n", lt.data, val);
        else ts__tile_buf_printf(o, "%s = %s;\n", lt.data, val);
        free(val);
        ts__tile_buf_free(&lt);
        break;
    }
    case TN_FOR: {
        const ts__tile_node *it = n->a;
        const char *f = it->name;
        if (!strcmp(f, "parallel") ? ts__em_vec_parallel(e, n, lv) : ts__em_vec_reduce(e, n, lv)) break;
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
        if (!strcmp(f, "parallel")) {
            for (int32_t i = 0; i < n->nlist2; i++) {
                char *x = ts__em_ex_str(e, it->list[i], TT_I64);
                ts__em_ind(e, lv + 1);
                const ts__tile_sym *lv_ = n->list2[i]->sym;
                ts__tile_buf_printf(o, "const int64_t e%d_%s = %s;\n", lv_->uid, lv_->name, x);
                free(x);
            }
            for (int32_t i = 0; i < n->nlist2; i++) {
                const ts__tile_sym *ls = n->list2[i]->sym;
                char v[300];
                snprintf(v, sizeof v, "%d_%s", ls->uid, ls->name);
                ts__em_ind(e, lv + 1 + i);
                ts__tile_buf_printf(o, "for (int64_t v%s = 0; v%s < e%s; v%s++)%s\n", v, v, v, v,
                                    i + 1 == n->nlist2 ? " {" : "");
            }
            ts__em_body(e, n->b, lv + 1 + n->nlist2);
            ts__em_ind(e, lv + n->nlist2), ts__tile_buf_puts(o, "}\n");
        } else {
            const ts__tile_sym *ls = n->list2[0]->sym;
            char v[300];
            snprintf(v, sizeof v, "%d_%s", ls->uid, ls->name);
            char *lo = it->nlist > 1 ? ts__em_ex_str(e, it->list[0], TT_I64) : NULL;
            char *hi = ts__em_ex_str(e, it->list[it->nlist > 1 ? 1 : 0], TT_I64);
            int64_t step = 1;
            if (it->nlist == 3) ts__em_lit_int(it->list[2], &step);
            ts__em_ind(e, lv + 1);
            ts__tile_buf_printf(o, "const int64_t e%s = %s;\n", v, hi);
            ts__em_ind(e, lv + 1);
            ts__tile_buf_printf(o, "for (int64_t v%s = %s; v%s %s e%s; v%s += INT64_C(%lld)) {\n", v,
                                lo ? lo : "0", v, step > 0 ? "<" : ">", v, v, (long long)step);
            ts__em_body(e, n->b, lv + 2);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(o, "}\n");
            free(lo), free(hi);
        }
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        break;
    }
    case TN_IF: {
        if (e->inrange && ts__em_then_only(e, n)) {
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
            ts__em_body(e, n->b, lv + 1);
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
            break;
        }
        char *c = ts__em_ex_str(e, n->a, TT_BOOL);
        ts__em_ind(e, lv), ts__tile_buf_printf(o, "if (%s) {\n", c);
        free(c);
        ts__em_body(e, n->b, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}");
        if (n->c) {
            ts__tile_buf_puts(o, " else {\n");
            if (n->c->kind == TN_IF) ts__em_st(e, n->c, lv + 1);
            else ts__em_body(e, n->c, lv + 1);
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "}");
        }
        ts__tile_buf_puts(o, "\n");
        break;
    }
    case TN_WHILE: {
        char *c = ts__em_ex_str(e, n->a, TT_BOOL);
        ts__em_ind(e, lv), ts__tile_buf_printf(o, "while (%s) {\n", c);
        free(c);
        ts__em_body(e, n->b, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        break;
    }
    case TN_BREAK: ts__em_ind(e, lv), ts__tile_buf_puts(o, "break;\n"); break;
    case TN_CONTINUE: ts__em_ind(e, lv), ts__tile_buf_puts(o, "continue;\n"); break;
    case TN_CALLSTMT: {
        const ts__tile_node *c = n->a;
        if (!strcmp(c->name, "assume")) {
            char *x = ts__em_ex_str(e, c->list[0], TT_BOOL);
            ts__em_ind(e, lv), ts__tile_buf_printf(o, "(void)(%s); /* assume */\n", x);
            free(x);
        } else if (!strcmp(c->name, "check")) {
            char *x = ts__em_ex_str(e, c->list[0], TT_BOOL);
            add_check(e, c);
            ts__em_ind(e, lv), ts__tile_buf_printf(o, "if (!(%s)) ts__tile_fail(&sh->failed, %d);\n", x, e->nchecks);
            free(x);
        } else if (!strcmp(c->name, "prefetch")) {
            /* the element's byte offset in wrapping arithmetic: any index is allowed */
            const ts__tile_node *x = c->list[0];
            const ts__tile_sym *s = x->a->sym;
            ts__tile_buf off = {0};
            for (int32_t i = 0; i < x->nlist; i++) {
                char *ix = ts__em_ex_str(e, x->list[i], TT_I64);
                ts__tile_buf_printf(&off, "%s(uint64_t)(%s)", i ? " + " : "", ix);
                if (s->strided || i < s->rank - 1) ts__tile_buf_puts(&off, " * (uint64_t)(1");
                ts__em_stride_factor(&off, s, i);
                if (s->strided || i < s->rank - 1) ts__tile_buf_puts(&off, ")");
                free(ix);
            }
            ts__em_ind(e, lv), ts__tile_buf_printf(o, "ts__tile_prefetch(a->p_%s, (%s) * sizeof *a->p_%s);\n", s->name,
                                            off.data ? off.data : "0", s->name);
            ts__tile_buf_free(&off);
        } else if (!strcmp(c->name, "atomic_add")) {
            int t = ((const ts__tile_sym *)c->list[0]->a->sym)->dt;
            ts__tile_buf lt = {0};
            elem(e, &lt, c->list[0]);
            char *v = ts__em_ex_str(e, c->list[1], t);
            ts__em_ind(e, lv), ts__tile_buf_printf(o, "ts__tile_atomic_add_%s(&%s, %s);\n", ts__tile_dt_name(t), lt.data, v);
            free(v);
            ts__tile_buf_free(&lt);
        } else {
            ts__tile_error(e->d, c->loc, "internal error: '%s' reached the C emitter unlowered", c->name);
            e->fail = true;
        }
        break;
    }
    default:
        ts__tile_error(e->d, n->loc, "internal error: statement kind %d in the C emitter", n->kind);
        e->fail = true;
    }
}

static int64_t layout_tiles(ts__tile_node *n, int64_t off) {
    if (!n) return off;
    if (n->kind == TN_TILE) {
        const ts__tile_sym *s = n->sym;
        int64_t bytes = ts__tile_dt_bytes(s->dt);
        for (int i = 0; i < s->rank; i++) bytes *= s->cdims[i];
        off = (off + 63) & ~(int64_t)63;
        n->ival = off;
        return off + bytes;
    }
    off = layout_tiles(n->a, off);
    off = layout_tiles(n->b, off);
    off = layout_tiles(n->c, off);
    for (int32_t i = 0; i < n->nlist; i++) off = layout_tiles(n->list[i], off);
    return off;
}

/* The argument struct's fields for kernel-level lets, also those inside macro blocks. */
static void kernel_level_fields(ts__tile_buf *o, const ts__tile_node *blk) {
    for (int32_t i = 0; i < blk->nlist; i++) {
        const ts__tile_node *s = blk->list[i];
        if (s->kind == TN_LET)
            ts__tile_buf_printf(o, "    %s l_%s;\n", vtype(((const ts__tile_sym *)s->sym)->dt), s->name);
        else if (s->kind == TN_BLOCK)
            kernel_level_fields(o, s);
    }
}

/* A kernel-level let, check or assume, also inside the blocks that macro expansion leaves
 * (a launch cannot be in one: the checker keeps launches top-level). */
static void kernel_level_stmt(em *e, const char *kn, const ts__tile_node *s, int lv) {
    ts__tile_buf *o = e->o;
    if (s->kind == TN_LET) {
        ts__em_st(e, s, lv);
    } else if (s->kind == TN_BLOCK) {
        for (int32_t i = 0; i < s->nlist; i++) kernel_level_stmt(e, kn, s->list[i], lv);
    } else if (s->kind == TN_CALLSTMT) {
        const ts__tile_node *c = s->a;
        char *x = ts__em_ex_str(e, c->list[0], TT_BOOL);
        ts__em_ind(e, lv);
        /* the message is ts__fail's format here: `%` doubled */
        ts__tile_buf_printf(o, "if (!(%s)) return ts__fail(TS_ERR_INVALID_ARGUMENT, \"%s: %s() failed at ", x, kn, c->name);
        ts__tile_buf_escape(o, e->d->file ? e->d->file : "<input>", TS__ESC_FORMAT);
        ts__tile_buf_printf(o, ":%d:%d%s", c->loc.line, c->loc.col, c->nlist > 1 ? ": " : "");
        if (c->nlist > 1) ts__tile_buf_escape(o, c->list[1]->name, TS__ESC_FORMAT);
        ts__tile_buf_puts(o, "\");\n");
        free(x);
    }
}

static void emit_kernel(em *e, const ts__tile_kernel *k, const char *prefix) {
    ts__tile_buf *o = e->o;
    const char *kn = k->decl->name;
    e->k = k;
    e->kname = kn;
    e->nchecks = 0;
    ts__tile_buf_free(&e->checks);
    /* argument struct */
    ts__tile_buf_printf(o, "\n/* ---- kernel %s ---- */\ntypedef struct ts__tk_%s_args {\n", kn, kn);
    for (int i = 0; i < k->nparams; i++) {
        const ts__tile_sym *p = k->params[i];
        if (p->kind == SYM_TENSOR) {
            ts__tile_buf_printf(o, "    %s *p_%s;\n", ts__em_ctype(p->dt), p->name);
            ts__tile_buf_printf(o, "    int64_t");
            for (int d = 0; d < p->rank; d++) ts__tile_buf_printf(o, "%s st_%s_%d", d ? "," : "", p->name, d);
            ts__tile_buf_puts(o, ";\n");
        } else ts__tile_buf_printf(o, "    %s s_%s;\n", vtype(p->dt), p->name);
    }
    for (int i = 0; i < k->ndims; i++) ts__tile_buf_printf(o, "    int64_t d_%s;\n", k->dims[i]->name);
    kernel_level_fields(o, k->body);
    ts__tile_buf_puts(o, "    int64_t g[3];\n    int failed;\n");
    ts__tile_buf_printf(o, "} ts__tk_%s_args;\n", kn);
    /* one range function per launch */
    int nl = 0;
    for (int32_t i = 0; i < k->body->nlist; i++) {
        ts__tile_node *s = k->body->list[i];
        if (s->kind != TN_LAUNCH) continue;
        int64_t scr = layout_tiles(s->a, 0);
        ts__tile_buf_printf(o, "\nstatic void ts__tk_%s_launch%d(void *ctx, int64_t begin, int64_t end, int tid) {\n", kn, nl);
        /* a private copy of the arguments: stores through uint8_t pointers cannot alias it, so
         * dims, strides and data pointers stay in registers; only the failure flag is shared */
        ts__tile_buf_printf(o, "    ts__tk_%s_args *const sh = ctx;\n", kn);
        ts__tile_buf_printf(o, "    const ts__tk_%s_args A_ = *sh, *const a = &A_;\n    (void)sh;\n", kn);
        if (scr > 0) {
            ts__tile_buf_printf(o, "    unsigned char *scr = ts__scratch(tid, %lld);\n", (long long)scr);
            ts__tile_buf_puts(o, "    if (!scr) {\n        ts__tile_fail(&sh->failed, -1);\n        return;\n    }\n");
        } else ts__tile_buf_puts(o, "    unsigned char *scr = NULL;\n    (void)scr;\n    (void)tid;\n");
        /* grid coordinates: divided out once for the first block, then counted up (a division
         * per grid dim and block costs more than a small block's work) */
        int ng = (int)s->nlist2;
        ts__tile_buf_puts(o, "    int64_t gc[3] = {0, 0, 0}, rest = begin;\n");
        for (int g = ng - 1; g >= 0; g--)
            ts__tile_buf_printf(o, "    gc[%d] = rest %% a->g[%d];\n    rest /= a->g[%d];\n", g, g, g);
        ts__tile_buf_puts(o, "    (void)rest;\n    for (int64_t blk = begin; blk < end; blk++) {\n");
        for (int g = 0; g < ng; g++) {
            const ts__tile_sym *gs = s->list2[g]->sym;
            ts__tile_buf_printf(o, "        const int64_t v%d_%s = gc[%d]; (void)v%d_%s;\n", gs->uid, gs->name, g, gs->uid, gs->name);
        }
        ts__em_body(e, s->a, 2);
        /* count the coordinates up, last fastest: each carry happens only inside the wrap of
         * the next faster one */
        for (int g = ng - 1; g >= 0; g--)
            ts__tile_buf_printf(o, "%*sif (++gc[%d] == a->g[%d]) {\n%*sgc[%d] = 0;\n", 8 + 4 * (ng - 1 - g), "", g, g,
                                12 + 4 * (ng - 1 - g), "", g);
        for (int g = 0; g < ng; g++) ts__tile_buf_printf(o, "%*s}\n", 8 + 4 * g, "");
        ts__tile_buf_puts(o, "    }\n}\n");
        nl++;
    }
    /* check messages */
    ts__tile_buf_printf(o, "\nstatic const char *const ts__tk_%s_checks[] = {\n%s    \"\"\n};\n", kn,
                        e->checks.data ? e->checks.data : "");
    /* the wrapper */
    ts__tile_buf_printf(o, "\nTS_API ts_status %s%s(", prefix, kn);
    for (int i = 0; i < k->nparams; i++) {
        const ts__tile_sym *p = k->params[i];
        /* arg_ keeps user names apart from C keywords and the wrapper's own locals */
        if (p->kind == SYM_TENSOR) ts__tile_buf_printf(o, "%sconst ts_tensor *arg_%s", i ? ", " : "", p->name);
        else ts__tile_buf_printf(o, "%s%s arg_%s", i ? ", " : "", vtype(p->dt), p->name);
    }
    if (!k->nparams) ts__tile_buf_puts(o, "void");
    ts__tile_buf_printf(o, ") {\n    ts__tk_%s_args A_, *a = &A_;\n    memset(a, 0, sizeof *a);\n", kn);
    /* bind dims in declaration order: the first occurrence binds, later ones must agree */
    const ts__tile_sym *bound[64];
    int nb = 0;
    for (int i = 0; i < k->nparams; i++) {
        const ts__tile_sym *p = k->params[i];
        if (p->kind != SYM_TENSOR) {
            ts__tile_buf_printf(o, "    a->s_%s = arg_%s;\n", p->name, p->name);
            continue;
        }
        const char *pn = p->name;
        char an[300];
        snprintf(an, sizeof an, "arg_%s", pn);
        ts__tile_buf_printf(o, "    TS__RETURN_IF_ERROR(ts_tensor_check(%s, \"%s\"));\n", an, pn);
        ts__tile_buf_printf(o, "    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(%s, \"%s\", (ts_dtype)%d));\n", an, pn,
                            ts__tile_dt_to_ts(p->dt));
        ts__tile_buf_printf(o, "    if (%s->ndim != %d) return ts__fail(TS_ERR_SHAPE, \"%s: %s must have rank %d, got %%d\", (int)%s->ndim);\n",
                            an, p->rank, kn, pn, p->rank, an);
        for (int d = 0; d < p->rank; d++) {
            const ts__tile_sym *ds = p->dimsym[d];
            if (!ds) {
                ts__tile_buf_printf(o, "    if (%s->shape[%d] != %lld) return ts__fail(TS_ERR_SHAPE, \"%s: %s dim %d must be %lld, got %%lld\", (long long)%s->shape[%d]);\n",
                                    an, d, (long long)p->cdims[d], kn, pn, d, (long long)p->cdims[d], an, d);
                continue;
            }
            bool seen = false;
            for (int q = 0; q < nb; q++) seen |= bound[q] == ds;
            if (!seen) {
                if (nb < 64) bound[nb++] = ds;
                ts__tile_buf_printf(o, "    a->d_%s = %s->shape[%d];\n", ds->name, an, d);
            } else {
                ts__tile_buf_printf(o, "    if (%s->shape[%d] != a->d_%s) return ts__fail(TS_ERR_SHAPE, \"%s: %s dim %d is %%lld but %s = %%lld\", (long long)%s->shape[%d], (long long)a->d_%s);\n",
                                    an, d, ds->name, kn, pn, d, ds->name, an, d, ds->name);
            }
        }
        if (!p->strided) {
            ts__tile_buf_printf(o, "    if (!ts_tensor_is_contiguous(%s)) return ts__fail(TS_ERR_STRIDE, \"%s: %s must be row-major contiguous\");\n",
                                an, kn, pn);
            ts__tile_buf_printf(o, "    a->st_%s_%d = 1;\n", pn, p->rank - 1);
            for (int d = p->rank - 2; d >= 0; d--)
                ts__tile_buf_printf(o, "    a->st_%s_%d = a->st_%s_%d * %s->shape[%d];\n", pn, d, pn, d + 1, an, d + 1);
        } else {
            for (int d = 0; d < p->rank; d++) {
                const ts__tile_sym *ss = p->stridesym[d];
                ts__tile_buf_printf(o, "    a->st_%s_%d = %s->strides[%d];\n", pn, d, an, d);
                if (!ss) {
                    ts__tile_buf_printf(o, "    if (a->st_%s_%d != %lld) return ts__fail(TS_ERR_STRIDE, \"%s: %s stride %d must be %lld, got %%lld\", (long long)a->st_%s_%d);\n",
                                        pn, d, (long long)p->cstrides[d], kn, pn, d, (long long)p->cstrides[d], pn, d);
                    continue;
                }
                bool seen = false;
                for (int q = 0; q < nb; q++) seen |= bound[q] == ss;
                if (!seen) {
                    if (nb < 64) bound[nb++] = ss;
                    ts__tile_buf_printf(o, "    a->d_%s = a->st_%s_%d;\n", ss->name, pn, d);
                } else
                    ts__tile_buf_printf(o, "    if (a->st_%s_%d != a->d_%s) return ts__fail(TS_ERR_STRIDE, \"%s: %s stride %d differs from %s\");\n",
                                        pn, d, ss->name, kn, pn, d, ss->name);
            }
        }
        ts__tile_buf_printf(o, "    if ((uintptr_t)%s->data %% sizeof(%s)) return ts__fail(TS_ERR_ALIGNMENT, \"%s: %s data must be aligned to %%d bytes\", (int)sizeof(%s));\n",
                            an, ts__em_ctype(p->dt), kn, pn, ts__em_ctype(p->dt));
        ts__tile_buf_printf(o, "    a->p_%s = (%s *)%s->data;\n", pn, ts__em_ctype(p->dt), an);
    }
    /* kernel-level statements in order */
    nl = 0;
    for (int32_t i = 0; i < k->body->nlist; i++) {
        const ts__tile_node *s = k->body->list[i];
        if (s->kind != TN_LAUNCH) kernel_level_stmt(e, kn, s, 1);
        else {
            ts__tile_buf_puts(o, "    {\n        int64_t total = 1;\n");
            for (int32_t g = 0; g < 3; g++) {
                if (g < s->nlist) {
                    char *x = ts__em_ex_str(e, s->list[g], TT_I64);
                    ts__tile_buf_printf(o, "        a->g[%d] = %s;\n", (int)g, x);
                    free(x);
                    ts__tile_buf_printf(o, "        if (a->g[%d] < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, \"%s: grid extent %d is negative (%%lld)\", (long long)a->g[%d]);\n",
                                        (int)g, kn, (int)g, (int)g);
                    ts__tile_buf_printf(o, "        TS__RETURN_IF_ERROR(ts_mul_overflow_i64(total, a->g[%d], &total));\n", (int)g);
                } else ts__tile_buf_printf(o, "        a->g[%d] = 1;\n", (int)g);
            }
            ts__tile_buf_printf(o, "        TS_TILE_PARALLEL_FOR(total, ts__tk_%s_launch%d, a);\n", kn, nl);
            ts__tile_buf_printf(o, "        if (a->failed < 0) return ts__fail(TS_ERR_OUT_OF_MEMORY, \"%s: no scratch memory for tiles\");\n", kn);
            ts__tile_buf_printf(o, "        if (a->failed > 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, \"%%s\", ts__tk_%s_checks[a->failed - 1]);\n", kn);
            ts__tile_buf_puts(o, "    }\n");
            nl++;
        }
    }
    ts__tile_buf_puts(o, "    return TS_OK;\n}\n");
}

bool ts__tile_emit_c(ts__tile_buf *out, ts__tile_diag *d, const ts__tile_program *prog,
                     const ts__tile_emit_opts *opts) {
    em e = {.o = out, .d = d, .simd = !(opts && opts->scalar), .defu = -1};
    e.lanes = opts && opts->lanes == 16 ? 16 : 8;
    const char *prefix = opts && opts->prefix ? opts->prefix : "ts_";
    /* the source's name in a comment: escaped, so it cannot close the comment */
    ts__tile_buf_puts(out, "/* Generated by tilestack tilec from ");
    ts__tile_buf_escape(out, d->file ? d->file : "<input>", TS__ESC_COMMENT);
    ts__tile_buf_printf(out, ". Do not edit.\n"
                             " * Compile with -std=c11 -ffp-contract=off (exact floating point). */\n"
                             "/* no memset idioms: a tile fill with constant bounds became `rep stos`, whose start-up\n"
                             " * cost more than the 512-byte fills it replaced in RMSNorm's per-group loop */\n"
                             "#if defined(__GNUC__) && !defined(__clang__)\n"
                             "#pragma GCC optimize(\"no-tree-loop-distribute-patterns\"%s)\n"
                             "#endif\n"
                             "%s"
                             "#include \"tile/tile_rt.h\"\n"
                             "/* x == x, u < 0 and the like are legal in the language */\n"
                             "#if defined(__GNUC__)\n"
                             "#pragma GCC diagnostic ignored \"-Wtautological-compare\"\n"
                             "#pragma GCC diagnostic ignored \"-Wtype-limits\"\n"
                             "#endif\n"
                             "/* GCC cannot always bound the scalar tail loops of SIMD code by the vector range */\n"
                             "#if defined(__GNUC__) && !defined(__clang__)\n"
                             "#pragma GCC diagnostic ignored \"-Waggressive-loop-optimizations\"\n"
                             "#endif\n",
                        /* 16 lanes (AVX-512): GCC's if-converted vectors of the scalar head and
                         * tail loops compute the guarded-off iterations too, with stale lanes of
                         * masked loads - subnormal operands (MXCSR DE) in a bounds-tested store
                         * loop of per_block_cast; those loops stay scalar */
                        e.simd && e.lanes == 16 ? ", \"no-tree-loop-if-convert\"" : "",
                        /* the helpers' width (tile_rt.h); 8-lane C names no width */
                        e.simd && e.lanes == 16 ? "#define TS__TV_LANES 16\n" : "");
    for (int i = 0; i < prog->nkernels && !e.fail; i++) emit_kernel(&e, &prog->kernels[i], prefix);
    ts__tile_buf_free(&e.checks);
    if (out->oom) {
        ts__tile_error(d, (ts__tile_loc){1, 1}, "out of memory while emitting C");
        return false;
    }
    return !e.fail;
}
