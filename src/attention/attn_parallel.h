/* Dynamic work claiming for the attention kernels (FlashMLA, MQA logits). */
#ifndef TS_ATTN_PARALLEL_H
#define TS_ATTN_PARALLEL_H

#include <stdint.h>

/* Run fn on items [0, n) in ranges of `grab` consecutive items (the last may be shorter), the
 * threads claiming ranges from a shared counter: a thread slowed by another process leaves its
 * remaining ranges to the others. Items must be independent (each writes its own outputs), so
 * results do not depend on who runs what; grab > 1 keeps per-range reuse (e.g. prepared
 * queries) of neighbouring items. tid is the task index, for ts__scratch. */
void ts__attn_parallel_items(int64_t n, int64_t grab,
                             void (*fn)(void *ctx, int64_t begin, int64_t end, int tid),
                             void *ctx);

#endif
