/* Run-time version query: lets a program detect a header/library mismatch. */
#include "tilestack/core.h"

unsigned ts_version_number(void) { return TS_VERSION_NUMBER; }
const char *ts_version_string(void) { return TS_VERSION_STRING; }
