/* Core-private glue between the thread pool (threadpool.c) and the scratch arenas
 * (scratch.c). Not for use outside src/core. */
#ifndef TILESTACK_CORE_POOL_H
#define TILESTACK_CORE_POOL_H

/* Task nesting level of the calling thread: 0 in serial code, 1 inside a task of a top-level
 * parallel call, 2 inside a task of a nested (inline) call, ... The scratch arenas are keyed
 * by (thread, level) so a driver's serial scratch survives its own tasks' scratch use. */
extern _Thread_local int ts__tls_depth;
/* tid of the task the calling thread is running (0 in serial code). */
extern _Thread_local int ts__tls_tid;

#endif
