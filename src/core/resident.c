/* VmRSS from /proc/self/status: the kernel's own count of the pages this process maps, so a
 * file page that is both mapped and read counts once, as the plan counts it. */
#include <stdbool.h>

#include "core/resident.h"

#include <stdio.h>
#include <string.h>

bool ts__resident_read(ts__resident *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return false;
    char line[256];
    unsigned long long kb = 0;
    bool rss = false;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0 && sscanf(line + 6, "%llu", &kb) == 1) {
            out->rss = (size_t)kb * 1024;
            rss = true;
        } else if (strncmp(line, "RssShmem:", 9) == 0 && sscanf(line + 9, "%llu", &kb) == 1) {
            out->shmem = (size_t)kb * 1024;
        } else if (strncmp(line, "VmHWM:", 6) == 0 && sscanf(line + 6, "%llu", &kb) == 1) {
            out->hwm = (size_t)kb * 1024;
        }
    }
    fclose(f);
    return rss;
}
