/* tilestack against Hugging Face transformers' DeepseekV4ForCausalLM (docs/models.md
 * "Conformance"). tests/gen/gen_hf_v4.py exported dsv4-tiny with `tilestack export-hf`, ran
 * transformers' float32 forward on it (FP8 / FP4 dequantised as transformers does) over a fixed
 * token sequence and stored its logits in tests/golden/hf_v4_tiny.bin with the hashes of the
 * checkpoint's files. Here the same checkpoint is exported again (the hashes prove it is the
 * same bytes: the export is deterministic), loaded with ts_model_load_dir and decoded
 * teacher-forced over the same tokens.
 *
 * One edit of config.json on both sides (the generator's CONFIG_EDIT, stored in the golden):
 * index_topk 8 -> 16, see docs/models.md "Conformance".
 *
 * transformers rounds nothing between its f32 operations; tilestack rounds where DeepSeek's
 * inference code does (FP8 activations per 1x128, bf16 points, the 584-byte FP8 KV cache, the
 * indexer's FP4 q and keys): the logits agree to calc_diff ~4e-4 per step, not to the bit, with
 * single steps higher where a near-tied top-k (experts, indexer rows) picks differently. The
 * bound is DeepGEMM's calc_diff (1 - 2 sum(xy) / sum(x^2 + y^2), in double), mean over the
 * steps <= 1e-3. TS_HF_STEPS=1 prints every step.
 *
 * Second test: against transformers with tilestack's rounding points patched in (greedy, exact
 * up to f32 accumulation order; see model_hf_emulated_greedy_dsv4_tiny). */
#include "ts_test.h"
#include "test_model_common.h"

#include "tilestack/model.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct hf_golden {
    uint32_t n_steps, vocab;
    uint64_t h_config, h_weights, token_seed;
    char model[33], edit_from[33], edit_to[33];
    const int32_t *tokens;
    const float *logits;
} hf_golden;

static bool parse(const uint8_t *b, size_t n, hf_golden *g) {
    const size_t head = 8 + 16 + 24 + 96;
    if (n < head || memcmp(b, "TSHFV4G1", 8)) return false;
    uint32_t v[4];
    memcpy(v, b + 8, 16);
    memcpy(&g->h_config, b + 24, 8);
    memcpy(&g->h_weights, b + 32, 8);
    memcpy(&g->token_seed, b + 40, 8);
    memcpy(g->model, b + 48, 32);
    memcpy(g->edit_from, b + 80, 32);
    memcpy(g->edit_to, b + 112, 32);
    g->model[32] = g->edit_from[32] = g->edit_to[32] = 0;
    g->n_steps = v[1], g->vocab = v[2];
    if (v[0] != 1 || n != head + (size_t)g->n_steps * 4 * (1 + (size_t)g->vocab)) return false;
    g->tokens = (const int32_t *)(b + head);
    g->logits = (const float *)(b + head + (size_t)g->n_steps * 4);
    return true;
}

static uint64_t fnv_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    int c;
    while ((c = getc(f)) != EOF) h = (h ^ (uint64_t)c) * 0x100000001b3ull;
    fclose(f);
    return h;
}

static bool edit_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    char buf[8192];
    const size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char *hit = *from ? strstr(buf, from) : NULL;
    if (!hit) return false;
    f = fopen(path, "wb");
    if (!f) return false;
    fwrite(buf, 1, (size_t)(hit - buf), f);
    fputs(to, f);
    fputs(hit + strlen(from), f);
    return fclose(f) == 0;
}

/* The checkpoint a generator ran transformers on: built-in `model` exported again with
 * ts_model_export_hf into a fresh directory `dir` (char[64]), config.json edited (the first
 * `from` becomes `to`; "": no edit), both files' hashes checked against the generator's, then loaded for
 * max_batch sequences. */
static ts_model *hf_checkpoint(ts_test_ctx *ts_t_, const char *model, const char *from,
                               const char *to, uint64_t h_config, uint64_t h_weights,
                               int64_t max_batch, char *dir) {
    snprintf(dir, 64, "/tmp/ts_hfc_XXXXXX");
    TS_CHECK(mkdtemp(dir) != NULL);
    char ckpt[128], p[200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    ts_model_config cfg;
    ts_model *m = NULL, *r = NULL;
    TS_CHECK_STATUS(ts_model_config_builtin(model, &cfg), TS_OK);
    TS_CHECK_STATUS(ts_model_create(&cfg, 1, &m), TS_OK);
    if (m) TS_CHECK_STATUS(ts_model_export_hf(m, ckpt, NULL), TS_OK);
    ts_model_free(m);
    snprintf(p, sizeof p, "%s/config.json", ckpt);
    if (*from) TS_CHECK_MSG(edit_file(p, from, to), "config.json: '%s' not found", from);
    TS_CHECK_MSG(fnv_file(p) == h_config, "config.json is not the checkpoint transformers ran");
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt);
    TS_CHECK_MSG(fnv_file(p) == h_weights, "model.safetensors is not the checkpoint transformers ran");
    if (!TS_FAILED()) TS_CHECK_STATUS(ts_model_load_dir(ckpt, max_batch, &r), TS_OK);
    return r;
}

TS_TEST(model_hf_matches_transformers_dsv4_tiny) {
    size_t n = 0;
    /* TS_HF_V4_GOLDEN: another file of this format (diagnosis: gen_hf_v4.py --emulate) */
    const char *other = getenv("TS_HF_V4_GOLDEN");
    uint8_t *buf = NULL;
    if (other) {
        FILE *f = fopen(other, "rb");
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = (size_t)ftell(f)) > 0 && (buf = malloc(n)))
            if (fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, n, f) != n) free(buf), buf = NULL;
        if (f) fclose(f);
    } else {
        buf = TS_READ_GOLDEN("hf_v4_tiny.bin", &n);
    }
    hf_golden g;
    TS_CHECK_MSG(buf && parse(buf, n, &g), "hf_v4_tiny.bin is malformed");
    if (TS_FAILED()) {
        free(buf);
        return;
    }
    char dir[64];
    ts_model *r = hf_checkpoint(ts_t_, g.model, g.edit_from, g.edit_to, g.h_config, g.h_weights, 1, dir);
    float *lg = malloc((size_t)g.vocab * sizeof *lg);
    double sum = 0, mx = 0;
    int64_t worst = -1, argmax_same = 0;
    for (uint32_t i = 0; r && lg && i < g.n_steps && !TS_FAILED(); i++) {
        const int64_t seq = 0;
        TS_CHECK_STATUS(ts_model_decode(r, 1, &seq, &g.tokens[i], lg), TS_OK);
        const float *want = g.logits + (size_t)i * g.vocab;
        const double d = tm_calc_diff(lg, want, g.vocab);
        sum += d;
        if (d > mx) mx = d, worst = i;
        int64_t a = 0, b = 0;
        for (uint32_t v = 1; v < g.vocab; v++) {
            a = lg[v] > lg[a] ? v : a;
            b = want[v] > want[b] ? v : b;
        }
        argmax_same += a == b;
        if (getenv("TS_HF_STEPS")) printf("step %u %.3g %s\n", i, d, a == b ? "" : "argmax differs");
    }
    const double mean = sum / g.n_steps;
    TS_CHECK_MSG(mean <= 1e-3, "mean calc_diff against transformers %.3g > 1e-3 (max %.3g at step %lld)",
                 mean, mx, (long long)worst);
    if (getenv("TS_MODEL_CHECK_VERBOSE") || TS_FAILED())
        printf("  transformers vs tilestack, %s, %u steps: calc_diff mean %.3g, max %.3g (step %lld), "
               "argmax equal at %lld steps\n", g.model, g.n_steps, mean, mx, (long long)worst,
               (long long)argmax_same);
    free(lg);
    ts_model_free(r);
    tm_remove_dir(dir);
    free(buf);
}

/* tests/golden/hf_v4_tiny_emul.bin (tests/gen/gen_hf_v4_emul.py): transformers' forward with
 * tilestack's rounding points and kernel arithmetic patched in (tests/gen/ts_emulation.py),
 * greedy from a fixed prompt. */
typedef struct hf_emul_golden {
    uint32_t n_prompt, n_gen, vocab;
    uint64_t h_config, h_weights, prompt_seed;
    char model[33], edit_from[33], edit_to[33];
    const int32_t *tokens; /* n_prompt + n_gen */
    const float *logits;   /* [n_prompt + n_gen - 1][vocab] */
} hf_emul_golden;

static bool parse_emul(const uint8_t *b, size_t n, hf_emul_golden *g) {
    const size_t head = 8 + 16 + 24 + 96;
    if (n < head || memcmp(b, "TSHFV4E1", 8)) return false;
    uint32_t v[4];
    memcpy(v, b + 8, 16);
    memcpy(&g->h_config, b + 24, 8);
    memcpy(&g->h_weights, b + 32, 8);
    memcpy(&g->prompt_seed, b + 40, 8);
    memcpy(g->model, b + 48, 32);
    memcpy(g->edit_from, b + 80, 32);
    memcpy(g->edit_to, b + 112, 32);
    g->model[32] = g->edit_from[32] = g->edit_to[32] = 0;
    g->n_prompt = v[1], g->n_gen = v[2], g->vocab = v[3];
    if (v[0] != 1 || g->n_prompt < 1 || g->n_gen < 1 || g->vocab < 2) return false;
    const size_t nt = (size_t)g->n_prompt + g->n_gen;
    if (n != head + nt * 4 + (nt - 1) * g->vocab * 4) return false;
    g->tokens = (const int32_t *)(b + head);
    g->logits = (const float *)(b + head + nt * 4);
    return true;
}

/* largest logit, ties to the lower id (the generator's np.argmax) */
static int32_t argmax_f32(const float *x, uint32_t n) {
    uint32_t a = 0;
    for (uint32_t v = 1; v < n; v++) a = x[v] > x[a] ? v : a;
    return (int32_t)a;
}

/* tilestack consumes the prompt, then decodes greedily on its own tokens: every greedy token
 * must be the emulated transformers' and every step's logits within calc_diff 1e-5 of its
 * logits (the emulation reproduces tilestack's f32 kernels, so the expected distance is 0:
 * docs/models.md). Sequence 0 decodes the prompt token by token, sequence 1 prefills it in one
 * batch (ts_model_prefill_all_logits, as `tilestack generate` does). */
TS_TEST(model_hf_emulated_greedy_dsv4_tiny) {
    size_t n = 0;
    uint8_t *buf = TS_READ_GOLDEN("hf_v4_tiny_emul.bin", &n);
    hf_emul_golden g;
    TS_CHECK_MSG(buf && parse_emul(buf, n, &g), "hf_v4_tiny_emul.bin is malformed");
    if (TS_FAILED()) {
        free(buf);
        return;
    }
    char dir[64];
    ts_model *r = hf_checkpoint(ts_t_, g.model, g.edit_from, g.edit_to, g.h_config, g.h_weights, 2, dir);
    const uint32_t steps = g.n_prompt + g.n_gen - 1;
    float *lg = malloc((size_t)steps * g.vocab * sizeof *lg);
    int32_t *own = malloc((size_t)(steps + 1) * sizeof *own);
    for (int64_t seq = 0; seq < 2 && r && lg && own && !TS_FAILED(); seq++) {
        double mx = 0;
        uint32_t worst = 0, exact = 0, i = 0;
        memcpy(own, g.tokens, (size_t)g.n_prompt * sizeof *own);
        if (seq == 1) {
            TS_CHECK_STATUS(ts_model_prefill_all_logits(r, seq, g.n_prompt, own, lg), TS_OK);
            i = g.n_prompt - 1; /* the prompt's logits are rows 0 .. n_prompt - 1 of lg */
        }
        for (uint32_t t = 0; t < steps && !TS_FAILED(); t++) {
            float *got = lg + (size_t)t * g.vocab;
            if (t > i || (seq == 0 && t == i))
                TS_CHECK_STATUS(ts_model_decode(r, 1, &seq, &own[t], got), TS_OK);
            const float *want = g.logits + (size_t)t * g.vocab;
            const double d = tm_calc_diff(got, want, g.vocab);
            exact += memcmp(got, want, (size_t)g.vocab * sizeof *got) == 0;
            if (d > mx) mx = d, worst = t;
            TS_CHECK_MSG(d <= 1e-5, "seq %lld step %u: calc_diff against emulated transformers "
                         "%.3g > 1e-5", (long long)seq, t, d);
            if (t + 1 >= g.n_prompt) {
                own[t + 1] = argmax_f32(got, g.vocab);
                TS_CHECK_MSG(own[t + 1] == g.tokens[t + 1],
                             "seq %lld greedy token %u: tilestack %d, emulated transformers %d",
                             (long long)seq, t + 1 - g.n_prompt, own[t + 1], g.tokens[t + 1]);
            }
            if (getenv("TS_HF_STEPS")) printf("seq %lld step %u %.3g\n", (long long)seq, t, d);
        }
        if (getenv("TS_MODEL_CHECK_VERBOSE") || TS_FAILED())
            printf("  emulated transformers vs tilestack (%s), %s, %u + %u greedy: calc_diff max "
                   "%.3g (step %u), logits bit-identical at %u of %u steps\n",
                   seq ? "prompt prefilled" : "token by token", g.model, g.n_prompt, g.n_gen, mx,
                   worst, exact, steps);
    }
    free(own);
    free(lg);
    ts_model_free(r);
    tm_remove_dir(dir);
    free(buf);
}
