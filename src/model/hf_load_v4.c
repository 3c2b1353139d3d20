/* ts_model_load_dir: a DeepSeek-V4 checkpoint directory -> the records of docs/model.md §2 ->
 * ts__model_create_from_records, as ts_model_load does for tilestack's own file.
 *
 * Two passes. The first resolves every record's source tensor by name (hf_names_v4.c) and
 * checks its dtype and shape against what config.json implies, then refuses any tensor left
 * over: nothing is read or allocated for data before the whole checkpoint is known to be the
 * model. The second fills the records: a value whose bytes tilestack keeps as they are (FP8 /
 * FP4 codes, bf16 embed / head / weights_proj, aligned f32) is a view into the mapping (the
 * model keeps the files mapped); what needs another form is converted into its own buffer
 * (ue8m0 scale bytes -> f32 powers of two, bf16 -> f32, int64 tid2eid -> int32; the source's
 * pages then go back), and a weight of an unquantised checkpoint is quantised with tilestack's
 * own quantisers. Every value then passes the same checks as a tilestack weight file
 * (ts__model_check_values). ts_model_load_dir then drops the records binding packed
 * (ts__model_release_packed; docs/models.md "Memory per rank"); ts_model_load_dir_keep keeps
 * them. */
#include "hf_v4.h"
#include "hf_v3.h"
#include "safetensors.h"

#include "core/resident.h"
#include "core/text_escape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum conv {
    C_VIEW,      /* the bytes as they are */
    C_COPY,      /* the same bytes, copied (a mapping not aligned for the element type) */
    C_BF16_F32,  /* bf16 -> f32 (exact) */
    C_F32_BF16,  /* f32 -> bf16, round to nearest even (a head / embedding kept bf16) */
    C_UE8M0_F32, /* ue8m0 byte -> 2^(e-127) as f32; 0xFF (NaN) refused */
    C_I64_I32,   /* expert ids, each in [0, E) */
    C_QUANT      /* bf16 / f32 weight -> FP8 / FP4 with tilestack's quantisers (both records) */
} conv;

typedef struct src_ref {
    const ts__st_tensor *t;
    int shard;
    size_t offset; /* bytes into t->data (one expert of a merged tensor) */
    conv how;
} src_ref;

typedef struct plan {
    src_ref rec[2]; /* per record of the spec (values, scale); C_QUANT: rec[0] only */
} plan;

typedef struct ts__hf_v4_loader {
    char *dir;
    ts__hf_dir *d; /* NULL once a model holds it (ts__hf_v4_bind) */
    size_t n_shards;
    ts_model_config cfg;
    ts__hf_v4_info info;
    ts_hf_layout layout;
    bool **used; /* [shard][tensor] */
    size_t mapped, converted, quantized;
} loader;

static const char *esc(const char *s, char b[TS__ESC_CAP]) { return ts__text_escape_str(s, b, TS__ESC_CAP); }

static const char *shard_path(const loader *l, int shard) { return l->d->shards[shard]->path; }

/* Where a missing tensor should have been: the index names the shards. */
static const char *listing(const loader *l, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", l->d->path,
             l->d->n_shards == 1 && l->d->shards[0] && strstr(l->d->shards[0]->path, "/model.safetensors")
                 ? "model.safetensors" : "model.safetensors.index.json");
    return buf;
}

static const ts__st_tensor *find(const loader *l, const char *name, int *shard) {
    for (size_t i = 0; i < l->d->n_shards; i++) {
        const ts__st_tensor *t = ts__st_find(l->d->shards[i], name);
        if (t) {
            *shard = (int)i;
            return t;
        }
    }
    return NULL;
}

static void mark(loader *l, const ts__st_tensor *t, int shard) {
    l->used[shard][t - l->d->shards[shard]->t] = true;
}

static void shape_str(const int64_t *s, int n, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}


/* The tensor `name` must exist with one of the dtypes and exactly `shape`. */
static ts_status resolve(loader *l, const char *name, const char *ts_name, const ts_dtype *dts,
                         int ndt, const int64_t *shape, int ndim, const char *why,
                         src_ref *out) {
    char e1[TS__ESC_CAP], buf[600];
    int shard = -1;
    const ts__st_tensor *t = find(l, name, &shard);
    if (!t)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is missing (tilestack's %s, from "
                        "config.json)", listing(l, buf, sizeof buf), esc(name, e1), ts_name);
    int k = 0;
    while (k < ndt && t->dtype != dts[k]) k++;
    if (k == ndt) {
        char want[64] = {0};
        for (int i = 0; i < ndt; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? " or " : "", ts__st_dtype_name(dts[i]));
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': dtype %s, expected %s (%s)",
                        shard_path(l, shard), esc(name, e1), ts__st_dtype_name(t->dtype), want, why);
    }
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char got[160], want[160];
        shape_str(t->shape, t->ndim, got, sizeof got);
        shape_str(shape, ndim, want, sizeof want);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': shape %s, expected %s (from "
                        "config.json; tilestack's %s)", shard_path(l, shard), esc(name, e1), got,
                        want, ts_name);
    }
    mark(l, t, shard);
    out->t = t;
    out->shard = shard;
    out->offset = 0;
    return TS_OK;
}

/* The shape a source tensor has for a spec record of logical shape [rows, cols]: as is, or the
 * merged [E, rows_per_expert, cols] of the HF module layout. */
static int src_shape(const ts__hf_src *s, const ts_model_config *c, int64_t rows, int64_t cols,
                     int ndim, int64_t out[3]) {
    if (s->expert < 0) {
        out[0] = rows;
        out[1] = cols;
        return ndim;
    }
    out[0] = c->n_routed_experts;
    out[1] = s->rows_per_expert;
    out[2] = cols;
    return 3;
}

static size_t merged_offset(const ts__hf_src *s, int64_t cols, size_t esize) {
    return s->expert < 0 ? 0 : (size_t)((s->expert * s->rows_per_expert + s->row0) * cols) * esize;
}

/* Pass 1 for one spec. */
static ts_status plan_spec(loader *l, const ts__wspec *sp, const ts__mtensor rec[2], plan *p) {
    ts__hf_src s;
    TS__RETURN_IF_ERROR(ts__hf_v4_source(sp, &l->cfg, l->layout, l->info.tied, &s));
    const int64_t out = sp->shape[0], in = sp->ndim == 2 ? sp->shape[1] : 1;
    int64_t shp[3];
    static const ts_dtype floats[] = {TS_BF16, TS_F32};
    const bool quant = sp->kind == TS__W_FP8 || sp->kind == TS__W_FP4;
    if (quant && !l->info.quantized) {
        /* an unquantised checkpoint: the weight in bf16 / f32, quantised here */
        const int nd = src_shape(&s, &l->cfg, out, in, 2, shp);
        TS__RETURN_IF_ERROR(resolve(l, s.name, sp->name, floats, 2, shp, nd, "a checkpoint without "
                                    "quantization_config holds bf16 or f32 weights", &p->rec[0]));
        p->rec[0].offset = merged_offset(&s, in, ts_dtype_size(p->rec[0].t->dtype));
        p->rec[0].how = C_QUANT;
        return TS_OK;
    }
    if (quant) {
        const bool fp8 = sp->kind == TS__W_FP8;
        static const ts_dtype e4m3[] = {TS_E4M3}, e2m1[] = {TS_I8, TS_U8}, e8m0[] = {TS_UE8M0};
        const int64_t vcols = fp8 ? in : in / 2;
        int nd = src_shape(&s, &l->cfg, out, vcols, 2, shp);
        TS__RETURN_IF_ERROR(resolve(l, s.name, sp->name, fp8 ? e4m3 : e2m1, fp8 ? 1 : 2, shp, nd,
                                    fp8 ? "an FP8 weight of a quantised checkpoint"
                                        : "FP4 experts: two e2m1 codes per byte", &p->rec[0]));
        p->rec[0].offset = merged_offset(&s, vcols, 1);
        p->rec[0].how = C_VIEW;
        const int64_t srows = rec[1].shape[0], scols = rec[1].shape[1];
        if (s.expert >= 0) {
            /* merged scales: [E, rows_per_expert, in / 32] with the values' row split */
            shp[0] = l->cfg.n_routed_experts;
            shp[1] = s.rows_per_expert;
            shp[2] = scols;
            nd = 3;
        } else {
            shp[0] = srows;
            shp[1] = scols;
            nd = 2;
        }
        TS__RETURN_IF_ERROR(resolve(l, s.scale, rec[1].name, e8m0, 1, shp, nd,
                                    fp8 ? "ue8m0 scales, one per 128x128" : "ue8m0 scales, one per 1x32",
                                    &p->rec[1]));
        p->rec[1].offset = merged_offset(&s, scols, 1);
        p->rec[1].how = C_UE8M0_F32;
        return TS_OK;
    }
    const int nd = src_shape(&s, &l->cfg, out, in, sp->ndim, shp);
    src_ref *r = &p->rec[0];
    if (rec[0].dtype == TS_I32) {
        static const ts_dtype ids[] = {TS_I64, TS_I32};
        TS__RETURN_IF_ERROR(resolve(l, s.name, sp->name, ids, 2, shp, nd, "expert ids", r));
        r->how = r->t->dtype == TS_I64 ? C_I64_I32 : C_VIEW;
    } else {
        TS__RETURN_IF_ERROR(resolve(l, s.name, sp->name, floats, 2, shp, nd,
                                    rec[0].dtype == TS_BF16 ? "tilestack keeps it bf16"
                                                            : "tilestack keeps it f32", r));
        const ts_dtype have = r->t->dtype;
        r->how = have == rec[0].dtype ? C_VIEW : have == TS_BF16 ? C_BF16_F32 : C_F32_BF16;
    }
    return TS_OK;
}

/* ---- pass 2: the records' data */

static ts_status bad_elem(const loader *l, const src_ref *r, int64_t i, const char *val,
                          const char *rule) {
    char e[TS__ESC_CAP], where[64];
    const int64_t cols = r->t->ndim >= 2 ? r->t->shape[r->t->ndim - 1] : 1;
    const int64_t j = i + (int64_t)(r->offset / ts_dtype_size(r->t->dtype));
    if (r->t->ndim >= 2) snprintf(where, sizeof where, "row %lld, column %lld", (long long)(j / cols), (long long)(j % cols));
    else snprintf(where, sizeof where, "[%lld]", (long long)j);
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': element %s = %s: %s",
                    shard_path(l, r->shard), esc(r->t->name, e), where, val, rule);
}

static ts_status alloc_rec(ts__mtensor *rec) {
    rec->data = ts__aligned_alloc(rec->nbytes ? rec->nbytes : 1);
    if (!rec->data) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s (%zu bytes)", rec->name, rec->nbytes);
    return TS_OK;
}

/* The source's values as f32 (n of them), every one finite. */
static ts_status to_f32(const loader *l, const src_ref *r, int64_t n, float *dst) {
    const char *p = (const char *)r->t->data + r->offset;
    for (int64_t i = 0; i < n; i++) {
        if (r->t->dtype == TS_BF16) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = ts__bf16_to_f32_inl(h);
        } else {
            memcpy(&dst[i], p + 4 * i, 4);
        }
        if (!isfinite(dst[i])) {
            char v[32];
            snprintf(v, sizeof v, "%g", dst[i]);
            return bad_elem(l, r, i, v, "values must be finite");
        }
    }
    return TS_OK;
}

/* A record kept as a view into the mapping (its address only: no page is touched); else it
 * gets its own buffer. fill_rec and ts__hf_v4_plan both decide by this. */
static bool is_view(const src_ref *r, const ts__mtensor *rec) {
    const char *p = (const char *)r->t->data + r->offset;
    return r->how == C_VIEW && ((uintptr_t)p % ts_dtype_size(rec->dtype)) == 0;
}

static ts_status convert(const loader *l, const src_ref *r, ts__mtensor *rec, const char *p, int64_t n);

static ts_status fill_rec(loader *l, const src_ref *r, ts__mtensor *rec) {
    const char *p = (const char *)r->t->data + r->offset;
    const size_t esize = ts_dtype_size(rec->dtype);
    const int64_t n = (int64_t)(rec->nbytes / esize);
    if (is_view(r, rec)) {
        rec->data = (void *)p;
        rec->view = true;
        l->mapped += rec->nbytes;
        return TS_OK;
    }
    TS__RETURN_IF_ERROR(alloc_rec(rec));
    l->converted += rec->nbytes;
    /* the record has its own bytes now: the source's pages, read once, go back */
    ts_status st = convert(l, r, rec, p, n);
    ts__model_drop_pages(p, (size_t)n * ts_dtype_size(r->t->dtype));
    return st;
}

static ts_status convert(const loader *l, const src_ref *r, ts__mtensor *rec, const char *p, int64_t n) {
    switch (r->how) {
    case C_VIEW:
    case C_COPY:
        memcpy(rec->data, p, rec->nbytes);
        return TS_OK;
    case C_BF16_F32:
        return to_f32(l, r, n, (float *)rec->data);
    case C_F32_BF16:
        for (int64_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, p + 4 * i, 4);
            ((uint16_t *)rec->data)[i] = ts__f32_to_bf16_inl(v);
        }
        return TS_OK;
    case C_UE8M0_F32:
        for (int64_t i = 0; i < n; i++) {
            const uint8_t e = (uint8_t)p[i];
            if (e == 0xFF)
                return bad_elem(l, r, i, "0xff", "a ue8m0 NaN (a scale must be a power of two)");
            ((float *)rec->data)[i] = ts_ue8m0_to_f32(e);
        }
        return TS_OK;
    case C_I64_I32:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            if (v < 0 || v >= l->cfg.n_routed_experts) {
                char val[32], rule[96];
                snprintf(val, sizeof val, "%lld", (long long)v);
                snprintf(rule, sizeof rule, "expert ids must be in [0, n_routed_experts = %lld)",
                         (long long)l->cfg.n_routed_experts);
                return bad_elem(l, r, i, val, rule);
            }
            ((int32_t *)rec->data)[i] = (int32_t)v;
        }
        return TS_OK;
    case C_QUANT:
        break;
    }
    return ts__fail(TS_ERR_INTERNAL, "ts_model_load_dir: conversion %d", (int)r->how);
}

static ts_status fill_spec(loader *l, const ts__wspec *sp, const plan *p, ts__mtensor rec[2]) {
    if (p->rec[0].how == C_QUANT) {
        const int64_t n = sp->shape[0] * sp->shape[1];
        float *w = malloc((size_t)n * sizeof *w);
        if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s (%lld values)", sp->name, (long long)n);
        ts_status st = to_f32(l, &p->rec[0], n, w);
        /* quantised from here on: the source's pages go back */
        ts__model_drop_pages((const char *)p->rec[0].t->data + p->rec[0].offset,
                             (size_t)n * ts_dtype_size(p->rec[0].t->dtype));
        if (st == TS_OK) st = alloc_rec(&rec[0]);
        if (st == TS_OK) st = alloc_rec(&rec[1]);
        if (st == TS_OK) st = ts__model_quantize_weight(sp, w, rec);
        free(w);
        l->quantized += rec[0].nbytes + rec[1].nbytes;
        return st;
    }
    const int nr = sp->kind == TS__W_FP8 || sp->kind == TS__W_FP4 ? 2 : 1;
    for (int k = 0; k < nr; k++) TS__RETURN_IF_ERROR(fill_rec(l, &p->rec[k], &rec[k]));
    return TS_OK;
}

/* ---- the directory */

/* The layout from layer 0's attention norm, which every layout names differently. */
static ts_status find_layout(loader *l) {
    static const struct { const char *name; ts_hf_layout lay; } marks[] = {
        {"layers.0.attn_norm.weight", TS_HF_LAYOUT_RELEASE},
        {"model.layers.0.attn_norm.weight", TS_HF_LAYOUT_HF},
        {"model.layers.0.input_layernorm.weight", TS_HF_LAYOUT_HF_MODULES},
    };
    int shard, found = 0;
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (find(l, marks[i].name, &shard)) l->layout = marks[i].lay, found++;
    if (found == 1) return TS_OK;
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the tensor names %s (layer 0's attention norm is "
                    "layers.0.attn_norm.weight in DeepSeek's release, model.layers.0.attn_norm.weight "
                    "from transformers' save_pretrained, model.layers.0.input_layernorm.weight in "
                    "transformers' module names)", l->dir,
                    found ? "mix layouts" : "are of no layout tilestack knows");
}

/* Before the tensor list is built: a config.json can claim 128 layers of 65536 experts (a
 * tensor list of gigabytes); the checkpoint must hold at least the tensors that implies. */
static ts_status check_counts(loader *l) {
    const ts_model_config *c = &l->cfg;
    if (l->layout == TS_HF_LAYOUT_HF_MODULES) {
        /* experts merged: each layer's gate_up_proj must hold the config's E experts */
        for (int64_t L = 0; L < c->n_layers; L++) {
            char name[96], buf[600];
            snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.gate_up_proj", (long long)L);
            int shard;
            const ts__st_tensor *t = find(l, name, &shard);
            if (!t)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is missing",
                                listing(l, buf, sizeof buf), name);
            if (t->ndim != 3 || t->shape[0] != c->n_routed_experts)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' does not hold "
                                "n_routed_experts = %lld experts", shard_path(l, shard), name,
                                (long long)c->n_routed_experts);
        }
        return TS_OK;
    }
    const int64_t need = c->n_layers * c->n_routed_experts * 3;
    if ((int64_t)l->d->n_tensors < need)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the checkpoint holds %zu tensors, fewer than the "
                        "%lld expert weights config.json implies (num_hidden_layers = %lld x "
                        "n_routed_experts = %lld x 3)", l->dir, l->d->n_tensors, (long long)need,
                        (long long)c->n_layers, (long long)c->n_routed_experts);
    return TS_OK;
}

static ts_status check_extra(const loader *l) {
    for (size_t i = 0; i < l->d->n_shards; i++)
        for (size_t k = 0; k < l->d->shards[i]->n; k++) {
            const char *name = l->d->shards[i]->t[k].name;
            if (l->used[i][k] || ts__hf_v4_ignored(name)) continue;
            char e[TS__ESC_CAP];
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is not part of the model "
                            "config.json describes", l->d->shards[i]->path, esc(name, e));
        }
    return TS_OK;
}

/* The last path component, for the model's name. */
static const char *base_name(const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), dir + b);
    return buf;
}

/* Everything that needs only config.json and the headers. */
static ts_status open_dir(loader *l) {
    char cpath[600], name[64];
    snprintf(cpath, sizeof cpath, "%s/config.json", l->dir);
    TS__RETURN_IF_ERROR(ts__hf_v4_parse_config(l->d->config, l->d->config_len, cpath,
                                               base_name(l->dir, name, sizeof name), &l->cfg, &l->info));
    l->used = calloc(l->d->n_shards ? l->d->n_shards : 1, sizeof *l->used);
    if (!l->used) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", l->dir);
    for (size_t i = 0; i < l->d->n_shards; i++)
        if (!(l->used[i] = calloc(l->d->shards[i]->n ? l->d->shards[i]->n : 1, sizeof **l->used)))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", l->dir);
    TS__RETURN_IF_ERROR(find_layout(l));
    return check_counts(l);
}

ts_status ts__hf_v4_open(const char *dir, ts__hf_v4_loader **out) {
    *out = NULL;
    loader *l = calloc(1, sizeof *l);
    if (!l || !(l->dir = strdup(dir))) {
        free(l);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", dir);
    }
    ts_status st = ts__hf_open(dir, &l->d);
    if (st == TS_OK) {
        l->n_shards = l->d->n_shards;
        st = open_dir(l);
    }
    if (st != TS_OK) {
        ts__hf_v4_close(l);
        return st;
    }
    *out = l;
    return TS_OK;
}

const ts_model_config *ts__hf_v4_config(const ts__hf_v4_loader *l) { return &l->cfg; }

void ts__hf_v4_close(ts__hf_v4_loader *l) {
    if (!l) return;
    for (size_t i = 0; l->used && i < l->n_shards; i++) free(l->used[i]);
    free(l->used);
    ts__hf_close(l->d);
    free(l->dir);
    free(l);
}

/* Pass 1: every spec's records shaped into recs (2 * ns room, *nrecs of them) and its sources
 * resolved into plans, for the weights of routed experts in [lo, hi) and every other weight
 * (keep[i] says which; the others' records are shaped in scratch and only checked); then
 * nothing may be left over. Reads headers only. */
static ts_status pass1(loader *l, const ts__wspec *specs, int64_t ns, int64_t lo, int64_t hi,
                       ts__mtensor *recs, int64_t *nrecs, plan *plans, bool *keep) {
    for (int64_t i = 0; i < ns; i++) {
        const int64_t e = ts__model_expert_of(specs[i].name);
        keep[i] = e < 0 || (e >= lo && e < hi);
        ts__mtensor other[2], *rec = keep[i] ? &recs[*nrecs] : other;
        const int nr = ts__model_spec_records(&specs[i], rec);
        if (keep[i]) *nrecs += nr;
        TS__RETURN_IF_ERROR(plan_spec(l, &specs[i], rec, &plans[i]));
    }
    return check_extra(l);
}

/* The layer a spec belongs to ("12.attn.wq_a" -> 12), -1 for the model's own (embed, head). */
static int64_t layer_of(const char *name) {
    if (*name < '0' || *name > '9') return -1;
    char *end = NULL;
    const long long L = strtoll(name, &end, 10);
    return *end == '.' ? (int64_t)L : -1;
}

/* Pass 2 for spec i: its records' data and the same value checks as a tilestack weight file. */
static ts_status fill_checked(loader *l, const ts__wspec *sp, const plan *p, ts__mtensor *rec) {
    TS__RETURN_IF_ERROR(fill_spec(l, sp, p, rec));
    char where[700], e[TS__ESC_CAP];
    snprintf(where, sizeof where, "%s (tensor '%s')", shard_path(l, p->rec[0].shard),
             esc(p->rec[0].t->name, e));
    ts_status st = ts__model_check_values(where, &l->cfg, sp, rec);
    if (st != TS_OK) {
        /* its message names the file through `where`; drop ts_model_load's prefix */
        char msg[900];
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        const char *body = strncmp(msg, "ts_model_load: ", 15) ? msg : msg + 15;
        st = ts__fail(st, "%s", body);
    }
    return st;
}

ts_status ts__hf_v4_bind(ts__hf_v4_loader *l, int64_t max_batch, int64_t lo, int64_t hi,
                         ts__hf_layer_fn layer_fn, void *ctx, ts_model **out) {
    *out = NULL;
    if (!l->d) return ts__fail(TS_ERR_INTERNAL, "ts_model_load_dir: %s bound twice", l->dir);
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    TS__RETURN_IF_ERROR(ts__model_weight_specs(&l->cfg, &specs, &ns));
    ts_model *m = NULL;
    plan *plans = calloc((size_t)ns, sizeof *plans);
    bool *keep = calloc((size_t)ns, sizeof *keep);
    ts_status st = plans && keep ? ts__model_alloc(&l->cfg, max_batch, &m)
                                 : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %lld tensors", (long long)ns);
    if (st == TS_OK && !(m->recs = calloc((size_t)(2 * ns), sizeof *m->recs)))
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %lld tensors", (long long)ns);
    /* pass 1: names, dtypes, shapes of every tensor (headers only: another rank's experts are
     * checked too, so every rank refuses the same checkpoint); then nothing may be left over */
    if (st == TS_OK) st = pass1(l, specs, ns, lo, hi, m->recs, &m->nrecs, plans, keep);
    /* pass 2: the kept records' data (the only bytes of the files read), checked; each layer
     * handed to layer_fn once its records are all filled (specs come layer by layer) */
    double total = 0, done = 0;
    for (int64_t r = 0; st == TS_OK && ts__progress_on() && r < m->nrecs; r++) total += (double)m->recs[r].nbytes;
    ts__progress_state prog = {0};
    for (int64_t i = 0, r = 0; st == TS_OK && i < ns; i++) {
        if (!keep[i]) continue;
        ts__mtensor *rec = &m->recs[r];
        const int nr = specs[i].kind == TS__W_FP8 || specs[i].kind == TS__W_FP4 ? 2 : 1;
        r += nr;
        st = fill_checked(l, &specs[i], &plans[i], rec);
        for (int k = 0; k < nr; k++) done += (double)rec[k].nbytes;
        ts__progress(&prog, "loading checkpoint", done, total, "B");
        const int64_t L = layer_of(specs[i].name);
        if (st != TS_OK || !layer_fn || L < 0) continue;
        if (i + 1 < ns && layer_of(specs[i + 1].name) == L) continue;
        st = layer_fn(ctx, m, L);
    }
    free(keep);
    free(plans);
    free(specs);
    if (st != TS_OK) {
        ts_model_free(m);
        return st;
    }
    m->ckpt = l->d; /* the records view its mappings from here on; ts_model_free closes it */
    l->d = NULL;
    m->load_stats.mapped = l->mapped;
    m->load_stats.converted = l->converted;
    m->load_stats.quantized = l->quantized;
    *out = m;
    return TS_OK;
}

void ts__hf_v4_report(const ts__hf_v4_loader *l, const char *who, const ts_model *m, size_t packed) {
    static const char *const lay[] = {"release", "transformers save_pretrained", "transformers modules"};
    const size_t released = m->load_stats.released;
    const size_t held = l->mapped + l->converted + l->quantized - released + packed +
                        m->cache_allocated + (m->ws ? m->ws->bytes : 0);
    /* the ratio leaves out shared memory: the EP buffers, which the held bytes do not count */
    ts__resident r;
    char res[224] = "";
    if (ts__resident_read(&r) && r.shmem)
        snprintf(res, sizeof res, "; resident %.1f MB (VmRSS), %.1f MB of it shared memory (EP "
                 "buffers); the rest %.3fx the bytes held", r.rss / 1e6, r.shmem / 1e6,
                 (double)(r.rss - r.shmem) / (double)held);
    else if (r.rss)
        snprintf(res, sizeof res, "; resident %.1f MB (VmRSS): %.3fx the bytes held", r.rss / 1e6,
                 (double)r.rss / (double)held);
    /* the process's peak so far: the load's, when the load is the first big thing it does */
    if (r.hwm)
        snprintf(res + strlen(res), sizeof res - strlen(res), "; peak %.1f MB (VmHWM)", r.hwm / 1e6);
    fprintf(stderr, "tilestack: %s%s (%s layout, %s): %.1f MB mapped from the safetensors, %.1f MB "
            "converted, %.1f MB quantised at load, %.1f MB packed for the kernels, %.1f MB of "
            "records released after packing; %.1f MB held with the caches and workspace%s\n",
            who, l->dir, lay[l->layout], l->info.quantized ? "FP8 + FP4" : "unquantised",
            l->mapped / 1e6, l->converted / 1e6, l->quantized / 1e6, packed / 1e6, released / 1e6,
            held / 1e6, res);
}

/* ts_model_load_dir's layer_fn: the layer packed, then (unless *keep) its packed records'
 * sources released. */
static ts_status bind_loaded_layer(void *keep, ts_model *m, int64_t L) {
    TS__RETURN_IF_ERROR(ts__model_bind_layer(m, L));
    if (!*(const bool *)keep) ts__model_release_packed(m);
    return TS_OK;
}

static ts_status load_dir(const char *dir, int64_t max_batch, bool keep, ts_model **out) {
    if (!dir) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_load_dir: dir is NULL");
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_load_dir: out is NULL");
    *out = NULL;
    if (max_batch < 1 || max_batch > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_load_dir: max_batch = %lld is outside "
                        "[1, 2^20]", (long long)max_batch);
    if (ts__v3_dir_is_v3(dir)) return ts__v3_load_dir(dir, max_batch, keep, out); /* hf_load_v3.c */
    loader *l = NULL;
    TS__RETURN_IF_ERROR(ts__hf_v4_open(dir, &l));
    ts_model *m = NULL;
    ts_status st = ts__hf_v4_bind(l, max_batch, 0, l->cfg.n_routed_experts, bind_loaded_layer,
                                  &keep, &m);
    if (st == TS_OK) st = ts__model_create_from_records(m);
    if (st == TS_OK) {
        m->load_stats.packed = ts__model_packed_bytes(m);
        if (!keep) ts__model_release_packed(m);
        ts__hf_v4_report(l, "", m, m->load_stats.packed);
    }
    else ts_model_free(m);
    ts__hf_v4_close(l);
    if (st == TS_OK) *out = m;
    return st;
}

ts_status ts_model_load_dir(const char *dir, int64_t max_batch, ts_model **out) {
    return load_dir(dir, max_batch, false, out);
}

ts_status ts_model_load_dir_keep(const char *dir, int64_t max_batch, ts_model **out) {
    return load_dir(dir, max_batch, true, out);
}

ts_status ts__hf_v4_plan(const char *dir, ts__hf_v4_plan_fn fn, void *ctx, ts_model_config *cfg) {
    if (!dir) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_plan_dir: dir is NULL");
    loader *l = NULL;
    TS__RETURN_IF_ERROR(ts__hf_v4_open(dir, &l));
    ts__wspec *specs = NULL;
    int64_t ns = 0, nrecs = 0;
    ts__mtensor *recs = NULL;
    plan *plans = NULL;
    bool *keep = NULL;
    ts_status st = ts__model_weight_specs(&l->cfg, &specs, &ns);
    if (st == TS_OK) {
        recs = calloc((size_t)(2 * ns), sizeof *recs);
        plans = calloc((size_t)ns, sizeof *plans);
        keep = calloc((size_t)ns, sizeof *keep);
        if (!recs || !plans || !keep)
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_plan_dir: %lld tensors", (long long)ns);
    }
    if (st == TS_OK) st = pass1(l, specs, ns, 0, l->cfg.n_routed_experts, recs, &nrecs, plans, keep);
    if (st == TS_OK) *cfg = l->cfg;
    /* what pass 2 (fill_spec / fill_rec) would do with each record, by the same rules */
    for (int64_t i = 0, r = 0; st == TS_OK && i < ns; i++) {
        const ts__wspec *sp = &specs[i];
        const int nr = sp->kind == TS__W_FP8 || sp->kind == TS__W_FP4 ? 2 : 1;
        ts__hf_plan_item it;
        memset(&it, 0, sizeof it);
        it.spec = sp;
        it.cfg = &l->cfg;
        for (int k = 0; k < nr; k++) {
            const src_ref *sr = &plans[i].rec[k];
            const ts__mtensor *rec = &recs[r + k];
            if (plans[i].rec[0].how == C_QUANT) it.quantized += rec->nbytes;
            else if (is_view(sr, rec)) it.mapped += rec->nbytes;
            else it.converted += rec->nbytes;
            if (rec->packed_src) it.released += rec->nbytes; /* ts__model_release_packed */
        }
        it.packed = ts__model_spec_packed_bytes(&l->cfg, sp);
        r += nr;
        st = fn(ctx, &it);
    }
    free(keep);
    free(recs);
    free(plans);
    free(specs);
    ts__hf_v4_close(l);
    return st;
}
