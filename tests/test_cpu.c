/* CPU feature detection and ISA dispatch. */
#include "ts_test.h"

#include "core/internal.h"

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
    if (ci->has_avx512bw || ci->has_avx512vl || ci->has_avx512bf16 || ci->has_avx512vnni)
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
    TS_CHECK_EQ_INT(ci->best_isa == TS_ISA_AVX2, ci->has_avx2 && ci->has_fma && ci->has_f16c);
#endif
#if !defined(TS_HAVE_AVX2_KERNELS)
    TS_CHECK(ci->best_isa != TS_ISA_AVX2);
#endif
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
    int have_flags = 0, avx2 = 0, fma = 0, f16c = 0, avx512f = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        have_flags = 1;
        avx2 = strstr(line, " avx2") != NULL;
        fma = strstr(line, " fma") != NULL;
        f16c = strstr(line, " f16c") != NULL;
        avx512f = strstr(line, " avx512f") != NULL;
        break;
    }
    fclose(f);
    if (!have_flags) return;
    const ts_cpu_info *ci = ts_get_cpu_info();
    TS_CHECK_EQ_INT(ci->has_avx2, avx2);
    TS_CHECK_EQ_INT(ci->has_fma, fma);
    TS_CHECK_EQ_INT(ci->has_f16c, f16c);
    TS_CHECK_EQ_INT(ci->has_avx512f, avx512f);
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
