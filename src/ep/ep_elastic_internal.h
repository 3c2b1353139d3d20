/* Internal state of the V2 ElasticBuffer layer (ep_elastic*.c), built on the V1 buffer. */
#ifndef TILESTACK_EP_ELASTIC_INTERNAL_H
#define TILESTACK_EP_ELASTIC_INTERNAL_H

#include "ep/ep_internal.h"
#include "tilestack/ep_elastic.h"

struct ts_ep_elastic_buffer {
    ts_ep_buffer *v1;
    int64_t num_bytes, num_max_tokens_per_rank;
    /* Private memory grown on demand (never shrunk, so steady state allocates nothing):
     * layout arrays and zero weights of one dispatch, the expanded outputs, the per-token
     * weights of an expanded combine. */
    uint8_t *scratch;
    int64_t scratch_cap;
    uint8_t *expand;
    int64_t expand_cap;
    uint8_t *comb_w;
    int64_t comb_w_cap;
};

struct ts_ep_elastic_handle {
    const ts_ep_elastic_buffer *buf;
    ts_ep_handle *v1;
    bool do_expand;
    int64_t num_experts, expert_alignment, num_max_tokens_per_rank;
    int32_t num_sms, num_ranks;
    int64_t num_tokens, num_topk, num_recv, num_expanded;
    int64_t *topk_idx;   /* [N, K] */
    int32_t *psum_rank;  /* [R] */
    int32_t *psum_expert, *counts_list, *unaligned; /* [E/R] each */
    int32_t *meta;       /* [num_recv, 2 + K] */
};

/* Fills h->meta slots (columns 2..), the per-expert arrays and num_expanded from the local
 * expert ids of the received rows (recv_idx i32/i64 [num_recv, K], -1 = not here). */
void ts__ep_elastic_plan(ts_ep_elastic_handle *h, const ts_tensor *recv_idx);

/* Copies every received row (x, scales, weight of each slot) to its expanded rows; padding
 * rows get weight 0 and, with zero_padding, zero x / scales. Outputs are contiguous. This is
 * the fallback of the senders' own placement (ts__ep_dispatch_expanded: internode, or rows
 * that do not fit the dispatch area). */
typedef struct ts__ep_elastic_expand_io {
    const ts_tensor *x, *sf, *w; /* V1 outputs [num_recv, ...]; sf / w data may be NULL */
    uint8_t *ex, *esf;           /* [num_expanded, row bytes] */
    float *ew;                   /* [num_expanded] or NULL */
    bool zero_padding;
} ts__ep_elastic_expand_io;
void ts__ep_elastic_expand(const ts_ep_elastic_handle *h, const ts__ep_elastic_expand_io *io, int nthreads);
/* The padding part alone (rows placed by the senders; io->x, sf, w unused), rows of xrow /
 * srow bytes. */
void ts__ep_elastic_pad(const ts_ep_elastic_handle *h, const ts__ep_elastic_expand_io *io, int64_t xrow, int64_t srow);

/* Expanded combine's local reduction (ep_elastic.h): y [num_recv, hidden] bf16 contiguous,
 * yw [num_recv, K] (or NULL) the per-token weights for the V1 combine. */
void ts__ep_elastic_reduce(const ts_ep_elastic_handle *h, const ts_tensor *x, const ts_tensor *w, uint16_t *y,
                           float *yw, int nthreads);

#endif
