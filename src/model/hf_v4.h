/* DeepSeek-V4 Hugging Face checkpoints (docs/models.md): the config.json mapping
 * (hf_config_v4.c), the tensor-name tables of the two layouts (hf_names_v4.c), the loader
 * (hf_load_v4.c) and the writer (hf_export_v4.c). Not installed. */
#ifndef TILESTACK_HF_V4_H
#define TILESTACK_HF_V4_H

#include "model_internal.h"

/* max_seq_len of a model loaded from a directory: caches for this many tokens per sequence at
 * most (max_position_embeddings is 1M for V4-Flash) */
#define TS__HF_MAX_SEQ 8192

/* What config.json says beyond ts_model_config. */
typedef struct ts__hf_v4_info {
    bool quantized;     /* quantization_config present: FP8 weights + FP4 experts in the files */
    bool tied;          /* tie_word_embeddings: the head is the embedding */
    int64_t n_mtp;      /* num_nextn_predict_layers (not loaded) */
} ts__hf_v4_info;

/* config.json text -> cfg (name from `name`, seed 0) and info. Every message starts with
 * `path` and names the config.json key: an unknown architecture, model type, quantisation or
 * key is TS_ERR_UNSUPPORTED, a bad type or an out-of-range value TS_ERR_INVALID_ARGUMENT (the
 * value included). The result passed ts_model_config_validate. */
ts_status ts__hf_v4_parse_config(const char *text, size_t len, const char *path,
                                 const char *name, ts_model_config *cfg, ts__hf_v4_info *info);

/* The config.json that ts__hf_v4_parse_config reads back to cfg (except name / seed):
 * release-style keys, plus transformers' layer_types / compress_rates when an HCA ratio is not
 * 128 (transformers' compress_ratios knows only 0 / 4 / 128). malloc'ed. */
ts_status ts__hf_v4_config_json(const ts_model_config *cfg, bool quantized, char **out);

/* Where a tilestack tensor (a §2 spec) lives in a checkpoint. */
typedef struct ts__hf_src {
    char name[192];  /* the tensor holding the values */
    char scale[208]; /* its scale tensor, for an FP8 / FP4 spec of a quantised checkpoint */
    /* the HF layout merges each layer's experts into [E, rows, cols] tensors (gate_up_proj =
     * w1 rows then w3 rows, down_proj = w2): expert >= 0 is the block, row0 the first row of
     * this spec in it, rows_per_expert the block's height */
    int64_t expert, row0, rows_per_expert;
} ts__hf_src;

/* The source of spec s in layout lay (tied: the head reads the embedding). */
ts_status ts__hf_v4_source(const ts__wspec *s, const ts_model_config *cfg, ts_hf_layout lay,
                           bool tied, ts__hf_src *src);
/* A checkpoint tensor that tilestack does not load on purpose (the MTP layers). */
bool ts__hf_v4_ignored(const char *name);

/* The loader (hf_load_v4.c), in steps so that expert-parallel ranks (model_ep.c) can agree on
 * the config before binding. open: config.json parsed, the layout found, the safetensors headers
 * read and the files mapped (no tensor data touched). bind: every tensor's name, dtype and
 * shape checked (the whole checkpoint, on every rank), then the records of every weight except
 * the routed experts outside [lo, hi) filled (views into the mappings, or converted) and their
 * values checked; the model (ts__model_alloc'ed, not yet ts__model_create_from_records) takes
 * the mappings, so bind succeeds at most once per open. report: the stderr line of the bytes
 * mapped, converted, quantised, `packed` and released after packing (m's load_stats), the
 * bytes m holds (weights, caches, workspace) and the process's resident memory, after `who`.
 * close: after bind, or instead. */
typedef struct ts__hf_v4_loader ts__hf_v4_loader;
ts_status ts__hf_v4_open(const char *dir, ts__hf_v4_loader **out);
const ts_model_config *ts__hf_v4_config(const ts__hf_v4_loader *l);
/* layer_fn (NULL: none) runs once layer L's records are all filled and checked, layer by
 * layer, before the next layer's are: the caller binds (packs) the layer there and may release
 * its records, so that the load's peak holds one layer's converted copies (the f32 expert
 * scales) rather than every layer's. */
typedef ts_status (*ts__hf_layer_fn)(void *ctx, ts_model *m, int64_t L);
ts_status ts__hf_v4_bind(ts__hf_v4_loader *l, int64_t max_batch, int64_t lo, int64_t hi,
                         ts__hf_layer_fn layer_fn, void *ctx, ts_model **out);
void ts__hf_v4_report(const ts__hf_v4_loader *l, const char *who, const ts_model *m, size_t packed);
void ts__hf_v4_close(ts__hf_v4_loader *l);

/* ts_model_load_dir's bytes for one tensor of the §2 list, from the headers alone: its records
 * kept as views into the mapping, copied / converted into buffers, quantised at load, the
 * kernels' packed copy binding makes, and the records' bytes ts__model_release_packed drops
 * after packing (released: part of mapped + converted + quantized, not held). */
typedef struct ts__hf_plan_item {
    const ts__wspec *spec;
    const ts_model_config *cfg; /* the loader's */
    size_t mapped, converted, quantized, packed, released;
} ts__hf_plan_item;
typedef ts_status (*ts__hf_v4_plan_fn)(void *ctx, const ts__hf_plan_item *it);
/* Opens dir as ts_model_load_dir does (config.json, index, safetensors headers, the same
 * checks and messages, pass 1) and calls fn for every tensor with what pass 2 would do; reads
 * no tensor data. cfg: the config the loader would build. */
ts_status ts__hf_v4_plan(const char *dir, ts__hf_v4_plan_fn fn, void *ctx, ts_model_config *cfg);

/* config.json (copied as it is) + a model.safetensors whose header lists every tensor of that
 * config (release layout, quantised) over a data section left as a hole (hf_export_v4.c; written as an export is, atomically into a
 * new directory). A V3 / V3.2 config (ts__v3_is_v3_config) gets its tensors as DeepSeek's
 * release stores them: FP8 roles F8_E4M3 + F32 weight_scale_inv when quantised, the router
 * bias F32, the rest BF16. */
ts_status ts__hf_v4_write_skeleton(const char *config_path, const char *dir);

#endif
