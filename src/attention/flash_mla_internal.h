/* FlashMLA internals: the shared tile engine (flash_mla_core.c) and its per-ISA kernels.
 *
 * One work item = one group of query rows that share the same KV token list (sparse decode: a
 * (request, query token); dense decode: a (request, kv head) with all s_q * h_q/h_kv rows;
 * sparse prefill: a query token), a panel of those rows, and a span of the token list. Tokens
 * are decoded to f32 once per tile of TS__MLA_TILE and reused by every row of the panel. */
#ifndef TS_FLASH_MLA_INTERNAL_H
#define TS_FLASH_MLA_INTERNAL_H

#include "tilestack/flash_mla.h"

#include <stdint.h>

#define TS__MLA_DV 512
#define TS__MLA_TILE 48 /* tokens per tile: a multiple of the 6-token QK micro-tile */
#define TS__MLA_MT 6    /* tokens per QK micro-tile */
#define TS__MLA_RS 16   /* rows per strip (two ymm): panels are multiples of it */

/* Row stride (floats) of the decoded tile: dk = 512 rows 2 KiB apart would put PV's 48 reads
 * of one column block into 2 of the 64 L1 sets, so such strides are padded by one cache line
 * (MODEL1 b1 h_q128, interleaved A/B on a loaded machine: ~3% faster, min of 20 calls). */
static inline int64_t ts__mla_tile_stride(int64_t dk) { return dk % 256 == 0 ? dk + 16 : dk; }
#define TS__MLA_POS_INVALID INT32_MAX
#define TS__MLA_LIM_ALL (INT32_MAX - 1)

/* Canonical arithmetic (every ISA path gives the same bits):
 *  qk:      st[t][r] = (sum_{d ascending} fma chain of qs[r][d]*k[t][d] from 0) * scale;
 *  softmax: s = pos[t] <= lim[r] ? st : -inf; m' = max(m, max_t s); alpha = m' == -inf ? 1 :
 *           exp(m - m'); p = s == -inf ? 0 : exp(s - m'); l = l*alpha + (sum_{t ascending} p);
 *  pv:      o = o*alpha, then o = fma(p[t], v[t], o) for t ascending.
 * exp is ts__mla_exp's polynomial (below), not libm. */
typedef struct ts__mla_kernels {
    /* qs: packed Q, [rp/16 strips][dk][16]; k: n token rows of dk floats, kstride apart
     * (n % 6 == 0); st: [n][rp]. */
    void (*qk)(const float *qs, int64_t rp, const float *k, int64_t dk, int64_t kstride,
               int64_t n, float scale, float *st);
    /* st in: scores, out: probabilities; m, l, alpha: per row (rp, multiple of 8). */
    void (*softmax)(float *st, int64_t rp, int64_t n, const int32_t *pos, const int32_t *lim,
                    float *m, float *l, float *alpha);
    /* o [rp][512] = o*alpha + P^T V; v rows of vstride floats (the first 512 used). pf: npf
     * cache-line addresses (the next tile's gathered tokens) to prefetch while PV runs; hints
     * only, no effect on results. */
    void (*pv)(const float *st, int64_t rp, const float *v, int64_t vstride, int64_t n,
               const float *alpha, float *o, const void *const *pf, int64_t npf);
    /* token decoders to f32 rows */
    void (*dec_v32)(const uint8_t *tok, float *dst);                         /* 576 */
    void (*dec_model1)(const uint8_t *data, const uint8_t *scales, float *dst); /* 512 */
    void (*dec_bf16)(const uint16_t *src, float *dst, int64_t n);
    /* finish and merge rows of 512: out[c] = bf16(o[c] * f); y[c] = y[c] + x[c] * w (a multiply
     * then an add, no fma) */
    void (*row_to_bf16)(const float *o, float f, uint16_t *out);
    void (*row_axpy)(const float *x, float w, float *y);
} ts__mla_kernels;

extern const ts__mla_kernels ts__mla_kernels_generic;
#ifdef TS_HAVE_AVX2_KERNELS
extern const ts__mla_kernels ts__mla_kernels_avx2;
/* the AVX2 row operations of the finish / merge steps, shared with the AVX-512 table (a few
 * rows of 512 per request: zmm would gain nothing measurable) */
void ts__mla_row_to_bf16__avx2(const float *o, float f, uint16_t *out);
void ts__mla_row_axpy__avx2(const float *x, float w, float *y);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
extern const ts__mla_kernels ts__mla_kernels_avx512;
#endif
const ts__mla_kernels *ts__mla_pick_kernels(void);

/* exp for the online softmax, x <= 0 expected: 0 below -87 (and for -inf / NaN), otherwise
 * 2^n * p(r) with n = rint(x*log2e), r = x - n*ln2 in two fma steps, p the degree-7 Taylor
 * polynomial in Horner form. The AVX2 path evaluates the same operations per lane. */
#define TS__MLA_LOG2E 1.44269504088896341f
#define TS__MLA_LN2_HI 0.693359375f
#define TS__MLA_LN2_LO (-2.12194440e-4f)
#define TS__MLA_EXP_MIN (-87.0f)
#define TS__MLA_C7 (1.0f / 5040.0f)
#define TS__MLA_C6 (1.0f / 720.0f)
#define TS__MLA_C5 (1.0f / 120.0f)
#define TS__MLA_C4 (1.0f / 24.0f)
#define TS__MLA_C3 (1.0f / 6.0f)
#define TS__MLA_C2 0.5f

/* ---- token sources ---- */

typedef enum ts__mla_tok_kind {
    TS__MLA_TOK_BF16 = 0, /* rows of d_qk bf16 */
    TS__MLA_TOK_V32 = 1,
    TS__MLA_TOK_MODEL1 = 2,
} ts__mla_tok_kind;

/* One token list of a group: either an explicit list of token addresses (sparse: compacted
 * valid slots, in slot order) or a dense paged range [0, len) through a block table. */
typedef struct ts__mla_toklist {
    int dense;
    /* sparse */
    const uint8_t *const *ptr; /* token data */
    const uint8_t *const *sptr; /* MODEL1 scale bytes (NULL otherwise) */
    const uint8_t *kinds;       /* ts__mla_tok_kind per token */
    /* dense */
    const uint8_t *base;     /* + block * block_stride + row * row_stride (bytes) */
    int64_t block_stride, row_stride, page;
    const int32_t *btab;
    int64_t btab_stride;
    int64_t len; /* tokens in the list */
} ts__mla_toklist;

/* ---- work description for the engine ---- */

typedef struct ts__mla_rows {
    int64_t nrows;         /* rows of the group */
    int64_t dk;            /* 576 or 512 */
    float scale;
    /* row r's q (bf16, dk contiguous) and per-row causal limit (TS__MLA_LIM_ALL if none) */
    const uint16_t *const *q;
    const int32_t *lim;
} ts__mla_rows;

/* Online-softmax state of a panel after a span: m, l per row, o [rows][512] unnormalised. */
typedef struct ts__mla_state {
    float *m, *l, *o;
} ts__mla_state;

/* Workspace bytes of ts__mla_run_span for a panel of `nrows` rows (64-byte aligned blocks). */
size_t ts__mla_span_ws_bytes(int64_t nrows, int64_t dk);

/* Run tokens [t0, t1) of tl for rows [r0, r1) of `rows`, from the empty state; the state lives
 * in ws (ts__mla_span_ws_bytes(r1 - r0, dk) bytes, 64-byte aligned) and is returned in *st. */
void ts__mla_run_span(const ts__mla_kernels *kern, const ts__mla_rows *rows, int64_t r0,
                      int64_t r1, const ts__mla_toklist *tl, int64_t t0, int64_t t1, void *ws,
                      ts__mla_state *st);

/* Finish one row: lse = m + ln l (natural; +inf and out = 0 when l == 0), out = o / l times
 * 1/(1+exp(sink - lse)) when a sink is given (has_sink), rounded to bf16. */
void ts__mla_finish_row(const ts__mla_kernels *kern, float m, float l, const float *o,
                        int has_sink, float sink,
                        uint16_t *out, float *lse);

/* Merge n partial states in order (m, l, o rows) into one. */
void ts__mla_merge(const ts__mla_kernels *kern, int64_t n, const float *m, const float *l,
                   const float *const *o,
                   float *mo, float *lo, float *oo);

/* Row panels per group so that groups * panels keeps the threads busy (rows are independent,
 * so results never depend on it), and the row range of panel i of p. */
int64_t ts__mla_panels(int64_t ngroups, int64_t nrows);
void ts__mla_panel_rows(int64_t nrows, int64_t p, int64_t i, int64_t *r0, int64_t *r1);

/* ---- scheduling handle (flash_mla_metadata.c) ---- */

typedef struct ts__mla_config {
    int64_t b, s_q, h_q, h_kv, d_qk, page, extra_page, topk, extra_topk;
    int causal, sparse, has_topk_length, has_extra_topk_length;
} ts__mla_config;

/* Dense split plan, a function of (rows per group, seqlen) only: groups with fewer than
 * TS__MLA_SPLIT_ROWS rows are memory-bound and split their tokens into chunks of
 * TS__MLA_SPLIT_TOKENS so that one request can use several threads; chunk partials are merged
 * in chunk order. */
#define TS__MLA_SPLIT_ROWS 32
#define TS__MLA_SPLIT_TOKENS 4096
/* Sparse decode: a request's slot list (topk_length or topk slots, then the extra ones) is
 * split into chunks of TS__MLA_SPARSE_CHUNK slots, so one request's tokens are decoded once
 * across threads instead of once per row panel. */
#define TS__MLA_SPARSE_CHUNK 1024

struct ts_mla_metadata {
    int initialized;
    ts__mla_config cfg;
    int32_t *vals; /* cache_seqlens (dense) or topk_length then extra_topk_length (sparse) */
    int64_t nvals;
    int64_t chunk;      /* tokens (dense) or slots (sparse) per chunk */
    int64_t *chunk_off; /* [b + 1] prefix of chunks per request */
    float *part;        /* partial states of split requests */
    int64_t part_floats;
};

/* First use: record cfg and vals, build the plan and its workspace. Later: TS_ERR_INVALID_ARGUMENT
 * unless cfg and vals match. lens[i]: request i's token count (dense) or slot count (sparse). */
ts_status ts__mla_meta_bind(ts_mla_metadata *meta, const ts__mla_config *cfg,
                            const int32_t *vals, int64_t nvals, const int64_t *lens);

/* ---- argument checks (flash_mla_check.c) ---- */

/* check + dtype + shape (entries < 0 are wildcards) + contiguous last dim (not for 1-D views)
 * + non-negative strides; `fn` prefixes the message. */
ts_status ts__mla_check(const char *fn, const ts_tensor *t, const char *name, ts_dtype dtype,
                        int32_t ndim, const int64_t *shape);
/* An FP8 cache view [num_blocks, P, 1, token_bytes] of `layout` (U8 / I8 / E4M3). */
ts_status ts__mla_check_fp8_cache(const char *fn, const ts_tensor *t, const char *name,
                                  ts_mla_kv_layout layout);
/* Byte address of token `row` of block `blk` in an FP8 cache; MODEL1 scales in *scales. */
const uint8_t *ts__mla_fp8_token(const ts_tensor *t, ts_mla_kv_layout layout, int64_t blk,
                                 int64_t row, const uint8_t **scales);

#endif
