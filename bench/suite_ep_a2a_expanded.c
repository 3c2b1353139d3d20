/* Part of suite `ep`: the baseline of the expanded V2 rows. The Alltoallv token dispatcher a
 * MoE framework runs without DeepEP (permute, MPI_Alltoallv, unpermute: Megatron-LM's
 * all-to-all dispatcher) delivers the same output as ts_ep_elastic_dispatch with do_expand:
 * one row per (token, local expert), grouped by local expert, inside a group by source rank
 * then source token (expert_alignment 1), each with its scales and the slot's weight. Its
 * combine sends every expanded row back to its source, which sums a token's top-k rows (f32,
 * one bf16 rounding). So the expanded rows are timed against MPI moving the same rows, not
 * against the V1 reference, which moves about top-k / R times fewer.
 * Dispatch, timed: per-(rank, expert) counts, MPI_Alltoall of them, the pack (one copy per
 * slot), MPI_Alltoallv, the unpack into the expanded rows. Combine, timed: the pack back into
 * arrival order, MPI_Alltoallv, the sums at the source. */
#include "bench.h"

#ifdef TILESTACK_HAVE_EP
#include "core/internal.h"
#include "suite_ep_a2a_expanded.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_bf16(float x) { /* round to nearest even; the sums here are finite */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

struct ts__a2a_expanded {
    int R, me;
    int64_t T, H, S, K, El;
    const uint8_t *x;
    const float *xs;
    const int64_t *idx;
    const float *w;
    int64_t rowb;                         /* dispatch message: H e4m3, S f32 scales, f32 weight */
    int *cnt_s, *cnt_r;                   /* [R * El]: rows to (rank, expert) / from (rank, expert) */
    int *scnt, *sdsp, *rcnt, *rdsp;       /* dispatch bytes per rank */
    int *ccnt_s, *cdsp_s, *ccnt_r, *cdsp_r; /* combine bytes per rank (the reverse) */
    int64_t *pos;                         /* [T * K]: message index of (t, k) among the sent, -1 masked */
    int64_t *cursor;                      /* [R * El] */
    int64_t nsend, nrecv;
    uint8_t *sendb, *recvb, *rx;
    float *rsf, *rw;
    uint16_t *csend, *crecv;
};

void ts__a2a_expanded_destroy(ts__a2a_expanded *a) {
    if (!a) return;
    free(a->cnt_s), free(a->cnt_r), free(a->scnt), free(a->sdsp), free(a->rcnt), free(a->rdsp);
    free(a->ccnt_s), free(a->cdsp_s), free(a->ccnt_r), free(a->cdsp_r), free(a->pos), free(a->cursor);
    free(a->sendb), free(a->recvb), free(a->rx), free(a->rsf), free(a->rw), free(a->csend), free(a->crecv);
    free(a);
}

ts_status ts__a2a_expanded_create(const uint8_t *x, const float *xs, const int64_t *idx, const float *w, int64_t T,
                                  int64_t H, int64_t S, int64_t K, int64_t E, ts__a2a_expanded **out) {
    *out = NULL;
    ts__a2a_expanded *a = calloc(1, sizeof *a);
    if (!a) return ts__fail(TS_ERR_OUT_OF_MEMORY, "bench ep: no memory for the Alltoallv baseline");
    int me = 0, R = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    *a = (ts__a2a_expanded){.R = R, .me = me, .T = T, .H = H, .S = S, .K = K, .El = E / R, .x = x, .xs = xs,
                            .idx = idx, .w = w, .rowb = H + 4 * S + 4};
    const size_t n = (size_t)R * (size_t)a->El;
    a->cnt_s = calloc(n, sizeof(int)), a->cnt_r = calloc(n, sizeof(int)), a->cursor = calloc(n, 8);
    a->scnt = calloc((size_t)R, sizeof(int)), a->sdsp = calloc((size_t)R, sizeof(int));
    a->rcnt = calloc((size_t)R, sizeof(int)), a->rdsp = calloc((size_t)R, sizeof(int));
    a->ccnt_s = calloc((size_t)R, sizeof(int)), a->cdsp_s = calloc((size_t)R, sizeof(int));
    a->ccnt_r = calloc((size_t)R, sizeof(int)), a->cdsp_r = calloc((size_t)R, sizeof(int));
    a->pos = malloc((size_t)(T * K + 1) * 8);
    /* the buffers hold at most every token's top-k rows (sent) and R times that (received) */
    int64_t nsend = 0;
    for (int64_t i = 0; i < T * K; i++) nsend += idx[i] >= 0;
    int64_t nrecv = 0;
    MPI_Allreduce(&nsend, &nrecv, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD); /* a bound: all rows */
    a->sendb = malloc((size_t)(nsend * a->rowb + 1));
    a->recvb = malloc((size_t)(nrecv * a->rowb + 1));
    a->rx = malloc((size_t)(nrecv * H + 1)), a->rsf = malloc((size_t)(nrecv * S + 1) * 4);
    a->rw = malloc((size_t)(nrecv + 1) * 4);
    a->csend = malloc((size_t)(nrecv * H + 1) * 2), a->crecv = malloc((size_t)(nsend * H + 1) * 2);
    if (!a->cnt_s || !a->cnt_r || !a->cursor || !a->scnt || !a->sdsp || !a->rcnt || !a->rdsp || !a->ccnt_s ||
        !a->cdsp_s || !a->ccnt_r || !a->cdsp_r || !a->pos || !a->sendb || !a->recvb || !a->rx || !a->rsf || !a->rw ||
        !a->csend || !a->crecv) {
        ts__a2a_expanded_destroy(a);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "bench ep: no memory for the Alltoallv baseline");
    }
    if (nrecv * a->rowb > INT_MAX || nrecv * H * 2 > INT_MAX) {
        ts__a2a_expanded_destroy(a);
        return ts__fail(TS_ERR_UNSUPPORTED, "bench ep: the Alltoallv baseline's byte counts exceed int");
    }
    *out = a;
    return TS_OK;
}

ts_status ts__a2a_expanded_dispatch(ts__a2a_expanded *a) {
    const int R = a->R;
    const int64_t El = a->El, H = a->H, S = a->S, K = a->K, T = a->T, rowb = a->rowb;
    /* permute: counts per (rank, expert), then each slot's message in (rank, expert, token) order */
    memset(a->cnt_s, 0, (size_t)R * (size_t)El * sizeof(int));
    for (int64_t i = 0; i < T * K; i++)
        if (a->idx[i] >= 0) a->cnt_s[a->idx[i]]++;
    MPI_Alltoall(a->cnt_s, (int)El, MPI_INT, a->cnt_r, (int)El, MPI_INT, MPI_COMM_WORLD);
    int64_t at = 0, rat = 0;
    for (int r = 0; r < R; r++) {
        int64_t rows = 0, rrows = 0;
        for (int64_t e = 0; e < El; e++) {
            a->cursor[r * El + e] = at + rows;
            rows += a->cnt_s[r * El + e];
            rrows += a->cnt_r[r * El + e];
        }
        a->sdsp[r] = (int)(at * rowb), a->scnt[r] = (int)(rows * rowb);
        a->rdsp[r] = (int)(rat * rowb), a->rcnt[r] = (int)(rrows * rowb);
        a->cdsp_s[r] = (int)(rat * H * 2), a->ccnt_s[r] = (int)(rrows * H * 2); /* combine sends back what came */
        a->cdsp_r[r] = (int)(at * H * 2), a->ccnt_r[r] = (int)(rows * H * 2);
        at += rows, rat += rrows;
    }
    a->nsend = at, a->nrecv = rat;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = a->idx[t * K + k];
            if (e < 0) {
                a->pos[t * K + k] = -1;
                continue;
            }
            const int64_t m = a->cursor[e]++;
            a->pos[t * K + k] = m;
            uint8_t *row = a->sendb + m * rowb;
            memcpy(row, a->x + t * H, (size_t)H);
            memcpy(row + H, a->xs + t * S, (size_t)S * 4);
            memcpy(row + H + 4 * S, a->w + t * K + k, 4);
        }
    MPI_Alltoallv(a->sendb, a->scnt, a->sdsp, MPI_BYTE, a->recvb, a->rcnt, a->rdsp, MPI_BYTE, MPI_COMM_WORLD);
    /* unpermute: expert e's rows (sources ascending, their tokens in order) after e - 1's */
    int64_t row = 0;
    for (int64_t e = 0; e < El; e++)
        for (int s = 0; s < R; s++) {
            int64_t m = a->rdsp[s] / rowb;
            for (int64_t f = 0; f < e; f++) m += a->cnt_r[s * El + f];
            for (int64_t i = 0; i < a->cnt_r[s * El + e]; i++, m++, row++) {
                const uint8_t *src = a->recvb + m * rowb;
                memcpy(a->rx + row * H, src, (size_t)H);
                memcpy(a->rsf + row * S, src + H, (size_t)S * 4);
                memcpy(a->rw + row, src + H + 4 * S, 4);
            }
        }
    return TS_OK;
}

ts_status ts__a2a_expanded_combine(ts__a2a_expanded *a, const uint16_t *ex, uint16_t *y) {
    const int R = a->R;
    const int64_t El = a->El, H = a->H, K = a->K, T = a->T;
    /* the expanded rows back into arrival order (the dispatch's unpack, reversed) */
    int64_t row = 0;
    for (int64_t e = 0; e < El; e++)
        for (int s = 0; s < R; s++) {
            int64_t m = a->rdsp[s] / a->rowb;
            for (int64_t f = 0; f < e; f++) m += a->cnt_r[s * El + f];
            for (int64_t i = 0; i < a->cnt_r[s * El + e]; i++, m++, row++)
                memcpy(a->csend + m * H, ex + row * H, (size_t)H * 2);
        }
    MPI_Alltoallv(a->csend, a->ccnt_s, a->cdsp_s, MPI_BYTE, a->crecv, a->ccnt_r, a->cdsp_r, MPI_BYTE, MPI_COMM_WORLD);
    /* each token's top-k rows summed in k order at the source */
    float *acc = malloc((size_t)H * 4);
    if (!acc) return ts__fail(TS_ERR_OUT_OF_MEMORY, "bench ep: no memory");
    for (int64_t t = 0; t < T; t++) {
        memset(acc, 0, (size_t)H * 4);
        for (int64_t k = 0; k < K; k++) {
            const int64_t m = a->pos[t * K + k];
            if (m < 0) continue;
            const uint16_t *r = a->crecv + m * H;
            for (int64_t j = 0; j < H; j++) acc[j] += bf16_f32(r[j]);
        }
        for (int64_t j = 0; j < H; j++) y[t * H + j] = f32_bf16(acc[j]);
    }
    free(acc);
    return TS_OK;
}

void ts__a2a_expanded_rows(const ts__a2a_expanded *a, int64_t *nrows, const uint8_t **x, const float **sf,
                           const float **w) {
    *nrows = a->nrecv, *x = a->rx, *sf = a->rsf, *w = a->rw;
}

#endif
