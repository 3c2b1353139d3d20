/* GEMM framework internals: resolved operand views and packing (not installed). */
#ifndef TS_GEMM_INTERNAL_H
#define TS_GEMM_INTERNAL_H

#include "core/internal.h"
#include "numerics/bf16_inline.h"
#include "tilestack/gemm.h"

#include <string.h>

/* One operand as the NT driver sees it: logical [mn, k] with element (r, k) at storage unit
 * r*s_mn + k*s_k, except packed fp4, where the pair index along the contiguous dim is used
 * (K-major: unit r*s_mn + (k>>1)*s_k, nibble k&1; MN-major: (r>>1)*s_mn + k*s_k, nibble r&1). */
typedef struct ts__gemm_operand {
    const void *data;
    ts_dtype dtype; /* TS_E4M3, TS_E2M1X2 or TS_BF16 */
    int64_t mn, k;
    int64_t s_mn, s_k;
    bool k_major;
    /* Scales (absent for bf16): f32 or packed ue8m0 words, element (i, j) at i*sf_s_mn +
     * j*sf_s_k; one scale per gran_mn rows x gran_k K values. */
    const void *sf;
    bool sf_packed;
    int64_t sf_s_mn, sf_s_k;
    int64_t gran_mn, gran_k;
    /* Pre-packed weight (gemm_prepack.c): data points at this operand's group of packed bytes
     * and the layout comes from pw; s_mn, s_k and sf are unused. */
    const struct ts_packed_weight *pw;
} ts__gemm_operand;

/* ---- pre-packed weights (gemm_prepack.c) ----
 * Per group: panels of TS__PW_W columns, panel-major; per panel, nkb blocks of kb K values,
 * each block_bytes long: kb rows of TS__PW_W values (row = one K value across the panel's
 * columns; e4m3 one byte each, e2m1 two per byte, both in the slot order of ts__pw_slot;
 * bf16 two bytes each, column order), zeros past K and past N, then TS__PW_W scales in column
 * order (f32, or one ue8m0 byte each when sf_u8; replicated per column for gran_mn 128; past
 * N 0.0f, or byte 127 (1.0: byte 0 would decode to a subnormal)). */
#define TS__PW_W 32
struct ts_packed_weight {
    uint64_t magic;
    ts_dtype dtype;      /* TS_E4M3, TS_E2M1X2 or TS_BF16 */
    bool grouped;        /* packed from [G, N, K] */
    int64_t groups, n, k;
    bool scaled;         /* fp8 / fp4 with scales */
    ts_dtype sf_dtype;   /* the source sfb dtype (default recipe resolution) */
    bool sf_u8;          /* scales stored as ue8m0 bytes */
    bool sf_pow2;        /* every f32 scale is a positive power of two (ue8m0 routes) */
    bool nan_free;       /* no e4m3 NaN code (lets the decoder skip the NaN fix-up) */
    bool sf_normal;      /* sf_u8: no scale byte is 0 or 255 (decoded by a shift alone) */
    int64_t gran_mn, gran_k;
    int64_t kb, nkb, npanel;
    int64_t row_bytes;   /* bytes of one K row of a panel */
    int64_t block_bytes, panel_bytes, group_bytes;
    size_t nbytes;
    uint8_t *data;
};
#define TS__PW_MAGIC 0x7473707765696768ull

/* Slot of column c (< 32) in a packed e4m3 / e2m1 row: q = 4 (c % 8) + c / 8, i.e. byte q
 * (e4m3) or nibble q (e2m1: byte q / 2, low nibble for even q). So 32-bit lane L of a row
 * holds columns L, 8 + L, 16 + L, 24 + L (e4m3; e2m1: 16-bit lane L), and the AVX2 decoder
 * (kernels/avx2/gemm_decode_avx2.c) gets each group of 8 columns by shifts and a mask, with
 * no shuffle (e2m1: one zero-extension). */
static inline int64_t ts__pw_slot(int64_t c) { return 4 * (c % 8) + c / 8; }

/* A packed weight's group g as an NT operand (no checks). */
ts__gemm_operand ts__gemm_packed_operand(const struct ts_packed_weight *pw, int64_t g);
/* Bytes ts_gemm_prepack_b allocates for `groups` [n, k] weights of dtype (scales: ue8m0
 * bytes if sf_u8, else f32; gran_k the recipe's K granularity) without packing anything
 * (declared again in src/model/model_internal.h, which does not include this header). */
size_t ts__gemm_packed_nbytes(ts_dtype dtype, bool sf_u8, int64_t gran_k, int64_t groups,
                              int64_t n, int64_t k);
/* TS_ERR_NULL_POINTER / TS_ERR_INVALID_ARGUMENT for a NULL or destroyed packed weight. */
ts_status ts__gemm_check_packed(const struct ts_packed_weight *pw, const char *name);
/* ts__gemm_pack_panel / ts__gemm_pack_scales for a packed-weight operand (scalar decode). */
void ts__gemm_pw_pack_panel(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                            int64_t kc, int w, float *dst);
void ts__gemm_pw_pack_scales(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t kb0,
                             int64_t nkb, int64_t g, int w, float *dst);
/* Resolves the call's recipe for a packed weight and checks that its B granularity is the
 * one the weight was packed with. */
ts_status ts__gemm_packed_recipe(const struct ts_packed_weight *pw, const int64_t *recipe,
                                 const int64_t *recipe_a, const int64_t *recipe_b,
                                 ts_gemm_recipe *r);

/* dst[k*w + i] = value (r0+i, k0+k) for i < rows, 0 for rows <= i < w; k < kc. */
void ts__gemm_pack_panel(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                         int64_t kc, int w, float *dst);
/* dst[b*w + i] = scale of row r0+i for canonical K block kb0+b (blocks of g values), 0 for
 * padded rows; b < nkb. */
void ts__gemm_pack_scales(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t kb0,
                          int64_t nkb, int64_t g, int w, float *dst);

/* ---- driver (gemm_dense.c), shared with the grouped GEMMs ---- */

/* A 2-D view as an NT operand (validated: ndim, dtype, majorness). bf16 selects TS_BF16,
 * else e4m3 / e2m1x2. prefer_mn: read a view that is both K- and MN-contiguous as MN-major
 * (the caller transposed a row-major argument). */
ts_status ts__gemm_make_operand(const ts_tensor *x, const char *name, bool bf16, bool prefer_mn,
                                ts__gemm_operand *op);
/* Validates a 2-D scale view (f32 or packed ue8m0) against op's shape and attaches it. */
ts_status ts__gemm_attach_scales(ts__gemm_operand *op, const ts_tensor *sf, const char *name,
                                 int64_t gran_mn, int64_t gran_k);
/* Whether upstream runs this pair only on SM100, where f32 scales are cast to ue8m0. */
bool ts__gemm_needs_ue8m0_cast(const ts__gemm_operand *a, const ts__gemm_operand *b);
/* TS_ERR_INVALID_ARGUMENT unless every f32 scale of the 2-D view is a positive power of two. */
ts_status ts__gemm_check_pow2_scales(const ts_tensor *sf, const char *name);
/* Whether the byte ranges spanned by two views intersect (empty views never do). */
bool ts__gemm_views_overlap(const ts_tensor *x, const ts_tensor *y);

/* One validated NT sub-problem: D[m, n] (= C +) A[m, k] . B[n, k]ᵀ. d and c point at element
 * (0, 0), rows ld_d / ld_c elements apart, columns contiguous; c NULL: no C (c == d is fine). */
typedef struct ts__gemm_problem {
    ts__gemm_operand a, b;
    int64_t m, n, k;
    void *d;
    int64_t ld_d;
    const void *c;
    int64_t ld_c;
    int64_t item0; /* set by ts__gemm_run_batch */
    int64_t aoff, saoff; /* decode path: offsets of this problem's f32 A and A scales */
} ts__gemm_problem;

/* Runs the problems as one parallel pass (work items over problems x M blocks x N blocks, a
 * static partition). All share n, the output dtype (bf16 or f32), scaled (fp8/fp4 block
 * scales, canonical block g) or not (bf16); m and k may differ. k == 0 writes D = C (bits)
 * or zeros. Every element follows the canonical order, so a problem's rows have the same bits
 * as the dense call on that problem alone. Runs on the calling thread's pool; the problems'
 * outputs must not overlap. */
/* Problems with at most this many rows take the decode path (gemm_decode.c). 48, not 16: on
 * FP8 / FP8xFP4 weights the decode kernels (B decoded in registers once per group of up to 6
 * rows) measured 68-85% of the FMA peak at M = 24..48 against 60-72% for the big-M path,
 * whose B micro-panels go through memory as f32 (MoE groups of ~32 tokens). */
#define TS__GEMM_SMALL_M 48
/* The decode path for a batch whose problems all have 1..TS__GEMM_SMALL_M rows and K > 0
 * (called by ts__gemm_run_batch; same contract). */
ts_status ts__gemm_run_decode(ts__gemm_problem *probs, int64_t nprob, int64_t n,
                              ts_dtype d_dtype, bool scaled, int64_t g);
/* Makes every thread that ts__parallel_for(items, grain, ...) will use hold `bytes` of task
 * scratch, so that an allocation failure is reported before any output is written. */
ts_status ts__gemm_reserve_scratch(int64_t items, int64_t grain, size_t bytes);

ts_status ts__gemm_run_batch(ts__gemm_problem *probs, int64_t nprob, int64_t n, ts_dtype d_dtype,
                             bool scaled, int64_t g);

/* Decode tables (src/gemm/gemm_lut.c): call ts__gemm_lut_init() once before reading. e2m1
 * code 8 (-0) reads as +0, as upstream's dequantisation. */
typedef struct ts__gemm_lut_t { float e4m3[256], e2m1[16], ue8m0[256]; } ts__gemm_lut_t;
extern ts__gemm_lut_t ts__gemm_lut;
void ts__gemm_lut_init(void);


/* ts__f32_to_bf16_inl (numerics/bf16_inline.h) of n values without branches, so that gcc vectorises it (the epilogues
 * pass n as a constant: 16 for a dense tile row, 32 for a decode panel row). */
static inline void ts__gemm_store_bf16_row(uint16_t *dst, const float *src, int n) {
    for (int q = 0; q < n; q++) {
        uint32_t u;
        memcpy(&u, &src[q], 4);
        const int32_t mag = (int32_t)(u & 0x7FFFFFFFu);
        const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        const uint32_t qnan = ((u >> 16) & 0x8000u) | 0x7FC0u;
        dst[q] = (uint16_t)(mag > 0x7F800000 ? qnan : rne);
    }
}

#endif
