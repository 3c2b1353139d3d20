/* Radix select ("cut to exactly k") and radix sort on candidate entries. */
#include "select/topk_internal.h"

#include <stdbool.h>
#include <string.h>

/* 8-bit digits: a 256-bucket histogram is cleared and searched in a few dozen cycles, which
 * matters more than the pass count for buffers of a few thousand entries. */
#define DIGIT 8

static void insertion_desc(uint64_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        uint64_t x = a[i];
        int64_t j = i;
        while (j > 0 && a[j - 1] < x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* The digit below [shift, shift + w): key digits first, then the index digits under ib (the
 * ~index bits at and above ib are all ones, so they never need a pass). */
static inline int next_digit(int shift, int ib, int *nw) {
    int top = shift > 32 ? shift : (shift < ib ? shift : ib);
    int lo = shift > 32 ? 32 : 0;
    *nw = top - lo < DIGIT ? top - lo : DIGIT;
    return top - *nw;
}

/* Histogram of digit (x >> shift) & mask into h (mask + 1 buckets, cleared here). Four
 * sub-histograms: candidates crowd into few buckets, and one histogram would serialise on
 * store-to-load forwarding of the same counter. */
static void hist4(const uint64_t *src, int64_t m, int shift, uint32_t mask, uint32_t *h) {
    uint32_t h4[4][1u << DIGIT];
    memset(h4, 0, sizeof h4);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        h4[0][(src[i] >> shift) & mask]++;
        h4[1][(src[i + 1] >> shift) & mask]++;
        h4[2][(src[i + 2] >> shift) & mask]++;
        h4[3][(src[i + 3] >> shift) & mask]++;
    }
    for (; i < m; i++) h4[0][(src[i] >> shift) & mask]++;
    for (uint32_t d = 0; d <= mask; d++) h[d] = h4[0][d] + h4[1][d] + h4[2][d] + h4[3][d];
}

static uint64_t find_pivot(const uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib) {
    uint32_t h[1u << DIGIT];
    const uint64_t *src = a;
    int64_t m = n, need = k;
    int w = bits < DIGIT ? bits : DIGIT, shift = bits - w;
    uint32_t mask = (1u << w) - 1;
    uint64_t pivot = 0;
    hist4(src, m, shift, mask, h);
    for (;;) {
        int64_t b = mask, above = 0;
        while (above + h[b] < need) above += h[b--];
        need -= above;
        /* Taking the whole bucket ends the search: the pivot is its smallest entry. Entries are
         * unique, so at shift 0 the bucket holds exactly one. */
        if (need == (int64_t)h[b] || shift == 0) {
            uint64_t mn = UINT64_MAX;
            for (int64_t i = 0; i < m; i++) {
                uint64_t x = src[i];
                if (((x >> shift) & mask) == (uint64_t)b && x < mn) mn = x;
            }
            pivot = mn;
            break;
        }
        int nw;
        const int nshift = next_digit(shift, ib, &nw);
        const uint32_t nmask = (1u << nw) - 1;
        if ((int64_t)h[b] != m) { /* not the whole set (e.g. the all-ones top digits of ~index) */
            /* Gather the bucket, branch-free, then histogram it: a histogram fused into the
             * gather pass (+= hit for every entry) serialised on its counters (measured: half
             * of a 65536-value row's time). In place once src is tmp (j <= i). */
            int64_t j = 0;
            for (int64_t i = 0; i < m; i++) {
                uint64_t x = src[i];
                tmp[j] = x;
                j += ((x >> shift) & mask) == (uint64_t)b;
            }
            src = tmp;
            m = j;
        }
        if (m <= 32) { /* a short bucket: sort it */
            if (src != tmp) memcpy(tmp, src, (size_t)m * sizeof *tmp);
            insertion_desc(tmp, m);
            pivot = tmp[need - 1];
            break;
        }
        hist4(src, m, nshift, nmask, h);
        shift = nshift;
        mask = nmask;
    }
    return pivot;
}

uint64_t ts__topk_cut_pivot(const uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib) {
    return find_pivot(a, n, k, tmp, bits, ib);
}

uint64_t ts__topk_cut(uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib) {
    const uint64_t pivot = find_pivot(a, n, k, tmp, bits, ib);
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = a[i];
        a[j] = x;
        j += x >= pivot;
    }
    return pivot;
}

void ts__topk_sort_desc(uint64_t *a, uint64_t *tmp, int64_t n, int ib, int hi_bit) {
    if (n < 2) return;
    uint64_t *s = a, *d = tmp;
    for (int shift = 0; shift < hi_bit; shift += 8) {
        if (shift >= ib && shift < 32) shift = 32; /* all-ones ~index bits */
        if (shift >= hi_bit) break;
        const int w = (shift < 32 && ib - shift < 8) ? ib - shift : 8;
        const uint64_t m = (1u << w) - 1;
        int64_t h[256];
        memset(h, 0, sizeof h);
        for (int64_t i = 0; i < n; i++) h[255u - ((s[i] >> shift) & m)]++;
        if (h[255u - ((s[0] >> shift) & m)] == n) { shift += w - 8; continue; } /* one digit */
        int64_t sum = 0;
        for (int b = 0; b < 256; b++) {
            int64_t c = h[b];
            h[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) d[h[255u - ((s[i] >> shift) & m)]++] = s[i];
        uint64_t *t = s;
        s = d;
        d = t;
        shift += w - 8;
    }
    if (s != a) memcpy(a, s, (size_t)n * sizeof *a);
}
