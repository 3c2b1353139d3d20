/* The tiny V3 / V3.2 checkpoints of tests/gen/gen_hf_v3.py: a golden file holds the table of
 * every tensor (name, dtype, shape, seeded value rule), config.json and transformers' logits;
 * these helpers read it and write the checkpoint directory it describes (optionally damaged),
 * for tests/test_model_hf_v3.c (conformance, refusals) and tests/test_model_plan_v3.c (the
 * memory plan against the load). */
#ifndef TS_TEST_HF_V3_CKPT_H
#define TS_TEST_HF_V3_CKPT_H

#include "ts_test.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct g_tensor {
    char name[97];
    uint32_t dtype, ndim; /* 0 BF16, 1 F32, 2 F8_E4M3 codes, 3 F32 scale (gen_hf_v3.py) */
    uint64_t shape[3];
    float base;
    int32_t exp;
    uint64_t seed;
} g_tensor;

typedef struct golden {
    uint32_t n_steps, vocab, n_tensors, config_len;
    uint64_t token_seed, h_data;
    char *config;
    g_tensor *t;
    const int32_t *tokens;
    const float *logits;
    void *tail; /* tokens and logits copied out: the config's length can leave them unaligned */
} golden;

/* How a test damages the checkpoint it writes. */
typedef struct damage {
    const char *drop;      /* this tensor left out */
    const char *reshape;   /* this tensor's first dim + 1 (its data grown to match) */
    const char *nan_in;    /* this tensor's element 5 set to NaN */
    bool extra;            /* one tensor more */
    const char *cfg_from, *cfg_to; /* config.json: the first cfg_from becomes cfg_to */
    /* an FP8 table written as the BF16 checkpoint of its dequantised weights: bf16(code x
     * scale) (f32 product, round to nearest even), no scale tensors, no quantization_config */
    bool dequantize;
} damage;

/* dir/config.json + dir/model.safetensors from the table; the fnv1a64 of every tensor's bytes
 * in table order into *h (undamaged tensors only matter: the caller compares on a clean one). */
bool tv3_write_ckpt(const golden *g, const char *dir, const damage *dm, uint64_t *h);
/* tests/golden/<file> parsed into *g (*buf: the file, freed by tv3_free_golden); false, with a
 * failed check and nothing left to free, when it is missing or malformed. */
bool tv3_load_golden(ts_test_ctx *ts_t_, const char *file, golden *g, uint8_t **buf);
void tv3_free_golden(golden *g, uint8_t *buf);

#endif
