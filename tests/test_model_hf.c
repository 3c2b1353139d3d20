/* Hugging Face checkpoint directories (ts_model_load_dir / ts_model_export_hf, docs/models.md):
 * a seeded dsv4-tiny model exported in every layout (one file and sharded, quantised and
 * dequantised) loads back to the same records and decodes the same logits bits; the export is
 * deterministic and atomic; every kind of bad checkpoint (missing shard, missing / extra
 * tensor, wrong dtype / shape, unknown architecture / quantisation / key, config values out of
 * range, ue8m0 NaN, tid2eid out of range) is refused with a message naming the file and the
 * tensor or key. Checkpoints are edited through the library's own safetensors reader and a
 * small writer here. */
#include "ts_test.h"
#include "test_model_common.h"

#include "model/model_internal.h"
#include "model/safetensors.h"
#include "tilestack/model.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS 24


/* STEPS tokens from position 0; logits [STEPS, vocab] (malloc'ed) */
static float *decode(ts_model *m) {
    const int64_t V = ts_model_get_config(m)->vocab_size;
    float *out = malloc((size_t)(STEPS * V) * sizeof *out);
    const int64_t seq = 0;
    ts_model_reset_sequence(m, 0);
    for (int i = 0; out && i < STEPS; i++) {
        const int32_t tok = (int32_t)((i * 7919 + 13) % V);
        if (ts_model_decode(m, 1, &seq, &tok, out + i * V) != TS_OK) {
            free(out);
            return NULL;
        }
    }
    return out;
}

static bool same_config(const ts_model_config *a, const ts_model_config *b) {
    ts_model_config x = *a, y = *b;
    memset(x.name, 0, sizeof x.name), memset(y.name, 0, sizeof y.name);
    x.seed = y.seed = 0;
    return !memcmp(&x, &y, sizeof x);
}

/* ts_model_load_dir's model released exactly the records a packer read (the FP8 / FP4 weights
 * and scales, the bf16 linears) and holds the others; it decodes the same logits bits (want)
 * and refuses to be saved or exported. */
static void check_released(ts_test_ctx *ts_t_, const char *dir, const float *want) {
    ts_model *r = NULL;
    TS_CHECK_STATUS(ts_model_load_dir(dir, 1, &r), TS_OK);
    if (!r) return;
    int64_t wrong = 0;
    size_t released = 0;
    for (int64_t i = 0; i < r->nrecs; i++) {
        const ts__mtensor *t = &r->recs[i];
        wrong += t->released != t->packed_src || (t->released && !t->view && t->data);
        released += t->released ? t->nbytes : 0;
    }
    TS_CHECK_MSG(wrong == 0, "%s: %lld records released wrongly", dir, (long long)wrong);
    TS_CHECK(released > 0);
    TS_CHECK_EQ_INT((int64_t)r->load_stats.released, (int64_t)released);
    float *got = decode(r);
    const size_t n = (size_t)(STEPS * r->cfg.vocab_size);
    TS_CHECK_MSG(got && !memcmp(got, want, n * sizeof *got), "%s: logits differ once released", dir);
    free(got);
    char out[600];
    snprintf(out, sizeof out, "%s-again", dir);
    TS_CHECK_STATUS(ts_model_export_hf(r, out, NULL), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "ts_model_load_dir_keep") != NULL);
    TS_CHECK_STATUS(ts_model_save_weights(r, out), TS_ERR_UNSUPPORTED);
    ts_model_free(r);
}

/* The export of `m` with `o` loads to the same config and record bytes and decodes the same
 * logits bits (want: m's logits), with its records kept (ts_model_load_dir_keep) and released
 * (ts_model_load_dir). */
static void check_round_trip(ts_test_ctx *ts_t_, const ts_model *m, const float *want,
                             ts_hf_export_options o, const char *dir, bool records_exact) {
    TS_CHECK_STATUS(ts_model_export_hf(m, dir, &o), TS_OK);
    check_released(ts_t_, dir, want);
    ts_model *r = NULL;
    TS_CHECK_STATUS(ts_model_load_dir_keep(dir, 1, &r), TS_OK);
    if (!r) return;
    TS_CHECK_EQ_INT((int64_t)r->load_stats.released, 0);
    TS_CHECK_MSG(same_config(&m->cfg, &r->cfg), "%s: config differs after the round trip", dir);
    TS_CHECK_EQ_INT(r->nrecs, m->nrecs);
    int64_t views = 0, diff = 0;
    for (int64_t i = 0; i < r->nrecs && i < m->nrecs; i++) {
        views += r->recs[i].view;
        diff += strcmp(r->recs[i].name, m->recs[i].name) || r->recs[i].nbytes != m->recs[i].nbytes ||
                memcmp(r->recs[i].data, m->recs[i].data, m->recs[i].nbytes);
    }
    if (records_exact) TS_CHECK_MSG(diff == 0, "%s: %lld records differ", dir, (long long)diff);
    /* quantised: FP8 / FP4 codes, bf16 and f32 tensors are views of the files */
    if (!o.dequantize) TS_CHECK_MSG(views > m->nrecs / 2, "%s: only %lld of %lld records are views",
                                    dir, (long long)views, (long long)m->nrecs);
    float *got = decode(r);
    const size_t n = (size_t)(STEPS * m->cfg.vocab_size);
    TS_CHECK_MSG(got && !memcmp(got, want, n * sizeof *got), "%s: logits differ", dir);
    free(got);
    ts_model_free(r);
}

TS_TEST(model_hf_round_trip_every_layout) {
    tm_root_make("ts_hf_");
    ts_model *m = tm_tiny();
    float *want = m ? decode(m) : NULL;
    TS_CHECK(want != NULL);
    if (!want) goto done;
    static const char *const names[] = {"release", "hf", "modules"};
    for (int lay = 0; lay < 3; lay++)
        for (int shards = 1; shards <= 3; shards += 2) {
            char dir[64];
            snprintf(dir, sizeof dir, "%s-%d", names[lay], shards);
            ts_hf_export_options o = {(ts_hf_layout)lay, shards, false};
            check_round_trip(ts_t_, m, want, o, tm_at(dir), true);
        }
done:
    free(want);
    ts_model_free(m);
    tm_root_remove();
}

/* A checkpoint without quantization_config (BF16 weights, as a dequantised save is) is quantised
 * at load with tilestack's quantisers: code x scale requantised gives the same values (possibly
 * with a halved scale and doubled codes, which the GEMMs' power-of-two scaling makes the same
 * bits), so the logits are the quantised checkpoint's. */
TS_TEST(model_hf_bf16_checkpoint_is_quantised_at_load) {
    tm_root_make("ts_hf_");
    ts_model *m = tm_tiny();
    float *want = m ? decode(m) : NULL;
    TS_CHECK(want != NULL);
    for (int lay = 0; want && lay < 3; lay += 2) {
        ts_hf_export_options o = {(ts_hf_layout)lay, 1, true};
        check_round_trip(ts_t_, m, want, o, tm_at(lay ? "bf16-modules" : "bf16-release"), false);
    }
    free(want);
    ts_model_free(m);
    tm_root_remove();
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) free(b), b = NULL;
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

TS_TEST(model_hf_export_is_deterministic_and_atomic) {
    tm_root_make("ts_hf_");
    ts_model *m = tm_tiny();
    TS_CHECK(m != NULL);
    if (!m) goto done;
    TS_CHECK_STATUS(ts_model_export_hf(m, tm_at("a"), NULL), TS_OK);
    TS_CHECK_STATUS(ts_model_export_hf(m, tm_at("b"), NULL), TS_OK);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/%s", tm_at("a"), files[i]);
        snprintf(pb, sizeof pb, "%s/%s", tm_at("b"), files[i]);
        size_t na = 0, nb = 0;
        uint8_t *a = slurp(pa, &na), *b = slurp(pb, &nb);
        TS_CHECK_MSG(a && b && na == nb && !memcmp(a, b, na), "%s differs between two exports", files[i]);
        free(a), free(b);
    }
    /* an existing, non-empty directory is refused and left alone; an empty one is replaced */
    TS_CHECK_STATUS(ts_model_export_hf(m, tm_at("a"), NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "exists") != NULL);
    struct stat sb;
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", tm_at("a"));
    TS_CHECK(stat(p, &sb) == 0);
    TS_CHECK(mkdir(tm_at("empty"), 0755) == 0);
    TS_CHECK_STATUS(ts_model_export_hf(m, tm_at("empty"), NULL), TS_OK);
    /* a missing parent: an I/O error, and no temporary directory left behind */
    TS_CHECK_STATUS(ts_model_export_hf(m, tm_at("no/such/dir"), NULL), TS_ERR_IO);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep -v '^a$\\|^b$\\|^empty$')\"", tm_root());
    TS_CHECK_MSG(system(cmd) == 0, "files left in %s after a failed export", tm_root());
done:
    ts_model_free(m);
    tm_root_remove();
}

/* ---- editing checkpoints */

typedef struct ed_tensor {
    char name[192];
    ts_dtype dtype;
    int ndim;
    int64_t shape[8];
    uint8_t *data;
    size_t n;
} ed_tensor;

typedef struct ed_file { ed_tensor t[512]; int n; } ed_file;

static bool ed_read(const char *path, ed_file *f) {
    ts__st_file *s = NULL;
    f->n = 0;
    if (ts__st_open(AT_FDCWD, path, NULL, &s) != TS_OK) return false;
    for (size_t i = 0; i < s->n && f->n < 512; i++) {
        ed_tensor *t = &f->t[f->n++];
        snprintf(t->name, sizeof t->name, "%s", s->t[i].name);
        t->dtype = s->t[i].dtype;
        t->ndim = s->t[i].ndim;
        memcpy(t->shape, s->t[i].shape, sizeof t->shape);
        t->n = s->t[i].end - s->t[i].begin;
        t->data = malloc(t->n ? t->n : 1);
        memcpy(t->data, s->t[i].data, t->n);
    }
    const bool ok = f->n == (int)s->n;
    ts__st_close(s);
    return ok;
}

static void ed_write(const char *path, ed_file *f) {
    char *h = malloc(1 << 20);
    size_t k = (size_t)snprintf(h, 1 << 20, "{");
    uint64_t off = 0;
    for (int i = 0; i < f->n; i++) {
        ed_tensor *t = &f->t[i];
        k += (size_t)snprintf(h + k, (1 << 20) - k, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": [", i ? ", " : "",
                              t->name, ts__st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) k += (size_t)snprintf(h + k, (1 << 20) - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        k += (size_t)snprintf(h + k, (1 << 20) - k, "], \"data_offsets\": [%llu, %llu]}",
                              (unsigned long long)off, (unsigned long long)(off + t->n));
        off += t->n;
    }
    k += (size_t)snprintf(h + k, (1 << 20) - k, "}");
    FILE *o = fopen(path, "wb");
    for (int i = 0; i < 8; i++) fputc((int)((k >> (8 * i)) & 0xFF), o);
    fwrite(h, 1, k, o);
    for (int i = 0; i < f->n; i++) fwrite(f->t[i].data, 1, f->t[i].n, o);
    fclose(o);
    free(h);
}

static void ed_free(ed_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].data);
    f->n = 0;
}

static ed_tensor *ed_find(ed_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* A fresh release-layout export of dsv4-tiny in `dir` (one file or 2 shards). */
static bool fresh(const ts_model *m, const char *dir, int shards) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return false;
    ts_hf_export_options o = {TS_HF_LAYOUT_RELEASE, shards, false};
    return ts_model_export_hf(m, dir, &o) == TS_OK;
}

/* config.json with the first `from` replaced by `to`. */
static bool edit_config(const char *dir, const char *from, const char *to) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    size_t n = 0;
    char *s = (char *)slurp(p, &n);
    char *hit = s ? strstr(s, from) : NULL;
    if (!hit) {
        free(s);
        return false;
    }
    FILE *f = fopen(p, "wb");
    fwrite(s, 1, (size_t)(hit - s), f);
    fputs(to, f);
    fputs(hit + strlen(from), f);
    fclose(f);
    free(s);
    return true;
}

/* The load fails with `code` and a message holding each of the needles (NULL-terminated). */
static void expect_fail(ts_test_ctx *ts_t_, const char *what, const char *dir, ts_status code, ...) {
    ts_model *m = NULL;
    const ts_status st = ts_model_load_dir(dir, 1, &m);
    TS_CHECK_MSG(st == code && !m, "%s: status %d, expected %d [%s]", what, (int)st, (int)code, ts_last_error());
    va_list ap;
    va_start(ap, code);
    for (const char *n = va_arg(ap, const char *); n; n = va_arg(ap, const char *))
        TS_CHECK_MSG(strstr(ts_last_error(), n) != NULL, "%s: '%s' not in [%s]", what, n, ts_last_error());
    va_end(ap);
    ts_model_free(m);
}

/* Edits one tensor of the single-file release export, then expects the failure. */
typedef void (*tensor_edit)(ed_file *f);

static void ed_check(ts_test_ctx *ts_t_, const ts_model *m, const char *what, tensor_edit fn,
                     ts_status code, const char *n1, const char *n2) {
    const char *dir = tm_at("bad");
    TS_CHECK(fresh(m, dir, 1));
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ed_file *f = calloc(1, sizeof *f);
    TS_CHECK(ed_read(p, f));
    fn(f);
    ed_write(p, f);
    ed_free(f);
    free(f);
    expect_fail(ts_t_, what, dir, code, "model.safetensors", n1, n2, NULL);
}

static void drop_wq_a(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.attn.wq_a.weight");
    if (!t) return;
    free(t->data);
    *t = f->t[--f->n];
}
static void add_extra(ed_file *f) {
    ed_tensor *t = &f->t[f->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "layers.0.attn.wq_c.weight");
    t->dtype = TS_F32, t->ndim = 1, t->shape[0] = 4, t->n = 16, t->data = calloc(1, 16);
}
static void wrong_dtype(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.attn.wq_a.weight");
    if (t) t->dtype = TS_I8; /* same size, not e4m3 */
}
static void wrong_shape(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.attn.attn_sink"); /* [4] -> [2, 2] */
    if (t) t->ndim = 2, t->shape[0] = 2, t->shape[1] = 2;
}
static void nan_scale(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.attn.wq_b.scale");
    if (t && t->n > 3) t->data[3] = 0xFF;
}
static void tid_big(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.ffn.gate.tid2eid");
    const int64_t v = 8; /* n_routed_experts = 8 */
    if (t && t->n >= 8 * 20) memcpy(t->data + 8 * 19, &v, 8);
}
static void tid_huge(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.ffn.gate.tid2eid");
    const int64_t v = (INT64_C(1) << 32) + 1; /* would wrap to 1 in an int32 */
    if (t) memcpy(t->data, &v, 8);
}
static void tid_repeat(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.0.ffn.gate.tid2eid");
    if (t) memcpy(t->data + 8, t->data, 8); /* token 0's first two experts equal */
}
static void fp8_nan(ed_file *f) {
    ed_tensor *t = ed_find(f, "layers.1.attn.wkv.weight");
    if (t) t->data[100] = 0x7F;
}

TS_TEST(model_hf_refuses_bad_tensors) {
    tm_root_make("ts_hf_");
    ts_model *m = tm_tiny();
    TS_CHECK(m != NULL);
    if (!m) goto done;
    ed_check(ts_t_, m, "missing tensor", drop_wq_a, TS_ERR_INVALID_ARGUMENT, "layers.0.attn.wq_a.weight", "missing");
    ed_check(ts_t_, m, "extra tensor", add_extra, TS_ERR_INVALID_ARGUMENT, "layers.0.attn.wq_c.weight", "not part of");
    ed_check(ts_t_, m, "wrong dtype", wrong_dtype, TS_ERR_INVALID_ARGUMENT, "layers.0.attn.wq_a.weight", "dtype I8, expected F8_E4M3");
    ed_check(ts_t_, m, "wrong shape", wrong_shape, TS_ERR_INVALID_ARGUMENT, "layers.0.attn.attn_sink", "shape [2, 2], expected [4]");
    ed_check(ts_t_, m, "ue8m0 NaN", nan_scale, TS_ERR_INVALID_ARGUMENT, "layers.0.attn.wq_b.scale", "0xff");
    ed_check(ts_t_, m, "tid2eid = E", tid_big, TS_ERR_INVALID_ARGUMENT, "layers.0.ffn.gate.tid2eid", "= 8: expert ids");
    ed_check(ts_t_, m, "tid2eid = 2^32 + 1", tid_huge, TS_ERR_INVALID_ARGUMENT, "layers.0.ffn.gate.tid2eid", "4294967297");
    ed_check(ts_t_, m, "tid2eid repeat", tid_repeat, TS_ERR_INVALID_ARGUMENT, "layers.0.ffn.gate.tid2eid", "twice");
    ed_check(ts_t_, m, "e4m3 NaN", fp8_nan, TS_ERR_INVALID_ARGUMENT, "layers.1.attn.wkv.weight", "NaN");
    /* a shard the index names is gone */
    const char *dir = tm_at("bad");
    TS_CHECK(fresh(m, dir, 2));
    char p[600];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    TS_CHECK(unlink(p) == 0);
    expect_fail(ts_t_, "missing shard", dir, TS_ERR_IO, "model-00002-of-00002.safetensors", "missing shard", NULL);
    /* no weights at all */
    TS_CHECK(fresh(m, dir, 1));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    TS_CHECK(unlink(p) == 0);
    expect_fail(ts_t_, "no weights", dir, TS_ERR_IO, "model.safetensors", NULL);
done:
    ts_model_free(m);
    tm_root_remove();
}

TS_TEST(model_hf_refuses_bad_configs) {
    tm_root_make("ts_hf_");
    ts_model *m = tm_tiny();
    TS_CHECK(m != NULL);
    static const struct {
        const char *what, *from, *to;
        ts_status code;
        const char *n1, *n2;
    } cases[] = {
        {"architecture", "\"DeepseekV4ForCausalLM\"", "\"DeepseekV3ForCausalLM\"", TS_ERR_UNSUPPORTED, "architectures", "DeepseekV3ForCausalLM"},
        {"model type", "\"deepseek_v4\"", "\"deepseek_v32\"", TS_ERR_UNSUPPORTED, "model_type", "deepseek_v32"},
        {"quant method", "\"quant_method\": \"fp8\"", "\"quant_method\": \"gptq\"", TS_ERR_UNSUPPORTED, "quant_method", "gptq"},
        {"block size", "[128, 128]", "[64, 64]", TS_ERR_UNSUPPORTED, "weight_block_size", "[64, 64]"},
        {"scale format", "\"ue8m0\"", "\"float\"", TS_ERR_UNSUPPORTED, "scale_fmt", "float"},
        {"expert dtype", "\"expert_dtype\": \"fp4\"", "\"expert_dtype\": \"fp8\"", TS_ERR_UNSUPPORTED, "expert_dtype", "fp8"},
        {"unknown key", "\"hc_mult\"", "\"engram_layer_ids\": [1], \"hc_mult\"", TS_ERR_UNSUPPORTED, "engram_layer_ids", "knows"},
        {"kv heads", "\"num_key_value_heads\": 1", "\"num_key_value_heads\": 2", TS_ERR_UNSUPPORTED, "num_key_value_heads", "= 2"},
        {"shared experts", "\"n_shared_experts\": 1", "\"n_shared_experts\": 2", TS_ERR_UNSUPPORTED, "n_shared_experts", "= 2"},
        {"rope type", "\"type\": \"yarn\"", "\"type\": \"longrope\"", TS_ERR_UNSUPPORTED, "rope_type", "longrope"},
        {"negative", "\"hidden_size\": 256", "\"hidden_size\": -256", TS_ERR_INVALID_ARGUMENT, "hidden_size", "-256"},
        {"zero", "\"num_attention_heads\": 4", "\"num_attention_heads\": 0", TS_ERR_INVALID_ARGUMENT, "num_attention_heads", "= 0"},
        {"absurd", "\"vocab_size\": 512", "\"vocab_size\": 1099511627776", TS_ERR_INVALID_ARGUMENT, "vocab_size", "1099511627776"},
        {"overflow", "\"hidden_size\": 256", "\"hidden_size\": 92233720368547758070", TS_ERR_INVALID_ARGUMENT, "config.json", NULL},
        {"not a number", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": \"small\"", TS_ERR_INVALID_ARGUMENT, "rms_norm_eps", "number"},
        {"fraction", "\"sliding_window\": 16", "\"sliding_window\": 16.5", TS_ERR_INVALID_ARGUMENT, "sliding_window", "integer"},
        {"cross-key", "\"num_experts_per_tok\": 6", "\"num_experts_per_tok\": 9", TS_ERR_INVALID_ARGUMENT, "num_experts_per_tok", "n_routed_experts"},
        {"multiple of 128", "\"hidden_size\": 256", "\"hidden_size\": 200", TS_ERR_INVALID_ARGUMENT, "hidden_size", "multiple of 128"},
        {"ratios length", "\"compress_ratios\": [0, 4, 8]", "\"compress_ratios\": [0, 4]", TS_ERR_INVALID_ARGUMENT, "compress_ratios", "entries"},
        {"ratios vs layer types", "\"compress_ratios\": [0, 4, 8]", "\"compress_ratios\": [0, 4, 16]", TS_ERR_INVALID_ARGUMENT, "layer_types[2]", "compress_ratios[2]"},
        {"shape vs config", "\"moe_intermediate_size\": 128", "\"moe_intermediate_size\": 256", TS_ERR_INVALID_ARGUMENT, "layers.0.ffn.experts.0.w1.weight", "shape"},
        {"too many experts", "\"n_routed_experts\": 8", "\"n_routed_experts\": 65536", TS_ERR_INVALID_ARGUMENT, "fewer than", "65536"},
        {"not JSON", "{", "[", TS_ERR_INVALID_ARGUMENT, "config.json", NULL},
    };
    for (size_t i = 0; m && i < sizeof cases / sizeof *cases; i++) {
        const char *dir = tm_at("cfg");
        TS_CHECK(fresh(m, dir, 1));
        TS_CHECK_MSG(edit_config(dir, cases[i].from, cases[i].to), "%s: '%s' not in config.json",
                     cases[i].what, cases[i].from);
        expect_fail(ts_t_, cases[i].what, dir, cases[i].code, "config.json" , cases[i].n1, cases[i].n2, NULL);
    }
    ts_model_free(m);
    tm_root_remove();
}
