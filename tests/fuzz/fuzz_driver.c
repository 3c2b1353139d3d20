/* A self-contained mutation fuzzer driving LLVMFuzzerTestOneInput where libFuzzer is not
 * available (scripts/run_fuzz.sh prefers libFuzzer when clang has it). Deterministic: the same
 * seed and corpus give the same inputs. Bounded: -max_total_time seconds and/or -runs inputs;
 * an input running longer than -timeout seconds is a failure (a hang), saved like a crash.
 *
 *   tilestack_fuzz_tile [-seed=N] [-runs=N] [-max_total_time=S] [-timeout=S]
 *                       [-artifact_prefix=P] corpus_dir_or_file...
 *
 * Mutations: byte flips, random bytes, deletions, duplications, splices of two seeds and
 * insertions of tokens (the tile language's, or the target's ts_fuzz_dictionary). Prints "1 passed, 0 failed" at the end (the test runner's
 * summary line); a crash ends the process (sanitizer report + saved input). */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));
/* A target may give its own mutation tokens (fuzz_weights.c: the weight header's keys);
 * without it the tile language's tokens below are used. */
const char *const *ts_fuzz_dictionary(size_t *n) __attribute__((weak));

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

static blob *g_seeds;
static size_t g_nseeds, g_capseeds;
static uint8_t *g_cur;
static size_t g_curn;
static const char *g_prefix = "./";
static uint64_t g_rng;

static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static void save_current(const char *kind) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s-input.tile", g_prefix, kind);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(g_cur, 1, g_curn, f);
        fclose(f);
        fprintf(stderr, "fuzz: input saved to %s (%zu bytes)\n", path, g_curn);
    }
}
static void on_death(void) { save_current("crash"); }
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "fuzz: an input ran past the time limit (hang)\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    save_current("timeout");
    _exit(1);
}

static void add_seed(const uint8_t *p, size_t n) {
    if (g_nseeds == g_capseeds) {
        g_capseeds = g_capseeds ? 2 * g_capseeds : 64;
        g_seeds = realloc(g_seeds, g_capseeds * sizeof *g_seeds);
        if (!g_seeds) abort();
    }
    g_seeds[g_nseeds].p = malloc(n ? n : 1);
    if (!g_seeds[g_nseeds].p) abort();
    memcpy(g_seeds[g_nseeds].p, p, n);
    g_seeds[g_nseeds++].n = n;
}

static void load_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add_seed(buf, n);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void load_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        load_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) return;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str); /* directory order is not deterministic */
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        load_file(p);
        free(names[i]);
    }
}

static const char *const k_tokens[] = {
    "kernel ", "launch ", "tile ", "let ", "var ", "for ", " in ", "parallel(", "serial(", "unroll(",
    "pipelined(", "if ", "else ", "while ", "break;", "continue;", "macro ", "const ", "copy(", "fill(",
    "clear(", "reduce<sum>(", "reduce<absmax>(", "cumsum(", "gemm(", "atomic_add(", "cast<f32>(",
    "bitcast<u32>(", "select(", "check(", "assume(", "tensor<bf16, [T, H]>", "f32[4, 128]", "e4m3",
    "ue8m0x4", "inf<f32>", "maxval<i8>", "axis=", "accumulate=true", "fill=", "stages=2", "(", ")",
    "[", "]", "{", "}", ",", ";", ":", "=", "+=", "<<", ">>", "&&", "||", "!", "~", "-", "*", "/",
    "%", "0x7fffffff", "9223372036854775807", "1e308", "1e-6", "0", "1", "-1", "\"msg\"", "//", "/*",
    "*/", "\n", " ", "as ", "__x", "strides=[S, 1]", "x[i, j]", "a:b", "lo:lo+4",
};
#define N_TOKENS (sizeof k_tokens / sizeof k_tokens[0])

/* One mutated input in g_cur (capacity cap). */
static void mutate(uint8_t *buf, size_t *n, size_t cap) {
    int steps = 1 + (int)below(8);
    for (int s = 0; s < steps; s++) {
        switch (below(7)) {
        case 0: /* flip a bit */
            if (*n) buf[below(*n)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* random byte */
            if (*n) buf[below(*n)] = (uint8_t)rnd();
            break;
        case 2: { /* delete a range */
            if (!*n) break;
            size_t at = below(*n), len = 1 + below(*n - at < 32 ? *n - at : 32);
            memmove(buf + at, buf + at + len, *n - at - len);
            *n -= len;
            break;
        }
        case 3: { /* duplicate a range */
            if (!*n) break;
            size_t at = below(*n), len = 1 + below(*n - at < 64 ? *n - at : 64), to = below(*n + 1);
            if (*n + len > cap) break;
            uint8_t tmp[64];
            memcpy(tmp, buf + at, len);
            memmove(buf + to + len, buf + to, *n - to);
            memcpy(buf + to, tmp, len);
            *n += len;
            break;
        }
        case 4: { /* splice: a piece of another seed */
            const blob *o = &g_seeds[below(g_nseeds)];
            if (!o->n) break;
            size_t at = below(o->n), len = 1 + below(o->n - at < 256 ? o->n - at : 256), to = below(*n + 1);
            if (*n + len > cap) break;
            memmove(buf + to + len, buf + to, *n - to);
            memcpy(buf + to, o->p + at, len);
            *n += len;
            break;
        }
        default: { /* insert a token */
            size_t nt = N_TOKENS;
            const char *const *tokens = ts_fuzz_dictionary ? ts_fuzz_dictionary(&nt) : k_tokens;
            const char *t = tokens[below(nt)];
            size_t len = strlen(t), to = below(*n + 1);
            if (*n + len > cap) break;
            memmove(buf + to + len, buf + to, *n - to);
            memcpy(buf + to, t, len);
            *n += len;
            break;
        }
        }
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    uint64_t seed = 1;
    long runs = -1;
    double max_time = 10, timeout = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "-seed=", 6)) seed = strtoull(a + 6, NULL, 0);
        else if (!strncmp(a, "-runs=", 6)) runs = strtol(a + 6, NULL, 10);
        else if (!strncmp(a, "-max_total_time=", 16)) max_time = strtod(a + 16, NULL);
        else if (!strncmp(a, "-timeout=", 9)) timeout = strtod(a + 9, NULL);
        else if (!strncmp(a, "-artifact_prefix=", 17)) g_prefix = a + 17;
        else if (a[0] == '-') {
            fprintf(stderr, "fuzz: unknown option %s\n", a);
            return 2;
        } else load_path(a);
    }
    if (!g_nseeds) add_seed((const uint8_t *)"", 0);
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
    signal(SIGALRM, on_alarm);
    const size_t cap = 1 << 17;
    g_cur = malloc(cap);
    if (!g_cur) return 1;
    const double t0 = now_s();
    long done = 0;
    struct itimerval it = {{0, 0}, {(time_t)timeout, (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)}};
    struct itimerval off = {{0, 0}, {0, 0}};
    for (;; done++) {
        if (runs >= 0 && done >= runs) break;
        if (runs < 0 && now_s() - t0 >= max_time) break;
        /* the seeds themselves first, then mutants */
        const blob *b = &g_seeds[done < (long)g_nseeds ? (size_t)done : below(g_nseeds)];
        g_curn = b->n < cap ? b->n : cap;
        memcpy(g_cur, b->p, g_curn);
        if (done >= (long)g_nseeds) mutate(g_cur, &g_curn, cap);
        setitimer(ITIMER_REAL, &it, NULL);
        LLVMFuzzerTestOneInput(g_cur, g_curn);
        setitimer(ITIMER_REAL, &off, NULL);
    }
    printf("fuzz: %ld inputs from %zu seeds in %.1f s (seed %llu)\n", done, g_nseeds, now_s() - t0,
           (unsigned long long)seed);
    for (size_t i = 0; i < g_nseeds; i++) free(g_seeds[i].p);
    free(g_seeds);
    free(g_cur);
    printf("1 passed, 0 failed\n");
    return 0;
}
