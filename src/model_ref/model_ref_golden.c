/* The dsv4-tiny golden file (tests/gen/gen_dsv4.py) and the comparisons `--check` and
 * tests/test_model_check.c make with it: per-step calc_diff of logits, greedy tokens, weight
 * checksums. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "model_ref/model_ref.h"
#include "tilestack/quant.h"

#define GOLDEN_N_CFG_I 26
#define GOLDEN_N_CFG_F 7

typedef struct reader {
    const unsigned char *p;
    size_t n, at;
    const char *path;
    const char *bad; /* first field that did not fit */
} reader;

static int rd(reader *r, void *dst, size_t n, const char *field) {
    if (r->bad) return 0;
    if (n > r->n - r->at) {
        r->bad = field;
        return 0;
    }
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 1;
}

/* Little-endian scalars (the file is little-endian; so is every supported host, but be
 * explicit). */
static uint64_t le64(reader *r, const char *field) {
    unsigned char b[8] = {0};
    rd(r, b, 8, field);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}
static uint32_t le32(reader *r, const char *field) {
    unsigned char b[4] = {0};
    rd(r, b, 4, field);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint16_t le16(reader *r, const char *field) {
    unsigned char b[2] = {0};
    rd(r, b, 2, field);
    return (uint16_t)(b[0] | b[1] << 8);
}
static double lef64(reader *r, const char *field) {
    uint64_t u = le64(r, field);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

void ts__model_golden_free(ts__model_golden *g) {
    if (!g) return;
    free(g->tokens);
    free(g->logits);
    free(g->sums);
    memset(g, 0, sizeof(*g));
}

static ts_status parse(reader *r, ts__model_golden *g) {
    char magic[8];
    rd(r, magic, 8, "magic");
    if (!r->bad && memcmp(magic, "TSDSV4G1", 8) != 0) r->bad = "magic";
    const uint32_t version = le32(r, "version");
    const uint32_t n_i = le32(r, "n_cfg_i64"), n_f = le32(r, "n_cfg_f64");
    const uint32_t n_layers = le32(r, "n_layers");
    if (!r->bad && version != 1) r->bad = "version";
    if (!r->bad && (n_i != GOLDEN_N_CFG_I || n_f != GOLDEN_N_CFG_F)) r->bad = "config field counts";
    if (!r->bad && (n_layers == 0 || n_layers > TS_MODEL_MAX_LAYERS)) r->bad = "n_layers";
    if (r->bad) return TS_OK;
    int64_t ci[GOLDEN_N_CFG_I];
    double cf[GOLDEN_N_CFG_F];
    for (int i = 0; i < GOLDEN_N_CFG_I; i++) ci[i] = (int64_t)le64(r, "config");
    for (int i = 0; i < GOLDEN_N_CFG_F; i++) cf[i] = lef64(r, "config");
    ts_model_config *c = &g->cfg;

    c->vocab_size = ci[0], c->dim = ci[1], c->n_layers = ci[2], c->n_hash_layers = ci[3];
    c->n_heads = ci[4], c->head_dim = ci[5], c->rope_head_dim = ci[6], c->q_lora_rank = ci[7];
    c->o_groups = ci[8], c->o_lora_rank = ci[9], c->window_size = ci[10];
    c->index_n_heads = ci[11], c->index_head_dim = ci[12], c->index_topk = ci[13];
    c->n_routed_experts = ci[14], c->n_activated_experts = ci[15], c->moe_inter_dim = ci[16];
    c->score_func = (ts_model_score_func)ci[17], c->hc_mult = ci[18];
    c->hc_sinkhorn_iters = ci[19], c->original_seq_len = ci[20], c->beta_fast = ci[21];
    c->beta_slow = ci[22], c->max_seq_len = ci[23], c->attention = (ts_model_attention)ci[24];
    c->seed = (uint64_t)ci[25];
    snprintf(c->name, sizeof(c->name), "%s",
             c->attention == TS_MODEL_ATTN_V32 ? "dsv32-tiny" : "dsv4-tiny");
    c->route_scale = cf[0], c->swiglu_limit = cf[1], c->hc_eps = cf[2], c->norm_eps = cf[3];
    c->rope_theta = cf[4], c->compress_rope_theta = cf[5], c->rope_factor = cf[6];
    if (!r->bad && c->n_layers != (int64_t)n_layers) r->bad = "n_layers";
    for (uint32_t L = 0; L < n_layers; L++) c->compress_ratios[L] = (int32_t)le32(r, "compress_ratios");
    g->prompt_seed = le64(r, "prompt_seed");
    g->n_prompt = le32(r, "n_prompt");
    g->n_gen = le32(r, "n_gen");
    if (r->bad) return TS_OK;
    if (g->n_prompt < 1 || g->n_prompt > c->max_seq_len || g->n_gen > c->max_seq_len) {
        r->bad = "n_prompt / n_gen";
        return TS_OK;
    }
    g->n_steps = g->n_prompt + g->n_gen;
    g->tokens = malloc((size_t)g->n_steps * sizeof(int32_t));
    if (!g->tokens) return ts__fail(TS_ERR_OUT_OF_MEMORY, "golden file: tokens");
    for (int64_t i = 0; i < g->n_steps; i++) {
        g->tokens[i] = (int32_t)le32(r, "tokens");
        if (!r->bad && (g->tokens[i] < 0 || g->tokens[i] >= c->vocab_size)) r->bad = "tokens";
    }
    const uint32_t n_steps = le32(r, "n_steps"), vocab = le32(r, "vocab");
    if (!r->bad && (n_steps != g->n_steps || vocab != c->vocab_size)) r->bad = "n_steps / vocab";
    if (r->bad) return TS_OK;
    if ((uint64_t)g->n_steps * (uint64_t)c->vocab_size * 4 > r->n - r->at) {
        r->bad = "logits";
        return TS_OK;
    }
    g->logits = malloc((size_t)(g->n_steps * c->vocab_size) * sizeof(float));
    if (!g->logits) return ts__fail(TS_ERR_OUT_OF_MEMORY, "golden file: logits");
    for (int64_t i = 0; i < g->n_steps * c->vocab_size; i++) {
        uint32_t u = le32(r, "logits");
        memcpy(&g->logits[i], &u, 4);
    }
    g->final_token = (int32_t)le32(r, "final_token");
    const uint32_t n_sums = le32(r, "n_tensors");
    if (r->bad) return TS_OK;
    if ((uint64_t)n_sums * 20 > r->n - r->at) {
        r->bad = "n_tensors";
        return TS_OK;
    }
    g->sums = calloc(n_sums ? n_sums : 1, sizeof(ts__model_checksum));
    if (!g->sums) return ts__fail(TS_ERR_OUT_OF_MEMORY, "golden file: checksums");
    g->n_sums = n_sums;
    for (uint32_t i = 0; i < n_sums && !r->bad; i++) {
        ts__model_checksum *s = &g->sums[i];
        const uint16_t len = le16(r, "tensor name");
        if (!r->bad && len >= sizeof(s->name)) r->bad = "tensor name";
        rd(r, s->name, len, "tensor name");
        unsigned char dt[2] = {0};
        rd(r, dt, 2, "tensor dtype");
        s->dtype = dt[0];
        s->nbytes = (int64_t)le64(r, "tensor nbytes");
        s->fnv1a64 = le64(r, "tensor checksum");
    }
    if (!r->bad && r->at != r->n) r->bad = "trailing bytes";
    return TS_OK;
}

/* Far above the committed files (~160 KB), far below what would hurt to read. */
#define TS__GOLDEN_CAP ((uint64_t)64 << 20)

ts_status ts__model_golden_load(const char *path, ts__model_golden *g) {
    if (!g) return ts__fail(TS_ERR_NULL_POINTER, "ts__model_golden_load: g is NULL");
    memset(g, 0, sizeof(*g));
    if (!path) return ts__fail(TS_ERR_NULL_POINTER, "ts__model_golden_load: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return ts__fail(TS_ERR_IO, "golden file %s: cannot open", path);
    /* a regular file of bounded size: /dev/zero or a FIFO would otherwise be read until memory
     * runs out (the committed golden files are ~160 KB) */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        const bool dir = S_ISDIR(sb.st_mode);
        fclose(f);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "golden file %s: %s", path,
                        dir ? "is a directory" : "not a regular file");
    }
    if ((uint64_t)sb.st_size > TS__GOLDEN_CAP) {
        fclose(f);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "golden file %s: %lld bytes, more than the "
                        "%llu-byte cap on golden files", path, (long long)sb.st_size,
                        (unsigned long long)TS__GOLDEN_CAP);
    }
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n > TS__GOLDEN_CAP) { /* grew while being read */
            free(buf);
            fclose(f);
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "golden file %s: stopped reading at the "
                            "%llu-byte cap on golden files", path,
                            (unsigned long long)TS__GOLDEN_CAP);
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 18;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return ts__fail(TS_ERR_OUT_OF_MEMORY, "golden file %s", path);
            }
            buf = nb;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return ts__fail(TS_ERR_IO, "golden file %s: read error", path);
    }
    reader r = {buf, n, 0, path, NULL};
    ts_status st = parse(&r, g);
    free(buf);
    if (st == TS_OK && r.bad)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "golden file %s: malformed field '%s'", path, r.bad);
    if (st != TS_OK) ts__model_golden_free(g);
    return st;
}

int32_t ts__model_golden_expected_token(const ts__model_golden *g, int64_t step) {
    if (step < g->n_prompt - 1 || step >= g->n_steps) return -1;
    return step + 1 < g->n_steps ? g->tokens[step + 1] : g->final_token;
}

void ts__model_compare_checksums(const ts_model_reference *r, const ts__model_golden *g,
                                 int64_t *mismatches, char first_bad[80]) {
    const ts__model_checksum *mine;
    int64_t n_mine;
    ts__model_reference_checksums(r, &mine, &n_mine);
    int64_t bad = 0;
    first_bad[0] = 0;
    for (int64_t i = 0; i < g->n_sums; i++) {
        const ts__model_checksum *want = &g->sums[i];
        int ok = 0;
        for (int64_t j = 0; j < n_mine; j++)
            if (strcmp(mine[j].name, want->name) == 0) {
                ok = mine[j].dtype == want->dtype && mine[j].nbytes == want->nbytes &&
                     mine[j].fnv1a64 == want->fnv1a64;
                break;
            }
        if (!ok && bad++ == 0) snprintf(first_bad, 80, "%s", want->name);
    }
    if (n_mine != g->n_sums) {
        /* names the reference makes that the golden lacks */
        for (int64_t j = 0; j < n_mine; j++) {
            int found = 0;
            for (int64_t i = 0; i < g->n_sums && !found; i++)
                found = strcmp(mine[j].name, g->sums[i].name) == 0;
            if (!found && bad++ == 0) snprintf(first_bad, 80, "%s", mine[j].name);
        }
    }
    *mismatches = bad;
}

ts_status ts__model_compare_logits(const ts__model_golden *g, const double *ref,
                                   const double *test, ts__model_compare *out) {
    const int64_t V = g->cfg.vocab_size;
    memset(out, 0, sizeof(*out));
    out->worst_step = -1;
    out->first_mismatch = -1;
    out->first_above_1e9 = -1;
    double sum = 0;
    for (int64_t i = 0; i < g->n_steps; i++) {
        ts_tensor x = ts_tensor_1d((void *)(ref + i * V), TS_F64, V);
        ts_tensor y = ts_tensor_1d((void *)(test + i * V), TS_F64, V);
        double d;
        TS__RETURN_IF_ERROR(ts_calc_diff(&x, &y, &d));
        sum += d;
        if (out->first_above_1e9 < 0 && !(d <= 1e-9)) out->first_above_1e9 = i;
        if (out->worst_step < 0 || d > out->max_diff || isnan(d)) {
            out->max_diff = d;
            out->worst_step = i;
        }
        const int32_t want = ts__model_golden_expected_token(g, i);
        if (want < 0) continue;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (test[i * V + v] > test[i * V + best]) best = v;
        out->greedy_steps++;
        if (best != want && out->greedy_mismatches++ == 0) {
            out->first_mismatch = i;
            double top1 = -INFINITY, top2 = -INFINITY;
            for (int64_t v = 0; v < V; v++) {
                const double x = ref[i * V + v];
                if (x > top1) {
                    top2 = top1;
                    top1 = x;
                } else if (x > top2) {
                    top2 = x;
                }
            }
            out->first_mismatch_margin = top1 - top2;
        }
    }
    out->mean_diff = g->n_steps ? sum / (double)g->n_steps : 0;
    return TS_OK;
}

ts_status ts__model_reference_run_golden(const ts__model_golden *g, double *logits,
                                         int64_t *checksum_mismatches, char first_bad[80]) {
    ts_model_reference *r = NULL;
    TS__RETURN_IF_ERROR(ts_model_reference_create(&g->cfg, &r));
    ts__model_compare_checksums(r, g, checksum_mismatches, first_bad);
    ts_status st = TS_OK;
    for (int64_t i = 0; i < g->n_steps && st == TS_OK; i++)
        st = ts_model_reference_decode(r, g->tokens[i], logits + i * g->cfg.vocab_size);
    ts_model_reference_free(r);
    return st;
}
