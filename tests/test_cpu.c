/* CPU feature detection and ISA dispatch. */
#include "ts_test.h"

#include "core/internal.h"
#include "attention/flash_mla_internal.h"
#include "attention/mqa_logits_internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/quant_kernels.h"
#include "tilestack/gemm.h"

TS_TEST(cpu_info_is_consistent) {
    const ts_cpu_info *ci = ts_get_cpu_info();
    TS_CHECK(ci != NULL);
    if (!ci) return;
    TS_CHECK(ci == ts_get_cpu_info()); /* detected once */
    TS_CHECK(ci->logical_cpus >= 1);
    TS_CHECK(memchr(ci->vendor, '\0', sizeof ci->vendor) != NULL);
    TS_CHECK(memchr(ci->brand, '\0', sizeof ci->brand) != NULL);
    /* Implications that hold on every real CPU and that the OS-state checks preserve. */
    if (ci->has_avx2) TS_CHECK(ci->has_avx);
    if (ci->has_fma || ci->has_f16c) TS_CHECK(ci->has_avx);
    if (ci->has_avx512bw || ci->has_avx512vl || ci->has_avx512dq || ci->has_avx512bf16 ||
        ci->has_avx512vnni)
        TS_CHECK(ci->has_avx512f);
    if (ci->has_avx512f) TS_CHECK(ci->has_avx2);
    if (ci->has_asimddp || ci->has_sve) TS_CHECK(ci->has_neon);
#if defined(__x86_64__)
    TS_CHECK(!ci->has_neon);
    TS_CHECK(ci->vendor[0] != '\0');
#endif
#if defined(__aarch64__)
    TS_CHECK(ci->has_neon && !ci->has_avx);
#endif
    TS_CHECK(ci->l1d_bytes >= 0 && ci->l2_bytes >= 0 && ci->l3_bytes >= 0);
    if (ci->l1d_bytes && ci->l2_bytes) TS_CHECK(ci->l2_bytes >= ci->l1d_bytes);
    TS_CHECK(ci->l3_instance_bytes >= 0 && ci->l3_instance_bytes <= ci->l3_bytes);
    if (ci->l3_bytes) TS_CHECK(ci->l3_instance_bytes > 0 && ci->l3_bytes % ci->l3_instance_bytes == 0);
    TS_CHECK((unsigned)ci->best_isa < TS_ISA_COUNT_);
#if defined(__x86_64__) && defined(TS_HAVE_AVX2_KERNELS)
    const bool avx2 = ci->has_avx2 && ci->has_fma && ci->has_f16c;
    TS_CHECK_EQ_INT(ts__isa_avx2_up(ci->best_isa), avx2);
#if defined(TS_HAVE_AVX512_KERNELS)
    TS_CHECK_EQ_INT(ci->best_isa == TS_ISA_AVX512, avx2 && ci->has_avx512f && ci->has_avx512bw &&
                                                       ci->has_avx512vl && ci->has_avx512dq);
#endif
#endif
#if !defined(TS_HAVE_AVX2_KERNELS)
    TS_CHECK(!ts__isa_avx2_up(ci->best_isa));
#endif
#if !defined(TS_HAVE_AVX512_KERNELS)
    TS_CHECK(ci->best_isa != TS_ISA_AVX512);
#endif
    TS_CHECK(ts__isa_runnable(ci->best_isa));
    printf("    %s | %s | %d cpus | L1d %lld K, L2 %lld K, L3 %lld K | best %s\n", ci->vendor,
           ci->brand, ci->logical_cpus, (long long)(ci->l1d_bytes >> 10),
           (long long)(ci->l2_bytes >> 10), (long long)(ci->l3_bytes >> 10),
           ts_isa_name(ci->best_isa));
}

/* Cross-check against the kernel's view where it has one: /proc/cpuinfo flags. */
TS_TEST(cpu_info_matches_proc_cpuinfo) {
#if defined(__x86_64__) && defined(__linux__)
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int have_flags = 0, avx2 = 0, fma = 0, f16c = 0, avx512f = 0, avx512bw = 0, avx512vl = 0,
        avx512dq = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        have_flags = 1;
        avx2 = strstr(line, " avx2") != NULL;
        fma = strstr(line, " fma") != NULL;
        f16c = strstr(line, " f16c") != NULL;
        avx512f = strstr(line, " avx512f") != NULL;
        avx512bw = strstr(line, " avx512bw") != NULL;
        avx512vl = strstr(line, " avx512vl") != NULL;
        avx512dq = strstr(line, " avx512dq") != NULL;
        break;
    }
    fclose(f);
    if (!have_flags) return;
    const ts_cpu_info *ci = ts_get_cpu_info();
    TS_CHECK_EQ_INT(ci->has_avx2, avx2);
    TS_CHECK_EQ_INT(ci->has_fma, fma);
    TS_CHECK_EQ_INT(ci->has_f16c, f16c);
    TS_CHECK_EQ_INT(ci->has_avx512f, avx512f);
    TS_CHECK_EQ_INT(ci->has_avx512bw, avx512bw);
    TS_CHECK_EQ_INT(ci->has_avx512vl, avx512vl);
    TS_CHECK_EQ_INT(ci->has_avx512dq, avx512dq);
#else
    (void)ts_t_;
#endif
}

TS_TEST(cpu_isa_names) {
    TS_CHECK(strcmp(ts_isa_name(TS_ISA_GENERIC), "generic") == 0);
    TS_CHECK(strcmp(ts_isa_name(TS_ISA_AVX2), "avx2") == 0);
    TS_CHECK(strcmp(ts_isa_name(TS_ISA_AVX512), "avx512") == 0);
    TS_CHECK(strcmp(ts_isa_name(TS_ISA_NEON), "neon") == 0);
    TS_CHECK(strcmp(ts_isa_name((ts_isa)-1), "?") == 0);
    TS_CHECK(strcmp(ts_isa_name(TS_ISA_COUNT_), "?") == 0);
}

TS_TEST(cpu_set_isa_round_trip) {
    ts_isa saved = ts_get_isa();
    const ts_cpu_info *ci = ts_get_cpu_info();
    TS_CHECK((unsigned)saved < TS_ISA_COUNT_);
    TS_CHECK(ts__active_isa() == saved);
    /* The best path is runnable, and so is the generic one, always. */
    TS_CHECK_STATUS(ts_set_isa(ci->best_isa), TS_OK);
    TS_CHECK(ts_get_isa() == ci->best_isa);
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
    TS_CHECK(ts_get_isa() == TS_ISA_GENERIC);
    TS_CHECK(ts__active_isa() == TS_ISA_GENERIC);
    /* Every value either switches or is refused as unsupported, leaving the path alone. */
    for (int i = 0; i < TS_ISA_COUNT_; i++) {
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        ts_status st = ts_set_isa((ts_isa)i);
        if (st == TS_OK) {
            TS_CHECK(ts_get_isa() == (ts_isa)i);
        } else {
            TS_CHECK_EQ_INT(st, TS_ERR_UNSUPPORTED);
            TS_CHECK(ts_get_isa() == TS_ISA_GENERIC);
            TS_CHECK(strstr(ts_last_error(), "ts_set_isa") != NULL);
        }
    }
#if !defined(TS_HAVE_AVX512_KERNELS)
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_AVX512), TS_ERR_UNSUPPORTED);
#else
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_AVX512),
                    ci->has_avx2 && ci->has_fma && ci->has_f16c && ci->has_avx512f &&
                            ci->has_avx512bw && ci->has_avx512vl && ci->has_avx512dq
                        ? TS_OK
                        : TS_ERR_UNSUPPORTED);
#endif
#if !defined(TS_HAVE_NEON_KERNELS)
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_NEON), TS_ERR_UNSUPPORTED);
#endif
#if defined(TS_HAVE_AVX2_KERNELS)
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_AVX2), ci->has_avx2 && ci->has_fma && ci->has_f16c
                                                 ? TS_OK
                                                 : TS_ERR_UNSUPPORTED);
#else
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_AVX2), TS_ERR_UNSUPPORTED);
#endif
    TS_CHECK_STATUS(ts_set_isa(saved), TS_OK);
    TS_CHECK(ts_get_isa() == saved);
}

TS_TEST(cpu_set_isa_invalid_values) {
    ts_isa saved = ts_get_isa();
    TS_CHECK_STATUS(ts_set_isa((ts_isa)-1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_COUNT_), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_isa((ts_isa)1000), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ts_set_isa") != NULL);
    TS_CHECK(ts_get_isa() == saved);
}

/* Every refusal says why: which feature the CPU lacks, or that the build has no such kernels;
 * and the reason agrees with what ts_set_isa does. */
TS_TEST(cpu_isa_why_not) {
    const ts_isa saved = ts_get_isa();
    const ts_cpu_info *ci = ts_get_cpu_info();
    for (int i = 0; i < TS_ISA_COUNT_; i++) {
        char why[160];
        const bool no = ts__isa_why_not((ts_isa)i, why, sizeof why);
        TS_CHECK_EQ_INT(no, !ts__isa_runnable((ts_isa)i));
        TS_CHECK_EQ_INT(no, why[0] != '\0');
        if (!ts__isa_compiled((ts_isa)i)) TS_CHECK(no);
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        const ts_status st = ts_set_isa((ts_isa)i);
        TS_CHECK_STATUS(st, no ? TS_ERR_UNSUPPORTED : TS_OK);
        if (no) {
            /* "ts_set_isa: isa = avx512 cannot run here: CPU lacks avx512bw (in use: generic)" */
            TS_CHECK(strstr(ts_last_error(), ts_isa_name((ts_isa)i)) != NULL);
            TS_CHECK(strstr(ts_last_error(), why) != NULL);
            TS_CHECK(strstr(ts_last_error(), "in use: generic") != NULL);
            TS_CHECK(ts_get_isa() == TS_ISA_GENERIC);
        }
        if (!ts__isa_compiled((ts_isa)i)) {
            char want[64];
            snprintf(want, sizeof want, "built without %s kernels", ts_isa_name((ts_isa)i));
            TS_CHECK_MSG(strstr(why, want) != NULL, "why = \"%s\"", why);
        }
    }
    TS_CHECK(!ts__isa_why_not(TS_ISA_GENERIC, NULL, 0));
    char why[160];
    TS_CHECK(ts__isa_why_not((ts_isa)99, why, sizeof why));
    TS_CHECK(strstr(why, "not a ts_isa") != NULL);
#if defined(__x86_64__)
    /* The CPU side, named feature by feature. */
    if (ts__isa_compiled(TS_ISA_AVX512) && ci->has_avx512f && !ci->has_avx512bw) {
        TS_CHECK(ts__isa_why_not(TS_ISA_AVX512, why, sizeof why));
        TS_CHECK(strstr(why, "CPU lacks") && strstr(why, "avx512bw"));
    }
    if (ts__isa_compiled(TS_ISA_AVX512) && !ci->has_avx512f && !ts__get_cpu_raw()->cpu_avx512f) {
        TS_CHECK(ts__isa_why_not(TS_ISA_AVX512, why, sizeof why));
        TS_CHECK(strstr(why, "CPU lacks") && strstr(why, "avx512f"));
    }
    TS_CHECK(ts__isa_why_not(TS_ISA_NEON, why, sizeof why));
    TS_CHECK_MSG(strstr(why, "built without neon kernels") && strstr(why, "CPU lacks neon"),
                 "why = \"%s\"", why);
    TS_CHECK(!ts__get_cpu_raw()->os_zmm || ts__get_cpu_raw()->os_ymm);
    if (ci->has_avx512f) TS_CHECK(ts__get_cpu_raw()->os_zmm && ts__get_cpu_raw()->cpu_avx512f);
#endif
    TS_CHECK_STATUS(ts_set_isa(saved), TS_OK);
}

/* What TS_ISA does, without a new process: a path that cannot run falls back to the best with
 * a warning naming the value, the reason and the fallback; it is never selected. */
TS_TEST(cpu_isa_from_env) {
    const ts_isa best = ts_get_cpu_info()->best_isa;
    char warn[256];
    const char *quiet[] = {NULL, "", "auto", "best"};
    for (int i = 0; i < 4; i++) {
        TS_CHECK(ts__isa_from_env(quiet[i], warn, sizeof warn) == best);
        TS_CHECK(warn[0] == '\0');
    }
    TS_CHECK(ts__isa_from_env("generic", warn, sizeof warn) == TS_ISA_GENERIC);
    TS_CHECK(warn[0] == '\0');
    char fallback[64];
    snprintf(fallback, sizeof fallback, "using %s", ts_isa_name(best));
    TS_CHECK(ts__isa_from_env("avx9000", warn, sizeof warn) == best);
    TS_CHECK(strstr(warn, "unknown TS_ISA=\"avx9000\"") && strstr(warn, fallback));
    for (int i = 1; i < TS_ISA_COUNT_; i++) {
        const char *name = ts_isa_name((ts_isa)i);
        const ts_isa got = ts__isa_from_env(name, warn, sizeof warn);
        char why[160];
        if (ts__isa_why_not((ts_isa)i, why, sizeof why)) {
            TS_CHECK(got == best);
            char head[64];
            snprintf(head, sizeof head, "TS_ISA=%s cannot run here (", name);
            TS_CHECK_MSG(strstr(warn, head) && strstr(warn, why) && strstr(warn, fallback),
                         "warn = \"%s\"", warn);
        } else {
            TS_CHECK(got == (ts_isa)i);
            TS_CHECK(warn[0] == '\0');
        }
    }
    /* Truncation never overruns a short buffer. */
    char small[8];
    (void)ts__isa_from_env("avx9000", small, sizeof small);
    TS_CHECK(strlen(small) < sizeof small);
}

/* The avx512 path runs its own kernels where it has them (GEMM, FlashMLA, MQA logits,
 * converters, quantisers, EP row kernels) and the
 * AVX2 ones elsewhere, never the generic ones. */
TS_TEST(cpu_avx512_path_uses_avx2_kernels) {
    const ts_isa saved = ts_get_isa();
    TS_CHECK(ts__isa_avx2_up(TS_ISA_AVX2) && ts__isa_avx2_up(TS_ISA_AVX512));
    TS_CHECK(!ts__isa_avx2_up(TS_ISA_GENERIC) && !ts__isa_avx2_up(TS_ISA_NEON));
    if (ts_set_isa(TS_ISA_AVX512) != TS_OK) return; /* not runnable here */
#if defined(TS_HAVE_AVX2_KERNELS)
#if defined(TS_HAVE_AVX512_KERNELS)
    TS_CHECK(ts__gemm_select_kernels() == &ts__gemm_kernels_avx512); /* GEMM has its own */
    TS_CHECK(ts__mla_pick_kernels() == &ts__mla_kernels_avx512);     /* and FlashMLA */
#else
    TS_CHECK(ts__mla_pick_kernels() == &ts__mla_kernels_avx2);
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
    TS_CHECK(ts__quant_kernels_for((ts__qsrc)0) == &ts__quant_kernels_avx512[0]); /* quantisers too */
#else
    TS_CHECK(ts__quant_kernels_for((ts__qsrc)0) == &ts__quant_kernels_avx2[0]);
#endif
#endif
    /* Same bits as generic through a few entry points (bulk conversion, quantiser, GEMM). */
    enum { N = 4096 };
    static float x[N];
    static uint16_t out[2][N];
    static uint8_t e4[2][N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t u = (uint32_t)(r >> 32);
        x[i] = ((float)(int32_t)u) * 0x1p-28f; /* [-8, 8) with low mantissa bits set */
    }
    const ts_isa paths[2] = {TS_ISA_GENERIC, TS_ISA_AVX512};
    for (int p = 0; p < 2; p++) {
        TS_CHECK_STATUS(ts_set_isa(paths[p]), TS_OK);
        TS_CHECK_STATUS(ts_convert(x, TS_F32, out[p], TS_BF16, N), TS_OK);
        TS_CHECK_STATUS(ts_convert(x, TS_F32, e4[p], TS_E4M3, N), TS_OK);
    }
    TS_CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
    TS_CHECK(memcmp(e4[0], e4[1], sizeof e4[0]) == 0);
    /* bf16 GEMM D[8, 16] = A[8, 256] B[16, 256]^T */
    enum { M = 8, NN = 16, K = 256 };
    float d[2][M * NN];
    for (int p = 0; p < 2; p++) {
        TS_CHECK_STATUS(ts_set_isa(paths[p]), TS_OK);
        ts_tensor a = ts_tensor_2d(out[0], TS_BF16, M, K), b = ts_tensor_2d(out[0] + M * K, TS_BF16, NN, K),
                  dt = ts_tensor_2d(d[p], TS_F32, M, NN);
        TS_CHECK_STATUS(ts_bf16_gemm_nt(&a, &b, &dt, NULL, NULL), TS_OK);
    }
    TS_CHECK(memcmp(d[0], d[1], sizeof d[0]) == 0);
    TS_CHECK_STATUS(ts_set_isa(saved), TS_OK);
}

/* Linux derives its sysfs cache description from the same cpuid leaves on x86, so the two
 * must agree where sysfs has an entry. */
#if defined(__x86_64__) && defined(__linux__)
static int64_t sysfs_cache_bytes(int want_level, const char *want_type) {
    for (int idx = 0; idx < 16; idx++) {
        char path[128], buf[64];
        int level = 0;
        char type[32] = "";
        int64_t bytes = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", idx);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", idx);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%31s", type) != 1) type[0] = '\0';
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        if ((f = fopen(path, "r"))) {
            if (fgets(buf, sizeof buf, f)) {
                char *end;
                bytes = strtoll(buf, &end, 10);
                if (*end == 'K') bytes <<= 10;
                else if (*end == 'M') bytes <<= 20;
            }
            fclose(f);
        }
        if (level == want_level && strcmp(type, want_type) == 0) return bytes;
    }
    return 0;
}
#endif

TS_TEST(cpu_caches_match_sysfs) {
#if defined(__x86_64__) && defined(__linux__)
    const ts_cpu_info *ci = ts_get_cpu_info();
    int64_t l1d = sysfs_cache_bytes(1, "Data"), l2 = sysfs_cache_bytes(2, "Unified"),
            l3 = sysfs_cache_bytes(3, "Unified");
    if (l1d) TS_CHECK_EQ_INT(ci->l1d_bytes, l1d);
    if (l2) TS_CHECK_EQ_INT(ci->l2_bytes, l2);
    if (l3) TS_CHECK_EQ_INT(ci->l3_instance_bytes, l3);
#else
    (void)ts_t_;
#endif
}
