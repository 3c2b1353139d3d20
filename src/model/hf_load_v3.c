/* ts_model_load_dir for a DeepseekV3ForCausalLM directory (docs/models.md "V3").
 *
 * As the V4 loader (hf_load_v4.c), in two passes over the safetensors headers and then the
 * data: every tensor config.json implies is found by name (hf_names_v3.c) and its dtype and
 * shape checked, and nothing may be left over (the MTP layer excepted), before one byte of
 * data is read; then every value must be finite. BF16 weights stay in the mapped files where
 * the kernels read them in place (the embedding) and are packed for the bf16 GEMMs otherwise;
 * norms, the router and its bias are widened to f32. FP8 checkpoints (quantization_config) are
 * refused for now: dequantise them to BF16 first. */
#include "hf_v3.h"
#include "hf_v4.h"
#include "safetensors.h"

#include "core/file_read.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *esc(const char *s, char b[TS__ESC_CAP]) { return ts__text_escape_str(s, b, TS__ESC_CAP); }

static const ts__st_tensor *find(const ts__hf_dir *d, const char *name, size_t *shard, size_t *idx) {
    for (size_t i = 0; i < d->n_shards; i++) {
        const ts__st_tensor *t = ts__st_find(d->shards[i], name);
        if (t) {
            *shard = i;
            *idx = (size_t)(t - d->shards[i]->t);
            return t;
        }
    }
    return NULL;
}

static void shape_str(const int64_t *s, int n, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Pass 1: names, dtypes, shapes; used[shard][i] marks what was taken. */
static ts_status resolve_all(const ts__hf_dir *d, const ts__v3_config *c, const ts__v3_tensor *tl,
                             int64_t nt, const ts__st_tensor **src, size_t *src_shard, bool **used) {
    char e[TS__ESC_CAP], want[96], got[96];
    const char *where = d->n_shards == 1 && strstr(d->shards[0]->path, "/model.safetensors")
                            ? "model.safetensors" : "model.safetensors.index.json";
    for (int64_t i = 0; i < nt; i++) {
        size_t s = 0, k = 0;
        const ts__st_tensor *t = find(d, tl[i].name, &s, &k);
        if (!t)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: tensor '%s' is missing (config.json implies it)",
                            d->path, where, tl[i].name);
        if (t->dtype != TS_BF16 && t->dtype != TS_F32)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': dtype %s, expected BF16 or F32 (a "
                            "checkpoint without quantization_config)", d->shards[s]->path,
                            esc(tl[i].name, e), ts__st_dtype_name(t->dtype));
        bool same = t->ndim == tl[i].ndim;
        for (int j = 0; same && j < tl[i].ndim; j++) same = t->shape[j] == tl[i].shape[j];
        if (!same) {
            shape_str(t->shape, t->ndim, got, sizeof got);
            shape_str(tl[i].shape, tl[i].ndim, want, sizeof want);
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': shape %s, expected %s (from "
                            "config.json)", d->shards[s]->path, esc(tl[i].name, e), got, want);
        }
        used[s][k] = true;
        src[i] = t;
        src_shard[i] = s;
    }
    for (size_t s = 0; s < d->n_shards; s++)
        for (size_t k = 0; k < d->shards[s]->n; k++)
            if (!used[s][k] && !ts__v3_ignored(c, d->shards[s]->t[k].name))
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is not part of the model "
                                "config.json describes", d->shards[s]->path, esc(d->shards[s]->t[k].name, e));
    return TS_OK;
}

/* Pass 2: every value finite (bf16 / f32 exponent all ones is inf or NaN). */
static ts_status check_finite(const ts__hf_dir *d, const ts__st_tensor *t, size_t shard) {
    const int64_t n = (int64_t)((t->end - t->begin) / ts_dtype_size(t->dtype));
    const int64_t cols = t->ndim == 2 ? t->shape[1] : n ? n : 1;
    for (int64_t i = 0; i < n; i++) {
        bool bad;
        if (t->dtype == TS_BF16) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            bad = (h & 0x7F80) == 0x7F80;
        } else {
            uint32_t u;
            memcpy(&u, (const char *)t->data + 4 * i, 4);
            bad = (u & 0x7F800000u) == 0x7F800000u;
        }
        if (bad) {
            char e[TS__ESC_CAP];
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': element row %lld, column %lld is "
                            "not finite (values must be finite)", d->shards[shard]->path, esc(t->name, e),
                            (long long)(i / cols), (long long)(i % cols));
        }
    }
    return TS_OK;
}

static ts_status load(ts__hf_dir *d, const char *dir, int64_t max_batch, ts_model **out) {
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    ts__v3_config c;
    TS__RETURN_IF_ERROR(ts__v3_parse_config(d->config, d->config_len, cpath, &c));
    if (c.quantized)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: quantization_config: FP8 DeepSeek-V3 checkpoints are not "
                        "loaded yet (tilestack takes V3 in BF16 or F32: dequantise weight x "
                        "weight_scale_inv first)", cpath);
    /* a config.json can claim 128 layers of 65536 experts: the checkpoint must hold at least the
     * expert tensors that implies before a list of them is built */
    const int64_t need = (c.n_layers - c.first_dense) * c.n_experts * 3;
    if ((int64_t)d->n_tensors < need)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the checkpoint holds %zu tensors, fewer than the %lld "
                        "expert weights config.json implies", dir, d->n_tensors, (long long)need);
    ts__v3_tensor *tl = NULL;
    int64_t nt = 0;
    TS__RETURN_IF_ERROR(ts__v3_tensors(&c, &tl, &nt));
    const ts__st_tensor **src = calloc((size_t)nt, sizeof *src);
    size_t *shard = calloc((size_t)nt, sizeof *shard);
    const void **data = calloc((size_t)nt, sizeof *data);
    ts_dtype *dt = calloc((size_t)nt, sizeof *dt);
    bool **used = calloc(d->n_shards ? d->n_shards : 1, sizeof *used);
    ts_status st = src && shard && data && dt && used ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", dir);
    for (size_t s = 0; st == TS_OK && s < d->n_shards; s++)
        if (!(used[s] = calloc(d->shards[s]->n ? d->shards[s]->n : 1, sizeof **used)))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", dir);
    if (st == TS_OK) st = resolve_all(d, &c, tl, nt, src, shard, used);
    for (int64_t i = 0; st == TS_OK && i < nt; i++) {
        st = check_finite(d, src[i], shard[i]);
        data[i] = src[i]->data;
        dt[i] = src[i]->dtype;
    }
    if (st == TS_OK) st = ts__v3_model_create(&c, tl, nt, data, dt, max_batch, out);
    for (size_t s = 0; used && s < d->n_shards; s++) free(used[s]);
    free(used);
    free(dt);
    free(data);
    free(shard);
    free(src);
    free(tl);
    return st;
}

bool ts__v3_dir_is_v3(const char *dir) {
    char path[4200], *text = NULL;
    size_t len = 0;
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) return false;
    /* only a sniff: ts__hf_open reads it again under the directory's link rules */
    if (ts__read_file_capped(AT_FDCWD, path, path, TS__HF_MAX_CONFIG_BYTES, true, &text, &len) != TS_OK) {
        ts_clear_error();
        return false;
    }
    const bool yes = ts__v3_is_v3_config(text, len);
    free(text);
    return yes;
}

ts_status ts__v3_load_dir(const char *dir, int64_t max_batch, ts_model **out) {
    *out = NULL;
    ts__hf_dir *d = NULL;
    TS__RETURN_IF_ERROR(ts__hf_open(dir, &d));
    ts_model *m = NULL;
    const ts_status st = load(d, dir, max_batch, &m);
    if (st != TS_OK) {
        ts__hf_close(d);
        return st;
    }
    m->v3->ckpt = d; /* the embedding views the mapping; ts_model_free closes it */
    size_t mapped = 0;
    for (size_t s = 0; s < d->n_shards; s++) mapped += d->shards[s]->map_len;
    m->v3->mapped = mapped;
    fprintf(stderr, "tilestack: %s (DeepseekV3ForCausalLM, BF16): %.1f MB mapped from the safetensors, "
            "%.1f MB converted to f32, %.1f MB packed for the kernels\n", dir, mapped / 1e6,
            m->v3->converted / 1e6, m->v3->packed / 1e6);
    *out = m;
    return TS_OK;
}
