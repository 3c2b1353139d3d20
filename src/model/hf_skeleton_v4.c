/* A checkpoint skeleton (docs/models.md "Memory per rank"): config.json as given plus one
 * model.safetensors whose header names every tensor the loader expects for that config (names
 * from hf_names_v4.c, release layout; dtypes and shapes as ts_model_export_hf writes a quantised
 * checkpoint) and whose data section is a hole (ftruncate: a sparse file, no disk). What
 * ts_model_plan_dir needs to plan a model whose weights are not on this machine. */
#include "hf_v4.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct sk_entry { char name[208]; const char *dtype; size_t esize; int ndim; int64_t shape[2]; } sk_entry;

static int by_width(const void *a, const void *b) {
    const sk_entry *x = a, *y = b;
    return x->esize != y->esize ? (x->esize > y->esize ? -1 : 1) : 0;
}

ts_status ts__hf_v4_write_skeleton(const char *config_path, const char *dir) {
    static const char fn[] = "hf skeleton";
    FILE *f = fopen(config_path, "rb");
    if (!f) return ts__fail(TS_ERR_IO, "%s: %s: %s", fn, config_path, strerror(errno));
    char *text = malloc(1 << 20);
    const size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    text[len] = 0;
    ts_model_config cfg;
    ts__hf_v4_info info;
    ts_status st = ts__hf_v4_parse_config(text, len, config_path, "skeleton", &cfg, &info);
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    sk_entry *e = NULL;
    int64_t ne = 0;
    if (st == TS_OK) st = ts__model_weight_specs(&cfg, &specs, &ns);
    if (st == TS_OK && !(e = calloc((size_t)(2 * ns), sizeof *e))) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        ts__mtensor rec[2];
        const int nr = ts__model_spec_records(&specs[i], rec);
        ts__hf_src src;
        st = ts__hf_v4_source(&specs[i], &cfg, TS_HF_LAYOUT_RELEASE, info.tied, &src);
        if (st != TS_OK || (info.tied && !strcmp(specs[i].name, "head"))) continue;
        for (int k = 0; k < nr; k++) {
            sk_entry *x = &e[ne++];
            snprintf(x->name, sizeof x->name, "%s", k ? src.scale : src.name);
            x->ndim = rec[k].ndim;
            x->shape[0] = rec[k].shape[0];
            x->shape[1] = rec[k].shape[1];
            /* as fill_entry in hf_export_v4.c writes a quantised checkpoint */
            if (k) x->dtype = "F8_E8M0", x->esize = 1;
            else if (rec[k].dtype == TS_E4M3) x->dtype = "F8_E4M3", x->esize = 1;
            else if (rec[k].dtype == TS_U8) x->dtype = "I8", x->esize = 1;
            else if (rec[k].dtype == TS_I32) x->dtype = "I64", x->esize = 8;
            else if (rec[k].dtype == TS_BF16) x->dtype = "BF16", x->esize = 2;
            else x->dtype = "F32", x->esize = 4;
        }
    }
    free(specs);
    if (st == TS_OK && !info.quantized)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s has no quantization_config (the skeleton "
                      "holds FP8 / FP4 tensors)", fn, config_path);
    if (st != TS_OK) {
        free(e);
        free(text);
        return st;
    }
    qsort(e, (size_t)ne, sizeof *e, by_width); /* every tensor aligned for its element size */
    size_t cap = (size_t)ne * 300 + 64, k = 0;
    char *h = malloc(cap);
    uint64_t off = 0;
    if (h) k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int64_t i = 0; h && i < ne; i++) {
        const uint64_t n = (uint64_t)e[i].shape[0] * (uint64_t)(e[i].ndim == 2 ? e[i].shape[1] : 1) * e[i].esize;
        if (e[i].ndim == 2)
            k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                  e[i].name, e[i].dtype, (long long)e[i].shape[0], (long long)e[i].shape[1],
                                  (unsigned long long)off, (unsigned long long)(off + n));
        else
            k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                  e[i].name, e[i].dtype, (long long)e[i].shape[0],
                                  (unsigned long long)off, (unsigned long long)(off + n));
        off += n;
    }
    free(e);
    if (!h) {
        free(text);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    }
    k += (size_t)snprintf(h + k, cap - k, "}");
    while (k % 8) h[k++] = ' ';
    char path[4200];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) st = ts__fail(TS_ERR_IO, "%s: %s: %s", fn, dir, strerror(errno));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *c = st == TS_OK ? fopen(path, "wb") : NULL;
    if (st == TS_OK && (!c || fwrite(text, 1, len, c) != len)) st = ts__fail(TS_ERR_IO, "%s: %s", fn, path);
    if (c && fclose(c) && st == TS_OK) st = ts__fail(TS_ERR_IO, "%s: %s", fn, path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = st == TS_OK ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (st == TS_OK && fd < 0) st = ts__fail(TS_ERR_IO, "%s: %s: %s", fn, path, strerror(errno));
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)k >> (8 * i));
    if (st == TS_OK && (write(fd, len8, 8) != 8 || write(fd, h, k) != (ssize_t)k ||
                        ftruncate(fd, (off_t)(8 + k + off)) != 0)) /* the data: a hole */
        st = ts__fail(TS_ERR_IO, "%s: writing %s: %s", fn, path, strerror(errno));
    if (fd >= 0) close(fd);
    free(h);
    free(text);
    return st;
}
