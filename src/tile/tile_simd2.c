#include "tile/tile_simd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- SIMD lowering, second set ----------------
 * Per-lane shift amounts, lane folds by a shuffle tree, and loops that read a tile
 * transposed. Hooks in vex_natural, vec_parallel and vec_reduce; helpers in tile_rt.h's
 * "second set". */

/* x << y, x >> y with per-lane amounts on 32/64-bit lanes: ts__tile_shl / shr (amount modulo
 * the width, left shifts on the unsigned lanes, arithmetic right shifts of signed ones) */
char *ts__em_v2_shift(int t, int op, const char *x, const char *y) {
    int w = t == TT_I32 || t == TT_U32 ? 32 : t == TT_I64 || t == TT_U64 ? 64 : 0;
    if (!w) return NULL; /* narrower lanes: the helpers work in 32 bits, lane by lane */
    if (op == TO_SHL)
        return ts__em_sfmt("((ts__tv_%s)ts__tv_shlv_u%d((ts__tv_u%d)(%s), (ts__tv_u%d)(%s)))", ts__em_vs(t), w, w, x, w, y);
    return ts__em_sfmt("ts__tv_shrv_%s(%s, %s)", ts__em_vs(t), x, y);
}

/* av = the fold of av and the lanes of accumulator acc (min / max lanes start from av),
 * through a tile_rt.h shuffle tree: 32-bit integer lanes, any order being exact */
bool ts__em_v2_hfold(em *e, const char *av, const char *acc, const char *op, int t, int lv) {
    if (t != TT_I32 && t != TT_U32) return false;
    const char *S = ts__em_vs(t);
    ts__em_ind(e, lv);
    if (op[0] == 'm') ts__tile_buf_printf(e->o, "%s = ts__tv_h%s_%s(%s);\n", av, op, S, acc);
    else {
        const char *h = op[0] == '+' ? "add" : op[0] == '&' ? "and" : op[0] == '|' ? "or" : "xor";
        ts__tile_buf_printf(e->o, "%s = (%s)((uint32_t)%s %s ts__tv_h%s_u32((ts__tv_u32)%s));\n", av, ts__em_ctype(t), av,
                            op[0] == '+' ? "+" : op, h, acc);
    }
    return true;
}
/* the same for fused row fold r of vec_parallel's loop id (called for lane l = 0, 1, ...:
 * true ends the lane-by-lane fold) */
bool ts__em_v2_rf_hfold(em *e, int id, int r, int l, int lv) {
    if (l != 0) return false;
    ts__tile_buf av = {0};
    ts__em_sym_ref(e, &av, e->rf.f[r].acc);
    char acc[48];
    snprintf(acc, sizeof acc, "vacc_%d_%d", id, r);
    bool ok = ts__em_v2_hfold(e, av.data ? av.data : "", acc, e->rf.f[r].op, e->rf.f[r].acc->dt, lv);
    ts__tile_buf_free(&av);
    return ok;
}

/* tiles read as X[f(j), g] in the body of n (X a 2-D tile of 1, 2 or 4-byte elements that n
 * does not write, j the vector variable, g independent of it) */
static void v2_scan_tr(em *e, const ts__tile_node *x, const ts__tile_node *bd, const ts__tile_sym *js) {
    if (!x) return;
    if (x->kind == TN_INDEX && x->a && x->a->sym && x->nlist == 2) {
        const ts__tile_sym *s = x->a->sym;
        int b = s->kind == SYM_TILE && s->rank == 2 ? ts__em_lane_bits(s->dt) : 0;
        int64_t bytes = s->cdims[0] * s->cdims[1] * (b / 8);
        bool known = false;
        for (int i = 0; i < e->nv2tr; i++) known |= e->v2tr[i] == s;
        if (!known && b && b <= 32 && s->dt != TT_BOOL && bytes <= 65536 && ts__em_refs(x->list[0], js) &&
            !ts__em_refs(x->list[1], js) && !ts__em_refs_written(bd, s) && e->nv2tr < 8) {
            e->v2tr[e->nv2tr] = s;
            e->v2trid[e->nv2tr++] = ++e->vtmp;
        }
    }
    v2_scan_tr(e, x->a, bd, js), v2_scan_tr(e, x->b, bd, js), v2_scan_tr(e, x->c, bd, js);
    for (int32_t i = 0; i < x->nlist; i++) v2_scan_tr(e, x->list[i], bd, js);
}

/* Before the loops of vector loop n: a transposed copy of each tile the body reads
 * transposed (ts__tv_transpose_*, 8 x 8 blocks in registers), so that X[j + b, g] becomes
 * the contiguous XT[g, j + b] */
void ts__em_v2_transposed_copies(em *e, const ts__tile_node *n, int lv) {
    e->nv2tr = 0;
    v2_scan_tr(e, n->b, n->b, e->vj);
    for (int i = 0; i < e->nv2tr; i++) {
        const ts__tile_sym *s = e->v2tr[i];
        int b = ts__em_lane_bits(s->dt);
        ts__em_ind(e, lv);
        ts__tile_buf_printf(e->o, "_Alignas(32) uint%d_t tr%d_%s[%lld];\n", b, e->v2trid[i], s->name,
                            (long long)(s->cdims[0] * s->cdims[1]));
        ts__em_ind(e, lv);
        ts__tile_buf_printf(e->o, "ts__tv_transpose_%d(tr%d_%s, (const uint%d_t *)t%d_%s, %lld, %lld);\n", b,
                            e->v2trid[i], s->name, b, s->uid, s->name, (long long)s->cdims[0], (long long)s->cdims[1]);
    }
}

/* &XT[g, base + j] for a read X[base + j, g] of a tile with a transposed copy, else NULL */
char *ts__em_v2_transposed_addr(em *e, const ts__tile_node *n) {
    const ts__tile_sym *s = n->a->sym;
    int k = -1;
    for (int i = 0; i < e->nv2tr; i++)
        if (e->v2tr[i] == s) k = i;
    if (k < 0 || n->nlist != 2 || ts__em_dep(e, n->list[1])) return NULL;
    char *base = ts__em_affine(e, n->list[0]);
    if (!base) return NULL;
    char *g = ts__em_ex_str(e, n->list[1], TT_I64);
    char *r = ts__em_sfmt("&((%s *)tr%d_%s)[(%s) * %lld + (int64_t)((uint64_t)(%s) + (uint64_t)%s)]", ts__em_ctype(s->dt),
                   e->v2trid[k], s->name, g, (long long)s->cdims[0], base, e->vjname);
    free(base), free(g);
    return r;
}

/* x is K * j + c (or c + K * j, j * K, K * j) with j the vector variable, K in 8..64, c in
 * 0..K-1 literals */
static bool v2_gidx(const em *e, const ts__tile_node *x, int64_t *K, int64_t *c) {
    *c = 0;
    if (x->kind == TN_BINARY && x->op == TO_ADD) {
        const ts__tile_node *m = x->a, *l = x->b;
        if (!ts__em_lit_int(l, c)) m = x->b, l = x->a;
        if (!ts__em_lit_int(l, c)) return false;
        x = m;
    }
    if (x->kind != TN_BINARY || x->op != TO_MUL) return false;
    const ts__tile_node *v = x->b;
    if (!ts__em_lit_int(x->a, K)) {
        if (!ts__em_lit_int(x->b, K)) return false;
        v = x->a;
    }
    return v->kind == TN_NAME && v->sym == e->vj && *K >= 8 && *K <= 64 && *c >= 0 && *c < *K;
}
/* accesses of X in n: every one X[o..., K j + c] with the same K and other indices (those
 * independent of j) as *first; the bit mask of the c seen; false if any other access */
static bool v2_gscan(const em *e, const ts__tile_node *n, const ts__tile_sym *X, const ts__tile_node **first,
                     int64_t *K, uint64_t *seen) {
    if (!n) return true;
    if (n->kind == TN_INDEX && n->a && n->a->sym == X) {
        int64_t k, c;
        int r = n->nlist;
        if (r < 1 || !v2_gidx(e, n->list[r - 1], &k, &c)) return false;
        for (int i = 0; i + 1 < r; i++) {
            if (ts__em_dep(e, n->list[i])) return false;
            if (*first && !ts__em_eq_shift((*first)->list[i], n->list[i], NULL, 0)) return false;
        }
        if (!*first) *first = n, *K = k;
        if (k != *K) return false;
        *seen |= UINT64_C(1) << c;
        return true;
    }
    if (n->kind == TN_NAME && n->sym == X) return false;
    if (!v2_gscan(e, n->a, X, first, K, seen) || !v2_gscan(e, n->b, X, first, K, seen) ||
        !v2_gscan(e, n->c, X, first, K, seen))
        return false;
    for (int32_t i = 0; i < n->nlist; i++)
        if (!v2_gscan(e, n->list[i], X, first, K, seen)) return false;
    return true;
}
static bool v2_gtype_ok(int dt) {
    if (dt == TT_BOOL || ts__tile_dt_packed_raw(dt) != dt) return false;
    const char *v = ts__em_vs(dt);
    return !strcmp(v, "u8") || !strcmp(v, "i8") || !strcmp(v, "u16") || !strcmp(v, "i16") || !strcmp(v, "u32") ||
           !strcmp(v, "i32") || !strcmp(v, "f32");
}
/* candidate tiles / tensors (contiguous last dim) of the body's accesses */
static void v2_gcands(const ts__tile_node *n, const ts__tile_sym **c, int *nc) {
    if (!n) return;
    if (n->kind == TN_INDEX && n->a && n->a->sym && *nc < 16) {
        const ts__tile_sym *s = n->a->sym;
        bool have = false;
        for (int i = 0; i < *nc; i++) have |= c[i] == s;
        int r = s->rank;
        bool unit = s->kind == SYM_TILE ||
                    (s->kind == SYM_TENSOR && !(s->strided && (s->stridesym[r - 1] || s->cstrides[r - 1] != 1)));
        if (!have && unit && v2_gtype_ok(s->dt)) c[(*nc)++] = s;
    }
    v2_gcands(n->a, c, nc), v2_gcands(n->b, c, nc), v2_gcands(n->c, c, nc);
    for (int32_t i = 0; i < n->nlist; i++) v2_gcands(n->list[i], c, nc);
}
/* The strided groups of vector body bd: X read only as X[..., K j + c], every c < K (no
 * store to X in bd), or stored only by top-level statements X[..., K j + c] = v, each c once
 * (X not read in bd: holding the stores back to the last of them is invisible). */
void ts__em_v2_find_groups(em *e, const ts__tile_node *bd, const bool *hoisted) {
    e->nv2g = 0;
    const ts__tile_sym *c[16];
    int nc = 0;
    for (int32_t q = 0; q < bd->nlist; q++)
        if (!hoisted[q]) v2_gcands(bd->list[q], c, &nc);
    for (int i = 0; i < nc && e->nv2g < 4; i++) {
        const ts__tile_sym *X = c[i];
        const ts__tile_node *first = NULL, *last = NULL;
        int64_t K = 0;
        uint64_t seen = 0;
        bool written = ts__em_refs_written(bd, X), ok = true;
        if (!written) {
            for (int32_t q = 0; q < bd->nlist && ok; q++)
                if (!hoisted[q]) ok = v2_gscan(e, bd->list[q], X, &first, &K, &seen);
        } else {
            int n = 0;
            for (int32_t q = 0; q < bd->nlist && ok; q++) {
                const ts__tile_node *s = bd->list[q];
                if (hoisted[q] || !ts__em_refs(s, X)) continue;
                /* X[...] = v with X nowhere in v nor in the other indices */
                ok = s->kind == TN_ASSIGN && s->op == TO_SET && s->a->kind == TN_INDEX && s->a->a->sym == X &&
                     ts__em_count_names(s, X) == 1;
                uint64_t before = seen;
                ok = ok && v2_gscan(e, s->a, X, &first, &K, &seen) && seen != before;
                last = s, n++;
            }
            ok = ok && n == K;
        }
        if (!ok || !first || seen != (K == 64 ? ~UINT64_C(0) : (UINT64_C(1) << K) - 1)) continue;
        e->v2g[e->nv2g].s = X, e->v2g[e->nv2g].acc = first, e->v2g[e->nv2g].last = last;
        e->v2g[e->nv2g].K = K, e->v2g[e->nv2g].st = written, e->v2g[e->nv2g].id = ++e->vtmp;
        e->nv2g++;
    }
}
/* &X[o..., K * j] of group g (lane 0's first element) */
static char *v2_gaddr(em *e, int g) {
    const ts__tile_node *n = e->v2g[g].acc;
    const ts__tile_sym *s = n->a->sym;
    int r = n->nlist;
    char *ix[TS__TILE_MAX_RANK];
    for (int i = 0; i + 1 < r; i++) ix[i] = ts__em_ex_str(e, n->list[i], TT_I64);
    ix[r - 1] = ts__em_sfmt("(int64_t)((uint64_t)%lld * (uint64_t)%s)", (long long)e->v2g[g].K, e->vjname);
    char *el = ts__em_elem_at(s, ix, r);
    for (int i = 0; i < r; i++) free(ix[i]);
    char *res = ts__em_sfmt("&%s", el);
    free(el);
    return res;
}
/* at the top of each 8-lane step: the groups read (ts__tv_ldg_*), the stores' lane arrays */
void ts__em_v2_group_begin(em *e, int lv) {
    for (int g = 0; g < e->nv2g; g++) {
        const ts__tile_sym *s = e->v2g[g].s;
        const bool w = ts__em_lane_bits(s->dt) == 8;
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "_Alignas(32) %s g%d_[%lld];\n", w ? "uint32_t" : ts__em_ctype(s->dt),
                                         e->v2g[g].id, (long long)(e->lanes * e->v2g[g].K));
        if (e->v2g[g].st) continue;
        char *p = v2_gaddr(e, g);
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tv_ldg_%s%s((const %s *)%s, %lld, g%d_);\n", w ? "u8" : ts__em_vs(s->dt),
                                         w ? "w" : "", w ? "uint8_t" : ts__em_ctype(s->dt), p, (long long)e->v2g[g].K, e->v2g[g].id);
        free(p);
    }
}
static int v2_gfind(const em *e, const ts__tile_node *n, int64_t *c) {
    int64_t K;
    if (n->kind != TN_INDEX || !n->a) return -1;
    for (int g = 0; g < e->nv2g; g++)
        if (e->v2g[g].s == n->a->sym && v2_gidx(e, n->list[n->nlist - 1], &K, c)) return g;
    return -1;
}
/* a read of a group: its lane vector (NULL: not a group) */
char *ts__em_v2_group_read(em *e, const ts__tile_node *n) {
    int64_t c;
    int g = v2_gfind(e, n, &c);
    if (g < 0 || e->v2g[g].st) return NULL;
    if (e->defu >= 0) { /* not in the 4 x 8 unrolled copy (no group loads there) */
        e->vfail = true;
        return ts__em_sdup("0");
    }
    const ts__tile_sym *s = n->a->sym;
    if (ts__em_lane_bits(s->dt) == 8)
        return ts__em_sfmt("TS__TV_CVT(ts__tv_ld_u32(&g%d_[%lld]), ts__tv_%s)", e->v2g[g].id, (long long)(e->lanes * c), ts__em_vs(s->dt));
    return ts__em_sfmt("ts__tv_ld_%s(&g%d_[%lld])", ts__em_vs(s->dt), e->v2g[g].id, (long long)(e->lanes * c));
}
/* a store of a group: into its lane array, all of them stored after the last (true: done) */
bool ts__em_v2_group_store(em *e, const ts__tile_node *n, int lv) {
    int64_t c;
    int g = n->kind == TN_ASSIGN ? v2_gfind(e, n->a, &c) : -1;
    if (g < 0 || !e->v2g[g].st) return false;
    if (e->defu >= 0) {
        e->vfail = true;
        return true;
    }
    const ts__tile_sym *s = n->a->a->sym;
    const bool w = ts__em_lane_bits(s->dt) == 8;
    char *v;
    if (!w) v = ts__em_vex(e, n->b, ts__tile_dt_packed_raw(s->dt));
    else { /* 32-bit lanes whose low bytes are stored: a cast<u8|i8> of a 32-bit integer is them */
        const ts__tile_node *x = n->b;
        int xt = x->kind == TN_CALL && !strcmp(x->name, "cast") ? ts__em_natural(x->list[0]->ty) : TT_NONE;
        if (xt == TT_U32 || xt == TT_I32) v = ts__em_vex(e, x->list[0], TT_U32);
        else {
            char *b = ts__em_vex(e, x, ts__tile_dt_packed_raw(s->dt));
            v = ts__em_sfmt("TS__TV_CVT(%s, ts__tv_u32)", b);
            free(b);
        }
    }
    ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tv_st_%s(&g%d_[%lld], %s);\n", w ? "u32" : ts__em_vs(s->dt), e->v2g[g].id,
                                     (long long)(e->lanes * c), v);
    free(v);
    if (n == e->v2g[g].last) {
        char *p = v2_gaddr(e, g);
        ts__em_ind(e, lv), ts__tile_buf_printf(e->o, "ts__tv_stg_%s%s((%s *)%s, %lld, g%d_);\n", w ? "u8" : ts__em_vs(s->dt),
                                         w ? "w" : "", w ? "uint8_t" : ts__em_ctype(s->dt), p, (long long)e->v2g[g].K, e->v2g[g].id);
        free(p);
    }
    return true;
}
/* cast<32-bit integer>(X[..., K j + c]) of an 8-bit group read: its widened lanes */
char *ts__em_v2_group_widened(em *e, const ts__tile_node *n) {
    int64_t c;
    int t = ts__em_natural(n->ty);
    if (n->nlist != 1 || (t != TT_U32 && t != TT_I32)) return NULL;
    int g = v2_gfind(e, n->list[0], &c);
    if (g < 0 || e->v2g[g].st || ts__em_lane_bits(e->v2g[g].s->dt) != 8 || e->v2g[g].s->dt == TT_I8) return NULL;
    if (e->defu >= 0) {
        e->vfail = true;
        return ts__em_sdup("0");
    }
    return ts__em_sfmt("((ts__tv_%s)ts__tv_ld_u32(&g%d_[%lld]))", ts__em_vs(t), e->v2g[g].id, (long long)(e->lanes * c));
}

/* f16 and e5m6 loads, e5m6 stores (from f32): tile_rt.h's lane-wise twins of the numerics
 * routines instead of a call per lane; 32-bit integers to 8/16-bit ones by a byte shuffle;
 * NULL for every other conversion. Consumes s. */
char *ts__em_v2_conv(char *s, int from, int to) {
    char *r = NULL;
    if (from == TT_F16 || from == TT_E5M6) r = ts__em_sfmt("ts__tv_%s_to_f32(%s)", from == TT_F16 ? "f16" : "e5m6", s);
    else if (to == TT_E5M6 && from == TT_F32) r = ts__em_sfmt("ts__tv_f32_to_e5m6(%s)", s);
    else if ((from == TT_I32 || from == TT_U32) && (to == TT_U8 || to == TT_I8 || to == TT_U16 || to == TT_I16))
        r = ts__em_sfmt("((ts__tv_%s)ts__tv_lo%d_u32((ts__tv_u32)(%s)))", ts__em_vs(to), ts__em_lane_bits(to), s);
    /* zero extension to 32-bit lanes: one vpmovzx (GCC 12 widens 8-byte vectors lane by lane
     * through general registers) */
    else if ((from == TT_U8 || from == TT_U16) && (to == TT_I32 || to == TT_U32))
        r = ts__em_sfmt("((ts__tv_%s)ts__tv_widen_u%d(%s))", ts__em_vs(to), ts__em_lane_bits(from), s);
    if (r) free(s);
    return r;
}

/* n an i64 value S * j + base (S a literal, base independent of j; j + b, k * (j + b), ...):
 * the C text of base and S, else NULL */
static char *v2_affs(em *e, const ts__tile_node *n, int64_t *S) {
    char *b = ts__em_affine(e, n);
    if (b) {
        *S = 1;
        return b;
    }
    int64_t k;
    if (n->kind != TN_BINARY || ts__em_natural(n->ty) != TT_I64) return NULL;
    if (n->op == TO_MUL) {
        const ts__tile_node *v = ts__em_lit_int(n->a, &k) ? n->b : ts__em_lit_int(n->b, &k) ? n->a : NULL;
        if (!v || k < 0 || k > 4096 || !(b = v2_affs(e, v, S))) return NULL;
        *S *= k;
        char *r = ts__em_sfmt("((int64_t)((uint64_t)(%s) * (uint64_t)%lld))", b, (long long)k);
        free(b);
        return r;
    }
    if (n->op != TO_ADD && n->op != TO_SUB) return NULL;
    const ts__tile_node *v = n->a, *u = n->b;
    if (n->op == TO_ADD && !ts__em_dep(e, v)) v = n->b, u = n->a;
    if (ts__em_dep(e, u) || !ts__em_dep(e, v) || !(b = v2_affs(e, v, S))) return NULL;
    char *us = ts__em_ex_str(e, u, TT_I64);
    char *r = ts__em_sfmt("((int64_t)((uint64_t)(%s) %c (uint64_t)(%s)))", b, n->op == TO_ADD ? '+' : '-', us);
    free(b), free(us);
    return r;
}

/* (S j + base) / d with d independent of j (a scale index, (k * 16) / bw): one division per
 * 8 lanes (ts__tv_divaff_i64) instead of eight */
char *ts__em_v2_divaff(em *e, const ts__tile_node *n) {
    int64_t S;
    if (ts__em_dep(e, n->b) || ts__em_natural(n->a->ty) != TT_I64) return NULL;
    char *b = v2_affs(e, n->a, &S);
    if (!b || S > 4096) {
        free(b);
        return NULL;
    }
    char *d = ts__em_ex_str(e, n->b, TT_I64);
    char *r = ts__em_sfmt("ts__tv_divaff_i64((int64_t)((uint64_t)(%s) + (uint64_t)%lld * (uint64_t)%s), INT64_C(%lld), %s)", b,
                   (long long)S, e->vjname, (long long)S, d);
    free(b), free(d);
    return r;
}

/* a read at j-dependent indices that are not affine in j: lane by lane, the same elements the
 * scalar loop reads (a gather: scale tables indexed by (k * 16) / bw and the like). Strided
 * indices are refused: a reduction over the last axis, for one, folds better along it than
 * gathered along the kept axis. */
char *ts__em_v2_gather(em *e, const ts__tile_node *n) {
    const ts__tile_sym *s = n->a->sym;
    int r = n->nlist;
    if (s->dt == TT_BOOL || r > TS__TILE_MAX_RANK) return NULL;
    for (int i = 0; i < r; i++) { /* strided (S j + b) accesses: better left to the other rules */
        int64_t S;
        char *b = ts__em_dep(e, n->list[i]) ? v2_affs(e, n->list[i], &S) : NULL;
        free(b);
        if (b) return NULL;
    }
    int id = ++e->vtmp;
    ts__tile_buf b = {0};
    char *ix[TS__TILE_MAX_RANK];
    ts__tile_buf_puts(&b, "({ ");
    for (int i = 0; i < r; i++) {
        if (ts__em_dep(e, n->list[i])) {
            char *v = ts__em_vex(e, n->list[i], TT_I64);
            ts__tile_buf_printf(&b, "const ts__tv_i64 gx%d_%d = %s; ", i, id, v);
            free(v);
            ix[i] = ts__em_sfmt("gx%d_%d[l_%d]", i, id, id);
        } else {
            char *x = ts__em_ex_str(e, n->list[i], TT_I64);
            ts__tile_buf_printf(&b, "const int64_t gx%d_%d = %s; ", i, id, x);
            free(x);
            ix[i] = ts__em_sfmt("gx%d_%d", i, id);
        }
    }
    /* lanes outside the tile / tensor read 0: a gather in a select arm or behind && runs for
     * lanes the scalar code never reads */
    ts__tile_buf ok = {0};
    ts__tile_buf_puts(&ok, "1");
    for (int i = 0; i < r; i++) {
        if (!ts__em_dep(e, n->list[i])) continue;
        ts__tile_buf_printf(&ok, " && (uint64_t)%s < (uint64_t)", ix[i]);
        if (s->cdims[i] >= 0) ts__tile_buf_printf(&ok, "INT64_C(%lld)", (long long)s->cdims[i]);
        else if (s->kind == SYM_TENSOR && s->dimsym[i]) ts__em_sym_ref(e, &ok, s->dimsym[i]);
        else ts__tile_buf_puts(&ok, "0");
    }
    char *el = ts__em_elem_at(s, ix, r);
    ts__tile_buf_printf(&b, "ts__tv_%s r_%d; for (int l_%d = 0; l_%d < %d; l_%d++) r_%d[l_%d] = (%s) ? %s : 0; r_%d; })",
                        ts__em_vs(s->dt), id, id, id, e->lanes, id, id, id, ok.data ? ok.data : "0", el, id);
    ts__tile_buf_free(&ok);
    free(el);
    for (int i = 0; i < r; i++) free(ix[i]);
    if (!b.data) ts__tile_buf_puts(&b, "");
    return b.data;
}

/* x << k, x >> k (0 <= k < 8) on 8-bit lanes through one 64-bit shift and a mask: u8 both
 * ways, i8 left only (its right shift is arithmetic) */
char *ts__em_v2_shift8(int t, int op, const char *x, int k) {
    if (t != TT_U8 && !(t == TT_I8 && op == TO_SHL)) return NULL;
    return ts__em_sfmt("((ts__tv_%s)ts__tv_sh%sk_u8((ts__tv_u8)(%s), %d))", ts__em_vs(t), op == TO_SHL ? "l" : "r", x, k);
}
