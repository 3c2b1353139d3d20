/* Seeded PRNG shared bit-for-bit with tests/gen/ts_prng.py, so golden inputs are regenerated
 * in C instead of committed. splitmix64. */
#ifndef TS_PRNG_H
#define TS_PRNG_H

#include <stdint.h>
#include <string.h>

typedef struct ts_prng { uint64_t s; } ts_prng;

static inline ts_prng ts_prng_seed(uint64_t seed) { ts_prng p = {seed}; return p; }

static inline uint64_t ts_prng_next(ts_prng *p) {
    uint64_t z = (p->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint32_t ts_prng_u32(ts_prng *p) { return (uint32_t)(ts_prng_next(p) >> 32); }

/* Uniform in [-1, 1): top 24 bits, exact in f32. */
static inline float ts_prng_uniform(ts_prng *p) {
    return (float)((int32_t)(ts_prng_u32(p) >> 8) - (1 << 23)) * (1.0f / (float)(1 << 23));
}

/* Arbitrary f32 bit pattern (all classes: subnormal, inf, NaN, ...). */
static inline float ts_prng_bits_f32(ts_prng *p) {
    uint32_t u = ts_prng_u32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* FNV-1a 64 over bytes: the hash stored in golden files for large outputs. */
static inline uint64_t ts_fnv1a64(const void *data, size_t n) {
    const unsigned char *b = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
    return h;
}

#endif
