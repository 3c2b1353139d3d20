/* Scale-factor layout helpers against tests/gen/gen_quant_layout.py (numpy transcription of
 * DeepGEMM's torch reference), transform_sf_into_required_layout rules, calc_diff. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>

/* sf = ceil_to_ue8m0(ldexp(u + 1.5, e)), as make_sf in the generator. */
static float *make_sf(uint64_t seed, int64_t count) {
    float *v = (float *)malloc((size_t)(count > 0 ? count : 1) * 4);
    ts_prng pu = ts_prng_seed(seed), pe = ts_prng_seed(seed + 1);
    for (int64_t i = 0; i < count; i++) {
        float u = ts_prng_uniform(&pu);
        int e = (int)(ts_prng_u32(&pe) % 41) - 20;
        v[i] = ts_ceil_to_ue8m0(ldexpf(u + 1.5f, e));
    }
    return v;
}

typedef struct lrec {
    int64_t kind, g, mn, k, gmn, gk, seed, ndim, shape[3], strides[3], alloc, nvalues;
} lrec;

/* Value of element idx (row-major over shape) of a strided 4-byte view. */
static uint32_t at(const uint32_t *base, const ts_tensor *t, int64_t idx) {
    int64_t off = 0;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        off += (idx % t->shape[d]) * t->strides[d];
        idx /= t->shape[d];
    }
    return base[off];
}

TS_TEST(quant_layout_golden) {
    size_t size = 0;
    char *buf = (char *)TS_READ_GOLDEN("quant_layout.bin", &size);
    if (!buf) return;
    size_t pos = 0;
    int n = 0;
    while (pos + sizeof(lrec) <= size) {
        lrec r;
        memcpy(&r, buf + pos, sizeof r);
        pos += sizeof r;
        const uint32_t *want = (const uint32_t *)(buf + pos);
        pos += (size_t)r.nvalues * 4;
        const int64_t sfm = r.kind == 2 ? (r.mn + r.gmn - 1) / r.gmn : r.mn;
        const int64_t sfk = r.kind == 2 ? (r.k + r.gk - 1) / r.gk : r.k;
        const int64_t g = r.g ? r.g : 1;
        float *sf = make_sf((uint64_t)r.seed, g * sfm * sfk);
        ts_tensor st = r.g ? ts_tensor_3d(sf, TS_F32, r.g, sfm, sfk) : ts_tensor_2d(sf, TS_F32, sfm, sfk);
        ts_tensor lay;
        int64_t alloc = -1;
        ts_status s;
        if (r.kind == 0) s = ts_get_mn_major_tma_aligned_layout(&st, &lay, &alloc);
        else if (r.kind == 1) s = ts_get_mn_major_tma_aligned_packed_ue8m0_layout(&st, &lay, &alloc);
        else s = ts_transform_sf_into_required_layout(&st, r.mn, r.k, r.gmn, r.gk, r.g, false, TS_SF_ARCH_SM100,
                                                      &lay, &alloc, NULL);
        TS_CHECK_STATUS(s, TS_OK);
        TS_CHECK_EQ_INT(lay.ndim, r.ndim);
        TS_CHECK_EQ_INT(alloc, r.alloc);
        TS_CHECK(lay.data == NULL);
        for (int d = 0; d < r.ndim && d < 3; d++) {
            TS_CHECK_EQ_INT(lay.shape[d], r.shape[d]);
            TS_CHECK_EQ_INT(lay.strides[d], r.strides[d]);
        }
        uint32_t *out = (uint32_t *)malloc((size_t)(alloc > 0 ? alloc : 1) * 4);
        memset(out, 0xEE, (size_t)(alloc > 0 ? alloc : 1) * 4);
        lay.data = out;
        if (r.kind == 0) s = ts_get_mn_major_tma_aligned_tensor(&st, &lay);
        else if (r.kind == 1) s = ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay);
        else s = ts_transform_sf_into_required_layout(&st, r.mn, r.k, r.gmn, r.gk, r.g, false, TS_SF_ARCH_SM100,
                                                      NULL, NULL, &lay);
        TS_CHECK_STATUS(s, TS_OK);
        int bad = 0;
        for (int64_t i = 0; i < r.nvalues && bad < 3; i++)
            if (at(out, &lay, i) != want[i]) {
                TS_CHECK_MSG(0, "kind %lld g %lld mn %lld k %lld: element %lld = %08x, want %08x", (long long)r.kind,
                             (long long)r.g, (long long)r.mn, (long long)r.k, (long long)i, at(out, &lay, i), want[i]);
                bad++;
            }
        free(out);
        free(sf);
        n++;
    }
    TS_CHECK(pos == size);
    TS_CHECK(n > 20);
    free(buf);
}

TS_TEST(quant_layout_tma_aligned_size) {
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(129, 4), 132);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(128, 4), 128);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(1, 2), 8);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(17, 1), 32);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(0, 4), 0);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(5, 3), -1);
    TS_CHECK_EQ_INT(ts_get_tma_aligned_size(5, 0), -1);
}

/* transform_sf_into_required_layout: the SM90 and already-packed rules, in place and copies. */
TS_TEST(quant_layout_transform_rules) {
    /* SM90 (1,128): MN-major TMA-aligned f32; a second call on the result is a no-op. */
    float sf[5 * 3], out[8 * 3 + 8];
    for (int i = 0; i < 15; i++) sf[i] = (float)(i + 1);
    ts_tensor st = ts_tensor_2d(sf, TS_F32, 5, 3), lay;
    int64_t alloc = 0;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 1, 128, 0, false, TS_SF_ARCH_SM90, &lay, &alloc, NULL), TS_OK);
    TS_CHECK_EQ_INT(lay.strides[0], 1);
    TS_CHECK_EQ_INT(lay.strides[1], 8);
    TS_CHECK_EQ_INT(alloc, 2 * 8 + 5);
    lay.data = out;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 1, 128, 0, false, TS_SF_ARCH_SM90, NULL, NULL, &lay), TS_OK);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) TS_CHECK(out[j * 8 + i] == sf[i * 3 + j]);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&lay, 5, 300, 1, 128, 0, false, TS_SF_ARCH_SM90, NULL, NULL, &lay), TS_OK);
    /* disable_ue8m0_cast on SM100 behaves as SM90 for (1,128); for (1,32) it is an error */
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 1, 128, 0, true, TS_SF_ARCH_SM100, &lay, NULL, NULL), TS_OK);
    ts_tensor st32 = ts_tensor_2d(sf, TS_F32, 5, 3);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st32, 5, 96, 1, 32, 0, true, TS_SF_ARCH_SM100, &lay, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    /* wrong sf shape */
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 600, 1, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 1, 128, 2, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_SHAPE);
    /* SM90 (128,128) SFB: contiguous or transposed-contiguous, returned as is */
    ts_tensor sfb = ts_tensor_2d(sf, TS_F32, 3, 5);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&sfb, 300, 600, 128, 128, 0, false, TS_SF_ARCH_SM90, &lay, &alloc, NULL), TS_OK);
    TS_CHECK_EQ_INT(lay.strides[0], 5);
    TS_CHECK_EQ_INT(alloc, 15);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&sfb, 300, 600, 128, 128, 0, false, TS_SF_ARCH_SM90, NULL, NULL, &sfb), TS_OK);
    ts_tensor sfbt = sfb;
    sfbt.strides[0] = 1; sfbt.strides[1] = 3;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&sfbt, 300, 600, 128, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_OK);
    sfbt.strides[0] = 6; sfbt.strides[1] = 1;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&sfbt, 300, 600, 128, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_STRIDE);
    /* SM100 packed int (1,128): validated (MN-major, stride >= align(mn,4), % 4) */
    int32_t pk[8 * 2];
    ts_tensor ps = ts_tensor_2d(pk, TS_UE8M0X4, 5, 2);
    ps.strides[0] = 1; ps.strides[1] = 8;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&ps, 5, 1024, 1, 128, 0, false, TS_SF_ARCH_SM100, &lay, NULL, &ps), TS_OK);
    ps.strides[1] = 6;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&ps, 5, 1024, 1, 128, 0, false, TS_SF_ARCH_SM100, &lay, NULL, NULL), TS_ERR_STRIDE);
    ps.strides[0] = 2; ps.strides[1] = 1;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&ps, 5, 1024, 1, 128, 0, false, TS_SF_ARCH_SM100, &lay, NULL, NULL), TS_ERR_STRIDE);
    /* int sf on SM90: no rule */
    ps.strides[0] = 1; ps.strides[1] = 8;
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&ps, 5, 1024, 1, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 1, 128, 0, false, (ts_sf_arch)7, &lay, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(&st, 5, 300, 0, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_transform_sf_into_required_layout(NULL, 5, 300, 1, 128, 0, false, TS_SF_ARCH_SM90, &lay, NULL, NULL), TS_ERR_NULL_POINTER);
}

TS_TEST(quant_layout_bad_input) {
    float sf[4 * 4];
    for (int i = 0; i < 16; i++) sf[i] = 1.0f;
    int32_t out[4 * 1 + 4];
    memset(out, 0xA5, sizeof out);
    ts_tensor st = ts_tensor_2d(sf, TS_F32, 4, 4), lay;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_layout(&st, &lay, NULL), TS_OK);
    lay.data = out;
    sf[5] = 1.5f; /* not a power of two */
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay), TS_ERR_INVALID_ARGUMENT);
    sf[5] = -2.0f;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay), TS_ERR_INVALID_ARGUMENT);
    sf[5] = 0.0f;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay), TS_ERR_INVALID_ARGUMENT);
    sf[5] = INFINITY;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay), TS_ERR_INVALID_ARGUMENT);
    for (size_t i = 0; i < sizeof out / 4; i++) TS_CHECK((uint32_t)out[i] == 0xA5A5A5A5u);
    sf[5] = 4.0f;
    ts_tensor bad = lay;
    bad.strides[0] = 2;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &bad), TS_ERR_STRIDE);
    bad = lay; bad.dtype = TS_F32;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &bad), TS_ERR_DTYPE);
    bad = lay; bad.shape[0] = 3;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &bad), TS_ERR_SHAPE);
    bad = lay; bad.data = (char *)out + 2;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &bad), TS_ERR_ALIGNMENT);
    ts_tensor s1 = ts_tensor_1d(sf, TS_F32, 16);
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_layout(&s1, &lay, NULL), TS_ERR_SHAPE);
    ts_tensor si = ts_tensor_2d(sf, TS_I32, 4, 4);
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_layout(&si, &lay, NULL), TS_ERR_DTYPE);
    ts_tensor huge = ts_tensor_2d(sf, TS_F32, 4, 4); /* 2^62 f32 elements: bytes overflow */
    huge.ndim = 3;
    huge.shape[0] = INT64_C(1) << 30; huge.shape[1] = INT64_C(1) << 30; huge.shape[2] = 4;
    huge.strides[0] = INT64_C(1) << 32; huge.strides[1] = 4; huge.strides[2] = 1;
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_layout(&huge, &lay, NULL), TS_ERR_OVERFLOW);
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_layout(NULL, &lay, NULL), TS_ERR_NULL_POINTER);
    for (size_t i = 0; i < sizeof out / 4; i++) TS_CHECK((uint32_t)out[i] == 0xA5A5A5A5u);
    /* valid: byte j of word 0 = exponent byte of sf[i][j] */
    TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&st, &lay), TS_OK);
    TS_CHECK_EQ_INT((uint32_t)out[1], 0x7F7F817Fu);
}

TS_TEST(quant_calc_diff) {
    float x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
    double d = -1;
    ts_tensor xt = ts_tensor_1d(x, TS_F32, 4), yt = ts_tensor_1d(y, TS_F32, 4);
    TS_CHECK_STATUS(ts_calc_diff(&xt, &yt, &d), TS_OK);
    /* sum xy = 1+4+9+20 = 34; sum x^2 + y^2 = 30 + 39 = 69 -> 1 - 68/69 */
    TS_CHECK(d == 1.0 - 68.0 / 69.0);
    TS_CHECK_STATUS(ts_calc_diff(&xt, &xt, &d), TS_OK);
    TS_CHECK(d == 0.0);
    float z[4] = {0, 0, -0.0f, 0};
    ts_tensor zt = ts_tensor_1d(z, TS_F32, 4);
    TS_CHECK_STATUS(ts_calc_diff(&zt, &zt, &d), TS_OK);
    TS_CHECK(d == 0.0); /* all zero: 0, not NaN */
    TS_CHECK_STATUS(ts_calc_diff(&xt, &zt, &d), TS_OK);
    TS_CHECK(d == 1.0);
    float nx[4] = {-1, -2, -3, -4};
    ts_tensor nt = ts_tensor_1d(nx, TS_F32, 4);
    TS_CHECK_STATUS(ts_calc_diff(&xt, &nt, &d), TS_OK);
    TS_CHECK(d == 2.0);
    /* mixed dtypes and a strided 2-D view: bf16 x vs f64 y */
    uint16_t xb[2 * 3];
    double yd[2 * 4];
    for (int i = 0; i < 6; i++) xb[i] = ts_f32_to_bf16((float)(i + 1));
    for (int i = 0; i < 8; i++) yd[i] = (double)(i % 4 + 1 + (i / 4) * 3);
    ts_tensor xbt = ts_tensor_2d(xb, TS_BF16, 2, 3), ydt = ts_tensor_2d(yd, TS_F64, 2, 3);
    ydt.strides[0] = 4;
    TS_CHECK_STATUS(ts_calc_diff(&xbt, &ydt, &d), TS_OK);
    TS_CHECK(d == 0.0);
    /* bad input */
    TS_CHECK_STATUS(ts_calc_diff(&xt, &yt, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_calc_diff(NULL, &yt, &d), TS_ERR_NULL_POINTER);
    ts_tensor it = ts_tensor_1d(x, TS_I32, 4);
    TS_CHECK_STATUS(ts_calc_diff(&it, &yt, &d), TS_ERR_DTYPE);
    ts_tensor y3 = ts_tensor_1d(y, TS_F32, 3);
    TS_CHECK_STATUS(ts_calc_diff(&xt, &y3, &d), TS_ERR_SHAPE);
}
