/* The tile JIT: SHA-256 against FIPS 180-4 vectors, compile / cache hit / miss, corrupt cache
 * entries rebuilt, two processes compiling the same module at once, compiler failures and
 * their messages, argument checking of ts_tile_launch, release. Every test uses its own cache
 * directory under /tmp (never ~/.cache). */
#include "ts_test.h"
#include "tilestack/tile.h"
#include "tilestack/numerics.h"
#include "tile/tile_jit_internal.h"
#include "tile/tile_sha256.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---- */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_tree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static void tmp_dir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/ts_tile_jit_XXXXXX");
    if (!mkdtemp(buf)) buf[0] = 0;
}

/* Entries (*.so) and leftovers (tmp-*) in <cache>/tile-jit. */
static void count_entries(const char *cache, int *nso, int *ntmp) {
    char d[512];
    snprintf(d, sizeof d, "%s/tile-jit", cache);
    *nso = *ntmp = 0;
    DIR *dd = opendir(d);
    if (!dd) return;
    for (struct dirent *e; (e = readdir(dd));) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, "tmp-", 4)) (*ntmp)++;
        else if (l > 3 && !strcmp(e->d_name + l - 3, ".so")) (*nso)++;
    }
    closedir(dd);
}

static const char k_axpy[] =
    "kernel axpy(x: tensor<f32, [N]>, y: tensor<f32, [N]>, a: f32, b: i32, neg: bool) {\n"
    "    launch (ceildiv(N, 64)) as (blk) {\n"
    "        tile t: f32[64];\n"
    "        copy(x[blk * 64], t);\n"
    "        for i in parallel(64) {\n"
    "            let v = fma(a, t[i], cast<f32>(b));\n"
    "            t[i] = select(neg, -v, v);\n"
    "        }\n"
    "        copy(t, y[blk * 64]);\n"
    "    }\n"
    "}\n";

/* Run axpy on 200 values and compare with C; returns the number of mismatches (or -1). */
static int run_axpy(const ts_tile_kernel *k, float a, int32_t b, bool neg) {
    enum { N = 200 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.37f - 11.0f, y[i] = -1.0f;
    ts_tensor tx = ts_tensor_1d(x, TS_F32, N), ty = ts_tensor_1d(y, TS_F32, N);
    ts_tile_arg args[5] = {ts_tile_arg_tensor(&tx), ts_tile_arg_tensor(&ty), ts_tile_arg_f64(a),
                           ts_tile_arg_i64(b), ts_tile_arg_bool(neg)};
    if (ts_tile_launch(k, "axpy", args, 5) != TS_OK) return -1;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float v = fmaf(a, x[i], (float)b);
        if (neg) v = -v;
        if (memcmp(&v, &y[i], 4)) bad++;
    }
    return bad;
}

/* ---- SHA-256 ---- */

/* src compiled with the cache in dir (a check failure when it does not compile) */
static ts_tile_kernel *compile_in(ts_test_ctx *ts_t_, const char *src, const char *dir) {
    ts_tile_options o = {.cache_dir = dir};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    return k;
}

TS_TEST(tile_jit_sha256_fips_vectors) {
    char hex[65];
    ts__sha256_hex("abc", 3, hex);
    TS_CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    ts__sha256_hex("", 0, hex);
    TS_CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ts__sha256_hex(m448, strlen(m448), hex);
    TS_CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    ts__sha256_hex(m896, strlen(m896), hex);
    TS_CHECK(!strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
    /* one million 'a', fed in uneven pieces: the streaming path */
    char *a = malloc(1000000);
    TS_CHECK(a != NULL);
    if (!a) return;
    memset(a, 'a', 1000000);
    ts__sha256 s;
    uint8_t d[32];
    ts__sha256_init(&s);
    size_t off = 0, step = 1;
    while (off < 1000000) {
        size_t n = step < 1000000 - off ? step : 1000000 - off;
        ts__sha256_update(&s, a + off, n);
        off += n;
        step = step * 3 % 1021 + 1;
    }
    ts__sha256_final(&s, d);
    ts__sha256_to_hex(d, hex);
    TS_CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(a);
    /* every length around the padding boundary: streaming equals one-shot */
    unsigned char buf[130];
    for (int i = 0; i < 130; i++) buf[i] = (unsigned char)(i * 7 + 1);
    for (size_t n = 0; n <= 130; n++) {
        char h1[65];
        ts__sha256_hex(buf, n, h1);
        ts__sha256_init(&s);
        for (size_t i = 0; i < n; i++) ts__sha256_update(&s, buf + i, 1);
        ts__sha256_final(&s, d);
        ts__sha256_to_hex(d, hex);
        TS_CHECK_MSG(!strcmp(h1, hex), "length %zu", n);
    }
}

/* ---- compile, hit, miss ---- */

TS_TEST(tile_jit_compile_miss_then_hit) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    TS_CHECK(dir[0]);
    char *log = NULL;
    ts_tile_options o = {.cache_dir = dir, .filename = "axpy.tile", .log = &log};
    ts_tile_kernel *k1 = NULL, *k2 = NULL;
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k1), TS_OK);
    TS_CHECK(log != NULL);
    ts_tile_free(log);
    log = NULL;
    if (!k1) goto done;
    ts_tile_kernel_info i1, i2;
    TS_CHECK_STATUS(ts_tile_kernel_info_get(k1, &i1), TS_OK);
    TS_CHECK(!i1.cache_hit);
    TS_CHECK_EQ_INT(i1.nkernels, 1);
    TS_CHECK(ts_tile_kernel_name(k1, 0) && !strcmp(ts_tile_kernel_name(k1, 0), "axpy"));
    TS_CHECK(ts_tile_kernel_name(k1, 1) == NULL);
    TS_CHECK_EQ_INT(run_axpy(k1, 1.5f, 3, false), 0);
    TS_CHECK_EQ_INT(run_axpy(k1, -0.25f, -7, true), 0);

    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k2), TS_OK);
    ts_tile_free(log);
    log = NULL;
    if (k2) {
        TS_CHECK_STATUS(ts_tile_kernel_info_get(k2, &i2), TS_OK);
        TS_CHECK(i2.cache_hit);
        TS_CHECK(!strcmp(i1.key, i2.key));
        TS_CHECK(!strcmp(i1.path, i2.path));
        TS_CHECK_EQ_INT(run_axpy(k2, 2.0f, 1, true), 0);
    }
    int nso, ntmp;
    count_entries(dir, &nso, &ntmp);
    TS_CHECK_EQ_INT(nso, 1);
    TS_CHECK_EQ_INT(ntmp, 0);

    /* a different program (one changed constant) is a different key: a miss */
    char *src2 = strdup(k_axpy);
    char *p = strstr(src2, "64)) as");
    if (p) p[1] = '3'; /* ceildiv(N, 63): more blocks, same results */
    ts_tile_kernel *k3 = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src2, &o, &k3), TS_OK);
    ts_tile_free(log);
    log = NULL;
    if (k3) {
        ts_tile_kernel_info i3;
        ts_tile_kernel_info_get(k3, &i3);
        TS_CHECK(!i3.cache_hit);
        TS_CHECK(strcmp(i3.key, i1.key) != 0);
        TS_CHECK_EQ_INT(run_axpy(k3, 0.5f, 2, false), 0);
    }
    count_entries(dir, &nso, &ntmp);
    TS_CHECK_EQ_INT(nso, 2);
    free(src2);
    ts_tile_kernel_release(k3);
    /* releasing one module leaves another loaded from the same object working */
    ts_tile_kernel_release(k1);
    k1 = NULL;
    if (k2) TS_CHECK_EQ_INT(run_axpy(k2, 3.0f, 0, false), 0);
    ts_tile_kernel_release(k2);
    ts_tile_kernel_release(NULL);
done:
    ts_tile_kernel_release(k1);
    rm_tree(dir);
}

TS_TEST(tile_jit_no_cache_flag) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    ts_tile_options o = {.cache_dir = dir, .flags = TS_TILE_JIT_NO_CACHE};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k), TS_OK);
    if (k) TS_CHECK_EQ_INT(run_axpy(k, 1.0f, 1, false), 0);
    int nso, ntmp;
    count_entries(dir, &nso, &ntmp);
    TS_CHECK_EQ_INT(nso, 0);
    TS_CHECK_EQ_INT(ntmp, 0);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* ---- corrupt entries ---- */

static void corrupt(const char *path, int how) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (how == 0) {
        /* truncated: the program headers still load, the end is gone */
        if (truncate(path, st.st_size - 100) != 0) return;
    } else if (how == 1) { /* one flipped byte: only the trailer's hash sees it */
        int fd = open(path, O_RDWR);
        if (fd < 0) return;
        unsigned char c;
        if (pread(fd, &c, 1, st.st_size / 2) == 1) {
            c ^= 0x40;
            if (pwrite(fd, &c, 1, st.st_size / 2) != 1) c = 0;
        }
        close(fd);
    } else {
        FILE *f = fopen(path, "wb");
        if (f) {
            fputs("not an object", f);
            fclose(f);
        }
    }
}

/* Copy src to dst (same dir), corrupted. */
static int copy_corrupt(const char *src, const char *dst, int how) {
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(dst, "wb");
    if (!f) return -1;
    fwrite(buf, 1, n, f);
    fclose(f);
    corrupt(dst, how);
    return 0;
}

TS_TEST(tile_jit_corrupt_entry_is_rebuilt) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    ts_tile_kernel *k = compile_in(ts_t_, k_axpy, dir);
    if (!k) {
        rm_tree(dir);
        return;
    }
    ts_tile_kernel_info info;
    ts_tile_kernel_info_get(k, &info);
    char path[600], copy[640];
    snprintf(path, sizeof path, "%s", info.path);
    ts_tile_kernel_release(k);
    char key[65];
    snprintf(key, sizeof key, "%s", info.key);
    /* every kind of damage is seen by the entry check (no rebuild needed to know) */
    TS_CHECK(ts__tile_cache_valid(path, key));
    snprintf(copy, sizeof copy, "%s.copy", path);
    for (int how = 0; how < 3; how++) {
        TS_CHECK(copy_corrupt(path, copy, how) == 0);
        TS_CHECK_MSG(!ts__tile_cache_valid(copy, key), "corruption %d not detected", how);
    }
    unlink(copy);
    TS_CHECK(!ts__tile_cache_valid("/nonexistent/x.so", key));
    /* end to end: a truncated entry is rebuilt, in place, and then hits again */
    corrupt(path, 0);
    k = compile_in(ts_t_, k_axpy, dir);
    if (k) {
        ts_tile_kernel_info_get(k, &info);
        TS_CHECK(!info.cache_hit);
        TS_CHECK(!strcmp(info.path, path));
        TS_CHECK_EQ_INT(run_axpy(k, 1.25f, -2, true), 0);
    }
    ts_tile_kernel_release(k);
    TS_CHECK(ts__tile_cache_valid(path, key));
    k = compile_in(ts_t_, k_axpy, dir);
    if (k) {
        ts_tile_kernel_info_get(k, &info);
        TS_CHECK(info.cache_hit);
        TS_CHECK_EQ_INT(run_axpy(k, 4.0f, 9, false), 0);
    }
    ts_tile_kernel_release(k);
    /* an entry with a valid trailer that dlopen rejects (an ELF header and junk) is rebuilt too */
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("\177ELF but nothing a loader can use", f);
        fclose(f);
    }
    int sfd = open(path, O_RDWR);
    TS_CHECK(sfd >= 0);
    TS_CHECK_STATUS(ts__tile_cache_seal(sfd, key), TS_OK);
    if (sfd >= 0) close(sfd);
    TS_CHECK(ts__tile_cache_valid(path, key));
    k = compile_in(ts_t_, k_axpy, dir);
    if (k) {
        ts_tile_kernel_info_get(k, &info);
        TS_CHECK(!info.cache_hit);
        TS_CHECK_EQ_INT(run_axpy(k, -3.5f, 1, false), 0);
    }
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* ---- two processes ---- */

TS_TEST(tile_jit_two_processes_same_module) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    /* a module no other test compiles, so both processes miss */
    char src[2048];
    snprintf(src, sizeof src, "// two processes %d\n%s", (int)getpid(), k_axpy);
    ts_tile_options o = {.cache_dir = dir};
    pid_t pid = fork();
    TS_CHECK(pid >= 0);
    if (pid == 0) {
        ts_tile_kernel *k = NULL;
        int rc = ts_tile_compile(src, &o, &k) == TS_OK && run_axpy(k, 1.0f, 5, false) == 0 ? 0 : 1;
        ts_tile_kernel_release(k);
        _exit(rc);
    }
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    if (k) TS_CHECK_EQ_INT(run_axpy(k, 1.0f, 5, true), 0);
    ts_tile_kernel_release(k);
    int st = 0;
    if (pid > 0) {
        waitpid(pid, &st, 0);
        TS_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status %d)", st);
    }
    int nso, ntmp;
    count_entries(dir, &nso, &ntmp);
    TS_CHECK_EQ_INT(nso, 1);
    TS_CHECK_EQ_INT(ntmp, 0);
    /* and a third compile is a hit on whichever object won */
    k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    if (k) {
        ts_tile_kernel_info info;
        ts_tile_kernel_info_get(k, &info);
        TS_CHECK(info.cache_hit);
        TS_CHECK_EQ_INT(run_axpy(k, -1.0f, 0, false), 0);
    }
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* ---- failures ---- */

TS_TEST(tile_jit_compiler_failure_message) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    char cc[128];
    snprintf(cc, sizeof cc, "%s/fake-cc", dir);
    FILE *f = fopen(cc, "w");
    TS_CHECK(f != NULL);
    if (!f) return;
    fputs("#!/bin/sh\necho \"fake-cc: error: the optimiser is on strike\" >&2\nexit 3\n", f);
    fclose(f);
    chmod(cc, 0755);
    char *log = NULL;
    ts_tile_options o = {.cache_dir = dir, .cc = cc, .log = &log};
    ts_tile_kernel *k = (ts_tile_kernel *)1;
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k), TS_ERR_INTERNAL);
    TS_CHECK(k == NULL);
    TS_CHECK_MSG(strstr(ts_last_error(), "exit 3") && strstr(ts_last_error(), "the optimiser is on strike"),
                 "message: %s", ts_last_error());
    TS_CHECK(log && strstr(log, "the optimiser is on strike"));
    ts_tile_free(log);
    log = NULL;
    int nso, ntmp;
    count_entries(dir, &nso, &ntmp);
    TS_CHECK_EQ_INT(nso, 0);
    TS_CHECK_EQ_INT(ntmp, 0);

    /* missing compilers, by path and by name */
    o.cc = "/nonexistent/dir/cc";
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "/nonexistent/dir/cc") != NULL);
    ts_tile_free(log);
    log = NULL;
    o.cc = "no-such-compiler-ts";
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, &k), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "no-such-compiler-ts") != NULL);
    ts_tile_free(log);
    log = NULL;

    /* a program error: the tile diagnostics, no compiler run */
    o.cc = NULL;
    TS_CHECK_STATUS(ts_tile_compile("kernel k(x: tensor<f32, [N]>) { launch (N) as (b) { y = 1; } }", &o, &k),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(log && strstr(log, "1:") && strstr(log, "error:"));
    ts_tile_free(log);
    log = NULL;
    TS_CHECK_STATUS(ts_tile_compile("const A = 1;", &o, &k), TS_ERR_INVALID_ARGUMENT);
    ts_tile_free(log);
    /* a cache directory others can write is refused: its entries would be loaded as code */
    char shared[128];
    snprintf(shared, sizeof shared, "%s/shared", dir);
    mkdir(shared, 0700);
    char sub[160];
    snprintf(sub, sizeof sub, "%s/tile-jit", shared);
    mkdir(sub, 0777);
    chmod(sub, 0777);
    ts_tile_options os = {.cache_dir = shared};
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &os, &k), TS_ERR_IO);
    TS_CHECK(strstr(ts_last_error(), "not writable by others") != NULL);
    TS_CHECK_STATUS(ts_tile_compile(NULL, &o, &k), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_tile_compile(k_axpy, &o, NULL), TS_ERR_NULL_POINTER);
    rm_tree(dir);
}

TS_TEST(tile_jit_launch_argument_checks) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    static const char two[] =
        "kernel fill8(y: tensor<i8, [N]>, v: i8) {\n"
        "    launch (N) as (i) { y[i] = v; }\n"
        "}\n"
        "kernel fillu(y: tensor<u8, [N]>, v: u64, d: f64) {\n"
        "    launch (N) as (i) { y[i] = cast<u8>(v + cast<u64>(d)); }\n"
        "}\n";
    ts_tile_kernel *k = compile_in(ts_t_, two, dir);
    if (!k) {
        rm_tree(dir);
        return;
    }
    int8_t y[5] = {0};
    ts_tensor ty = ts_tensor_1d(y, TS_I8, 5);
    ts_tile_arg a[3] = {ts_tile_arg_tensor(&ty), ts_tile_arg_i64(-128), ts_tile_arg_f64(0)};
    TS_CHECK_STATUS(ts_tile_launch(k, NULL, a, 2), TS_ERR_INVALID_ARGUMENT); /* two kernels */
    TS_CHECK_STATUS(ts_tile_launch(k, "nope", a, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "nope") != NULL);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 3), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "takes 2 arguments") != NULL);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_OK);
    for (int i = 0; i < 5; i++) TS_CHECK_EQ_INT(y[i], -128);
    a[1] = ts_tile_arg_i64(128);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "(v)") && strstr(ts_last_error(), "does not fit i8"));
    a[1] = ts_tile_arg_f64(1.0);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "must be an i64 or u64") != NULL);
    a[0] = ts_tile_arg_i64(0);
    a[1] = ts_tile_arg_i64(1);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "(y) must be a tensor") != NULL);
    /* the generated wrapper's own checks: dtype and NULL data, named */
    uint8_t u[4] = {0};
    ts_tensor tu = ts_tensor_1d(u, TS_U8, 4);
    a[0] = ts_tile_arg_tensor(&tu);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_ERR_DTYPE);
    a[0] = ts_tile_arg_tensor(NULL);
    TS_CHECK_STATUS(ts_tile_launch(k, "fill8", a, 2), TS_ERR_NULL_POINTER);
    for (int i = 0; i < 5; i++) TS_CHECK_EQ_INT(y[i], -128);
    /* u64 beyond INT64_MAX, f64 to u64 */
    a[0] = ts_tile_arg_tensor(&tu);
    a[1] = ts_tile_arg_u64(UINT64_MAX - 1);
    a[2] = ts_tile_arg_f64(9.0);
    TS_CHECK_STATUS(ts_tile_launch(k, "fillu", a, 3), TS_OK);
    for (int i = 0; i < 4; i++) TS_CHECK_EQ_INT(u[i], 7); /* (2^64 - 2 + 9) mod 2^64 = 7 */
    a[1] = ts_tile_arg_i64(-1);
    TS_CHECK_STATUS(ts_tile_launch(k, "fillu", a, 3), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_tile_launch(NULL, "fillu", a, 3), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_tile_launch(k, "fillu", NULL, 3), TS_ERR_NULL_POINTER);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* A check and a let written inside a macro at kernel level reach the wrapper (the expansion is
 * a nested block there): the check refuses with its message, outputs untouched; the let's value
 * is the one the launch sees. */
TS_TEST(tile_jit_kernel_level_macro_check) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    static const char src[] =
        "macro need_two(v) {\n"
        "    let half = v / 2;\n"
        "    check(half > 0, \"n must be at least 2\");\n"
        "}\n"
        "kernel addn(x: tensor<f32, [N]>, n: i64) {\n"
        "    need_two(n);\n"
        "    launch (N) as (b) { x[b] = x[b] + cast<f32>(n); }\n"
        "}\n";
    ts_tile_kernel *k = compile_in(ts_t_, src, dir);
    if (!k) {
        rm_tree(dir);
        return;
    }
    float x[3] = {1, 2, 3};
    ts_tensor tx = ts_tensor_1d(x, TS_F32, 3);
    ts_tile_arg a[2] = {ts_tile_arg_tensor(&tx), ts_tile_arg_i64(1)};
    TS_CHECK_STATUS(ts_tile_launch(k, "addn", a, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "n must be at least 2") != NULL);
    TS_CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3);
    a[1] = ts_tile_arg_i64(2);
    TS_CHECK_STATUS(ts_tile_launch(k, "addn", a, 2), TS_OK);
    TS_CHECK(x[0] == 3 && x[1] == 4 && x[2] == 5);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* A macro may hold a launch (expanded in place at the kernel's top level): two launches from
 * two calls of one macro, in order, the second reading what the first wrote. */
TS_TEST(tile_jit_launch_in_macro) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    static const char src[] =
        "macro scale_into(src, dst, f) {\n"
        "    check(f != 0.0, \"factor must not be zero\");\n"
        "    launch (N) as (b) { dst[b] = src[b] * f; }\n"
        "}\n"
        "kernel twice(x: tensor<f32, [N]>, y: tensor<f32, [N]>, z: tensor<f32, [N]>) {\n"
        "    scale_into(x, y, 2.0);\n"
        "    scale_into(y, z, 3.0);\n"
        "}\n";
    ts_tile_kernel *k = compile_in(ts_t_, src, dir);
    if (!k) {
        rm_tree(dir);
        return;
    }
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0}, z[5] = {0};
    ts_tensor tx = ts_tensor_1d(x, TS_F32, 5), ty = ts_tensor_1d(y, TS_F32, 5), tz = ts_tensor_1d(z, TS_F32, 5);
    ts_tile_arg a[3] = {ts_tile_arg_tensor(&tx), ts_tile_arg_tensor(&ty), ts_tile_arg_tensor(&tz)};
    TS_CHECK_STATUS(ts_tile_launch(k, "twice", a, 3), TS_OK);
    for (int i = 0; i < 5; i++) TS_CHECK(y[i] == 2.0f * x[i] && z[i] == 6.0f * x[i]);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* Grids of 2 and 3 dimensions visit every block exactly once (the launch counts block
 * coordinates up, last fastest; a carry into the first used to happen on every wrap of the
 * last), whatever the split over threads. */
TS_TEST(tile_jit_grid_visits_every_block_once) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    static const char src[] =
        "kernel grid3(out: tensor<i32, [A, B, C]>) {\n"
        "    launch (A, B, C) as (a, b, c) { atomic_add(out[a, b, c], cast<i32>(1 + a * 100 + b * 10 + c)); }\n"
        "}\n"
        "kernel grid2(out: tensor<i32, [A, B]>) {\n"
        "    launch (A, B) as (a, b) { atomic_add(out[a, b], cast<i32>(1)); }\n"
        "}\n";
    ts_tile_kernel *k = compile_in(ts_t_, src, dir);
    if (!k) {
        rm_tree(dir);
        return;
    }
    const int saved = ts_get_num_threads();
    for (int th = 1; th <= 3; th++) {
        (void)ts_set_num_threads(th);
        static const int dims[3][3] = {{3, 5, 4}, {2, 2, 1}, {4, 3, 1}};
        for (int d = 0; d < 3; d++) {
            const int A = dims[d][0], B = dims[d][1], C = dims[d][2];
            int32_t o3[60] = {0};
            ts_tensor t3 = ts_tensor_3d(o3, TS_I32, A, B, C);
            ts_tile_arg a3 = ts_tile_arg_tensor(&t3);
            TS_CHECK_STATUS(ts_tile_launch(k, "grid3", &a3, 1), TS_OK);
            for (int a = 0; a < A; a++)
                for (int b = 0; b < B; b++)
                    for (int c = 0; c < C; c++)
                        TS_CHECK_MSG(o3[(a * B + b) * C + c] == 1 + a * 100 + b * 10 + c, "grid %dx%dx%d block (%d,%d,%d): %d",
                                     A, B, C, a, b, c, o3[(a * B + b) * C + c]);
        }
        int32_t o2[7][3] = {{0}};
        ts_tensor t2 = ts_tensor_2d(o2, TS_I32, 7, 3);
        ts_tile_arg a2 = ts_tile_arg_tensor(&t2);
        TS_CHECK_STATUS(ts_tile_launch(k, "grid2", &a2, 1), TS_OK);
        for (int a = 0; a < 7; a++)
            for (int b = 0; b < 3; b++) TS_CHECK_EQ_INT(o2[a][b], 1);
    }
    (void)ts_set_num_threads(saved);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* The compiler's log of a module with 64-byte vectors (i64 at 8 lanes) holds no note about the
 * vector-passing ABI (-Wno-psabi: no vector crosses the module's boundary). */
TS_TEST(tile_jit_log_has_no_psabi_note) {
    static const char src[] =
        "kernel k(x: tensor<i64, [N]>) {\n"
        "    launch (ceildiv(N, 64)) as (b) {\n"
        "        tile t: i64[64];\n"
        "        copy(x[b * 64], t);\n"
        "        for i in parallel(64) { t[i] = t[i] * 3; }\n"
        "        copy(t, x[b * 64]);\n"
        "    }\n"
        "}\n";
    for (int f = 0; f < 2; f++) {
        char *log = NULL;
        ts_tile_kernel *k = NULL;
        ts_tile_options o = {.flags = TS_TILE_JIT_NO_CACHE | (f ? TS_TILE_JIT_LANES16 : 0), .log = &log};
        TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
        TS_CHECK_MSG(log && !strstr(log, "ABI for passing"), "log: %.300s", log ? log : "(null)");
        ts_tile_free(log);
        ts_tile_kernel_release(k);
    }
}
