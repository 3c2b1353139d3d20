/* tilestack model_ep: the model of model.h decoding across expert-parallel MPI ranks
 * (docs/model.md §6 and "Expert parallelism (model_ep.h)").
 *
 * Rank q of R owns experts [q·E/R, (q+1)·E/R) of every MoE layer (it generates or binds only
 * those) and its own sequences (data-parallel attention); every other weight is replicated.
 * Each MoE layer's routed experts run as one ts_fp8_fp4_mega_moe call (or, with
 * opts->unfused or across machines, ts_mega_moe_unfused: EP dispatch + grouped GEMM + SwiGLU
 * cast + grouped GEMM + EP combine); a token's logits are bit-identical to the single-process ts_model_create model's
 * for any R, path or thread count.
 *
 * Like ep.h and mega_moe.h this header needs <mpi.h> and exists only in builds with MPI
 * (TILESTACK_HAVE_EP); it is not part of the umbrella tilestack.h. The ts_model returned works
 * with the functions of model.h; ts_model_decode and ts_model_free on it are collective. */
#ifndef TILESTACK_MODEL_EP_H
#define TILESTACK_MODEL_EP_H

#include <mpi.h>
#include <stdbool.h>

#include "tilestack/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL = defaults (all fields zero). */
typedef struct ts_model_ep_options {
    bool unfused;     /* MoE layers through ts_mega_moe_unfused instead of the fused call */
    double timeout_s; /* deadline of every wait on a peer; 0 = env TS_EP_TIMEOUT_S or 100 s */
    /* the Mega MoE buffer's nodes (ts_mega_moe_buffer_options.ranks_per_node): 0 = the
     * machines'. Ranks over several nodes always take the unfused path (the fused one needs
     * shared memory between all ranks): the same bits. */
    int32_t ranks_per_node;
} ts_model_ep_options;

/* Collective over comm. As ts_model_create, with this rank's experts only. max_batch may
 * differ across ranks (the Mega MoE buffer takes the largest). Errors, returned on every
 * rank: E % R != 0 (TS_ERR_INVALID_ARGUMENT naming both numbers), a config (or the unfused
 * switch) differing across ranks (TS_ERR_INVALID_ARGUMENT naming the first rank that differs
 * from rank 0), a failure on some rank (TS_ERR_PEER naming it). */
TS_API ts_status ts_model_create_ep(const ts_model_config *cfg, MPI_Comm comm, int64_t max_batch,
                                    const ts_model_ep_options *opts, ts_model **out);
/* Collective. As ts_model_load (every check of the file), keeping this rank's experts only. */
TS_API ts_status ts_model_load_ep(const char *path, MPI_Comm comm, int64_t max_batch,
                                  const ts_model_ep_options *opts, ts_model **out);
/* Collective. As ts_model_load_dir (docs/models.md), a DeepSeek-V4 checkpoint directory that
 * every rank reads (the same one, or a copy of it): every rank checks config.json and every
 * tensor's name, dtype and shape in the headers, then binds the replicated weights and only its
 * own routed experts (views into the mapped files; the other ranks' expert bytes are never
 * read, so never paged in, converted or packed). One line per rank on stderr: the bytes mapped
 * and used, converted, quantised at load and packed. Errors as ts_model_load_ep: a rank whose
 * directory fails gives its own error there and TS_ERR_PEER naming it on the others. */
TS_API ts_status ts_model_load_dir_ep(const char *dir, MPI_Comm comm, int64_t max_batch,
                                      const ts_model_ep_options *opts, ts_model **out);

/* ts_model_decode on an EP model is collective: every rank calls it for every step, each with
 * its own n sequences (n may differ across ranks and may be 0). The ranks first agree on the
 * step: bad arguments on one rank give it the specific error and the others TS_ERR_PEER
 * naming it, before any cache changes. A rank that does not come (dead, or skipping the step)
 * gives the others TS_ERR_TIMEOUT naming it within timeout_s; the model can then only be
 * freed. */

/* Counters since create or the last reset. moe_sec: this rank's wall time inside the MoE
 * calls (routed experts, communication included); dispatch_bytes / combine_bytes: this rank's
 * traffic counted as DeepEP's test_low_latency.py counts it, per valid (token, slot) sent:
 * hidden + hidden/128·4 + 16 bytes dispatched (FP8 row, scales, header), 2·hidden combined.
 * expert_tokens[e] (e < num_experts = E): (token, slot) pairs expert e received, summed over
 * ranks, layers and steps (sum = tokens of all ranks × top-k × layers, hash layers included);
 * layer_expert_tokens [num_layers][E] the same per layer. The arrays belong to the model and
 * stay valid until the next get / reset / free. get_stats is collective (the counts are
 * gathered); reset is local. */
typedef struct ts_model_ep_stats {
    int64_t steps;
    double moe_sec, dispatch_bytes, combine_bytes;
    int64_t *expert_tokens;
    int64_t num_experts;
    int64_t *layer_expert_tokens;
    int64_t num_layers;
    int32_t rank, num_ranks;
} ts_model_ep_stats;

TS_API ts_status ts_model_ep_get_stats(ts_model *m, ts_model_ep_stats *out);
TS_API ts_status ts_model_ep_reset_stats(ts_model *m);

#ifdef __cplusplus
}
#endif
#endif
