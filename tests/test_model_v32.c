/* attention = v32 (docs/model.md §8) on dsv32-tiny: the three implementations against each
 * other (numpy golden tests/golden/dsv32_tiny.bin from tests/gen/gen_dsv32.py, the float64
 * reference, the optimised path), thread- and batch-invariance, the indexer's top-k actually
 * choosing, save / load, random prefill, and the v32 config checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_model_common.h"
#include "tilestack/quant.h"

#ifndef TS_GOLDEN_DIR
#define TS_GOLDEN_DIR "tests/golden"
#endif
#define GOLDEN_PATH TS_GOLDEN_DIR "/dsv32_tiny.bin"

static tm_golden_ref g_ref = {.path = GOLDEN_PATH};

__attribute__((destructor)) static void free_reference(void) { tm_free_reference(&g_ref); }

TS_TEST(model_v32_golden_file_is_the_builtin_config) {
    ts__model_golden g;
    TS_CHECK_STATUS(ts__model_golden_load(GOLDEN_PATH, &g), TS_OK);
    if (TS_FAILED()) return;
    ts_model_config b;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &b), TS_OK);
    /* every §1 field of the file equals the built-in (the name included) */
    char jg[4096], jb[4096];
    TS_CHECK_STATUS(ts_model_config_to_json(&g.cfg, jg, sizeof jg), TS_OK);
    TS_CHECK_STATUS(ts_model_config_to_json(&b, jb, sizeof jb), TS_OK);
    TS_CHECK_MSG(strcmp(jg, jb) == 0, "golden config %s\n  built-in %s", jg, jb);
    TS_CHECK(g.cfg.attention == TS_MODEL_ATTN_V32);
    TS_CHECK_STATUS(ts_model_config_validate(&g.cfg, 1), TS_OK);
    TS_CHECK_EQ_INT(g.cfg.index_topk, 16);
    TS_CHECK_EQ_INT(g.n_prompt, 40);
    TS_CHECK_EQ_INT(g.n_gen, 32);
    /* per layer: 12 attention tensors (7 FP8 ones with scales) + the V4 MoE / mHC set */
    TS_CHECK(g.n_sums > 100);
    ts__model_golden_free(&g);
}

TS_TEST(model_v32_reference_matches_numpy_golden) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    TS_CHECK_MSG(g_ref.sum_mismatches == 0, "%lld weight checksums differ (first: %s)",
                 (long long)g_ref.sum_mismatches, g_ref.first_bad);
    tm_check_reference_vs_golden(ts_t_, &g_ref, "v32 reference vs numpy golden");
}

/* TS_MODEL_V32_PROMPTS="seed seed ...": docs/model.md §8's conditioning figures for other
 * prompts (40 prompt tokens from the seed as the golden run, then 32 steps fed the reference's
 * argmax; both paths see the same tokens): per prompt the max / mean per-step calc_diff, the
 * first step above 1e-9 and the steps whose argmax differs. */
static void conditioning_report(ts_test_ctx *ts_t_, const ts_model_config *c, const char *list) {
    const int64_t V = c->vocab_size, seq = 0, steps = 72;
    double *ld = malloc((size_t)V * sizeof(double)), *lo = malloc((size_t)V * sizeof(double));
    float *lf = malloc((size_t)V * sizeof(float));
    for (const char *p = list; ld && lo && lf && *p;) {
        char *end;
        const unsigned long long seed = strtoull(p, &end, 10);
        if (end == p) break;
        p = end;
        ts_model *m = NULL;
        ts_model_reference *r = NULL;
        TS_CHECK_STATUS(ts_model_create(c, 1, &m), TS_OK);
        TS_CHECK_STATUS(ts_model_reference_create(c, &r), TS_OK);
        uint64_t z = seed;
        int32_t tok = 0;
        double mx = 0, sum = 0;
        int64_t worst = -1, first = -1, flips = 0;
        for (int64_t i = 0; m && r && i < steps; i++) {
            if (i < 40) { /* splitmix64, as ts_prng / the golden's prompt */
                uint64_t x = (z += 0x9E3779B97F4A7C15ull);
                x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
                x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
                tok = (int32_t)(((x ^ (x >> 31)) >> 32) % (uint64_t)V);
            }
            TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &tok, lf), TS_OK);
            TS_CHECK_STATUS(ts_model_reference_decode(r, tok, ld), TS_OK);
            if (TS_FAILED()) break;
            for (int64_t v = 0; v < V; v++) lo[v] = lf[v];
            ts_tensor x = ts_tensor_1d(ld, TS_F64, V), y = ts_tensor_1d(lo, TS_F64, V);
            double d = 0;
            TS_CHECK_STATUS(ts_calc_diff(&x, &y, &d), TS_OK);
            int64_t a = 0, b = 0;
            for (int64_t v = 1; v < V; v++) {
                if (ld[v] > ld[a]) a = v;
                if (lo[v] > lo[b]) b = v;
            }
            if (d > mx) mx = d, worst = i;
            if (d > 1e-9 && first < 0) first = i;
            sum += d;
            flips += a != b;
            tok = (int32_t)a;
        }
        printf("  v32 prompt seed %llu: max calc_diff %.3g (step %lld), mean %.3g, first step above "
               "1e-9: %lld, argmax differs at %lld of %lld steps\n",
               seed, mx, (long long)worst, sum / (double)steps, (long long)first, (long long)flips,
               (long long)steps);
        ts_model_free(m);
        ts_model_reference_free(r);
    }
    free(ld);
    free(lo);
    free(lf);
}

/* calc_diff < 1e-3 at every step and the same 33 greedy choices; the same bits with 1 and 2
 * threads and inside a batch of 3 */
TS_TEST(model_v32_optimised_matches_reference) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    ts__model_compare cmp;
    tm_check_optimised(ts_t_, &g_ref, 3, "v32 optimised vs reference", &cmp);
    /* the first steps make every rounding choice the reference makes */
    TS_CHECK(cmp.first_above_1e9 < 0 || cmp.first_above_1e9 >= 16);
    if (getenv("TS_MODEL_V32_PROMPTS"))
        conditioning_report(ts_t_, &g_ref.golden.cfg, getenv("TS_MODEL_V32_PROMPTS"));
}

/* The indexer chooses: with index_topk >= the context every row is attended, so the logits
 * equal those of index_topk = 16 while at most 16 rows exist (bit for bit) and differ after. */
TS_TEST(model_v32_topk_selects_rows) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    ts_model_config all = c;
    all.index_topk = c.max_seq_len;
    ts_model *a = NULL, *b = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 1, &a), TS_OK);
    TS_CHECK_STATUS(ts_model_create(&all, 1, &b), TS_OK);
    const int64_t V = c.vocab_size, seq = 0;
    float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    int differ_after = 0;
    for (int i = 0; a && b && la && lb && i < 24; i++) {
        const int32_t tok = (int32_t)((i * 37 + 5) % V);
        TS_CHECK_STATUS(ts_model_decode(a, 1, &seq, &tok, la), TS_OK);
        TS_CHECK_STATUS(ts_model_decode(b, 1, &seq, &tok, lb), TS_OK);
        const int same = memcmp(la, lb, (size_t)V * sizeof(float)) == 0;
        if (i < 16) TS_CHECK_MSG(same, "step %d: top-16 of %d rows differs from all rows", i, i + 1);
        else differ_after += !same;
    }
    TS_CHECK(differ_after >= 4);
    free(la);
    free(lb);
    ts_model_free(a);
    ts_model_free(b);
}

TS_TEST(model_v32_save_load_roundtrip) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    c.n_layers = 2;
    c.seed = 11;
    char path[] = "/tmp/ts_model_v32_XXXXXX";
    ts_model *m = tm_create_saved(ts_t_, &c, 2, path), *l = NULL;
    if (!m) return;
    TS_CHECK_STATUS(ts_model_load(path, 2, &l), TS_OK);
    if (l) {
        const ts_model_config *lc = ts_model_get_config(l);
        TS_CHECK(lc->attention == TS_MODEL_ATTN_V32 && lc->n_layers == 2 && lc->seed == 11);
        const int64_t V = c.vocab_size, seqs[2] = {1, 0};
        float *x = malloc((size_t)(2 * V) * sizeof(float)), *y = malloc((size_t)(2 * V) * sizeof(float));
        for (int i = 0; x && y && i < 20; i++) {
            const int32_t toks[2] = {(int32_t)((i * 11 + 3) % V), (int32_t)((i * 5 + 1) % V)};
            TS_CHECK_STATUS(ts_model_decode(m, 2, seqs, toks, x), TS_OK);
            TS_CHECK_STATUS(ts_model_decode(l, 2, seqs, toks, y), TS_OK);
            TS_CHECK_MSG(memcmp(x, y, (size_t)(2 * V) * sizeof(float)) == 0, "step %d differs", i);
        }
        free(x);
        free(y);
        ts_model_free(l);
    }
    ts_model_free(m);
    remove(path);
}

/* The file checks know §8's tensor list: a renamed v32 tensor is missing by name, and a v32
 * file whose config claims v4 fails on the first tensor whose V4 shape differs. */
TS_TEST(model_v32_file_checks_its_tensor_list) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    c.n_layers = 1;
    c.n_hash_layers = 0;
    char path[] = "/tmp/ts_model_v32f_XXXXXX", bad[64];
    ts_model *m = tm_create_saved(ts_t_, &c, 1, path), *l = (ts_model *)(uintptr_t)0x1;
    if (!m) return;
    snprintf(bad, sizeof bad, "%s.bad", path);
    tm_blob f = tm_read_all(path);
    TS_CHECK(tm_write_edited(bad, &f, "\"0.attn.wkv_b\":", "\"0.attn.wkv_B\":"));
    TS_CHECK_STATUS(ts_model_load(bad, 1, &l), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(strstr(ts_last_error(), "0.attn.wkv_b is missing") != NULL, "%s", ts_last_error());
    TS_CHECK(tm_write_edited(bad, &f, "\\\"attention\\\": \\\"v32\\\"",
                             "\\\"attention\\\": \\\"v4\\\""));
    TS_CHECK_STATUS(ts_model_load(bad, 1, &l), TS_ERR_INVALID_ARGUMENT);
    /* wq_b is [n_heads·512, q_lora] in §2's V4 list, [n_heads·192, q_lora] in §8's */
    TS_CHECK_MSG(strstr(ts_last_error(), "0.attn.wq_b") && strstr(ts_last_error(), "shape"), "%s",
                 ts_last_error());
    TS_CHECK(l == (ts_model *)(uintptr_t)0x1);
    free(f.p);
    remove(bad);
    remove(path);
    ts_model_free(m);
}

TS_TEST(model_v32_prefill_random_then_decode) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 2, &m), TS_OK);
    if (!m) return;
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 100, 5), TS_OK);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 100);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 0);
    const int64_t V = c.vocab_size, seqs[2] = {0, 1};
    const int32_t toks[2] = {3, 4};
    float *lg = malloc((size_t)(2 * V) * sizeof(float));
    TS_CHECK_STATUS(ts_model_decode(m, 2, seqs, toks, lg), TS_OK);
    int finite = 1;
    for (int64_t i = 0; lg && i < 2 * V; i++) finite &= isfinite(lg[i]) != 0;
    TS_CHECK(finite);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 101);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 0, c.max_seq_len, 5), TS_ERR_INVALID_ARGUMENT);
    free(lg);
    ts_model_free(m);
}

static void expect_bad(ts_test_ctx *ts_t_, const ts_model_config *c, const char *a,
                       const char *b) {
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_config_validate(c, 1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(strstr(ts_last_error(), a) && (!b || strstr(ts_last_error(), b)),
                 "message \"%s\" lacks \"%s\" / \"%s\"", ts_last_error(), a, b ? b : "");
    TS_CHECK_STATUS(ts_model_create(c, 1, &m), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(m == NULL);
}

TS_TEST(model_v32_bad_configs) {
    ts_model_config c, bad;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 1), TS_OK);
    bad = c;
    bad.head_dim = 576; /* the V3.2 q/k width is not a config key: head_dim is kv_lora_rank */
    expect_bad(ts_t_, &bad, "head_dim", "v32");
    bad = c;
    bad.rope_head_dim = 32;
    expect_bad(ts_t_, &bad, "rope_head_dim", "v32");
    bad = c;
    bad.max_seq_len = 2 * c.original_seq_len;
    expect_bad(ts_t_, &bad, "max_seq_len", "YaRN");
    bad = c;
    bad.index_head_dim = 64;
    expect_bad(ts_t_, &bad, "index_head_dim", NULL);
    bad = c;
    bad.q_lora_rank = 192;
    expect_bad(ts_t_, &bad, "q_lora_rank", "128");
    bad = c;
    bad.index_topk = 0;
    expect_bad(ts_t_, &bad, "index_topk", NULL);
    /* JSON: the same checks name the key */
    TS_CHECK_STATUS(ts_model_config_parse_json("{\"attention\": \"v32\", \"head_dim\": 576}", &bad),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "head_dim") && strstr(ts_last_error(), "v32"));
    TS_CHECK_STATUS(ts_model_config_parse_json("{\"attention\": \"v3.2\"}", &bad),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "attention") != NULL);
    /* v32 on dsv4-mini's widths: valid (compress_ratios are not used by §8) */
    TS_CHECK_STATUS(ts_model_config_parse_json("{\"attention\": \"v32\"}", &bad), TS_OK);
    TS_CHECK(bad.attention == TS_MODEL_ATTN_V32 && bad.dim == 1024);
    /* the reference refuses what it cannot run, naming the field */
    ts_model_reference *r = NULL;
    bad = c;
    bad.max_seq_len = 2 * c.original_seq_len;
    TS_CHECK_STATUS(ts_model_reference_create(&bad, &r), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "max_seq_len") != NULL && r == NULL);
}
