/* FlashMLA tile engine: packs a panel's query rows once, then walks the group's token list in
 * tiles of TS__MLA_TILE tokens, decoding each token once to f32 and running QK^T, the online
 * softmax and PV for every row of the panel; finish and split-merge steps are shared scalar
 * code, so every ISA path ends with the same bits. */
#include "flash_mla_internal.h"
#include "../core/internal.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

const ts__mla_kernels *ts__mla_pick_kernels(void) {
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) return &ts__mla_kernels_avx512;
#endif
#ifdef TS_HAVE_AVX2_KERNELS
    if (ts__isa_avx2_up(ts__active_isa())) return &ts__mla_kernels_avx2;
#endif
    return &ts__mla_kernels_generic;
}

static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Most line addresses one token adds to PV's prefetch list: its lines (an unaligned span of
 * `bytes` covers at most bytes / 64 + 2) and a MODEL1 scale line. */
static int64_t pf_lines_per_token(int64_t dk) {
    int64_t bytes = dk * 2 > 656 ? dk * 2 : 656;
    return bytes / 64 + 3;
}

size_t ts__mla_span_ws_bytes(int64_t nrows, int64_t dk) {
    size_t rp = (size_t)ts__align(nrows, TS__MLA_RS);
    return al64(rp * (size_t)dk * 4)                    /* packed q */
           + al64(rp * TS__MLA_DV * 4)                  /* o */
           + al64((size_t)TS__MLA_TILE * (size_t)ts__mla_tile_stride(dk) * 4) /* decoded tile */
           + al64((size_t)TS__MLA_TILE * rp * 4)        /* scores / probabilities */
           + 4 * al64(rp * 4)                           /* m, l, alpha, lim */
           + al64(TS__MLA_TILE * 4)                     /* pos */
           + al64((size_t)(TS__MLA_TILE * pf_lines_per_token(dk)) * sizeof(void *)); /* pf list */
}

static void decode_token(const ts__mla_kernels *kern, const ts__mla_toklist *tl, int64_t t,
                         int64_t dk, float *dst) {
    if (tl->dense) {
        int64_t blk = tl->btab[t / tl->page];
        const uint8_t *p = tl->base + blk * tl->block_stride + (t % tl->page) * tl->row_stride;
        kern->dec_bf16((const uint16_t *)p, dst, dk);
        return;
    }
    switch ((ts__mla_tok_kind)tl->kinds[t]) {
    case TS__MLA_TOK_V32: kern->dec_v32(tl->ptr[t], dst); break;
    case TS__MLA_TOK_MODEL1: kern->dec_model1(tl->ptr[t], tl->sptr[t], dst); break;
    default: kern->dec_bf16((const uint16_t *)tl->ptr[t], dst, dk); break;
    }
}

/* Sparse tokens are random gathers (L3 or DRAM) and dense pages are scattered blocks: the decode
 * loop prefetches PF_DIST tokens ahead (~80-150 cycles of decode each, so a DRAM miss is
 * covered), and the end of each tile prefetches the next tile's first PF_DIST (PV's streams
 * would evict a whole tile prefetched earlier). Sparse lists also hand the next tile's lines to
 * PV, which requests them a slice per row block (see pv_avx2). Hints only: no effect on
 * results. */
#define PF_DIST 8

/* token t's bytes (p, bytes) and MODEL1 scale bytes (*sp, else NULL) */
static const uint8_t *token_bytes(const ts__mla_toklist *tl, int64_t t, int64_t dk,
                                  int64_t *bytes, const uint8_t **sp) {
    *bytes = dk * 2;
    *sp = NULL;
    if (tl->dense)
        return tl->base + (int64_t)tl->btab[t / tl->page] * tl->block_stride +
               (t % tl->page) * tl->row_stride;
    if (tl->kinds[t] == TS__MLA_TOK_V32) *bytes = 656;
    else if (tl->kinds[t] == TS__MLA_TOK_MODEL1) {
        *bytes = 576;
        *sp = tl->sptr[t];
    }
    return tl->ptr[t];
}

static void prefetch_tile(const ts__mla_toklist *tl, int64_t t0, int64_t t1, int64_t dk) {
    for (int64_t t = t0; t < t1; t++) {
        int64_t bytes;
        const uint8_t *sp, *p = token_bytes(tl, t, dk, &bytes, &sp);
        if (sp) __builtin_prefetch(sp, 0, 2);
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
        __builtin_prefetch(p + bytes - 1, 0, 2);
    }
}

/* the distinct lines of tokens [t0, t1) of a sparse list, in token order */
static int64_t tile_lines(const ts__mla_toklist *tl, int64_t t0, int64_t t1, int64_t dk,
                          const void **out) {
    int64_t n = 0;
    if (tl->dense) return 0;
    for (int64_t t = t0; t < t1; t++) {
        int64_t bytes;
        const uint8_t *sp, *p = token_bytes(tl, t, dk, &bytes, &sp);
        uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)(p + bytes - 1);
        for (; a <= e; a += 64) out[n++] = (const void *)a;
        if (sp) out[n++] = sp;
    }
    return n;
}

void ts__mla_run_span(const ts__mla_kernels *kern, const ts__mla_rows *rows, int64_t r0,
                      int64_t r1, const ts__mla_toklist *tl, int64_t t0, int64_t t1, void *ws,
                      ts__mla_state *st) {
    const int64_t dk = rows->dk, nr = r1 - r0, rp = ts__align(nr, TS__MLA_RS);
    const int64_t ks = ts__mla_tile_stride(dk);
    char *w = (char *)ws;
    float *qs = (float *)w;
    w += al64((size_t)(rp * dk) * 4);
    float *o = (float *)w;
    w += al64((size_t)rp * TS__MLA_DV * 4);
    float *kt = (float *)w;
    w += al64((size_t)TS__MLA_TILE * (size_t)ks * 4);
    float *sc = (float *)w;
    w += al64((size_t)TS__MLA_TILE * (size_t)rp * 4);
    float *m = (float *)w;
    w += al64((size_t)rp * 4);
    float *l = (float *)w;
    w += al64((size_t)rp * 4);
    float *alpha = (float *)w;
    w += al64((size_t)rp * 4);
    int32_t *lim = (int32_t *)w;
    w += al64((size_t)rp * 4);
    int32_t *pos = (int32_t *)w;
    w += al64(TS__MLA_TILE * 4);
    const void **pf = (const void **)w;

    for (int64_t i = 0; i < rp; i++) {
        float *dst = qs + (i / TS__MLA_RS) * dk * TS__MLA_RS + (i % TS__MLA_RS);
        if (i < nr) {
            const uint16_t *q = rows->q[r0 + i];
            /* ts_bf16_to_f32 inlined: as a call per value it was ~5% of a sparse decode */
            for (int64_t d = 0; d < dk; d++) {
                uint32_t u = (uint32_t)q[d] << 16;
                memcpy(dst + d * TS__MLA_RS, &u, 4);
            }
            lim[i] = rows->lim ? rows->lim[r0 + i] : TS__MLA_LIM_ALL;
        } else {
            for (int64_t d = 0; d < dk; d++) dst[d * TS__MLA_RS] = 0.0f;
            lim[i] = TS__MLA_LIM_ALL;
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)rp * TS__MLA_DV * 4);
    prefetch_tile(tl, t0, ts__min64(t1, t0 + PF_DIST), dk);

    for (int64_t ts = t0; ts < t1; ts += TS__MLA_TILE) {
        int64_t nt = ts__min64(TS__MLA_TILE, t1 - ts);
        int64_t ntp = ts__align(nt, TS__MLA_MT);
        for (int64_t j = 0; j < nt; j++) {
            if (ts + j + PF_DIST < t1) prefetch_tile(tl, ts + j + PF_DIST, ts + j + PF_DIST + 1, dk);
            decode_token(kern, tl, ts + j, dk, kt + j * ks);
            pos[j] = tl->dense ? (int32_t)(ts + j) : 0;
        }
        /* padding tokens: zero rows (no NaN reaches an fma), always masked */
        for (int64_t j = nt; j < ntp; j++) {
            memset(kt + j * ks, 0, (size_t)dk * 4);
            pos[j] = TS__MLA_POS_INVALID;
        }
        kern->qk(qs, rp, kt, dk, ks, ntp, rows->scale, sc);
        kern->softmax(sc, rp, ntp, pos, lim, m, l, alpha);
        int64_t npf = tile_lines(tl, ts + nt, ts__min64(t1, ts + nt + TS__MLA_TILE), dk, pf);
        kern->pv(sc, rp, kt, ks, ntp, alpha, o, pf, npf);
        /* the next tile's first tokens; the decode loop prefetches the rest PF_DIST ahead */
        prefetch_tile(tl, ts + nt, ts__min64(t1, ts + nt + PF_DIST), dk);
    }
    st->m = m;
    st->l = l;
    st->o = o;
}

void ts__mla_finish_row(const ts__mla_kernels *kern, float m, float l, const float *o,
                        int has_sink, float sink,
                        uint16_t *out, float *lse) {
    if (!(l > 0.0f)) {
        *lse = INFINITY;
        memset(out, 0, TS__MLA_DV * 2);
        return;
    }
    double lse_d = (double)m + log((double)l);
    double f = 1.0 / (double)l;
    if (has_sink) f /= 1.0 + exp((double)sink - lse_d);
    kern->row_to_bf16(o, (float)f, out);
    *lse = (float)lse_d;
}

void ts__mla_merge(const ts__mla_kernels *kern, int64_t n, const float *m, const float *l,
                   const float *const *o,
                   float *mo, float *lo, float *oo) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (l[i] > 0.0f && m[i] > mx) mx = m[i];
    double lsum = 0.0;
    for (int c = 0; c < TS__MLA_DV; c++) oo[c] = 0.0f;
    if (mx != -INFINITY) {
        for (int64_t i = 0; i < n; i++) {
            if (!(l[i] > 0.0f)) continue;
            double wgt = exp((double)m[i] - (double)mx);
            lsum += (double)l[i] * wgt;
            kern->row_axpy(o[i], (float)wgt, oo);
        }
    }
    *mo = mx;
    *lo = (float)lsum;
}

int64_t ts__mla_panels(int64_t ngroups, int64_t nrows) {
    int64_t T = ts_get_num_threads();
    int64_t strips = ts__ceil_div(nrows, TS__MLA_RS);
    if (T <= 1 || ngroups <= 0 || strips <= 1) return 1;
    /* makespan model: ceil(items / T) items of cost 1/p + redundant decode (~0.1 of a group) */
    int64_t best = 1;
    double best_cost = 1e300;
    for (int64_t p = 1; p <= ts__min64(strips, 8); p++) {
        double cost = (double)ts__ceil_div(ngroups * p, T) * (1.0 / (double)p + 0.1);
        if (cost < best_cost - 1e-9) {
            best_cost = cost;
            best = p;
        }
    }
    return best;
}

void ts__mla_panel_rows(int64_t nrows, int64_t p, int64_t i, int64_t *r0, int64_t *r1) {
    int64_t strips = ts__ceil_div(nrows, TS__MLA_RS);
    *r0 = ts__min64(nrows, (i * strips / p) * TS__MLA_RS);
    *r1 = ts__min64(nrows, ((i + 1) * strips / p) * TS__MLA_RS);
}
