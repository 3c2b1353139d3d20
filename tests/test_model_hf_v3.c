/* DeepSeek-V3 checkpoints (DeepseekV3ForCausalLM, docs/models.md "V3") against Hugging Face
 * transformers. tests/gen/gen_hf_v3.py built a tiny random checkpoint (3 layers, the first
 * dense; 16 experts in 4 groups, top-2 groups, 4 per token; q_lora 64; the real 512 + 64 latent;
 * YaRN factor 40 / original 4096 / mscale 1 / mscale_all_dim 1), ran transformers' float32
 * forward token by token and stored, in tests/golden/hf_v3_tiny.bin, the checkpoint's table
 * (every tensor's name, dtype, shape and seeded value rule), config.json and the logits of 64
 * teacher-forced steps. The checkpoint (~5 MB) is too big to commit: this test rebuilds it
 * from the table (the stored hash of its tensor bytes proves it is the same checkpoint),
 * writes it as a Hugging Face directory, loads it with ts_model_load_dir and decodes.
 *
 * Conformance: mean calc_diff (DeepGEMM's 1 - 2 sum(xy) / sum(x^2 + y^2), in double) over the
 * 64 steps <= 1e-3 against transformers' f32, which rounds nothing; tilestack rounds every GEMM
 * input, the latent cache and the attention query / output to bf16. Also: the same bits for a
 * sequence decoded alone, in a batch of 3 and with 1 or 2 threads; the batched prefill (chunks
 * of 48 rows: 64 tokens split 48 + 16) == decode bits;
 * bad checkpoints refused naming the file and the tensor or key. TS_HF_STEPS=1 prints every
 * step. */
#include "ts_test.h"
#include "test_model_common.h"
#include "test_hf_v3_ckpt.h"
#include "ts_prng.h"

#include "tilestack/model.h"
#include "model/hf_v3.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* n_steps teacher-forced steps of sequence `seq` (others in the batch get their own tokens). */
static void decode_all(ts_test_ctx *ts_t_, ts_model *m, const golden *g, int64_t batch, float *out) {
    const int64_t V = g->vocab;
    float *lg = malloc((size_t)(batch * V) * sizeof *lg);
    int64_t seqs[4] = {0, 1, 2, 3};
    for (int64_t s = 0; s < batch; s++) ts_model_reset_sequence(m, s);
    for (uint32_t i = 0; lg && i < g->n_steps && !TS_FAILED(); i++) {
        int32_t tok[4];
        for (int64_t s = 0; s < batch; s++) tok[s] = s == 0 ? g->tokens[i] : (int32_t)((g->tokens[i] * 7 + 31 * s) % V);
        /* the sequence under test sits last in the batch */
        int64_t sq[4];
        int32_t tk[4];
        for (int64_t s = 0; s < batch; s++) sq[s] = seqs[(s + 1) % batch], tk[s] = tok[(s + 1) % batch];
        TS_CHECK_STATUS(ts_model_decode(m, batch, sq, tk, lg), TS_OK);
        memcpy(out + (size_t)i * V, lg + (batch - 1) * V, (size_t)V * sizeof *lg);
    }
    free(lg);
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* mean_max / tight_max: bounds of the mean per-step calc_diff (<= 0: not checked); median_max:
 * of the median step */
static void matches(ts_test_ctx *ts_t_, const char *file, double mean_max, double tight_max,
                    double median_max) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, file, &g, &buf)) return;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ts_hfv3_XXXXXX");
    TS_CHECK(mkdtemp(dir) != NULL);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    uint64_t h = 0;
    TS_CHECK(tv3_write_ckpt(&g, ckpt, NULL, &h));
    TS_CHECK_MSG(h == g.h_data, "the rebuilt tensors are not the checkpoint transformers ran");
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_load_dir(ckpt, 3, &m), TS_OK);
    const int64_t V = g.vocab, N = g.n_steps;
    float *a = malloc((size_t)(N * V) * sizeof *a), *b = malloc((size_t)(N * V) * sizeof *b);
    if (m && a && b) {
        TS_CHECK(ts_model_get_config(m)->vocab_size == V);
        decode_all(ts_t_, m, &g, 1, a);
        double sum = 0, mx = 0, steps[256];
        int64_t worst = -1, same_argmax = 0;
        for (int64_t i = 0; i < N; i++) {
            const float *x = a + i * V, *y = g.logits + i * V;
            const double d = tm_calc_diff(x, y, V);
            if (i < 256) steps[i] = d;
            sum += d;
            if (d > mx) mx = d, worst = i;
            int64_t ax = 0, ay = 0;
            for (int64_t v = 1; v < V; v++) ax = x[v] > x[ax] ? v : ax, ay = y[v] > y[ay] ? v : ay;
            same_argmax += ax == ay;
            if (getenv("TS_HF_STEPS")) printf("step %lld %.3g %s\n", (long long)i, d, ax == ay ? "" : "argmax differs");
        }
        const double mean = sum / (double)N;
        qsort(steps, (size_t)(N < 256 ? N : 256), sizeof *steps, cmp_double);
        const double median = steps[(N < 256 ? N : 256) / 2];
        TS_CHECK_MSG(mean_max <= 0 || mean <= mean_max, "mean calc_diff against transformers %.3g > %g "
                     "(max %.3g at step %lld)", mean, mean_max, mx, (long long)worst);
        TS_CHECK_MSG(tight_max <= 0 || mean <= tight_max, "mean calc_diff against transformers %.3g > %g: "
                     "more than bf16 rounding (max %.3g at step %lld)", mean, tight_max, mx, (long long)worst);
        TS_CHECK_MSG(median <= median_max, "median calc_diff against transformers %.3g > %g", median, median_max);
        if (getenv("TS_MODEL_CHECK_VERBOSE") || TS_FAILED())
            printf("  transformers vs tilestack, %s, %lld steps: calc_diff mean %.3g, median %.3g, max %.3g "
                   "(step %lld), argmax equal at %lld steps, logits fnv1a64 %016llx (the same on every ISA)\n",
                   file, (long long)N, mean, median, mx, (long long)worst, (long long)same_argmax,
                   (unsigned long long)ts_fnv1a64(a, (size_t)(N * V) * sizeof *a));
        /* batch invariance: the same sequence decoded last in a batch of 3 */
        decode_all(ts_t_, m, &g, 3, b);
        TS_CHECK_MSG(!memcmp(a, b, (size_t)(N * V) * sizeof *a), "batch of 3 changed the logits bits");
        /* thread count */
        const int th = ts_get_num_threads();
        ts_set_num_threads(th == 1 ? 2 : 1);
        decode_all(ts_t_, m, &g, 1, b);
        ts_set_num_threads(th);
        TS_CHECK_MSG(!memcmp(a, b, (size_t)(N * V) * sizeof *a), "another thread count changed the logits bits");
        /* prefill of every token == decode, bit for bit; then decode continues from there */
        ts_model_reset_sequence(m, 2);
        TS_CHECK_STATUS(ts_model_prefill_all_logits(m, 2, N, g.tokens, b), TS_OK);
        TS_CHECK_MSG(!memcmp(a, b, (size_t)(N * V) * sizeof *a), "prefill logits differ from decode");
        TS_CHECK(ts_model_sequence_position(m, 2) == N);
        /* a prompt of 37 (last logits only), then a decode step: rows 36 and 37 */
        const int64_t s1 = 1;
        ts_model_reset_sequence(m, s1);
        TS_CHECK_STATUS(ts_model_prefill(m, s1, 37, g.tokens, b), TS_OK);
        TS_CHECK_MSG(!memcmp(a + 36 * V, b, (size_t)V * sizeof *a), "prefill's last logits differ");
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s1, &g.tokens[37], b), TS_OK);
        TS_CHECK_MSG(!memcmp(a + 37 * V, b, (size_t)V * sizeof *a), "decode after prefill differs");
        if (strstr(g.config, "quantization_config")) {
            /* the FP8 loader == the BF16 loader on the same weights dequantised here: the same
             * logits bits (checks every scale's block indexing, the kv_b head slices included) */
            char ck2[140];
            snprintf(ck2, sizeof ck2, "%s/deq", dir);
            const damage deq = {.dequantize = true};
            TS_CHECK(tv3_write_ckpt(&g, ck2, &deq, NULL));
            ts_model *m2 = NULL;
            TS_CHECK_STATUS(ts_model_load_dir(ck2, 1, &m2), TS_OK);
            if (m2) {
                decode_all(ts_t_, m2, &g, 1, b);
                TS_CHECK_MSG(!memcmp(a, b, (size_t)(N * V) * sizeof *a),
                             "FP8 checkpoint != its BF16 dequantisation");
            }
            ts_model_free(m2);
        }
        /* a random cache (the demo's): the position moves, the next step reads those rows
         * (the same seed gives the same logits, another seed others), all finite */
        float *r1 = b, *r2 = b + V;
        for (int pass = 0; pass < 3; pass++) {
            TS_CHECK_STATUS(ts_model_prefill_random(m, 0, 8, pass < 2 ? 1 : 2), TS_OK);
            TS_CHECK(ts_model_sequence_position(m, 0) == 8);
            const int64_t seq = 0;
            const int32_t tok = 7;
            TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &tok, pass ? r2 : r1), TS_OK);
            bool finite = true;
            for (int64_t i = 0; i < V; i++) finite = finite && isfinite((pass ? r2 : r1)[i]);
            TS_CHECK(finite);
            if (pass) TS_CHECK((memcmp(r1, r2, (size_t)V * sizeof *r1) == 0) == (pass == 1));
        }
        TS_CHECK_STATUS(ts_model_prefill_random(m, 0, ts_model_get_config(m)->max_seq_len, 1), TS_ERR_INVALID_ARGUMENT);
        /* the refusals of what a V3 model does not do */
        TS_CHECK_STATUS(ts_model_export_hf(m, "/tmp/never", NULL), TS_ERR_UNSUPPORTED);
    }
    free(a);
    free(b);
    ts_model_free(m);
    tm_remove_dir(dir);
    tv3_free_golden(&g, buf);
}

/* BF16 weights. Issue 19's bound is a mean of 1e-3; bf16 rounding alone gives ~5e-6 here
 * (2026-12-02), and the tighter 5e-5 is what sees a wrong YaRN ramp in 64 positions (YaRN off:
 * 3.6e-4; mscale^2 off, groups ignored, no renormalisation, rotate-half, scale 1: > 1e-2). */
TS_TEST(model_hf_v3_matches_transformers) { matches(ts_t_, "hf_v3_tiny.bin", 1e-3, 5e-5, 2e-5); }

/* DeepSeek's FP8 release form: e4m3 linear layers + f32 weight_scale_inv per 128x128 (the
 * golden's transformers model got code x scale in f32: transformers 5.24 does not dequantise
 * this checkpoint on a CPU, see gen_hf_v3.py). tilestack dequantises to bf16 at load, and that
 * rounding of the weights (~3e-5 per step) flips near-tied expert choices at a few steps
 * (transformers itself, with the same bf16-rounded weights, flips at step 61: mean 1.1e-3
 * against its f32 run), so the mean is not bounded here; the median step is (a wrong scale or
 * block index would show at every step), and the FP8 load must give exactly the bits of the
 * BF16 checkpoint of the same dequantised weights. */
TS_TEST(model_hf_v3_fp8_matches_transformers) { matches(ts_t_, "hf_v3_fp8_tiny.bin", 0, 0, 2e-4); }

static void expect(ts_test_ctx *ts_t_, const golden *g, const char *what, const damage *dm,
                   ts_status code, const char *msg1, const char *msg2) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ts_hfv3b_XXXXXX");
    if (!mkdtemp(dir)) {
        TS_CHECK(false);
        return;
    }
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    TS_CHECK_MSG(tv3_write_ckpt(g, ckpt, dm, NULL), "%s: cannot write the checkpoint", what);
    ts_model *m = NULL;
    const ts_status st = ts_model_load_dir(ckpt, 1, &m);
    const char *e = ts_last_error();
    TS_CHECK_MSG(st == code, "%s: status %d, expected %d (%s)", what, (int)st, (int)code, e);
    TS_CHECK_MSG(m == NULL, "%s: a model came back", what);
    TS_CHECK_MSG(strstr(e, msg1) && (!msg2 || strstr(e, msg2)), "%s: message '%s' lacks '%s' / '%s'", what,
                 e, msg1, msg2 ? msg2 : "");
    ts_model_free(m);
    tm_remove_dir(dir);
}

TS_TEST(model_hf_v3_bad_checkpoints) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, "hf_v3_tiny.bin", &g, &buf)) return;
    const char *kvb = "model.layers.1.self_attn.kv_b_proj.weight";
    const char *bias = "model.layers.2.mlp.gate.e_score_correction_bias";
    const damage drop = {.drop = kvb}, shape = {.reshape = kvb}, nan = {.nan_in = bias},
                 nan16 = {.nan_in = "model.layers.0.mlp.up_proj.weight"}, extra = {.extra = true};
    expect(ts_t_, &g, "missing tensor", &drop, TS_ERR_INVALID_ARGUMENT, kvb, "is missing");
    expect(ts_t_, &g, "wrong shape", &shape, TS_ERR_INVALID_ARGUMENT, kvb, "shape [257, 512], expected [256, 512]");
    expect(ts_t_, &g, "NaN f32", &nan, TS_ERR_INVALID_ARGUMENT, bias, "not finite");
    expect(ts_t_, &g, "NaN bf16", &nan16, TS_ERR_INVALID_ARGUMENT, "mlp.up_proj.weight", "row 0, column 5");
    expect(ts_t_, &g, "extra tensor", &extra, TS_ERR_INVALID_ARGUMENT, "rotary_emb.inv_freq", "not part of the model");
    static const struct { const char *from, *to, *m1, *m2; ts_status code; } cfgs[] = {
        {"\"n_group\": 4", "\"n_group\": 3", "n_routed_experts = 16 is not a multiple of n_group = 3", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"topk_group\": 2", "\"topk_group\": 5", "topk_group = 5 > n_group = 4", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"kv_lora_rank\": 512", "\"kv_lora_rank\": 256", "kv_lora_rank = 256", "FlashMLA", TS_ERR_UNSUPPORTED},
        {"\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"", "scoring_func = \"softmax\"", "not supported", TS_ERR_UNSUPPORTED},
        {"\"hidden_size\": 256", "\"hidden_size\": \"256\"", "hidden_size", "must be an integer", TS_ERR_INVALID_ARGUMENT},
        {"\"num_hidden_layers\": 3", "\"num_hidden_layers\": -3", "num_hidden_layers = -3 is outside", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 1, \"shiny_new_key\": 1", "shiny_new_key", "not a deepseek_v3 key", TS_ERR_UNSUPPORTED},
        {"\"type\": \"yarn\"", "\"type\": \"longrope\"", "rope_scaling.rope_type = \"longrope\"", NULL, TS_ERR_UNSUPPORTED},
        {"\"factor\": 40", "\"factor\": 0.5", "rope_scaling.factor = 0.5 is outside", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"torch_dtype\"", "\"quantization_config\": {\"quant_method\": \"fp8\"}, \"torch_dtype\"", "q_a_proj.weight': dtype BF16, expected F8_E4M3", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"torch_dtype\"", "\"quantization_config\": {\"quant_method\": \"awq\"}, \"torch_dtype\"", "quantization_config.quant_method = \"awq\"", NULL, TS_ERR_UNSUPPORTED},
        {"\"num_key_value_heads\": 4", "\"num_key_value_heads\": 1", "num_key_value_heads = 1", NULL, TS_ERR_UNSUPPORTED},
        {"\"DeepseekV3ForCausalLM\"", "\"DeepseekV3ForSequenceClassification\"", "architectures[0]", "not supported", TS_ERR_UNSUPPORTED},
        {"\"n_routed_experts\": 16", "\"n_routed_experts\": 4096", "fewer than the", "expert weights", TS_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const damage dm = {.cfg_from = cfgs[i].from, .cfg_to = cfgs[i].to};
        char what[96];
        snprintf(what, sizeof what, "config %s", cfgs[i].to);
        expect(ts_t_, &g, what, &dm, cfgs[i].code, cfgs[i].m1, cfgs[i].m2);
    }
    tv3_free_golden(&g, buf);
}

TS_TEST(model_hf_v3_fp8_bad_checkpoints) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, "hf_v3_fp8_tiny.bin", &g, &buf)) return;
    const char *w = "model.layers.1.mlp.experts.3.up_proj.weight";
    const char *s = "model.layers.1.mlp.experts.3.up_proj.weight_scale_inv";
    const damage drop = {.drop = s}, shape = {.reshape = s}, nan = {.nan_in = w}, nan_s = {.nan_in = s},
                 block = {.cfg_from = "128\n    ]", .cfg_to = "64\n    ]"},
                 plain = {.cfg_from = "\"quantization_config\"", .cfg_to = "\"quantization_config_off\""};
    expect(ts_t_, &g, "missing scale", &drop, TS_ERR_INVALID_ARGUMENT, s, "is missing");
    expect(ts_t_, &g, "scale shape", &shape, TS_ERR_INVALID_ARGUMENT, s, "shape [2, 2], expected [1, 2]");
    expect(ts_t_, &g, "e4m3 NaN", &nan, TS_ERR_INVALID_ARGUMENT, w, "e4m3 NaN code");
    expect(ts_t_, &g, "NaN scale", &nan_s, TS_ERR_INVALID_ARGUMENT, s, "not a positive normal number");
    expect(ts_t_, &g, "block size", &block, TS_ERR_UNSUPPORTED, "weight_block_size = [128, 64]", NULL);
    expect(ts_t_, &g, "FP8 tensors, no quantization_config", &plain, TS_ERR_UNSUPPORTED, "quantization_config_off", NULL);
    tv3_free_golden(&g, buf);
}

/* The released configs (DeepSeek-V3 / R1 config.json, keys and values as docs: ../shared/specs/
 * deepseek_model.md §2.1; V3.1 adds scale_fmt ue8m0) parse to the model they describe. */
TS_TEST(model_hf_v3_config_releases) {
    static const char v3[] =
        "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"auto_map\": {\"AutoConfig\": \"configuration_deepseek.DeepseekV3Config\"}, \"aux_loss_alpha\": 0.001,"
        " \"bos_token_id\": 0, \"eos_token_id\": 1, \"ep_size\": 1, \"first_k_dense_replace\": 3,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 7168, \"initializer_range\": 0.02, \"intermediate_size\": 18432,"
        " \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v3\","
        " \"moe_intermediate_size\": 2048, \"moe_layer_freq\": 1, \"n_group\": 8, \"n_routed_experts\": 256,"
        " \"n_shared_experts\": 1, \"norm_topk_prob\": true, \"num_attention_heads\": 128, \"num_experts_per_tok\": 8,"
        " \"num_hidden_layers\": 61, \"num_key_value_heads\": 128, \"num_nextn_predict_layers\": 1,"
        " \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
        " \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
        " %s\"weight_block_size\": [128, 128]}, \"rms_norm_eps\": 1e-06,"
        " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
        " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
        " \"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\", \"seq_aux\": true,"
        " \"tie_word_embeddings\": false, \"topk_group\": 4, \"topk_method\": \"noaux_tc\","
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.33.1\", \"use_cache\": true,"
        " \"v_head_dim\": 128, \"vocab_size\": 129280}";
    for (int v31 = 0; v31 < 2; v31++) {
        char text[4096];
        snprintf(text, sizeof text, v3, v31 ? "\"scale_fmt\": \"ue8m0\", " : "");
        ts__v3_config c;
        TS_CHECK_STATUS(ts__v3_parse_config(text, strlen(text), "config.json", &c), TS_OK);
        TS_CHECK(c.vocab == 129280 && c.dim == 7168 && c.n_layers == 61 && c.first_dense == 3);
        TS_CHECK(c.n_heads == 128 && c.q_lora == 1536 && c.kv_lora == 512 && c.nope == 128 && c.rope == 64);
        TS_CHECK(c.n_experts == 256 && c.topk == 8 && c.n_group == 8 && c.topk_group == 4 && c.n_shared == 1);
        TS_CHECK(c.quantized && c.yarn && c.factor == 40 && c.orig_max == 4096 && c.interleave);
        TS_CHECK(c.route_scale == 2.5 && c.norm_topk && c.max_seq == 8192);
        /* transformers: attention_factor = mscale(40, 1) / mscale(40, 1) = 1; softmax scale
         * 192^-0.5 x (0.1 ln 40 + 1)^2 */
        const double ms = 0.1 * log(40.0) + 1.0;
        TS_CHECK(c.attn_factor == 1.0);
        TS_CHECK(fabs(c.softmax_scale - ms * ms / sqrt(192.0)) < 1e-15);
        ts__v3_tensor *tl = NULL;
        int64_t nt = 0;
        TS_CHECK_STATUS(ts__v3_tensors(&c, &tl, &nt), TS_OK);
        /* 61 layers x 9 attention + norms, 3 dense x 3, 58 MoE x (gate 2 + 256 x 3 + shared 3), embed, norm, head */
        TS_CHECK_EQ_INT(nt, 61 * 9 + 3 * 3 + 58 * (2 + 768 + 3) + 3);
        free(tl);
    }
}

/* DeepseekV32ForCausalLM (gen_hf_v3.py --v32): V3 + the lightning indexer (8 heads x 128,
 * index_topk 24 < the 64 steps: from position 24 on every layer attends to 24 chosen rows;
 * transformers' own sparse and dense (index_topk 64) logits differ there by calc_diff 5.2e-2 on
 * average). The same checks as V3: transformers' f32 logits (issue 19's mean bound 1e-3), batch
 * of 3, thread count, prefill == decode bits. Measured 2026-12-02: mean 3.3e-4, median 5.9e-6,
 * max 1.4e-2 (step 62); the argmax differs at step 30 (a near-tie of two logits, calc_diff
 * 5e-6) and 41 (a near-tie of the top-k choice
 * after bf16 rounding upstream of the indexer: with index_topk 16 the mean is 1.9e-3, so the
 * bound is a regression check of this golden, as docs/models.md says). */
TS_TEST(model_hf_v32_matches_transformers) { matches(ts_t_, "hf_v32_tiny.bin", 1e-3, 0, 1e-3); }

TS_TEST(model_hf_v32_bad_checkpoints) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, "hf_v32_tiny.bin", &g, &buf)) return;
    const char *wk = "model.layers.2.self_attn.indexer.wk.weight";
    const char *kb = "model.layers.0.self_attn.indexer.k_norm.bias";
    const damage drop = {.drop = wk}, drop_b = {.drop = kb}, shape = {.reshape = wk}, nan = {.nan_in = kb};
    expect(ts_t_, &g, "missing indexer tensor", &drop, TS_ERR_INVALID_ARGUMENT, wk, "is missing");
    expect(ts_t_, &g, "missing k_norm bias", &drop_b, TS_ERR_INVALID_ARGUMENT, kb, "is missing");
    expect(ts_t_, &g, "indexer shape", &shape, TS_ERR_INVALID_ARGUMENT, wk, "shape [129, 256], expected [128, 256]");
    expect(ts_t_, &g, "NaN in k_norm bias", &nan, TS_ERR_INVALID_ARGUMENT, kb, "not finite");
    static const struct { const char *from, *to, *m1, *m2; ts_status code; } cfgs[] = {
        {"\"index_topk\": 24", "\"index_topk\": 0", "index_topk = 0 is outside", NULL, TS_ERR_INVALID_ARGUMENT},
        {"\"index_topk\": 24", "\"index_topk\": \"24\"", "index_topk", "must be an integer", TS_ERR_INVALID_ARGUMENT},
        {"\"index_topk\": 24", "\"index_topk_off\": 24", "index_topk_off", "not a deepseek_v32 key", TS_ERR_UNSUPPORTED},
        {"\"index_head_dim\": 128", "\"index_head_dim\": 32", "index_head_dim = 32", "qk_rope_head_dim", TS_ERR_INVALID_ARGUMENT},
        {"\"index_head_dim\": 128", "\"index_head_dim\": 64", "indexer.wq_b.weight", "expected [512, 64]", TS_ERR_INVALID_ARGUMENT},
        {"\"index_n_heads\": 8", "\"index_n_heads\": 8, \"layer_types\": [\"indexed_attention\", \"full_attention\", \"indexed_attention\"]", "layer_types[1] = \"full_attention\"", NULL, TS_ERR_UNSUPPORTED},
        {"\"index_n_heads\": 8", "\"index_n_heads\": 8, \"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\"]", "mlp_layer_types[1] = \"dense\"", "first_k_dense_replace = 1", TS_ERR_UNSUPPORTED},
        {"\"DeepseekV32ForCausalLM\"", "\"DeepseekV3ForCausalLM\"", "architectures[0] = \"DeepseekV3ForCausalLM\"", "deepseek_v32", TS_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const damage dm = {.cfg_from = cfgs[i].from, .cfg_to = cfgs[i].to};
        char what[160];
        snprintf(what, sizeof what, "config %s", cfgs[i].to);
        expect(ts_t_, &g, what, &dm, cfgs[i].code, cfgs[i].m1, cfgs[i].m2);
    }
    tv3_free_golden(&g, buf);
}

/* DeepSeek-V3.2-Exp's config.json (V3's keys and values plus the indexer's: ../shared/specs/
 * deepseek_model.md §1.4) parses to the model it describes. */
TS_TEST(model_hf_v32_config_release) {
    static const char v32[] =
        "{\"architectures\": [\"DeepseekV32ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 0, \"eos_token_id\": 1, \"ep_size\": 1, \"first_k_dense_replace\": 3,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 7168, \"index_head_dim\": 128, \"index_n_heads\": 64,"
        " \"index_topk\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 18432,"
        " \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v32\","
        " \"moe_intermediate_size\": 2048, \"moe_layer_freq\": 1, \"n_group\": 8, \"n_routed_experts\": 256,"
        " \"n_shared_experts\": 1, \"norm_topk_prob\": true, \"num_attention_heads\": 128, \"num_experts_per_tok\": 8,"
        " \"num_hidden_layers\": 61, \"num_key_value_heads\": 128, \"num_nextn_predict_layers\": 1,"
        " \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
        " \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
        " \"scale_fmt\": \"ue8m0\", \"weight_block_size\": [128, 128]}, \"rms_norm_eps\": 1e-06,"
        " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
        " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
        " \"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\","
        " \"tie_word_embeddings\": false, \"topk_group\": 4, \"topk_method\": \"noaux_tc\","
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.44.2\", \"use_cache\": true,"
        " \"v_head_dim\": 128, \"vocab_size\": 129280}";
    ts__v3_config c;
    TS_CHECK_STATUS(ts__v3_parse_config(v32, strlen(v32), "config.json", &c), TS_OK);
    TS_CHECK(c.v32 && c.index_heads == 64 && c.index_dim == 128 && c.index_topk == 2048);
    TS_CHECK(c.n_layers == 61 && c.first_dense == 3 && c.quantized && c.yarn && c.interleave);
    ts__v3_tensor *tl = NULL;
    int64_t nt = 0;
    TS_CHECK_STATUS(ts__v3_tensors(&c, &tl, &nt), TS_OK);
    /* V3's count plus 5 indexer tensors per layer */
    TS_CHECK_EQ_INT(nt, 61 * 9 + 3 * 3 + 58 * (2 + 768 + 3) + 3 + 61 * 5);
    int64_t fp8 = 0;
    for (int64_t i = 0; tl && i < nt; i++)
        fp8 += (tl[i].role == V3_IX_WQ_B || tl[i].role == V3_IX_WK) && ts__v3_fp8_role(tl[i].role);
    TS_CHECK_EQ_INT(fp8, 61 * 2);
    free(tl);
    /* the same text as a V3 config: the index keys are unknown there */
    char v3[4096];
    snprintf(v3, sizeof v3, "%s", v32);
    char *p = strstr(v3, "DeepseekV32ForCausalLM");
    memmove(p + 10, p + 11, strlen(p + 11) + 1); /* DeepseekV3ForCausalLM */
    p = strstr(v3, "\"deepseek_v32\"");
    memmove(p + 12, p + 13, strlen(p + 13) + 1);
    TS_CHECK_STATUS(ts__v3_parse_config(v3, strlen(v3), "config.json", &c), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "index_head_dim") && strstr(ts_last_error(), "not a deepseek_v3 key"));
}
