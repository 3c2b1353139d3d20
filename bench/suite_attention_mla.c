/* FlashMLA rows: being written (placeholder so the suite links; prints that nothing runs yet). */
#include "bench.h"

#include <stdio.h>

int ts__suite_attention_mla(const ts__bench_opts *opts, const int *threads, int nthreads) {
    (void)opts;
    (void)threads;
    (void)nthreads;
    printf("(FlashMLA rows: not implemented yet)\n");
    return 0;
}
