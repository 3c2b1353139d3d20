/* MQA logits internals: the job both API flavours (non-paged, paged) reduce to, and the
 * per-ISA kernel table. The canonical arithmetic is in docs/mqa_logits.md.
 *
 * Layouts handed to the kernels (all f32):
 *   qt   one query, heads padded to hp (a multiple of TS__MQA_HB, padded heads have q = 0 and
 *        w = 0): qt[(pass * d + dd) * TS__MQA_HB + i] = q[pass * TS__MQA_HB + i][dd];
 *   w    [hp] head weights;
 *   k    decoded keys, k[j * d + dd], n rows (n a multiple of TS__MQA_NR; rows past the real
 *        keys are finite filler whose results the caller drops).
 * Output: v[j] = the head reduction of key j, before the FP8 per-token scale. */
#ifndef TS_MQA_LOGITS_INTERNAL_H
#define TS_MQA_LOGITS_INTERNAL_H

#include "core/internal.h"

#include <stdint.h>

#define TS__MQA_HB 16    /* heads per pass: two 8-lane vectors */
#define TS__MQA_NR 6     /* keys per micro-tile */
#define TS__MQA_CHUNK 96 /* keys decoded per work item (multiple of TS__MQA_NR) */

/* v[j] for j < n: lane partials part[j][l] (l < 8) over heads h = 8c + l, c ascending:
 *   s = 0; s = fmaf(q[h][dd], k[j][dd], s) for dd ascending; r = s > 0 ? s : +0;
 *   part = fmaf(r, w[h], part);
 * then v = ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)). part is caller scratch [n][8]. */
typedef void (*ts__mqa_heads_fn)(const float *qt, const float *w, int64_t hp, int64_t d,
                                 const float *k, int64_t n, float *part, float *v);

/* Decode n key rows of `src` (row_bytes apart) to f32 rows of d values. fp4: e2m1x2 (code 8
 * gives +0), else e4m3. sf: NULL, or per row d/32 block scales (sf[j * sf_ld + b]) multiplying
 * each value (one f32 multiply). */
typedef void (*ts__mqa_decode_fn)(const uint8_t *src, int64_t row_bytes, int64_t n, int64_t d,
                                  int fp4, const float *sf, int64_t sf_ld, float *dst);

typedef struct ts__mqa_kernels {
    const char *name;
    ts__mqa_heads_fn heads;
    ts__mqa_decode_fn decode;
} ts__mqa_kernels;

extern const ts__mqa_kernels ts__mqa_kernels_generic;
#if defined(TS_HAVE_AVX2_KERNELS)
extern const ts__mqa_kernels ts__mqa_kernels_avx2;
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
extern const ts__mqa_kernels ts__mqa_kernels_avx512;
#endif

/* One call, validated. Queries are grouped in blocks of qblk consecutive rows that share one
 * decoded key chunk; key index ranges are per query. */
typedef struct ts__mqa_job {
    int fp4, mx;          /* e2m1x2 operands; block-32 UE8M0 scales (q_sf given) */
    int64_t h, hp, d;     /* heads, padded heads, head dim (values) */
    int64_t nq, qblk;     /* queries (= logits rows), queries per block */
    const uint8_t *q;     /* [nq][h][d or d/2] */
    const int32_t *q_sf;  /* [nq][h] (mx) */
    const void *w;        /* [nq] rows of h, w_ld apart */
    int w_bf16;
    int64_t w_ld;
    /* key ranges: non-paged from ks/ke; paged from context_lens (next_n = qblk) */
    int paged;
    const int32_t *ks, *ke;   /* non-paged */
    int compressed;           /* non-paged: column = key - ks */
    const int32_t *ctx_lens;  /* paged: [nq] */
    /* keys, non-paged */
    const uint8_t *kv;
    const void *kv_sf;        /* f32 [S_kv], or int32 [S_kv] (mx) */
    int64_t seq_kv;
    /* keys, paged */
    const uint8_t *cache;
    int64_t block_kv, block_bytes; /* stride(0) of the fused cache */
    const int32_t *block_table;
    int64_t bt_ld;
    /* output */
    void *out;
    int out_bf16;
    int64_t out_ld, out_cols;
    int clean;
} ts__mqa_job;

/* The fields both API flavours fill alike (formats, heads, q, weights, logits); the caller
 * adds the query blocking and the key ranges. */
static inline ts__mqa_job ts__mqa_job_base(int fp4, int mx, int64_t h, int64_t d,
                                           const ts_tensor *q, const ts_tensor *q_sf,
                                           const ts_tensor *weights, ts_tensor *logits,
                                           int64_t out_cols, bool clean) {
    ts__mqa_job job = {0};
    job.fp4 = fp4;
    job.mx = mx;
    job.h = h;
    job.hp = ts__align(h, TS__MQA_HB);
    job.d = d;
    job.q = (const uint8_t *)q->data;
    job.q_sf = mx ? (const int32_t *)q_sf->data : NULL;
    job.w = weights->data;
    job.w_bf16 = weights->dtype == TS_BF16;
    job.w_ld = weights->strides[0];
    job.out = logits->data;
    job.out_bf16 = logits->dtype == TS_BF16;
    job.out_ld = logits->strides[0];
    job.out_cols = out_cols;
    job.clean = clean;
    return job;
}

/* Computes every in-range logit, then (clean) writes -inf to the other columns. Returns
 * TS_ERR_OUT_OF_MEMORY before writing anything if scratch cannot be had. */
ts_status ts__mqa_logits_run(const ts__mqa_job *job);

/* Shared validation of the q / weights / logits dtypes (both API flavours).
 * Sets *fp4 / *mx from q, q_sf. */
ts_status ts__mqa_check_q_mode(const ts_tensor *q, const ts_tensor *q_sf, int *fp4, int *mx);
ts_status ts__mqa_check_head_dim(int64_t d, int fp4, int mx);
ts_status ts__mqa_check_weights_logits(const ts_tensor *weights, int64_t rows, int64_t h,
                                       const ts_tensor *logits, int64_t cols);

#endif
