/* safetensors reader (safetensors.h): header read and checked with pread before anything is
 * mapped, then the data section mapped read-only, so resident memory is what the caller
 * touches and a hostile header cannot make us allocate or read beyond its capped size. */
#include "model/safetensors.h"
#include "core/file_read.h"
#include "core/internal.h"
#include "core/text_escape.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; ts_dtype dtype; } k_dtypes[] = {
    {"BOOL", TS_BOOL}, {"I8", TS_I8},   {"I16", TS_I16}, {"I32", TS_I32},
    {"I64", TS_I64},   {"U8", TS_U8},   {"F16", TS_F16}, {"BF16", TS_BF16},
    {"F32", TS_F32},   {"F64", TS_F64}, {"F8_E4M3", TS_E4M3}, {"F8_E5M2", TS_E5M2},
    {"F8_E8M0", TS_UE8M0}};

const char *ts__st_dtype_name(ts_dtype t) {
    for (size_t k = 0; k < sizeof k_dtypes / sizeof *k_dtypes; k++)
        if (k_dtypes[k].dtype == t) return k_dtypes[k].name;
    return "?";
}

static ts_status bad(const char *path, const char *tensor, const char *msg) {
    char esc[TS__ESC_CAP];
    if (tensor)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: tensor '%s': %s", path,
                        ts__text_escape_str(tensor, esc, sizeof esc), msg);
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s", path, msg);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ts__st_tensor *)a)->name, ((const ts__st_tensor *)b)->name);
}

static int by_begin(const void *a, const void *b) {
    const ts__st_tensor *x = *(const ts__st_tensor *const *)a, *y = *(const ts__st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static ts_status parse_entry(const char *path, const char *name, json_t *e, ts__st_tensor *t,
                             uint64_t data_len) {
    if (!json_is_object(e)) return bad(path, name, "the entry is not an object");
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    if (!dt) return bad(path, name, "no dtype");
    size_t k = 0;
    while (k < sizeof k_dtypes / sizeof *k_dtypes && strcmp(dt, k_dtypes[k].name)) k++;
    if (k == sizeof k_dtypes / sizeof *k_dtypes)
    {
        char en[TS__ESC_CAP], ed[TS__ESC_CAP];
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: tensor '%s': dtype \"%s\" is not one "
                        "tilestack reads", path, ts__text_escape_str(name, en, sizeof en),
                        ts__text_escape_str(dt, ed, sizeof ed));
    }
    t->dtype = k_dtypes[k].dtype;
    json_t *shape = json_object_get(e, "shape"), *offs = json_object_get(e, "data_offsets");
    if (!json_is_array(shape) || json_array_size(shape) > TS__ST_MAX_DIMS)
        return bad(path, name, "the shape is not an array of at most 8 dims");
    uint64_t elems = 1;
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        const json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < 0 || x > INT64_C(1) << 48)
            return bad(path, name, "a dim is not an integer in [0, 2^48]");
        t->shape[d] = x;
        if (x && elems > UINT64_MAX / (uint64_t)x) return bad(path, name, "the shape overflows");
        elems *= (uint64_t)x;
    }
    const uint64_t esz = ts_dtype_size(t->dtype);
    if (elems > UINT64_MAX / esz) return bad(path, name, "the shape overflows");
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
        return bad(path, name, "data_offsets is not [begin, end]");
    const json_int_t b = json_integer_value(json_array_get(offs, 0)),
                     en = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || en < b || (uint64_t)en > data_len)
        return bad(path, name, "data_offsets lie outside the data section");
    if ((uint64_t)(en - b) != elems * esz)
        return bad(path, name, "data_offsets do not span dtype size x shape bytes");
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    return TS_OK;
}

/* Every byte of the data section belongs to exactly one tensor (the format forbids holes). */
static ts_status check_coverage(const char *path, ts__st_tensor *t, size_t n, uint64_t data_len) {
    ts__st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: tensor list", path);
    for (size_t i = 0; i < n; i++) order[i] = &t[i];
    qsort(order, n, sizeof *order, by_begin);
    uint64_t at = 0;
    ts_status st = TS_OK;
    for (size_t i = 0; i < n && st == TS_OK; i++) {
        if (order[i]->begin < at) st = bad(path, order[i]->name, "its bytes overlap another tensor's");
        else if (order[i]->begin > at) st = bad(path, order[i]->name, "a gap of unowned bytes lies before it");
        at = order[i]->end > at ? order[i]->end : at;
    }
    if (st == TS_OK && at != data_len)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %llu data bytes, the tensors own %llu",
                      path, (unsigned long long)data_len, (unsigned long long)at);
    free(order);
    return st;
}

static ts_status parse_header(ts__st_file *f, const char *hdr, size_t len, uint64_t data_len) {
    json_error_t err;
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(root)) {
        json_decref(root);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the header is not a JSON object (%.80s at "
                        "byte %d)", f->path, root ? "not an object" : err.text, err.position);
    }
    size_t names_len = 0, n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        names_len += strlen(key) + 1;
        n++;
    }
    ts_status st = TS_OK;
    f->t = calloc(n ? n : 1, sizeof *f->t);
    f->names = malloc(names_len + 1);
    if (!f->t || !f->names) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %zu tensors", f->path, n);
    json_t *meta = json_object_get(root, "__metadata__");
    if (st == TS_OK && meta) {
        const char *mk;
        json_t *mv;
        if (!json_is_object(meta)) st = bad(f->path, NULL, "__metadata__ is not an object");
        json_object_foreach(meta, mk, mv) if (st == TS_OK && !json_is_string(mv))
            st = bad(f->path, NULL, "a __metadata__ value is not a string");
    }
    char *np = f->names;
    json_object_foreach(root, key, v) {
        if (st != TS_OK) break;
        if (!strcmp(key, "__metadata__")) continue;
        const size_t kl = strlen(key);
        if (!kl) {
            st = bad(f->path, NULL, "a tensor has an empty name");
            break;
        }
        memcpy(np, key, kl + 1);
        ts__st_tensor *t = &f->t[f->n++];
        t->name = np;
        np += kl + 1;
        st = parse_entry(f->path, t->name, v, t, data_len);
    }
    json_decref(root);
    if (st == TS_OK) st = check_coverage(f->path, f->t, f->n, data_len);
    if (st == TS_OK) qsort(f->t, f->n, sizeof *f->t, by_name);
    return st;
}

ts_status ts__st_open(int dirfd, const char *name, const char *path, ts__st_file **out) {
    *out = NULL;
    ts__st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path ? path : name))) {
        free(f);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", path ? path : name);
    }
    int fd = -1;
    struct stat st;
    ts_status s = ts__open_regular(dirfd, name, f->path, false, &fd, &st);
    uint8_t lenb[8];
    uint64_t hlen = 0;
    if (s == TS_OK && (st.st_size < 8 || !ts__pread_all(fd, lenb, 8, 0)))
        s = bad(f->path, NULL, "shorter than the 8-byte header length");
    if (s == TS_OK) {
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
        if (hlen > (uint64_t)TS__ST_MAX_HEADER_BYTES)
            s = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: header length %llu exceeds the %lld-byte "
                         "limit", f->path, (unsigned long long)hlen,
                         (long long)TS__ST_MAX_HEADER_BYTES);
        else if (hlen > (uint64_t)st.st_size - 8)
            s = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: header length %llu runs past the end of "
                         "the %lld-byte file", f->path, (unsigned long long)hlen, (long long)st.st_size);
    }
    char *hdr = NULL;
    if (s == TS_OK && !(hdr = malloc(hlen + 1))) s = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: header", f->path);
    if (s == TS_OK && !ts__pread_all(fd, hdr, hlen, 8)) s = ts__fail(TS_ERR_IO, "%s: header read failed", f->path);
    const uint64_t data_off = 8 + hlen, data_len = s == TS_OK ? (uint64_t)st.st_size - data_off : 0;
    if (s == TS_OK) s = parse_header(f, hdr, hlen, data_len);
    free(hdr);
    if (s == TS_OK && st.st_size > 0) {
        /* the whole file is mapped (the data's offset need not be page-aligned); pages are
         * read only when touched */
        f->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            s = ts__fail(TS_ERR_IO, "%s: mmap failed (%s)", f->path, strerror(errno));
        } else {
            f->map_len = (size_t)st.st_size;
            for (size_t i = 0; i < f->n; i++) f->t[i].data = (const char *)f->map + data_off + f->t[i].begin;
        }
    }
    if (fd >= 0) close(fd);
    if (s != TS_OK) {
        ts__st_close(f);
        return s;
    }
    *out = f;
    return TS_OK;
}

void ts__st_close(ts__st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_len);
    free(f->t);
    free(f->names);
    free(f->path);
    free(f);
}

const ts__st_tensor *ts__st_find(const ts__st_file *f, const char *name) {
    if (!f || !name) return NULL;
    const ts__st_tensor key = {.name = name};
    return bsearch(&key, f->t, f->n, sizeof *f->t, by_name);
}
