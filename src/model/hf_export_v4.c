/* ts_model_export_hf: a model's records (docs/model.md §2) as a DeepSeek-V4 checkpoint
 * directory that ts_model_load_dir and transformers read: config.json, one safetensors file or
 * N shards with model.safetensors.index.json. Tests and generators make checkpoints with it.
 *
 * FP8 / FP4 codes are written as they are (F8_E4M3, FP4 as I8 [N, K/2]) with their scales as
 * F8_E8M0 bytes; f32 records stay F32 (DeepSeek's release stores norms, gate and compressor
 * weights as BF16, but tilestack's generated values are f32 and the round trip is exact);
 * tid2eid becomes I64 as in the release. `dequantize` writes FP8 / FP4 weights as the BF16 of
 * code x scale (exact, else refused) with no quantization_config: a "BF16-only" checkpoint.
 * The directory is written under a temporary name beside `dir` and renamed at the end, so a
 * failed export leaves nothing half written. A skeleton (ts__hf_v4_write_skeleton) is the same
 * writing with no data: every tensor a config implies, its data section a hole (a V3 / V3.2
 * config's tensors as DeepSeek's release stores them). */
#include "hf_v3.h"
#include "hf_v4.h"

#include "core/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const FN = "ts_model_export_hf";

typedef enum piece_kind { P_RAW, P_SCALE, P_I32_I64, P_DEQ } piece_kind;

typedef struct piece {
    const ts__mtensor *v, *s; /* the record (P_DEQ: values and scale) */
    piece_kind kind;
} piece;

typedef struct entry {
    char name[208]; /* as ts__hf_src.scale, the longer of its names */
    const char *dtype;
    int ndim;
    int64_t shape[3];
    uint64_t nbytes;
    piece *pieces;
    int64_t npieces;
    int shard;
    int64_t order; /* in the tensor list */
} entry;

typedef struct elist { entry *v; int64_t n, cap; } elist;

static entry *add_entry(elist *l) {
    if (l->n == l->cap) {
        const int64_t nc = l->cap ? 2 * l->cap : 256;
        entry *nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return NULL;
        l->v = nv;
        l->cap = nc;
    }
    entry *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void free_entries(elist *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->v[i].pieces);
    free(l->v);
}

static const ts__mtensor *rec_of(const ts_model *m, const char *name) { return ts__model_find(m, name); }

/* The stored dtype of a record of dtype d (scale: an FP8 / FP4 weight's f32 scale record) in a
 * quantised checkpoint, and its element size. */
static const char *release_dtype(ts_dtype d, bool scale, uint64_t *esize) {
    *esize = 1;
    if (scale) return "F8_E8M0";
    if (d == TS_E4M3) return "F8_E4M3";
    if (d == TS_U8) return "I8"; /* FP4 codes, low nibble first, as the release stores them */
    if (d == TS_I32) return *esize = 8, "I64";
    *esize = ts_dtype_size(d);
    return d == TS_BF16 ? "BF16" : "F32";
}

/* One spec's values (or, `scale`, its scale) as an entry of n pieces (experts > 0: the merged
 * experts of the module layout, npieces / experts pieces per expert). */
static ts_status fill_entry(entry *e, const char *name, const ts__wspec *sp, bool scale,
                            bool deq, int64_t experts, int64_t npieces, const ts__mtensor *const *v,
                            const ts__mtensor *const *s) {
    snprintf(e->name, sizeof e->name, "%s", name);
    e->pieces = calloc((size_t)npieces, sizeof *e->pieces);
    if (!e->pieces) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %s", FN, name);
    e->npieces = npieces;
    const bool quant = sp->kind == TS__W_FP8 || sp->kind == TS__W_FP4;
    const ts__mtensor *r0 = scale ? s[0] : v[0];
    int64_t rows = r0->shape[0], cols = r0->ndim == 2 ? r0->shape[1] : 0;
    uint64_t esize;
    if (quant && deq) e->dtype = "BF16", esize = 2, rows = sp->shape[0], cols = sp->shape[1];
    else e->dtype = release_dtype(r0->dtype, scale, &esize);
    for (int64_t i = 0; i < npieces; i++) {
        piece *p = &e->pieces[i];
        p->v = scale ? s[i] : v[i];
        p->s = s ? s[i] : NULL;
        p->kind = quant && deq ? P_DEQ : scale ? P_SCALE : r0->dtype == TS_I32 ? P_I32_I64 : P_RAW;
        if (p->kind == P_DEQ) p->v = v[i];
    }
    if (experts > 0) { /* merged: [E, the pieces of one expert stacked, cols] */
        e->ndim = 3;
        e->shape[0] = experts;
        e->shape[1] = npieces / experts * rows;
        e->shape[2] = cols;
    } else {
        e->ndim = r0->ndim;
        e->shape[0] = rows;
        e->shape[1] = cols;
    }
    e->nbytes = (uint64_t)(npieces * rows) * (uint64_t)(cols ? cols : 1) * esize;
    return TS_OK;
}

/* The entries in spec order (for the module layout a layer's experts become two merged
 * tensors at the place of its first expert). */
static ts_status build_entries(const ts_model *m, ts_hf_layout lay, bool deq, elist *out) {
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    TS__RETURN_IF_ERROR(ts__model_weight_specs(&m->cfg, &specs, &ns));
    const int64_t E = m->cfg.n_routed_experts;
    const ts__mtensor **v = calloc((size_t)(2 * E), sizeof *v), **s = calloc((size_t)(2 * E), sizeof *s);
    ts_status st = v && s ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: expert list", FN);
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        const ts__wspec *sp = &specs[i];
        ts__hf_src src;
        st = ts__hf_v4_source(sp, &m->cfg, lay, false, &src);
        if (st != TS_OK) break;
        const bool quant = sp->kind == TS__W_FP8 || sp->kind == TS__W_FP4;
        char sname[128];
        snprintf(sname, sizeof sname, "%s.scale", sp->name);
        if (src.expert > 0 || (src.expert == 0 && src.row0 > 0)) continue; /* merged below */
        int64_t np = 1;
        if (src.expert == 0) {
            /* gate_up_proj: per expert w1 then w3; down_proj: w2 */
            long long L = 0;
            sscanf(sp->name, "%lld.", &L);
            const bool down = strstr(sp->name, ".w2") != NULL;
            np = down ? E : 2 * E;
            for (int64_t e = 0; e < E; e++)
                for (int h = 0; h < (down ? 1 : 2); h++) {
                    char nm[96], sn[112];
                    snprintf(nm, sizeof nm, "%lld.ffn.experts.%lld.%s", L, (long long)e,
                             down ? "w2" : h ? "w3" : "w1");
                    snprintf(sn, sizeof sn, "%s.scale", nm);
                    const int64_t k = down ? e : 2 * e + h;
                    v[k] = rec_of(m, nm);
                    s[k] = rec_of(m, sn);
                }
        } else {
            v[0] = rec_of(m, sp->name);
            s[0] = quant ? rec_of(m, sname) : NULL;
        }
        for (int64_t k = 0; k < np; k++)
            if (!v[k] || (quant && !s[k])) st = ts__fail(TS_ERR_INTERNAL, "%s: tensor %s missing", FN, sp->name);
        entry *e = st == TS_OK ? add_entry(out) : NULL;
        if (st == TS_OK && !e) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: entries", FN);
        const int64_t experts = src.expert == 0 ? E : 0;
        if (st == TS_OK) st = fill_entry(e, src.name, sp, false, deq, experts, np, v, quant ? s : NULL);
        if (st != TS_OK || !quant || deq) continue;
        entry *es = add_entry(out);
        if (!es) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: entries", FN);
            break;
        }
        st = fill_entry(es, src.scale, sp, true, false, experts, np, v, s);
    }
    free(v);
    free(s);
    free(specs);
    return st;
}

/* ---- bytes */

static bool put(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

static ts_status write_piece(FILE *f, const piece *p, const char *path) {
    const ts__mtensor *v = p->v;
    if (p->kind == P_RAW) {
        if (!put(f, v->data, v->nbytes)) goto io;
        return TS_OK;
    }
    if (p->kind == P_SCALE || p->kind == P_I32_I64) {
        const int64_t n = (int64_t)(v->nbytes / 4);
        uint8_t buf[4096];
        const int64_t per = p->kind == P_SCALE ? 1 : 8, chunk = (int64_t)sizeof buf / per;
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            const int64_t k = n - i0 < chunk ? n - i0 : chunk;
            for (int64_t i = 0; i < k; i++) {
                if (p->kind == P_SCALE) {
                    buf[i] = ts_f32_to_ue8m0(((const float *)v->data)[i0 + i]);
                } else {
                    const int64_t x = ((const int32_t *)v->data)[i0 + i];
                    memcpy(buf + 8 * i, &x, 8); /* little-endian hosts only (x86-64, Arm) */
                }
            }
            if (!put(f, buf, (size_t)(k * per))) goto io;
        }
        return TS_OK;
    }
    /* P_DEQ: code x scale in bf16, row by row */
    const bool fp8 = v->dtype == TS_E4M3;
    const int64_t rows = v->shape[0], cols = fp8 ? v->shape[1] : 2 * v->shape[1], scols = p->s->shape[1];
    uint16_t *row = malloc((size_t)cols * 2);
    if (!row) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %s", FN, path);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const uint8_t *q = (const uint8_t *)v->data;
            const float code = fp8 ? ts_e4m3_to_f32(q[r * cols + c])
                                   : ts_e2m1_to_f32((uint8_t)((q[r * (cols / 2) + c / 2] >> (4 * (c & 1))) & 0xF));
            const float sc = ((const float *)p->s->data)[fp8 ? (r / 128) * scols + c / 128 : r * scols + c / 32];
            const float x = code * sc;
            row[c] = ts_f32_to_bf16(x);
            if (ts_bf16_to_f32(row[c]) != x) {
                free(row);
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s [%lld, %lld] = %g has no exact bf16 "
                                "(dequantize: the scale is out of bf16's range)", FN, v->name,
                                (long long)r, (long long)c, x);
            }
        }
        if (!put(f, row, (size_t)cols * 2)) {
            free(row);
            goto io;
        }
    }
    free(row);
    return TS_OK;
io:
    return ts__fail(TS_ERR_IO, "%s: writing %s failed: %s", FN, path, strerror(errno));
}

/* Flushed to the disk before the directory is renamed into place. */
static ts_status close_file(FILE *f, const char *path, ts_status st) {
    if (st == TS_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = ts__fail(TS_ERR_IO, "%s: writing %s failed: %s", FN, path, strerror(errno));
    if (fclose(f) != 0 && st == TS_OK) st = ts__fail(TS_ERR_IO, "%s: closing %s failed: %s", FN, path, strerror(errno));
    return st;
}

static ts_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return ts__fail(TS_ERR_IO, "%s: cannot create %s: %s", FN, path, strerror(errno));
    const ts_status st = put(f, text, strlen(text)) ? TS_OK
                         : ts__fail(TS_ERR_IO, "%s: writing %s failed: %s", FN, path, strerror(errno));
    return close_file(f, path, st);
}

static size_t elem_size(const char *dtype) {
    return !strcmp(dtype, "I64") ? 8 : !strcmp(dtype, "F32") ? 4 : !strcmp(dtype, "BF16") ? 2 : 1;
}

/* Within a shard, wider elements first (as the reference writer orders them): every tensor then
 * starts at a multiple of its element size, so the loader can view it in place. Stable. */
static int by_width(const void *a, const void *b) {
    const entry *x = (const entry *)a, *y = (const entry *)b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    const size_t ex = elem_size(x->dtype), ey = elem_size(y->dtype);
    if (ex != ey) return ex > ey ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static ts_status write_shard(const elist *l, int shard, const char *path) {
    json_t *h = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!h || !meta || json_object_set_new(h, "__metadata__", meta)) {
        json_decref(h);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: header", FN);
    }
    uint64_t off = 0;
    bool ok = true;
    for (int64_t i = 0; i < l->n && ok; i++) {
        const entry *e = &l->v[i];
        if (e->shard != shard) continue;
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++) ok &= shape && !json_array_append_new(shape, json_integer(e->shape[d]));
        json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", e->dtype, "shape", shape, "data_offsets",
                              (json_int_t)off, (json_int_t)(off + e->nbytes));
        ok &= t && !json_object_set_new(h, e->name, t);
        off += e->nbytes;
    }
    char *text = ok ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(h);
    if (!text) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: header", FN);
    size_t hl = strlen(text);
    const size_t padded = (hl + 7) / 8 * 8; /* data 8-byte aligned, as the reference writer */
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(text);
        return ts__fail(TS_ERR_IO, "%s: cannot create %s: %s", FN, path, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    ts_status st = put(f, len8, 8) && put(f, text, hl) && put(f, "        ", padded - hl)
                       ? TS_OK : ts__fail(TS_ERR_IO, "%s: writing %s failed: %s", FN, path, strerror(errno));
    free(text);
    bool hole = false; /* a skeleton's entries have no pieces: their data is a hole */
    for (int64_t i = 0; i < l->n && st == TS_OK; i++) {
        hole |= l->v[i].shard == shard && l->v[i].npieces == 0 && l->v[i].nbytes > 0;
        for (int64_t k = 0; l->v[i].shard == shard && k < l->v[i].npieces && st == TS_OK; k++)
            st = write_piece(f, &l->v[i].pieces[k], path);
    }
    if (st == TS_OK && hole && (fflush(f) != 0 || ftruncate(fileno(f), (off_t)(8 + padded + off)) != 0))
        st = ts__fail(TS_ERR_IO, "%s: writing %s failed: %s", FN, path, strerror(errno));
    return close_file(f, path, st);
}

static void shard_name(int i, int n, char *buf, size_t cap) {
    if (n <= 1) snprintf(buf, cap, "model.safetensors");
    else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static ts_status write_index(const elist *l, int n, const char *path) {
    json_t *root = json_object(), *map = json_object();
    uint64_t total = 0;
    bool ok = root && map;
    for (int64_t i = 0; i < l->n && ok; i++) {
        char sn[64];
        shard_name(l->v[i].shard, n, sn, sizeof sn);
        ok = !json_object_set_new(map, l->v[i].name, json_string(sn));
        total += l->v[i].nbytes;
    }
    ok = ok && !json_object_set_new(root, "metadata", json_pack("{s:I}", "total_size", (json_int_t)total)) &&
         !json_object_set(root, "weight_map", map);
    char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(map);
    json_decref(root);
    if (!text) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: index", FN);
    const ts_status st = write_text(path, text);
    free(text);
    return st;
}

/* ---- the directory */

/* `dir` may not exist, or be an empty directory (rename replaces an empty one). */
static ts_status check_target(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) return errno == ENOENT ? TS_OK : ts__fail(TS_ERR_IO, "%s: %s: %s", FN, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode) || rmdir(dir) != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s exists (and is not an empty directory): "
                        "export into a new directory", FN, dir);
    return TS_OK; /* the empty directory is gone; the rename recreates it */
}

static void remove_tree(const char *tmp, int n) {
    char p[4400];
    const char *fixed[] = {"config.json", "model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, fixed[i]);
        unlink(p);
    }
    for (int i = 0; i < (n > 1 ? n : 1); i++) {
        char sn[64];
        shard_name(i, n, sn, sizeof sn);
        snprintf(p, sizeof p, "%s/%s", tmp, sn);
        unlink(p);
    }
    rmdir(tmp);
}

/* config.json (cfg) and the entries' n shards (+ the index when n > 1) into a temporary
 * directory beside `dir`, renamed into place once complete. */
static ts_status write_dir(const char *dir, const char *cfg, const elist *l, int n) {
    char tmp[4200], path[4400];
    const size_t dl = strlen(dir);
    size_t end = dl;
    while (end > 1 && dir[end - 1] == '/') end--;
    size_t b = end;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(tmp, sizeof tmp, "%.*s.%.*s.tmp-XXXXXX", (int)b, dir, (int)(end - b), dir + b);
    if (!mkdtemp(tmp)) return ts__fail(TS_ERR_IO, "%s: cannot create a directory beside %s: %s", FN, dir, strerror(errno));
    ts_status st = TS_OK;
    if (chmod(tmp, 0755) != 0) st = ts__fail(TS_ERR_IO, "%s: %s: %s", FN, tmp, strerror(errno));
    if (st == TS_OK) {
        snprintf(path, sizeof path, "%s/config.json", tmp);
        st = write_text(path, cfg);
    }
    for (int i = 0; st == TS_OK && i < n; i++) {
        char sn[64];
        shard_name(i, n, sn, sizeof sn);
        snprintf(path, sizeof path, "%s/%s", tmp, sn);
        st = write_shard(l, i, path);
    }
    if (st == TS_OK && n > 1) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmp);
        st = write_index(l, n, path);
    }
    if (st == TS_OK) st = check_target(dir);
    if (st == TS_OK && rename(tmp, dir) != 0) st = ts__fail(TS_ERR_IO, "%s: renaming %s to %s failed: %s", FN, tmp, dir, strerror(errno));
    if (st != TS_OK) remove_tree(tmp, n);
    return st;
}

ts_status ts_model_export_hf(const ts_model *m, const char *dir, const ts_hf_export_options *opts) {
    if (!m || !dir) return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", FN);
    if (m->v3) return ts__fail(TS_ERR_UNSUPPORTED, "%s: exports DeepSeek-V4 models only (this is V3)", FN);
    ts_hf_export_options o = {TS_HF_LAYOUT_RELEASE, 1, false};
    if (opts) o = *opts;
    if ((int)o.layout < 0 || o.layout > TS_HF_LAYOUT_HF_MODULES)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: layout = %d is unknown", FN, (int)o.layout);
    if (o.shards < 0 || o.shards > 4096)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: shards = %d is outside [0, 4096]", FN, (int)o.shards);
    if (m->local_experts_only)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: this expert-parallel model holds only its rank's "
                        "experts; export from a single-process model", FN);
    TS__RETURN_IF_ERROR(ts__model_check_records_held(m, FN));
    const size_t dl = strlen(dir);
    if (dl == 0 || dl > 4000) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: bad directory name", FN);
    char *cfg = NULL;
    TS__RETURN_IF_ERROR(ts__hf_v4_config_json(&m->cfg, !o.dequantize, &cfg));
    elist l = {0};
    ts_status st = build_entries(m, o.layout, o.dequantize, &l);
    const int n = o.shards <= 1 ? 1 : (int)(o.shards < l.n ? o.shards : l.n);
    /* shards of about equal size, tensors in order */
    uint64_t total = 0, acc = 0;
    for (int64_t i = 0; i < l.n; i++) total += l.v[i].nbytes;
    for (int64_t i = 0, s = 0; st == TS_OK && i < l.n; i++) {
        /* the next shard once this one has its share, or when only as many tensors are left
         * as shards still empty */
        if (s + 1 < n && (acc >= (total / (uint64_t)n) * (uint64_t)(s + 1) || l.n - i <= n - s - 1)) s++;
        l.v[i].shard = (int)s;
        acc += l.v[i].nbytes;
    }
    for (int64_t i = 0; i < l.n; i++) l.v[i].order = i;
    if (l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, by_width);
    if (st == TS_OK) st = write_dir(dir, cfg, &l, n);
    free_entries(&l);
    free(cfg);
    return st;
}

/* ---- a skeleton (docs/models.md "Memory per rank") */

static entry *skel_entry(elist *l, const char *name, const char *dtype, uint64_t esize, int ndim,
                         int64_t rows, int64_t cols) {
    entry *e = add_entry(l);
    if (!e) return NULL;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = dtype;
    e->ndim = ndim;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->nbytes = (uint64_t)rows * (uint64_t)(ndim == 2 ? cols : 1) * esize;
    e->order = l->n - 1;
    return e;
}

/* A V3 / V3.2 config's tensors (hf_names_v3.c) as DeepSeek's FP8 release stores them: the FP8
 * roles F8_E4M3 with F32 weight_scale_inv per 128x128, the router bias F32, the rest BF16; an
 * unquantised config: BF16 (the bias F32). */
static ts_status v3_skeleton_entries(const char *text, size_t len, const char *path, elist *l) {
    ts__v3_config c;
    TS__RETURN_IF_ERROR(ts__v3_parse_config(text, len, path, &c));
    ts__v3_tensor *tl = NULL;
    int64_t nt = 0;
    TS__RETURN_IF_ERROR(ts__v3_tensors(&c, &tl, &nt));
    ts_status st = TS_OK;
    for (int64_t i = 0; st == TS_OK && i < nt; i++) {
        const ts__v3_tensor *t = &tl[i];
        const bool fp8 = c.quantized && ts__v3_fp8_role(t->role), f32 = t->role == V3_GATE_BIAS;
        if (!skel_entry(l, t->name, fp8 ? "F8_E4M3" : f32 ? "F32" : "BF16", fp8 ? 1 : f32 ? 4 : 2,
                        t->ndim, t->shape[0], t->shape[1]))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "hf skeleton: %s", t->name);
        char sn[128];
        snprintf(sn, sizeof sn, "%s_scale_inv", t->name);
        if (st == TS_OK && fp8 &&
            !skel_entry(l, sn, "F32", 4, 2, ts__ceil_div(t->shape[0], 128), ts__ceil_div(t->shape[1], 128)))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "hf skeleton: %s", sn);
    }
    free(tl);
    return st;
}

ts_status ts__hf_v4_write_skeleton(const char *config_path, const char *dir) {
    static const char fn[] = "hf skeleton";
    if (!config_path || !dir) return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", fn);
    const size_t dl = strlen(dir);
    if (dl == 0 || dl > 4000) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: bad directory name", fn);
    char *text = NULL;
    size_t len = 0;
    TS__RETURN_IF_ERROR(ts__read_file_capped(AT_FDCWD, config_path, config_path, (size_t)1 << 20,
                                             true, &text, &len));
    elist l = {0};
    if (ts__v3_is_v3_config(text, len)) {
        ts_status st = v3_skeleton_entries(text, len, config_path, &l);
        if (st == TS_OK && l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, by_width);
        if (st == TS_OK) st = write_dir(dir, text, &l, 1);
        free_entries(&l);
        free(text);
        return st;
    }
    ts_model_config cfg;
    ts__hf_v4_info info;
    ts_status st = ts__hf_v4_parse_config(text, len, config_path, "skeleton", &cfg, &info);
    if (st == TS_OK && !info.quantized)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s has no quantization_config (the skeleton "
                      "holds FP8 / FP4 tensors)", fn, config_path);
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    if (st == TS_OK) st = ts__model_weight_specs(&cfg, &specs, &ns);
    /* every tensor the loader expects, release layout, as a quantised export stores it, with
     * no pieces: write_shard leaves the data a hole */
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        ts__mtensor rec[2];
        const int nr = ts__model_spec_records(&specs[i], rec);
        ts__hf_src src;
        st = ts__hf_v4_source(&specs[i], &cfg, TS_HF_LAYOUT_RELEASE, info.tied, &src);
        if (st != TS_OK || (info.tied && !strcmp(specs[i].name, "head"))) continue;
        for (int k = 0; st == TS_OK && k < nr; k++) {
            uint64_t esize;
            const char *dtype = release_dtype(rec[k].dtype, k == 1, &esize);
            if (!skel_entry(&l, k ? src.scale : src.name, dtype, esize, rec[k].ndim, rec[k].shape[0],
                            rec[k].shape[1]))
                st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
        }
    }
    free(specs);
    if (st == TS_OK && l.n) qsort(l.v, (size_t)l.n, sizeof *l.v, by_width);
    if (st == TS_OK) {
        /* config.json as given (NUL-terminated by the reader) */
        st = write_dir(dir, text, &l, 1);
    }
    free_entries(&l);
    free(text);
    return st;
}
