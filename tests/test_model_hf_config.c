/* config.json -> ts_model_config (src/model/hf_config_v4.c, docs/models.md "Config keys"):
 * DeepSeek's V4-Flash config.json as released (../shared/specs/deepseek_model.md §2.3) and the
 * config.json transformers 5.23's save_pretrained writes for a small DeepseekV4Config map to
 * the values those configs mean; a release config with its MTP layer (n_layers + 1 compress
 * ratios, mtp.* tensors) loads with the MTP layer left out. */
#include "ts_test.h"

#include "model/hf_v4.h"
#include "tilestack/model.h"

#include <stdlib.h>
#include <unistd.h>

/* §2.3, verbatim */
static const char k_v4_flash[] =
    "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"model_type\": \"deepseek_v4\","
    " \"vocab_size\": 129280, \"hidden_size\": 4096, \"num_hidden_layers\": 43, \"num_nextn_predict_layers\": 1,"
    " \"num_attention_heads\": 64, \"num_key_value_heads\": 1, \"head_dim\": 512, \"qk_rope_head_dim\": 64,"
    " \"q_lora_rank\": 1024, \"o_lora_rank\": 1024, \"o_groups\": 8, \"sliding_window\": 128,"
    " \"compress_ratios\": [0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
    "                     4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,0],"
    " \"compress_rope_theta\": 160000, \"rope_theta\": 10000,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16, \"original_max_position_embeddings\": 65536,"
    "                  \"beta_fast\": 32, \"beta_slow\": 1},"
    " \"max_position_embeddings\": 1048576,"
    " \"index_n_heads\": 64, \"index_head_dim\": 128, \"index_topk\": 512,"
    " \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20, \"hc_eps\": 1e-06,"
    " \"n_routed_experts\": 256, \"n_shared_experts\": 1, \"num_experts_per_tok\": 6,"
    " \"moe_intermediate_size\": 2048, \"num_hash_layers\": 3, \"scoring_func\": \"sqrtsoftplus\","
    " \"topk_method\": \"noaux_tc\", \"norm_topk_prob\": true, \"routed_scaling_factor\": 1.5,"
    " \"swiglu_limit\": 10.0, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-06,"
    " \"expert_dtype\": \"fp4\", \"torch_dtype\": \"bfloat16\", \"tie_word_embeddings\": false,"
    " \"bos_token_id\": 0, \"eos_token_id\": 1,"
    " \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"scale_fmt\": \"ue8m0\","
    "                         \"activation_scheme\": \"dynamic\", \"weight_block_size\": [128, 128]}}";

/* what transformers 5.23 wrote for DeepseekV4Config(hidden_size=256, num_hidden_layers=3, ...,
 * compress_ratios=[0, 4, 128], num_hash_layers=1) */
static const char k_save_pretrained[] =
    "{ \"architectures\": [ \"DeepseekV4ForCausalLM\" ], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 0, \"compress_rates\": { \"compressed_sparse_attention\": 4, \"heavily_compressed_attention\": 128 },"
    " \"compress_rope_theta\": 160000.0, \"dtype\": \"float32\", \"eos_token_id\": 1, \"hc_eps\": 1e-06, \"hc_mult\": 4,"
    " \"hc_sinkhorn_iters\": 20, \"head_dim\": 512, \"hidden_act\": \"silu\", \"hidden_size\": 256, \"index_head_dim\": 128,"
    " \"index_n_heads\": 4, \"index_topk\": 8, \"initializer_range\": 0.02, \"layer_types\": [ \"sliding_attention\","
    " \"compressed_sparse_attention\", \"heavily_compressed_attention\" ], \"max_position_embeddings\": 256,"
    " \"mlp_bias\": false, \"mlp_layer_types\": [ \"hash_moe\", \"moe\", \"moe\" ], \"model_type\": \"deepseek_v4\","
    " \"moe_intermediate_size\": 128, \"n_routed_experts\": 8, \"n_shared_experts\": 1, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 4, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 3, \"num_key_value_heads\": 1,"
    " \"num_nextn_predict_layers\": 0, \"o_groups\": 2, \"o_lora_rank\": 128, \"output_router_logits\": false,"
    " \"pad_token_id\": null, \"partial_rotary_factor\": 0.125, \"q_lora_rank\": 128, \"qk_rope_head_dim\": 64,"
    " \"rms_norm_eps\": 1e-06, \"rope_parameters\": { \"compress\": { \"attention_factor\": 1.0, \"beta_fast\": 32,"
    " \"beta_slow\": 1, \"factor\": 16, \"original_max_position_embeddings\": 65536, \"partial_rotary_factor\": 0.125,"
    " \"rope_theta\": 160000.0, \"rope_type\": \"yarn\", \"type\": \"yarn\" }, \"main\": { \"partial_rotary_factor\": 0.125,"
    " \"rope_theta\": 10000.0, \"rope_type\": \"default\" } }, \"rope_theta\": 10000.0, \"routed_scaling_factor\": 1.5,"
    " \"router_aux_loss_coef\": 0.001, \"router_jitter_noise\": 0.0, \"scoring_func\": \"sqrtsoftplus\","
    " \"sliding_window\": 16, \"swiglu_limit\": 10.0, \"tie_word_embeddings\": false, \"transformers_version\": \"5.23.0\","
    " \"use_cache\": true, \"vocab_size\": 512}";

TS_TEST(model_hf_config_v4_flash_release) {
    ts_model_config c;
    ts__hf_v4_info in;
    TS_CHECK_STATUS(ts__hf_v4_parse_config(k_v4_flash, strlen(k_v4_flash), "config.json", "V4-Flash", &c, &in), TS_OK);
    if (TS_FAILED()) return;
    TS_CHECK(!strcmp(c.name, "V4-Flash"));
    TS_CHECK_EQ_INT(c.vocab_size, 129280);
    TS_CHECK_EQ_INT(c.dim, 4096);
    TS_CHECK_EQ_INT(c.n_layers, 43);
    TS_CHECK_EQ_INT(c.n_heads, 64);
    TS_CHECK_EQ_INT(c.q_lora_rank, 1024);
    TS_CHECK_EQ_INT(c.o_groups, 8);
    TS_CHECK_EQ_INT(c.o_lora_rank, 1024);
    TS_CHECK_EQ_INT(c.window_size, 128);
    TS_CHECK_EQ_INT(c.index_n_heads, 64);
    TS_CHECK_EQ_INT(c.index_topk, 512);
    TS_CHECK_EQ_INT(c.n_routed_experts, 256);
    TS_CHECK_EQ_INT(c.n_activated_experts, 6);
    TS_CHECK_EQ_INT(c.moe_inter_dim, 2048);
    TS_CHECK_EQ_INT(c.n_hash_layers, 3);
    TS_CHECK(c.score_func == TS_MODEL_SCORE_SQRTSOFTPLUS && c.route_scale == 1.5 && c.swiglu_limit == 10.0);
    TS_CHECK(c.hc_eps == 1e-6 && c.norm_eps == 1e-6 && c.hc_mult == 4 && c.hc_sinkhorn_iters == 20);
    TS_CHECK(c.rope_theta == 10000 && c.compress_rope_theta == 160000 && c.rope_factor == 16);
    TS_CHECK(c.original_seq_len == 65536 && c.beta_fast == 32 && c.beta_slow == 1);
    /* the 44th ratio is the MTP layer's */
    TS_CHECK(c.compress_ratios[0] == 0 && c.compress_ratios[1] == 0 && c.compress_ratios[2] == 4 &&
             c.compress_ratios[3] == 128 && c.compress_ratios[42] == 4 && c.compress_ratios[43] == 0);
    TS_CHECK_EQ_INT(c.max_seq_len, TS__HF_MAX_SEQ); /* 1M positions, caches capped */
    TS_CHECK(in.quantized && !in.tied && in.n_mtp == 1);
    TS_CHECK(c.attention == TS_MODEL_ATTN_V4 && c.head_dim == 512 && c.rope_head_dim == 64);
}

TS_TEST(model_hf_config_transformers_save_pretrained) {
    ts_model_config c, t;
    ts__hf_v4_info in;
    TS_CHECK_STATUS(ts__hf_v4_parse_config(k_save_pretrained, strlen(k_save_pretrained), "config.json",
                                           "x", &c, &in), TS_OK);
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &t), TS_OK);
    if (TS_FAILED()) return;
    /* dsv4-tiny but for the HCA ratio (128 here) */
    t.compress_ratios[2] = 128;
    memcpy(t.name, c.name, sizeof t.name);
    t.seed = c.seed;
    TS_CHECK_MSG(!memcmp(&c, &t, sizeof c), "save_pretrained's config is not dsv4-tiny's");
    TS_CHECK(!in.quantized && !in.tied && in.n_mtp == 0);
}

TS_TEST(model_hf_release_checkpoint_with_mtp_layer_loads) {
    char dir[64], cmd[1024], p[128];
    snprintf(dir, sizeof dir, "/tmp/ts_hfm_XXXXXX");
    TS_CHECK(mkdtemp(dir) != NULL);
    snprintf(p, sizeof p, "%s/ckpt", dir);
    ts_model_config cfg;
    ts_model *m = NULL, *r = NULL;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &cfg), TS_OK);
    TS_CHECK_STATUS(ts_model_create(&cfg, 1, &m), TS_OK);
    const ts_hf_export_options o = {TS_HF_LAYOUT_RELEASE, 2, false};
    if (m) TS_CHECK_STATUS(ts_model_export_hf(m, p, &o), TS_OK);
    /* as the release: one MTP layer, its ratio last, its tensors under mtp.0 (one here, in a
     * shard of its own that the index names) */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && sed -i 's/\"num_nextn_predict_layers\": 0/\"num_nextn_predict_layers\": 1/;"
             " s/\"compress_ratios\": \\[0, 4, 8\\]/\"compress_ratios\": [0, 4, 8, 0]/' config.json &&"
             " sed -i 's/\"weight_map\": {/\"weight_map\": {\"mtp.0.attn_norm.weight\": \"mtp.safetensors\",/'"
             " model.safetensors.index.json", p);
    TS_CHECK(system(cmd) == 0);
    char mtp[160];
    snprintf(mtp, sizeof mtp, "%s/mtp.safetensors", p);
    FILE *f = fopen(mtp, "wb");
    static const char hdr[] = "{\"mtp.0.attn_norm.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}";
    const uint64_t hl = sizeof hdr - 1;
    const float w[4] = {1, 1, 1, 1};
    TS_CHECK(f && fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl && fwrite(w, 4, 4, f) == 4);
    if (f) fclose(f);
    ts_model_free(m);
    TS_CHECK_STATUS(ts_model_load_dir(p, 1, &r), TS_OK);
    if (r) TS_CHECK_EQ_INT(ts_model_get_config(r)->n_layers, 3);
    ts_model_free(r);
    /* a ratio list of another length is refused */
    snprintf(cmd, sizeof cmd, "cd '%s' && sed -i 's/\\[0, 4, 8, 0\\]/[0, 4, 8, 0, 0]/' config.json", p);
    TS_CHECK(system(cmd) == 0);
    TS_CHECK_STATUS(ts_model_load_dir(p, 1, &r), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "compress_ratios has 5 entries") != NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}
