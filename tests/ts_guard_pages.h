/* Guard-page arenas for "never read" tests: an arena is mmap'ed PROT_NONE and only the byte
 * ranges a test opens become readable, so a kernel that touches an unused cache row, a block
 * table tail or a padding column faults (SIGSEGV) instead of reading a poison value that a
 * later mask might discard. Page granularity: tests lay data out so that every byte that must
 * stay unread sits on a page no opened range touches (one row per page, rows end-aligned on
 * page boundaries, strides chosen so that each row's used prefix ends on a boundary). */
#ifndef TS_GUARD_PAGES_H
#define TS_GUARD_PAGES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct ts_guard {
    uint8_t *base;
    size_t bytes;
} ts_guard;

static inline size_t ts_guard_page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* An arena of at least `bytes` bytes plus one trailing guard page, all PROT_NONE. */
static inline ts_guard ts_guard_make(size_t bytes) {
    const size_t pg = ts_guard_page();
    ts_guard g;
    g.bytes = ((bytes + pg - 1) / pg + 1) * pg;
    void *p = mmap(NULL, g.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    g.base = p == MAP_FAILED ? NULL : (uint8_t *)p;
    return g;
}

/* Make the pages covering [off, off + len) readable and writable (0 on success). */
static inline int ts_guard_open(ts_guard *g, size_t off, size_t len) {
    if (!len) return 0;
    const size_t pg = ts_guard_page();
    size_t a = off / pg * pg, e = (off + len + pg - 1) / pg * pg;
    if (e > g->bytes) return -1;
    return mprotect(g->base + a, e - a, PROT_READ | PROT_WRITE);
}

static inline void ts_guard_free(ts_guard *g) {
    if (g->base) munmap(g->base, g->bytes);
    g->base = NULL;
}

/* Offset that puts the end of an object of `len` bytes starting at it on a page boundary
 * (the first byte past it is the start of the next page). */
static inline size_t ts_guard_end_aligned(size_t page_index, size_t len) {
    const size_t pg = ts_guard_page();
    size_t pages = (len + pg - 1) / pg;
    return (page_index + pages) * pg - len;
}

/* int32 rows [n0][n1][w] (src contiguous) of which row (i0, i1) uses its first cnt[i0] entries,
 * cnt in arithmetic progression over i0: rows are placed so that every used prefix ends on a
 * page boundary (i1 stride a whole number of pages, i0 stride cnt[1] - cnt[0] entries short of
 * one), only the prefixes are opened, so reading entry cnt[i0] or later faults. Returns the
 * element at [0][0][0]; *st0, *st1 get the strides in elements. */
static inline int32_t *ts_guard_i32_rows(ts_guard *g, const int32_t *src, int64_t n0, int64_t n1,
                                         int64_t w, const int32_t *cnt, int64_t *st0,
                                         int64_t *st1) {
    const int64_t pg = (int64_t)ts_guard_page(), per = pg / 4;
    const int64_t d = n0 > 1 ? cnt[1] - cnt[0] : 0;
    const int64_t m1 = (w * 4 + pg - 1) / pg + 1, m0 = n1 * m1 + 1;
    *st1 = m1 * per;
    *st0 = m0 * per - d;
    const size_t off = (size_t)(pg - 4 * (int64_t)cnt[0]);
    *g = ts_guard_make(off + (size_t)((n0 * *st0 + w) * 4));
    if (!g->base) return NULL;
    int32_t *base = (int32_t *)(g->base + off);
    for (int64_t i = 0; i < n0; i++) {
        if (cnt[i] != cnt[0] + i * d) return NULL; /* not a progression: no such layout */
        for (int64_t j = 0; j < n1; j++) {
            int32_t *row = base + i * *st0 + j * *st1;
            if (ts_guard_open(g, (size_t)((uint8_t *)row - g->base), (size_t)cnt[i] * 4)) return NULL; 
            for (int64_t k = 0; k < cnt[i]; k++) row[k] = src[(i * n1 + j) * w + k];
        }
    }
    return base;
}

#endif
