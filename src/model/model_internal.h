/* Internal structures of the optimised model path (src/model/, docs/model.md). */
#ifndef TILESTACK_MODEL_INTERNAL_H
#define TILESTACK_MODEL_INTERNAL_H

#include "tilestack/model.h"
#include "tilestack/gemm.h"
#include "tilestack/flash_mla.h"
#include "tilestack/numerics.h"

#include "../core/internal.h"
#include "../numerics/bf16_inline.h"

#include <stdbool.h>
#include <string.h>

/* ---- strict JSON reader (model_json.c), shared by the config parser and the weight file */
typedef enum ts__json_kind {
    TS__JSON_NULL, TS__JSON_BOOL, TS__JSON_NUM, TS__JSON_STR, TS__JSON_ARR, TS__JSON_OBJ
} ts__json_kind;

typedef struct ts__json {
    ts__json_kind kind;
    bool b;
    char *str;   /* STR: decoded UTF-8 (NUL-terminated); NUM: the literal text */
    double num;  /* NUM */
    int64_t n;   /* ARR / OBJ: element count */
    struct ts__json *items; /* ARR / OBJ values */
    char **keys;            /* OBJ keys */
} ts__json;

/* Parses the whole text (one value, whitespace around it). On error *out is untouched and the
 * message names what and where (`what` prefixes it, e.g. "config"). */
ts_status ts__json_parse(const char *text, size_t len, const char *what, ts__json **out);
void ts__json_free(ts__json *j);
const ts__json *ts__json_get(const ts__json *obj, const char *key);
/* The NUM literal as an exact integer (no fraction / exponent); false if it is not one. */
bool ts__json_int(const ts__json *j, int64_t *v);
bool ts__json_u64(const ts__json *j, uint64_t *v);

/* ---- weight tensors (model_weights.c) */
typedef enum ts__wkind {
    TS__W_FP8,     /* e4m3 + [.scale] f32 128x128 */
    TS__W_FP4,     /* e2m1x2 (U8) + [.scale] f32 1x32 */
    TS__W_F32LIN,  /* f32, u / sqrt(in) */
    TS__W_BF16LIN, /* bf16, u / sqrt(in) */
    TS__W_EMBED,   /* bf16(u) */
    TS__W_NORM,    /* 1 + u/8 */
    TS__W_HC_FN,   /* u / sqrt(hc*dim) */
    TS__W_HC_BASE, /* u / 4 */
    TS__W_HC_SCALE,/* 1/2 + u/4 */
    TS__W_SINK,    /* u */
    TS__W_APE,     /* u / 4 */
    TS__W_BIAS,    /* u / 16 */
    TS__W_TID2EID  /* i32 */
} ts__wkind;

/* One stored tensor as in the file (an FP8 / FP4 weight is two records: values and .scale). */
typedef struct ts__mtensor {
    char name[112];
    ts_dtype dtype; /* TS_F32, TS_BF16, TS_E4M3, TS_U8, TS_I32 */
    int32_t ndim;
    int64_t shape[2];
    void *data;
    size_t nbytes;
    /* data points into a mapped checkpoint file (ts_model.ckpt keeps it mapped): never freed or
     * written (ts__mtensor_free) */
    bool view;
    /* only a packer reads it (FP8 / FP4 weights and scales, bf16 linears): once the kernels'
     * copy exists, ts__model_release_packed may drop it */
    bool packed_src;
    /* dropped after packing: a view's pages advised away (data still valid: a touch re-reads
     * the file), a buffer freed (data NULL) */
    bool released;
} ts__mtensor;

void ts__mtensor_free(ts__mtensor *t); /* frees data unless it is a view; data = NULL */

/* One logical weight of docs/model.md §2 (its generation rule and shape). */
typedef struct ts__wspec {
    char name[96];
    ts__wkind kind;
    int32_t ndim;
    int64_t shape[2]; /* logical [out, in] (or [n]) */
} ts__wspec;

/* The §2 list in file order. *specs malloc'd. */
ts_status ts__model_weight_specs(const ts_model_config *cfg, ts__wspec **specs, int64_t *count);
/* The routed expert a spec or record name belongs to ("L.ffn.experts.e.w1[.scale]"), or -1:
 * what an expert-parallel rank filters on (it holds only its own experts). */
int64_t ts__model_expert_of(const char *name);
/* The stored records of one spec: 1, or 2 for FP8 / FP4 (values, scale). */
int ts__model_spec_records(const ts__wspec *s, ts__mtensor rec[2]);
/* Generates spec s into records already shaped by ts__model_spec_records (data allocated). */
ts_status ts__model_generate_weight(const ts_model_config *cfg, const ts__wspec *s,
                                    ts__mtensor rec[2]);
/* An FP8 / FP4 spec's f32 values w [out, in] quantised into its records (data allocated) with
 * tilestack's quantisers, as generation does (docs/model.md §2). */
ts_status ts__model_quantize_weight(const ts__wspec *s, const float *w, ts__mtensor rec[2]);
/* The values of a loaded spec's records (model_file_check.c): tid2eid entries distinct expert
 * ids in [0, E), FP8 / FP4 scales ue8m0 powers of two, e4m3 codes not NaN, f32 / bf16 values
 * finite. TS_ERR_INVALID_ARGUMENT naming the file, the tensor and the element. */
ts_status ts__model_check_values(const char *path, const ts_model_config *cfg,
                                 const ts__wspec *s, const ts__mtensor rec[2]);
uint64_t ts__model_fnv1a64(const void *data, size_t n);
uint64_t ts__model_tensor_seed(const char *name, uint64_t seed);

/* ---- layer weights in the kernels' layouts */
typedef struct ts__lin8 { ts_packed_weight *pw; int64_t n, k; } ts__lin8;

typedef struct ts__compressor {
    const float *wkv, *wgate, *ape, *norm; /* [coff*d, dim], [coff*d, dim], [r, coff*d], [d] */
    int64_t ratio, coff, d;
} ts__compressor;

typedef struct ts__layer {
    int64_t ratio;
    bool hash;
    const float *hc_attn_fn, *hc_attn_base, *hc_attn_scale;
    const float *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    const float *attn_norm, *ffn_norm;
    ts__lin8 wq_a, wq_b, wkv, wo_b;
    ts__lin8 *wo_a; /* [o_groups] */
    const float *q_norm, *kv_norm, *attn_sink;
    ts__compressor comp, icomp;
    ts__lin8 iwq_b;
    ts_packed_weight *weights_proj; /* bf16 [index_heads, dim] */
    const float *gate_w, *gate_bias;
    const int32_t *tid2eid;
    ts_packed_weight *w1, *w3, *w2; /* FP4 [E, inter, dim], [E, dim, inter] */
    ts__lin8 sw1, sw3, sw2;
    struct ts__v32_layer *v32; /* attention = v32 (model_attention_v32.c); NULL for v4 */
} ts__layer;

/* ---- per-sequence caches (model_cache.c) */
typedef struct ts__comp_state {
    float *kv, *score; /* [2 blocks (prev, cur)][r][coff*d]: overlap keeps the previous block */
} ts__comp_state;

typedef struct ts__layer_cache {
    uint8_t *win;      /* [max_batch] blocks of window rows (MODEL1, page = window) */
    uint8_t *comp;     /* [pages] pages of page_tokens / ratio rows (MODEL1; ts__pages) */
    uint8_t *icache;   /* [pages][page_tokens / 4][64] FP4 rows (ts__pages) */
    int32_t *icache_sf;/* [pages][page_tokens / 4] packed ue8m0 */
    ts__comp_state *cs, *ics; /* [max_batch] */
    /* attention = v32: [max_batch * v32 blocks] blocks of 64 tokens, 656-byte rows (V32) and
     * the indexer's fused FP8 keys (64 x 128 e4m3, then 64 f32 scales per block) */
    uint8_t *kv32, *ik32;
} ts__layer_cache;

#define TS__COMP_PAGE 64

/* ---- the page table of the compressed caches (model_pages.c, docs/model.md §5 "Pages"): a
 * layer's compressed rows and indexer rows live in a pool of `total` pages, a page holding
 * page_tokens / ratio rows of that layer. Sequence s's logical page j (tokens [j, j + 1) x
 * page_tokens) is physical page table[s * per_seq + j] in every layer's pool, -1 until the
 * sequence reaches it; its pages go back to the pool when it is reset. Physical placement never
 * changes a bit: the kernels address rows through the table. */
typedef struct ts__pages {
    int64_t page_tokens, per_seq, total;
    int32_t *table;      /* [batch][per_seq]: a sequence's pages are a prefix of its row */
    int64_t *held;       /* [batch]: that prefix's length */
    int32_t *free_pages; /* a stack: free_pages[nfree - 1] is handed out next */
    int64_t nfree;
} ts__pages;

ts_status ts__pages_init(ts__pages *p, int64_t batch, int64_t page_tokens, int64_t per_seq,
                         int64_t total);
void ts__pages_free(ts__pages *p);
/* The pages sequence s lacks to hold `tokens` tokens. */
int64_t ts__pages_missing(const ts__pages *p, int64_t s, int64_t tokens);
/* TS_ERR_OUT_OF_MEMORY from fn, naming the pool, unless `want` pages are free. */
ts_status ts__pages_enough(const ts__pages *p, const char *fn, int64_t want);
/* Pages for sequence s to hold `tokens` tokens (ts__pages_enough said they are free). */
void ts__pages_take(ts__pages *p, int64_t s, int64_t tokens);
void ts__pages_release(ts__pages *p, int64_t s);
/* Physical row of sequence s's logical row `row` in a pool of pages of rpp rows. */
static inline int64_t ts__pages_row(const ts__pages *p, int64_t s, int64_t row, int64_t rpp) {
    return (int64_t)p->table[s * p->per_seq + row / rpp] * rpp + row % rpp;
}
/* The default page: 256 tokens, raised to a multiple of every compress ratio (capped at
 * max_seq_len, a multiple of all of them). */
int64_t ts__pages_default_tokens(const ts_model_config *c);

/* ---- the rows of one pass through the layers (model_decode.c, model_prefill.c): row i is
 * token tok[i] of sequence seq[i] at position pos[i]. A decode step holds distinct sequences;
 * a prefill chunk (one_seq) consecutive positions of one sequence. Every per-layer piece works
 * on rows; only the window ring needs to know which kind (model_attention.c). */
typedef struct ts__rows {
    int64_t n;
    const int64_t *seq, *pos;
    const int32_t *tok;
    bool one_seq;
} ts__rows;

/* ---- the workspace of one pass (B = `rows`: max_batch at create, grown once to the prefill
 * chunk by the first prefill; no allocation per step) */
typedef struct ts__ws {
    int64_t rows;              /* B: the most rows a pass may hold */
    size_t bytes;              /* of the buffers below (ts__model_ws_bytes; v32 scratch apart) */
    int64_t *rpos, *rseq;      /* [B] the rows' positions and (prefill) sequence */
    /* a prefill chunk's window rows (model_attention.c): MODEL1 blocks of TS__COMP_PAGE rows,
     * the window - 1 positions before the chunk, then the chunk's */
    uint8_t *wstage;
    int64_t wstage_blocks;
    uint16_t *X, *X2;          /* [B][hc][dim] residual streams */
    float *xf;                 /* [B][hc*dim] */
    float *mixf; double *mix;  /* [B][(2+hc)*hc] */
    double *post, *comb;       /* [B][hc], [B][hc*hc] */
    uint16_t *y, *a, *f;       /* [B][dim] */
    uint8_t *a8; float *a8sf;  /* lin8 activations [B][kmax], [B][kmax/32] */
    float *act_f32;            /* [B][kmax] */
    uint16_t *qr0, *qr;        /* [B][q_lora] */
    uint16_t *q;               /* [B][H*512] */
    uint16_t *kv0, *kv;        /* [B][512] */
    uint16_t *o;               /* [B][H*512] (attention out) */
    float *lse;                /* [B][H] */
    uint16_t *z;               /* [B][o_groups*o_lora] */
    float *ck, *cg;            /* [B][1024] compressor k, g */
    float *ik, *ig;            /* [B][256] indexer compressor */
    uint16_t *qi;              /* [B][IH*128] */
    float *wi;                 /* [B][IH] */
    uint8_t *qi4; int32_t *qi4sf; /* [B][IH*64], [B][IH] */
    float *ilogits;            /* [max_seq/4] */
    uint8_t *ikeys; int32_t *ikeys_sf; /* [max_seq/4][64], [max_seq/4]: one sequence's indexer rows */
    int32_t *itopk;            /* [index_topk] */
    int32_t *win_idx, *win_len;   /* [B][window], [B] */
    int32_t *ext_idx, *ext_len;   /* [B][ext_max], [B] */
    int64_t ext_max;
    /* MoE */
    float *gs;                 /* [B][E] gate logits */
    int32_t *sel; float *selw; /* [B][topk] */
    uint8_t *x8; float *x8sf;  /* [B][dim], [B][dim/32] */
    uint8_t *ga; float *gasf;  /* grouped A [E][B][dim], [E][B][dim/32] */
    int32_t *masked_m;         /* [E] */
    int32_t *slot;             /* [B][topk]: row of (token, j) in its expert's group */
    uint16_t *gate, *up;       /* [E][B][inter] */
    uint8_t *h8; float *h8sf;  /* [E][B][inter], [E][B][inter/32] */
    uint16_t *ye;              /* [E][B][dim] */
    uint16_t *sg, *su, *sh, *so; /* shared expert [B][inter] x3, [B][dim] */
    struct ts__ws32 *v32;      /* attention = v32 scratch (model_attention_v32.c) */
} ts__ws;

/* ---- per-kernel step breakdown (model_profile.c) */
typedef enum ts__prof_id {
    TS__P_HC, TS__P_NORM, TS__P_LIN8, TS__P_LIN32, TS__P_LINBF, TS__P_ROPE, TS__P_KVQ,
    TS__P_COMPRESS, TS__P_INDEXER, TS__P_TOPK, TS__P_ATTN, TS__P_GATE, TS__P_EXPERTS,
    TS__P_SWIGLU, TS__P_HEAD, TS__P_OTHER, TS__P_COUNT
} ts__prof_id;

typedef struct ts__prof {
    bool on;
    double sec[TS__P_COUNT];
    double bytes[TS__P_COUNT];
    double flops[TS__P_COUNT];
    int64_t calls[TS__P_COUNT];
    /* of sec: the sections that cannot be re-run (ts__prof_add called directly: cache stores,
     * compressor states, in-place edits, the EP exchange); their in-step time is their
     * standalone time */
    double kept[TS__P_COUNT];
    /* Standalone replay (an untimed step after the timed ones, ts__prof_replay_begin): every
     * idempotent section (TS__PROF_SECTION) is re-run right there, one warm-up + replay_reps
     * times, and its median adds to alone[]; nothing else is recorded in that step. A kernel's
     * standalone time per step is then alone[id] + kept[id] / timed steps. */
    bool replay;
    int replay_reps;
    /* cold replay: before every re-run a buffer of twice the last-level cache is written, so a
     * kernel streams its weights from DRAM as it does inside a step (a warm replay finds the
     * weights it just read in cache and understates a weight-streaming kernel's time) */
    uint8_t *flush;
    size_t flush_bytes;
    double alone[TS__P_COUNT];
} ts__prof;

#define TS__PROF_MAX_REPS 31

double ts__model_now(void);
/* A section that cannot be re-run: sec (and kept) += now - t0; bytes, flops, calls. Nothing in
 * the replay step. */
void ts__prof_add(ts__prof *p, ts__prof_id id, double t0, double bytes, double flops);
/* The same for an idempotent section (TS__PROF_SECTION): not added to kept. */
void ts__prof_add_rerunnable(ts__prof *p, ts__prof_id id, double t0, double bytes,
                             double flops);
const char *ts__prof_name(ts__prof_id id);
/* Starts / ends the replay step: clears alone, sets replay (reps clamped to
 * [1, TS__PROF_MAX_REPS]; the profiler must be on); cold: evict the caches before each re-run
 * (a failed allocation of the flush buffer falls back to warm and returns false). */
bool ts__prof_replay_begin(ts__prof *p, int reps, bool cold);
/* Writes the flush buffer (no-op without one). */
void ts__prof_flush_caches(ts__prof *p);
void ts__prof_replay_end(ts__prof *p);
/* The median of t[0..n) into alone[id] (t is reordered). */
void ts__prof_replayed(ts__prof *p, ts__prof_id id, double *t, int n);

static inline double ts__prof_t0(const ts__prof *p) { return p && p->on ? ts__model_now() : 0.0; }

/* One idempotent section: its statements (`...`, which may return on error) rewrite the same
 * outputs from unchanged inputs and change no other state, so in the replay step they run again
 * standalone (cold or warm), like a bench. Off the replay step this is ts__prof_add's timing; with the
 * profiler off, one branch. Declarations inside `...` are local to the section. */
#define TS__PROF_SECTION(pf, id, bytes, flops, ...)                                        \
    do {                                                                                   \
        const double t0_ = ts__prof_t0(pf);                                                \
        { __VA_ARGS__; }                                                                   \
        if ((pf) && (pf)->on) {                                                            \
            if (!(pf)->replay) {                                                           \
                ts__prof_add_rerunnable((pf), (id), t0_, (bytes), (flops));                \
            } else {                                                                       \
                double rt_[TS__PROF_MAX_REPS + 1];                                         \
                const int n_ = (pf)->replay_reps;                                          \
                for (int r_ = 0; r_ <= n_; r_++) {                                         \
                    ts__prof_flush_caches(pf);                                             \
                    const double s_ = ts__model_now();                                     \
                    { __VA_ARGS__; }                                                       \
                    rt_[r_] = ts__model_now() - s_;                                        \
                }                                                                          \
                ts__prof_replayed((pf), (id), rt_ + 1, n_); /* rt_[0]: the warm-up */     \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* Rows per prefill chunk at least (model_prefill.c): each weight is read once per chunk. 48 is
 * the GEMMs' small-M bound (TS__GEMM_SMALL_M, docs/gemm.md "Decode path"): on the packed
 * weights their decode kernels ran the chunk's lin8 GEMMs ~2x faster at M = 48 than the big-M
 * path did at M = 64, 96 or 128 (dsv4-mini, 2 threads, Zen 4). */
#define TS__PREFILL_ROWS 48

/* The random cache fillers' values (ts_model_prefill_random, benchmarks): one splitmix64 step
 * as a uniform in [-1, 1) with 24 bits. */
static inline float ts__model_rand_unit(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((int64_t)(z >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
}

struct ts_model {
    ts_model_config cfg;
    int64_t max_batch;
    ts__mtensor *recs; /* every stored tensor, file order */
    int64_t nrecs;
    /* global */
    const uint16_t *embed;
    const float *norm, *hc_head_fn, *hc_head_base, *hc_head_scale;
    ts_packed_weight *head;
    ts__layer layers[TS_MODEL_MAX_LAYERS];
    /* RoPE tables [max_seq_len][32] cos / sin: window layers and compressed (YaRN) layers */
    float *rope_cos[2], *rope_sin[2];
    /* caches */
    int64_t *pos; /* [max_batch] */
    ts__layer_cache caches[TS_MODEL_MAX_LAYERS];
    ts__pages pages; /* the compressed caches' pages (v4 attention) */
    /* ts_model_load_dir's bytes (hf_load_v4.c, hf_load_v3.c; zero otherwise): records viewing the mapping,
     * converted into buffers, quantised at load; packed = ts__model_packed_bytes after binding */
    /* released: of those, the bytes ts__model_release_packed dropped after packing (views'
     * pages advised away, buffers freed); held = mapped + converted + quantized - released */
    struct { size_t mapped, converted, quantized, released, packed; } load_stats;
    size_t cache_allocated; /* bytes ts__model_cache_alloc (V3: ts__v3_model_create) allocated for the cache data */
    ts__ws *ws;
    /* rows per prefill chunk (model_prefill.c); 0: max(max_batch, TS__PREFILL_ROWS). The
     * tests lower it to split short prompts at odd points */
    int64_t prefill_rows;
    ts__prof prof;
    /* Expert parallelism (model_ep*.c, built with MPI only; NULL / false for a model of
     * model.h). The hooks keep this path MPI-free: the routed experts of layer L for the n rows
     * `a` (routing in ws->sel / ws->selw) into *routed (bf16 [n][dim], owned by ep), the
     * collective step, the collective prefill, and the collective teardown.
     * local_experts_only: ts__model_bind_weights leaves w1 / w3 / w2 unpacked (the records
     * hold only this rank's experts). */
    struct ts__model_ep *ep;
    bool local_experts_only;
    int64_t layers_bound; /* layers 0 .. layers_bound - 1 are bound (ts__model_bind_layer) */
    /* a checkpoint directory (ts_model_load_dir): its files stay mapped while records view them */
    struct ts__hf_dir *ckpt;
    ts_status (*ep_routed)(ts_model *m, int64_t L, int64_t n, const uint16_t *a,
                           const uint16_t **routed);
    ts_status (*ep_decode)(ts_model *m, int64_t n, const int64_t *seqs, const int32_t *tokens,
                           float *logits);
    ts_status (*ep_prefill)(ts_model *m, int64_t seq, int64_t n, const int32_t *tokens,
                            float *logits, bool all, const char *fn);
    void (*ep_free)(ts_model *m);
    /* a DeepSeek-V3 model (hf_v3.h, model_v3.c): the public calls dispatch to it; none of the
     * V4 fields above but cfg (its generic view), max_batch, pos and rope_* are set */
    struct ts__v3 *v3;
};

/* model_weights.c: records -> layer structs, packing (after generate or load). */
ts_status ts__model_bind_weights(ts_model *m);
/* One layer's weights (what ts__model_bind_weights does for each layer not bound yet), in layer
 * order: a checkpoint load binds each layer as soon as its records are filled, so that their
 * converted copies can go before the next layer's are made (hf_load_v4.c). */
ts_status ts__model_bind_layer(ts_model *m, int64_t L);
const ts__mtensor *ts__model_find(const ts_model *m, const char *name);
/* A stored tensor by name (TS_ERR_INTERNAL if missing), an f32 one's data, an FP8 one packed
 * for lin8, a bf16 one packed for linbf. */
ts_status ts__model_w_tensor(const ts_model *m, const char *name, const ts__mtensor **out);
ts_status ts__model_w_f32(const ts_model *m, const char *name, const float **p);
ts_status ts__model_w_pack8(const ts_model *m, const char *name, ts__lin8 *w);
ts_status ts__model_w_pack_bf16(const ts_model *m, const char *name, ts_packed_weight **pw);
void ts__model_free_weights(ts_model *m);
/* Bytes of the kernels' packed copies of the bound weights (ts_gemm_prepack_b). */
size_t ts__model_packed_bytes(const ts_model *m);
/* The pages over [p, p + n) of a read-only file mapping given back (MADV_DONTNEED, rounded
 * outward: the bytes stay readable, re-read from the file on a touch); only advice. */
void ts__model_drop_pages(const void *p, size_t n);
/* After binding (ts_model_load_dir): drops every packed_src record (docs/models.md "Memory per
 * rank") and returns their bytes; the model can then no longer be saved or exported. */
size_t ts__model_release_packed(ts_model *m);
/* TS_ERR_UNSUPPORTED from `fn` if m's records were released (save / export need them). */
ts_status ts__model_check_records_held(const ts_model *m, const char *fn);
/* src/gemm/gemm_prepack.c: ts_gemm_prepack_b's allocation for those dimensions, computed */
size_t ts__gemm_packed_nbytes(ts_dtype dtype, bool sf_u8, int64_t gran_k, int64_t groups,
                              int64_t n, int64_t k);
/* What binding packs for spec s (ts__model_bind_weights), computed from its shape alone:
 * every FP8 weight (wo_a as o_groups packs), every bf16 linear (weights_proj, head), the FP4
 * experts as one grouped pack per layer and matrix (its share per expert: the groups add up). */
size_t ts__model_spec_packed_bytes(const ts_model_config *cfg, const ts__wspec *s);
/* model_create.c */
ts_status ts__model_alloc(const ts_model_config *cfg, int64_t max_batch, ts_model **out);
/* Binding, RoPE tables, caches and workspace once m->recs hold the weights. */
ts_status ts__model_create_from_records(ts_model *m);
/* model_cache.c */
typedef struct ts__cache_bytes {
    size_t window, compressed; /* MODEL1 584-byte rows: the window ring, the compressed rows */
    size_t indexer;            /* FP4 rows (64 bytes) + packed ue8m0 (4 bytes) */
    size_t state;              /* compressor + indexer-compressor kv / score floats */
    size_t pos;
} ts__cache_bytes;
/* What ts__model_cache_alloc allocates for B sequences of cfg (v4 attention; v32: pos only). */
void ts__model_cache_bytes(const ts_model_config *cfg, int64_t B, ts__cache_bytes *out);
ts_status ts__model_cache_alloc(ts_model *m);
void ts__model_cache_free(ts_model *m);
void ts__model_cache_reset(ts_model *m, int64_t seq);
/* Writes a bf16 [512] row into a MODEL1 block cache at global slot `slot` (page P). */
ts_status ts__model_kv_store(uint8_t *cache, int64_t page, int64_t slot, const uint16_t *row);
/* Copies one stored MODEL1 row (its 576 data and 8 scale bytes) between block caches. */
void ts__model_kv_copy(uint8_t *dst, int64_t dpage, int64_t dslot, const uint8_t *src,
                       int64_t spage, int64_t sslot);

/* model_rope.c */
ts_status ts__model_rope_tables(ts_model *m);
/* Rotates x[0..63] (pairs 2i, 2i+1) by the table row; inverse uses -theta. */
void ts__model_rope(const float *cos_row, const float *sin_row, double *x, bool inverse);
void ts__model_yarn_freqs(const ts_model_config *cfg, bool compressed, double freq[32]);

/* model_linear.c */
ts_status ts__model_lin8(ts__ws *ws, ts__prof *prof, const ts__lin8 *w, const uint16_t *x,
                         int64_t m, int64_t ldx, uint16_t *y, int64_t ldy);
/* y[m][n] = sum_k x[m][k] w[n][k] (f32, fixed order, batch-invariant). */
void ts__model_gemv_f32(const float *x, int64_t m, int64_t ldx, const float *w, int64_t n,
                        int64_t k, float *y, int64_t ldy);
ts_status ts__model_linbf(ts_packed_weight *w, int64_t n, int64_t k, const uint16_t *x,
                          int64_t m, float *y, int64_t ldy);

/* model_mhc.c */
/* Between rounding points the model's own elementwise code runs in double (closer to the float64
 * reference than f32, and still one fixed order per row: batch- and thread-invariant). */
void ts__model_sinkhorn(double *M, int64_t hc, int64_t iters, double eps);
void ts__model_hc_pre(const ts_model *m, const uint16_t *X, int64_t n, const float *fn,
                      const float *base, const float *scale, float *xf, float *mixf, double *mix,
                      uint16_t *y, double *post, double *comb);
void ts__model_hc_post(const ts_model *m, const uint16_t *f, const uint16_t *X, int64_t n,
                       const double *post, const double *comb, uint16_t *Xout);
void ts__model_hc_head(const ts_model *m, const uint16_t *X, int64_t n, float *xf, float *mixf,
                       double *mix, uint16_t *y);
double ts__model_rms(const float *x, int64_t n, float eps);
/* out = bf16(x * rms(x) * w) */
void ts__model_rmsnorm_bf16(const uint16_t *x, int64_t n, const float *w, float eps,
                            uint16_t *out);

/* model_attention.c */
ts_status ts__model_attention(ts_model *m, int64_t L, const ts__rows *r, const uint16_t *a,
                              uint16_t *out);
/* The compressor's block softmax-pool for one channel set (exposed for tests): rows
 * [nslot][stride] of scores and values, channel c; returns sum_j softmax_j(s) v_j. */
double ts__model_softmax_pool(const float *score, const float *kv, int64_t nslot,
                              int64_t stride, int64_t c);
void ts__model_hadamard128(double *x);
/* Step 1's low-rank q for n rows, shared by the V4 and V3.2 attention: wq_a (a -> ws->qr0),
 * q_norm per row (-> ws->qr), wq_b (-> q, qw wide). */
ts_status ts__model_q_lora(ts_model *m, const ts__lin8 *wq_a, const float *q_norm,
                           const ts__lin8 *wq_b, const uint16_t *a, int64_t n, uint16_t *q,
                           int64_t qw);
/* One sparse FlashMLA call with its own scheduler metadata (freed after). */
ts_status ts__model_flash_mla(ts_flash_mla_kvcache_args *a, ts_tensor *out, ts_tensor *lse);

/* model_attention_v32.c: attention = v32 (docs/model.md §8) */
#define TS__V32_PAGE 64
int64_t ts__model_v32_blocks(const ts_model_config *c); /* 64-token blocks per sequence */
ts_status ts__model_v32_bind(ts_model *m, int64_t L);
void ts__model_v32_free_layer(ts__layer *ly);
ts_status ts__model_v32_cache_alloc(ts_model *m);
void ts__model_v32_cache_free(ts_model *m);
ts_status ts__model_v32_prefill_random(ts_model *m, int64_t seq, int64_t context_len,
                                       uint64_t *rng);
ts_status ts__model_v32_ws_alloc(ts_model *m);
void ts__model_v32_ws_free(ts__ws *ws);
ts_status ts__model_attention_v32(ts_model *m, int64_t L, const ts__rows *r,
                                  const uint16_t *a, uint16_t *out);

/* model_moe.c */
ts_status ts__model_moe(ts_model *m, int64_t L, int64_t n, const int32_t *tokens,
                        const uint16_t *a, uint16_t *out);
/* gate/up bf16 [m][inter] (row strides ld), weights [m] (NULL = 1): Mega MoE's SwiGLU + FP8
 * cast (ts__swiglu_weight_cast, src/numerics/swiglu_cast.h; clamp at limit if > 0) into
 * out [m][inter] e4m3 and sf f32 [m][inter/32] (powers of two). tmp is unused. */
ts_status ts__moe_swiglu_weight_cast(const uint16_t *gate, const uint16_t *up, int64_t ld,
                                     const float *weights, int64_t m, int64_t inter,
                                     float limit, float *tmp, uint8_t *out, float *sf);
void ts__model_route(const ts_model_config *cfg, const float *s, const float *bias,
                     const int32_t *hash_row, int64_t E, int64_t topk, int32_t *idx,
                     float *w);

/* model_decode.c */
/* The workspace for max_batch rows (at create). */
ts_status ts__model_ws_alloc(ts_model *m);
/* The bytes ts__model_ws_alloc allocates for `rows` rows (v4; the v32 scratch apart). */
size_t ts__model_ws_bytes(const ts_model_config *cfg, int64_t rows, bool local_experts_only);
/* Grows the workspace to `rows` rows (kept as it was when that fails). */
ts_status ts__model_ws_reserve(ts_model *m, int64_t rows);
/* Embedding and every layer for the rows (their caches advance; positions do not): the last
 * residual streams stay in ws->X, row-major. */
ts_status ts__model_forward(ts_model *m, const ts__rows *r);
/* The head over rows [row0, row0 + n) of ws->X: logits f32 [n][vocab_size]. */
ts_status ts__model_head(ts_model *m, int64_t row0, int64_t n, float *logits);
/* TS_ERR_OUT_OF_MEMORY from fn when a V4-attention model has lost its page pool. */
ts_status ts__model_check_pool(const ts_model *m, const char *fn);
/* ts_model_decode's argument checks (free pages included), and the step itself without the EP
 * dispatch (an EP model's ep_decode calls it once every rank agreed that the step is valid). */
ts_status ts__model_check_step(const ts_model *m, int64_t n, const int64_t *seqs,
                               const int32_t *tokens);
ts_status ts__model_decode_local(ts_model *m, int64_t n, const int64_t *seqs,
                                 const int32_t *tokens, float *logits);
void ts__model_ws_free(ts__ws *ws);

/* model_prefill.c, for the EP model's collective prefill (model_ep_moe.c): rows per chunk;
 * ts_model_prefill's argument checks (nothing changes before they pass); chunk [c0, c0 + k)
 * of the n tokens through the layers, the position advanced, the logits (all: every row's
 * into logits + c0 * vocab; else the last token's, when this chunk holds it and logits is not
 * NULL). */
int64_t ts__model_prefill_chunk_rows(const ts_model *m);
ts_status ts__model_prefill_check(const char *fn, const ts_model *m, int64_t seq, int64_t n,
                                  const int32_t *tokens, const float *logits, bool all);
ts_status ts__model_prefill_chunk(ts_model *m, int64_t seq, int64_t c0, int64_t k, int64_t n,
                                  const int32_t *tokens, float *logits, bool all);

/* Per-kernel breakdown of decode steps (model_profile.c): enable = true clears the table and
 * starts accumulating (name, seconds, bytes, flops per kernel); false stops and prints it to out
 * (if not NULL). */
void ts__model_step_breakdown(ts_model *m, bool enable, FILE *out);
/* Times `steps` steps of B sequences prefilled to `context` (after a warm-up step) and prints
 * the step time, tokens/s and the per-step breakdown. */
ts_status ts__model_time_decode(ts_model *m, int64_t B, int64_t context, int steps, FILE *out,
                                double *step_sec);

#endif
