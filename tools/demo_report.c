/* The runner's report (rank 0): config, machine limits, TPOT, tokens/s, EP traffic, expert load
 * and the per-kernel breakdown with roofline fractions; the same figures as JSON. */
#include "demo.h"
#include "bench.h"

#include <string.h>

/* A DeepSeek-V3 / V3.2 checkpoint (src/model/model_v3.c: its generic config carries that
 * name, no window and no mHC) rather than the V4 block. */
static bool is_v3(const ts_model_config *c) {
    return !strncmp(c->name, "deepseek_v3", 11) && c->window_size == 0 && c->hc_mult == 1;
}

static const char *moe_path(const ts__demo_opts *o, const ts_model_config *c, int ranks) {
    if (ranks == 1 && !o->rank_mode) return "in-process, every expert local";
    if (is_v3(c)) return "EP low-latency dispatch + combine, bf16 rows";
    return o->unfused ? "unfused EP: dispatch + grouped GEMMs + combine" : "MegaMoE (fused EP)";
}

void ts__demo_print_config(FILE *f, const ts_model_config *c, const ts__demo_opts *o,
                           int ranks, int threads, const ts__machine *mach) {
    char ratios[256] = "";
    for (int64_t i = 0, n = 0; i < c->n_layers && n < 200; i++)
        n += snprintf(ratios + n, sizeof ratios - (size_t)n, "%s%d", i ? "," : "",
                      c->compress_ratios[i]);
    const ts_cpu_info *ci = ts_get_cpu_info();
    const bool v3 = is_v3(c);
    fprintf(f, "tilestack %s demo: %s, %s MoE decode (docs/model.md, docs/demo.md)\n",
            ts_version_string(), c->name, v3 ? "DeepSeek-V3" : "DeepSeek-V4-style");
    if (v3)
        fprintf(f, "  model    dim %lld, %lld layers, MLA absorbed over a bf16 latent cache (512 + "
                "RoPE %lld), %lld heads%s; vocab %lld\n", (long long)c->dim, (long long)c->n_layers,
                (long long)c->rope_head_dim, (long long)c->n_heads,
                c->index_topk > 0 ? ", V3.2 indexer (f32)" : "", (long long)c->vocab_size);
    else if (c->attention == TS_MODEL_ATTN_V32)
        fprintf(f, "  model    dim %lld, %lld layers (%lld hash-routed), V3.2 attention: MLA "
                "absorbed, %lld heads x (128 nope + 64 rope), latent 512, v 128; indexer %lld "
                "heads x 128, top-%lld of every cached token; vocab %lld, mHC x%lld\n",
                (long long)c->dim, (long long)c->n_layers, (long long)c->n_hash_layers,
                (long long)c->n_heads, (long long)c->index_n_heads, (long long)c->index_topk,
                (long long)c->vocab_size, (long long)c->hc_mult);
    else
        fprintf(f, "  model    dim %lld, %lld layers (compress ratios %s; %lld hash-routed), %lld "
                "heads x %lld (one latent KV, RoPE %lld), window %lld, vocab %lld, mHC x%lld\n",
                (long long)c->dim, (long long)c->n_layers, ratios, (long long)c->n_hash_layers,
                (long long)c->n_heads, (long long)c->head_dim, (long long)c->rope_head_dim,
                (long long)c->window_size, (long long)c->vocab_size, (long long)c->hc_mult);
    fprintf(f, "  experts  %lld routed, top-%lld + 1 shared, inter %lld; %lld per rank\n",
            (long long)c->n_routed_experts, (long long)c->n_activated_experts,
            (long long)c->moe_inter_dim, (long long)(c->n_routed_experts / (ranks > 0 ? ranks : 1)));
    if (v3)
        fprintf(f, "  formats  bf16 weights (an FP8 checkpoint dequantised at load), bf16 GEMM "
                "inputs, f32 accumulation, bf16 latent cache\n");
    else
    fprintf(f, "  formats  FP8 e4m3 dense weights (128x128 ue8m0 scales), FP4 e2m1 experts (ue8m0 "
            "per 32), FP8 activations, %s, bf16 LM head\n",
            c->attention == TS_MODEL_ATTN_V32 ? "V3.2 656-byte FP8 KV cache, FP8 indexer keys"
                                              : "584-byte FP8 KV cache, FP4 indexer keys");
    fprintf(f, "  run      R = %d rank%s (%s), B = %lld per rank, context L = %lld, %d warm-up + %d "
            "timed steps, %s, %d thread%s per rank\n",
            ranks, ranks == 1 ? "" : "s", moe_path(o, c, ranks), (long long)o->batch,
            (long long)o->context, o->warmup, o->steps,
            o->topk == 1 ? "greedy sampling" : "top-k sampling", threads,
            threads == 1 ? "" : "s");
    if (v3)
        fprintf(f, "  notes    no per-kernel profile for V3 yet (the breakdown below is the sampling "
                "only);%s\n", ranks > 1 ? " EP exchange over shared memory on one node" : "");
    else if (c->attention == TS_MODEL_ATTN_V32)
        fprintf(f, "  notes    the indexer scores all L cached tokens of every layer (FP8 paged MQA "
                "logits) before its top-%lld;%s\n", (long long)c->index_topk,
                ranks > 1 ? " EP exchange over shared memory on one node" : "");
    else
        fprintf(f, "  notes    the indexer scores every compressed row (L/4 per ratio-4 layer) "
                "before its top-%lld;%s\n", (long long)c->index_topk,
                ranks > 1 ? " EP exchange over shared memory on one node" : "");
    if (mach) {
        char others[128];
        ts__bench_machine_peaks(others, sizeof others, mach);
        fprintf(f, "  machine  %s, %d cores; per rank (%d thread%s, probed %s): FP32 FMA peak %.1f "
                "GFLOP/s on the %s path in use%s%s%s, DRAM read %.1f GB/s, L3 %.1f GB/s\n",
                ci && ci->brand[0] ? ci->brand : "?", ts__demo_cores(), threads,
                threads == 1 ? "" : "s", ranks > 1 ? "on all ranks at once" : "now",
                mach->fma_peak_gflops, ts_isa_name(mach->isa), others[0] ? " (" : "", others,
                others[0] ? ")" : "", mach->dram_read_gbps, mach->l3_read_gbps);
    }
}

static double roof_frac(const ts__demo_kernel *k, const ts__machine *m) {
    if (!m || k->sec <= 0 || k->cache_resident) return -1;
    double t = 0;
    if (k->flops > 0 && m->fma_peak_gflops > 0) t = k->flops / (m->fma_peak_gflops * 1e9);
    if (k->bytes > 0 && m->dram_read_gbps > 0) {
        const double tb = k->bytes / (m->dram_read_gbps * 1e9);
        t = tb > t ? tb : t;
    }
    return t > 0 ? t / k->sec : -1;
}

void ts__demo_print_result(FILE *f, const ts_model_config *c, const ts__demo_result *r,
                           const ts__machine *mach) {
    (void)c;
    fprintf(f, "\nB = %lld per rank, L = %lld, R = %d: %d timed steps (step = slowest rank, "
            "barrier to barrier; decode + sampling)\n",
            (long long)r->B, (long long)r->context, r->ranks, r->steps);
    fprintf(f, "  TPOT     p50 %.2f ms, p99 %.2f ms (mean %.2f, min %.2f)\n", r->p50_s * 1e3,
            r->p99_s * 1e3, r->mean_s * 1e3, r->min_s * 1e3);
    fprintf(f, "  output   %.1f tokens/s per rank, %.1f tokens/s in total (B / mean step)\n",
            r->tps_rank, r->tps_total);
    const ts__demo_ep_stats *e = &r->ep;
    if (e->have && e->steps > 0) {
        const double per_step = (double)e->steps * r->ranks; /* stats are summed over ranks */
        const double moe = e->moe_sec / (double)r->ranks;
        fprintf(f, "  EP       per rank per step: dispatch %.3f MB, combine %.3f MB (DeepEP byte "
                "accounting);\n           over the routed-expert time incl. compute (%.2f ms/step): "
                "dispatch %.3g GB/s, combine %.3g GB/s\n",
                e->dispatch_bytes / per_step * 1e-6, e->combine_bytes / per_step * 1e-6,
                moe / (double)e->steps * 1e3,
                moe > 0 ? e->dispatch_bytes / (double)r->ranks / moe * 1e-9 : 0,
                moe > 0 ? e->combine_bytes / (double)r->ranks / moe * 1e-9 : 0);
    } else if (r->ranks == 1) {
        fprintf(f, "  EP       none (one rank owns every expert: no dispatch / combine traffic)\n");
    }
    if (e->num_experts > 0 && e->load_mean > 0)
        fprintf(f, "  experts  load max/mean %.2f (%s; %.2f tokens per expert per step on "
                "average)\n",
                e->load_max / e->load_mean,
                e->have ? "all MoE layers, all ranks" : "the last MoE layer",
                e->load_mean / (double)r->steps / (e->have ? (double)c->n_layers : 1.0));

    fprintf(f, "\n  per-kernel breakdown, per step (mean over ranks); frac = roofline time / time "
            "against\n  one rank's FMA peak and DRAM read bandwidth (bytes = weights + activations "
            "+ cache read)\n");
    fprintf(f, "  %-32s %9s %7s %7s %9s %9s %6s", "kernel", "ms", "share", "calls", "GB/s",
            "GFLOP/s", "frac");
    if (r->replayed) fprintf(f, " %9s", "alone ms");
    fputc('\n', f);
    for (int i = 0; i < r->n_kernels; i++) {
        const ts__demo_kernel *k = &r->k[i];
        const double fr = roof_frac(k, mach);
        /* on an EP model the routed experts are one call (Mega MoE or the unfused EP path),
         * dispatch and combine included */
        const char *name = e->have && !strncmp(k->name, "experts", 7)
                               ? "experts + EP dispatch/combine"
                               : k->name;
        fprintf(f, "  %-32s %9.3f %6.1f%% %7.1f %9.2f %9.2f ", name, k->sec * 1e3,
                r->kernel_sum_s > 0 ? 100 * k->sec / r->kernel_sum_s : 0, k->calls,
                k->sec > 0 ? k->bytes / k->sec * 1e-9 : 0,
                k->sec > 0 ? k->flops / k->sec * 1e-9 : 0);
        if (fr >= 0) fprintf(f, "%6.2f", fr);
        else fprintf(f, "%6s", "-");
        /* * : all in-step (nothing re-runnable), + : partly in-step */
        if (r->replayed)
            fprintf(f, " %9.3f%s", k->alone * 1e3,
                    k->kept <= 0 ? "" : k->kept >= k->alone ? " *" : " +");
        fputc('\n', f);
    }
    fprintf(f, "  %-32s %9.3f", "sum of kernel times", r->kernel_sum_s * 1e3);
    if (r->replayed) fprintf(f, " %*s %9.3f", 7 + 1 + 7 + 1 + 9 + 1 + 9 + 1 + 6, "",
                             r->alone_sum_s * 1e3);
    fputc('\n', f);
    fprintf(f, "  %-32s %9.3f   step / sum (in-step) = %.3f\n", "step time (mean)",
            r->mean_s * 1e3, r->kernel_sum_s > 0 ? r->mean_s / r->kernel_sum_s : 0);
    if (r->replayed)
        fprintf(f, "  %-32s %9s   step / sum (standalone) = %.3f\n", "", "",
                r->alone_sum_s > 0 ? r->mean_s / r->alone_sum_s : 0);
    fprintf(f, "  (ms: each section's wall time inside the timed steps; the in-step ratio is the "
            "share of the\n   step no kernel accounts for: glue, waiting for the slowest rank)\n");
    if (r->replayed)
        fprintf(f, "  (alone ms: one untimed step after the timed ones re-runs every idempotent "
                "kernel call\n   standalone, warm, median of 5 after a warm-up; * / +: all / part "
                "of the row is not\n   re-runnable (cache stores, compressor state, in-place RoPE, "
                "the EP exchange, sampling)\n   and counts with its in-step time: %.3f ms of the "
                "%.3f)\n", r->kept_sum_s * 1e3, r->alone_sum_s * 1e3);
}

void ts__demo_json_config(FILE *f, const ts_model_config *c, const ts__demo_opts *o,
                          int ranks, int threads, const ts__machine *mach) {
    char buf[8192];
    fputs("{\"model\":", f);
    if (ts_model_config_to_json(c, buf, sizeof buf) == TS_OK) fputs(buf, f);
    else ts__json_write_string(f, c->name);
    fprintf(f, ",\"ranks\":%d,\"threads_per_rank\":%d,\"batch\":%lld,\"context\":%lld,"
            "\"warmup\":%d,\"steps\":%d,\"top_k\":%lld,\"moe_path\":",
            ranks, threads, (long long)o->batch, (long long)o->context, o->warmup, o->steps,
            (long long)o->topk);
    ts__json_write_string(f, moe_path(o, c, ranks));
    if (mach) {
        fputs(",\"machine\":{\"isa\":", f);
        ts__json_write_string(f, ts_isa_name(mach->isa));
        fputs(",\"fma_peak_gflops\":", f);
        ts__json_write_number(f, mach->fma_peak_gflops);
        fputs(",\"dram_read_gbps\":", f);
        ts__json_write_number(f, mach->dram_read_gbps);
        fputs("}", f);
    }
    fputs("}", f);
}

void ts__demo_json_result(FILE *f, const ts__demo_result *r, const ts__machine *mach) {
    fprintf(f, "{\"batch\":%lld,\"context\":%lld,\"ranks\":%d,\"steps\":%d,\"tpot_p50_ms\":",
            (long long)r->B, (long long)r->context, r->ranks, r->steps);
    ts__json_write_number(f, r->p50_s * 1e3);
    fputs(",\"tpot_p99_ms\":", f);
    ts__json_write_number(f, r->p99_s * 1e3);
    fputs(",\"step_mean_ms\":", f);
    ts__json_write_number(f, r->mean_s * 1e3);
    fputs(",\"tokens_per_s_per_rank\":", f);
    ts__json_write_number(f, r->tps_rank);
    fputs(",\"tokens_per_s_total\":", f);
    ts__json_write_number(f, r->tps_total);
    fputs(",\"kernel_sum_ms\":", f);
    ts__json_write_number(f, r->kernel_sum_s * 1e3);
    fputs(",\"step_over_kernel_sum\":", f);
    ts__json_write_number(f, r->kernel_sum_s > 0 ? r->mean_s / r->kernel_sum_s : -1);
    if (r->replayed) {
        fputs(",\"standalone_sum_ms\":", f);
        ts__json_write_number(f, r->alone_sum_s * 1e3);
        fputs(",\"standalone_kept_in_step_ms\":", f);
        ts__json_write_number(f, r->kept_sum_s * 1e3);
        fputs(",\"step_over_standalone_sum\":", f);
        ts__json_write_number(f, r->alone_sum_s > 0 ? r->mean_s / r->alone_sum_s : -1);
    }
    if (r->ep.have) {
        fputs(",\"dispatch_bytes_per_rank_step\":", f);
        ts__json_write_number(f, r->ep.steps ? r->ep.dispatch_bytes / r->ranks / r->ep.steps : 0);
        fputs(",\"combine_bytes_per_rank_step\":", f);
        ts__json_write_number(f, r->ep.steps ? r->ep.combine_bytes / r->ranks / r->ep.steps : 0);
    }
    if (r->ep.load_mean > 0) {
        fputs(",\"expert_load_max_over_mean\":", f);
        ts__json_write_number(f, r->ep.load_max / r->ep.load_mean);
    }
    fputs(",\"kernels\":[", f);
    for (int i = 0; i < r->n_kernels; i++) {
        const ts__demo_kernel *k = &r->k[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        ts__json_write_string(f, k->name);
        fputs(",\"ms\":", f);
        ts__json_write_number(f, k->sec * 1e3);
        fputs(",\"bytes\":", f);
        ts__json_write_number(f, k->bytes);
        fputs(",\"flops\":", f);
        ts__json_write_number(f, k->flops);
        fputs(",\"roofline_frac\":", f);
        ts__json_write_number(f, roof_frac(k, mach));
        if (r->replayed) {
            fputs(",\"standalone_ms\":", f);
            ts__json_write_number(f, k->alone * 1e3);
            fputs(",\"standalone_kept_in_step_ms\":", f);
            ts__json_write_number(f, k->kept * 1e3);
        }
        fputs("}", f);
    }
    fputs("],\"step_ms\":[", f);
    for (int i = 0; i < r->steps; i++) fprintf(f, "%s%.4f", i ? "," : "", r->step_s[i] * 1e3);
    fputs("]}", f);
}
