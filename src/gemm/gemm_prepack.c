/* Weight pre-packing: a weight (e4m3 / e2m1 / bf16, plain or grouped, either major) and its
 * scales re-laid out once so that the decode path streams it front to back (layout in
 * gemm_internal.h). Values keep their storage format: decode is bandwidth-bound, and
 * expanding them to f32 would multiply the bytes read per call. */
#include "gemm/gemm_grouped.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <stdlib.h>
#include <string.h>

/* Raw storage code of element (r, k) of an unpacked operand (e2m1: the 4-bit code). */
static inline uint32_t raw_code(const ts__gemm_operand *op, int64_t r, int64_t k) {
    switch (op->dtype) {
    case TS_E4M3: return ((const uint8_t *)op->data)[r * op->s_mn + k * op->s_k];
    case TS_BF16: return ((const uint16_t *)op->data)[r * op->s_mn + k * op->s_k];
    default: {
        const uint8_t *p = (const uint8_t *)op->data;
        if (op->k_major) return (p[r * op->s_mn + (k >> 1) * op->s_k] >> ((k & 1) * 4)) & 0xF;
        return (p[(r >> 1) * op->s_mn + k * op->s_k] >> ((r & 1) * 4)) & 0xF;
    }
    }
}

/* Scale of row r for K block kidx (units of gran_k), as the raw f32 or ue8m0 byte. */
static inline float scale_f32(const ts__gemm_operand *op, int64_t r, int64_t kidx) {
    const int64_t ridx = r / op->gran_mn;
    return ((const float *)op->sf)[ridx * op->sf_s_mn + kidx * op->sf_s_k];
}
static inline uint8_t scale_u8(const ts__gemm_operand *op, int64_t r, int64_t kidx) {
    const int64_t ridx = r / op->gran_mn;
    uint32_t word = (uint32_t)((const int32_t *)op->sf)[ridx * op->sf_s_mn + (kidx >> 2) * op->sf_s_k];
    return (uint8_t)(word >> ((kidx & 3) * 8));
}

/* Also clears pw->sf_normal when a scale byte is 0 or 255. */
static void pack_group(struct ts_packed_weight *pw, const ts__gemm_operand *op, uint8_t *dst) {
    const int64_t W = TS__PW_W;
    for (int64_t r = 0; r < pw->n; r++) {
        const int64_t j = r % W, q = ts__pw_slot(j);
        uint8_t *panel = dst + (r / W) * pw->panel_bytes;
        for (int64_t k0 = 0, b = 0; k0 < pw->k; k0 += pw->kb, b++) {
            uint8_t *row = panel + b * pw->block_bytes;
            const int64_t k1 = ts__min64(pw->k, k0 + pw->kb);
            for (int64_t k = k0; k < k1; k++, row += pw->row_bytes) {
                uint32_t c = raw_code(op, r, k);
                switch (pw->dtype) {
                case TS_E4M3: row[q] = (uint8_t)c; break;
                case TS_BF16: memcpy(row + 2 * j, &(uint16_t){(uint16_t)c}, 2); break;
                default: row[q >> 1] |= (uint8_t)(c << ((q & 1) * 4)); break;
                }
            }
        }
        if (!pw->scaled) continue;
        for (int64_t b = 0; b < pw->nkb; b++) {
            uint8_t *sc = panel + b * pw->block_bytes + pw->kb * pw->row_bytes;
            if (pw->sf_u8) {
                sc[j] = scale_u8(op, r, b);
                if (sc[j] == 0 || sc[j] == 255) pw->sf_normal = false;
            } else {
                float s = scale_f32(op, r, b);
                memcpy(sc + 4 * j, &s, 4);
            }
        }
    }
    /* ue8m0 scale bytes of the last panel's padding columns (past N): 127 (1.0), not 0, whose
     * 2^-127 is an f32 subnormal that the generic decoder would multiply by sa (a microcode
     * assist on Intel cores, and the MXCSR guard's DE flag); their weights are zero and their
     * results never stored. */
    if (pw->scaled && pw->sf_u8 && pw->n % W)
        for (int64_t j = pw->n % W; j < W; j++)
            for (int64_t b = 0; b < pw->nkb; b++)
                dst[(pw->n / W) * pw->panel_bytes + b * pw->block_bytes + pw->kb * pw->row_bytes + j] = 127;
}

static bool all_pow2(const ts_tensor *sf) {
    const float *p = (const float *)sf->data;
    for (int64_t i = 0; i < sf->shape[0]; i++)
        for (int64_t j = 0; j < sf->shape[1]; j++)
            if (ts_f32_to_ue8m0(p[i * sf->strides[0] + j * sf->strides[1]]) == 255) return false;
    return true;
}

static bool e4m3_nan_free(const ts__gemm_operand *op) {
    for (int64_t r = 0; r < op->mn; r++)
        for (int64_t k = 0; k < op->k; k++)
            if ((raw_code(op, r, k) & 0x7F) == 0x7F) return false;
    return true;
}

/* The panel geometry of h (dtype, sf_u8, gran_k, groups, n, k set): shared with
 * ts__gemm_packed_nbytes, so a size computed without packing is the size packing allocates. */
static void layout(struct ts_packed_weight *h) {
    const bool bf16 = h->dtype == TS_BF16;
    h->kb = bf16 ? 256 : h->gran_k;
    h->nkb = ts__ceil_div(h->k, h->kb);
    h->npanel = ts__ceil_div(h->n, TS__PW_W);
    h->row_bytes = h->dtype == TS_E4M3 ? TS__PW_W : bf16 ? 2 * TS__PW_W : TS__PW_W / 2;
    const int64_t sbytes = bf16 ? 0 : TS__PW_W * (h->sf_u8 ? 1 : 4);
    h->block_bytes = ts__align(h->kb * h->row_bytes + sbytes, 64);
    h->panel_bytes = h->nkb * h->block_bytes;
    h->group_bytes = h->npanel * h->panel_bytes;
    h->nbytes = (size_t)(h->groups * h->group_bytes);
}

size_t ts__gemm_packed_nbytes(ts_dtype dtype, bool sf_u8, int64_t gran_k, int64_t groups,
                              int64_t n, int64_t k) {
    struct ts_packed_weight h;
    memset(&h, 0, sizeof h);
    h.dtype = dtype;
    h.sf_u8 = sf_u8;
    h.gran_k = gran_k > 0 ? gran_k : 128;
    h.groups = groups;
    h.n = n;
    h.k = k;
    layout(&h);
    return h.nbytes;
}

ts_status ts_gemm_prepack_b(const ts_tensor *b, const ts_tensor *sfb, const int64_t *recipe_b,
                            bool kn, ts_packed_weight **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "out is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check(b, "b"));
    if (b->ndim != 2 && b->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "b: expected 2 dims [N, K] or 3 dims [G, N, K], got %d",
                        (int)b->ndim);
    if (b->dtype != TS_E4M3 && b->dtype != TS_E2M1X2 && b->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "b: dtype %s, expected e4m3, e2m1x2 or bf16",
                        ts_dtype_name(b->dtype));
    const bool bf16 = b->dtype == TS_BF16, grouped = b->ndim == 3;
    struct ts_packed_weight h;
    memset(&h, 0, sizeof h);
    h.magic = TS__PW_MAGIC;
    h.dtype = b->dtype;
    h.grouped = grouped;
    h.groups = grouped ? b->shape[0] : 1;
    h.scaled = !bf16;
    if (bf16 && sfb)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "sfb: bf16 weights take no scales (pass NULL)");
    if (!bf16) {
        TS__RETURN_IF_ERROR(ts_tensor_check(sfb, "sfb"));
        if (sfb->ndim != b->ndim)
            return ts__fail(TS_ERR_SHAPE, "sfb: %d dims, b has %d", (int)sfb->ndim, (int)b->ndim);
        if (grouped && sfb->shape[0] != h.groups)
            return ts__fail(TS_ERR_SHAPE, "sfb: %lld groups, b has %lld",
                            (long long)sfb->shape[0], (long long)h.groups);
        h.sf_dtype = sfb->dtype;
        h.sf_u8 = sfb->dtype == TS_I32 || sfb->dtype == TS_UE8M0X4;
        if (!h.sf_u8 && sfb->dtype != TS_F32)
            return ts__fail(TS_ERR_DTYPE, "sfb: dtype %s, expected f32 or packed ue8m0 (i32)",
                            ts_dtype_name(sfb->dtype));
        if (recipe_b) {
            h.gran_mn = recipe_b[0], h.gran_k = recipe_b[1];
            if ((h.gran_mn != 1 && h.gran_mn != 128) || (h.gran_k != 32 && h.gran_k != 128))
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "recipe_b: (%lld, %lld) unsupported (gran_mn 1 or 128, gran_k "
                                "32 or 128)",
                                (long long)h.gran_mn, (long long)h.gran_k);
        } else {
            h.gran_mn = h.sf_u8 ? 1 : 128;
            h.gran_k = 128;
        }
    }
    /* Every group validated before anything is allocated. */
    ts__gemm_operand op0;
    {   /* the shape, also for G = 0 (slice 0 is a view; nothing is read) */
        ts_tensor b0 = grouped ? ts__gemm_slice3(b, 0) : *b;
        if (kn) b0 = ts__gemm_transpose2(&b0);
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&b0, "b", bf16, kn, &op0));
    }
    for (int64_t g = 0; g < h.groups; g++) {
        ts_tensor bg = grouped ? ts__gemm_slice3(b, g) : *b;
        if (kn) bg = ts__gemm_transpose2(&bg);
        ts__gemm_operand op;
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&bg, "b", bf16, kn, &op));
        if (!bf16) {
            ts_tensor sg = grouped ? ts__gemm_slice3(sfb, g) : *sfb;
            if (kn) sg = ts__gemm_transpose2(&sg);
            TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&op, &sg, "sfb", h.gran_mn, h.gran_k));
        }
    }
    h.n = op0.mn;
    h.k = op0.k;
    layout(&h);
    h.sf_pow2 = true;
    h.nan_free = true;
    h.sf_normal = true;

    struct ts_packed_weight *pw = (struct ts_packed_weight *)calloc(1, sizeof *pw);
    uint8_t *data = (uint8_t *)ts__aligned_alloc(h.nbytes ? h.nbytes : 64);
    if (!pw || !data) {
        free(pw);
        ts__aligned_free(data);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_gemm_prepack_b: %zu bytes", h.nbytes);
    }
    memset(data, 0, h.nbytes);
    *pw = h;
    pw->data = data;
    for (int64_t g = 0; g < h.groups; g++) {
        ts_tensor bg = grouped ? ts__gemm_slice3(b, g) : *b;
        if (kn) bg = ts__gemm_transpose2(&bg);
        ts__gemm_operand op;
        (void)ts__gemm_make_operand(&bg, "b", bf16, kn, &op);
        if (!bf16) {
            ts_tensor sg = grouped ? ts__gemm_slice3(sfb, g) : *sfb;
            if (kn) sg = ts__gemm_transpose2(&sg);
            (void)ts__gemm_attach_scales(&op, &sg, "sfb", h.gran_mn, h.gran_k);
            if (!h.sf_u8 && pw->sf_pow2) pw->sf_pow2 = all_pow2(&sg);
        }
        if (h.dtype == TS_E4M3 && pw->nan_free) pw->nan_free = e4m3_nan_free(&op);
        pack_group(pw, &op, data + g * h.group_bytes);
    }
    *out = pw;
    return TS_OK;
}

void ts_packed_weight_destroy(ts_packed_weight *pw) {
    if (!pw || pw->magic != TS__PW_MAGIC) return;
    pw->magic = 0;
    ts__aligned_free(pw->data);
    free(pw);
}

size_t ts_packed_weight_nbytes(const ts_packed_weight *pw) {
    return pw && pw->magic == TS__PW_MAGIC ? pw->nbytes : 0;
}

ts_status ts__gemm_check_packed(const struct ts_packed_weight *pw, const char *name) {
    if (!pw) return ts__fail(TS_ERR_NULL_POINTER, "%s is NULL", name);
    if (pw->magic != TS__PW_MAGIC)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: not a live packed weight", name);
    return TS_OK;
}

ts__gemm_operand ts__gemm_packed_operand(const struct ts_packed_weight *pw, int64_t g) {
    ts__gemm_operand o;
    memset(&o, 0, sizeof o);
    o.data = pw->data + g * pw->group_bytes;
    o.dtype = pw->dtype;
    o.mn = pw->n;
    o.k = pw->k;
    o.k_major = true;
    o.sf_packed = pw->sf_u8;
    o.gran_mn = pw->gran_mn;
    o.gran_k = pw->gran_k;
    o.pw = pw;
    return o;
}

ts_status ts__gemm_packed_recipe(const struct ts_packed_weight *pw, const int64_t *recipe,
                                 const int64_t *recipe_a, const int64_t *recipe_b,
                                 ts_gemm_recipe *r) {
    TS__RETURN_IF_ERROR(ts_gemm_resolve_recipe(recipe, recipe_a, recipe_b, pw->sf_dtype, r));
    if (r->gran_mn_b != pw->gran_mn || r->gran_k_b != pw->gran_k)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "recipe: B granularity (%lld, %lld), but the packed weight was packed "
                        "with (%lld, %lld)",
                        (long long)r->gran_mn_b, (long long)r->gran_k_b, (long long)pw->gran_mn,
                        (long long)pw->gran_k);
    return TS_OK;
}

void ts__gemm_pw_pack_panel(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                            int64_t kc, int w, float *dst) {
    ts__gemm_lut_init();
    const struct ts_packed_weight *pw = op->pw;
    const uint8_t *base = (const uint8_t *)op->data;
#if defined(TS_HAVE_AVX2_KERNELS)
    /* A full 16-column half of a 32-column panel (the B micro-panels of the big-M path):
     * decoded row by row with AVX2, block segment by block segment. */
    if (w == 16 && rows == 16 && r0 % 16 == 0 && ts__gemm_select_kernels() == &ts__gemm_kernels_avx2) {
        const uint8_t *panel = base + (r0 / TS__PW_W) * pw->panel_bytes;
        for (int64_t k = 0; k < kc;) {
            const int64_t kk = k0 + k, b = kk / pw->kb, in = kk % pw->kb;
            const int64_t len = ts__min64(kc - k, pw->kb - in);
            ts__gemm_pw_rows_f32__avx2(panel + b * pw->block_bytes + in * pw->row_bytes,
                                       pw->row_bytes, pw->dtype, pw->nan_free, len,
                                       (int)((r0 % TS__PW_W) / 16), dst + k * w, w);
            k += len;
        }
        return;
    }
#endif
    for (int64_t k = 0; k < kc; k++) {
        const int64_t kk = k0 + k;
        const uint8_t *blk = base + (kk / pw->kb) * pw->block_bytes + (kk % pw->kb) * pw->row_bytes;
        float *d = dst + k * w;
        for (int64_t i = 0; i < w; i++) {
            if (i >= rows) {
                d[i] = 0.0f;
                continue;
            }
            const int64_t r = r0 + i, j = r % TS__PW_W;
            const uint8_t *row = blk + (r / TS__PW_W) * pw->panel_bytes;
            switch (pw->dtype) {
            case TS_E4M3: d[i] = ts__gemm_lut.e4m3[row[ts__pw_slot(j)]]; break;
            case TS_BF16: {
                uint16_t hb;
                memcpy(&hb, row + 2 * j, 2);
                uint32_t u = (uint32_t)hb << 16;
                memcpy(&d[i], &u, 4);
                break;
            }
            default: {
                const int64_t q = ts__pw_slot(j);
                d[i] = ts__gemm_lut.e2m1[(row[q >> 1] >> ((q & 1) * 4)) & 0xF];
                break;
            }
            }
        }
    }
}

void ts__gemm_pw_pack_scales(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t kb0,
                             int64_t nkb, int64_t g, int w, float *dst) {
    ts__gemm_lut_init();
    const struct ts_packed_weight *pw = op->pw;
    const uint8_t *base = (const uint8_t *)op->data;
    for (int64_t b = 0; b < nkb; b++) {
        const int64_t blk = ((kb0 + b) * g) / pw->kb;
        const uint8_t *sc0 = base + blk * pw->block_bytes + pw->kb * pw->row_bytes;
        for (int64_t i = 0; i < w; i++) {
            float s = 0.0f;
            if (i < rows) {
                const int64_t r = r0 + i, j = r % TS__PW_W;
                const uint8_t *sc = sc0 + (r / TS__PW_W) * pw->panel_bytes;
                if (pw->sf_u8) s = ts__gemm_lut.ue8m0[sc[j]];
                else memcpy(&s, sc + 4 * j, 4);
            }
            dst[b * w + i] = s;
        }
    }
}
