/* Fuzz target for the weight-file reader (ts_model_load, docs/model.md §2): a mutated small
 * valid file must load, or fail with a status code and a message; never crash, leak or hang.
 * A file that loads is also decoded for one step, so that a value the loader let through
 * (an index, a scale, a NaN) cannot go wrong later.
 *
 * The input is structure-aware, so that mutations reach both halves of the format:
 *   [header JSON] 0x00 [len delta] [size delta] [patches...]
 * The file written is the 8-byte header length (the JSON's own length plus `len delta`, an
 * int8: a header length off by a few bytes shifts every tensor), the JSON, then the data of a
 * template file made once at start-up (a one-layer model, ~0.4 MB), with `size delta` (int8)
 * bytes cut from its end or zeros added, and each 5-byte patch (u32 LE offset modulo the data
 * size, then the byte) applied: scales, tid2eid entries and norms get hostile values. Without a
 * 0x00 the whole input is the header. The seed (tests/fuzz/weights/) is the template's header.
 *
 * Run by scripts/run_fuzz.sh through the built-in driver fuzz_driver.c (CMake target
 * tilestack_fuzz_weights, built with the library's own sanitizer flags). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include "tilestack/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *ts_fuzz_dictionary(size_t *n);

/* The smallest model the config checks allow that still has every kind of tensor a V4 file
 * holds but the compressor's: a hash layer (tid2eid), FP8 and FP4 weights with their scales,
 * bf16 embed / head, f32 norms and mHC tensors. */
static void tiny_config(ts_model_config *c) {
    ts_model_config_builtin("dsv4-tiny", c);
    snprintf(c->name, sizeof c->name, "fuzz");
    c->vocab_size = 64;
    c->dim = 128;
    c->n_layers = 1;
    memset(c->compress_ratios, 0, sizeof c->compress_ratios);
    c->n_hash_layers = 1;
    c->n_heads = 1;
    c->q_lora_rank = 128;
    c->o_groups = 1;
    c->o_lora_rank = 128;
    c->window_size = 8;
    c->index_n_heads = 1;
    c->n_routed_experts = 4;
    c->n_activated_experts = 2;
    c->moe_inter_dim = 128;
    c->hc_mult = 2;
    c->max_seq_len = 16;
}

static uint8_t *g_data; /* the template's data section */
static size_t g_data_n;
static int g_fd = -1;
static char g_path[64];

static void setup(void) {
    ts_model_config c;
    tiny_config(&c);
    ts_model *m = NULL;
    ts_status st = ts_model_create(&c, 1, &m);
    char tmpl[] = "/tmp/ts_fuzz_weights_XXXXXX";
    int tfd = st == TS_OK ? mkstemp(tmpl) : -1;
    if (tfd < 0 || ts_model_save_weights(m, tmpl) != TS_OK) {
        fprintf(stderr, "fuzz_weights: cannot make the template: %s\n", ts_last_error());
        abort();
    }
    ts_model_free(m);
    FILE *f = fopen(tmpl, "rb");
    uint8_t len8[8];
    uint64_t h = 0;
    if (!f || fread(len8, 1, 8, f) != 8) abort();
    for (int i = 0; i < 8; i++) h |= (uint64_t)len8[i] << (8 * i);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    g_data_n = (size_t)n - 8 - h;
    g_data = malloc(g_data_n + 1);
    char *hdr = malloc(h + 1);
    if (!g_data || !hdr || fseek(f, 8, SEEK_SET) != 0 || fread(hdr, 1, h, f) != h ||
        fread(g_data, 1, g_data_n, f) != g_data_n)
        abort();
    fclose(f);
    close(tfd);
    remove(tmpl);
    /* TS_FUZZ_WEIGHTS_SEED=FILE writes the seed input (the header alone) and exits */
    const char *seed = getenv("TS_FUZZ_WEIGHTS_SEED");
    if (seed) {
        FILE *o = fopen(seed, "wb");
        if (!o || fwrite(hdr, 1, h, o) != h || fclose(o) != 0) abort();
        exit(0);
    }
    free(hdr);
    /* the mutated file lives in memory (a memfd, loaded through /proc/self/fd) */
    g_fd = memfd_create("ts_fuzz_weights", 0);
    if (g_fd < 0) abort();
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
}

static void put(const void *p, size_t n) {
    if (n && write(g_fd, p, n) != (ssize_t)n) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
    if (!g_data) setup();
    const uint8_t *nul = memchr(in, 0, size);
    const size_t hlen = nul ? (size_t)(nul - in) : size;
    const uint8_t *tail = nul ? nul + 1 : in + size;
    size_t tn = nul ? size - hlen - 1 : 0;
    int len_delta = 0, size_delta = 0;
    if (tn) len_delta = (int8_t)*tail++, tn--;
    if (tn) size_delta = (int8_t)*tail++, tn--;

    if (ftruncate(g_fd, 0) != 0 || lseek(g_fd, 0, SEEK_SET) != 0) abort();
    const uint64_t field = (uint64_t)((int64_t)hlen + len_delta);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(field >> (8 * i));
    put(len8, 8);
    put(in, hlen);
    size_t dn = g_data_n;
    if (size_delta < 0) dn = (size_t)-size_delta > dn ? 0 : dn + (size_t)size_delta;
    uint8_t *d = malloc(g_data_n + 128);
    if (!d) abort();
    memcpy(d, g_data, g_data_n);
    if (size_delta > 0) {
        memset(d + g_data_n, 0, (size_t)size_delta);
        dn = g_data_n + (size_t)size_delta;
    }
    for (; tn >= 5 && dn; tail += 5, tn -= 5) {
        const uint32_t off = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 |
                             (uint32_t)tail[2] << 16 | (uint32_t)tail[3] << 24;
        d[off % dn] = tail[4];
    }
    put(d, dn);
    free(d);

    ts_model *m = NULL;
    ts_status st = ts_model_load(g_path, 1, &m);
    if (st == TS_OK) {
        /* the config may be a mutated one that still matches its tensors: size by it */
        float *logits = malloc((size_t)ts_model_get_config(m)->vocab_size * sizeof(float));
        int64_t seq = 0;
        int32_t tok = 5;
        st = logits ? ts_model_decode(m, 1, &seq, &tok, logits) : TS_OK;
        free(logits);
        ts_model_free(m);
    } else if (m) {
        fprintf(stderr, "fuzz_weights: a failed load returned a model\n");
        abort();
    }
    static int verbose = -1; /* TS_FUZZ_VERBOSE=1: each input's outcome */
    if (verbose < 0) verbose = getenv("TS_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz_weights: %d %s\n", (int)st, st ? ts_last_error() : "ok");
    if (st != TS_OK && (ts_status_str(st) == NULL || ts_last_error()[0] == 0)) {
        fprintf(stderr, "fuzz_weights: status %d without a message\n", (int)st);
        abort();
    }
    return 0;
}

/* Mutation tokens for the built-in driver: the header's keys, dtypes and numbers at the
 * edges of the integer ranges. */
const char *const *ts_fuzz_dictionary(size_t *n) {
    static const char *const k[] = {
        "\"dtype\": ", "\"shape\": ", "\"data_offsets\": ", "\"F32\"", "\"BF16\"", "\"I32\"",
        "\"U8\"", "\"F8_E4M3\"", "\"__metadata__\"", "\"format\"", "\"config\"", "[", "]", "{",
        "}", ", ", ": ", "\"", "\\\"", "\\u0000", "\\u001b", "0", "1", "-1", "8", "128", "4294967296",
        "9223372036854775807", "18446744073709551615", "18446744073709551616", "1e999", "-0",
        "0.5", "null", "true", "\\\"n_layers\\\": ", "\\\"n_routed_experts\\\": ",
        "\\\"vocab_size\\\": ", "\\\"dim\\\": ", "\\\"n_hash_layers\\\": ", "\\\"hc_mult\\\": ",
        "\"embed\": ", "\"0.ffn.gate.tid2eid\": ", "\"0.attn.wq_a.scale\": ", "\"norm\": ",
    };
    *n = sizeof k / sizeof k[0];
    return k;
}
