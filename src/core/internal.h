/* Internal helpers shared by every module (not installed). Internal non-static symbols use
 * the ts__ prefix. */
#ifndef TILESTACK_INTERNAL_H
#define TILESTACK_INTERNAL_H

#include "tilestack/core.h"

#include <stdio.h>
#include <stdlib.h>

/* Record a failure message for ts_last_error() and return `code`. printf-style. */
ts_status ts__fail(ts_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define TS__RETURN_IF_ERROR(expr)            \
    do {                                     \
        ts_status ts__st_ = (expr);          \
        if (ts__st_ != TS_OK) return ts__st_; \
    } while (0)

/* Internal invariant: a bug if false. Always on. */
#define TS__ASSERT(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "tilestack: internal assertion failed: %s (%s:%d)\n", #cond,  \
                    __FILE__, __LINE__);                                                   \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static inline int64_t ts__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t ts__align(int64_t a, int64_t b) { return ts__ceil_div(a, b) * b; }
static inline int64_t ts__min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ts__max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- thread pool (src/core/threadpool.c) ----
 * Fork-join over the persistent pool with static partitioning: task t of T always gets the
 * same [begin,end) for the same n and T, so results never depend on scheduling. */
typedef void (*ts__range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Split [0,n) into at most ts_get_num_threads() contiguous chunks, each a multiple of `grain`
 * (except the last), and run fn on each; returns when all are done. Runs inline when one
 * chunk suffices or when called from inside a pool task. `tid` passed to fn is the chunk
 * index; a chunk may run on any thread (inline: all on the caller), so tasks must not wait
 * for one another. grain < 1 counts as 1. */
void ts__parallel_for(int64_t n, int64_t grain, ts__range_fn fn, void *ctx);

/* Run fn(ctx, tid, nthreads) for tid in [0, nthreads) on the pool. nthreads may exceed the
 * pool (several tids then run one after another on a thread): tasks must not wait for one
 * another. */
typedef void (*ts__task_fn)(void *ctx, int tid, int nthreads);
void ts__parallel_run(int nthreads, ts__task_fn fn, void *ctx);

/* Run fn(ctx, tid, nthreads) exactly once on every thread of the pool (sized for
 * ts_get_num_threads()), the caller as tid 0 and worker p as tid p; returns nthreads. For
 * per-thread state (the MXCSR flags in tests); waits for a pool busy with another caller's
 * job. From inside a pool task it runs nothing and returns -1. */
int ts__pool_on_each_thread(ts__task_fn fn, void *ctx);

/* Dynamic claiming: run fn on items [0, n) in ranges of `grab` consecutive items (the last may
 * be shorter), the threads claiming ranges from a shared counter, so a thread slowed by another
 * process leaves its remaining ranges to the others. Items must be independent (each writes its
 * own outputs) so results do not depend on who runs what; grab > 1 keeps per-range reuse of
 * neighbouring items. tid is the task index, for ts__scratch. */
void ts__parallel_items(int64_t n, int64_t grab, ts__range_fn fn, void *ctx);

/* Per-thread scratch (tid as given to a task; tid 0 for the caller). Grows on demand, is
 * 64-byte aligned, and is reused across calls: no allocation once warm. NULL if out of memory.
 * The arena belongs to the calling thread at its task nesting level (serial code, a task, a
 * nested task): call it from the task itself, never "one per tid" from serial code (aborts).
 * A call may move the arena (contents not kept) and invalidates the previous pointer from the
 * same thread and level; a driver's serial scratch survives its own tasks' scratch calls. */
void *ts__scratch(int tid, size_t bytes);

/* 64-byte aligned allocation. */
void *ts__aligned_alloc(size_t bytes);
void ts__aligned_free(void *p);

/* ---- dispatch (src/core/dispatch.c) ----
 * The ISA in use, resolved once from detection and TS_ISA. Modules keep their own small
 * kernel tables per ISA and pick one with this. */
ts_isa ts__active_isa(void);

/* The paths that run the AVX2 kernels: AVX2 itself, and AVX-512 wherever no AVX-512 kernel
 * exists yet (the avx512 path is only runnable where AVX2 + FMA + F16C are too). Modules test
 * this, never `== TS_ISA_AVX2`, so an AVX-512 machine never falls back to the generic C. */
static inline bool ts__isa_avx2_up(ts_isa i) { return i == TS_ISA_AVX2 || i == TS_ISA_AVX512; }

/* Whether this build has the path's kernels (compiled in), and whether it can run here
 * (compiled in, and the CPU and OS support it). */
bool ts__isa_compiled(ts_isa isa);
bool ts__isa_runnable(ts_isa isa);
/* Why `isa` cannot run here, e.g. "CPU lacks avx512bw" or "built without avx512 kernels",
 * written to buf (always terminated); returns false (buf "") when it can run. */
bool ts__isa_why_not(ts_isa isa, char *buf, size_t cap);
/* The path a TS_ISA value picks (NULL, "", "auto" or "best": the best path), and the warning
 * to print when the value is unknown or cannot run here (warn "" otherwise). What resolution
 * on first use does with getenv("TS_ISA"); exposed for tests. */
ts_isa ts__isa_from_env(const char *value, char *warn, size_t cap);

/* ---- cpu features (src/core/cpu_features.c) ----
 * What the raw cpuid bits and the OS's XCR0 say, before the OS-state masking of
 * ts_cpu_info (which clears has_avx512f when the OS does not save the ZMM state), so a
 * diagnostic can tell "CPU lacks avx512f" from "OS does not enable ZMM state". */
typedef struct ts__cpu_raw {
    bool osxsave, os_ymm, os_zmm; /* XCR0 bits 1-2 (XMM, YMM) and 5-7 (opmask, ZMM) */
    bool cpu_avx, cpu_avx2, cpu_avx512f;
} ts__cpu_raw;
const ts__cpu_raw *ts__get_cpu_raw(void);

/* ---- progress of long operations (src/core/progress.c) ----
 * A phase keeps one state (zero-initialised) and calls ts__progress as it goes; calls are
 * thinned to ~256 per phase and dropped when no handler is set. */
typedef struct ts__progress_state { double next; } ts__progress_state;
bool ts__progress_on(void);
void ts__progress(ts__progress_state *p, const char *phase, double done, double total,
                  const char *unit);

#endif
