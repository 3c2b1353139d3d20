/* tilestack GEMM: DeepGEMM's dense FP8/FP4/BF16 GEMMs on CPU (deep_gemm.fp8_fp4_gemm_*,
 * bf16_gemm_*), with upstream's names, argument order and defaults.
 *
 * D = C + A·Bᵀ, with A [M, K] and B [N, K] as logical (NT) views. The nn/tn/tt variants are
 * the NT call on transposed views, as upstream: nn takes b [K, N] (and sfb transposed with it),
 * tn takes a [K, M], tt both. On a CPU both majors work for every dtype: an operand view may
 * be K-major (stride[-1] == 1) or MN-major (stride[-2] == 1).
 *
 * Operands: e4m3 (TS_E4M3) or packed fp4 (TS_E2M1X2, two values per byte, element 2i in the
 * low nibble). A packed operand counts bytes along its contiguous (packed) dim, as torch:
 * K-major fp4 [MN, K/2], MN-major fp4 (a transposed view of [K, MN/2]) has logical MN =
 * 2 * shape[0]. Results are bit-identical whatever the thread count, the ISA path, the layout
 * variant and the number of rows M (docs/gemm.md gives the canonical summation order).
 *
 * Errors: a specific ts_status and a message naming the argument; outputs untouched. */
#ifndef TILESTACK_GEMM_H
#define TILESTACK_GEMM_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scale granularities per operand, resolved from upstream's optional tuples. */
typedef struct ts_gemm_recipe {
    int64_t gran_mn_a, gran_k_a; /* A: one scale per gran_mn_a rows x gran_k_a K values */
    int64_t gran_mn_b, gran_k_b; /* B: one scale per gran_mn_b rows x gran_k_b K values */
} ts_gemm_recipe;

/* Upstream's rule: `recipe` = (gran_m of A, gran_n of B, gran_k) [3], or the pair
 * `recipe_a` = (gran_mn, gran_k) [2] and `recipe_b` [2]; NULL means "not given". Exactly one
 * form, or none: then (1, 128, 128) when sfb is f32 and (1, 1, 128) when sfb is packed ue8m0
 * (TS_I32 / TS_UE8M0X4), as get_default_recipe on SM100. Accepted values: gran_mn in {1, 128},
 * gran_k in {32, 128}; anything else, both forms, or only one of recipe_a / recipe_b:
 * TS_ERR_INVALID_ARGUMENT. */
TS_API ts_status ts_gemm_resolve_recipe(const int64_t *recipe, const int64_t *recipe_a,
                                        const int64_t *recipe_b, ts_dtype sfb_dtype,
                                        ts_gemm_recipe *out);

/* FP8 / FP4 GEMM. a = (A, sfa), b = (B, sfb) as upstream's pairs; d [M, N] bf16 or f32 with a
 * contiguous last dim; c NULL or [M, N] of d's dtype (c may be d itself: same data and strides).
 * Scales, per operand X [MN, K] with granularity (g_mn, g_k):
 *   f32      [ceil(MN/g_mn), ceil(K/g_k)], any strides (e.g. MN-major TMA-aligned), any value;
 *   packed   TS_I32 or TS_UE8M0X4 [ceil(MN/g_mn), ceil(K/(4*g_k))], four ue8m0 bytes per word
 *            (byte j = K block 4w+j), any strides (upstream's MN-major TMA-aligned layout or the
 *            plain K-major one); needs g_mn == 1 as upstream. Byte e means 2^(e-127).
 * The recipe routes that upstream runs only on SM100 (an fp4 operand, or gran_k 32) cast f32
 * scales to ue8m0 there, so these need exact powers of two (TS_ERR_INVALID_ARGUMENT otherwise)
 * unless disable_ue8m0_cast, which on a CPU means "use the f32 scales as given".
 * compiled_dims is accepted and ignored (a JIT hint upstream); NULL is fine.
 * Empty problems as upstream: M == 0 or N == 0 does nothing; K == 0 sets D = C (or 0). */
TS_API ts_status ts_fp8_fp4_gemm_nt(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                    const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                    const int64_t *recipe, const int64_t *recipe_a,
                                    const int64_t *recipe_b, const char *compiled_dims,
                                    bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_fp4_gemm_nn(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                    const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                    const int64_t *recipe, const int64_t *recipe_a,
                                    const int64_t *recipe_b, const char *compiled_dims,
                                    bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_fp4_gemm_tn(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                    const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                    const int64_t *recipe, const int64_t *recipe_a,
                                    const int64_t *recipe_b, const char *compiled_dims,
                                    bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_fp4_gemm_tt(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                    const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                    const int64_t *recipe, const int64_t *recipe_a,
                                    const int64_t *recipe_b, const char *compiled_dims,
                                    bool disable_ue8m0_cast);

/* Upstream's alias names (same functions). */
TS_API ts_status ts_fp8_gemm_nt(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                const int64_t *recipe, const int64_t *recipe_a,
                                const int64_t *recipe_b, const char *compiled_dims,
                                bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_gemm_nn(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                const int64_t *recipe, const int64_t *recipe_a,
                                const int64_t *recipe_b, const char *compiled_dims,
                                bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_gemm_tn(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                const int64_t *recipe, const int64_t *recipe_a,
                                const int64_t *recipe_b, const char *compiled_dims,
                                bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_gemm_tt(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                                const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                                const int64_t *recipe, const int64_t *recipe_a,
                                const int64_t *recipe_b, const char *compiled_dims,
                                bool disable_ue8m0_cast);

/* BF16 GEMM: A, B bf16 (either major), d bf16 or f32, c optional (may be d), f32 accumulation. */
TS_API ts_status ts_bf16_gemm_nt(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                 const ts_tensor *c, const char *compiled_dims);
TS_API ts_status ts_bf16_gemm_nn(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                 const ts_tensor *c, const char *compiled_dims);
TS_API ts_status ts_bf16_gemm_tn(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                 const ts_tensor *c, const char *compiled_dims);
TS_API ts_status ts_bf16_gemm_tt(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                 const ts_tensor *c, const char *compiled_dims);

/* ---- Grouped GEMMs (MoE). Each group is the dense NT GEMM of its rows against its weight,
 * in the same canonical order: a grouped result row has the bits of the dense call on that
 * row alone. Layout encodings, skipped rows and validation: docs/gemm.md ("Grouped GEMMs").
 * Grouped layouts and masks are TS_I32 tensors in host memory. Everything is validated before
 * anything is written. */

/* Row (M-grouped) / K (K-grouped) alignment of the contiguous layouts: every group segment
 * starts on a multiple of it. Default 128; the setter takes 1..65536 (TS_ERR_INVALID_ARGUMENT
 * otherwise). Process-wide, as upstream's runtime setting. */
TS_API int ts_get_mk_alignment_for_contiguous_layout(void);
TS_API ts_status ts_set_mk_alignment_for_contiguous_layout(int alignment);
/* Upstream returns 128 except on SM100 (a BLOCK_M search); a CPU has no BLOCK_M, so 128
 * whatever expected_m (<= 0 means "not given"). */
TS_API int ts_get_theoretical_mk_alignment_for_contiguous_layout(int64_t expected_m);

/* M-grouped contiguous: a [M_sum, K] (K-major), sfa [M_sum, ...] with gran_mn 1; b [G, N, K]
 * (nn: the [G, K, N] view), sfb [G, ...] (nn: transposed with b); d [M_sum, N] bf16 or f32.
 * grouped_layout: m_indices [M_sum] (group of each row, -1 = padding; per alignment block the
 * first row decides: a -1 block is skipped and not written, a group block is computed whole
 * with that group's weight, -1 tail rows included, as upstream's BLOCK_M = alignment tiles),
 * or with use_psum_layout the cumulative ends [G] (group g = rows [align(end[g-1]), end[g])),
 * where ensure_zero_padding writes exact zeros to the gap rows [end[g], align(end[g])).
 * expected_m_for_psum_layout is a hint (ignored). */
TS_API ts_status ts_m_grouped_fp8_fp4_gemm_nt_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding, int64_t expected_m_for_psum_layout);
TS_API ts_status ts_m_grouped_fp8_fp4_gemm_nn_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding);
TS_API ts_status ts_m_grouped_fp8_gemm_nt_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding, int64_t expected_m_for_psum_layout);
TS_API ts_status ts_m_grouped_fp8_gemm_nn_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding);
TS_API ts_status ts_m_grouped_bf16_gemm_nt_contiguous(
    const ts_tensor *a, const ts_tensor *b, ts_tensor *d, const ts_tensor *grouped_layout,
    const char *compiled_dims, bool use_psum_layout, bool ensure_zero_padding,
    int64_t expected_m_for_psum_layout);
TS_API ts_status ts_m_grouped_bf16_gemm_nn_contiguous(
    const ts_tensor *a, const ts_tensor *b, ts_tensor *d, const ts_tensor *grouped_layout,
    const char *compiled_dims, bool use_psum_layout, bool ensure_zero_padding,
    int64_t expected_m_for_psum_layout);

/* M-grouped masked: a [G, M_max, K], sfa [G, ...], b [G, N, K], sfb [G, ...], d [G, M_max, N]
 * bf16 or f32; masked_m [G] in [0, M_max]: rows at or past masked_m[g] are never written.
 * expected_m is a hint and must be > 0, as upstream. */
TS_API ts_status ts_m_grouped_fp8_fp4_gemm_nt_masked(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,
    const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,
    bool disable_ue8m0_cast);
TS_API ts_status ts_m_grouped_fp8_gemm_nt_masked(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,
    const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,
    bool disable_ue8m0_cast);
TS_API ts_status ts_fp8_m_grouped_gemm_nt_masked( /* legacy name */
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,
    const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,
    bool disable_ue8m0_cast);
TS_API ts_status ts_m_grouped_bf16_gemm_nt_masked(const ts_tensor *a, const ts_tensor *b,
                                                  ts_tensor *d, const ts_tensor *masked_m,
                                                  int64_t expected_m, const char *compiled_dims);
TS_API ts_status ts_bf16_m_grouped_gemm_nt_masked(const ts_tensor *a, const ts_tensor *b,
                                                  ts_tensor *d, const ts_tensor *masked_m,
                                                  int64_t expected_m, const char *compiled_dims);

/* K-grouped (MoE weight gradient): D[g] = C[g] + A_gᵀ·B_g over group g's K slice; d [G, M, N]
 * f32 (or bf16), c NULL or of d's shape and dtype (may be d). Group K sizes: ks_cpu[num_ks]
 * (num_ks == G; groups consecutive; grouped_layout NULL or equal to ks), or with
 * use_psum_layout grouped_layout [G] of cumulative ends (group g = [align(end[g-1]), end[g]),
 * ks_cpu ignored). k = 0 groups give D[g] = C[g] (bits) or zeros.
 * tn: a [sum K, M], b [sum K, N] (either major); sfa [sum_g S_g, M], sfb [sum_g S_g, N] f32
 *     with S_g = ceil(k_g / gran_k) (psum: ceil(align(k_g) / gran_k)), or packed ue8m0
 *     [sum_g ceil(S_g / 4), MN]; recipe (1, 1, 32 | 128), NULL = (1, 1, 128); f32 scales must
 *     be powers of two (upstream runs tn on SM100 only).
 * nt: a, b 1-D, group g stored K-major [M, k_g] (resp. [N, k_g]) one after another; sfa
 *     [M, sum_g S_g], sfb [N, sum_g S_g] f32 (any values); recipe (1, 1, 128); no psum. */
TS_API ts_status ts_k_grouped_fp8_gemm_tn_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const int64_t *ks_cpu, int64_t num_ks, const ts_tensor *grouped_layout,
    const ts_tensor *c, const int64_t *recipe, const char *compiled_dims, bool use_psum_layout);
TS_API ts_status ts_k_grouped_fp8_gemm_nt_contiguous(
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,
    ts_tensor *d, const int64_t *ks_cpu, int64_t num_ks, const ts_tensor *grouped_layout,
    const ts_tensor *c, const int64_t *recipe, const char *compiled_dims, bool use_psum_layout);
TS_API ts_status ts_k_grouped_bf16_gemm_tn_contiguous(
    const ts_tensor *a, const ts_tensor *b, ts_tensor *d, const int64_t *ks_cpu, int64_t num_ks,
    const ts_tensor *grouped_layout, const ts_tensor *c, const char *compiled_dims,
    bool use_psum_layout);

/* ---- CPU extension: weight pre-packing (docs/gemm.md, "Pre-packed weights").
 * ts_gemm_prepack_b converts a weight once into an opaque layout that the decode path (small
 * M) streams sequentially: 32-column panels, each a run of K blocks holding the block's
 * low-precision values (kept as e4m3 / e2m1 / bf16 bytes, 32 columns per K value) followed by
 * the block's 32 column scales. The *_packed entry points take it in place of (b, sfb);
 * their results are bit-identical to the unpacked call with the same recipe.
 *   b       [N, K] (dense) or [G, N, K] (grouped), e4m3, e2m1x2 or bf16, either major;
 *           kn: b is given as [K, N] ([G, K, N]) with sfb transposed alongside, as the nn
 *           variants take it.
 *   sfb     the scales the unpacked call would take (2-D, or 3-D [G, ...]); NULL for bf16.
 *   recipe_b (gran_mn, gran_k) of B; NULL = the default the GEMMs pick for this sfb dtype:
 *           (128, 128) for f32, (1, 128) for packed ue8m0. A later call whose recipe resolves
 *           to another B granularity is TS_ERR_INVALID_ARGUMENT.
 * Packed ue8m0 scales stay one byte per scale; f32 scales stay f32. The packed weight is
 * read-only and may be shared by concurrent calls. */
typedef struct ts_packed_weight ts_packed_weight;
TS_API ts_status ts_gemm_prepack_b(const ts_tensor *b, const ts_tensor *sfb,
                                   const int64_t *recipe_b, bool kn, ts_packed_weight **out);
TS_API void ts_packed_weight_destroy(ts_packed_weight *pw);
/* Bytes the packed weight holds (values + scales + panel padding); 0 for NULL. */
TS_API size_t ts_packed_weight_nbytes(const ts_packed_weight *pw);

/* Dense GEMMs on a packed [N, K] weight: D = C + A·Bᵀ. a is a [M, K] view in either major
 * (a tn / tt call passes the transposed view of its [K, M] argument); other arguments as
 * ts_fp8_fp4_gemm_nt / ts_bf16_gemm_nt. */
TS_API ts_status ts_fp8_fp4_gemm_nt_packed(const ts_tensor *a, const ts_tensor *sfa,
                                           const ts_packed_weight *b, ts_tensor *d,
                                           const ts_tensor *c, const int64_t *recipe,
                                           const int64_t *recipe_a, const int64_t *recipe_b,
                                           const char *compiled_dims, bool disable_ue8m0_cast);
TS_API ts_status ts_bf16_gemm_nt_packed(const ts_tensor *a, const ts_packed_weight *b,
                                        ts_tensor *d, const ts_tensor *c,
                                        const char *compiled_dims);
/* M-grouped GEMMs on a packed [G, N, K] weight (the nt and nn layouts both pack to it). */
TS_API ts_status ts_m_grouped_fp8_fp4_gemm_contiguous_packed(
    const ts_tensor *a, const ts_tensor *sfa, const ts_packed_weight *b, ts_tensor *d,
    const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding);
TS_API ts_status ts_m_grouped_bf16_gemm_contiguous_packed(
    const ts_tensor *a, const ts_packed_weight *b, ts_tensor *d, const ts_tensor *grouped_layout,
    const char *compiled_dims, bool use_psum_layout, bool ensure_zero_padding);
TS_API ts_status ts_m_grouped_fp8_fp4_gemm_masked_packed(
    const ts_tensor *a, const ts_tensor *sfa, const ts_packed_weight *b, ts_tensor *d,
    const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,
    const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,
    bool disable_ue8m0_cast);
TS_API ts_status ts_m_grouped_bf16_gemm_masked_packed(const ts_tensor *a,
                                                      const ts_packed_weight *b, ts_tensor *d,
                                                      const ts_tensor *masked_m,
                                                      int64_t expected_m,
                                                      const char *compiled_dims);

/* ---- Special GEMMs (docs/gemm.md, "Skip-head-mid, HC prenorm, einsum") ---- */

/* FP8 NT GEMM into a wider D (upstream attention.hpp): head_splits = (left, mid, right)
 * [3]; N must be a multiple of left + right, num_heads = N / (left + right), d is
 * [M, N + num_heads * mid] bf16 or f32 (no c). Compact column n goes to column
 * n + (n + right) / (left + right) * mid: per head the left columns, a gap of mid columns
 * that is never written, then the right columns; each written element has the bits of
 * ts_fp8_gemm_nt at column n. a, b e4m3 (either major); recipe as ts_fp8_fp4_gemm_nt (3-tuple
 * or NULL) with gran_k 128 for both operands. left, right > 0, mid >= 0. M == 0 does
 * nothing; N == 0 or K == 0 is TS_ERR_SHAPE, as upstream. */
TS_API ts_status ts_fp8_gemm_nt_skip_head_mid(const ts_tensor *a, const ts_tensor *sfa,
                                              const ts_tensor *b, const ts_tensor *sfb,
                                              ts_tensor *d, const int64_t *head_splits,
                                              const int64_t *recipe, const char *compiled_dims,
                                              bool disable_ue8m0_cast);

/* mHC pre-norm GEMM (upstream hyperconnection.hpp): a bf16 [M, K] K-major, b f32 [N, K]
 * K-major; D = A·tf32(B)ᵀ f32 and sqr_sum[m] = Σ_k A[m, k]² f32. tf32 truncates B's mantissa
 * to 10 bits (what the tensor cores read from raw f32). num_splits = 0 (None): d [M, N],
 * sqr_sum [M]; S >= 1: d [S, M, N], sqr_sum [S, M] hold split-K partials (the caller sums
 * them): K is cut into 64-value blocks, split s takes blocks [s*q + min(s, r), +q + (s < r))
 * with q = nkb / S, r = nkb % S; a split with no block writes zeros. sqr_sum contiguous.
 * N, K > 0 (TS_ERR_SHAPE otherwise); M == 0 does nothing. Order per element: docs/gemm.md. */
TS_API ts_status ts_tf32_hc_prenorm_gemm(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                         ts_tensor *sqr_sum, int64_t num_splits);

/* Upstream's hard-coded einsum expressions (einsum.hpp); anything else is
 * TS_ERR_UNSUPPORTED naming the expression. Operands are stride views (either major where
 * the permuted view allows).
 * ts_einsum (a, b bf16):
 *   "bmk,bnk->mn"   d [M, N]: f32 with c = d (accumulate), or bf16 without c;
 *   "bhr,hdr->bhd"  a [B, H, R], b [H, D, R], d [B, H, D] bf16, no c;
 *   "bhd,hdr->bhr"  a [B, H, D], b [H, D, R], d [B, H, R] bf16, no c;
 *   "bhd,bhr->hdr"  a [B, H, D], b [B, H, R], d [H, D, R] f32, c optional (may be d).
 * use_cublaslt is accepted and ignored.
 * ts_fp8_einsum (a, b e4m3 with scales permuted like their data; recipe [3], NULL =
 * (1, 128, 128)): "bhr,hdr->bhd", "bhd,hdr->bhr", "bhd,bhr->hdr"; d bf16 or f32, c optional
 * (of d's shape and dtype, may be d). E.g. bhr,hdr->bhd takes sfa [B, H, ceil(R/g_k)] and sfb
 * [H, ceil(D/g_n), ceil(R/g_k)]; bhd,bhr->hdr (recipe (1, 1, 128)) sfa [ceil(B/128), H, D]. */
TS_API ts_status ts_einsum(const char *expr, const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                           const ts_tensor *c, bool use_cublaslt);
TS_API ts_status ts_fp8_einsum(const char *expr, const ts_tensor *a, const ts_tensor *sfa,
                               const ts_tensor *b, const ts_tensor *sfb, ts_tensor *d,
                               const ts_tensor *c, const int64_t *recipe);

/* Runtime configuration. num_sms is the thread count on a CPU: ts_set_num_sms(n) is
 * ts_set_num_threads(n), with 0 meaning "all logical CPUs" as upstream's default. */
TS_API ts_status ts_set_num_sms(int n);
TS_API int ts_get_num_sms(void);
/* GPU tuning knobs: stored and read back so ported code runs; they change nothing here.
 * tc_util in [0, 100] (0 reads back as 100); block size multiples >= 1. */
TS_API ts_status ts_set_tc_util(int pct);
TS_API int ts_get_tc_util(void);
TS_API ts_status ts_set_pdl(bool enable);
TS_API bool ts_get_pdl(void);
TS_API ts_status ts_set_ignore_compile_dims(bool ignore);
TS_API ts_status ts_set_block_size_multiple_of(int m_multiple, int n_multiple);

#ifdef __cplusplus
}
#endif
#endif
