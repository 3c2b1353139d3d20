/* Untrusted input to the tile JIT (issue 18): text that reaches generated C (check messages,
 * file names) cannot inject code, messages print exactly as written, and the disk cache loads
 * only what was built for the key asked for, from a directory only this user can change.
 * The injection tests compile and launch the kernel and prove the injected code did not run:
 * its marker file is not created. Every test uses its own directory under /tmp. */
#include "ts_test.h"
#include "tilestack/tile.h"
#include "tile/tile_internal.h"
#include "tile/tile_jit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
    snprintf(buf, n, "/tmp/ts_tile_sec_XXXXXX");
    if (!mkdtemp(buf)) buf[0] = 0;
}

static bool exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

/* `path` as a C compound literal of character codes: injected code needs no quote, which
 * the emitter escapes even on the unfixed main. */
static void char_codes(char *out, size_t n, const char *path) {
    size_t k = (size_t)snprintf(out, n, "(char[]){");
    for (const char *p = path; *p && k < n; p++) k += (size_t)snprintf(out + k, n - k, "%d,", (unsigned char)*p);
    if (k < n) snprintf(out + k, n - k, "0}");
}

/* C that creates `marker` when it runs. */
static void marker_code(char *out, size_t n, const char *marker) {
    char p[512], w[32];
    char_codes(p, sizeof p, marker);
    char_codes(w, sizeof w, "w");
    snprintf(out, n, "fclose(fopen(%s, %s));", p, w);
}

/* One kernel: a kernel-level check with message `msg` (already escaped for a tile string),
 * then a launch writing 1 to x. */
static void check_kernel(char *out, size_t n, const char *msg) {
    snprintf(out, n,
             "kernel k(x: tensor<f32, [N]>) {\n"
             "    check(N > 0, \"%s\");\n"
             "    launch (N) as (b) { x[b] = 1.0; }\n"
             "}\n",
             msg);
}

static ts_status launch_n(const ts_tile_kernel *k, float *x, int64_t n) {
    ts_tensor t = ts_tensor_1d(x, TS_F32, n);
    ts_tile_arg a = ts_tile_arg_tensor(&t);
    return ts_tile_launch(k, "k", &a, 1);
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !memcmp(s + a - b, tail, b);
}

/* ---- the escaping function ---- */

static char *esc(const char *s, ts__tile_esc mode) {
    static char out[1024];
    ts__tile_buf b = {0};
    ts__tile_buf_escape(&b, s, mode);
    snprintf(out, sizeof out, "%s", b.data ? b.data : "");
    ts__tile_buf_free(&b);
    return out;
}

TS_TEST(tile_security_escape_function) {
    /* trigraphs: every question mark escaped, so no trigraph can form */
    TS_CHECK(!strcmp(esc("what?\?)", TS__ESC_STRING), "what\\?\\?)"));
    TS_CHECK(!strcmp(esc("?\?/\"); x; //", TS__ESC_STRING), "\\?\\?/\\\"); x; //"));
    TS_CHECK(!strcmp(esc("?\?=?\?(?\?<?\?'?\?!?\?-?\?>", TS__ESC_STRING), "\\?\\?=\\?\\?(\\?\\?<\\?\\?'\\?\\?!\\?\\?-\\?\\?>"));
    /* quotes, backslashes, newlines */
    TS_CHECK(!strcmp(esc("a\"b\\c\nd", TS__ESC_STRING), "a\\\"b\\\\c\\nd"));
    /* control bytes and non-ASCII: three-digit octal, so a following digit stays itself */
    TS_CHECK(!strcmp(esc("\t1\r\x1b" "7\x7f\xc3\xa9", TS__ESC_STRING), "\\0111\\015\\0337\\177\\303\\251"));
    /* `%`: kept in a literal printed with "%s", doubled in a format */
    TS_CHECK(!strcmp(esc("50%", TS__ESC_STRING), "50%"));
    TS_CHECK(!strcmp(esc("50%", TS__ESC_FORMAT), "50%%"));
    /* comments: no '*' at all, so no closing star-slash */
    TS_CHECK(!strcmp(esc("a*/b/*c", TS__ESC_COMMENT), "a\\052/b/\\052c"));
    TS_CHECK(!strcmp(esc("a*/b", TS__ESC_STRING), "a*/b"));
    /* whatever the input, the output has no raw newline, no two question marks in a row, no comment end in
     * comment mode, and only printable ASCII */
    char all[256];
    for (int i = 1; i < 256; i++) all[i - 1] = (char)i;
    all[255] = 0;
    for (int mode = 0; mode < 3; mode++) {
        ts__tile_buf b = {0};
        ts__tile_buf_escape(&b, all, (ts__tile_esc)mode);
        TS_CHECK(b.data && !strstr(b.data, "?\?") && !strchr(b.data, '\n'));
        if (mode == TS__ESC_COMMENT) TS_CHECK(!strstr(b.data, "*/"));
        for (size_t i = 0; b.data && i < b.len; i++) TS_CHECK_MSG(b.data[i] >= 0x20 && b.data[i] < 0x7f, "byte %zu", i);
        /* every '"' is escaped: the literal cannot end early */
        for (size_t i = 0; b.data && i < b.len; i++)
            if (b.data[i] == '"') {
                size_t bs = 0;
                while (bs < i && b.data[i - 1 - bs] == '\\') bs++;
                TS_CHECK_MSG(bs % 2 == 1, "unescaped quote at %zu", i);
            }
        ts__tile_buf_free(&b);
    }
}

/* ---- injection through a check message ---- */

TS_TEST(tile_security_trigraph_message_no_injection) {
    char dir[64], marker[128], code[1024], msg[1200], src[2048];
    tmp_dir(dir, sizeof dir);
    TS_CHECK(dir[0]);
    snprintf(marker, sizeof marker, "%s/ran", dir);
    marker_code(code, sizeof code, marker);
    /* two question marks and a slash are a backslash under -std=c11 (a trigraph): on the
     * unfixed emitter it escaped the backslash escaping the quote that follows, which then
     * closed the literal */
    snprintf(msg, sizeof msg, "?\?/\\\"); %s //", code);
    check_kernel(src, sizeof src, msg);
    ts_tile_options o = {.cache_dir = dir, .filename = "msg.tile"};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    float x[4] = {0};
    if (k) {
        TS_CHECK_STATUS(launch_n(k, x, 4), TS_OK);
        TS_CHECK(x[0] == 1.0f && x[3] == 1.0f);
        TS_CHECK_STATUS(launch_n(k, x, 0), TS_ERR_INVALID_ARGUMENT);
        char want[1100];
        snprintf(want, sizeof want, "?\?/\"); %s //", code);
        TS_CHECK_MSG(ends_with(ts_last_error(), want), "message: %s", ts_last_error());
    }
    TS_CHECK_MSG(!exists(marker), "injected code ran: %s exists", marker);
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* Messages at kernel level (a ts__fail format) and inside a launch (a table printed with
 * "%s") print exactly as written: no trigraph replaced, no '%' doubled or eaten. */
TS_TEST(tile_security_messages_print_as_written) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    static const char src[] =
        "kernel k(x: tensor<f32, [N]>) {\n"
        "    check(N > 1, \"what?\?) 50% ?\?/ ?\?= ?\?' \\\\ \\\" */ /* %s %n end\");\n"
        "    launch (N) as (b) {\n"
        "        check(N > 2, \"in launch: what?\?) 50% ?\?! \\\\n %d\");\n"
        "        x[b] = 1.0;\n"
        "    }\n"
        "}\n";
    ts_tile_options o = {.cache_dir = dir, .filename = "m.tile"};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    if (k) {
        float x[4] = {0};
        TS_CHECK_STATUS(launch_n(k, x, 1), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_MSG(ends_with(ts_last_error(), "m.tile:2:5: what?\?) 50% ?\?/ ?\?= ?\?' \\ \" */ /* %s %n end"), "message: %s",
                     ts_last_error());
        TS_CHECK_STATUS(launch_n(k, x, 2), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_MSG(ends_with(ts_last_error(), "in launch: what?\?) 50% ?\?! \\n %d"), "message: %s", ts_last_error());
        TS_CHECK_MSG(strstr(ts_last_error(), "m.tile:4:9") != NULL, "message: %s", ts_last_error());
        TS_CHECK_STATUS(launch_n(k, x, 3), TS_OK);
    }
    ts_tile_kernel_release(k);
    rm_tree(dir);
}

/* ---- injection through the file name ---- */

TS_TEST(tile_security_file_name_no_injection) {
    char dir[64], marker[128], code[1024];
    tmp_dir(dir, sizeof dir);
    snprintf(marker, sizeof marker, "%s/ran", dir);
    marker_code(code, sizeof code, marker);
    static const char src[] =
        "kernel k(x: tensor<f32, [N]>) {\n"
        "    check(N > 0, \"need N\");\n"
        "    launch (N) as (b) { x[b] = 1.0; }\n"
        "}\n";
    char names[6][1200];
    /* into the message's literal (a quote closes it on the unfixed main) */
    snprintf(names[0], sizeof names[0], "f\"); %s //", code);
    /* out of the header comment, into a constructor that runs at dlopen */
    snprintf(names[1], sizeof names[1], "*/ __attribute__((constructor)) static void tspwn(void) { %s } /*", code);
    snprintf(names[2], sizeof names[2], "a\"b.tile");
    snprintf(names[3], sizeof names[3], "dir?\?/\\name\\.tile");
    snprintf(names[4], sizeof names[4], "two\nlines */ \x01%%d.tile");
    snprintf(names[5], sizeof names[5], "\xc3\xa9t\xc3\xa9 ?\?= 100%%.tile");
    for (int i = 0; i < 6; i++) {
        ts_tile_options o = {.cache_dir = dir, .filename = names[i]};
        ts_tile_kernel *k = NULL;
        TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
        if (!k) continue;
        float x[2] = {0};
        TS_CHECK_STATUS(launch_n(k, x, 2), TS_OK);
        TS_CHECK(x[1] == 1.0f);
        TS_CHECK_STATUS(launch_n(k, x, 0), TS_ERR_INVALID_ARGUMENT);
        char want[1400];
        snprintf(want, sizeof want, "failed at %.1200s:2:5: need N", names[i]);
        TS_CHECK_MSG(ends_with(ts_last_error(), want), "name %d: message: %s", i, ts_last_error());
        ts_tile_kernel_release(k);
        TS_CHECK_MSG(!exists(marker), "name %d: injected code ran", i);
    }
    /* the translator (tilestack tilec) emits the same: the name only escaped */
    char *out = NULL;
    TS_CHECK_STATUS(ts_tile_translate(src, strlen(src), names[1], TS_TILE_EMIT_C, NULL, &out, NULL), TS_OK);
    /* the header comment ends where the emitter ends it, after its second line */
    const char *end = out ? strstr(out, "*/") : NULL, *second = out ? strstr(out, "Compile with") : NULL;
    TS_CHECK(end && second && end > second);
    ts_tile_free(out);
    rm_tree(dir);
}

/* ---- a constant divided by zero ---- */

TS_TEST(tile_security_const_division_by_zero_named) {
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"const A = 1 / 0;\n", "1:13: error: division by zero in the value of constant 'A' (line 1)"},
        {"const B = 4;\nconst A = 7 + 5 % (B - 4);\n", "2:17: error: modulo by zero"},
        {"const A = (1 << 62) * 4;\n", "integer overflow in the value of constant 'A'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, *diag = NULL;
        TS_CHECK_STATUS(ts_tile_translate(cases[i].src, strlen(cases[i].src), "c.tile", TS_TILE_EMIT_C, NULL, &out, &diag),
                        TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_MSG(diag && strstr(diag, cases[i].want), "case %zu: %s", i, diag ? diag : "(null)");
        ts_tile_free(out);
        ts_tile_free(diag);
    }
    /* a constant that is simply not an integer keeps its own message */
    char *diag = NULL, *out = NULL;
    const char *s = "kernel k(x: tensor<f32, [N]>) { launch (N) as (b) { x[b] = 1.0; } }\nconst A = N;\n";
    ts_tile_translate(s, strlen(s), "c.tile", TS_TILE_EMIT_C, NULL, &out, &diag);
    TS_CHECK(diag && !strstr(diag, "division"));
    ts_tile_free(out);
    ts_tile_free(diag);
}

/* ---- the cache ---- */

static const char k_one[] = "kernel k(x: tensor<f32, [N]>) { launch (N) as (b) { x[b] = 1.0; } }\n";
static const char k_two[] = "kernel k(x: tensor<f32, [N]>) { launch (N) as (b) { x[b] = 2.0; } }\n";

/* Compile src with the cache in dir; x[0] after a launch, or -1. *hit, *path (if non-NULL). */
static float compile_run(const char *src, const char *dir, bool *hit, char *path, size_t np, ts_status *st) {
    ts_tile_options o = {.cache_dir = dir};
    ts_tile_kernel *k = NULL;
    *st = ts_tile_compile(src, &o, &k);
    if (!k) return -1;
    ts_tile_kernel_info info;
    ts_tile_kernel_info_get(k, &info);
    if (hit) *hit = info.cache_hit;
    if (path) snprintf(path, np, "%s", info.path);
    float x[3] = {0};
    float r = launch_n(k, x, 3) == TS_OK ? x[0] : -1;
    ts_tile_kernel_release(k);
    return r;
}

static int copy_file(const char *src, const char *dst) {
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    static unsigned char buf[4 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(dst);
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    if (fd < 0) return -1;
    int rc = write(fd, buf, n) == (ssize_t)n ? 0 : -1;
    close(fd);
    return rc;
}

TS_TEST(tile_security_cache_copied_or_linked_entry_is_a_miss) {
    char dir[64], p1[600], p2[600];
    tmp_dir(dir, sizeof dir);
    bool hit = true;
    ts_status st;
    TS_CHECK(compile_run(k_one, dir, &hit, p1, sizeof p1, &st) == 1.0f);
    TS_CHECK(compile_run(k_two, dir, &hit, p2, sizeof p2, &st) == 2.0f);
    TS_CHECK(strcmp(p1, p2) != 0);
    /* another kernel's valid entry copied under this key: a miss, rebuilt, the right code */
    TS_CHECK(copy_file(p2, p1) == 0);
    char key1[65];
    snprintf(key1, sizeof key1, "%.64s", strrchr(p1, '/') + 1); /* the name is <key>.so */
    TS_CHECK(!ts__tile_cache_valid(p1, key1));
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK_MSG(!hit, "a copied entry of another key was loaded as a hit");
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK(hit);
    /* linked: a symlink is never followed; the rebuild replaces the link, not its target */
    unlink(p1);
    TS_CHECK(symlink(p2, p1) == 0);
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK_MSG(!hit, "a symlinked entry was loaded as a hit");
    struct stat sb;
    TS_CHECK(lstat(p1, &sb) == 0 && S_ISREG(sb.st_mode));
    TS_CHECK(compile_run(k_two, dir, &hit, NULL, 0, &st) == 2.0f);
    TS_CHECK(hit);
    /* a hard link to the other entry: same check, same answer */
    unlink(p1);
    TS_CHECK(link(p2, p1) == 0);
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK(!hit);
    TS_CHECK(compile_run(k_two, dir, &hit, NULL, 0, &st) == 2.0f);
    rm_tree(dir);
}

TS_TEST(tile_security_cache_entry_owner_and_mode) {
    char dir[64], p1[600];
    tmp_dir(dir, sizeof dir);
    bool hit;
    ts_status st;
    TS_CHECK(compile_run(k_one, dir, &hit, p1, sizeof p1, &st) == 1.0f);
    /* entries are written owner-only, whatever the umask */
    struct stat sb;
    TS_CHECK(stat(p1, &sb) == 0 && !(sb.st_mode & 077));
    chmod(p1, 0666);
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == -1);
    TS_CHECK_EQ_INT(st, TS_ERR_IO);
    TS_CHECK_MSG(strstr(ts_last_error(), p1) && strstr(ts_last_error(), "writable by group or others"), "message: %s",
                 ts_last_error());
    chmod(p1, 0600);
    TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK(hit);
    if (geteuid() == 0) {
        /* another user's entry (only root can make one here) */
        TS_CHECK(chown(p1, 65534, 65534) == 0);
        TS_CHECK(compile_run(k_one, dir, &hit, NULL, 0, &st) == -1);
        TS_CHECK_EQ_INT(st, TS_ERR_IO);
        TS_CHECK_MSG(strstr(ts_last_error(), p1) && strstr(ts_last_error(), "owned by uid 65534"), "message: %s",
                     ts_last_error());
    }
    rm_tree(dir);
}

TS_TEST(tile_security_cache_directory_checks) {
    char dir[64], base[128], jit[160];
    tmp_dir(dir, sizeof dir);
    bool hit;
    ts_status st;
    /* a parent anyone can write: they could swap tile-jit for their own */
    snprintf(base, sizeof base, "%s/open", dir);
    mkdir(base, 0777);
    chmod(base, 0777);
    TS_CHECK(compile_run(k_one, base, &hit, NULL, 0, &st) == -1);
    TS_CHECK_EQ_INT(st, TS_ERR_IO);
    TS_CHECK_MSG(strstr(ts_last_error(), base) && strstr(ts_last_error(), "not writable by others"), "message: %s",
                 ts_last_error());
    /* sticky, like /tmp: fine */
    chmod(base, 01777);
    TS_CHECK(compile_run(k_one, base, &hit, NULL, 0, &st) == 1.0f);
    /* created 0700 */
    struct stat sb;
    snprintf(jit, sizeof jit, "%s/tile-jit", base);
    TS_CHECK(stat(jit, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    /* the cache directory itself: group-writable refused, a symlink refused */
    chmod(jit, 0770);
    TS_CHECK(compile_run(k_one, base, &hit, NULL, 0, &st) == -1);
    TS_CHECK_MSG(strstr(ts_last_error(), jit) != NULL, "message: %s", ts_last_error());
    chmod(jit, 0700);
    char other[160], lbase[160], ljit[200];
    snprintf(other, sizeof other, "%s/elsewhere", dir);
    snprintf(lbase, sizeof lbase, "%s/linked", dir);
    mkdir(other, 0700);
    mkdir(lbase, 0700);
    snprintf(ljit, sizeof ljit, "%s/tile-jit", lbase);
    TS_CHECK(symlink(other, ljit) == 0);
    TS_CHECK(compile_run(k_one, lbase, &hit, NULL, 0, &st) == -1);
    TS_CHECK_EQ_INT(st, TS_ERR_IO);
    TS_CHECK_MSG(strstr(ts_last_error(), "symlink"), "message: %s", ts_last_error());
    rm_tree(dir);
}

/* HOME unset: no silent fall-back to a guessable /tmp directory; XDG_CACHE_HOME is used when
 * set; TS_TILE_JIT_NO_CACHE needs no directory at all. In a child: the environment changes. */
TS_TEST(tile_security_cache_home_unset) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    pid_t pid = fork();
    TS_CHECK(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        unsetenv("HOME");
        unsetenv("TS_TILE_CACHE_DIR");
        unsetenv("XDG_CACHE_HOME");
        char guess[64];
        snprintf(guess, sizeof guess, "/tmp/tilestack-cache-%ld", (long)getuid());
        bool had_guess = exists(guess);
        ts_tile_kernel *k = NULL;
        if (ts_tile_compile(k_one, NULL, &k) != TS_ERR_IO || !strstr(ts_last_error(), "HOME is not set")) bad |= 1;
        if (!had_guess && exists(guess)) bad |= 2;
        ts_tile_kernel_release(k);
        k = NULL;
        ts_tile_options o = {.flags = TS_TILE_JIT_NO_CACHE};
        float x[3] = {0};
        if (ts_tile_compile(k_one, &o, &k) != TS_OK || launch_n(k, x, 3) != TS_OK || x[2] != 1.0f) bad |= 4;
        ts_tile_kernel_release(k);
        k = NULL;
        setenv("XDG_CACHE_HOME", dir, 1);
        char entry_dir[160];
        snprintf(entry_dir, sizeof entry_dir, "%s/tilestack/tile-jit", dir);
        if (ts_tile_compile(k_one, NULL, &k) != TS_OK || !exists(entry_dir)) bad |= 8;
        ts_tile_kernel_release(k);
        /* a relative XDG_CACHE_HOME is ignored, as the XDG spec asks */
        k = NULL;
        setenv("XDG_CACHE_HOME", "relative/cache", 1);
        if (ts_tile_compile(k_one, NULL, &k) != TS_ERR_IO) bad |= 16;
        ts_tile_kernel_release(k);
        _exit(bad);
    }
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    TS_CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child status %d (bits: 1 no error, 2 /tmp dir made, 4 NO_CACHE, 8 XDG, 16 relative XDG)",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    rm_tree(dir);
}

/* A cache path beginning with '-' never reaches the compiler as an option. */
TS_TEST(tile_security_cache_dash_path) {
    char dir[64];
    tmp_dir(dir, sizeof dir);
    int cwd = open(".", O_RDONLY | O_DIRECTORY);
    TS_CHECK(cwd >= 0 && chdir(dir) == 0);
    bool hit = true;
    char path[600];
    ts_status st;
    TS_CHECK(compile_run(k_one, "-cache", &hit, path, sizeof path, &st) == 1.0f);
    TS_CHECK_EQ_INT(st, TS_OK);
    TS_CHECK_MSG(path[0] == '/' && !strncmp(path, dir, strlen(dir)), "path %s", path);
    TS_CHECK(compile_run(k_one, "-cache", &hit, NULL, 0, &st) == 1.0f);
    TS_CHECK(hit);
    if (cwd >= 0) {
        TS_CHECK(fchdir(cwd) == 0);
        close(cwd);
    }
    rm_tree(dir);
}

/* The embedded headers are written for each build: a header directory edited in the cache
 * (the unfixed main reused <cache>/tile-jit/inc-<hash16> when present) is never compiled. */
TS_TEST(tile_security_cache_tampered_headers) {
    char dir[64], p[400];
    tmp_dir(dir, sizeof dir);
    static const char *const sub[] = {"", "/tile"};
    snprintf(p, sizeof p, "%s/tile-jit", dir);
    mkdir(p, 0700);
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/tile-jit/inc-%.16s%s", dir, ts__tile_cache_headers_hash(), sub[i]);
        mkdir(p, 0700);
    }
    snprintf(p, sizeof p, "%s/tile-jit/inc-%.16s/tile/tile_rt.h", dir, ts__tile_cache_headers_hash());
    FILE *f = fopen(p, "w");
    TS_CHECK(f != NULL);
    if (f) {
        fputs("#error tampered header compiled\n", f);
        fclose(f);
    }
    bool hit;
    ts_status st;
    TS_CHECK(compile_run(k_two, dir, &hit, NULL, 0, &st) == 2.0f);
    TS_CHECK_MSG(st == TS_OK, "status %d: %s", (int)st, ts_last_error());
    rm_tree(dir);
}

/* ---- tilec -o ---- */

/* The tilestack CLI beside this test binary, or NULL (tools not built). */
static const char *cli_path(void) {
    static char p[4096];
    ssize_t n = readlink("/proc/self/exe", p, sizeof p - 16);
    if (n <= 0) return NULL;
    p[n] = 0;
    char *s = strrchr(p, '/');
    if (!s) return NULL;
    strcpy(s + 1, "tilestack");
    return access(p, X_OK) == 0 ? p : NULL;
}

/* Run `tilestack tilec in -o out` (file size limit fsize bytes when > 0); the exit status. */
static int run_tilec(const char *cli, const char *in, const char *out, long fsize) {
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        if (fsize > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execl(cli, cli, "tilec", in, "-o", out, (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) < 0) return -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128;
}

static bool file_is(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

TS_TEST(tile_security_tilec_output_is_atomic) {
    const char *cli = cli_path();
    if (!cli) {
        printf("  (tilestack CLI not built: tilec -o not tested)\n");
        return;
    }
    char dir[64], in[128], out[128];
    tmp_dir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/k.tile", dir);
    snprintf(out, sizeof out, "%s/k.c", dir);
    FILE *f = fopen(in, "w");
    if (f) {
        fputs(k_one, f);
        fclose(f);
    }
    /* -o naming the input: refused, the source kept */
    TS_CHECK(run_tilec(cli, in, in, 0) != 0);
    TS_CHECK(file_is(in, k_one));
    f = fopen(in, "w"); /* the unfixed main replaced it: the next steps need the source */
    if (f) {
        fputs(k_one, f);
        fclose(f);
    }
    /* a write failing half way (ulimit -f): the previous output is intact */
    f = fopen(out, "w");
    if (f) {
        fputs("previous output\n", f);
        fclose(f);
    }
    TS_CHECK(run_tilec(cli, in, out, 1000) != 0);
    TS_CHECK_MSG(file_is(out, "previous output\n"), "the previous output was damaged");
    /* and a good run replaces it */
    TS_CHECK_EQ_INT(run_tilec(cli, in, out, 0), 0);
    TS_CHECK(!file_is(out, "previous output\n"));
    rm_tree(dir);
}
