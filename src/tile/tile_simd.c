#include "tile/tile_simd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- SIMD lowering ----------------
 *
 * An innermost `parallel` loop becomes, per iteration of its other variables, a loop over
 * its last variable j in steps of e->lanes (8 or 16; ts__tv_* vectors of tile_rt.h) plus
 * scalar loops for the rest. Every value that depends on j is a vector; everything else stays
 * the scalar C of the plain emission (computed once per vector). The comments below say 8
 * lanes; at 16 every width doubles except the lanes8 sum's accumulators (vec_reduce). Each vector operation is the scalar
 * operation lane by lane (same IEEE operation, same conversion code), so the bits cannot
 * differ from the scalar emission, whatever the ISA the C is compiled for.
 *
 * Accepted: element accesses whose last index is j + (something independent of j) and whose
 * other indices do not depend on j (contiguous: one vector load/store); lets, vars, element
 * assignments, serial loops and ifs whose bounds / conditions do not depend on j; and ifs
 * whose condition is a conjunction of range tests of such an index (the bounds test of a
 * copy): those are hoisted out of the element loop as a range [lo, hi) of j where the
 * condition holds - the vector loop runs there with the `then` branch only, the scalar loops
 * do the rest (out-of-bounds parts and tails). Anything else (gathers, in-loop checks,
 * atomics, j-dependent control flow) leaves the loop scalar.
 *
 * Separately, a serial loop that folds elements into one `var` with an associative and
 * commutative operation (integer + & | ^, min/max with the language's NaN / signed-zero
 * rules), or the eight-accumulator lanes8 sum loop of reduce<sum>, becomes a vector
 * accumulation whose lanes are the same partial results the scalar code computes. */


static int vfind(const em *e, const ts__tile_sym *s) {
    for (int i = 0; i < e->nvt; i++)
        if (e->vt[i].s == s) return i;
    return -1;
}
static void vreg(em *e, const ts__tile_sym *s, int kind, char *base) {
    int i = vfind(e, s);
    if (i >= 0) {
        free(e->vt[i].base);
        e->vt[i].kind = kind, e->vt[i].base = base;
        return;
    }
    if (e->nvt >= (int)(sizeof e->vt / sizeof e->vt[0])) {
        free(base);
        e->vfail = true;
        return;
    }
    e->vt[e->nvt].s = s, e->vt[e->nvt].kind = kind, e->vt[e->nvt].base = base;
    e->nvt++;
}
static void vreset(em *e) {
    for (int i = 0; i < e->nvt; i++) free(e->vt[i].base);
    e->nvt = 0;
    e->vj = NULL;
    e->vfail = false;
    e->nthen = 0;
    e->nv2tr = 0;
    e->nv2g = 0;
}

char *ts__em_sdup(const char *s) {
    ts__tile_buf b = {0};
    ts__tile_buf_puts(&b, s);
    if (!b.data) ts__tile_buf_puts(&b, "");
    return b.data;
}
char *ts__em_sfmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (s) vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s ? s : ts__em_sdup("");
}

/* does the expression depend on the vector variable (directly or through vector lets)? */
bool ts__em_dep(const em *e, const ts__tile_node *n) {
    if (!n) return false;
    switch (n->kind) {
    case TN_NAME: return n->sym && (n->sym == e->vj || vfind(e, n->sym) >= 0);
    case TN_INDEX:
        for (int32_t i = 0; i < n->nlist; i++)
            if (ts__em_dep(e, n->list[i])) return true;
        return false;
    case TN_UNARY: return ts__em_dep(e, n->a);
    case TN_BINARY: return ts__em_dep(e, n->a) || ts__em_dep(e, n->b);
    case TN_CALL:
        for (int32_t i = 0; i < n->nlist; i++)
            if (ts__em_dep(e, n->list[i])) return true;
        return false;
    default: return false;
    }
}
/* does the expression mention symbol s? */
bool ts__em_refs(const ts__tile_node *n, const void *s) {
    if (!n) return false;
    if ((n->kind == TN_NAME || n->kind == TN_INDEX) && n->sym == s) return true;
    if (ts__em_refs(n->a, s) || ts__em_refs(n->b, s) || ts__em_refs(n->c, s)) return true;
    for (int32_t i = 0; i < n->nlist; i++)
        if (ts__em_refs(n->list[i], s)) return true;
    for (int32_t i = 0; i < n->nlist2; i++)
        if (ts__em_refs(n->list2[i], s)) return true;
    return false;
}

/* If n is an i64 value `base + j` with base independent of j: the C text of base. */
char *ts__em_affine(em *e, const ts__tile_node *n) {
    if (n->kind == TN_NAME) {
        if (n->sym == e->vj) return ts__em_sdup("INT64_C(0)");
        int i = vfind(e, n->sym);
        return i >= 0 && e->vt[i].kind == VS_AFF ? ts__em_sdup(e->vt[i].base) : NULL;
    }
    if (n->kind != TN_BINARY || ts__em_natural(n->ty) != TT_I64) return NULL;
    if (n->op != TO_ADD && n->op != TO_SUB) return NULL;
    const ts__tile_node *v = n->a, *u = n->b;
    if (n->op == TO_ADD && !ts__em_dep(e, v)) v = n->b, u = n->a;
    if (ts__em_dep(e, u) || !ts__em_dep(e, v)) return NULL;
    char *b = ts__em_affine(e, v);
    if (!b) return NULL;
    char *us = ts__em_ex_str(e, u, TT_I64);
    char *r = ts__em_sfmt("((int64_t)((uint64_t)(%s) %c (uint64_t)(%s)))", b, n->op == TO_ADD ? '+' : '-', us);
    free(b), free(us);
    return r;
}

/* vector type suffix of a value type (narrow floats: their storage; bool: an int32 mask) */
const char *ts__em_vs(int t) {
    t = ts__em_natural(ts__tile_dt_packed_raw(t));
    if (t == TT_BOOL) return "i32";
    const char *c = ts__em_ctype(t);
    if (!strcmp(c, "float")) return "f32";
    if (!strcmp(c, "double")) return "f64";
    if (!strcmp(c, "int8_t")) return "i8";
    if (!strcmp(c, "uint8_t")) return "u8";
    if (!strcmp(c, "int16_t")) return "i16";
    if (!strcmp(c, "uint16_t")) return "u16";
    if (!strcmp(c, "int32_t")) return "i32";
    if (!strcmp(c, "uint32_t")) return "u32";
    if (!strcmp(c, "int64_t")) return "i64";
    return "u64";
}
int ts__em_lane_bits(int t) {
    const char *s = ts__em_vs(t);
    return s[1] == '8' ? 8 : s[1] == '1' ? 16 : s[1] == '3' ? 32 : 64;
}
/* the unsigned vector of the same lane width (wrapping integer arithmetic) */
static const char *vus(int t) {
    const char *s = ts__em_vs(t);
    if (s[0] == 'i') {
        if (!strcmp(s, "i8")) return "u8";
        if (!strcmp(s, "i16")) return "u16";
        if (!strcmp(s, "i32")) return "u32";
        return "u64";
    }
    return s;
}

/* the second set of vector lowerings (end of the file) */

/* Lane-wise map of a scalar expression: ({ vector ins; out r; for l: r[l] = f(ins[l]); r; }).
 * `scalar` builds the lane text from the lane element texts of the inputs. */
typedef char *(*lane_fn)(void *ctx, char **args);
static char *lanemap(em *e, int nin, char **vin, const int *tin, int tout, lane_fn f, void *ctx) {
    int id = ++e->vtmp;
    ts__tile_buf b = {0};
    char *args[3] = {NULL, NULL, NULL};
    ts__tile_buf_puts(&b, "({ ");
    for (int i = 0; i < nin; i++) {
        ts__tile_buf_printf(&b, "const ts__tv_%s x%d_%d = %s; ", ts__em_vs(tin[i]), i, id, vin[i]);
        args[i] = tin[i] == TT_BOOL ? ts__em_sfmt("(x%d_%d[l_%d] != 0)", i, id, id) : ts__em_sfmt("x%d_%d[l_%d]", i, id, id);
    }
    char *s = f(ctx, args);
    ts__tile_buf_printf(&b, "ts__tv_%s r_%d; for (int l_%d = 0; l_%d < %d; l_%d++) r_%d[l_%d] = ", ts__em_vs(tout), id, id, id,
                        e->lanes, id, id, id);
    if (tout == TT_BOOL) ts__tile_buf_printf(&b, "(%s) ? -1 : 0; r_%d; })", s, id);
    else ts__tile_buf_printf(&b, "%s; r_%d; })", s, id);
    free(s);
    for (int i = 0; i < nin; i++) free(args[i]);
    if (!b.data) ts__tile_buf_puts(&b, "");
    return b.data;
}
typedef struct conv_ctx {
    int from, to;
} conv_ctx;
static char *lane_conv(void *ctx, char **args) {
    conv_ctx *c = ctx;
    return ts__em_conv(args[0], c->from, c->to);
}
static char *lane_fmt(void *ctx, char **args) { return ts__em_sfmt((const char *)ctx, args[0], args[1], args[2]); }
static char *lanemap_fmt(em *e, int nin, char **vin, int tin, int tout, const char *fmt) {
    int ts[3] = {tin, tin, tin};
    char *a[3] = {vin[0], nin > 1 ? vin[1] : NULL, nin > 2 ? vin[2] : NULL};
    return lanemap(e, nin, a, ts, tout, lane_fmt, (void *)fmt);
}

/* the address of a vector text that is exactly one stride-2 u16 load, ts__tv_ld2_u16(addr)
 * (a copy), else NULL */
static char *ld2_u16_addr(const char *s) {
    static const char pre[] = "ts__tv_ld2_u16(";
    const size_t np = sizeof pre - 1, n = strlen(s);
    if (n <= np + 1 || strncmp(s, pre, np) || s[n - 1] != ')') return NULL;
    int depth = 1;
    for (size_t i = np; i < n - 1; i++) {
        depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
        if (depth == 0) return NULL; /* the call ends before the text does */
    }
    char *a = malloc(n - np);
    if (a) memcpy(a, s + np, n - np - 1), a[n - np - 1] = 0;
    return a;
}

/* vector text of type `from` converted to `to` (conv's rules, lane by lane) */
static char *vconv(em *e, char *s, int from, int to) {
    from = ts__em_natural(from);
    to = ts__em_natural(to);
    if (from == to) return s;
    char *r = ts__em_v2_conv(s, from, to);
    if (r) return vconv(e, r, from == TT_F16 || from == TT_E5M6 ? TT_F32 : to, to);
    if (ts__tile_dt_is_narrow(from)) {
        char *p2 = from == TT_BF16 ? ld2_u16_addr(s) : NULL;
        if (p2) r = ts__em_sfmt("ts__tv_ld2_bf16_f32(%s)", p2); /* a stride-2 read widened in one step */
        else if (from == TT_BF16) r = ts__em_sfmt("ts__tv_bf16_to_f32(%s)", s);
        else if (from == TT_E4M3) r = ts__em_sfmt("ts__tv_e4m3_to_f32(%s)", s);
        else if (from == TT_E2M1) r = ts__em_sfmt("ts__tv_e2m1_to_f32(%s)", s);
        else if (from == TT_UE8M0) r = ts__em_sfmt("ts__tv_ue8m0_to_f32(%s)", s);
        else {
            conv_ctx c = {from, TT_F32};
            r = lanemap(e, 1, &s, &from, TT_F32, lane_conv, &c);
        }
        free(p2);
        free(s);
        return vconv(e, r, TT_F32, to);
    }
    if (ts__tile_dt_is_narrow(to)) {
        if (from != TT_F32) s = vconv(e, s, from, TT_F32);
        if (to == TT_BF16) r = ts__em_sfmt("ts__tv_f32_to_bf16(%s)", s);
        else if (to == TT_E4M3) r = ts__em_sfmt("ts__tv_f32_to_e4m3(%s)", s);
        else if (to == TT_E5M2) r = ts__em_sfmt("ts__tv_f32_to_e5m2(%s)", s);
        else if (to == TT_F16) r = ts__em_sfmt("ts__tv_f32_to_f16(%s)", s);
        else if (to == TT_E2M1) r = ts__em_sfmt("ts__tv_f32_to_e2m1(%s)", s);
        else if (to == TT_UE8M0) r = ts__em_sfmt("ts__tv_f32_to_ue8m0(%s)", s);
        else {
            conv_ctx c = {TT_F32, to};
            int f32 = TT_F32;
            r = lanemap(e, 1, &s, &f32, to, lane_conv, &c);
        }
    } else if (to == TT_BOOL) {
        r = ts__em_sfmt("TS__TV_MASK((%s) != 0)", s);
    } else if (from == TT_BOOL) {
        r = ts__em_sfmt("TS__TV_CVT((%s) & 1, ts__tv_%s)", s, ts__em_vs(to));
    } else if (to == TT_F32 || to == TT_F64 || !(from == TT_F32 || from == TT_F64)) {
        r = ts__em_sfmt("TS__TV_CVT(%s, ts__tv_%s)", s, ts__em_vs(to));
    } else {
        conv_ctx c = {from, to}; /* float -> integer saturates: the scalar helper per lane */
        r = lanemap(e, 1, &s, &from, to, lane_conv, &c);
    }
    free(s);
    return r;
}


/* C text of the element of tile/tensor s at the given index texts */
char *ts__em_elem_at(const ts__tile_sym *s, char **ix, int n) {
    ts__tile_buf b = {0};
    if (s->kind == SYM_TENSOR) {
        ts__tile_buf_printf(&b, "a->p_%s[", s->name);
        for (int i = 0; i < n; i++) {
            ts__tile_buf_printf(&b, "%s(%s)", i ? " + " : "", ix[i]);
            ts__em_stride_factor(&b, s, i);
        }
    } else {
        ts__tile_buf_printf(&b, "t%d_%s[", s->uid, s->name);
        for (int i = 0; i + 1 < n; i++) ts__tile_buf_puts(&b, "(");
        for (int i = 0; i < n; i++) {
            if (i) ts__tile_buf_printf(&b, " + (%s))", ix[i]);
            else ts__tile_buf_printf(&b, "(%s)", ix[i]);
            if (i + 1 < n) ts__tile_buf_printf(&b, " * %lld", (long long)s->cdims[i + 1]);
        }
    }
    ts__tile_buf_puts(&b, "]");
    return b.data ? b.data : ts__em_sdup("");
}

/* &element of lane 0 of an access whose last index is `stride * j + base` (stride 1: affine,
 * 2: affine2) with the other indices independent of j, in a unit-stride last dim; else NULL */
static char *affine2(em *e, const ts__tile_node *n);
static char *lane0_addr(em *e, const ts__tile_node *n, int stride) {
    const ts__tile_sym *s = n->a->sym;
    int r = n->nlist;
    if (s->kind == SYM_TENSOR && s->strided && (s->stridesym[r - 1] || s->cstrides[r - 1] != 1)) return NULL;
    for (int i = 0; i + 1 < r; i++)
        if (ts__em_dep(e, n->list[i])) return NULL;
    char *base = stride == 1 ? ts__em_affine(e, n->list[r - 1]) : affine2(e, n->list[r - 1]);
    if (!base) return NULL;
    char *ix[TS__TILE_MAX_RANK];
    for (int i = 0; i + 1 < r; i++) ix[i] = ts__em_ex_str(e, n->list[i], TT_I64);
    ix[r - 1] = ts__em_sfmt("(int64_t)((uint64_t)(%s) + %du * (uint64_t)%s)", base, stride, e->vjname);
    char *el = ts__em_elem_at(s, ix, r);
    for (int i = 0; i < r; i++) free(ix[i]);
    free(base);
    char *res = ts__em_sfmt("&%s", el);
    free(el);
    return res;
}
/* &element of lanes 0..7 when the access is contiguous in j, else NULL (and no vector) */
static char *contig_addr(em *e, const ts__tile_node *n) { return lane0_addr(e, n, 1); }

/* If n is an i64 index `2 * a + u` (or `a * 2`, `u + 2 * a`, `2 * a - u`) with a = j + b and
 * u independent of j: the C text of 2 b + u, the index of lane 0 minus 2 j. */
static char *affine2(em *e, const ts__tile_node *n) {
    int64_t two;
    if (n->kind != TN_BINARY || ts__em_natural(n->ty) != TT_I64) return NULL;
    if (n->op == TO_MUL) {
        const ts__tile_node *a = ts__em_lit_int(n->a, &two) && two == 2 ? n->b : ts__em_lit_int(n->b, &two) && two == 2 ? n->a : NULL;
        char *b = a ? ts__em_affine(e, a) : NULL;
        if (!b) return NULL;
        char *r = ts__em_sfmt("((int64_t)((uint64_t)(%s) * 2u))", b);
        free(b);
        return r;
    }
    if (n->op != TO_ADD && n->op != TO_SUB) return NULL;
    const ts__tile_node *m = n->a, *u = n->b;
    if (n->op == TO_ADD && !ts__em_dep(e, m)) m = n->b, u = n->a;
    if (ts__em_dep(e, u)) return NULL;
    char *b = affine2(e, m);
    if (!b) return NULL;
    char *us = ts__em_ex_str(e, u, TT_I64);
    char *r = ts__em_sfmt("((int64_t)((uint64_t)(%s) %c (uint64_t)(%s)))", b, n->op == TO_ADD ? '+' : '-', us);
    free(b), free(us);
    return r;
}


/* a literal that is neither NaN nor zero as f32: min / max against it need no NaN-first or
 * signed-zero handling (ts__tv_maxk_f32) */
static bool kconst(const ts__tile_node *n) {
    double v;
    if (!ts__em_lit_float(n, &v)) return false;
    float f = (float)v;
    return f == f && f != 0.0f;
}

/* select(x > k, k, y) or select(x < k, k, y) on f32 (the comparison either way round) as x, k
 * and whether it bounds from above; NULL otherwise */
static const ts__tile_node *clamp_sel(const ts__tile_node *n, const ts__tile_node **k, bool *upper) {
    if (n->kind != TN_CALL || strcmp(n->name, "select") || n->nlist != 3) return NULL;
    const ts__tile_node *c = n->list[0];
    if (c->kind != TN_BINARY || (c->op != TO_GT && c->op != TO_LT) || ts__em_natural(c->a->ty) != TT_F32 ||
        ts__em_natural(c->b->ty) != TT_F32)
        return NULL;
    for (int side = 0; side < 2; side++) {
        const ts__tile_node *xs = side ? c->b : c->a, *ks = side ? c->a : c->b;
        if (!ts__em_eq_shift(ks, n->list[1], NULL, 0)) continue;
        *k = ks;
        *upper = (c->op == TO_GT) != side; /* read as x OP k */
        return xs;
    }
    return NULL;
}

/* Clamps written as selects, which let NaN through and keep x on ties, are vminps(k, x) /
 * vmaxps(k, x) (second operand on NaN and ties):
 *   select(x > k, k, x)                          -> mink(k, x)
 *   select(x > h, h, select(x < l, l, x)), l <= h -> mink(h, maxk(l, x))   (and mirrored)
 * The nested form with literals in order: where the outer test holds the inner select is x,
 * and where it does not the inner result cannot pass h. NULL when n is neither. */
static char *vclamp(em *e, const ts__tile_node *n) {
    const ts__tile_node *k, *k2, *x, *x2;
    bool up, up2;
    if (!(x = clamp_sel(n, &k, &up))) return NULL;
    const ts__tile_node *y = n->list[2];
    char *inner = NULL;
    if (!ts__em_eq_shift(x, y, NULL, 0)) {
        double a, b;
        if (!(x2 = clamp_sel(y, &k2, &up2)) || up2 == up || !ts__em_eq_shift(x2, x, NULL, 0) || !ts__em_eq_shift(y->list[2], x, NULL, 0) ||
            !ts__em_lit_float(k, &a) || !ts__em_lit_float(k2, &b) || (up ? a < b : a > b))
            return NULL;
        char *kk = ts__em_vex(e, k2, TT_F32), *xx = ts__em_vex(e, x, TT_F32);
        inner = ts__em_sfmt("ts__tv_%s_f32(%s, %s)", up2 ? "mink" : "maxk", kk, xx);
        free(kk), free(xx);
    } else inner = ts__em_vex(e, x, TT_F32);
    char *kk = ts__em_vex(e, k, TT_F32), *r = ts__em_sfmt("ts__tv_%s_f32(%s, %s)", up ? "mink" : "maxk", kk, inner);
    free(kk), free(inner);
    return r;
}

static char *vcall(em *e, const ts__tile_node *n) {
    const char *f = n->name;
    int t = ts__em_natural(n->ty);
    if (!strcmp(f, "cast")) {
        char *gw = ts__em_v2_group_widened(e, n);
        if (gw) return gw;
        int from = ts__em_natural(n->list[0]->ty);
        return vconv(e, ts__em_vex(e, n->list[0], from), from, n->ty);
    }
    if (!strcmp(f, "bitcast")) {
        int from = n->list[0]->ty, to = n->ty;
        char *x = ts__em_vex(e, n->list[0], from), *r;
        if (from == TT_F32) r = ts__em_sfmt("TS__TV_CVT((ts__tv_u32)(%s), ts__tv_%s)", x, ts__em_vs(to));
        else if (from == TT_F64) r = ts__em_sfmt("TS__TV_CVT((ts__tv_u64)(%s), ts__tv_%s)", x, ts__em_vs(to));
        else if (to == TT_F32) r = ts__em_sfmt("((ts__tv_f32)TS__TV_CVT(%s, ts__tv_u32))", x);
        else if (to == TT_F64) r = ts__em_sfmt("((ts__tv_f64)TS__TV_CVT(%s, ts__tv_u64))", x);
        else r = ts__em_sfmt("TS__TV_CVT(%s, ts__tv_%s)", x, ts__em_vs(to));
        free(x);
        return r;
    }
    if (!strcmp(f, "select")) {
        char *cl = t == TT_F32 ? vclamp(e, n) : NULL;
        if (cl) return cl;
        char *c = ts__em_vex(e, n->list[0], TT_BOOL), *x = ts__em_vex(e, n->list[1], t), *y = ts__em_vex(e, n->list[2], t);
        char *r = ts__em_sfmt("ts__tv_sel_%s(%s, %s, %s)", ts__em_vs(t), c, x, y);
        free(c), free(x), free(y);
        return r;
    }
    if (!strcmp(f, "isfinite") || !strcmp(f, "isnan")) {
        int at = ts__em_natural(ts__em_arith(n->list[0]->ty));
        if (at != TT_F64) at = TT_F32;
        char *x = ts__em_vex(e, n->list[0], at), *r;
        /* NaN is the only value unequal to itself; x - x is 0 exactly when x is finite (NaN
         * for inf and NaN): one compare instead of a libm call per lane */
        int id = ++e->vtmp;
        if (f[2] == 'n') r = ts__em_sfmt("({ const ts__tv_%s n_%d = %s; TS__TV_MASK(n_%d != n_%d); })", ts__em_vs(at), id, x, id, id);
        else
            r = ts__em_sfmt("({ const ts__tv_%s n_%d = %s; TS__TV_MASK((n_%d - n_%d) == (n_%d - n_%d)); })", ts__em_vs(at), id, x, id,
                     id, id, id);
        free(x);
        return r;
    }
    int nargs = n->nlist;
    char *x[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nargs && i < 3; i++) x[i] = ts__em_vex(e, n->list[i], t);
    char *r = NULL;
    bool f32 = t == TT_F32;
    char fmt[160];
    if (!strcmp(f, "abs")) {
        if (t == TT_F32 || t == TT_F64) r = ts__em_sfmt("ts__tv_abs_%s(%s)", ts__em_vs(t), x[0]);
        else if (!ts__tile_dt_is_signed(t)) r = ts__em_sdup(x[0]);
        else {
            snprintf(fmt, sizeof fmt, "((%s)ts__tile_abs_%s(%%s))", ts__em_ctype(t), ts__em_helper_suffix(t));
            r = lanemap_fmt(e, 1, x, t, t, fmt);
        }
    } else if (f32 && (!strcmp(f, "min") || !strcmp(f, "max"))) {
        if (kconst(n->list[1])) r = ts__em_sfmt("ts__tv_%sk_f32(%s, %s)", f, x[0], x[1]);
        else if (kconst(n->list[0])) r = ts__em_sfmt("ts__tv_%sk_f32(%s, %s)", f, x[1], x[0]);
        else r = ts__em_sfmt("ts__tv_%s_f32(%s, %s)", f, x[0], x[1]);
    } else if (ts__em_int_fold_type(t) && (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "clamp"))) {
        if (f[1] == 'l') r = ts__em_sfmt("ts__tv_min_%s(ts__tv_max_%s(%s, %s), %s)", ts__em_vs(t), ts__em_vs(t), x[0], x[1], x[2]);
        else r = ts__em_sfmt("ts__tv_%s_%s(%s, %s)", f, ts__em_vs(t), x[0], x[1]);
    } else if (f32 && !strcmp(f, "clamp")) {
        r = ts__em_sfmt("ts__tv_min%s_f32(ts__tv_max%s_f32(%s, %s), %s)", kconst(n->list[2]) ? "k" : "",
                 kconst(n->list[1]) ? "k" : "", x[0], x[1], x[2]);
    } else if (f32 && !strcmp(f, "fma")) {
        r = ts__em_sfmt("ts__tv_fma_f32(%s, %s, %s)", x[0], x[1], x[2]);
    } else if (f32 && (!strcmp(f, "exp") || !strcmp(f, "sigmoid"))) {
        r = ts__em_sfmt("ts__tv_%s_f32(%s)", f, x[0]);
    } else if (f32 && !strcmp(f, "sqrt")) {
        r = ts__em_sfmt("ts__tv_sqrt_f32(%s)", x[0]);
    } else if (f32 && !strcmp(f, "rsqrt")) {
        r = ts__em_sfmt("(ts__tv_splat_f32(1.0f) / ts__tv_sqrt_f32(%s))", x[0]);
    } else if (f32 && (!strcmp(f, "floor") || !strcmp(f, "ceil") || !strcmp(f, "trunc") || !strcmp(f, "round"))) {
        r = ts__em_sfmt("ts__tv_round_f32(%s, %d)", x[0], f[0] == 'f' ? 1 : f[0] == 'c' ? 2 : f[0] == 't' ? 3 : 0);
    } else {
        /* everything else: the scalar code of the builtin, lane by lane */
        const char *fn = NULL;
        if (!strcmp(f, "fma")) fn = t == TT_F64 ? "fma(%s, %s, %s)" : "fmaf(%s, %s, %s)";
        else if (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "clamp") || !strcmp(f, "ceildiv")) {
            bool fl = t == TT_F64;
            const char *sx = ts__tile_dt_is_signed(t) ? "i" : "u";
            if (!strcmp(f, "ceildiv"))
                snprintf(fmt, sizeof fmt, "((%s)ts__tile_ceildiv_%s(%%s, %%s))", ts__em_ctype(t), ts__em_helper_suffix(t));
            else if (!strcmp(f, "clamp"))
                snprintf(fmt, sizeof fmt, fl ? "ts__tile_min64f(ts__tile_max64f(%%s, %%s), %%s)"
                                             : "((%s)ts__tile_min%s(ts__tile_max%s(%%s, %%s), %%s))",
                         ts__em_ctype(t), sx, sx);
            else if (fl) snprintf(fmt, sizeof fmt, "ts__tile_%s64f(%%s, %%s)", f);
            else snprintf(fmt, sizeof fmt, "((%s)ts__tile_%s%s(%%s, %%s))", ts__em_ctype(t), f, sx);
            fn = fmt;
        } else {
            snprintf(fmt, sizeof fmt, "%s(%%s)", ts__em_unary_fn(f, t));
            fn = fmt;
        }
        r = lanemap_fmt(e, nargs, x, t, t, fn);
    }
    for (int i = 0; i < 3; i++) free(x[i]);
    return r;
}

/* vector of n's natural type */
char *ts__em_vex_natural(em *e, const ts__tile_node *n) {
    switch (n->kind) {
    case TN_NAME: {
        const ts__tile_sym *s = n->sym;
        if (s == e->vj) return ts__em_sfmt("ts__tv_iota_i64(%s)", e->vjname);
        int i = vfind(e, s);
        if (i >= 0 && e->vt[i].kind == VS_AFF)
            return ts__em_sfmt("ts__tv_iota_i64((int64_t)((uint64_t)(%s) + (uint64_t)%s))", e->vt[i].base, e->vjname);
        return ts__em_sfmt("w%d_%s", s->uid, s->name);
    }
    case TN_INDEX: {
        const ts__tile_sym *s = n->a->sym;
        const int rx = ts__em_rf_dead_tile(e, s);
        if (rx >= 0) return ts__em_sfmt("rfx%d_%d", e->rfid, rx);
        char *gr = ts__em_v2_group_read(e, n);
        if (gr) return gr;
        char *p = contig_addr(e, n);
        if (!p) p = ts__em_v2_transposed_addr(e, n);
        const char *ld = "ld";
        if (!p && s->kind == SYM_TILE && n->nlist == 1 && s->cdims[0] == 16 && s->dt == TT_F32) {
            /* a lookup in a 16-entry table tile (e.g. FP4 codes to values) */
            char *ix = ts__em_vex(e, n->list[0], TT_I32);
            char *r = ts__em_sfmt("ts__tv_lut16_f32(&t%d_%s[0], %s)", s->uid, s->name, ix);
            free(ix);
            return r;
        }
        if (!p && s->dt != TT_BOOL && strcmp(ts__em_vs(s->dt), "f64") && strcmp(ts__em_vs(s->dt), "i64") && strcmp(ts__em_vs(s->dt), "u64"))
            p = lane0_addr(e, n, 2), ld = "ld2"; /* x[2 j + c]: every second element */
        if (!p) {
            char *g = ts__em_v2_gather(e, n);
            if (g) return g;
            e->vfail = true;
            return ts__em_sdup("0");
        }
        char *r = ts__em_sfmt("ts__tv_%s_%s(%s)", ld, ts__em_vs(s->dt), p);
        free(p);
        if (s->dt == TT_BOOL) {
            char *m = ts__em_sfmt("TS__TV_MASK(%s != 0)", r);
            free(r);
            return m;
        }
        return r;
    }
    case TN_UNARY: {
        int t = ts__em_natural(n->ty);
        char *x = ts__em_vex(e, n->a, n->op == TO_NOT ? TT_BOOL : t), *r;
        if (n->op == TO_NOT || n->op == TO_BNOT) r = ts__em_sfmt("(~%s)", x);
        else if (t == TT_F32 || t == TT_F64) r = ts__em_sfmt("(-%s)", x);
        else r = ts__em_sfmt("((ts__tv_%s)(-(ts__tv_%s)%s))", ts__em_vs(t), vus(t), x);
        free(x);
        return r;
    }
    case TN_BINARY: {
        int op = n->op;
        int t = (op == TO_LAND || op == TO_LOR) ? TT_BOOL : ts__em_join(n->a->ty, n->b->ty);
        if ((op == TO_EQ || op == TO_NE || op == TO_BAND || op == TO_BOR || op == TO_BXOR) &&
            n->a->ty == TT_BOOL && n->b->ty == TT_BOOL)
            t = TT_BOOL;
        char *x = ts__em_vex(e, n->a, t), *y = ts__em_vex(e, n->b, t), *r;
        const char *os = ts__tile_op_str(op);
        int64_t sh;
        bool fl = t == TT_F32 || t == TT_F64;
        if (op == TO_LAND) r = ts__em_sfmt("(%s & %s)", x, y);
        else if (op == TO_LOR) r = ts__em_sfmt("(%s | %s)", x, y);
        else if (op >= TO_EQ && op <= TO_GE) r = ts__em_sfmt("TS__TV_MASK(%s %s %s)", x, os, y);
        else if (t == TT_BOOL || fl || op == TO_BAND || op == TO_BOR || op == TO_BXOR) r = ts__em_sfmt("(%s %s %s)", x, os, y);
        else if (op == TO_ADD || op == TO_SUB || op == TO_MUL)
            r = ts__em_sfmt("((ts__tv_%s)((ts__tv_%s)%s %s (ts__tv_%s)%s))", ts__em_vs(t), vus(t), x, os, vus(t), y);
        else if ((op == TO_SHL || op == TO_SHR) && ts__em_lit_int(n->b, &sh) && sh >= 0 && sh < 8 &&
                 (r = ts__em_v2_shift8(t, op, x, (int)sh)) != NULL) {
        } else if ((op == TO_SHL || op == TO_SHR) && ts__em_lit_int(n->b, &sh) && sh >= 0 && sh < ts__em_lane_bits(t)) {
            /* a constant amount below the lane width: the plain vector shift is the helper's
             * result (amounts modulo the width, left shifts on the unsigned lanes) */
            if (op == TO_SHL) r = ts__em_sfmt("((ts__tv_%s)((ts__tv_%s)%s << %lld))", ts__em_vs(t), vus(t), x, (long long)sh);
            else r = ts__em_sfmt("(%s >> %lld)", x, (long long)sh);
        } else if ((op == TO_SHL || op == TO_SHR) && (r = ts__em_v2_shift(t, op, x, y)) != NULL) {
        } else if (op == TO_DIV && t == TT_I64 && (r = ts__em_v2_divaff(e, n)) != NULL) {
        } else {
            static const char *const nm[] = {[TO_DIV] = "div", [TO_MOD] = "mod", [TO_SHL] = "shl", [TO_SHR] = "shr"};
            char fmt[96];
            snprintf(fmt, sizeof fmt, "((%s)ts__tile_%s_%s(%%s, %%s))", ts__em_ctype(t), nm[op], ts__em_helper_suffix(t));
            char *xy[2] = {x, y};
            r = lanemap_fmt(e, 2, xy, t, t, fmt);
        }
        free(x), free(y);
        return r;
    }
    case TN_CALL: return vcall(e, n);
    default: e->vfail = true; return ts__em_sdup("0");
    }
}

/* v without an outer one-argument cast */
static const ts__tile_node *uncast(const ts__tile_node *v) {
    return v->kind == TN_CALL && !strcmp(v->name, "cast") && v->nlist == 1 ? v->list[0] : v;
}

/* n is select(isnan(x), k, x) of f32, k the same for every lane (a NaN made canonical before
 * a bf16 store) */
static bool nank_form(em *e, const ts__tile_node *n) {
    if (n->kind != TN_CALL || strcmp(n->name, "select") || n->nlist != 3 || ts__em_natural(n->ty) != TT_F32) return false;
    const ts__tile_node *c = n->list[0], *k = n->list[1], *x = n->list[2];
    return c->kind == TN_CALL && !strcmp(c->name, "isnan") && c->nlist == 1 && ts__em_natural(c->list[0]->ty) == TT_F32 &&
           ts__em_natural(x->ty) == TT_F32 && !ts__em_dep(e, k) && ts__em_eq_shift(c->list[0], x, NULL, 0);
}
/* such a select (a cast to bf16 unwrapped) as bf16 codes in 32-bit lanes:
 * ts__tv_f32_to_bf16_nank_w, whose NaN lanes take k's code and whose other lanes round without
 * the encoder's NaN step - the codes the store of the select gives. NULL for other forms. */
static char *vbf16_nank(em *e, const ts__tile_node *n) {
    if (!nank_form(e, n)) return NULL;
    const ts__tile_node *k = n->list[1], *x = n->list[2];
    char *xs = ts__em_vex(e, x, TT_F32), *ks = ts__em_ex_str(e, k, TT_F32), *r = ts__em_sfmt("ts__tv_f32_to_bf16_nank_w(%s, %s)", xs, ks);
    free(xs), free(ks);
    return r;
}

char *ts__em_vex(em *e, const ts__tile_node *n, int want) {
    if (want == TT_NONE) want = ts__em_natural(n->ty);
    want = ts__em_natural(want);
    if (want == TT_BF16 && ts__em_dep(e, n)) {
        char *c = vbf16_nank(e, uncast(n));
        if (c) {
            char *r = ts__em_sfmt("ts__tv_narrow_u16(%s)", c);
            free(c);
            return r;
        }
    }
    if (!ts__em_dep(e, n)) {
        char *s = ts__em_ex_str(e, n, want), *r;
        if (want == TT_BOOL) r = ts__em_sfmt("ts__tv_splat_i32((%s) ? -1 : 0)", s);
        else r = ts__em_sfmt("ts__tv_splat_%s(%s)", ts__em_vs(want), s);
        free(s);
        return r;
    }
    return vconv(e, ts__em_vex_natural(e, n), ts__em_natural(n->ty), want);
}

static void vst(em *e, const ts__tile_node *n, int lv);
static void vbody(em *e, const ts__tile_node *blk, int lv) {
    for (int32_t i = 0; blk && i < blk->nlist && !e->vfail; i++) vst(e, blk->list[i], lv);
}
bool ts__em_then_only(const em *e, const ts__tile_node *n) {
    for (int i = 0; i < e->nthen; i++)
        if (e->thenv[i] == n) return true;
    return false;
}

/* Deferred narrowing store k of the unrolled copy e->defu: the value is kept (f32 for e4m3,
 * else codes in 32-bit lanes) and copy 0 records the address; vec_parallel packs and stores. */
static void vst_deferred(em *e, const ts__tile_node *n, int k, int lv) {
    const ts__tile_sym *s = n->a->a->sym;
    if (e->defbf[k]) { /* copy 0 records the store's, the bf16 run's and the scalar's addresses */
        if (e->defu) return;
        char *p = contig_addr(e, n->a), *x = contig_addr(e, e->defbf[k]), *f = ts__em_ex_str(e, e->defbfs[k], TT_F32);
        if (!p || !x) e->vfail = true;
        else {
            ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "na%d_%d = %s;\n", e->defid, k, p);
            ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "nb%d_%d = %s;\n", e->defid, k, x);
            if (!e->defbfh[k]) ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ns%d_%d = %s;\n", e->defid, k, f);
        }
        free(p), free(x), free(f);
        return;
    }
    char *x = e->defbfk[k] ? vbf16_nank(e, e->defval[k])
              : ts__em_vex(e, e->defval[k], e->defe4m3[k] || e->defbf16[k] || e->deff16[k] || s->dt == TT_E5M2 ? TT_F32 : TT_U32), *v;
    if (!x) {
        e->vfail = true;
        return;
    }
    if (e->defe4m3[k] || e->defbf16[k] || e->defbfk[k] || e->deff16[k]) v = x, x = NULL;
    else if (s->dt == TT_E5M2) v = ts__em_sfmt("ts__tv_f32_to_e5m2_w(%s)", x);
    else v = ts__em_sfmt("(%s & ts__tv_splat_u32(0xFFu))", x);
    free(x);
    if (e->defu == 0) {
        char *p = contig_addr(e, n->a);
        if (!p) e->vfail = true;
        else ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "na%d_%d = %s;\n", e->defid, k, p);
        free(p);
    }
    ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "nq%d_%d_%d = %s;\n", e->defid, k, e->defu, v);
    free(v);
}

/* A bf16 pair of f32 values keeps the codes in 32-bit lanes: a | b << 16 is the interleaved
 * pair (ts__tv_st2x_u16w), no narrowing and unpacking. */
static char *pair_bf16w(em *e, const ts__tile_node *n, int k) {
    const ts__tile_sym *s = n->a->a->sym;
    const ts__tile_node *a = uncast(e->pfirst[k]->b), *b = uncast(e->psecond[k]->b), *v = uncast(n->b);
    if (s->dt != TT_BF16 || ts__em_natural(a->ty) != TT_F32 || ts__em_natural(b->ty) != TT_F32) return NULL;
    char *c = vbf16_nank(e, v);
    if (c) return c;
    char *x = ts__em_vex(e, v, TT_F32);
    c = ts__em_sfmt("ts__tv_f32_to_bf16_w(%s)", x);
    free(x);
    return c;
}
/* One half of a pair of stride-2 stores: the first keeps its value, the second stores both,
 * interleaved, from lane 0 of the first's address. */
static void vst_pair(em *e, const ts__tile_node *n, int k, bool second, int lv) {
    const ts__tile_sym *s = n->a->a->sym;
    char *v = pair_bf16w(e, n, k);
    const char *vt = v ? "u32" : ts__em_vs(s->dt), *sx = v ? "u16w" : ts__em_vs(s->dt);
    if (!v) v = ts__em_vex(e, n->b, ts__tile_dt_packed_raw(s->dt));
    if (!second) {
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "const ts__tv_%s pv%d_%d = %s;\n", vt, e->pid, k, v);
    } else {
        char *p = lane0_addr(e, e->pfirst[k]->a, 2);
        if (!p) e->vfail = true;
        else ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tv_st2x_%s(%s, pv%d_%d, %s);\n", sx, p, e->pid, k, v);
        free(p);
    }
    free(v);
}

static void vst(em *e, const ts__tile_node *n, int lv) {
    ts__tile_buf *o = e->o;
    switch (n->kind) {
    case TN_BLOCK:
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
        vbody(e, n, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        return;
    case TN_LET: {
        const ts__tile_sym *s = n->sym;
        if (!ts__em_dep(e, n->a)) {
            ts__em_st(e, n, lv);
            return;
        }
        char *b = ts__em_natural(s->dt) == TT_I64 ? ts__em_affine(e, n->a) : NULL;
        if (b) {
            vreg(e, s, VS_AFF, b);
            return;
        }
        char *v = ts__em_vex(e, n->a, s->dt);
        vreg(e, s, VS_VEC, NULL);
        ts__em_ind(e, lv);
        ts__tile_buf_printf(o, "const ts__tv_%s w%d_%s = %s; (void)w%d_%s;\n", ts__em_vs(s->dt), s->uid, s->name, v, s->uid, s->name);
        free(v);
        return;
    }
    case TN_VAR: {
        const ts__tile_sym *s = n->sym;
        char *v = n->a ? ts__em_vex(e, n->a, s->dt) : ts__em_sfmt("ts__tv_splat_%s(0)", ts__em_vs(s->dt));
        vreg(e, s, VS_VEC, NULL);
        ts__em_ind(e, lv);
        ts__tile_buf_printf(o, "ts__tv_%s w%d_%s = %s; (void)w%d_%s;\n", ts__em_vs(s->dt), s->uid, s->name, v, s->uid, s->name);
        free(v);
        return;
    }
    case TN_ASSIGN: {
        const ts__tile_node *l = n->a;
        int dt = l->kind == TN_NAME ? ((const ts__tile_sym *)l->sym)->dt : ((const ts__tile_sym *)l->a->sym)->dt;
        int vt = ts__tile_dt_packed_raw(dt);
        for (int k = 0; e->defu >= 0 && k < e->ndef; k++)
            if (e->defv[k] == n) {
                vst_deferred(e, n, k, lv);
                return;
            }
        for (int k = 0; k < e->npairs; k++)
            if (e->pfirst[k] == n || e->psecond[k] == n) {
                vst_pair(e, n, k, e->psecond[k] == n, lv);
                return;
            }
        if (ts__em_v2_group_store(e, n, lv)) return;
        const int rx = l->kind == TN_INDEX && n->op == TO_SET ? ts__em_rf_dead_tile(e, l->a->sym) : -1;
        if (rx >= 0) {
            char *v = ts__em_vex(e, n->b, vt);
            ts__em_ind(e, lv), ts__tile_buf_printf(o, "rfx%d_%d = %s;\n", e->rfid, rx, v);
            free(v);
            return;
        }
        char *val;
        if (n->op == TO_SET) val = ts__em_vex(e, n->b, vt);
        else {
            ts__tile_node tmp = *n->b, bn;
            memset(&bn, 0, sizeof bn);
            bn.kind = TN_BINARY;
            bn.op = n->op;
            bn.a = (ts__tile_node *)l;
            bn.b = &tmp;
            bn.ty = ts__em_join(l->ty ? l->ty : vt, n->b->ty);
            val = ts__em_vex(e, &bn, vt);
        }
        if (l->kind == TN_NAME) {
            int i = vfind(e, l->sym);
            if (i < 0 || e->vt[i].kind != VS_VEC) e->vfail = true;
            else {
                const ts__tile_sym *s = l->sym;
                ts__em_ind(e, lv), ts__tile_buf_printf(o, "w%d_%s = %s;\n", s->uid, s->name, val);
            }
        } else {
            char *p = contig_addr(e, l);
            if (!p) e->vfail = true;
            else {
                const ts__tile_sym *s = l->a->sym;
                ts__em_ind(e, lv);
                if (dt == TT_BOOL) ts__tile_buf_printf(o, "ts__tv_st_u8(%s, TS__TV_CVT((%s) & 1, ts__tv_u8));\n", p, val);
                else ts__tile_buf_printf(o, "ts__tv_st_%s(%s, %s);\n", ts__em_vs(s->dt), p, val);
            }
            free(p);
        }
        free(val);
        return;
    }
    case TN_IF: {
        if (ts__em_then_only(e, n)) {
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
            vbody(e, n->b, lv + 1);
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
            return;
        }
        if (ts__em_dep(e, n->a)) {
            e->vfail = true;
            return;
        }
        char *c = ts__em_ex_str(e, n->a, TT_BOOL);
        ts__em_ind(e, lv), ts__tile_buf_printf(o, "if (%s) {\n", c);
        free(c);
        vbody(e, n->b, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}");
        if (n->c) {
            ts__tile_buf_puts(o, " else {\n");
            if (n->c->kind == TN_IF) vst(e, n->c, lv + 1);
            else vbody(e, n->c, lv + 1);
            ts__em_ind(e, lv), ts__tile_buf_puts(o, "}");
        }
        ts__tile_buf_puts(o, "\n");
        return;
    }
    case TN_FOR: {
        const ts__tile_node *it = n->a;
        if (!strcmp(it->name, "parallel")) {
            e->vfail = true;
            return;
        }
        for (int32_t i = 0; i < it->nlist; i++)
            if (ts__em_dep(e, it->list[i])) e->vfail = true;
        if (e->vfail) return;
        const ts__tile_sym *ls = n->list2[0]->sym;
        char v[300];
        snprintf(v, sizeof v, "%d_%s", ls->uid, ls->name);
        char *lo = it->nlist > 1 ? ts__em_ex_str(e, it->list[0], TT_I64) : NULL;
        char *hi = ts__em_ex_str(e, it->list[it->nlist > 1 ? 1 : 0], TT_I64);
        int64_t step = 1;
        if (it->nlist == 3) ts__em_lit_int(it->list[2], &step);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "{\n");
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(o, "const int64_t e%s = %s;\n", v, hi);
        ts__em_ind(e, lv + 1);
        ts__tile_buf_printf(o, "for (int64_t v%s = %s; v%s %s e%s; v%s += INT64_C(%lld)) {\n", v, lo ? lo : "0", v,
                            step > 0 ? "<" : ">", v, v, (long long)step);
        vbody(e, n->b, lv + 2);
        ts__em_ind(e, lv + 1), ts__tile_buf_puts(o, "}\n");
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        free(lo), free(hi);
        return;
    }
    case TN_WHILE: {
        if (ts__em_dep(e, n->a)) {
            e->vfail = true;
            return;
        }
        char *c = ts__em_ex_str(e, n->a, TT_BOOL);
        ts__em_ind(e, lv), ts__tile_buf_printf(o, "while (%s) {\n", c);
        free(c);
        vbody(e, n->b, lv + 1);
        ts__em_ind(e, lv), ts__tile_buf_puts(o, "}\n");
        return;
    }
    case TN_BREAK: case TN_CONTINUE: ts__em_st(e, n, lv); return;
    case TN_CALLSTMT:
        if (!strcmp(n->a->name, "assume")) return; /* not checked inside blocks */
        if (!strcmp(n->a->name, "prefetch") && !ts__em_dep(e, n->a)) { /* the same line for every lane */
            ts__em_st(e, n, lv);
            return;
        }
        e->vfail = true;
        return;
    default: e->vfail = true; return;
    }
}

static bool innermost(const ts__tile_node *n) {
    if (!n) return true;
    if (n->kind == TN_FOR && !strcmp(n->a->name, "parallel")) return false;
    if (n->kind == TN_CALLSTMT && (!strcmp(n->a->name, "check") || !strcmp(n->a->name, "atomic_add"))) return false;
    if (!innermost(n->b) || !innermost(n->c)) return false;
    if (n->kind == TN_BLOCK || n->kind == TN_LAUNCH)
        for (int32_t i = 0; i < n->nlist; i++)
            if (!innermost(n->list[i])) return false;
    return true;
}
/* symbols declared (let / var) anywhere in n */
static void decls(const ts__tile_node *n, const void **out, int *k, int cap) {
    if (!n) return;
    if ((n->kind == TN_LET || n->kind == TN_VAR) && *k < cap) out[(*k)++] = n->sym;
    if (n->kind == TN_BLOCK)
        for (int32_t i = 0; i < n->nlist; i++) decls(n->list[i], out, k, cap);
    if (n->kind == TN_FOR || n->kind == TN_WHILE || n->kind == TN_IF) decls(n->b, out, k, cap), decls(n->c, out, k, cap);
}

static bool row_invariant(const em *e, const ts__tile_node *n) {
    for (int i = 0; i < e->nrowv; i++)
        if (ts__em_refs(n, e->rowv[i])) return false;
    return true;
}

/* Is integer expression n affine in the rows' loop variables (the outer dims of nest nn)? The
 * parts that do not change with the row may be anything; names of the leading lets
 * (bd->list[0..p)) are followed to their values, j counts as invariant. */
static bool row_affine(const em *e, const ts__tile_node *n, const ts__tile_node *nn, const ts__tile_node *bd,
                       int32_t p) {
    if (!n) return false;
    if (row_invariant(e, n)) return true;
    if (ts__em_natural(n->ty) != TT_I64) return false;
    if (n->kind == TN_NAME) {
        for (int32_t i = 0; i + 1 < nn->nlist2; i++)
            if (n->sym == nn->list2[i]->sym) return true;
        for (int32_t q = 0; q < p; q++)
            if (bd->list[q]->sym == n->sym) return row_affine(e, bd->list[q]->a, nn, bd, p);
        return false;
    }
    if (n->kind != TN_BINARY) return false;
    if (n->op == TO_ADD || n->op == TO_SUB) return row_affine(e, n->a, nn, bd, p) && row_affine(e, n->b, nn, bd, p);
    if (n->op == TO_MUL)
        return (row_invariant(e, n->a) && row_affine(e, n->b, nn, bd, p)) ||
               (row_invariant(e, n->b) && row_affine(e, n->a, nn, bd, p));
    return false;
}

/* Is the set of rows where condition c holds (for all j, in the j-dependent comparisons) convex
 * in the row variables: comparisons of row-affine i64 values joined by &&? Then a test that
 * passes at every corner of the rows' box passes on every row. */
static bool row_convex(const em *e, const ts__tile_node *c, const ts__tile_node *nn, const ts__tile_node *bd,
                       int32_t p) {
    if (row_invariant(e, c)) return true;
    if (c->kind != TN_BINARY) return false;
    if (c->op == TO_LAND) return row_convex(e, c->a, nn, bd, p) && row_convex(e, c->b, nn, bd, p);
    if (c->op != TO_GE && c->op != TO_GT && c->op != TO_LT && c->op != TO_LE && c->op != TO_EQ) return false;
    return ts__em_natural(ts__em_join(c->a->ty, c->b->ty)) == TT_I64 && row_affine(e, c->a, nn, bd, p) &&
           row_affine(e, c->b, nn, bd, p);
}

/* One conjunct of a j-dependent if: emit the range narrowing; false if not a range test. */
static bool vrange_term(em *e, const ts__tile_node *c, int lv, int id, const void **late, int nlate) {
    for (int i = 0; i < nlate; i++)
        if (ts__em_refs(c, late[i])) return false;
    if (!ts__em_dep(e, c)) {
        char *x = ts__em_ex_str(e, c, TT_BOOL);
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ok_%d = ok_%d && (%s);\n", id, id, x);
        free(x);
        return true;
    }
    if (c->kind != TN_BINARY) return false;
    if (c->op == TO_LAND) return vrange_term(e, c->a, lv, id, late, nlate) && vrange_term(e, c->b, lv, id, late, nlate);
    int op;
    switch (c->op) {
    case TO_GE: op = 0; break;
    case TO_GT: op = 1; break;
    case TO_LT: op = 2; break;
    case TO_LE: op = 3; break;
    default: return false;
    }
    const ts__tile_node *av = c->a, *u = c->b;
    if (!ts__em_dep(e, av)) {
        av = c->b, u = c->a;
        op = op == 0 ? 3 : op == 1 ? 2 : op == 2 ? 1 : 0; /* u >= v  is  v <= u */
    }
    if (ts__em_dep(e, u) || ts__em_natural(ts__em_join(c->a->ty, c->b->ty)) != TT_I64) return false;
    char *b = ts__em_affine(e, av);
    if (!b) return false;
    char *us = ts__em_ex_str(e, u, TT_I64);
    if (e->pre && row_invariant(e, c)) /* once, before the outer dims */
        ts__tile_buf_printf(e->pre, "%*sts__tile_vrange(&lo0_%d, &hi0_%d, %s, %d, %s);\n", 4 * e->prelv, "", id, id, b, op, us);
    else
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tile_vrange(&lo_%d, &hi_%d, %s, %d, %s);\n", id, id, b, op, us);
    free(b), free(us);
    return true;
}

static void scalar_loop(em *e, const ts__tile_node *bd, const bool *hoisted, const char *j, const char *from,
                        const char *to, int lv) {
    ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "for (int64_t v%s = %s; v%s < %s; v%s++) {\n", j, from, j, to, j);
    for (int32_t q = 0; q < bd->nlist; q++)
        if (!hoisted[q]) ts__em_st(e, bd->list[q], lv + 1);
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) { /* the fused row folds: k is j */
        const ts__tile_sym *k = e->rf.f[r].k;
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t v%d_%s = v%s; (void)v%d_%s;\n", k->uid, k->name, j,
                                            k->uid, k->name);
        ts__em_st(e, e->rf.f[r].fold, lv + 1);
    }
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
}

/* the fused row fold in a vector body: vacc_<id> = vacc_<id> OP f(lanes) */
static void rf_vec_step(em *e, int id, int lv) {
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) {
        const ts__tile_sym *A = e->rf.f[r].acc, *acc = NULL;
        const char *op = NULL;
        const ts__tile_node *f = ts__em_fold_of(e->rf.f[r].fold, &acc, &op);
        char *x = ts__em_vex(e, f, A->dt), an[40];
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "{\n");
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const ts__tv_%s x_%d = %s;\n", ts__em_vs(A->dt), id, x);
        snprintf(an, sizeof an, "vacc_%d_%d", id, r);
        ts__em_ind(e, lv + 1), ts__em_fold_step(e, an, id, op, ts__em_vs(A->dt), vus(A->dt), false, op[0] == 'm');
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "}\n");
        free(x);
    }
}

/* the single statement of a block, looking through nested one-statement blocks */
static const ts__tile_node *sole(const ts__tile_node *n) {
    while (n && n->kind == TN_BLOCK && n->nlist == 1) n = n->list[0];
    return n;
}
static bool same_extent(const ts__tile_node *x, const ts__tile_node *y) {
    int64_t a, b;
    return ts__em_lit_int(x, &a) && ts__em_lit_int(y, &b) && a == b;
}
/* some assignment in n writes s (a variable or an element of tile s) */
bool ts__em_refs_written(const ts__tile_node *n, const void *s) {
    if (!n) return false;
    if (n->kind == TN_ASSIGN) {
        const ts__tile_node *l = n->a;
        if ((l->kind == TN_NAME && l->sym == s) || (l->kind == TN_INDEX && l->a->sym == s)) return true;
    }
    if (ts__em_refs_written(n->a, s) || ts__em_refs_written(n->b, s) || ts__em_refs_written(n->c, s)) return true;
    for (int32_t i = 0; i < n->nlist; i++)
        if (ts__em_refs_written(n->list[i], s)) return true;
    return false;
}
/* every assignment to tile X in n is to X[i, j], and there is one */
static int writes_at(const ts__tile_node *n, const void *X, const void *i, const void *j) {
    if (!n) return 0;
    int c = 0;
    if (n->kind == TN_ASSIGN && n->a->kind == TN_INDEX && n->a->a->sym == X) {
        const ts__tile_node *l = n->a;
        bool at = n->op == TO_SET && l->nlist == 2 && l->list[0]->kind == TN_NAME && l->list[0]->sym == i &&
                  l->list[1]->kind == TN_NAME && l->list[1]->sym == j;
        if (!at) return -1000000;
        c = 1;
    }
    c += writes_at(n->a, X, i, j) + writes_at(n->b, X, i, j) + writes_at(n->c, X, i, j);
    for (int32_t q = 0; q < n->nlist; q++) c += writes_at(n->list[q], X, i, j);
    return c;
}
static bool writes_only_at(const ts__tile_node *n, const void *X, const void *i, const void *j) {
    return writes_at(n, X, i, j) > 0;
}
/* n accesses X only as X[o, k] and reads no tile or variable that loop `a` writes */
static bool fold_reads_ok(const ts__tile_node *n, const ts__tile_sym *X, const void *o, const void *k,
                          const ts__tile_node *a) {
    if (!n) return true;
    if (n->kind == TN_INDEX && n->a->sym == X)
        return n->nlist == 2 && n->list[0]->kind == TN_NAME && n->list[0]->sym == o && n->list[1]->kind == TN_NAME &&
               n->list[1]->sym == k;
    if (n->kind == TN_NAME && n->sym != o && n->sym != k && n->sym != X && ts__em_refs_written(a, n->sym)) return false;
    if (!fold_reads_ok(n->a, X, o, k, a) || !fold_reads_ok(n->b, X, o, k, a) || !fold_reads_ok(n->c, X, o, k, a))
        return false;
    for (int32_t i = 0; i < n->nlist; i++)
        if (!fold_reads_ok(n->list[i], X, o, k, a)) return false;
    return true;
}

/* reads of tile X in n (its elements as values, not as assignment targets) */
static int tile_reads(const ts__tile_node *n, const ts__tile_sym *X) {
    if (!n) return 0;
    int c = n->kind == TN_INDEX && n->a && n->a->sym == X;
    if (n->kind == TN_ASSIGN && n->a->kind == TN_INDEX) { /* the target's indices only */
        for (int32_t i = 0; i < n->a->nlist; i++) c += tile_reads(n->a->list[i], X);
        if (n->op != TO_SET && n->a->a->sym == X) c++; /* X[i] += v reads it */
        return c + tile_reads(n->b, X) + tile_reads(n->c, X);
    }
    c += tile_reads(n->a, X) + tile_reads(n->b, X) + tile_reads(n->c, X);
    for (int32_t i = 0; i < n->nlist; i++) c += tile_reads(n->list[i], X);
    for (int32_t i = 0; i < n->nlist2; i++) c += tile_reads(n->list2[i], X);
    return c;
}

/* Reads of X by row folds that directly follow (after other such folds) a parallel loop writing
 * X[i, j]: where every read of X is one, the folds see only what the loop before them wrote,
 * which a fused fold takes from a register. */
static bool is_row_fold(const ts__tile_node *b) {
    b = sole(b);
    return b && b->kind == TN_FOR && !strcmp(b->a->name, "parallel") && b->nlist2 == 1 && b->b && b->b->nlist == 3 &&
           b->b->list[0]->kind == TN_VAR && b->b->list[1]->kind == TN_FOR && b->b->list[2]->kind == TN_ASSIGN;
}
static int paired_fold_reads(const ts__tile_node *n, const ts__tile_sym *X) {
    if (!n) return 0;
    int c = 0;
    if (n->kind == TN_BLOCK)
        for (int32_t i = 0; i < n->nlist; i++) {
            if (!is_row_fold(n->list[i]) || !tile_reads(n->list[i], X)) continue;
            int32_t w = i - 1;
            while (w >= 0 && is_row_fold(n->list[w])) w--;
            const ts__tile_node *a = w >= 0 ? n->list[w] : NULL;
            if (a && a->kind == TN_BLOCK && a->nlist) a = a->list[a->nlist - 1];
            const ts__tile_node *b = sole(n->list[i]); /* and it covers what the fold reads */
            if (a && a->kind == TN_FOR && !strcmp(a->a->name, "parallel") && a->nlist2 == 2 && a->b &&
                writes_only_at(a->b, X, a->list2[0]->sym, a->list2[1]->sym) && same_extent(a->a->list[0], b->a->list[0]) &&
                b->b->list[1]->a->nlist == 1 && same_extent(a->a->list[1], b->b->list[1]->a->list[0]))
                c += tile_reads(n->list[i], X);
        }
    c += paired_fold_reads(n->a, X) + paired_fold_reads(n->b, X) + paired_fold_reads(n->c, X);
    for (int32_t i = 0; i < n->nlist; i++)
        if (n->kind != TN_BLOCK) c += paired_fold_reads(n->list[i], X);
    for (int32_t i = 0; i < n->nlist && n->kind == TN_BLOCK; i++)
        if (!is_row_fold(n->list[i])) c += paired_fold_reads(n->list[i], X);
    return c;
}

/* at the top of a vector body: the registers of the dead fold tiles (the stores to them may
 * sit in inner blocks, the folds read them after) */
void ts__em_rf_dead_decls(em *e, int lv) {
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) {
        if (!e->rf.f[r].xdead) continue;
        const char *t = ts__em_vs(ts__tile_dt_packed_raw(e->rf.f[r].x->dt));
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tv_%s rfx%d_%d = ts__tv_splat_%s(0); (void)rfx%d_%d;\n", t, e->rfid, r, t,
                                        e->rfid, r);
    }
}

/* the fused row fold r whose tile (read by it alone) is s, or -1 */
int ts__em_rf_dead_tile(const em *e, const void *s) {
    for (int r = 0; e->rf.loop && r < e->rf.n; r++)
        if (e->rf.f[r].xdead && e->rf.f[r].x == s) return r;
    return -1;
}

/* n reads nothing that loop body a writes, except s (the store of a fold: `Y[o] = acc`, or with
 * accumulate `Y[o] = max(Y[o], acc)`, is emitted after the fused row as written) */
static bool unwritten_reads(const ts__tile_node *n, const ts__tile_node *a, const void *s) {
    if (!n) return true;
    if ((n->kind == TN_NAME || n->kind == TN_INDEX) && n->sym && n->sym != s && ts__em_refs_written(a, n->sym)) return false;
    if (!unwritten_reads(n->a, a, s) || !unwritten_reads(n->b, a, s) || !unwritten_reads(n->c, a, s)) return false;
    for (int32_t i = 0; i < n->nlist; i++)
        if (!unwritten_reads(n->list[i], a, s)) return false;
    return true;
}

/* Statement a ends in a loop over (i, j) in parallel(R, C) and statement b is a row fold over
 * a tile X that the loop writes only as X[i, j]: then reading X[o = i, k = j] right after
 * iteration (i, j) sees what b would see, and an exact integer fold (any order gives the same
 * bits) can run in the loop. Records the pair in e->rf. */
bool ts__em_rowfold_match(em *e, const ts__tile_node *a, const ts__tile_node *b) {
    if (!e->simd || e->invec || e->rf.n >= 4) return false;
    if (a->kind == TN_BLOCK && a->nlist) a = a->list[a->nlist - 1];
    if (e->rf.loop && e->rf.loop != a) return false;

    if (!a || a->kind != TN_FOR || strcmp(a->a->name, "parallel") || a->nlist2 != 2 || !a->b || !is_row_fold(b))
        return false;
    b = sole(b);
    const ts__tile_node *var = b->b->list[0], *ser = b->b->list[1], *stv = b->b->list[2];
    if (strcmp(ser->a->name, "serial") || ser->nlist2 != 1 ||
        ser->a->nlist != 1 || !ser->b || ser->b->nlist != 1 || stv->op != TO_SET ||
        !ts__em_refs(stv->b, var->sym) || stv->a->kind != TN_INDEX || !unwritten_reads(stv->b, a->b, var->sym))
        return false;
    const ts__tile_sym *acc = NULL;
    const char *op = NULL;
    const ts__tile_node *f = ts__em_fold_of(ser->b->list[0], &acc, &op);
    int t = acc ? acc->dt : TT_NONE;
    if (!f || acc != var->sym || !ts__em_int_fold_type(t)) return false;
    if (!same_extent(a->a->list[0], b->a->list[0]) || !same_extent(a->a->list[1], ser->a->list[0])) return false;
    const void *o = b->list2[0]->sym, *k = ser->list2[0]->sym;
    /* X: the one tile f reads; the loop writes it only at [i, j] */
    const ts__tile_node *x = f;
    while (x && x->kind != TN_INDEX) x = x->kind == TN_CALL && x->nlist ? x->list[0] : x->a;
    if (!x || x->a->kind != TN_NAME) return false;
    const ts__tile_sym *X = x->a->sym;
    if (!writes_only_at(a->b, X, a->list2[0]->sym, a->list2[1]->sym) || !fold_reads_ok(f, X, o, k, a->b)) return false;
    /* Y[o] = acc: Y untouched by the loop; earlier fused folds' results not read */
    if (ts__em_refs(a->b, stv->a->a->sym) || ts__em_refs(a->b, acc)) return false;
    for (int r = 0; r < e->rf.n; r++)
        if (ts__em_refs(f, e->rf.f[r].store->a->a->sym) || ts__em_refs(f, e->rf.f[r].acc) || stv->a->a->sym == e->rf.f[r].store->a->a->sym)
            return false;
    e->rf.loop = a, e->rf.done = false;
    /* a tile only this fold reads (an |x| tile made for its max...) need not be stored by the
     * vector loop: the fold takes the value from a register (vst, vex) */
    e->rf.f[e->rf.n].x = X;
    e->rf.f[e->rf.n].xdead = ts__em_int_fold_type(X->dt) && tile_reads(e->k->body, X) == paired_fold_reads(e->k->body, X);
    e->rf.f[e->rf.n].var = var, e->rf.f[e->rf.n].fold = ser->b->list[0], e->rf.f[e->rf.n].store = stv;
    e->rf.f[e->rf.n].o = o, e->rf.f[e->rf.n].k = k, e->rf.f[e->rf.n].acc = acc, e->rf.f[e->rf.n].op = op;
    e->rf.n++;
    return true;
}

int ts__em_count_names(const ts__tile_node *n, const void *s) {
    if (!n) return 0;
    int c = n->kind == TN_NAME && n->sym == s;
    c += ts__em_count_names(n->a, s) + ts__em_count_names(n->b, s) + ts__em_count_names(n->c, s);
    for (int32_t i = 0; i < n->nlist; i++) c += ts__em_count_names(n->list[i], s);
    for (int32_t i = 0; i < n->nlist2; i++) c += ts__em_count_names(n->list2[i], s);
    return c;
}

/* Statement s of vector body bd as a deferrable narrowing store: a converting store to an
 * e4m3 / e5m2 / u8 / i8 destination that no other statement of the body reads or writes
 * (so holding it back for up to four copies of the body is invisible). */
static void defer_consider(em *e, const ts__tile_node *s, const ts__tile_node *bd) {
    if (s->kind != TN_ASSIGN || s->op != TO_SET || s->a->kind != TN_INDEX || e->ndef >= 8) return;
    const ts__tile_sym *d = s->a->a->sym;
    const ts__tile_node *v = s->b;
    if (v->kind == TN_CALL && !strcmp(v->name, "cast") && ts__em_natural(v->ty) == d->dt && v->nlist == 1) v = v->list[0];
    int from = ts__em_natural(v->ty);
    if (from == d->dt || from == TT_BOOL || ts__em_count_names(bd, d) != 1) return;
    bool fp8 = d->dt == TT_E4M3 || d->dt == TT_E5M2;
    bool int8 = (d->dt == TT_U8 || d->dt == TT_I8) && from != TT_F32 && from != TT_F64 &&
                !ts__tile_dt_is_narrow(from) && ts__em_irank(from) > 1;
    bool bf16 = d->dt == TT_BF16 && from == TT_F32, f16 = d->dt == TT_F16 && from == TT_F32;
    if (!fp8 && !int8 && !bf16 && !f16) return;
    e->defe4m3[e->ndef] = d->dt == TT_E4M3;
    e->defbf16[e->ndef] = bf16;
    e->deff16[e->ndef] = f16;
    e->defbfk[e->ndef] = false;
    if (bf16 && nank_form(e, v)) e->defbf16[e->ndef] = false, e->defbfk[e->ndef] = true;
    e->defnz[e->ndef] = false;
    for (int q = 0; d->dt == TT_E4M3 && q < e->nnz; q++)
        if (ts__em_eq_shift(e->nzv[q], v, NULL, 0)) e->defnz[e->ndef] = true;
    /* x[..., j + b] * s with x bf16 and s the same for every lane: the packed store computes
     * the products itself from the raw bf16 (ts__tv_st_e4m3x32_nz_bf16) */
    e->defbf[e->ndef] = e->defbfs[e->ndef] = NULL;
    const ts__tile_node *vm = v; /* a let's value (what it reads, the body does not write) */
    for (int32_t q = 0; vm->kind == TN_NAME && q < bd->nlist; q++)
        if (bd->list[q]->kind == TN_LET && bd->list[q]->sym == vm->sym && unwritten_reads(bd->list[q]->a, bd, NULL))
            vm = bd->list[q]->a;
    if (e->defnz[e->ndef] && vm->kind == TN_BINARY && vm->op == TO_MUL)
        for (int side = 0; side < 2; side++) {
            const ts__tile_node *x = side ? vm->b : vm->a, *k = side ? vm->a : vm->b;
            if (x->kind != TN_INDEX || !x->a->sym || ((const ts__tile_sym *)x->a->sym)->dt != TT_BF16 ||
                ts__em_natural(k->ty) != TT_F32 || ts__em_dep(e, k))
                continue;
            char *addr = contig_addr(e, x);
            if (addr) e->defbf[e->ndef] = x, e->defbfs[e->ndef] = k;
            free(addr);
            if (addr) break;
        }
    e->defval[e->ndef] = v;
    e->defv[e->ndef++] = s;
}

/* The deferrable stores of the body: its statements, those of nested blocks (a macro's
 * expansion) and of the `then` blocks of hoisted bounds tests. */
static void defer_in(em *e, const ts__tile_node *blk, const ts__tile_node *bd, const bool *hoisted) {
    for (int32_t q = 0; q < blk->nlist; q++) {
        const ts__tile_node *s = blk->list[q];
        if (hoisted && hoisted[q]) continue;
        if (s->kind == TN_ASSIGN) defer_consider(e, s, bd);
        if (s->kind == TN_BLOCK) defer_in(e, s, bd, NULL);
        if (s->kind == TN_IF && ts__em_then_only(e, s) && s->b) defer_in(e, s->b, bd, NULL);
    }
}

/* Adjacent stores x[..., L] = a; x[..., L + 1] = b of the body with L = 2 j + c and x not
 * touched elsewhere in it (holding a back until b is invisible then): e->pfirst / psecond.
 * Also inside nested blocks (a macro's expansion) and the `then` blocks of hoisted bounds
 * tests (e->thenv: the vector loop runs them unconditionally), where a copy-free kernel's
 * bounds-checked stores sit. */
static void find_pairs_in(em *e, const ts__tile_node *bd, const ts__tile_node *blk, const bool *hoisted) {
    for (int32_t q = 0; q + 1 < blk->nlist && e->npairs < 8; q++) {
        const ts__tile_node *f = blk->list[q], *g = blk->list[q + 1];
        if ((hoisted && (hoisted[q] || hoisted[q + 1])) || f->kind != TN_ASSIGN || g->kind != TN_ASSIGN ||
            f->op != TO_SET || g->op != TO_SET || f->a->kind != TN_INDEX || g->a->kind != TN_INDEX)
            continue;
        const ts__tile_sym *x = f->a->a->sym;
        if (g->a->a->sym != x || x->dt == TT_BOOL || ts__tile_dt_packed_raw(x->dt) != x->dt ||
            !strcmp(ts__em_vs(x->dt), "f64") || ts__em_lane_bits(x->dt) == 64 || ts__em_count_names(bd, x) != 2)
            continue;
        const int r = f->a->nlist;
        bool same = g->a->nlist == r;
        for (int i = 0; same && i + 1 < r; i++) same = ts__em_eq_shift(f->a->list[i], g->a->list[i], NULL, 0);
        const ts__tile_node *l0 = f->a->list[r - 1], *l1 = same ? g->a->list[r - 1] : NULL;
        int64_t one;
        if (!l1 || l1->kind != TN_BINARY || l1->op != TO_ADD || !ts__em_lit_int(l1->b, &one) || one != 1 ||
            !ts__em_eq_shift(l0, l1->a, NULL, 0))
            continue;
        e->pfirst[e->npairs] = f, e->psecond[e->npairs++] = g;
        q++;
    }
}
static void find_pairs_nested(em *e, const ts__tile_node *bd, const ts__tile_node *blk, const bool *hoisted) {
    find_pairs_in(e, bd, blk, hoisted);
    for (int32_t q = 0; q < blk->nlist; q++) {
        const ts__tile_node *s = blk->list[q];
        if (hoisted && hoisted[q]) continue;
        if (s->kind == TN_BLOCK) find_pairs_nested(e, bd, s, NULL); /* a macro's expansion */
        if (s->kind == TN_IF && ts__em_then_only(e, s) && s->b && s->b->kind == TN_BLOCK) find_pairs_nested(e, bd, s->b, NULL);
    }
}
static void find_pairs(em *e, const ts__tile_node *bd, const bool *hoisted, int id) {
    e->npairs = 0, e->pid = id;
    find_pairs_nested(e, bd, bd, hoisted);
}

/* The 4 x 8 unrolled main loop of vec_parallel when its body has deferrable stores. */
/* `assume(p == 0.0 || abs(p) >= K)`, K >= 2^-6 (either order), p a let or an expression (as
 * fusion restates a let's fact for the forwarded value): p's e4m3 code needs no subnormal
 * path (ts__tv_st_e4m3x32_nz). */
static const ts__tile_node *nz_fact(const ts__tile_node *c) {
    if (c->kind != TN_BINARY || c->op != TO_LOR) return NULL;
    for (int side = 0; side < 2; side++) {
        const ts__tile_node *z = side ? c->b : c->a, *g = side ? c->a : c->b;
        double zero, k;
        if (z->kind != TN_BINARY || z->op != TO_EQ || !ts__em_lit_float(z->b, &zero) || zero != 0.0) continue;
        if (g->kind != TN_BINARY || g->op != TO_GE || !ts__em_lit_float(g->b, &k) || !(k >= 0x1p-6)) continue;
        const ts__tile_node *ab = g->a;
        if (ab->kind != TN_CALL || strcmp(ab->name, "abs") || ab->nlist != 1 || !ts__em_eq_shift(ab->list[0], z->a, NULL, 0))
            continue;
        return z->a;
    }
    return NULL;
}

static void nz_facts_of(em *e, const ts__tile_node *bd) {
    for (int32_t q = 0; q < bd->nlist; q++) {
        const ts__tile_node *s = bd->list[q];
        const ts__tile_node *p = s->kind == TN_CALLSTMT && !strcmp(s->a->name, "assume") && s->a->nlist == 1
                                     ? nz_fact(s->a->list[0]) : NULL;
        if (p && e->nnz < 8) e->nzv[e->nnz++] = p;
    }
}

/* A body whose vector values are all 16-bit lanes (u16 / i16: loads, stores, splats, the
 * vector operators, min / max; fused row folds by min / max / & / |, whose lanes may start
 * from the same value twice) runs first 16 lanes at a time: the same text with the 32-byte
 * types ts__tw_* of tile_rt.h, and its fold accumulators, started from two copies of the
 * 8-lane ones, folded back into them by halves. Same operations lane by lane, so the same
 * bits. Decided on the text: any other vector helper, lane loop or mask keeps the 8 lanes. */
static bool wide16_ok(const char *t) {
    static const char *const ok[] = {"ld_u16", "st_u16", "splat_u16", "max_u16", "min_u16", "u16",
                                     "ld_i16", "st_i16", "splat_i16", "max_i16", "min_i16", "i16", NULL};
    if (strstr(t, "TS__TV_MASK") || strstr(t, "({") || strstr(t, "for (")) return false;
    for (const char *p = strstr(t, "ts__tv_"); p; p = strstr(p + 1, "ts__tv_")) {
        const char *n = p + 7;
        size_t len = strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789_");
        bool found = false;
        for (int i = 0; ok[i] && !found; i++) found = strlen(ok[i]) == len && !strncmp(n, ok[i], len);
        if (!found) return false;
    }
    return true;
}

static bool vec_wide16(em *e, const char *body, int id, int lv) {
    if (e->lanes == 16) return false; /* the vector loop is 16 lanes already */
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) {
        const char *op = e->rf.f[r].op;
        int t = ts__em_natural(e->rf.f[r].acc->dt);
        if (!(op[0] == 'm' || op[0] == '&' || op[0] == '|') || !(t == TT_U16 || t == TT_I16)) return false;
    }
    if (!wide16_ok(body)) return false;
    ts__tile_buf w = {0};
    for (const char *p = body; *p;) {
        if (!strncmp(p, "ts__tv_", 7)) ts__tile_buf_puts(&w, "ts__tw_"), p += 7;
        else if (!strncmp(p, "vacc_", 5)) ts__tile_buf_puts(&w, "wacc_"), p += 5;
        else {
            char c[2] = {*p++, 0};
            ts__tile_buf_puts(&w, c);
        }
    }
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "{\n");
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) {
        const char *S = ts__em_vs(e->rf.f[r].acc->dt);
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "ts__tw_%s wacc_%d_%d = ts__tw_join_%s(vacc_%d_%d, vacc_%d_%d);\n", S, id,
                                            r, S, id, r, id, r);
    }
    ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "for (; %s <= hi_%d - 16; %s += 16) {\n", e->vjname, id, e->vjname);
    ts__tile_buf_puts(e->o, w.data ? w.data : "");
    if (w.oom) e->o->oom = true;
    ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
    for (int r = 0; e->rf.loop && r < e->rf.n; r++) {
        const char *S = ts__em_vs(e->rf.f[r].acc->dt), *op = e->rf.f[r].op;
        ts__em_ind(e, lv + 1);
        if (op[0] == 'm')
            ts__tile_buf_printf(e->o, "vacc_%d_%d = ts__tv_%s_%s(ts__tw_lo_%s(wacc_%d_%d), ts__tw_hi_%s(wacc_%d_%d));\n", id,
                                r, op, S, S, id, r, S, id, r);
        else
            ts__tile_buf_printf(e->o, "vacc_%d_%d = ts__tw_lo_%s(wacc_%d_%d) %s ts__tw_hi_%s(wacc_%d_%d);\n", id, r, S, id, r,
                                op, S, id, r);
    }
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
    ts__tile_buf_free(&w);
    return true;
}

static bool vec_unrolled32(em *e, const ts__tile_node *bd, const bool *hoisted, int id, int lv) {
    e->ndef = 0, e->nnz = 0;
    nz_facts_of(e, bd);
    for (int32_t q = 0; q < bd->nlist; q++) {
        const ts__tile_node *s = bd->list[q];
        if (!hoisted[q] && s->kind == TN_IF && ts__em_then_only(e, s) && s->b) nz_facts_of(e, s->b);
    }
    defer_in(e, bd, bd, hoisted);
    /* unrolled for narrowing stores, and for row folds fused into a copy (whose 8-lane loop
     * would otherwise spend half its instructions on loop control) */
    if (!e->ndef && !(e->rf.loop && e->rf.n)) return false;
    e->defid = id;
    /* a store's scalar factor that the body does not write is read once here: read in the
     * loop, the C compiler reloads it after every byte store (which may alias it) */
    const void *dv[64]; /* the body's own names: not in scope before the loop */
    int nd = 0;
    decls(bd, dv, &nd, 64);
    for (int k = 0; k < e->ndef; k++) {
        e->defbfh[k] = e->defbf[k] && nd < 64 && unwritten_reads(e->defbfs[k], bd, NULL);
        for (int q = 0; q < nd && e->defbfh[k]; q++) e->defbfh[k] = !ts__em_refs(e->defbfs[k], dv[q]);
        if (!e->defbfh[k]) continue;
        char *f = ts__em_ex_str(e, e->defbfs[k], TT_F32);
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "const float nsh%d_%d = %s;\n", id, k, f);
        free(f);
    }
    ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "for (; %s <= hi_%d - %d; %s += %d) {\n", e->vjname, id, 4 * e->lanes, e->vjname,
                                           4 * e->lanes);
    ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t vs_%d = %s;\n", id, e->vjname);
    for (int k = 0; k < e->ndef; k++) {
        if (e->defbf[k]) {
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "void *na%d_%d = NULL;\n", id, k);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const uint16_t *nb%d_%d = NULL;\n", id, k);
            if (e->defbfh[k]) ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const float ns%d_%d = nsh%d_%d;\n", id, k, id, k);
            else ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "float ns%d_%d = 0.0f;\n", id, k);
            continue;
        }
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "void *na%d_%d = NULL;\n", id, k);
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "ts__tv_%s nq%d_%d_0, nq%d_%d_1, nq%d_%d_2, nq%d_%d_3;\n",
                                            e->defe4m3[k] || e->defbf16[k] || e->deff16[k] ? "f32" : "u32", id, k, id, k,
                                            id, k, id, k);
    }
    for (int u = 0; u < 4 && !e->vfail; u++) {
        e->defu = u;
        ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "{\n");
        ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "const int64_t %s = vs_%d + %d; (void)%s;\n", e->vjname, id, e->lanes * u, e->vjname);
        ts__em_rf_dead_decls(e, lv + 2);
        for (int32_t q = 0; q < bd->nlist && !e->vfail; q++)
            if (!hoisted[q]) vst(e, bd->list[q], lv + 2);
        rf_vec_step(e, id, lv + 2);
        ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
    }
    e->defu = -1;
    for (int k = 0; k < e->ndef; k++) {
        ts__em_ind(e, lv + 1);
        if (e->defbf[k]) {
            ts__tile_buf_printf(e->o, "ts__tv_st_e4m3x32_nz_bf16(na%d_%d, nb%d_%d, ns%d_%d);\n", id, k, id, k, id, k);
            continue;
        }
        ts__tile_buf_printf(e->o, "ts__tv_st_%s(na%d_%d, nq%d_%d_0, nq%d_%d_1, nq%d_%d_2, nq%d_%d_3);\n",
                            e->defnz[k]     ? "e4m3x32_nz"
                            : e->defe4m3[k] ? "e4m3x32"
                            : e->defbf16[k] ? "bf16x32"
                            : e->deff16[k]  ? "f16x32"
                            : e->defbfk[k]  ? "u16wx32"
                                            : "u8x32",
                            id, k, id, k, id, k, id,
                            k, id, k);
    }
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
    e->ndef = 0;
    return true;
}

/* The vector loops of a row of vec_parallel (from e->vjname up to hi_<id>): the 8-lane body,
 * the 16- or 32-lane main loop before it, the fused row folds' lane reductions after. */
static void vec_row_loops(em *e, const ts__tile_node *bd, const bool *hoisted, int id, int L) {
    find_pairs(e, bd, hoisted, id);
    ts__em_v2_find_groups(e, bd, hoisted);
    /* the 8-lane body, written once: with its names widened it is also the 16-lane body */
    ts__tile_buf *outer = e->o, body8 = {0};
    e->o = &body8;
    e->ndef = 0;
    ts__em_rf_dead_decls(e, L + 2);
    ts__em_v2_group_begin(e, L + 2);
    for (int32_t q = 0; q < bd->nlist && !e->vfail; q++)
        if (!hoisted[q]) vst(e, bd->list[q], L + 2);
    rf_vec_step(e, id, L + 2);
    e->o = outer;
    bool main_loop = !e->vfail && !body8.oom && body8.data && vec_wide16(e, body8.data, id, L + 1);
    if (!e->nodefer) main_loop |= vec_unrolled32(e, bd, hoisted, id, L + 1);
    /* loop control is a large share of a short 8-lane body: let the C compiler unroll it
     * (not after a 16- or 32-lane main loop, which leaves it at most three steps) */
    if (!main_loop) ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "TS__TV_UNROLL4\n");
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "for (; %s <= hi_%d - %d; %s += %d) {\n", e->vjname, id, e->lanes, e->vjname,
                                              e->lanes);
    ts__tile_buf_puts(e->o, body8.data ? body8.data : "");
    if (body8.oom) e->o->oom = true;
    ts__tile_buf_free(&body8);
    ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "}\n");
    for (int r = 0; r < e->rf.n; r++) /* exact in any order: integer max / min / + / & / | / ^ */
        for (int l = 0; l < e->lanes && !ts__em_v2_rf_hfold(e, id, r, l, L + 1); l++) {
            const ts__tile_sym *A = e->rf.f[r].acc;
            ts__tile_buf av = {0};
            ts__em_sym_ref(e, &av, A);
            const char *op = e->rf.f[r].op, *a = av.data ? av.data : "";
            if (op[0] != 'm' || !l) ts__em_ind(e, L + 1);
            if (op[0] == 'm') {
                if (!l) /* the lanes by halving (ts__tv_hmax_*), then the scalar start */
                    ts__tile_buf_printf(e->o, "%s = (%s)ts__tile_%s%s(%s, ts__tv_h%s_%s(vacc_%d_%d));\n", a, ts__em_ctype(A->dt),
                                        op, ts__tile_dt_is_signed(A->dt) ? "i" : "u", a, op, ts__em_vs(A->dt), id, r);
            } else if (op[0] == '+')
                ts__tile_buf_printf(e->o, "%s = (%s)((%s)%s + (%s)vacc_%d_%d[%d]);\n", a, ts__em_ctype(A->dt), ts__em_utype(A->dt),
                                    a, ts__em_utype(A->dt), id, r, l);
            else ts__tile_buf_printf(e->o, "%s = (%s)(%s %s vacc_%d_%d[%d]);\n", a, ts__em_ctype(A->dt), a, op, id, r, l);
            ts__tile_buf_free(&av);
        }
}

bool ts__em_vec_parallel(em *e, const ts__tile_node *n, int lv) {
    const ts__tile_node *it = n->a, *bd = n->b;
    int nv = n->nlist2;
    int64_t ext;
    if (!e->simd || e->invec || !bd || !innermost(bd)) return false;
    if (ts__em_lit_int(it->list[nv - 1], &ext) && ext < e->lanes) return false;
    bool *hoisted = calloc((size_t)bd->nlist + 1, sizeof *hoisted);
    const void **late = malloc(256 * sizeof *late);
    if (!hoisted || !late) {
        free(hoisted), free(late);
        return false;
    }
    ts__tile_buf *save = e->o, tmp = {0};
    e->o = &tmp;
    vreset(e);
    e->invec = true;
    const ts__tile_sym *js = n->list2[nv - 1]->sym;
    e->vj = js;
    snprintf(e->vjname, sizeof e->vjname, "vb%d_%s", js->uid, js->name);
    char J[300];
    snprintf(J, sizeof J, "%d_%s", js->uid, js->name);
    int id = ++e->vtmp;
    e->rfid = id;
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "{\n");
    if (!e->vscalar) ts__em_v2_transposed_copies(e, n, lv + 1);
    for (int32_t i = 0; i < nv; i++) {
        char *x = ts__em_ex_str(e, it->list[i], TT_I64);
        const ts__tile_sym *ls = n->list2[i]->sym;
        ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t e%d_%s = %s;\n", ls->uid, ls->name, x);
        free(x);
    }
    /* range tests invariant over the outer dims go to pre, spliced in here */
    const size_t pre_at = e->o->len;
    ts__tile_buf pre = {0};
    e->pre = nv > 1 ? &pre : NULL;
    e->nrowv = 0;
    e->prelv = lv + 1;
    if (e->pre) ts__tile_buf_printf(&pre, "%*sint64_t lo0_%d = 0, hi0_%d = e%s;\n", 4 * e->prelv, "", id, id, J);
    for (int32_t i = 0; i + 1 < nv; i++) {
        const ts__tile_sym *ls = n->list2[i]->sym;
        ts__em_ind(e, lv + 1 + i);
        ts__tile_buf_printf(e->o, "for (int64_t v%d_%s = 0; v%d_%s < e%d_%s; v%d_%s++) {\n", ls->uid, ls->name, ls->uid,
                            ls->name, ls->uid, ls->name, ls->uid, ls->name);
        e->rowv[e->nrowv++] = ls;
    }
    int L = lv + nv;
    ts__em_ind(e, L), ts__tile_buf_printf(e->o, "if (e%s > 0) {\n", J);
    const size_t hdr_lets = e->o->len; /* the row's own lets start here */
    /* leading lets: those independent of j run once per row; index lets j + base are folded
     * into the accesses */
    int32_t p = 0;
    for (; p < bd->nlist; p++) {
        const ts__tile_node *s = bd->list[p];
        if (s->kind != TN_LET) break;
        if (!row_invariant(e, s->a)) {
            if (e->nrowv >= (int)(sizeof e->rowv / sizeof e->rowv[0])) e->pre = NULL;
            else e->rowv[e->nrowv++] = s->sym;
        }
        if (!ts__em_dep(e, s->a)) {
            ts__em_st(e, s, L + 1);
            hoisted[p] = true;
            continue;
        }
        char *b = ts__em_natural(((const ts__tile_sym *)s->sym)->dt) == TT_I64 ? ts__em_affine(e, s->a) : NULL;
        if (!b) break;
        vreg(e, s->sym, VS_AFF, b);
    }
    int nlate = 0;
    for (int32_t q = p; q < bd->nlist; q++) decls(bd->list[q], late, &nlate, 256);
    if (nlate >= 256) e->vfail = true;
    /* bounds tests hoisted: the range of j where every j-dependent if holds. When every test
     * is convex in the rows (row_convex) and passes in full at the corners of the rows' box,
     * it passes on every row: one check before the nest (`full`, spliced in with pre) spares
     * each row its range arithmetic. */
    bool corner = e->pre != NULL;
    for (int32_t q = p; q < bd->nlist && corner; q++)
        if (bd->list[q]->kind == TN_IF && ts__em_dep(e, bd->list[q]->a)) corner = row_convex(e, bd->list[q]->a, n, bd, p);
    if (e->pre) ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "int64_t lo_%d = lo0_%d, hi_%d = hi0_%d;\n", id, id, id, id);
    else ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "int64_t lo_%d = 0, hi_%d = e%s;\n", id, id, J);
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "bool ok_%d = true;\n", id);
    const size_t hdr_decl = e->o->len;
    if (corner) ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (!full_%d) {\n", id);
    const size_t hdr_tests = e->o->len;
    for (int32_t q = p; q < bd->nlist && !e->vfail; q++) {
        const ts__tile_node *s = bd->list[q];
        if (s->kind != TN_IF || !ts__em_dep(e, s->a)) continue;
        if (e->nthen >= (int)(sizeof e->thenv / sizeof e->thenv[0]) || !vrange_term(e, s->a, L + 1, id, late, nlate)) {
            e->vfail = true;
            break;
        }
        e->thenv[e->nthen++] = s;
    }
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (lo_%d < 0) lo_%d = 0;\n", id, id);
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (lo_%d > e%s) lo_%d = e%s;\n", id, J, id, J);
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (hi_%d > e%s) hi_%d = e%s;\n", id, J, id, J);
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (hi_%d < lo_%d || !ok_%d) hi_%d = lo_%d;\n", id, id, id, id, id);
    if (corner) {
        /* the corner check, into pre: the row's lets and tests at each corner of the box */
        const char *t = e->o->data ? e->o->data : "";
        const size_t hdr_end = e->o->len;
        ts__tile_buf_printf(e->pre, "%*sbool full_%d = true;\n", 4 * e->prelv, "", id);
        for (int32_t i = 0; i + 1 < nv; i++) {
            const ts__tile_sym *ls = n->list2[i]->sym;
            ts__tile_buf_printf(e->pre, "%*sfor (int64_t v%d_%s = 0; v%d_%s < e%d_%s; v%d_%s += e%d_%s > 1 ? e%d_%s - 1 : 1) {\n",
                                4 * (e->prelv + i), "", ls->uid, ls->name, ls->uid, ls->name, ls->uid, ls->name,
                                ls->uid, ls->name, ls->uid, ls->name, ls->uid, ls->name);
        }
        ts__tile_buf_printf(e->pre, "%*sif (e%s > 0) {\n", 4 * (e->prelv + nv - 1), "", J);
        ts__tile_buf_printf(e->pre, "%.*s", (int)(hdr_decl - hdr_lets), t + hdr_lets);
        ts__tile_buf_printf(e->pre, "%.*s", (int)(hdr_end - hdr_tests), t + hdr_tests);
        ts__tile_buf_printf(e->pre, "%*sfull_%d = full_%d && lo_%d == 0 && hi_%d == e%s;\n", 4 * (L + 1), "", id, id, id,
                            id, J);
        for (int32_t i = nv - 1; i >= 0; i--) ts__tile_buf_printf(e->pre, "%*s}\n", 4 * (e->prelv + i), "");
        ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "} else {\n");
        ts__em_ind(e, L + 2), ts__tile_buf_printf(e->o, "lo_%d = 0, hi_%d = e%s;\n", id, id, J);
        ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "}\n");
    }
    char lo[32], hi[310];
    snprintf(lo, sizeof lo, "lo_%d", id);
    snprintf(hi, sizeof hi, "e%s", J);
    /* a fused row fold (rowfold_match) over this loop's rows: o is the row, k is j */
    if (e->rf.loop != n || nv != 2) e->rf.loop = NULL, e->rf.n = 0;
    for (int r = 0; r < e->rf.n; r++) {
        const ts__tile_sym *o = e->rf.f[r].o, *i0 = n->list2[0]->sym;
        ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "const int64_t v%d_%s = v%d_%s; (void)v%d_%s;\n", o->uid, o->name,
                                           i0->uid, i0->name, o->uid, o->name);
        ts__em_st(e, e->rf.f[r].var, L + 1);
        vreg(e, e->rf.f[r].k, VS_AFF, ts__em_sdup("INT64_C(0)"));
    }
    /* the row: head, vector loops, tail (written into `row`, see below) */
    ts__tile_buf *rowout = e->o, row = {0};
    e->o = &row;
    scalar_loop(e, bd, hoisted, J, "0", lo, L + 1);
    ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "int64_t %s = lo_%d;\n", e->vjname, id);
    if (e->vscalar) { /* the range's elements without their bounds tests */
        char hv[32];
        snprintf(hv, sizeof hv, "hi_%d", id);
        e->inrange = true;
        scalar_loop(e, bd, hoisted, J, e->vjname, hv, L + 1);
        e->inrange = false;
        ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "%s = hi_%d;\n", e->vjname, id);
    }
    for (int r = 0; r < e->rf.n && !e->vscalar; r++) {
        const ts__tile_sym *A = e->rf.f[r].acc;
        ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "ts__tv_%s vacc_%d_%d = ts__tv_splat_%s((%s)(", ts__em_vs(A->dt), id, r,
                                           ts__em_vs(A->dt), ts__em_ctype(A->dt));
        if (e->rf.f[r].op[0] == 'm') ts__em_sym_ref(e, e->o, A);
        else ts__tile_buf_puts(e->o, e->rf.f[r].op[0] == '&' ? "~0" : "0");
        ts__tile_buf_puts(e->o, "));\n");
    }
    if (!e->vscalar) vec_row_loops(e, bd, hoisted, id, L);
    scalar_loop(e, bd, hoisted, J, e->vjname, hi, L + 1);
    e->o = rowout;
    /* A row entirely in range (the common case) runs the same text with the range as
     * constants: the C compiler then unrolls the vector loops and drops the head and tail
     * loops, which on short rows (a 128-channel group) cost as much as the vector work. */
    int64_t cext;
    const bool twice = !e->vscalar && ts__em_lit_int(it->list[nv - 1], &cext) && cext >= 16 && cext <= 1024;
    if (twice) { /* AVX2 builds only: the generic fallback keeps half the code */
        ts__tile_buf_puts(e->o, "#if TS__TV_ROW_TWICE\n");
        ts__em_ind(e, L + 1), ts__tile_buf_printf(e->o, "if (lo_%d == 0 && hi_%d == e%s) {\n", id, id, J);
        ts__em_ind(e, L + 2), ts__tile_buf_printf(e->o, "const int64_t lo_%d = 0, hi_%d = %lld; (void)lo_%d; (void)hi_%d;\n", id, id,
                                           (long long)cext, id, id);
        ts__tile_buf_puts(e->o, row.data ? row.data : "");
        ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "} else\n");
        ts__tile_buf_puts(e->o, "#endif\n");
        ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "{\n");
    }
    ts__tile_buf_puts(e->o, row.data ? row.data : "");
    if (twice) ts__em_ind(e, L + 1), ts__tile_buf_puts(e->o, "}\n");
    if (row.oom) e->o->oom = true;
    ts__tile_buf_free(&row);
    for (int r = 0; r < e->rf.n; r++) ts__em_st(e, e->rf.f[r].store, L + 1);
    ts__em_ind(e, L), ts__tile_buf_puts(e->o, "}\n");
    for (int32_t i = nv - 2; i >= 0; i--) ts__em_ind(e, lv + 1 + i), ts__tile_buf_puts(e->o, "}\n");
    ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
    e->o = save;
    e->invec = false;
    if (e->pre) { /* splice the row-invariant range tests in before the outer loops */
        ts__tile_buf all = {0};
        ts__tile_buf_printf(&all, "%.*s", (int)pre_at, tmp.data ? tmp.data : "");
        ts__tile_buf_puts(&all, pre.data ? pre.data : "");
        ts__tile_buf_puts(&all, tmp.data ? tmp.data + pre_at : "");
        ts__tile_buf_free(&tmp);
        tmp = all;
    }
    e->pre = NULL;
    ts__tile_buf_free(&pre);
    bool ok = !e->vfail && !tmp.oom;
    if (ok) ts__tile_buf_puts(save, tmp.data ? tmp.data : "");
    if (ok && e->rf.loop == n) e->rf.done = true;
    e->npairs = 0;
    ts__tile_buf_free(&tmp);
    vreset(e);
    free(hoisted), free(late);
    if (!ok && !e->nodefer && !e->vscalar) { /* perhaps only a deferred store failed: once more without */
        e->nodefer = true;
        ok = ts__em_vec_parallel(e, n, lv);
        e->nodefer = false;
    }
    if (!ok && !e->vscalar) { /* no vector body (a strided access...): still hoist the bounds tests */
        e->vscalar = true;
        ok = ts__em_vec_parallel(e, n, lv);
        e->vscalar = false;
    }
    return ok;
}

/* b is a with the loop variable k replaced by k + l */
bool ts__em_eq_shift(const ts__tile_node *a, const ts__tile_node *b, const void *k, int64_t l) {
    if (!a || !b) return a == b;
    if (a->kind == TN_NAME && a->sym == k) {
        if (l == 0) return b->kind == TN_NAME && b->sym == k;
        return b->kind == TN_BINARY && b->op == TO_ADD && b->a->kind == TN_NAME && b->a->sym == k &&
               b->b->kind == TN_INT && b->b->ival == l;
    }
    if (a->kind != b->kind || a->op != b->op || a->ival != b->ival || a->fval != b->fval || a->sym != b->sym ||
        a->nlist != b->nlist || a->ty != b->ty || a->dt != b->dt)
        return false;
    if ((a->name == NULL) != (b->name == NULL) || (a->name && strcmp(a->name, b->name))) return false;
    if (!ts__em_eq_shift(a->a, b->a, k, l) || !ts__em_eq_shift(a->b, b->b, k, l) || !ts__em_eq_shift(a->c, b->c, k, l)) return false;
    for (int32_t i = 0; i < a->nlist; i++)
        if (!ts__em_eq_shift(a->list[i], b->list[i], k, l)) return false;
    return true;
}

/* integer accumulators a vector fold keeps in lanes of their own type */
bool ts__em_int_fold_type(int t) {
    return t == TT_I8 || t == TT_U8 || t == TT_I16 || t == TT_U16 || t == TT_I32 || t == TT_U32 || t == TT_I64 ||
           t == TT_U64;
}

/* acc = acc OP x: the operation ("+", "&", "|", "^", "max", "min") and x, or NULL */
const ts__tile_node *ts__em_fold_of(const ts__tile_node *s, const ts__tile_sym **acc, const char **op) {
    if (s->kind != TN_ASSIGN || s->op != TO_SET || s->a->kind != TN_NAME) return NULL;
    const ts__tile_sym *A = s->a->sym;
    const ts__tile_node *r = s->b, *x = NULL;
    if (!A || A->kind != SYM_VAR) return NULL;
    if (r->kind == TN_BINARY && r->a->kind == TN_NAME && r->a->sym == A) {
        x = r->b;
        *op = r->op == TO_ADD ? "+" : r->op == TO_BAND ? "&" : r->op == TO_BOR ? "|" : r->op == TO_BXOR ? "^" : NULL;
        if (!*op || ts__em_natural(ts__em_join(r->a->ty, r->b->ty)) != A->dt) return NULL;
    } else if (r->kind == TN_CALL && r->nlist == 2 && (!strcmp(r->name, "max") || !strcmp(r->name, "min")) &&
               r->list[0]->kind == TN_NAME && r->list[0]->sym == A) {
        x = r->list[1];
        *op = r->name;
        if (ts__em_natural(r->ty) != A->dt) return NULL;
    } else return NULL;
    if (ts__em_refs(x, A)) return NULL;
    *acc = A;
    return x;
}

/* acc = acc OP x_<id> on vectors */
void ts__em_fold_step(em *e, const char *acc, int id, const char *op, const char *S, const char *U, bool flt, bool mm) {
    if (flt) ts__tile_buf_printf(e->o, "%s = ts__tv_%s_f32(%s, x_%d);\n", acc, op, acc, id);
    else if (mm) ts__tile_buf_printf(e->o, "%s = ts__tv_%s_%s(%s, x_%d);\n", acc, op, S, acc, id);
    else if (op[0] == '+')
        ts__tile_buf_printf(e->o, "%s = (ts__tv_%s)((ts__tv_%s)%s + (ts__tv_%s)x_%d);\n", acc, S, U, acc, U, id);
    else ts__tile_buf_printf(e->o, "%s = %s %s x_%d;\n", acc, acc, op, id);
}

bool ts__em_vec_reduce(em *e, const ts__tile_node *n, int lv) {
    const ts__tile_node *it = n->a, *bd = n->b;
    if (!e->simd || e->invec || !bd || n->nlist2 != 1) return false;
    int64_t step = 1;
    if (it->nlist == 3 && !ts__em_lit_int(it->list[2], &step)) return false;
    const ts__tile_sym *ks = n->list2[0]->sym;
    ts__tile_buf *save = e->o, tmp = {0};
    vreset(e);
    e->vj = ks;
    snprintf(e->vjname, sizeof e->vjname, "vb%d_%s", ks->uid, ks->name);
    e->invec = true;
    e->o = &tmp;
    int id = ++e->vtmp;
    char *lo = it->nlist > 1 ? ts__em_ex_str(e, it->list[0], TT_I64) : ts__em_sdup("INT64_C(0)");
    char *hi = ts__em_ex_str(e, it->list[it->nlist > 1 ? 1 : 0], TT_I64);
    bool matched = false;
    if (step == 8 && bd->nlist == 8) {
        /* lanes8: a_l = a_l + y(k + l), l = 0..7: lane l of one vector accumulator is a_l */
        const ts__tile_sym *A[8];
        const ts__tile_node *y0 = NULL;
        bool ok = true;
        for (int l = 0; l < 8 && ok; l++) {
            const char *op = NULL;
            const ts__tile_node *y = ts__em_fold_of(bd->list[l], &A[l], &op);
            ok = y && !strcmp(op, "+") && (A[l]->dt == TT_F32 || A[l]->dt == TT_F64) && A[l]->dt == A[0]->dt;
            if (ok && l == 0) y0 = y;
            ok = ok && ts__em_eq_shift(y0, y, ks, l) && ts__em_dep(e, y);
        }
        if (ok && e->lanes == 16) {
            /* 16 lanes: the accumulator stays 8 lanes (a_l, the canonical order); each step
             * adds lanes 0..7 of y(k + l), l < 16, then lanes 8..15 - the scalar loop's
             * iterations k and k + 8 in order. What is left (one step of 8, e - k < 16) runs
             * the scalar loop itself from the accumulators. */
            matched = true;
            int t = A[0]->dt;
            char *y = ts__em_vex(e, y0, t);
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "{\n");
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "ts__th_%s acc_%d = {", ts__em_vs(t), id);
            for (int l = 0; l < 8; l++) {
                ts__tile_buf_puts(e->o, l ? ", " : "");
                ts__em_sym_ref(e, e->o, A[l]);
            }
            ts__tile_buf_puts(e->o, "};\n");
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t e_%d = %s;\n", id, hi);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "int64_t %s = %s;\n", e->vjname, lo);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "for (; %s <= e_%d - 16; %s += 16) {\n", e->vjname, id, e->vjname);
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "acc_%d = ts__tv_add2h_%s(acc_%d, %s);\n", id, ts__em_vs(t), id, y);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
            for (int l = 0; l < 8; l++) {
                ts__em_ind(e, lv + 1);
                ts__em_sym_ref(e, e->o, A[l]);
                ts__tile_buf_printf(e->o, " = acc_%d[%d];\n", id, l);
            }
            e->invec = false;
            ts__em_ind(e, lv + 1);
            ts__tile_buf_printf(e->o, "for (int64_t v%d_%s = %s; v%d_%s < e_%d; v%d_%s += 8) {\n", ks->uid, ks->name, e->vjname,
                                ks->uid, ks->name, id, ks->uid, ks->name);
            e->invec = true;
            ts__em_body(e, bd, lv + 2);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
            free(y);
        } else if (ok) {
            matched = true;
            int t = A[0]->dt;
            char *y = ts__em_vex(e, y0, t);
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "{\n");
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "ts__tv_%s acc_%d = {", ts__em_vs(t), id);
            for (int l = 0; l < 8; l++) {
                ts__tile_buf_puts(e->o, l ? ", " : "");
                ts__em_sym_ref(e, e->o, A[l]);
            }
            ts__tile_buf_puts(e->o, "};\n");
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t e_%d = %s;\n", id, hi);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "for (int64_t %s = %s; %s < e_%d; %s += 8) {\n", e->vjname, lo,
                                                e->vjname, id, e->vjname);
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "acc_%d = acc_%d + %s;\n", id, id, y);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
            for (int l = 0; l < 8; l++) {
                ts__em_ind(e, lv + 1);
                ts__em_sym_ref(e, e->o, A[l]);
                ts__tile_buf_printf(e->o, " = acc_%d[%d];\n", id, l);
            }
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
            free(y);
        }
    } else if (step == 1 && bd->nlist == 1) {
        const ts__tile_sym *A = NULL;
        const char *op = NULL;
        const ts__tile_node *x = ts__em_fold_of(bd->list[0], &A, &op);
        int t = A ? A->dt : TT_NONE;
        bool flt = t == TT_F32;
        bool intok = ts__em_int_fold_type(t);
        if (x && ts__em_dep(e, x) && (flt ? (op[0] == 'm') : intok)) {
            matched = true;
            char *xv = ts__em_vex(e, x, t);
            char av[320];
            {
                ts__tile_buf ab = {0};
                ts__em_sym_ref(e, &ab, A);
                snprintf(av, sizeof av, "%s", ab.data ? ab.data : "");
                ts__tile_buf_free(&ab);
            }
            bool mm = op[0] == 'm';
            const char *S = ts__em_vs(t), *U = vus(t);
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "{\n");
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "const int64_t lo_%d = %s, e_%d = %s;\n", id, lo, id, hi);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "int64_t %s = lo_%d;\n", e->vjname, id);
            ts__em_ind(e, lv + 1), ts__tile_buf_printf(e->o, "if (e_%d > lo_%d && (uint64_t)e_%d - (uint64_t)lo_%d >= %d) {\n", id, id, id, id, e->lanes);
            /* min / max start every lane from acc (idempotent); the others from the identity */
            const char *init = mm ? av : !strcmp(op, "&") ? "~0" : "0";
            /* four accumulators (the operation is associative and commutative, exactly), so
             * the loop is not bound by the latency of one dependency chain */
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "ts__tv_%s acc_%d = ts__tv_splat_%s((%s)(%s));\n", S, id, S, ts__em_ctype(t), init);
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "ts__tv_%s acc1_%d = acc_%d, acc2_%d = acc_%d, acc3_%d = acc_%d;\n", S, id, id, id, id, id, id);
            if (flt) ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "ts__tv_f32 xl_%d = acc_%d;\n", id, id);
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "for (; %s <= e_%d - %d; %s += %d) {\n", e->vjname, id, 4 * e->lanes,
                                                       e->vjname, 4 * e->lanes);
            ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "const int64_t vs_%d = %s;\n", id, e->vjname);
            for (int u = 0; u < 4; u++) {
                char an[32];
                snprintf(an, sizeof an, u ? "acc%d_%d" : "acc_%d", u ? u : id, id);
                ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "{\n");
                ts__em_ind(e, lv + 4), ts__tile_buf_printf(e->o, "const int64_t %s = vs_%d + %d;\n", e->vjname, id, e->lanes * u);
                ts__em_ind(e, lv + 4), ts__tile_buf_printf(e->o, "const ts__tv_%s x_%d = %s;\n", S, id, xv);
                ts__em_ind(e, lv + 4), ts__em_fold_step(e, an, id, op, S, U, flt, mm);
                if (u == 3 && flt) ts__em_ind(e, lv + 4), ts__tile_buf_printf(e->o, "xl_%d = x_%d;\n", id, id);
                ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "}\n");
            }
            ts__em_ind(e, lv + 2), ts__tile_buf_puts(e->o, "}\n");
            ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "for (; %s <= e_%d - %d; %s += %d) {\n", e->vjname, id, e->lanes,
                                                       e->vjname, e->lanes);
            ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "const ts__tv_%s x_%d = %s;\n", S, id, xv);
            char a0[32];
            snprintf(a0, sizeof a0, "acc_%d", id);
            ts__em_ind(e, lv + 3), ts__em_fold_step(e, a0, id, op, S, U, flt, mm);
            if (flt) ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "xl_%d = x_%d;\n", id, id);
            ts__em_ind(e, lv + 2), ts__tile_buf_puts(e->o, "}\n");
            ts__em_ind(e, lv + 2), ts__tile_buf_puts(e->o, "{\n");
            ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "ts__tv_%s x_%d = acc1_%d;\n", S, id, id);
            ts__em_ind(e, lv + 3), ts__em_fold_step(e, a0, id, op, S, U, flt, mm);
            ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "x_%d = acc3_%d;\n", id, id);
            snprintf(a0, sizeof a0, "acc2_%d", id);
            ts__em_ind(e, lv + 3), ts__em_fold_step(e, a0, id, op, S, U, flt, mm);
            ts__em_ind(e, lv + 3), ts__tile_buf_printf(e->o, "x_%d = acc2_%d;\n", id, id);
            snprintf(a0, sizeof a0, "acc_%d", id);
            ts__em_ind(e, lv + 3), ts__em_fold_step(e, a0, id, op, S, U, flt, mm);
            ts__em_ind(e, lv + 2), ts__tile_buf_puts(e->o, "}\n");
            char accn[32];
            snprintf(accn, sizeof accn, "acc_%d", id);
            bool hf = !flt && ts__em_v2_hfold(e, av, accn, op, t, lv + 2);
            if (!hf && mm && !flt) { /* 8/16/64-bit integer min / max: the lanes by halving */
                ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "%s = ts__tv_h%s_%s(acc_%d);\n", av, op, S, id);
                hf = true;
            }
            if (mm && !hf) ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "%s = acc_%d[0];\n", av, id);
            for (int l = mm ? 1 : 0; l < e->lanes && !hf; l++) {
                ts__em_ind(e, lv + 2);
                if (flt) ts__tile_buf_printf(e->o, "%s = ts__tile_%sf(%s, acc_%d[%d]);\n", av, op, av, id, l);
                else if (mm)
                    ts__tile_buf_printf(e->o, "%s = (%s)ts__tile_%s%s(%s, acc_%d[%d]);\n", av, ts__em_ctype(t), op,
                                        ts__tile_dt_is_signed(t) ? "i" : "u", av, id, l);
                else if (op[0] == '+')
                    ts__tile_buf_printf(e->o, "%s = (%s)((%s)%s + (%s)acc_%d[%d]);\n", av, ts__em_ctype(t), ts__em_utype(t), av, ts__em_utype(t), id, l);
                else ts__tile_buf_printf(e->o, "%s = (%s)(%s %s acc_%d[%d]);\n", av, ts__em_ctype(t), av, op, id, l);
            }
            /* a NaN result means acc and every element were NaN: the serial loop ends with the
             * last element's NaN, whatever NaN the lane folds picked */
            if (flt) ts__em_ind(e, lv + 2), ts__tile_buf_printf(e->o, "if (%s != %s) %s = xl_%d[%d];\n", av, av, av, id, e->lanes - 1);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
            const ts__tile_sym *ls = ks;
            e->invec = false;
            ts__em_ind(e, lv + 1);
            ts__tile_buf_printf(e->o, "for (int64_t v%d_%s = %s; v%d_%s < e_%d; v%d_%s++) {\n", ls->uid, ls->name, e->vjname,
                                ls->uid, ls->name, id, ls->uid, ls->name);
            e->invec = true;
            ts__em_body(e, bd, lv + 2);
            ts__em_ind(e, lv + 1), ts__tile_buf_puts(e->o, "}\n");
            ts__em_ind(e, lv), ts__tile_buf_puts(e->o, "}\n");
            free(xv);
        }
    }
    free(lo), free(hi);
    e->o = save;
    e->invec = false;
    bool ok = matched && !e->vfail && !tmp.oom;
    if (ok) ts__tile_buf_puts(save, tmp.data ? tmp.data : "");
    ts__tile_buf_free(&tmp);
    vreset(e);
    return ok;
}

/* ---------------- kernels ---------------- */
