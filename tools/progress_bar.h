/* Progress bar on stderr for the CLI (tools/progress_bar.c). */
#ifndef TS_TOOLS_PROGRESS_BAR_H
#define TS_TOOLS_PROGRESS_BAR_H

#include "tilestack/core.h"

/* Decides once whether bars are drawn (stderr a terminal, TS_PROGRESS != "0", TERM != dumb) and
 * installs the library's handler accordingly. Call before any long operation. */
void ts__progress_bar_install(void);
/* A tool's own phase: draws when enabled (done rising to total; the line ends at total). */
void ts__progress_bar(const char *phase, double done, double total, const char *unit);

#endif
