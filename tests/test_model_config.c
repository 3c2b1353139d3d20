/* Model configs (docs/model.md §1): the built-in values, the JSON round trip, and every load
 * check as a specific error naming its key. */
#include "ts_test.h"

#include "tilestack/model.h"

#include <stdlib.h>

TS_TEST(model_config_builtins) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-mini", &c), TS_OK);
    TS_CHECK(strcmp(c.name, "dsv4-mini") == 0);
    TS_CHECK_EQ_INT(c.vocab_size, 16384);
    TS_CHECK_EQ_INT(c.dim, 1024);
    TS_CHECK_EQ_INT(c.n_layers, 4);
    TS_CHECK(c.compress_ratios[0] == 0 && c.compress_ratios[1] == 4 &&
             c.compress_ratios[2] == 128 && c.compress_ratios[3] == 4 && c.compress_ratios[4] == 0);
    TS_CHECK_EQ_INT(c.n_heads, 16);
    TS_CHECK_EQ_INT(c.o_groups, 4);
    TS_CHECK_EQ_INT(c.index_topk, 512);
    TS_CHECK_EQ_INT(c.n_routed_experts, 64);
    TS_CHECK_EQ_INT(c.n_activated_experts, 6);
    TS_CHECK(c.route_scale == 1.5 && c.swiglu_limit == 10 && c.hc_eps == 1e-6);
    TS_CHECK(c.rope_theta == 10000 && c.compress_rope_theta == 160000 && c.rope_factor == 16);
    TS_CHECK_EQ_INT(c.original_seq_len, 65536);
    TS_CHECK_EQ_INT(c.max_seq_len, 8192);
    TS_CHECK(c.score_func == TS_MODEL_SCORE_SQRTSOFTPLUS && c.attention == TS_MODEL_ATTN_V4);
    TS_CHECK(c.seed == 1);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 1), TS_OK);
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-flash-layer", &c), TS_OK);
    TS_CHECK(c.dim == 4096 && c.n_heads == 64 && c.n_routed_experts == 256 &&
             c.moe_inter_dim == 2048 && c.n_layers == 1 && c.compress_ratios[0] == 4 &&
             c.n_hash_layers == 0 && c.vocab_size == 129280 && c.o_groups == 8 &&
             c.o_lora_rank == 1024 && c.q_lora_rank == 1024 && c.index_n_heads == 64);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 8), TS_OK);
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    TS_CHECK(c.vocab_size == 512 && c.dim == 256 && c.n_layers == 3 && c.compress_ratios[1] == 4 &&
             c.compress_ratios[2] == 8 && c.n_heads == 4 && c.q_lora_rank == 128 &&
             c.o_groups == 2 && c.o_lora_rank == 128 && c.window_size == 16 &&
             c.index_n_heads == 4 && c.index_topk == 8 && c.n_routed_experts == 8 &&
             c.moe_inter_dim == 128 && c.max_seq_len == 256 && c.seed == 7);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 1), TS_OK);
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-huge", &c), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "dsv4-tiny") != NULL); /* lists the valid names */
    TS_CHECK_STATUS(ts_model_config_builtin(NULL, &c), TS_ERR_NULL_POINTER);
}

TS_TEST(model_config_json_round_trip) {
    const char *names[3] = {"dsv4-mini", "dsv4-flash-layer", "dsv4-tiny"};
    for (int i = 0; i < 3; i++) {
        ts_model_config c, d;
        TS_CHECK_STATUS(ts_model_config_builtin(names[i], &c), TS_OK);
        c.seed = 0xFFFFFFFFFFFFFFFFull - (uint64_t)i; /* needs all 64 bits */
        c.route_scale = 0.1;                           /* needs 17 digits */
        char buf[4096];
        TS_CHECK_STATUS(ts_model_config_to_json(&c, buf, sizeof buf), TS_OK);
        memset(&d, 0x5A, sizeof d);
        TS_CHECK_STATUS(ts_model_config_parse_json(buf, &d), TS_OK);
        TS_CHECK_MSG(memcmp(&c, &d, sizeof c) == 0, "%s: round trip differs", names[i]);
        size_t need = strlen(buf) + 1;
        TS_CHECK_STATUS(ts_model_config_to_json(&c, buf, need - 1), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_STATUS(ts_model_config_to_json(&c, buf, need), TS_OK);
    }
    /* missing keys take dsv4-mini's values; whitespace and key order are free */
    ts_model_config c, mini;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-mini", &mini), TS_OK);
    TS_CHECK_STATUS(ts_model_config_parse_json(" {\n\t\"seed\" : 9 , \"score_func\": \"sigmoid\"} ",
                                               &c), TS_OK);
    TS_CHECK(c.seed == 9 && c.score_func == TS_MODEL_SCORE_SIGMOID && c.dim == mini.dim &&
             c.n_layers == 4 && c.compress_ratios[2] == 128);
    TS_CHECK_STATUS(ts_model_config_parse_json("{\"n_layers\": 2, \"compress_ratios\": [0, 8], "
                                               "\"name\": \"x\\u00e9\\\"\"}", &c), TS_OK);
    TS_CHECK(c.n_layers == 2 && c.compress_ratios[1] == 8 && c.compress_ratios[2] == 0);
    TS_CHECK(strcmp(c.name, "x\xc3\xa9\"") == 0);
}

/* Each text gives TS_ERR_INVALID_ARGUMENT with `key` in the message; cfg untouched. */
static void expect_bad(ts_test_ctx *ts_t_, const char *text, const char *key) {
    ts_model_config c;
    memset(&c, 0x33, sizeof c);
    unsigned char before[sizeof c];
    memcpy(before, &c, sizeof c);
    TS_CHECK_STATUS(ts_model_config_parse_json(text, &c), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(strstr(ts_last_error(), key) != NULL, "%s: message \"%s\" does not name %s", text,
                 ts_last_error(), key);
    TS_CHECK(memcmp(before, &c, sizeof c) == 0);
}

TS_TEST(model_config_validation_errors) {
    /* §1 load checks */
    expect_bad(ts_t_, "{\"head_dim\": 256}", "head_dim");
    expect_bad(ts_t_, "{\"rope_head_dim\": 32}", "rope_head_dim");
    expect_bad(ts_t_, "{\"dim\": 1000}", "dim");
    expect_bad(ts_t_, "{\"q_lora_rank\": 200}", "q_lora_rank");
    expect_bad(ts_t_, "{\"moe_inter_dim\": 100}", "moe_inter_dim");
    expect_bad(ts_t_, "{\"o_lora_rank\": 129}", "o_lora_rank");
    expect_bad(ts_t_, "{\"o_groups\": 3}", "o_groups");
    expect_bad(ts_t_, "{\"index_head_dim\": 64}", "index_head_dim");
    expect_bad(ts_t_, "{\"n_activated_experts\": 65}", "n_activated_experts");
    expect_bad(ts_t_, "{\"compress_ratios\": [0, 4, 128]}", "compress_ratios");
    expect_bad(ts_t_, "{\"n_layers\": 3}", "compress_ratios");
    expect_bad(ts_t_, "{\"max_seq_len\": 8196}", "max_seq_len"); /* not a multiple of 128 */
    expect_bad(ts_t_, "{\"compress_ratios\": [0, -4, 128, 4]}", "compress_ratios");
    /* ranges, types, names */
    expect_bad(ts_t_, "{\"n_hash_layers\": 5}", "n_hash_layers");
    expect_bad(ts_t_, "{\"window_size\": 0}", "window_size");
    expect_bad(ts_t_, "{\"vocab_size\": 1.5}", "vocab_size");
    expect_bad(ts_t_, "{\"vocab_size\": \"512\"}", "vocab_size");
    expect_bad(ts_t_, "{\"route_scale\": true}", "route_scale");
    expect_bad(ts_t_, "{\"norm_eps\": 0}", "norm_eps");
    expect_bad(ts_t_, "{\"score_func\": \"relu\"}", "score_func");
    expect_bad(ts_t_, "{\"attention\": \"v3\"}", "attention");
    expect_bad(ts_t_, "{\"seed\": -1}", "seed");
    expect_bad(ts_t_, "{\"seed\": 18446744073709551616}", "seed");
    expect_bad(ts_t_, "{\"n_expert\": 4}", "n_expert");
    expect_bad(ts_t_, "{\"name\": 4}", "name");
    /* not JSON / not an object */
    expect_bad(ts_t_, "{\"dim\": 1024,}", "JSON");
    expect_bad(ts_t_, "{\"dim\": 1024", "JSON");
    expect_bad(ts_t_, "{\"dim\": 01}", "JSON");
    expect_bad(ts_t_, "{\"dim\": 1024} x", "JSON");
    expect_bad(ts_t_, "{\"dim\": 1024, \"dim\": 512}", "duplicate");
    expect_bad(ts_t_, "[1, 2]", "object");
    expect_bad(ts_t_, "", "JSON");
    expect_bad(ts_t_, "{\"name\": \"\\ud800\"}", "surrogate");
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_parse_json(NULL, &c), TS_ERR_NULL_POINTER);
}

/* issue 18: a bad n_layers is named as such (it was reported as compress_ratios' length), and
 * keys or values from the file reach the message escaped, never as raw control bytes. */
TS_TEST(model_config_names_the_key_and_escapes_it) {
    expect_bad(ts_t_, "{\"n_layers\": -1, \"compress_ratios\": []}", "n_layers = -1");
    expect_bad(ts_t_, "{\"n_layers\": -1}", "n_layers = -1");
    expect_bad(ts_t_, "{\"n_layers\": 1000}", "n_layers = 1000");
    expect_bad(ts_t_, "{\"\\u001b[2Jdim\": 1}", "\"\\x1b[2Jdim\" is not a config key");
    TS_CHECK(strchr(ts_last_error(), 0x1b) == NULL);
    expect_bad(ts_t_, "{\"score_func\": \"x\\ny\"}", "\"x\\ny\"");
    TS_CHECK(strchr(ts_last_error(), '\n') == NULL);
    expect_bad(ts_t_, "{\"dim\\u0007\": 1, \"dim\\u0007\": 1}", "duplicate key \"dim\\x07\"");
    TS_CHECK(strchr(ts_last_error(), 0x07) == NULL);
    expect_bad(ts_t_, "{\"name\": \"a\\u001bb\"}", "control character");
}

TS_TEST(model_config_validation_direct) {
    ts_model_config c;
    /* validate directly: ranks must divide the experts */
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-mini", &c), TS_OK);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 3), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "n_routed_experts") != NULL);
    TS_CHECK_STATUS(ts_model_config_validate(&c, 0), TS_ERR_INVALID_ARGUMENT);
    c.compress_ratios[4] = 4; /* an entry past n_layers */
    TS_CHECK_STATUS(ts_model_config_validate(&c, 1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "compress_ratios") != NULL);
    TS_CHECK_STATUS(ts_model_config_validate(NULL, 1), TS_ERR_NULL_POINTER);
}
