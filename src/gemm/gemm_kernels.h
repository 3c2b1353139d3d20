/* GEMM micro-kernels, one table per ISA (internal).
 *
 * Panels are f32, converted from the operands while packing (gemm_pack.c):
 *   A micro-panel: ap[k * MR + i], rows i < MR (rows past M are zero);
 *   B micro-panel: bp[k * NR + j], cols j < NR (cols past N are zero);
 *   acc: one MR x NR tile, row-major with ld NR, 64-byte aligned, f32.
 * Every kernel follows the canonical order of docs/gemm.md and vectorises across rows and
 * columns only, never along K, so all ISA versions give the same bits. */
#ifndef TS_GEMM_KERNELS_H
#define TS_GEMM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS__GEMM_MR 6
#define TS__GEMM_NR 16

/* The driver walks accumulator tiles in memory order, and an item's accumulator is larger
 * than L2: a micro-kernel fetches the next tile (prefetcht0, 6 lines) while its FMAs run, so
 * the next call's loads do not stall. (A prefetch past the last tile never faults.) */
static inline void ts__gemm_prefetch_next_tile(const float *acc) {
    for (int q = 0; q < TS__GEMM_MR * TS__GEMM_NR; q += 16)
        __builtin_prefetch(acc + TS__GEMM_MR * TS__GEMM_NR + q, 0, 3);
}

/* Block-scaled: for each K block of g values (the last one may be shorter) of the kc values:
 * p = 0; p = fmaf(a_k, b_k, p) over the block; acc = fmaf(p, sa[blk][i] * sb[blk][j], acc).
 * sa is [ceil(kc/g)][MR], sb [ceil(kc/g)][NR]. */
typedef void (*ts__gemm_ukr_scaled_fn)(int64_t kc, int64_t g, const float *ap, const float *bp,
                                       const float *sa, const float *sb, float *acc);
/* Plain: acc = fmaf(a_k, b_k, acc) for k ascending over kc values. */
typedef void (*ts__gemm_ukr_plain_fn)(int64_t kc, const float *ap, const float *bp, float *acc);
/* The same for two horizontally adjacent tiles sharing the A micro-panel: B micro-panels bp0
 * / bp1, their scales sb0 / sb1 and accumulators acc0 / acc1 (ISAs whose vectors hold a whole
 * 16-column tile row; NULL elsewhere). */
typedef void (*ts__gemm_ukr_scaled2_fn)(int64_t kc, int64_t g, const float *ap, const float *bp0,
                                        const float *bp1, const float *sa, const float *sb0,
                                        const float *sb1, float *acc0, float *acc1);
typedef void (*ts__gemm_ukr_plain2_fn)(int64_t kc, const float *ap, const float *bp0,
                                       const float *bp1, float *acc0, float *acc1);
/* 2 x 2 tiles: row tiles i (A micro-panel a[i], scales sa[i]) by column tiles j (b[j], sb[j]),
 * accumulators c[i][j]. */
typedef struct ts__gemm_tiles22 {
    const float *a[2], *sa[2], *b[2], *sb[2];
    float *c[2][2];
} ts__gemm_tiles22;
typedef void (*ts__gemm_ukr_scaled22_fn)(int64_t kc, int64_t g, const ts__gemm_tiles22 *t);
typedef void (*ts__gemm_ukr_plain22_fn)(int64_t kc, const ts__gemm_tiles22 *t);
/* 1 x 4 tiles: one row tile (A micro-panel a, scales sa) by four adjacent column tiles q
 * (b[q], sb[q]), accumulators c[q]. */
typedef struct ts__gemm_tiles14 {
    const float *a, *sa, *b[4], *sb[4];
    float *c[4];
} ts__gemm_tiles14;
typedef void (*ts__gemm_ukr_scaled4_fn)(int64_t kc, int64_t g, const ts__gemm_tiles14 *t);
typedef void (*ts__gemm_ukr_plain4_fn)(int64_t kc, const ts__gemm_tiles14 *t);

/* Decode (small-M) kernel: one panel of TS__GEMM_DW = 32 output columns, rows i < m (m <= TS__GEMM_SMALL_M),
 * over `len` K values.
 *   fmt TS_E4M3 / TS_E2M1X2 / TS_BF16: B rows in the packed-weight layout (gemm_internal.h),
 *   row_bytes apart; TS_F32: f32 rows of 32 values (row_bytes = 128).
 *   blk_bytes > 0 (a packed weight's whole panel): K row k lies in block k / blk_rows, at
 *   bp + (k / blk_rows) * blk_bytes + (k % blk_rows) * row_bytes, and the 32 scales of the
 *   block holding K value k at bp + (k / blk_rows) * blk_bytes + sb_off (sb, sb_step unused);
 *   blk_rows is a multiple of g. blk_bytes == 0: rows k * row_bytes from bp.
 *   a: f32 A values, a[k * m + i] (e4m3 / e2m1 values when B is).
 *   Scaled (sa != NULL): sub-blocks of g values from k = 0 (the last may be short); for
 *   sub-block s: p = 0; p = fmaf(a, b, p) over its K values; then
 *   acc[i * 32 + j] = fmaf(p, sa[s * m + i] * sb_s[j], acc), sb_s = the 32 scales at
 *   sb + s * sb_step (f32, or ue8m0 bytes when sb_u8).
 *   Plain (sa == NULL): acc = fmaf(a, b, acc) for k ascending.
 * Every lane is one output column's scalar fmaf chain, so all ISA versions give the same bits
 * as the 6x16 kernels. */
#define TS__GEMM_DW 32
typedef struct ts__gemm_dec_args {
    int fmt; /* ts_dtype */
    bool nan_free; /* TS_E4M3: no NaN code in the B rows */
    bool sf_normal; /* sb_u8: no scale byte is 0 or 255 (plain 2^(e-127) by a shift) */
    int64_t len, g, m;
    const void *bp;
    int64_t row_bytes;
    int64_t blk_rows, blk_bytes, sb_off;
    const float *a, *sa;
    const void *sb;
    bool sb_u8;
    int64_t sb_step; /* scales (elements) between sub-blocks; 0: one set for all */
    float *acc;
} ts__gemm_dec_args;
typedef void (*ts__gemm_dec_fn)(const ts__gemm_dec_args *x);

/* Layout helpers of the SIMD decode kernels (packed panel or plain rows, as above). */
/* Sub-block s of a packed panel lies in block s >> sh (sh = log2(blk_rows / g): blk_rows and
 * g are 32 or 128), so the addresses take no division. */
static inline int ts__dec_sub_shift(const ts__gemm_dec_args *x) {
    return x->blk_bytes ? __builtin_ctzll((unsigned long long)x->blk_rows) -
                              __builtin_ctzll((unsigned long long)x->g)
                        : 0;
}

/* The 32 scales of sub-block s. */
static inline const uint8_t *ts__dec_sb_ptr(const ts__gemm_dec_args *x, int sh, int64_t s) {
    if (x->blk_bytes) return (const uint8_t *)x->bp + (s >> sh) * x->blk_bytes + x->sb_off;
    return (const uint8_t *)x->sb + (size_t)(s * x->sb_step) * (x->sb_u8 ? 1 : 4);
}

/* First row of sub-block s (its rows follow row_bytes apart). */
static inline const uint8_t *ts__dec_sub_rows(const ts__gemm_dec_args *x, int sh, int64_t s) {
    if (x->blk_bytes)
        return (const uint8_t *)x->bp + (s >> sh) * x->blk_bytes +
               (s & ((1 << sh) - 1)) * x->g * x->row_bytes;
    return (const uint8_t *)x->bp + s * x->g * x->row_bytes;
}


typedef struct ts__gemm_kernels {
    const char *name;
    ts__gemm_ukr_scaled_fn scaled; /* MR x NR */
    ts__gemm_ukr_plain_fn plain;   /* MR x NR */
    ts__gemm_dec_fn decode;        /* 32-column panel, m <= 16 */
    ts__gemm_ukr_scaled2_fn scaled2; /* MR x 2 NR, or NULL */
    ts__gemm_ukr_plain2_fn plain2;   /* MR x 2 NR, or NULL */
    ts__gemm_ukr_scaled22_fn scaled22; /* 2 MR x 2 NR, or NULL */
    ts__gemm_ukr_plain22_fn plain22;   /* 2 MR x 2 NR, or NULL */
    ts__gemm_ukr_scaled4_fn scaled4;   /* MR x 4 NR, or NULL */
    ts__gemm_ukr_plain4_fn plain4;     /* MR x 4 NR, or NULL */
    int kc; /* K values per packing step (0: the driver's 256); a multiple of 128 */
} ts__gemm_kernels;

extern const ts__gemm_kernels ts__gemm_kernels_generic;
#if defined(TS_HAVE_AVX2_KERNELS)
extern const ts__gemm_kernels ts__gemm_kernels_avx2;
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
extern const ts__gemm_kernels ts__gemm_kernels_avx512;
#endif

#if defined(TS_HAVE_AVX2_KERNELS)
struct ts__gemm_operand;
/* ts__gemm_pack_panel for a full panel (rows == w) of a K-major operand with unit K stride
 * and w in {MR, NR, TS__GEMM_DW}: same floats, decoded and transposed with AVX2. Returns false (nothing
 * written) for any other case. */
/* Plain e4m3 weight (K-major, unit K stride), rows r0 .. r0 + 31, K values k0 .. k0 + kc - 1
 * -> dst[k * 32 + i] = code (row r0 + i, k0 + k), column order (the decode driver streams it
 * as packed rows, reading the columns in slot order); *nan_free: no NaN code (magnitude
 * 0x7F) among them. False (nothing written) for other operands. */
bool ts__gemm_pack_e4m3_bytes__avx2(const struct ts__gemm_operand *op, int64_t r0, int64_t k0,
                                    int64_t kc, uint8_t *dst, bool *nan_free);
bool ts__gemm_pack_kmajor__avx2(const struct ts__gemm_operand *op, int64_t r0, int64_t k0,
                                int64_t kc, int w, float *dst);
/* n packed-weight rows (row_bytes apart, fmt e4m3 / e2m1x2 / bf16) -> the f32 values of
 * columns 16 half .. 16 half + 15 of each, dst[k * ld + c]: the same floats as the scalar
 * unpacker (the big-M path's B micro-panels). gemm_decode_avx2.c. */
/* The AVX2 decode kernel (gemm_decode_avx2.c), and the AVX-512 one (FP4 at M = 1; the AVX2
 * kernel for the rest). */
void ts__gemm_decode_32__avx2(const ts__gemm_dec_args *x);
#if defined(TS_HAVE_AVX512_KERNELS)
void ts__gemm_decode_32__avx512(const ts__gemm_dec_args *x);
/* ts__gemm_pack_kmajor__avx2 for full 16-row panels (w == TS__GEMM_NR) whose K range is a
 * whole number of steps (e4m3 64, bf16 32, e2m1 128 values): gemm_pack_avx512.c. */
bool ts__gemm_pack_kmajor__avx512(const struct ts__gemm_operand *op, int64_t r0, int64_t k0,
                                  int64_t kc, int w, float *dst);
/* The same panels (e4m3 / e2m1 only) as bf16 pairs (the vdpbf16ps layout below). */
bool ts__gemm_pack_kmajor_pairs__avx512(const struct ts__gemm_operand *op, int64_t r0,
                                        int64_t k0, int64_t kc, int w, uint32_t *dst);
#endif
void ts__gemm_pw_rows_f32__avx2(const uint8_t *row, int64_t row_bytes, int fmt, bool nan_free,
                                int64_t n, int half, float *dst, int64_t ld);
#endif

/* The table for the ISA in use (read once per call by the driver). */
const ts__gemm_kernels *ts__gemm_select_kernels(void);

/* ---- vdpbf16ps kernels for the block-scaled (FP8 / FP4) GEMMs (AVX512_BF16) ----
 * Panels of bf16 K pairs, one dword per (pair, row): the high half holds K value 2q, the low
 * half 2q + 1 (swapped against memory order, because vdpbf16ps adds the high product first),
 * both exact (e4m3 and e2m1 values are bf16 values); a missing 2q + 1 (odd K) is 0.
 *   A micro-panel: ap[q * MR + i]; B micro-panel: bp[q * NR + j]; q < ceil(kc / 2).
 * Per lane, vdpbf16ps computes acc = fmaf(a_lo, b_lo, fmaf(a_hi, b_hi, acc)) (verified on
 * Zen 4, docs/gemm.md), i.e. two steps of the canonical block chain in K order; the
 * promotion acc = fmaf(p, sa * sb, acc) stays an f32 FMA, per block, as every other path.
 * 1, 2 or 4 adjacent column tiles q (b[q], sb[q], accumulators c[q]) of one row tile. */
typedef struct ts__gemm_dp_tiles {
    const uint32_t *a;
    const float *sa;
    const uint32_t *b[4];
    const float *sb[4];
    float *c[4];
} ts__gemm_dp_tiles;
typedef void (*ts__gemm_dp_fn)(int64_t kc, int64_t g, const ts__gemm_dp_tiles *t);
typedef struct ts__gemm_dp_kernels {
    const char *name;
    ts__gemm_dp_fn tiles1, tiles2, tiles4; /* MR x NR, MR x 2 NR, MR x 4 NR */
    int kc; /* K values per packing step, a multiple of 128 (at most the driver's KC) */
} ts__gemm_dp_kernels;
#if defined(TS_HAVE_AVX512BF16_KERNELS)
extern const ts__gemm_dp_kernels ts__gemm_dp_kernels_avx512bf16;
/* One vdpbf16ps: acc[j] += a[2j+1] b[2j+1] + a[2j] b[2j] (bf16 bits), as the hardware does it;
 * for the tests that check the instruction's rounding on this CPU. */
void ts__gemm_dpbf16_probe(const uint16_t a[32], const uint16_t b[32], float acc[16]);
#endif
/* The vdpbf16ps table when the avx512 path is in use, the CPU has AVX512_BF16 and the switch
 * allows it; NULL otherwise (the f32 kernels of ts__gemm_select_kernels run). */
const ts__gemm_dp_kernels *ts__gemm_select_dp_kernels(void);
/* The switch: 1 use the vdpbf16ps kernels where they can run, 0 never, -1 (the default) the
 * environment's TS_GEMM_DPBF16: "0" never, "1" where they can run, unset or anything else
 * where they can run on an AMD / Hygon CPU (faster than the f32 kernels there, slower on the
 * Intel measured). */
void ts__gemm_set_dpbf16(int mode);

/* Bf16-pair micro-panel (layout above) of values (r0 + i, k0 + k), i < rows (zeros up to w),
 * k < kc; tmp: kc * w floats of scratch (the f32 panel on the way, where no direct SIMD
 * packer applies). gemm_pack.c. */
struct ts__gemm_operand;
void ts__gemm_pack_panel_pairs(const struct ts__gemm_operand *op, int64_t r0, int64_t rows,
                               int64_t k0, int64_t kc, int w, float *tmp, uint32_t *dst);

#endif
