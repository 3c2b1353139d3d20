/* The weight file (docs/model.md §2 "File format"): safetensors-style, an 8-byte little-endian
 * header length, a JSON header naming every tensor's dtype, shape and data offsets (relative to
 * the data section), then the data. The loader checks everything against the tensor list of the
 * file's own config before it reads a byte of data, and every error names the tensor. */
#include "model_internal.h"

#include "core/atomic_file.h"
#include "core/text_escape.h"
#include "safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

ts_status ts__model_create_from_records(ts_model *m);

/* ---- save */

typedef struct sbuf { char *p; size_t len, cap; bool oom; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *np = (char *)realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

static void sb_json_string(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

ts_status ts_model_save_weights(const ts_model *m, const char *path) {
    static const char fn[] = "ts_model_save_weights";
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (!path) return ts__fail(TS_ERR_NULL_POINTER, "%s: path is NULL", fn);
    if (m->v3) /* its weights are not docs/model.md §2's */
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: a DeepSeek-V3 model has no tilestack weight file", fn);
    if (m->local_experts_only)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: this expert-parallel model holds only its rank's "
                        "experts; save from a single-process model (ts_model_create)", fn);
    TS__RETURN_IF_ERROR(ts__model_check_records_held(m, fn));
    char cfg[4096];
    TS__RETURN_IF_ERROR(ts_model_config_to_json(&m->cfg, cfg, sizeof cfg));
    sbuf h = {0};
    sb_printf(&h, "{\"__metadata__\": {\"format\": \"tilestack-dsv4\", \"config\": ");
    sb_json_string(&h, cfg);
    sb_printf(&h, "}");
    uint64_t off = 0;
    for (int64_t i = 0; i < m->nrecs; i++) {
        const ts__mtensor *t = &m->recs[i];
        sb_printf(&h, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld", t->name, ts__st_dtype_name(t->dtype),
                  (long long)t->shape[0]);
        if (t->ndim == 2) sb_printf(&h, ", %lld", (long long)t->shape[1]);
        sb_printf(&h, "], \"data_offsets\": [%llu, %llu]}", (unsigned long long)off,
                  (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    sb_printf(&h, "}");
    while (!h.oom && h.len % 8 != 0) sb_printf(&h, " "); /* data 8-byte aligned, as safetensors */
    if (h.oom) {
        free(h.p);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory (header)", fn);
    }
    /* through a temporary file renamed over `path` at the end: a write that fails half way
     * (disk full, ulimit -f) leaves the previous file as it was */
    ts__atomic_file af;
    ts_status st = ts__atomic_open(&af, path);
    if (st != TS_OK) {
        free(h.p);
        return st;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    bool ok = fwrite(len8, 1, 8, af.f) == 8 && fwrite(h.p, 1, h.len, af.f) == h.len;
    for (int64_t i = 0; ok && i < m->nrecs; i++)
        ok = fwrite(m->recs[i].data, 1, m->recs[i].nbytes, af.f) == m->recs[i].nbytes;
    free(h.p);
    if (!ok) {
        const int err = errno;
        ts__atomic_abort(&af);
        return ts__fail(TS_ERR_IO, "%s: writing %s failed: %s (the previous file, if any, is "
                        "unchanged)", fn, path, strerror(err));
    }
    st = ts__atomic_commit(&af);
    if (st != TS_OK) {
        char msg[768]; /* ts_last_error's buffer is rewritten by ts__fail */
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        return ts__fail(st, "%s: %s", fn, msg);
    }
    return TS_OK;
}

/* ---- load */

typedef struct span { uint64_t b, e; int64_t rec; } span;

static int span_cmp(const void *pa, const void *pb) {
    const span *a = (const span *)pa, *b = (const span *)pb;
    return a->b < b->b ? -1 : a->b > b->b ? 1 : (a->e < b->e ? -1 : a->e > b->e);
}

static ts_status bad(const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static ts_status bad(const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_load: %s: %s", path, msg);
}

/* Checks one header entry against the expected record; sets *b, *e. */
static ts_status check_entry(const char *path, const ts__json *hdr, const ts__mtensor *want,
                             uint64_t data_len, uint64_t *b, uint64_t *e) {
    const ts__json *t = ts__json_get(hdr, want->name);
    if (!t) return bad(path, "tensor %s is missing", want->name);
    if (t->kind != TS__JSON_OBJ) return bad(path, "tensor %s: entry is not an object", want->name);
    for (int64_t k = 0; k < t->n; k++)
        if (strcmp(t->keys[k], "dtype") && strcmp(t->keys[k], "shape") &&
            strcmp(t->keys[k], "data_offsets"))
            return bad(path, "tensor %s: unknown key \"%s\"", want->name,
                       ts__text_escape_str(t->keys[k], (char[TS__ESC_CAP]){0}, TS__ESC_CAP));
    const ts__json *dt = ts__json_get(t, "dtype"), *sh = ts__json_get(t, "shape"),
                   *of = ts__json_get(t, "data_offsets");
    if (!dt || dt->kind != TS__JSON_STR)
        return bad(path, "tensor %s: dtype missing or not a string", want->name);
    if (strcmp(dt->str, ts__st_dtype_name(want->dtype)) != 0)
        return bad(path, "tensor %s: dtype \"%s\", expected %s", want->name,
                   ts__text_escape_str(dt->str, (char[TS__ESC_CAP]){0}, TS__ESC_CAP),
                   ts__st_dtype_name(want->dtype));
    if (!sh || sh->kind != TS__JSON_ARR)
        return bad(path, "tensor %s: shape missing or not an array", want->name);
    bool shape_ok = sh->n == want->ndim;
    for (int64_t k = 0; shape_ok && k < sh->n; k++) {
        int64_t v;
        shape_ok = ts__json_int(&sh->items[k], &v) && v == want->shape[k];
    }
    if (!shape_ok) {
        char exp[64];
        if (want->ndim == 2)
            snprintf(exp, sizeof exp, "[%lld, %lld]", (long long)want->shape[0],
                     (long long)want->shape[1]);
        else snprintf(exp, sizeof exp, "[%lld]", (long long)want->shape[0]);
        return bad(path, "tensor %s: shape differs from the config's %s", want->name, exp);
    }
    uint64_t ob = 0, oe = 0;
    if (!of || of->kind != TS__JSON_ARR || of->n != 2 || !ts__json_u64(&of->items[0], &ob) ||
        !ts__json_u64(&of->items[1], &oe))
        return bad(path, "tensor %s: data_offsets must be [begin, end] integers", want->name);
    if (ob > oe || oe > data_len)
        return bad(path, "tensor %s: data_offsets [%llu, %llu] are outside the data (%llu bytes)",
                   want->name, (unsigned long long)ob, (unsigned long long)oe,
                   (unsigned long long)data_len);
    if (oe - ob != want->nbytes)
        return bad(path, "tensor %s: data_offsets span %llu bytes, expected %zu", want->name,
                   (unsigned long long)(oe - ob), want->nbytes);
    *b = ob;
    *e = oe;
    return TS_OK;
}

/* The header is read before anything else and capped: its length field is the first thing a
 * hostile file controls, and without a cap an 8-byte file could ask for 2^64 bytes. 64 MiB holds
 * the header of a 61-layer, 256-expert model (~95,000 entries of ~100 bytes) several times. */
#define TS__HEADER_CAP ((uint64_t)64 << 20)

/* Opens `path` as a regular file and gets its size: a directory, a FIFO or a device (whose
 * "size" is meaningless or unbounded) is refused by name. */
static ts_status open_weights(const char *path, FILE **out, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts__fail(TS_ERR_IO, "ts_model_load: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        const int err = errno;
        fclose(f);
        return ts__fail(TS_ERR_IO, "ts_model_load: cannot stat %s: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_load: %s is %s, not a weight file",
                        path, S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    }
    *out = f;
    *size = (uint64_t)sb.st_size;
    return TS_OK;
}

/* n bytes at file offset off; a short read (the file shrank, an I/O error) names the tensor. */
static ts_status read_at(FILE *f, const char *path, const char *what, uint64_t off, void *dst,
                         size_t n) {
    if (fseeko(f, (off_t)off, SEEK_SET) != 0)
        return ts__fail(TS_ERR_IO, "ts_model_load: %s: cannot seek to %s: %s", path, what,
                        strerror(errno));
    if (n && fread(dst, 1, n, f) != n)
        return ts__fail(TS_ERR_IO, "ts_model_load: %s: reading %s failed (%s)", path, what,
                        ferror(f) ? strerror(errno) : "the file ended early");
    return TS_OK;
}

ts_status ts_model_load(const char *path, int64_t max_batch, ts_model **out) {
    if (!path) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_load: path is NULL");
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_load: out is NULL");
    if (max_batch < 1 || max_batch > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_load: max_batch = %lld is outside "
                        "[1, 2^20]", (long long)max_batch);
    FILE *f = NULL;
    uint64_t size = 0;
    TS__RETURN_IF_ERROR(open_weights(path, &f, &size));
    char *htext = NULL;
    ts__json *hdr = NULL;
    ts__wspec *specs = NULL;
    ts_model *m = NULL;
    span *spans = NULL;
    ts_status st = TS_OK;
    uint64_t hlen = 0;
    if (size < 8) st = bad(path, "truncated: %llu bytes, no header length", (unsigned long long)size);
    if (st == TS_OK) {
        uint8_t len8[8];
        st = read_at(f, path, "the header length", 0, len8, 8);
        for (int i = 0; st == TS_OK && i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    }
    if (st == TS_OK && hlen > size - 8)
        st = bad(path, "truncated: header length %llu exceeds the %llu bytes after it",
                 (unsigned long long)hlen, (unsigned long long)(size - 8));
    if (st == TS_OK && hlen > TS__HEADER_CAP)
        st = bad(path, "header length %llu exceeds the %llu-byte cap on weight file headers "
                 "(the length field is probably corrupt)", (unsigned long long)hlen,
                 (unsigned long long)TS__HEADER_CAP);
    if (st == TS_OK) {
        htext = (char *)malloc((size_t)hlen + 1);
        if (!htext) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load: %s: out of memory "
                                  "(header, %llu bytes)", path, (unsigned long long)hlen);
        else st = read_at(f, path, "the header", 8, htext, (size_t)hlen);
    }
    if (st == TS_OK) {
        char what[600];
        snprintf(what, sizeof what, "ts_model_load: %s: header", path);
        st = ts__json_parse(htext, (size_t)hlen, what, &hdr);
    }
    free(htext);
    ts_model_config cfg;
    if (st == TS_OK && hdr->kind != TS__JSON_OBJ) st = bad(path, "header is not a JSON object");
    if (st == TS_OK) {
        const ts__json *md = ts__json_get(hdr, "__metadata__");
        const ts__json *fmt = ts__json_get(md, "format"), *cj = ts__json_get(md, "config");
        if (!md || md->kind != TS__JSON_OBJ) st = bad(path, "__metadata__ missing");
        else if (!fmt || fmt->kind != TS__JSON_STR || strcmp(fmt->str, "tilestack-dsv4") != 0)
            st = bad(path, "__metadata__.format is not \"tilestack-dsv4\"");
        else if (!cj || cj->kind != TS__JSON_STR) st = bad(path, "__metadata__.config missing");
        else {
            st = ts_model_config_parse_json(cj->str, &cfg);
            if (st != TS_OK) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", ts_last_error());
                st = bad(path, "__metadata__.config: %s", msg);
            }
        }
    }
    /* The config sizes the tensor list (up to 128 layers x 65536 experts: gigabytes of
     * bookkeeping); a header that cannot hold that many entries is refused before the list is
     * built, so a small file cannot make the loader allocate for a model it does not contain. */
    if (st == TS_OK) {
        const int64_t need = cfg.n_layers * cfg.n_routed_experts * 6; /* w1, w3, w2 + scales */
        if (need > hdr->n - 1)
            st = bad(path, "header lists %lld tensors, fewer than the %lld expert tensors alone of "
                     "its config (n_layers = %lld, n_routed_experts = %lld)",
                     (long long)(hdr->n - 1), (long long)need, (long long)cfg.n_layers,
                     (long long)cfg.n_routed_experts);
    }
    int64_t ns = 0;
    if (st == TS_OK) st = ts__model_weight_specs(&cfg, &specs, &ns);
    if (st == TS_OK) st = ts__model_alloc(&cfg, max_batch, &m);
    if (st == TS_OK) {
        m->recs = (ts__mtensor *)calloc((size_t)(2 * ns), sizeof *m->recs);
        spans = (span *)calloc((size_t)(2 * ns), sizeof *spans);
        if (!m->recs || !spans) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load: out of memory");
    }
    const uint64_t data_len = st == TS_OK ? size - 8 - hlen : 0;
    /* the header's tensors: exactly the config's list */
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        ts__mtensor *rec = &m->recs[m->nrecs];
        int nr = ts__model_spec_records(&specs[i], rec);
        for (int k = 0; st == TS_OK && k < nr; k++) {
            span *sp = &spans[m->nrecs + k];
            sp->rec = m->nrecs + k;
            st = check_entry(path, hdr, &rec[k], data_len, &sp->b, &sp->e);
        }
        m->nrecs += nr;
    }
    if (st == TS_OK && hdr->n - 1 != m->nrecs) {
        for (int64_t k = 0; k < hdr->n; k++)
            if (strcmp(hdr->keys[k], "__metadata__") && !ts__model_find(m, hdr->keys[k])) {
                char e[TS__ESC_CAP];
                st = bad(path, "tensor \"%s\" is not part of the config's model",
                         ts__text_escape_str(hdr->keys[k], e, sizeof e));
                break;
            }
        if (st == TS_OK) st = bad(path, "header lists %lld tensors, expected %lld",
                                  (long long)(hdr->n - 1), (long long)m->nrecs);
    }
    if (st == TS_OK) {
        qsort(spans, (size_t)m->nrecs, sizeof *spans, span_cmp);
        /* sorted by begin: a span overlaps an earlier one iff it begins before the furthest
         * end so far (every span is non-empty: check_entry wants the tensor's byte count) */
        int64_t far = 0;
        for (int64_t i = 1; st == TS_OK && i < m->nrecs; i++) {
            if (spans[i].b < spans[far].e)
                st = bad(path, "tensors %s and %s have overlapping data_offsets",
                         m->recs[spans[far].rec].name, m->recs[spans[i].rec].name);
            if (spans[i].e > spans[far].e) far = i;
        }
    }
    /* the file is exactly header + the data it describes: trailing bytes mean the header and
     * the data disagree (a wrong length field shifts every tensor), so they are not ignored */
    if (st == TS_OK) {
        uint64_t last = 0;
        for (int64_t i = 0; i < m->nrecs; i++) last = spans[i].e > last ? spans[i].e : last;
        if (last != data_len)
            st = bad(path, "the file is %llu bytes but its header describes %llu (8 + %llu header "
                     "+ %llu data): %llu bytes after the last tensor", (unsigned long long)size,
                     (unsigned long long)(8 + hlen + last), (unsigned long long)hlen,
                     (unsigned long long)last, (unsigned long long)(data_len - last));
    }
    /* only the bytes the header describes, in file order */
    for (int64_t i = 0; st == TS_OK && i < m->nrecs; i++) {
        ts__mtensor *r = &m->recs[spans[i].rec];
        r->data = ts__aligned_alloc(r->nbytes ? r->nbytes : 1);
        if (!r->data) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load: %s: out of memory (%s, "
                                    "%zu bytes)", path, r->name, r->nbytes);
        else st = read_at(f, path, r->name, 8 + hlen + spans[i].b, r->data, r->nbytes);
    }
    fclose(f);
    /* the values: every index in range, every scale a power of two, every float finite */
    for (int64_t i = 0, r = 0; st == TS_OK && i < ns; i++) {
        st = ts__model_check_values(path, &cfg, &specs[i], &m->recs[r]);
        r += specs[i].kind == TS__W_FP8 || specs[i].kind == TS__W_FP4 ? 2 : 1;
    }
    free(spans);
    free(specs);
    if (hdr) {
        ts__json_free(hdr);
        free(hdr);
    }
    if (st == TS_OK) st = ts__model_create_from_records(m);
    if (st != TS_OK) {
        ts_model_free(m);
        return st;
    }
    *out = m;
    return TS_OK;
}
