/* DeepGEMM's quantisers through the tile kernels (src/kernels/deepgemm_quant.tile): the
 * public functions' argument checks (quant_args.c), then the
 * instance for the source kind, scale format and group size. Group sizes 32 / 64 / 128 have
 * instances with constant tile shapes; every other size runs the general kernels. */
#include "numerics/quant_tile.h"

#include "numerics/quant_kernels.h"
#include "tilestack/kernels.h"

typedef ts_status (*tq_k3)(const ts_tensor *, const ts_tensor *, const ts_tensor *);
typedef ts_status (*tq_k3b)(const ts_tensor *, const ts_tensor *, const ts_tensor *, bool);
typedef ts_status (*tq_k3i)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t);
typedef ts_status (*tq_k3ib)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, bool);
typedef ts_status (*tq_k3ii)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, int64_t);
typedef ts_status (*tq_k3iib)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, int64_t,
                              bool);

/* Packed scales are i32 words or ue8m0x4 to the public API; the kernels declare ue8m0x4. */
static ts_tensor as_packed(const ts_tensor *sf) {
    ts_tensor t = *sf;
    t.dtype = TS_UE8M0X4;
    return t;
}

/* ---- FP8 ---- */

/* General (bm x bk) FP8 blocks: chunks of 128 when bk is a multiple of 128, else of 32 (the
 * packed instances: 32). */
static ts_status fp8_general(ts__qsrc src, const ts_tensor *x, bool ue8m0, int64_t bm, int64_t bk,
                             bool packed, ts_tensor *q, const ts_tensor *sf) {
    if (packed) {
        static const tq_k3ii k[TS__QSRC_COUNT] = {ts_dg_fp8_gen_bf16_c32_pk, ts_dg_fp8_gen_f16_c32_pk,
                                                  ts_dg_fp8_gen_f32_c32_pk};
        const ts_tensor s = as_packed(sf);
        return k[src](x, q, &s, bm, bk);
    }
    static const tq_k3iib k128[TS__QSRC_COUNT] = {ts_dg_fp8_gen_bf16_c128, ts_dg_fp8_gen_f16_c128,
                                                  ts_dg_fp8_gen_f32_c128};
    static const tq_k3iib k32[TS__QSRC_COUNT] = {ts_dg_fp8_gen_bf16_c32, ts_dg_fp8_gen_f16_c32,
                                                 ts_dg_fp8_gen_f32_c32};
    return (bk % 128 == 0 ? k128 : k32)[src](x, q, sf, bm, bk, ue8m0);
}

ts_status ts__tq_per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_token_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m == 0 || n == 0) return TS_OK;

    /* [source][g 128, 64, 32] */
    static const tq_k3b kf[TS__QSRC_COUNT][3] = {
        {ts_dg_fp8_token_bf16_g128, ts_dg_fp8_token_bf16_g64, ts_dg_fp8_token_bf16_g32},
        {ts_dg_fp8_token_f16_g128, NULL, NULL},
        {ts_dg_fp8_token_f32_g128, NULL, NULL},
    };
    static const tq_k3 kp[TS__QSRC_COUNT][3] = {
        {ts_dg_fp8_token_bf16_g128_pk, ts_dg_fp8_token_bf16_g64_pk, ts_dg_fp8_token_bf16_g32_pk},
        {ts_dg_fp8_token_f16_g128_pk, NULL, NULL},
        {ts_dg_fp8_token_f32_g128_pk, NULL, NULL},
    };
    const int gi = gran_k == 128 ? 0 : gran_k == 64 ? 1 : gran_k == 32 ? 2 : -1;
    if (gi >= 0 && use_packed_ue8m0 && kp[src][gi]) {
        const ts_tensor s = as_packed(sf);
        return kp[src][gi](x, x_fp8, &s);
    }
    if (gi >= 0 && !use_packed_ue8m0 && kf[src][gi]) return kf[src][gi](x, x_fp8, sf, use_ue8m0);
    return fp8_general(src, x, use_ue8m0, 1, gran_k, use_packed_ue8m0, x_fp8, sf);
}

ts_status ts__tq_per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_block_fp8(x, gran_k, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m == 0 || n == 0) return TS_OK;
    /* [source][g 128, 64, 32] */
    static const tq_k3b kb[TS__QSRC_COUNT][3] = {
        {ts_dg_fp8_block_bf16_g128, ts_dg_fp8_block_bf16_g64, ts_dg_fp8_block_bf16_g32},
        {ts_dg_fp8_block_f16_g128, NULL, NULL},
        {ts_dg_fp8_block_f32_g128, NULL, NULL},
    };
    const int gi = gran_k == 128 ? 0 : gran_k == 64 ? 1 : gran_k == 32 ? 2 : -1;
    if (gi >= 0 && kb[src][gi]) return kb[src][gi](x, x_fp8, sf, use_ue8m0);
    return fp8_general(src, x, use_ue8m0, gran_k, gran_k, false, x_fp8, sf);
}

ts_status ts__tq_per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                         ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_channel_fp8(x, gran_k, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m == 0 || n == 0) return TS_OK;
    static const tq_k3ib k[TS__QSRC_COUNT] = {ts_dg_fp8_channel_bf16, ts_dg_fp8_channel_f16,
                                             ts_dg_fp8_channel_f32};
    return k[src](x, x_fp8, sf, gran_k, use_ue8m0);
}

/* ---- FP4 ---- */

ts_status ts__tq_per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_fp4_rounding rounding,
                                       ts_tensor *x_fp4, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_token_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, rounding, x_fp4, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m == 0 || n == 0) return TS_OK;

    const bool rne = rounding == TS_FP4_ROUND_RNE;
    const ts_tensor spk = as_packed(sf);
    /* bf16 with g 128, 64, 32: [rne][g] */
    static const tq_k3b kf[2][3] = {
        {ts_dg_fp4_token_bf16_g128, ts_dg_fp4_token_bf16_g64, ts_dg_fp4_token_bf16_g32},
        {ts_dg_fp4_token_bf16_g128_rne, ts_dg_fp4_token_bf16_g64_rne, ts_dg_fp4_token_bf16_g32_rne},
    };
    static const tq_k3 kp[2][3] = {
        {ts_dg_fp4_token_bf16_g128_pk, ts_dg_fp4_token_bf16_g64_pk, ts_dg_fp4_token_bf16_g32_pk},
        {ts_dg_fp4_token_bf16_g128_pk_rne, ts_dg_fp4_token_bf16_g64_pk_rne, ts_dg_fp4_token_bf16_g32_pk_rne},
    };
    const int gi = gran_k == 128 ? 0 : gran_k == 64 ? 1 : gran_k == 32 ? 2 : -1;
    if (src == TS__QSRC_BF16 && gi >= 0)
        return use_packed_ue8m0 ? kp[rne][gi](x, x_fp4, &spk) : kf[rne][gi](x, x_fp4, sf, use_ue8m0);
    /* any gran_k: [source][rne] */
    static const tq_k3ib gf[TS__QSRC_COUNT][2] = {
        {ts_dg_fp4_gen_bf16, ts_dg_fp4_gen_bf16_rne},
        {ts_dg_fp4_gen_f16, ts_dg_fp4_gen_f16_rne},
        {ts_dg_fp4_gen_f32, ts_dg_fp4_gen_f32_rne},
    };
    static const tq_k3i gp[TS__QSRC_COUNT][2] = {
        {ts_dg_fp4_gen_bf16_pk, ts_dg_fp4_gen_bf16_pk_rne},
        {ts_dg_fp4_gen_f16_pk, ts_dg_fp4_gen_f16_pk_rne},
        {ts_dg_fp4_gen_f32_pk, ts_dg_fp4_gen_f32_pk_rne},
    };
    return use_packed_ue8m0 ? gp[src][rne](x, x_fp4, &spk, gran_k) : gf[src][rne](x, x_fp4, sf, gran_k, use_ue8m0);
}

/* ---- cast back ---- */

static ts_status cast_back(const ts_tensor *x, const char *xname, bool fp4, const ts_tensor *sf,
                           int64_t gmn, int64_t gk, ts_tensor *out) {
    bool packed;
    TS__RETURN_IF_ERROR(ts__quant_args_cast_back(x, xname, fp4, sf, gmn, gk, out, &packed));
    const int64_t m = x->shape[0], n = fp4 ? x->shape[1] * 2 : x->shape[1];
    if (m == 0 || n == 0) return TS_OK;

    ts_tensor xk = *x, sk = *sf;
    if (fp4) xk.dtype = TS_E2M1X2;
    if (packed) sk.dtype = TS_UE8M0X4;
    const int o = out->dtype == TS_BF16 ? 0 : out->dtype == TS_F16 ? 1 : 2;
    /* [fp4][packed][out kind] */
    static const tq_k3i kf[2][2][3] = {
        {{ts_dg_cast_back_fp8_bf16_g128, ts_dg_cast_back_fp8_f16_g128, ts_dg_cast_back_fp8_f32_g128},
         {ts_dg_cast_back_fp8_bf16_g128_pk, ts_dg_cast_back_fp8_f16_g128_pk, ts_dg_cast_back_fp8_f32_g128_pk}},
        {{ts_dg_cast_back_fp4_bf16_g32, ts_dg_cast_back_fp4_f16_g32, ts_dg_cast_back_fp4_f32_g32},
         {ts_dg_cast_back_fp4_bf16_g32_pk, ts_dg_cast_back_fp4_f16_g32_pk, ts_dg_cast_back_fp4_f32_g32_pk}},
    };
    static const tq_k3ii kg[2][2][3] = {
        {{ts_dg_cast_back_gen_fp8_bf16, ts_dg_cast_back_gen_fp8_f16, ts_dg_cast_back_gen_fp8_f32},
         {ts_dg_cast_back_gen_fp8_bf16_pk, ts_dg_cast_back_gen_fp8_f16_pk, ts_dg_cast_back_gen_fp8_f32_pk}},
        {{ts_dg_cast_back_gen_fp4_bf16, ts_dg_cast_back_gen_fp4_f16, ts_dg_cast_back_gen_fp4_f32},
         {ts_dg_cast_back_gen_fp4_bf16_pk, ts_dg_cast_back_gen_fp4_f16_pk, ts_dg_cast_back_gen_fp4_f32_pk}},
    };
    if (gk == (fp4 ? 32 : 128)) return kf[fp4][packed][o](&xk, &sk, out, gmn);
    return kg[fp4][packed][o](&xk, &sk, out, gmn, gk);
}

ts_status ts__tq_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out) {
    return cast_back(x_fp8, "x_fp8", false, sf, sf_gran_mn, sf_gran_k, out);
}

ts_status ts__tq_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out) {
    return cast_back(x_fp4, "x_fp4", true, sf, sf_gran_mn, sf_gran_k, out);
}
