/* The progress handler of ts_set_progress_handler and the library's reporting side. Long
 * operations report through ts__progress; a phase reports often (per tensor) and this file
 * thins the calls out so a handler sees at most ~256 per phase whatever the tensor count. */
#include "internal.h"

static ts_progress_fn g_fn;
static void *g_user;

void ts_set_progress_handler(ts_progress_fn fn, void *user) {
    g_fn = fn;
    g_user = user;
}

bool ts__progress_on(void) { return g_fn != NULL; }

void ts__progress(ts__progress_state *p, const char *phase, double done, double total,
                  const char *unit) {
    if (!g_fn || total <= 0) return;
    /* one call per 1/256 of the total, and always the last */
    const double step = total / 256;
    if (done < total && done < p->next) return;
    p->next = done + step;
    g_fn(g_user, phase, done < total ? done : total, total, unit);
}
