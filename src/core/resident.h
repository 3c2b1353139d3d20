/* The process's resident memory, for the load reports (docs/models.md "Memory per rank"). Not
 * installed. */
#ifndef TILESTACK_RESIDENT_H
#define TILESTACK_RESIDENT_H

#include <stddef.h>

/* VmRSS and RssShmem of /proc/self/status in bytes: every page mapped here (anonymous,
 * file-backed, shared memory), each counted once, and of those the shared-memory pages (the EP
 * buffers); hwm = VmHWM, the largest VmRSS the process has had so far (a load's peak). false
 * where they cannot be read (not Linux, /proc not mounted). */
typedef struct ts__resident { size_t rss, shmem, hwm; } ts__resident;
bool ts__resident_read(ts__resident *out);

#endif
