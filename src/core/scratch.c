/* Per-thread scratch arenas.
 *
 * An arena belongs to (OS thread, task nesting level), not to a tid number: a tid names a
 * chunk, and a chunk may run on any thread (inline when nested or when another user thread
 * owns the pool), so arenas indexed by tid could be shared by two running threads. Keying by
 * level as well means a driver's serial scratch (level 0) survives the scratch its own tasks
 * take (level 1, even for tid 0 which runs on the driver's thread).
 *
 * Growth frees and reallocates (contents are not kept). Arenas are freed when their thread
 * exits (a pthread key destructor) and, for the thread that calls exit(), by atexit. */
#include "core/internal.h"
#include "core/pool.h"

#include <pthread.h>
#include <stdint.h>

#define LEVELS 4
#define PAGE ((size_t)4096)

typedef struct arena {
    void *p;
    size_t cap;
} arena;

static _Thread_local arena tls_arenas[LEVELS];
static _Thread_local int tls_registered;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void free_arenas(arena *a) {
    for (int i = 0; i < LEVELS; i++) {
        ts__aligned_free(a[i].p);
        a[i].p = NULL;
        a[i].cap = 0;
    }
}

static void key_destructor(void *v) { free_arenas((arena *)v); }

static void free_exiting_thread(void) { free_arenas(tls_arenas); }

static void scratch_init(void) {
    pthread_key_create(&g_key, key_destructor);
    atexit(free_exiting_thread);
}

void *ts__scratch(int tid, size_t bytes) {
    /* tid is the task's own tid, or 0 for serial code (also inside a task, when a nested op
     * asks for its driver scratch). Anything else is the "one buffer per tid, allocated from
     * serial code" misuse, which would hand every tid the same memory. */
    TS__ASSERT(tid == 0 || tid == ts__tls_tid);
    int level = ts__tls_depth < LEVELS ? ts__tls_depth : LEVELS - 1;
    arena *a = &tls_arenas[level];
    if (bytes <= a->cap && a->p) return a->p;
    if (!tls_registered) {
        pthread_once(&g_once, scratch_init);
        if (pthread_setspecific(g_key, tls_arenas) != 0) return NULL;
        tls_registered = 1;
    }
    if (bytes > SIZE_MAX / 2) return NULL;
    /* Grow by at least half again so a slowly growing request does not reallocate each call. */
    size_t want = a->cap + a->cap / 2;
    if (want < bytes) want = bytes;
    want = (want + PAGE - 1) / PAGE * PAGE;
    ts__aligned_free(a->p);
    a->p = ts__aligned_alloc(want);
    a->cap = a->p ? want : 0;
    return a->p;
}
