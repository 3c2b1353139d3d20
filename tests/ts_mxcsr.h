/* MXCSR guard for tests (design.md, "no hot loop takes subnormal operands or produces subnormal
 * results"): the sticky flags DE (denormal operand, bit 1) and UE (underflow, bit 4) behave the
 * same on Intel and AMD, so a test clears them on every pool thread, runs an op and reads them
 * back from every thread. Only those two sticky bits are ever written: FTZ / DAZ, the rounding
 * mode, the masks and the other flags stay as the caller had them.
 *
 * Header-only so both test runners (tests/ and tests/ep/) can use it. On a CPU without MXCSR
 * ts_mxcsr_supported() is 0 and the tests skip. */
#ifndef TS_MXCSR_H
#define TS_MXCSR_H

#include "core/internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define TS_MXCSR_HAVE 1
#else
#define TS_MXCSR_HAVE 0
#endif

#define TS_MXCSR_DE 0x02u
#define TS_MXCSR_UE 0x10u
#define TS_MXCSR_GUARD (TS_MXCSR_DE | TS_MXCSR_UE)
/* exception masks of DE and UE (bits 8 and 11) */
#define TS_MXCSR_DM 0x100u
#define TS_MXCSR_UM 0x800u

static inline int ts_mxcsr_supported(void) { return TS_MXCSR_HAVE; }

static inline unsigned ts_mxcsr_get(void) {
#if TS_MXCSR_HAVE
    return _mm_getcsr();
#else
    return 0;
#endif
}

/* Clears DE and UE on the calling thread only. */
static inline void ts_mxcsr_clear_local(void) {
#if TS_MXCSR_HAVE
    _mm_setcsr(_mm_getcsr() & ~TS_MXCSR_GUARD);
#endif
}

/* Diagnosis aid (TS_MXCSR_TRAP=1): the clear also unmasks DE and UE, so the first instruction
 * that would set one raises SIGFPE there (run under gdb for the backtrace); the read masks them
 * again. Never on by default: it changes more than the sticky flags. */
static inline int ts_mxcsr_trap_mode(void) {
    const char *v = getenv("TS_MXCSR_TRAP");
    return v && *v && *v != '0';
}

typedef struct ts_mxcsr_state {
    atomic_uint flags; /* OR of DE|UE over the threads */
    atomic_uint threads_seen;
    int trap; /* unmask DE/UE on clear, mask them on read (TS_MXCSR_TRAP) */
} ts_mxcsr_state;

/* Scratch poisoning: every word of the arena a kernel's tasks get (level 1 on each pool
 * thread, level 0 on the caller) is set to the smallest f32 subnormal before the measured run,
 * so a kernel that computes on tile memory it never wrote (stale from an earlier op, harmless
 * for its results but a subnormal operand whenever the stale bits are one) is flagged every
 * time instead of now and then. */
#define TS_MXCSR_POISON_BYTES ((size_t)256 * 1024)
static inline void ts_mxcsr__poison(int tid) {
    uint32_t *p = (uint32_t *)ts__scratch(tid, TS_MXCSR_POISON_BYTES);
    if (!p) return;
    for (size_t i = 0; i < TS_MXCSR_POISON_BYTES / 4; i++) p[i] = 1u;
}

static void ts_mxcsr__clear_task(void *ctx, int tid, int nthreads) {
    (void)nthreads;
    ts_mxcsr_state *s = (ts_mxcsr_state *)ctx;
    ts_mxcsr__poison(tid);
    ts_mxcsr_clear_local();
#if TS_MXCSR_HAVE
    if (s->trap) _mm_setcsr(_mm_getcsr() & ~(TS_MXCSR_DM | TS_MXCSR_UM));
#endif
    atomic_fetch_add(&s->threads_seen, 1);
}

static void ts_mxcsr__read_task(void *ctx, int tid, int nthreads) {
    (void)tid;
    (void)nthreads;
    ts_mxcsr_state *s = (ts_mxcsr_state *)ctx;
#if TS_MXCSR_HAVE
    if (s->trap) _mm_setcsr(_mm_getcsr() | TS_MXCSR_DM | TS_MXCSR_UM);
#endif
    atomic_fetch_or(&s->flags, ts_mxcsr_get() & TS_MXCSR_GUARD);
    atomic_fetch_add(&s->threads_seen, 1);
}

/* Clears DE/UE on every pool thread (the caller included), after poisoning their scratch
 * arenas; returns the number of threads. */
static inline int ts_mxcsr_clear_all(void) {
    ts_mxcsr__poison(0); /* the caller's serial (driver) arena */
    ts_mxcsr_state s;
    atomic_init(&s.flags, 0);
    atomic_init(&s.threads_seen, 0);
    s.trap = ts_mxcsr_trap_mode();
    int n = ts__pool_on_each_thread(ts_mxcsr__clear_task, &s);
    if (n < 1) ts_mxcsr_clear_local();
    return n;
}

/* The OR of DE/UE over every pool thread (the caller included). */
static inline unsigned ts_mxcsr_read_all(void) {
    ts_mxcsr_state s;
    atomic_init(&s.flags, 0);
    atomic_init(&s.threads_seen, 0);
    s.trap = ts_mxcsr_trap_mode();
    int n = ts__pool_on_each_thread(ts_mxcsr__read_task, &s);
    if (n < 1) return ts_mxcsr_get() & TS_MXCSR_GUARD;
    return atomic_load(&s.flags);
}

/* "DE UE" style text of a flag set, for messages (static buffer). */
static inline const char *ts_mxcsr_str(unsigned f) {
    static _Thread_local char buf[16];
    snprintf(buf, sizeof buf, "%s%s%s", (f & TS_MXCSR_DE) ? "DE" : "",
             (f & TS_MXCSR_DE) && (f & TS_MXCSR_UE) ? "+" : "", (f & TS_MXCSR_UE) ? "UE" : "");
    if (!f) snprintf(buf, sizeof buf, "clean");
    return buf;
}

#endif
