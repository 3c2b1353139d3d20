/* Golden-record reader and inputs for test_tk_*.c (format: tests/gen/gen_tilekernels.py). */
#include "test_tk_common.h"

#include "ts_prng.h"
#include "tilestack/numerics.h"

#include <stdlib.h>
#include <string.h>

static bool take(tk_reader *r, void *dst, size_t n) {
    if (r->size - r->off < n) return false;
    if (dst) memcpy(dst, r->buf + r->off, n);
    r->off += n;
    return true;
}

bool tk_next(ts_test_ctx *t, tk_reader *r, tk_record *rec) {
    if (!r->buf || r->off >= r->size) return false;
    memset(rec, 0, sizeof *rec);
    uint8_t len = 0;
    bool ok = take(r, &len, 1) && len < sizeof rec->name && take(r, rec->name, len) && take(r, &rec->np, 4) &&
              rec->np <= 32 && take(r, rec->p, 8 * (size_t)rec->np) && take(r, &rec->na, 4) && rec->na <= 16;
    for (uint32_t i = 0; ok && i < rec->na; i++) {
        tk_array *a = &rec->a[i];
        ok = take(r, &a->kind, 1) && take(r, &a->nbytes, 8) && take(r, &a->checksum, 8) && take(r, &a->nstored, 8) &&
             a->nstored <= a->nbytes && a->nstored <= r->size - r->off;
        if (ok) {
            a->data = r->buf + r->off;
            if (a->kind == 0) {
                rec->owned[i] = malloc(a->nstored ? (size_t)a->nstored : 1);
                ok = rec->owned[i] != NULL;
                if (ok) memcpy(rec->owned[i], a->data, (size_t)a->nstored);
                a->data = (const uint8_t *)rec->owned[i];
            }
            r->off += (size_t)a->nstored;
        }
    }
    if (!ok) {
        tk_record_free(rec);
        ts_test_fail(t, __FILE__, __LINE__, "malformed golden record after offset %zu", r->off);
        r->off = r->size;
    }
    return ok;
}

void tk_record_free(tk_record *rec) {
    for (int i = 0; i < 16; i++) {
        free(rec->owned[i]);
        rec->owned[i] = NULL;
    }
}

uint64_t tk_checksum(const void *data, size_t n) {
    const uint8_t *b = (const uint8_t *)data;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t mix = (((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i >> 7)) | 1u;
        s += ((uint64_t)b[i] + 1) * mix;
    }
    return s;
}

bool tk_expect(ts_test_ctx *t, const tk_record *rec, uint32_t ai, const void *got, size_t nbytes, const char *what) {
    if (ai >= rec->na) {
        ts_test_fail(t, __FILE__, __LINE__, "%s: record %s has no array %u", what, rec->name, ai);
        return false;
    }
    const tk_array *a = &rec->a[ai];
    if (a->nbytes != nbytes) {
        ts_test_fail(t, __FILE__, __LINE__, "%s: %zu bytes, golden has %llu", what, nbytes, (unsigned long long)a->nbytes);
        return false;
    }
    const uint8_t *g = (const uint8_t *)got;
    for (uint64_t i = 0; i < a->nstored; i++) {
        if (g[i] != a->data[i]) {
            ts_test_fail(t, __FILE__, __LINE__, "%s (%s p0=%lld p1=%lld): byte %llu is 0x%02x, expected 0x%02x", what,
                         rec->name, (long long)rec->p[0], (long long)rec->p[1], (unsigned long long)i, g[i],
                         a->data[i]);
            return false;
        }
    }
    if (tk_checksum(got, nbytes) != a->checksum) {
        ts_test_fail(t, __FILE__, __LINE__, "%s (%s p0=%lld p1=%lld): checksum differs (past the stored %llu bytes)",
                     what, rec->name, (long long)rec->p[0], (long long)rec->p[1], (unsigned long long)a->nstored);
        return false;
    }
    return true;
}

void tk_bf16_input(uint64_t seed, size_t n, float scale, uint16_t *out) {
    ts_prng r = ts_prng_seed(seed);
    for (size_t i = 0; i < n; i++) out[i] = ts_f32_to_bf16(ts_prng_uniform(&r) * scale);
}

void tk_f32_input(uint64_t seed, size_t n, float scale, float *out) {
    ts_prng r = ts_prng_seed(seed);
    for (size_t i = 0; i < n; i++) out[i] = ts_prng_uniform(&r) * scale;
}

void tk_for_variants(void *ctx, tk_variant_fn fn, int nvariants) {
    const ts_isa saved_isa = ts_get_isa();
    const int saved_threads = ts_get_num_threads();
    /* every ISA path that runs here (the AOT variants: generic, avx2, and avx512's 16-lane
     * modules), the best one at 2 threads, then the others at 1; with nvariants >= 4 generic
     * at 2 threads too (nvariants < 2: the best path only) */
    int isas[TS_ISA_COUNT_];
    const int n = ts_test_isas(isas);
    int v = 0;
    ts_set_num_threads(2);
    fn(ctx, v++);
    for (int i = 0; nvariants >= 2 && i < n; i++) {
        if ((ts_isa)isas[i] == saved_isa || ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
        ts_set_num_threads(1);
        fn(ctx, v++);
    }
    if (nvariants >= 4 && ts_set_isa(TS_ISA_GENERIC) == TS_OK) {
        ts_set_num_threads(2);
        fn(ctx, v++);
    }
    ts_set_isa(saved_isa);
    ts_set_num_threads(saved_threads);
}
