/* FP8 (e4m3) quantisers with DeepGEMM's formulas (deep_gemm/utils/math.py): per-token 1 x g,
 * per-block g x g and per-channel g x 1. Threads split rows (or columns) statically; each
 * output block depends only on its own inputs, so results never depend on the thread count. */
#include "numerics/quant_hand.h"
#include "numerics/quant_kernels.h"

#include "tilestack/quant.h"

/* Scale outputs are stored through their strides: a row-major, MN-major or TMA-aligned view
 * all work. Packed scales put block b in byte b % 4 of word b / 4. */
typedef struct sf_out {
    char *data;
    int64_t s0, s1; /* element strides */
    bool packed;
} sf_out;

static inline void sf_store_f32(const sf_out *o, int64_t r, int64_t c, float v) {
    ((float *)o->data)[r * o->s0 + c * o->s1] = v;
}
static inline void sf_store_word(const sf_out *o, int64_t r, int64_t w, uint32_t v) {
    ((uint32_t *)o->data)[r * o->s0 + w * o->s1] = v;
}

/* ---- per token ---- */

typedef struct pt_ctx {
    const char *x;
    int64_t x_rs; /* bytes */
    size_t esz;
    const ts__quant_kernels *k;
    int64_t n, gran_k, nb;
    bool ue8m0;
    uint8_t *q;
    int64_t q_rs;
    sf_out sf;
} pt_ctx;

/* Blocks per kernel call: bounds the on-stack scale buffer, no allocation in the loop. */
#define PT_SEG_BLOCKS 256

static void pt_rows(void *vctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const pt_ctx *c = (const pt_ctx *)vctx;
    float srow[PT_SEG_BLOCKS];
    for (int64_t r = r0; r < r1; r++) {
        const char *xr = c->x + r * c->x_rs;
        uint8_t *qr = c->q + r * c->q_rs;
        uint32_t word = 0;
        for (int64_t b0 = 0; b0 < c->nb; b0 += PT_SEG_BLOCKS) {
            const int64_t nseg = ts__min64(PT_SEG_BLOCKS, c->nb - b0), j0 = b0 * c->gran_k;
            const int64_t len = ts__min64(c->n - j0, nseg * c->gran_k);
            c->k->fp8_row(xr + (size_t)j0 * c->esz, len, c->gran_k, c->ue8m0, qr + j0, srow);
            for (int64_t i = 0; i < nseg; i++) {
                const int64_t b = b0 + i;
                if (!c->sf.packed) {
                    sf_store_f32(&c->sf, r, b, srow[i]);
                    continue;
                }
                word |= ((ts__bits_from_f32(srow[i]) >> 23) & 0xFFu) << (8 * (b & 3));
                if ((b & 3) == 3 || b == c->nb - 1) {
                    sf_store_word(&c->sf, r, b >> 2, word);
                    word = 0;
                }
            }
        }
    }
}

ts_status ts__qh_per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_token_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1], nb = ts__cdiv_safe(n, gran_k);
    if (m == 0 || n == 0) return TS_OK;

    pt_ctx c = {
        .x = (const char *)x->data,
        .x_rs = x->strides[0] * (int64_t)ts__qsrc_size(src),
        .esz = ts__qsrc_size(src),
        .k = ts__quant_kernels_for(src),
        .n = n, .gran_k = gran_k, .nb = nb,
        .ue8m0 = use_ue8m0,
        .q = (uint8_t *)x_fp8->data,
        .q_rs = x_fp8->strides[0],
        .sf = {(char *)sf->data, sf->strides[0], sf->strides[1], use_packed_ue8m0},
    };
    ts__parallel_for(m, 1, pt_rows, &c);
    return TS_OK;
}

/* ---- per block ---- */

typedef struct pb_ctx {
    const char *x;
    int64_t x_rs;
    size_t esz;
    const ts__quant_kernels *k;
    int64_t m, n, g, nbn;
    bool ue8m0;
    uint8_t *q;
    int64_t q_rs;
    sf_out sf;
} pb_ctx;

/* Column blocks per strip (bounds the on-stack arrays). A block-row strip is read twice, amax
 * pass then encode pass, row after row (streaming; 128-row x 128-column tiles measured
 * slower, the prefetchers follow rows but not 128 strided short runs). The strip (g rows x
 * up to 64 blocks of bf16: 2 MB) outlives L2 but not L3, and while the encode pass runs the
 * next block-row is prefetched, so neither pass waits on DRAM for its reads. */
#define PB_STRIP 64

static void pb_rowblocks(void *vctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const pb_ctx *c = (const pb_ctx *)vctx;
    uint32_t amax[PB_STRIP], amin[PB_STRIP];
    float inv[PB_STRIP];
    for (int64_t bi = b0; bi < b1; bi++) {
        const int64_t r0 = bi * c->g, r1 = ts__min64(r0 + c->g, c->m);
        for (int64_t s0 = 0; s0 < c->nbn; s0 += PB_STRIP) {
            const int64_t ns = ts__min64(PB_STRIP, c->nbn - s0), j0 = s0 * c->g;
            const int64_t len = ts__min64(c->n - j0, ns * c->g), bytes = len * (int64_t)c->esz;
            for (int64_t k = 0; k < ns; k++) amax[k] = 0, amin[k] = UINT32_MAX;
            for (int64_t r = r0; r < r1; r++)
                c->k->blk_stats(c->x + r * c->x_rs + (size_t)j0 * c->esz, len, c->g, amax, amin);
            for (int64_t k = 0; k < ns; k++) {
                float s = ts__fp8_scale(amax[k], c->ue8m0);
                sf_store_f32(&c->sf, bi, s0 + k, s);
                inv[k] = 1.0f / s;
            }
            for (int64_t r = r0; r < r1; r++) {
                const char *xr = c->x + r * c->x_rs + (size_t)j0 * c->esz;
                c->k->blk_enc(xr, len, c->g, amax, amin, inv, c->q + r * c->q_rs + j0);
                if (r + c->g < c->m)
                    for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch(xr + c->g * c->x_rs + l, 0, 1);
            }
        }
    }
}

ts_status ts__qh_per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_block_fp8(x, gran_k, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    const int64_t sshape[2] = {ts__cdiv_safe(m, gran_k), ts__cdiv_safe(n, gran_k)};
    if (m == 0 || n == 0) return TS_OK;
    pb_ctx c = {
        .x = (const char *)x->data,
        .x_rs = x->strides[0] * (int64_t)ts__qsrc_size(src),
        .esz = ts__qsrc_size(src),
        .k = ts__quant_kernels_for(src),
        .m = m, .n = n, .g = gran_k, .nbn = sshape[1],
        .ue8m0 = use_ue8m0,
        .q = (uint8_t *)x_fp8->data,
        .q_rs = x_fp8->strides[0],
        .sf = {(char *)sf->data, sf->strides[0], sf->strides[1], false},
    };
    ts__parallel_for(sshape[0], 1, pb_rowblocks, &c);
    return TS_OK;
}

/* ---- per channel ---- */

/* Work items are (row group, column strip) tiles of g rows x PC_STRIP columns (128 x 1024 bf16
 * = 256 KB: the encode pass re-reads it from L2), numbered group-major so a thread's share
 * walks along rows; the encode pass prefetches the next strip of each row. Threading over
 * tiles rather than groups keeps both cores busy when m / g is small. */
#define PC_STRIP 1024

typedef struct pc_ctx {
    const char *x;
    int64_t x_rs;
    size_t esz;
    const ts__quant_kernels *k;
    int64_t n, g, nstrips;
    bool ue8m0;
    uint8_t *q;
    int64_t q_rs;
    sf_out sf;
} pc_ctx;

static void pc_tiles(void *vctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const pc_ctx *c = (const pc_ctx *)vctx;
    uint32_t amax[PC_STRIP];
    float inv[PC_STRIP];
    for (int64_t t = t0; t < t1; t++) {
        const int64_t gi = t / c->nstrips, s0 = (t % c->nstrips) * PC_STRIP;
        const int64_t len = ts__min64(PC_STRIP, c->n - s0), r0 = gi * c->g;
        const int64_t next = ts__min64(PC_STRIP, c->n - s0 - len) * (int64_t)c->esz;
        memset(amax, 0, (size_t)len * sizeof amax[0]);
        for (int64_t r = r0; r < r0 + c->g; r++)
            c->k->absmax_cols(c->x + r * c->x_rs + (size_t)s0 * c->esz, len, amax);
        for (int64_t j = 0; j < len; j++) {
            float s = ts__fp8_scale(amax[j], c->ue8m0);
            sf_store_f32(&c->sf, gi, s0 + j, s);
            inv[j] = 1.0f / s;
        }
        for (int64_t r = r0; r < r0 + c->g; r++) {
            const char *xr = c->x + r * c->x_rs + (size_t)s0 * c->esz;
            c->k->enc_e4m3_cols(xr, len, inv, c->q + r * c->q_rs + s0);
            for (int64_t l = 0; l < next; l += 64) __builtin_prefetch(xr + (size_t)len * c->esz + l, 0, 1);
        }
    }
}

ts_status ts__qh_per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                         ts_tensor *x_fp8, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_channel_fp8(x, gran_k, x_fp8, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m == 0 || n == 0) return TS_OK;
    pc_ctx c = {
        .x = (const char *)x->data,
        .x_rs = x->strides[0] * (int64_t)ts__qsrc_size(src),
        .esz = ts__qsrc_size(src),
        .k = ts__quant_kernels_for(src),
        .n = n, .g = gran_k, .nstrips = ts__cdiv_safe(n, PC_STRIP),
        .ue8m0 = use_ue8m0,
        .q = (uint8_t *)x_fp8->data,
        .q_rs = x_fp8->strides[0],
        .sf = {(char *)sf->data, sf->strides[0], sf->strides[1], false},
    };
    ts__parallel_for(m / gran_k * c.nstrips, 1, pc_tiles, &c);
    return TS_OK;
}
