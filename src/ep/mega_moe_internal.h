/* Internal state of Mega MoE (not installed). The fused path uses its own EP buffer only for the
 * symmetric mappings and the deadline; the unfused path uses a second one through ep.h. */
#ifndef TILESTACK_MEGA_MOE_INTERNAL_H
#define TILESTACK_MEGA_MOE_INTERNAL_H

#include "ep/ep_internal.h"
#include "tilestack/gemm.h"
#include "tilestack/mega_moe.h"

/* Per-rank header at the start of the fused region. `ready` = the call whose inputs (and the
 * fields beside it) are published; `done` = the call whose expert outputs (rows + positions)
 * this rank has written and after which it reads no peer input of that call. Each counter
 * sits on its own cache line: peers poll them. */
typedef struct ts__mm_hdr {
    _Atomic uint64_t ready;
    int32_t status, fast_math;
    int64_t num_tokens;
    float clamp;
    char pad0_[36];
    _Atomic uint64_t done;
    char pad1_[56];
} ts__mm_hdr;

/* Phases timed per call (the bench prints them): fused: total, gather, L1, SwiGLU cast, L2,
 * wait for done, combine; unfused: total, layout + dispatch, expansion, L1, SwiGLU cast, L2,
 * scatter + combine, top-k sum. Only thread 0's share inside parallel regions is counted. */
enum { TS__MM_NPHASE = 8 };
void ts__mega_moe_phase_times(const ts_mega_moe_buffer *b, bool fused, double out[TS__MM_NPHASE]);
double ts__mega_moe_now(void);

/* One routed (token, slot) a local expert received. */
typedef struct ts__mm_entry {
    int32_t src, tok, slot, expert; /* expert: local id */
    float w;
} ts__mm_entry;

struct ts_mega_moe_weights {
    ts_packed_weight *l1, *l2;
    int64_t El, H, I;
    bool bf16;
};

struct ts_mega_moe_buffer {
    ts_ep_buffer *ep;     /* fused: mappings of every rank's region, deadline, broken flag */
    ts_ep_buffer *ep_unf; /* unfused: normal-mode dispatch / combine */
    int32_t rank, R, K;
    int32_t nodes; /* > 1: the fused region is this rank's alone; only the unfused path runs */
    int64_t E, El, T, H, I;
    bool bf16;
    uint64_t seq; /* fused calls started */
    /* region offsets (from peer[r] + data_off), the same on every rank */
    int64_t off_x, off_xsf, off_idx, off_w, off_pos[2], off_out[2];
    int64_t x_row_bytes, out_cap; /* out_cap: rows per parity = R * T * K */
    /* fused serial scratch (sized at create) */
    ts__mm_entry *ent;        /* [R * T * K] entries of the current phase, by expert */
    ts__mm_entry *ent_tmp;    /* [R * T * K] */
    int64_t *cnt, *first;     /* [El], [El + 1] */
    int64_t *recv_total;      /* [El] entries received this call */
    uint8_t *pdone;           /* [El, R]: source r's tokens for expert e computed this call */
    int64_t *orow;            /* [El] unfused: first expanded row of each expert */
    int32_t *list;            /* [El] experts with entries in the current phase */
    /* per-thread scratch of the expert pipeline (grown on demand, kept) */
    int nthr;
    void **tscr;
    size_t *tscr_bytes;
    /* unfused scratch (sized at create) */
    int32_t *u_tpr, *u_tpe;   /* [R], [E] */
    bool *u_in_rank;          /* [T * R] */
    void *u_scr;              /* grown on demand */
    size_t u_scr_bytes;
    /* seconds per phase of the last call on the calling thread (ts__mega_moe_phase_times) */
    double prof_f[TS__MM_NPHASE], prof_u[TS__MM_NPHASE];
};

static inline uint8_t *ts__mm_base(const ts_mega_moe_buffer *b, int r) {
    return b->ep->peer[r] + b->ep->data_off;
}
static inline ts__mm_hdr *ts__mm_hdr_of(const ts_mega_moe_buffer *b, int r) {
    return (ts__mm_hdr *)(void *)ts__mm_base(b, r);
}

/* SwiGLU x routing weight, then the FP8 cast (upstream's Linear1 epilogue / TileLang
 * swiglu_apply_weight_to_fp8): h bf16 [m, 2I] (gate columns [0, I), up [I, 2I), row stride
 * ldh), w[m] the rows' weights. fp8: q e4m3 [m, I] (row stride ldq bytes) and sf i32
 * [m, I/128] (row stride ldsf words), one ue8m0 per 32 values; bf16_out: q bf16 [m, I]
 * (ldq in elements), sf unused. I % 32 == 0 (fp8: % 128). Rows are independent. */
void ts__mega_moe_swiglu_cast(const uint16_t *h, int64_t ldh, int64_t m, int64_t I, const float *w,
                              float clamp, bool bf16_out, void *q, int64_t ldq, int32_t *sf,
                              int64_t ldsf);

/* One output row of the combine: y[j] = bf16(0.0f + rows[0][j] + rows[1][j] + ...) in f32,
 * n rows of H bf16 in top-k order (n = 0 gives +0). */
void ts__mega_moe_sum_rows(const uint16_t *const *rows, int n, int64_t H, uint16_t *y);

/* Argument checks shared by the fused and the unfused calls (no communication). */
ts_status ts__mega_moe_check(const ts_mega_moe_buffer *b, const ts_tensor *y, const ts_mega_moe_weights *w,
                             const ts_tensor *stats, float clamp, bool want_bf16, const char *what);

/* Grow per-thread / unfused scratch; NULL on out of memory. */
void *ts__mega_moe_tscratch(ts_mega_moe_buffer *b, int tid, size_t bytes);

#endif
