/* tilestack model: the DeepSeek-V4-style decoder defined in docs/model.md.
 *
 * Configs, deterministic weights (from a seed, or a safetensors-style file), per-sequence
 * caches, and one decode step. This header is MPI-free: a model created here owns every expert
 * (R = 1). Expert parallelism over MPI comes through model_ep.h.
 *
 * Two independent implementations share this config struct: the optimised path
 * (ts_model_*) and the float64 reference (ts_model_reference_*), which shares nothing with the
 * optimised path but the weight definition (docs/model.md §2). */
#ifndef TILESTACK_MODEL_H
#define TILESTACK_MODEL_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_MODEL_MAX_LAYERS 128

typedef enum ts_model_score_func {
    TS_MODEL_SCORE_SQRTSOFTPLUS = 0,
    TS_MODEL_SCORE_SIGMOID = 1,
    TS_MODEL_SCORE_SOFTMAX = 2
} ts_model_score_func;

typedef enum ts_model_attention {
    TS_MODEL_ATTN_V4 = 0,  /* window + compressed rows, CSA indexer, 584-byte cache */
    TS_MODEL_ATTN_V32 = 1  /* MLA absorbed, 656-byte cache, top-2048 indexer (docs/model.md §8) */
} ts_model_attention;

/* Field names are the config keys of docs/model.md §1. */
typedef struct ts_model_config {
    char name[64];
    int64_t vocab_size, dim, n_layers, n_hash_layers;
    int32_t compress_ratios[TS_MODEL_MAX_LAYERS];
    int64_t n_heads, head_dim, rope_head_dim, q_lora_rank, o_groups, o_lora_rank, window_size;
    int64_t index_n_heads, index_head_dim, index_topk;
    int64_t n_routed_experts, n_activated_experts, moe_inter_dim;
    ts_model_score_func score_func;
    double route_scale, swiglu_limit;
    int64_t hc_mult, hc_sinkhorn_iters;
    double hc_eps, norm_eps;
    double rope_theta, compress_rope_theta, rope_factor;
    int64_t original_seq_len, beta_fast, beta_slow;
    int64_t max_seq_len;
    ts_model_attention attention;
    uint64_t seed;
} ts_model_config;

/* "dsv4-mini" (the default), "dsv4-flash-layer", "dsv4-tiny", "dsv32-tiny" (dsv4-tiny with
 * attention = v32). TS_ERR_INVALID_ARGUMENT for other names (the message lists the valid
 * ones). */
TS_API ts_status ts_model_config_builtin(const char *name, ts_model_config *cfg);
/* A JSON object with §1 keys; missing keys take dsv4-mini's values, unknown keys, bad types and
 * values failing ts_model_config_validate are errors naming the key. */
TS_API ts_status ts_model_config_parse_json(const char *text, ts_model_config *cfg);
TS_API ts_status ts_model_config_to_json(const ts_model_config *cfg, char *buf, size_t cap);
/* The §1 checks, for num_ranks expert-parallel ranks (1 here). */
TS_API ts_status ts_model_config_validate(const ts_model_config *cfg, int64_t num_ranks);

typedef struct ts_model ts_model;

/* Weights generated from cfg->seed (docs/model.md §2), caches for max_batch sequences of up to
 * cfg->max_seq_len tokens, every sequence empty (position 0). */
TS_API ts_status ts_model_create(const ts_model_config *cfg, int64_t max_batch, ts_model **out);
/* Weights from a file written by ts_model_save_weights (the config comes from its header). */
TS_API ts_status ts_model_load(const char *path, int64_t max_batch, ts_model **out);
TS_API ts_status ts_model_save_weights(const ts_model *m, const char *path);

/* ---- Hugging Face checkpoint directories (docs/models.md) */

/* The tensor-name layouts of a DeepSeek-V4 checkpoint directory (docs/models.md). */
typedef enum ts_hf_layout {
    TS_HF_LAYOUT_RELEASE = 0,   /* DeepSeek's release: embed.weight, layers.N.attn.wq_a.weight + .scale */
    TS_HF_LAYOUT_HF = 1,        /* transformers' save_pretrained: model.embed_tokens.weight,
                                   model.layers.N.attn.wq_a.weight, head.weight, ... */
    TS_HF_LAYOUT_HF_MODULES = 2 /* transformers' module names: model.layers.N.self_attn.q_a_proj.weight,
                                   lm_head.weight, experts merged into mlp.experts.gate_up_proj */
} ts_hf_layout;

/* A DeepseekV4ForCausalLM checkpoint directory: config.json and model.safetensors or
 * model.safetensors.index.json with its shards, in either layout (found from the names).
 * FP8 / FP4 weight bytes stay in the mapped files (views); scales, bf16 -> f32 and tid2eid
 * are converted; a checkpoint without quantization_config is quantised at load with
 * tilestack's quantisers (FP8 128x128 dense, FP4 1x32 experts). mtp.* is not loaded. Caches
 * hold min(max_position_embeddings, 8192) tokens per sequence (rounded down to a multiple
 * of every compress ratio). One line on stderr reports the bytes mapped, converted and
 * packed. Unknown architecture / quantisation / config keys: TS_ERR_UNSUPPORTED naming them;
 * out-of-range values, missing / extra tensors, wrong dtypes or shapes, NaN scales, bad
 * tid2eid entries: TS_ERR_INVALID_ARGUMENT naming the file and the tensor (or key). */
TS_API ts_status ts_model_load_dir(const char *dir, int64_t max_batch, ts_model **out);
/* Resident memory (docs/models.md "Memory per rank"): once the kernels' packed copies exist,
 * ts_model_load_dir drops the records they were packed from (the FP8 / FP4 weights and scales,
 * the bf16 head and indexer weights_proj): their file pages are advised away, their converted
 * buffers freed. Such a model decodes as any other but cannot be saved or exported
 * (TS_ERR_UNSUPPORTED). ts_model_load_dir_keep loads the same model keeping every record (the
 * file's bytes and the packed copies both resident), for ts_model_save_weights /
 * ts_model_export_hf. */
TS_API ts_status ts_model_load_dir_keep(const char *dir, int64_t max_batch, ts_model **out);

/* ---- memory plan of a checkpoint directory (ts_model_plan_dir, docs/models.md "Memory per
 * rank"): the bytes each of R ranks needs, from config.json and the safetensors headers alone. */
#define TS_MODEL_PLAN_MAX_RANKS 8

typedef struct ts_model_plan_rank {
    int64_t ranks;   /* R */
    int64_t experts; /* routed experts per layer on each rank: E / R (rank i: [i E/R, (i+1) E/R)) */
    /* weights, split as ts_model_load_dir handles them: records viewing the mapped files,
     * records converted into their own buffers (ue8m0 scales -> f32, bf16 -> f32, unaligned
     * copies), records quantised at load (an unquantised checkpoint), the kernels' packed
     * copies; released: the part of mapped + converted + quantised dropped once packed
     * (ts_model_load_dir), not held. shared_*: everything but the routed experts; expert_*:
     * this rank's experts. */
    uint64_t shared_mapped, shared_converted, shared_quantized, shared_packed, shared_released;
    uint64_t expert_mapped, expert_converted, expert_quantized, expert_packed, expert_released;
    /* caches for batch sequences of context tokens (docs/model.md §5): MODEL1 584-byte rows
     * (window ring + compressed rows), the indexer's FP4 rows, compressor states, positions.
     * V3 / V3.2 (docs/models.md "V3"): bf16 latent rows (576 values) in 64-token blocks, V3.2's
     * f32 indexer keys, no compressor (compressor_state: the positions) */
    uint64_t kv_cache, indexer_cache, compressor_state;
    uint64_t workspace; /* the step workspace after the first prefill: max(batch, 48) rows */
    uint64_t total;     /* the bytes held: every field above summed, less the released ones
                         * (mapped pages that stay counted as resident) */
} ts_model_plan_rank;

typedef struct ts_model_plan {
    char model_type[32];    /* config.json's: deepseek_v4, deepseek_v3 or deepseek_v32 */
    /* true: tilestack has the expert-parallel model an R > 1 row describes
     * (ts_model_load_dir_ep; every architecture it plans has one now) */
    bool ep_model;
    int64_t batch, context; /* context: max_seq_len the caches are sized for (see below) */
    int64_t n_layers, n_routed_experts, n_tensors;
    int32_t n;              /* rows of r */
    ts_model_plan_rank r[TS_MODEL_PLAN_MAX_RANKS];
} ts_model_plan;

/* The plan for ranks R (0: R = 1, 2, 4, 8; otherwise 1 <= R <= 1024 dividing
 * n_routed_experts) with caches for `batch` sequences of `context` tokens (context rounded down
 * to a multiple of every compress ratio, as the loader rounds max_seq_len; 0: the loader's own
 * max_seq_len). Reads config.json, the index and the safetensors headers with
 * ts_model_load_dir's checks and messages, never the tensor data. An expert-parallel rank
 * (R > 1) is planned with the single-process layouts for its E / R experts (the EP model's
 * Mega MoE weights and buffers are not counted). V3 / V3.2 directories (model_type deepseek_v3 /
 * deepseek_v32): the V3 loader's holds, caches and workspace; context is used as given (no
 * compress ratios); their EP ranks' low-latency buffer is not counted either. */
TS_API ts_status ts_model_plan_dir(const char *dir, int64_t ranks, int64_t batch, int64_t context,
                                   ts_model_plan *out);

typedef struct ts_hf_export_options {
    ts_hf_layout layout;
    int32_t shards;  /* <= 1: model.safetensors; N > 1: N shards + model.safetensors.index.json */
    bool dequantize; /* FP8 / FP4 weights written as BF16 (exactly), no quantization_config */
} ts_hf_export_options;

/* Writes m as a checkpoint directory `dir` (config.json + safetensors) that ts_model_load_dir
 * reads back to the same weights bit for bit (f32 records stay F32). Written into a temporary
 * directory beside `dir` and renamed into place at the end: `dir` must not exist or be an
 * empty directory. opts NULL: release layout, one file, quantised. */
TS_API ts_status ts_model_export_hf(const ts_model *m, const char *dir,
                                    const ts_hf_export_options *opts);

TS_API void ts_model_free(ts_model *m); /* NULL is a no-op */
TS_API const ts_model_config *ts_model_get_config(const ts_model *m);

/* Empty sequence `seq` (position 0, caches cleared). */
TS_API ts_status ts_model_reset_sequence(ts_model *m, int64_t seq);
/* Fill sequence `seq`'s caches as if `context_len` tokens had been decoded, with valid random
 * rows and compressor states from `seed` (for benchmarks; docs/model.md §5). */
TS_API ts_status ts_model_prefill_random(ts_model *m, int64_t seq, int64_t context_len,
                                         uint64_t seed);
TS_API int64_t ts_model_sequence_position(const ts_model *m, int64_t seq);

/* ---- paged caches (docs/model.md §5 "Pages"). A V4-attention model keeps its compressed rows
 * and indexer rows in a pool of pages, as FlashMLA's block table: a sequence takes a page when
 * its position enters it and gives its pages back on ts_model_reset_sequence (the window ring
 * and the compressor states stay one per sequence slot). Placement never changes a bit. A
 * step whose sequences need more pages than are free fails with TS_ERR_OUT_OF_MEMORY, nothing
 * advanced. V3 / V3.2 caches are not paged: one max_seq_len slot per sequence, reported as
 * max_batch x pages_per_sequence pages (paged = false). */
typedef struct ts_model_kv_pages {
    bool paged;
    int64_t page_tokens;        /* tokens a page holds */
    int64_t pages_total, pages_free;
    int64_t pages_per_sequence; /* pages of a sequence of max_seq_len tokens */
    uint64_t page_bytes;        /* one page's bytes over every layer */
} ts_model_kv_pages;

TS_API ts_status ts_model_get_kv_pages(const ts_model *m, ts_model_kv_pages *out);
/* A new pool of `pages` pages of page_tokens tokens (0: the default, 256 raised to a multiple of
 * every compress ratio, at most max_seq_len), replacing the one ts_model_create makes
 * (max_batch x pages_per_sequence: every sequence can reach max_seq_len). Every sequence must be
 * empty (TS_ERR_INVALID_ARGUMENT otherwise, as for page_tokens not a multiple of every compress
 * ratio or pages < 1); TS_ERR_UNSUPPORTED for a model without pages. Not collective: every rank
 * of an expert-parallel model makes the same call. */
TS_API ts_status ts_model_set_kv_pages(ts_model *m, int64_t page_tokens, int64_t pages);

/* One decode step: for i < n, sequence seqs[i] consumes token tokens[i] at its current
 * position, which then advances by one. logits: f32 [n, vocab_size] row-major (may be NULL
 * when only the caches should advance). Sequences must be distinct. A sequence at
 * max_seq_len gives TS_ERR_INVALID_ARGUMENT, nothing advanced. */
TS_API ts_status ts_model_decode(ts_model *m, int64_t n, const int64_t *seqs,
                                 const int32_t *tokens, float *logits);

/* Prompt prefill (docs/model.md "Prefill"): sequence `seq` consumes tokens[0 .. n_tokens) at
 * positions pos .. pos + n_tokens - 1, bit for bit as n_tokens calls of ts_model_decode(m, 1,
 * &seq, &tokens[t], ...) would (caches, compressor states, position and logits), but in chunks
 * of rows that go through each layer together (every GEMM sees M = chunk rows). last_logits:
 * f32 [vocab_size], the last token's (NULL: only the caches advance). The first call grows
 * the step workspace once to the chunk (max(max_batch, 48) rows). Errors, nothing advanced:
 * TS_ERR_NULL_POINTER (m, tokens), TS_ERR_INVALID_ARGUMENT (seq outside [0, max_batch),
 * n_tokens < 1, a token outside [0, vocab_size), pos + n_tokens > max_seq_len),
 * TS_ERR_OUT_OF_MEMORY (the workspace). On an expert-parallel model (model_ep.h) the call is
 * collective: every rank makes it, a rank without a prompt with n_tokens = 0 (tokens may then
 * be NULL); a rank's bad arguments give its code there and TS_ERR_PEER naming it elsewhere,
 * nothing advanced on any rank; the logits are the single-process model's bits. */
TS_API ts_status ts_model_prefill(ts_model *m, int64_t seq, int64_t n_tokens,
                                  const int32_t *tokens, float *last_logits);
/* The same with the logits of every token: f32 [n_tokens, vocab_size] row-major (row t = the
 * logits of decoding tokens[t]; for teacher-forced evaluation). logits NULL is
 * TS_ERR_NULL_POINTER. */
TS_API ts_status ts_model_prefill_all_logits(ts_model *m, int64_t seq, int64_t n_tokens,
                                             const int32_t *tokens, float *logits);

/* Sampling (docs/model.md §4 "Head") for n rows of logits [n, vocab]: top_k == 1 is greedy (the
 * largest logit, ties to the lower id); top_k > 1 draws from the softmax of the top_k largest
 * logits (ts_topk; ties to the lower id) with temperature 1, one uniform per row from splitmix64
 * advancing *rng_state (so a run is reproducible from its seed). top_k in [1, min(vocab,
 * TS_TOPK_MAX_K)]. */
TS_API ts_status ts_model_sample(const float *logits, int64_t n, int64_t vocab, int64_t top_k,
                                 uint64_t *rng_state, int32_t *tokens);

/* ---- sampling for generation (docs/model.md "Sampling"; `tilestack generate` / `chat`) ----
 * One row of f32 logits [vocab] to one token id:
 *   greedy when temperature == 0 or top_k == 1: the largest logit, ties to the lower id;
 *   otherwise the candidates are ordered by logit, descending, ties to the lower id (the order
 *   does not depend on the temperature); top_k > 0 keeps the first top_k; top_p < 1 then keeps
 *   the shortest prefix of those whose probabilities sum to at least top_p (probabilities:
 *   w_i = exp((logit_i - max logit) / temperature) in double, 0 below exp(-708) so that no sum
 *   meets a subnormal; over the top-k survivors); one
 *   uniform u in [0, 1) from splitmix64 advancing *rng_state (ts_model_sample's scheme); the
 *   kept tokens are walked in increasing id order, token i owning an interval of width w_i,
 *   and the one whose interval holds u * (sum of the kept w) is chosen.
 * A logit of -inf is a masked token: never chosen, never counted. NaN or +inf anywhere is
 * TS_ERR_NONFINITE; a row with no finite logit TS_ERR_INVALID_ARGUMENT. Nothing depends on the
 * thread count. Scratch comes from the calling thread's arena (no allocation once warm). */
#define TS_SAMPLER_MIN_TEMPERATURE 1e-6
#define TS_SAMPLER_MAX_TEMPERATURE 1e6

typedef struct ts_sampler_params {
    double temperature; /* 0: greedy; else in [TS_SAMPLER_MIN_TEMPERATURE, _MAX_] */
    int64_t top_k;      /* 0: no limit; else in [1, vocab]; 1: greedy */
    double top_p;       /* in (0, 1]; 1: no limit */
} ts_sampler_params;

/* temperature 1, top_k 0, top_p 1: plain sampling from the softmax. */
TS_API ts_sampler_params ts_sampler_default_params(void);
/* TS_ERR_INVALID_ARGUMENT naming the field that is out of its range above. */
TS_API ts_status ts_sampler_check(const ts_sampler_params *p, int64_t vocab);
/* rng_state may be NULL only for the greedy settings (they draw nothing and leave it alone). */
TS_API ts_status ts_sampler_sample(const float *logits, int64_t vocab,
                                   const ts_sampler_params *p, uint64_t *rng_state,
                                   int32_t *token);
/* Log-probabilities of the softmax of the logits at temperature 1 (log(exp(l_i - m) / sum) in
 * double, m the largest logit; -inf logits masked out as above): of `token` into
 * *token_logprob (skipped when token < 0 or token_logprob is NULL; -inf for a masked token),
 * and of the top_n largest, ordered as the sampler orders candidates, into top_ids /
 * top_logprobs (slots past the number of finite logits get id -1 and -inf). top_n in
 * [0, vocab]. */
TS_API ts_status ts_sampler_logprobs(const float *logits, int64_t vocab, int32_t token,
                                     int64_t top_n, double *token_logprob, int32_t *top_ids,
                                     double *top_logprobs);

/* ---- the float64 reference (src/model_ref/; docs/model.md, "independent implementations") */

typedef struct ts_model_reference ts_model_reference;

/* Generates the same weights (docs/model.md §2) on its own and keeps them dequantised in
 * float64; one sequence. Meant for small configs (dsv4-tiny). */
TS_API ts_status ts_model_reference_create(const ts_model_config *cfg,
                                           ts_model_reference **out);
TS_API void ts_model_reference_free(ts_model_reference *r);
/* One token at the sequence's next position; logits f64 [vocab_size]. */
TS_API ts_status ts_model_reference_decode(ts_model_reference *r, int32_t token,
                                           double *logits);

#ifdef __cplusplus
}
#endif

#endif
