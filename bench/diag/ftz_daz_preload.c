/* Diagnostic only, never linked into tilestack: LD_PRELOAD=libts_ftz_daz.so sets MXCSR's
 * flush-to-zero (bit 15) and denormals-are-zero (bit 6) before main, and every thread the
 * process creates inherits them. Running a bench with and without it (scripts/ftz_compare.sh)
 * shows what subnormal operands or results still cost on a CPU that takes a microcode assist
 * for them (Intel); the library itself never touches MXCSR. */
#include <xmmintrin.h>

__attribute__((constructor)) static void ts_diag_ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }
