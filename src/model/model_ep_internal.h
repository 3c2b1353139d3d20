/* Internal state of an expert-parallel model (model_ep.c: lifetime, agreement, stats;
 * model_ep_moe.c: the routed experts through Mega MoE and the collective step). MPI-only. */
#ifndef TILESTACK_MODEL_EP_INTERNAL_H
#define TILESTACK_MODEL_EP_INTERNAL_H

#include "model_internal.h"

#include "tilestack/ep.h"
#include "tilestack/mega_moe.h"
#include "tilestack/model_ep.h"

struct ts__model_ep {
    MPI_Comm comm; /* a duplicate of the caller's */
    int rank, R;
    int64_t E, El, lo, K, H, I, T, nlayers;
    bool unfused;
    double timeout_s;
    ts_mega_moe_buffer *buf; /* V4 (NULL for V3) */
    /* V3 / V3.2 (model_ep_v3.c; NULL for V4): the low-latency EP buffer, its receive rows
     * [El][R * T][H] bf16 (the experts' outputs in place) */
    ts_ep_buffer *ll;
    uint16_t *recv_x;
    ts_mega_moe_views views;
    ts_mega_moe_weights *w[TS_MODEL_MAX_LAYERS];
    int64_t rows_cap;     /* rows of one call: max(max_batch, TS__PREFILL_ROWS), a prefill chunk */
    uint16_t *routed;     /* [rows_cap][H] the combine's output */
    int32_t *recv;        /* [El] one call's receive counts */
    int64_t *cnt;         /* [nlayers][El] this rank's experts, since the last reset */
    int64_t *gathered;    /* [R][nlayers][El] */
    int64_t *layer_tot;   /* [nlayers][E] */
    int64_t *tot;         /* [E] */
    int64_t steps;
    double moe_sec, dispatch_bytes, combine_bytes;
};

/* model_ep_moe.c: the hooks an EP model installs (model_internal.h). */
ts_status ts__model_ep_routed(ts_model *m, int64_t L, int64_t n, const uint16_t *a,
                              const uint16_t **routed);
ts_status ts__model_ep_decode(ts_model *m, int64_t n, const int64_t *seqs,
                              const int32_t *tokens, float *logits);
ts_status ts__model_ep_prefill(ts_model *m, int64_t seq, int64_t n, const int32_t *tokens,
                               float *logits, bool all, const char *fn);

/* model_ep_v3.c: the V3 EP model's buffer (collective), its routed experts' hook. */
ts_status ts__v3_ep_buffer(ts_model *m, const ts_model_ep_options *opts);
ts_status ts__v3_ep_routed(ts_model *m, int64_t L, int64_t n, const uint16_t *a,
                           const uint16_t **routed);

/* One rank's verdict in an agreement (model_ep.c): its status on its own arguments (message
 * when not TS_OK), what must be equal everywhere (creation), and n: max_batch at creation, the
 * chunk count of a prefill. */
typedef struct ts__ep_hello {
    int32_t status, unfused;
    int64_t n;
    uint64_t cfg_hash;
    char msg[200];
} ts__ep_hello;
void ts__model_ep_set_verdict(ts__ep_hello *h, ts_status st);
/* Every rank learns every verdict: the first failing rank's error (TS_ERR_PEER on the others),
 * then (compare) the first rank whose config / switch differs from rank 0's; *max_n (not NULL)
 * the largest n. */
ts_status ts__model_ep_agree(MPI_Comm comm, const ts__ep_hello *mine, int64_t *max_n, int tag,
                             double timeout, const char *fn, bool compare);

/* Tags of the model's own agreements on ep->comm (creation's are on the caller's comm). */
#define TS__EP_TAG_STATS 0x7E53
#define TS__EP_TAG_PREFILL 0x7E54
#define TS__EP_TAG_STEP 0x7E55

/* model_ep.c: every rank sends `bytes` from mine and receives every rank's into all[R][bytes],
 * point to point with a deadline (a rank that does not come is named: TS_ERR_TIMEOUT). */
ts_status ts__model_ep_allgather(MPI_Comm comm, const void *mine, void *all, int bytes, int tag,
                                 double timeout_s, const char *what);

#endif
