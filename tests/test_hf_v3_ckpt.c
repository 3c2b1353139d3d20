/* tests/test_hf_v3_ckpt.h: reading gen_hf_v3.py's golden tables and writing the checkpoint
 * directories they describe. */
#include "test_hf_v3_ckpt.h"
#include "ts_prng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HEAD (8 + 24 + 16)
#define TREC (96 + 8 + 24 + 4 + 4 + 8)

static bool parse(const uint8_t *b, size_t n, golden *g) {
    if (n < HEAD || memcmp(b, "TSHFV3G1", 8)) return false;
    uint32_t v[6];
    memcpy(v, b + 8, 24);
    memcpy(&g->token_seed, b + 32, 8);
    memcpy(&g->h_data, b + 40, 8);
    g->n_steps = v[1], g->vocab = v[2], g->n_tensors = v[3], g->config_len = v[4];
    const size_t body = HEAD + (size_t)g->config_len + (size_t)g->n_tensors * TREC;
    if (v[0] != 1 || n != body + (size_t)g->n_steps * 4 * (1 + (size_t)g->vocab)) return false;
    g->config = malloc(g->config_len + 1);
    g->t = calloc(g->n_tensors, sizeof *g->t);
    if (!g->config || !g->t) return false;
    memcpy(g->config, b + HEAD, g->config_len);
    g->config[g->config_len] = 0;
    const uint8_t *p = b + HEAD + g->config_len;
    for (uint32_t i = 0; i < g->n_tensors; i++, p += TREC) {
        g_tensor *t = &g->t[i];
        memcpy(t->name, p, 96);
        memcpy(&t->dtype, p + 96, 4);
        memcpy(&t->ndim, p + 100, 4);
        memcpy(t->shape, p + 104, 24);
        memcpy(&t->base, p + 128, 4);
        memcpy(&t->exp, p + 132, 4);
        memcpy(&t->seed, p + 136, 8);
        if (t->ndim < 1 || t->ndim > 3 || t->dtype > 3) return false;
    }
    const size_t tail = n - body;
    if (!(g->tail = malloc(tail ? tail : 1))) return false;
    memcpy(g->tail, b + body, tail);
    g->tokens = (const int32_t *)g->tail;
    g->logits = (const float *)((const char *)g->tail + (size_t)g->n_steps * 4);
    return true;
}

static uint64_t numel(const g_tensor *t) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* The table's values of tensor t, as stored (bf16 or f32 bytes); malloc'ed. */
static void *values(const g_tensor *t, size_t *bytes) {
    const uint64_t n = numel(t);
    static const size_t esize[4] = {2, 4, 1, 4};
    *bytes = (size_t)n * esize[t->dtype];
    uint8_t *out = malloc(*bytes);
    ts_prng p = ts_prng_seed(t->seed);
    const float scale = ldexpf(1.0f, -t->exp);
    for (uint64_t i = 0; out && i < n; i++) {
        if (t->dtype == 2) { /* e4m3: sign | exponent field 5..8 | mantissa, never NaN */
            const uint32_t z = ts_prng_u32(&p);
            out[i] = (uint8_t)((z & 0x87u) | ((5u + ((z >> 3) & 3u)) << 3));
            continue;
        }
        const float u = ts_prng_uniform(&p);
        const float v = t->dtype == 3 ? (1.0f + u * 0.25f) * scale : t->base + u * scale;
        if (t->dtype) memcpy(out + 4 * i, &v, 4);
        else {
            const uint16_t h = bf16_rne(v);
            memcpy(out + 2 * i, &h, 2);
        }
    }
    return out;
}

/* e4m3fn code -> value, written out here (not the library's decoder) */
static float e4m3(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
    return b & 0x80 ? -v : v;
}

static bool write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    fputs(s, f);
    return fclose(f) == 0;
}

bool tv3_write_ckpt(const golden *g, const char *dir, const damage *dm, uint64_t *h) {
    mkdir(dir, 0755);
    char path[300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = strdup(g->config);
    char *qc = dm && dm->dequantize ? strstr(cfg, ",\n  \"quantization_config\"") : NULL;
    if (qc) strcpy(qc, "\n}\n"); /* the generator writes it last */
    if (dm && dm->cfg_from) {
        char *hit = strstr(cfg, dm->cfg_from);
        if (!hit) return false;
        char *nc = malloc(strlen(cfg) + strlen(dm->cfg_to) + 1);
        sprintf(nc, "%.*s%s%s", (int)(hit - cfg), cfg, dm->cfg_to, hit + strlen(dm->cfg_from));
        free(cfg);
        cfg = nc;
    }
    const bool ok_cfg = write_text(path, cfg);
    free(cfg);
    if (!ok_cfg) return false;
    const uint32_t nt = g->n_tensors + (dm && dm->extra ? 1 : 0);
    void **data = calloc(nt, sizeof *data);
    size_t *sz = calloc(nt, sizeof *sz);
    g_tensor *tt = calloc(nt, sizeof *tt);
    size_t hcap = 256 + (size_t)nt * 200, hl = 0, off = 0;
    char *hdr = malloc(hcap);
    uint64_t hash = 0xcbf29ce484222325ull;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (uint32_t i = 0; i < nt; i++) {
        if (i < g->n_tensors) tt[i] = g->t[i];
        else tt[i] = (g_tensor){"model.layers.0.self_attn.rotary_emb.inv_freq", 1, 1, {32, 0, 0}, 0, 0, 7};
        g_tensor *t = &tt[i];
        if (dm && dm->drop && !strcmp(t->name, dm->drop)) continue;
        if (dm && dm->reshape && !strcmp(t->name, dm->reshape)) t->shape[0]++;
        data[i] = values(t, &sz[i]);
        if (i < g->n_tensors)
            for (size_t k = 0; k < sz[i]; k++) hash = (hash ^ ((uint8_t *)data[i])[k]) * 0x100000001b3ull;
        if (dm && dm->dequantize && t->dtype == 3) { /* folded into its weight (the one before) */
            free(data[i]);
            data[i] = NULL;
            continue;
        }
        if (dm && dm->dequantize && t->dtype == 2) {
            size_t sb = 0;
            float *s = values(&g->t[i + 1], &sb);
            const uint64_t R = t->shape[0], C = t->shape[1], SK = (C + 127) / 128;
            uint16_t *w = malloc((size_t)(R * C) * 2);
            for (uint64_t r = 0; w && s && r < R; r++)
                for (uint64_t c = 0; c < C; c++)
                    w[r * C + c] = bf16_rne(e4m3(((uint8_t *)data[i])[r * C + c]) * s[(r / 128) * SK + c / 128]);
            free(s);
            free(data[i]);
            data[i] = w;
            sz[i] = (size_t)(R * C) * 2;
            t->dtype = 0;
        }
        if (dm && dm->nan_in && !strcmp(t->name, dm->nan_in)) {
            const size_t j = numel(t) > 5 ? 5 : 1; /* element 5, or 1 of a small scale tensor */
            if (t->dtype == 2) ((uint8_t *)data[i])[j] = 0x7F;
            else if (t->dtype) memcpy((uint8_t *)data[i] + 4 * j, &(uint32_t){0x7FC00000u}, 4);
            else memcpy((uint8_t *)data[i] + 2 * j, &(uint16_t){0x7FC0u}, 2);
        }
        static const char *const dtn[4] = {"BF16", "F32", "F8_E4M3", "F32"};
        hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name,
                               dtn[t->dtype]);
        for (uint32_t d = 0; d < t->ndim; d++)
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "],\"data_offsets\":[%zu,%zu]}", off, off + sz[i]);
        off += sz[i];
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    bool ok = f != NULL;
    const uint64_t hlen = hl;
    if (f) {
        ok = fwrite(&hlen, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl;
        for (uint32_t i = 0; ok && i < nt; i++)
            if (data[i]) ok = fwrite(data[i], 1, sz[i], f) == sz[i];
        ok = fclose(f) == 0 && ok;
    }
    for (uint32_t i = 0; i < nt; i++) free(data[i]);
    free(data), free(sz), free(tt), free(hdr);
    if (h) *h = hash;
    return ok;
}

bool tv3_load_golden(ts_test_ctx *ts_t_, const char *file, golden *g, uint8_t **buf) {
    size_t n = 0;
    memset(g, 0, sizeof *g);
    *buf = TS_READ_GOLDEN(file, &n);
    TS_CHECK_MSG(*buf && parse(*buf, n, g), "%s is malformed", file);
    if (!TS_FAILED()) return true;
    tv3_free_golden(g, *buf);
    *buf = NULL;
    return false;
}

void tv3_free_golden(golden *g, uint8_t *buf) {
    free(g->config);
    free(g->t);
    free(g->tail);
    free(buf);
}

