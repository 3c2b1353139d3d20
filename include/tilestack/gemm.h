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
