/* ts_model_load_dir for a DeepseekV3ForCausalLM or DeepseekV32ForCausalLM directory
 * (docs/models.md "V3", "V3.2").
 *
 * As the V4 loader (hf_load_v4.c), in two passes over the safetensors headers and then the
 * data: every tensor config.json implies is found by name (hf_names_v3.c) and its dtype and
 * shape checked, and nothing may be left over (the MTP layer excepted), before one byte of
 * data is read; then every value must be finite. BF16 weights stay in the mapped files where
 * the kernels read them in place (the embedding) and are packed for the bf16 GEMMs otherwise;
 * norms, the router and its bias are widened to f32. An FP8 checkpoint (quantization_config,
 * DeepSeek's release) holds its linear layers as e4m3 with f32 `weight_scale_inv` per 128x128:
 * they are dequantised when packed (code x scale in f32, rounded to bf16: the bf16 GEMMs run
 * them; no FP8 GEMM path for V3 yet). How each tensor is held is ts__v3_hold_of's rule
 * (hf_hold_v3.c), which ts_model_plan_dir counts by (ts__v3_plan: pass 1 only); once bound, the
 * file pages of everything but the in-place embedding are given back. */
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

/* The tensor `name` with dtype fp8 ? F8_E4M3 : BF16 / F32 and exactly `shape`. */
static ts_status resolve(const ts__hf_dir *d, const char *name, bool fp8, int ndim, const int64_t *shape,
                         const char *why, bool **used, const ts__st_tensor **src, size_t *src_shard) {
    char e[TS__ESC_CAP], want[96], got[96];
    const char *where = d->n_shards == 1 && strstr(d->shards[0]->path, "/model.safetensors")
                            ? "model.safetensors" : "model.safetensors.index.json";
    size_t s = 0, k = 0;
    const ts__st_tensor *t = find(d, name, &s, &k);
    if (!t)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: tensor '%s' is missing (config.json implies it)",
                        d->path, where, esc(name, e));
    if (fp8 ? t->dtype != TS_E4M3 : t->dtype != TS_BF16 && t->dtype != TS_F32)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': dtype %s, expected %s (%s)",
                        d->shards[s]->path, esc(name, e), ts__st_dtype_name(t->dtype),
                        fp8 ? "F8_E4M3" : "BF16 or F32", why);
    bool same = t->ndim == ndim;
    for (int j = 0; same && j < ndim; j++) same = t->shape[j] == shape[j];
    if (!same) {
        shape_str(t->shape, t->ndim, got, sizeof got);
        shape_str(shape, ndim, want, sizeof want);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': shape %s, expected %s (from "
                        "config.json)", d->shards[s]->path, esc(name, e), got, want);
    }
    used[s][k] = true;
    *src = t;
    *src_shard = s;
    return TS_OK;
}

/* Pass 1: names, dtypes, shapes (FP8 weights with their scales: sc / sc_shard); used[shard][i]
 * marks what was taken. */
static ts_status resolve_all(const ts__hf_dir *d, const ts__v3_config *c, const ts__v3_tensor *tl,
                             int64_t nt, const ts__st_tensor **src, size_t *src_shard,
                             const ts__st_tensor **sc, size_t *sc_shard, bool **used) {
    char e[TS__ESC_CAP];
    for (int64_t i = 0; i < nt; i++) {
        const bool fp8 = c->quantized && ts__v3_fp8_role(tl[i].role);
        TS__RETURN_IF_ERROR(resolve(d, tl[i].name, fp8, tl[i].ndim, tl[i].shape,
                                    fp8 ? "a linear layer of an FP8 checkpoint"
                                        : c->quantized ? "kept in BF16 / F32 by DeepSeek's FP8 release"
                                                       : "a checkpoint without quantization_config",
                                    used, &src[i], &src_shard[i]));
        if (!fp8) continue;
        char name[128];
        snprintf(name, sizeof name, "%s_scale_inv", tl[i].name);
        const int64_t shp[2] = {ts__ceil_div(tl[i].shape[0], 128), ts__ceil_div(tl[i].shape[1], 128)};
        TS__RETURN_IF_ERROR(resolve(d, name, false, 2, shp, "f32 scales, one per 128x128", used, &sc[i],
                                    &sc_shard[i]));
        if (sc[i]->dtype != TS_F32)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': dtype %s, expected F32 (the scales "
                            "of DeepSeek's FP8 release)", d->shards[sc_shard[i]]->path, esc(name, e),
                            ts__st_dtype_name(sc[i]->dtype));
    }
    return TS_OK;
}

/* Pass 2: every value finite (bf16 / f32 exponent all ones is inf or NaN, e4m3 0x7F / 0xFF is
 * NaN); a scale (positive) also > 0. */
static ts_status check_values(const ts__hf_dir *d, const ts__st_tensor *t, size_t shard, bool scale) {
    const int64_t n = (int64_t)((t->end - t->begin) / ts_dtype_size(t->dtype));
    const int64_t cols = t->ndim == 2 ? t->shape[1] : n ? n : 1;
    for (int64_t i = 0; i < n; i++) {
        bool bad;
        if (t->dtype == TS_E4M3) {
            bad = (((const uint8_t *)t->data)[i] & 0x7F) == 0x7F;
        } else if (t->dtype == TS_BF16) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            bad = (h & 0x7F80) == 0x7F80;
        } else {
            uint32_t u;
            memcpy(&u, (const char *)t->data + 4 * i, 4);
            bad = (u & 0x7F800000u) == 0x7F800000u || (scale && (u >> 31 || !(u & 0x7F800000u)));
        }
        if (bad) {
            char e[TS__ESC_CAP];
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': element row %lld, column %lld is "
                            "%s", d->shards[shard]->path, esc(t->name, e),
                            (long long)(i / cols), (long long)(i % cols),
                            t->dtype == TS_E4M3 ? "an e4m3 NaN code (0x7f / 0xff)"
                            : scale ? "not a positive normal number (a weight_scale_inv)"
                                    : "not finite (values must be finite)");
        }
    }
    return TS_OK;
}

/* Pass 1 of a directory, shared by the load and the plan: config.json parsed, every tensor it
 * implies found with its dtype and shape (FP8 weights with their scales), nothing left over,
 * the scales aligned for reading in place. Reads headers only, no tensor data. */
typedef struct resolved {
    ts__v3_config c;
    ts__v3_tensor *tl;
    int64_t nt;
    const ts__st_tensor **src, **sc;
    size_t *shard, *sc_shard;
} resolved;

static void resolved_free(resolved *r) {
    free(r->sc_shard);
    free(r->sc);
    free(r->shard);
    free(r->src);
    free(r->tl);
    memset(r, 0, sizeof *r);
}

static ts_status resolve_dir(ts__hf_dir *d, const char *dir, const char *fn, resolved *r) {
    memset(r, 0, sizeof *r);
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    const ts__v3_config *c = &r->c;
    TS__RETURN_IF_ERROR(ts__v3_parse_config(d->config, d->config_len, cpath, &r->c));
    /* a config.json can claim 128 layers of 65536 experts: the checkpoint must hold at least the
     * expert tensors that implies before a list of them is built */
    const int64_t need = (c->n_layers - c->first_dense) * c->n_experts * 3;
    if ((int64_t)d->n_tensors < need)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the checkpoint holds %zu tensors, fewer than the %lld "
                        "expert weights config.json implies", dir, d->n_tensors, (long long)need);
    TS__RETURN_IF_ERROR(ts__v3_tensors(c, &r->tl, &r->nt));
    const size_t nt = (size_t)r->nt;
    r->src = calloc(nt, sizeof *r->src);
    r->shard = calloc(nt, sizeof *r->shard);
    r->sc = calloc(nt, sizeof *r->sc);
    r->sc_shard = calloc(nt, sizeof *r->sc_shard);
    bool **used = calloc(d->n_shards ? d->n_shards : 1, sizeof *used);
    ts_status st = r->src && r->shard && r->sc && r->sc_shard && used
                       ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %s", fn, dir);
    for (size_t s = 0; st == TS_OK && s < d->n_shards; s++)
        if (!(used[s] = calloc(d->shards[s]->n ? d->shards[s]->n : 1, sizeof **used)))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %s", fn, dir);
    if (st == TS_OK) st = resolve_all(d, c, r->tl, r->nt, r->src, r->shard, r->sc, r->sc_shard, used);
    for (size_t s = 0; st == TS_OK && s < d->n_shards; s++)
        for (size_t k = 0; k < d->shards[s]->n; k++)
            if (!used[s][k] && !ts__v3_ignored(c, d->shards[s]->t[k].name)) {
                char e[TS__ESC_CAP];
                st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is not part of the model "
                              "config.json describes", d->shards[s]->path, esc(d->shards[s]->t[k].name, e));
                break;
            }
    /* f32 scales are read in place: the mapping must align them */
    for (size_t i = 0; st == TS_OK && i < nt; i++)
        if (r->sc[i] && (uintptr_t)r->sc[i]->data % 4)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is not 4-byte aligned in the file",
                          d->shards[r->sc_shard[i]]->path, r->sc[i]->name);
    for (size_t s = 0; used && s < d->n_shards; s++) free(used[s]);
    free(used);
    if (st != TS_OK) resolved_free(r);
    return st;
}

/* After binding: the file pages of every tensor but the in-place embedding go back (the packs
 * and f32 copies hold the values now; the mapping stays valid, a touch would re-read the
 * file); keep: the packed sources stay, as ts_model_load_dir_keep promises. Returns the bytes
 * of the packed sources given back (ts__v3_hold_of's `released`). */
static size_t drop_sources(const resolved *r, bool keep, const void *const *data) {
    size_t n = 0;
    for (int64_t i = 0; i < r->nt; i++) {
        if (!data[i]) continue; /* another rank's expert: never read */
        const ts__v3_hold h = ts__v3_hold_of(&r->c, &r->tl[i], r->src[i]->dtype);
        if (h.how == V3_HOW_VIEW || (keep && h.released)) continue;
        ts__model_drop_pages(r->src[i]->data, (size_t)(r->src[i]->end - r->src[i]->begin));
        if (r->sc[i]) ts__model_drop_pages(r->sc[i]->data, (size_t)(r->sc[i]->end - r->sc[i]->begin));
        n += h.released;
    }
    return n;
}

/* Experts [lo, hi) only: the others' data are neither read nor bound (an EP rank's share). */
static bool mine(const ts__v3_tensor *t, int64_t lo, int64_t hi) {
    return t->expert < 0 || (t->expert >= lo && t->expert < hi);
}

static ts_status load(ts__hf_dir *d, const char *dir, int64_t max_batch, bool keep, int64_t lo,
                      int64_t hi, ts_model **out) {
    resolved r;
    TS__RETURN_IF_ERROR(resolve_dir(d, dir, "ts_model_load_dir", &r));
    const int64_t nt = r.nt;
    const void **data = calloc((size_t)nt, sizeof *data);
    ts_dtype *dt = calloc((size_t)nt, sizeof *dt);
    const float **scales = calloc((size_t)nt, sizeof *scales);
    ts_status st = data && dt && scales ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", dir);
    /* pass 2: every value valid, before any is used */
    for (int64_t i = 0; st == TS_OK && i < nt; i++) {
        if (!mine(&r.tl[i], lo, hi)) continue;
        st = check_values(d, r.src[i], r.shard[i], false);
        if (st == TS_OK && r.sc[i]) {
            st = check_values(d, r.sc[i], r.sc_shard[i], true);
            scales[i] = (const float *)r.sc[i]->data;
        }
        data[i] = r.src[i]->data;
        dt[i] = r.src[i]->dtype;
    }
    if (st == TS_OK) st = ts__v3_model_create(&r.c, r.tl, nt, data, dt, scales, max_batch, out);
    if (st == TS_OK) {
        /* the bytes as ts_model_plan_dir counts them (the same rule, ts__v3_hold_of) */
        ts_model *m = *out;
        for (int64_t i = 0; i < nt; i++) {
            if (!data[i]) continue;
            const ts__v3_hold h = ts__v3_hold_of(&r.c, &r.tl[i], dt[i]);
            m->load_stats.mapped += h.mapped;
            m->load_stats.converted += h.converted;
            m->load_stats.packed += h.packed;
        }
        m->load_stats.released = drop_sources(&r, keep, data);
    }
    free(scales);
    free(dt);
    free(data);
    resolved_free(&r);
    return st;
}

ts_status ts__v3_plan(const char *dir, ts__v3_plan_fn fn, void *ctx, ts__v3_config *cfg) {
    ts__hf_dir *d = NULL;
    TS__RETURN_IF_ERROR(ts__hf_open(dir, &d));
    resolved r;
    ts_status st = resolve_dir(d, dir, "ts_model_plan_dir", &r);
    if (st == TS_OK) *cfg = r.c;
    for (int64_t i = 0; st == TS_OK && i < r.nt; i++) {
        const ts__v3_hold h = ts__v3_hold_of(&r.c, &r.tl[i], r.src[i]->dtype);
        st = fn(ctx, &r.c, &r.tl[i], &h);
    }
    resolved_free(&r); /* zeroed when resolve_dir failed */
    ts__hf_close(d);
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

ts_status ts__v3_load_dir(const char *dir, int64_t max_batch, bool keep, ts_model **out) {
    return ts__v3_load_dir_experts(dir, max_batch, keep, 0, INT64_MAX, "", out);
}

ts_status ts__v3_load_dir_experts(const char *dir, int64_t max_batch, bool keep, int64_t lo,
                                  int64_t hi, const char *who, ts_model **out) {
    *out = NULL;
    ts__hf_dir *d = NULL;
    TS__RETURN_IF_ERROR(ts__hf_open(dir, &d));
    ts_model *m = NULL;
    const ts_status st = load(d, dir, max_batch, keep, lo, hi, &m);
    if (st != TS_OK) {
        ts__hf_close(d);
        return st;
    }
    m->v3->ckpt = d; /* the embedding views the mapping; ts_model_free closes it */
    size_t mapped = 0;
    for (size_t s = 0; s < d->n_shards; s++) mapped += d->shards[s]->map_len;
    m->v3->mapped = mapped;
    fprintf(stderr, "tilestack: %s%s (%s, %s): %.1f MB mapped from the safetensors, "
            "%.1f MB converted to f32, %.1f MB packed for the kernels, %.1f MB of the file's "
            "pages given back after packing\n", who, dir,
            m->v3->c.v32 ? "DeepseekV32ForCausalLM" : "DeepseekV3ForCausalLM", m->v3->c.quantized ? "FP8 dequantised to bf16 at load" : "BF16", mapped / 1e6,
            m->v3->converted / 1e6, m->v3->packed / 1e6, m->load_stats.released / 1e6);
    *out = m;
    return TS_OK;
}
