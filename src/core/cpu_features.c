/* CPU feature detection, once per process.
 *
 * x86: cpuid for the instruction sets, and xgetbv for whether the OS saves the YMM / ZMM
 * state on context switches (a CPU with AVX under an OS that does not enable it must not run
 * AVX code). Cache sizes from the deterministic cache leaves (4 on Intel, 0x8000001D on AMD),
 * then the legacy AMD leaves, then sysfs. aarch64: hwcaps from the auxiliary vector. */
#include "core/internal.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define TS_X86_CPU 1
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static ts_cpu_info g_info;
static ts__cpu_raw g_raw;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Instances of a cache shared by `sharing` logical CPUs, over all logical CPUs. */
static int64_t total_over_instances(int64_t bytes, int sharing, int logical) {
    if (sharing < 1) sharing = 1;
    int inst = (logical + sharing - 1) / sharing;
    return bytes * (inst < 1 ? 1 : inst);
}

/* Linux sysfs: /sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size,shared_cpu_list}. */
static int read_small_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
    return n > 0;
}

/* Count CPUs in a list such as "0-3,8,10-11". */
static int count_cpu_list(const char *s) {
    int count = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s) break;
        long b = a;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            s = end;
        }
        if (b >= a) count += (int)(b - a + 1);
        if (*s == ',') s++;
        else break;
    }
    return count;
}

static void caches_from_sysfs(ts_cpu_info *ci) {
    for (int idx = 0; idx < 16; idx++) {
        char path[128], level[16], type[32], size[32], shared[256];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", idx);
        if (!read_small_file(path, level, sizeof level)) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", idx);
        if (!read_small_file(path, type, sizeof type)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        if (!read_small_file(path, size, sizeof size)) continue;
        if (strcmp(type, "Instruction") == 0) continue;
        char *end;
        int64_t bytes = strtoll(size, &end, 10);
        if (*end == 'K') bytes <<= 10;
        else if (*end == 'M') bytes <<= 20;
        else if (*end == 'G') bytes <<= 30;
        int lv = atoi(level);
        if (lv == 1 && ci->l1d_bytes == 0 && strcmp(type, "Data") == 0) ci->l1d_bytes = bytes;
        if (lv == 2 && ci->l2_bytes == 0) ci->l2_bytes = bytes;
        if (lv == 3 && ci->l3_bytes == 0) {
            int sharing = 1;
            snprintf(path, sizeof path,
                     "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", idx);
            if (read_small_file(path, shared, sizeof shared)) sharing = count_cpu_list(shared);
            ci->l3_instance_bytes = bytes;
            ci->l3_bytes = total_over_instances(bytes, sharing, ci->logical_cpus);
        }
    }
}

#if defined(TS_X86_CPU)
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

static uint64_t xgetbv0(void) {
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Deterministic cache parameters: leaf 4 (Intel) and 0x8000001D (AMD) share one layout. */
static int caches_from_leaf(ts_cpu_info *ci, unsigned leaf) {
    int found = 0;
    for (unsigned sub = 0; sub < 16; sub++) {
        unsigned r[4];
        cpuid(leaf, sub, r);
        unsigned type = r[0] & 0x1f;
        if (type == 0) break;
        if (type == 2) continue; /* instruction cache */
        unsigned level = (r[0] >> 5) & 0x7;
        int sharing = (int)((r[0] >> 14) & 0xfff) + 1;
        int64_t ways = ((r[1] >> 22) & 0x3ff) + 1;
        int64_t parts = ((r[1] >> 12) & 0x3ff) + 1;
        int64_t line = (r[1] & 0xfff) + 1;
        int64_t sets = (int64_t)r[2] + 1;
        int64_t bytes = ways * parts * line * sets;
        if (level == 1 && type == 1) ci->l1d_bytes = bytes;
        else if (level == 2) ci->l2_bytes = bytes;
        else if (level == 3) {
            ci->l3_instance_bytes = bytes;
            ci->l3_bytes = total_over_instances(bytes, sharing, ci->logical_cpus);
        }
        found = 1;
    }
    return found;
}

static void detect_x86(ts_cpu_info *ci) {
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    memcpy(ci->vendor + 0, &r[1], 4);
    memcpy(ci->vendor + 4, &r[3], 4);
    memcpy(ci->vendor + 8, &r[2], 4);
    ci->vendor[12] = '\0';
    int intel = strcmp(ci->vendor, "GenuineIntel") == 0;
    int amd = strcmp(ci->vendor, "AuthenticAMD") == 0 || strcmp(ci->vendor, "HygonGenuine") == 0;

    int os_ymm = 0, os_zmm = 0;
    if (max_leaf >= 1) {
        cpuid(1, 0, r);
        ci->has_sse42 = (r[2] >> 20) & 1;
        int osxsave = (r[2] >> 27) & 1;
        if (osxsave) {
            uint64_t xcr0 = xgetbv0();
            os_ymm = (xcr0 & 0x6) == 0x6;     /* XMM and YMM state */
            os_zmm = (xcr0 & 0xe6) == 0xe6;   /* plus opmask, ZMM_Hi256, Hi16_ZMM */
        }
        g_raw.osxsave = osxsave;
        g_raw.os_ymm = os_ymm;
        g_raw.os_zmm = os_zmm;
        g_raw.cpu_avx = (r[2] >> 28) & 1;
        ci->has_avx = os_ymm && ((r[2] >> 28) & 1);
        ci->has_fma = os_ymm && ((r[2] >> 12) & 1);
        ci->has_f16c = os_ymm && ((r[2] >> 29) & 1);
    }
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        unsigned max_sub7 = r[0];
        ci->has_avx2 = ci->has_avx && ((r[1] >> 5) & 1);
        ci->has_bmi2 = (r[1] >> 8) & 1;
        ci->has_avx512f = os_zmm && ((r[1] >> 16) & 1);
        ci->has_avx512bw = ci->has_avx512f && ((r[1] >> 30) & 1);
        ci->has_avx512vl = ci->has_avx512f && ((r[1] >> 31) & 1);
        ci->has_avx512dq = ci->has_avx512f && ((r[1] >> 17) & 1);
        ci->has_avx512vnni = ci->has_avx512f && ((r[2] >> 11) & 1);
        g_raw.cpu_avx2 = (r[1] >> 5) & 1;
        g_raw.cpu_avx512f = (r[1] >> 16) & 1;
        if (max_sub7 >= 1) {
            cpuid(7, 1, r);
            ci->has_avx512bf16 = ci->has_avx512f && ((r[0] >> 5) & 1);
        }
    }

    cpuid(0x80000000u, 0, r);
    unsigned max_ext = r[0];
    if (max_ext >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(ci->brand + 16 * i, r, 16);
        }
        ci->brand[48] = '\0';
        /* Brand strings are padded with leading spaces on some parts. */
        size_t lead = strspn(ci->brand, " ");
        memmove(ci->brand, ci->brand + lead, strlen(ci->brand + lead) + 1);
        size_t n = strlen(ci->brand);
        while (n > 0 && ci->brand[n - 1] == ' ') ci->brand[--n] = '\0';
    }

    int found = 0;
    if (intel && max_leaf >= 4) found = caches_from_leaf(ci, 4);
    if (amd && !found && max_ext >= 0x8000001Du) {
        cpuid(0x80000001u, 0, r);
        if ((r[2] >> 22) & 1) found = caches_from_leaf(ci, 0x8000001Du); /* TOPOEXT */
    }
    if (amd && !found) {
        if (max_ext >= 0x80000005u) {
            cpuid(0x80000005u, 0, r);
            ci->l1d_bytes = (int64_t)(r[2] >> 24) << 10;
        }
        if (max_ext >= 0x80000006u) {
            cpuid(0x80000006u, 0, r);
            ci->l2_bytes = (int64_t)(r[2] >> 16) << 10;
            /* The L3 this core sees; how many instances there are is unknown here. */
            ci->l3_instance_bytes = (int64_t)(r[3] >> 18) * (512 << 10);
            ci->l3_bytes = ci->l3_instance_bytes;
        }
    }
}
#endif

static void detect(void) {
    ts_cpu_info *ci = &g_info;
    memset(ci, 0, sizeof *ci);
    memset(&g_raw, 0, sizeof g_raw);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    ci->logical_cpus = n > 0 ? (int)n : 1;
#if defined(TS_X86_CPU)
    detect_x86(ci);
#elif defined(__aarch64__)
    snprintf(ci->vendor, sizeof ci->vendor, "arm");
    ci->has_neon = 1; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    ci->has_asimddp = (hw >> 20) & 1; /* HWCAP_ASIMDDP */
    ci->has_sve = (hw >> 22) & 1;     /* HWCAP_SVE */
#endif
#endif
    if (ci->l1d_bytes == 0 && ci->l2_bytes == 0 && ci->l3_bytes == 0) caches_from_sysfs(ci);

    /* The same rule as dispatch.c's isa_runnable (which reads this struct): the avx512 path
     * also runs the AVX2 kernels where it has none of its own, so it needs AVX2 + FMA + F16C,
     * and its files are compiled with -mavx512dq. */
    ci->best_isa = TS_ISA_GENERIC;
#if defined(TS_HAVE_AVX2_KERNELS)
    const bool avx2 = ci->has_avx2 && ci->has_fma && ci->has_f16c;
    if (avx2) ci->best_isa = TS_ISA_AVX2;
#if defined(TS_HAVE_AVX512_KERNELS)
    if (avx2 && ci->has_avx512f && ci->has_avx512bw && ci->has_avx512vl && ci->has_avx512dq)
        ci->best_isa = TS_ISA_AVX512;
#endif
#endif
#if defined(TS_HAVE_NEON_KERNELS)
    if (ci->has_neon) ci->best_isa = TS_ISA_NEON;
#endif
}

const ts_cpu_info *ts_get_cpu_info(void) {
    pthread_once(&g_once, detect);
    return &g_info;
}

const ts__cpu_raw *ts__get_cpu_raw(void) {
    pthread_once(&g_once, detect);
    return &g_raw;
}
