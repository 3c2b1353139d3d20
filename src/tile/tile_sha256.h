/* SHA-256 (FIPS 180-4) for the tile JIT's cache keys and cache-entry checksums. Small and
 * self-contained: the library takes no crypto dependency for a content hash. */
#ifndef TS_TILE_SHA256_H
#define TS_TILE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts__sha256 {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} ts__sha256;

void ts__sha256_init(ts__sha256 *s);
void ts__sha256_update(ts__sha256 *s, const void *data, size_t n);
void ts__sha256_final(ts__sha256 *s, uint8_t digest[32]);
/* One-shot digest as 64 lowercase hex digits + NUL. */
void ts__sha256_hex(const void *data, size_t n, char hex[65]);
void ts__sha256_to_hex(const uint8_t digest[32], char hex[65]);

#endif
