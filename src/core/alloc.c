/* 64-byte aligned allocation (one cache line, one AVX-512 vector). Large blocks are aligned
 * to 2 MiB and offered to transparent huge pages: packed weights and bench buffers are
 * streamed, and 4 KiB pages would make TLB misses part of what the kernels measure. */
#include "core/internal.h"

#include <stdint.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define TS__ALIGN 64
#define TS__HUGE_PAGE ((size_t)2 << 20)
#define TS__HUGE_MIN ((size_t)8 << 20)

void *ts__aligned_alloc(size_t bytes) {
    if (bytes == 0) bytes = TS__ALIGN; /* a non-NULL result always means success */
    if (bytes > SIZE_MAX - TS__HUGE_PAGE) return NULL;
    size_t align = bytes >= TS__HUGE_MIN ? TS__HUGE_PAGE : TS__ALIGN;
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, rounded) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == TS__HUGE_PAGE) (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint only */
#endif
    return p;
}

void ts__aligned_free(void *p) { free(p); }
