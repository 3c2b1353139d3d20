/* Dynamic work claiming over the thread pool (ts__parallel_items, internal.h). The pool's
 * ts__parallel_for splits statically, which on a shared machine makes every call wait for the
 * slowest thread's fixed share; this one lets the threads claim ranges as they go. */
#include "core/internal.h"

#include <stdatomic.h>

typedef struct items_ctx {
    _Atomic int64_t next;
    int64_t n, grab;
    ts__range_fn fn;
    void *ctx;
} items_ctx;

static void items_task(void *v, int tid, int nthreads) {
    (void)nthreads;
    items_ctx *d = (items_ctx *)v;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&d->next, d->grab, memory_order_relaxed);
        if (i >= d->n) break;
        d->fn(d->ctx, i, ts__min64(d->n, i + d->grab), tid);
    }
}

void ts__parallel_items(int64_t n, int64_t grab, ts__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grab < 1) grab = 1;
    /* through the pool even for one thread: its inline run gives the task its own scratch
     * level, apart from the caller's (which may hold the item list) */
    int64_t T = ts__max64(1, ts__min64(ts__ceil_div(n, grab), ts_get_num_threads()));
    items_ctx d;
    atomic_init(&d.next, 0);
    d.n = n;
    d.grab = grab;
    d.fn = fn;
    d.ctx = ctx;
    ts__parallel_run((int)T, items_task, &d);
}
