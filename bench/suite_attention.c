/* `tilestack bench attention`: FlashMLA rows (bench/suite_attention_mla.c) then MQA-logits rows
 * (bench/suite_attention_mqa.c), after the machine probes they are judged against. */
#include "bench.h"

#include <stdio.h>

int ts__suite_attention(const ts__bench_opts *opts) {
    int threads[2];
    int nthreads = ts__bench_thread_list(opts, threads);
    for (int t = 0; t < nthreads; t++)
        ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
    printf("\nsuite attention (ISA %s); frac = share of the roofline (fma_peak for compute-bound "
           "rows, dram_read for memory-bound rows, the min of both bounds when both are given)\n",
           opts->isa_name ? opts->isa_name : "?");
    ts__bench_table_header(stdout);
    int fails = 0;
    fails += ts__suite_attention_mla(opts, threads, nthreads) != 0;
    fails += ts__suite_attention_mqa(opts, threads, nthreads) != 0;
    return fails ? 1 : 0;
}
