/* `tilestack demo --selftest`: the runner's pure pieces on synthetic input (the CLI's sources
 * are not linked into tilestack_tests; scripts/check_demo.sh runs this): option errors name
 * their option, TPS@TPOT selection, percentiles, and the SVG writer's output is well formed
 * and carries every point. */
#include "demo.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_pass, g_fail;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (cond) g_pass++;                                                                   \
        else {                                                                                \
            g_fail++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
        }                                                                                     \
    } while (0)

static int parse_str(const char *line, ts__demo_opts *o, char *err, size_t cap) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line);
    char *argv[32];
    int argc = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t && argc < 32; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    return ts__demo_parse(argc, argv, o, err, cap);
}

static void test_options(void) {
    static const struct { const char *line, *needle; } bad[] = {
        {"--batch 0", "--batch"},          {"--batch x", "--batch"},
        {"--ranks -1", "--ranks"},         {"--steps", "needs a value"},
        {"--context 1.5", "--context"},    {"--sampling topk:0", "--sampling"},
        {"--sampling nucleus", "--sampling"}, {"--tpot-ms 25,,x", "--tpot-ms"},
        {"--tpot-ms -3", "--tpot-ms"},     {"--frobnicate", "unknown option"},
        {"--quick=1", "takes no value"},   {"--threads 0", "--threads"},
        {"--frob=1", "unknown option"},
        {"--config a.json --weights b.bin", "--weights"},
        {"--check --sweep", "--check"},    {"--timeout 0", "--timeout"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ts__demo_opts o;
        char err[512];
        const int rc = parse_str(bad[i].line, &o, err, sizeof err);
        CHECK(rc == 2 && strstr(err, bad[i].needle), "'%s' -> rc %d, '%s' (want '%s')",
              bad[i].line, rc, err, bad[i].needle);
    }
    ts__demo_opts o;
    char err[512];
    CHECK(parse_str("--batch=16 --ranks 4 --sampling topk:40 --tpot-ms 10,20.5 --plot p.svg "
                    "--unfused --threads 3",
                    &o, err, sizeof err) == 0,
          "good line rejected: %s", err);
    CHECK(o.batch == 16 && o.batch_set && o.ranks == 4 && o.topk == 40 && o.n_tpot == 2 &&
              o.tpot_ms[1] == 20.5 && o.sweep && o.plot_path && !strcmp(o.plot_path, "p.svg") &&
              o.unfused && o.threads == 3,
          "values not parsed");
    CHECK(parse_str("--help", &o, err, sizeof err) == 1, "--help");
    CHECK(parse_str("", &o, err, sizeof err) == 0 && !strcmp(o.model, "dsv4-mini") &&
              o.topk == 1 && o.n_tpot == 4,
          "defaults");
    ts__demo_apply_defaults(&o);
    CHECK(o.batch == 8 && o.context == 2048 && o.steps == 100 && o.warmup == 10, "default sizes");
    parse_str("--quick --steps 7", &o, err, sizeof err);
    ts__demo_apply_defaults(&o);
    CHECK(o.steps == 7 && o.warmup == 2 && o.context == 1024, "--quick keeps explicit --steps");
    parse_str("--plot x.svg", &o, err, sizeof err);
    ts__demo_apply_defaults(&o);
    CHECK(o.sweep && o.batch == 32, "a sweep goes up to B = 32 by default (got %lld)",
          (long long)o.batch);
    parse_str("--sweep --batch 4", &o, err, sizeof err);
    ts__demo_apply_defaults(&o);
    CHECK(o.batch == 4, "--batch caps the sweep");
}

static void test_selection(void) {
    /* tps rises with B until B = 8, then falls; TPOT rises throughout */
    const ts__demo_point p[] = {
        {1, 30, 31, 33.3}, {2, 35, 36, 57.1}, {4, 48, 50, 83.3},
        {8, 80, 90, 100.0}, {16, 190, 200, 84.2}, {32, 380, 400, 84.2}};
    const int n = 6;
    CHECK(ts__demo_best_under(p, n, 29.9) == -1, "nothing under 29.9 ms");
    CHECK(ts__demo_best_under(p, n, 30) == 0, "limit equal to p50 counts");
    CHECK(ts__demo_best_under(p, n, 50) == 2, "X = 50 -> B = 4");
    CHECK(ts__demo_best_under(p, n, 100) == 3, "X = 100 -> B = 8");
    CHECK(ts__demo_best_under(p, n, 1000) == 3, "X large -> the best tps (B = 8), not the largest B");
    /* equal tps: the smaller B (lower TPOT for the same throughput) */
    const ts__demo_point q[] = {{16, 190, 200, 84.2}, {32, 380, 400, 84.2}};
    CHECK(ts__demo_best_under(q, 2, 1000) == 0, "tie -> smaller B");
    const ts__demo_point nanp[] = {{1, 0.0 / 0.0, 0, 50}};
    CHECK(ts__demo_best_under(nanp, 1, 1000) == -1, "NaN TPOT never qualifies");
    const double v[] = {5, 1, 4, 2, 3};
    CHECK(ts__demo_percentile(v, 5, 50) == 3, "p50 of 1..5");
    CHECK(ts__demo_percentile(v, 5, 99) == 5, "p99 of 1..5");
    CHECK(ts__demo_percentile(v, 5, 0) == 1, "p0");
}

/* A small XML well-formedness check for what the writer emits: one prolog, elements properly
 * nested and closed, attribute values quoted, no raw '&' or '<' in text. Returns the number of
 * elements named `count_name` (or -1 if malformed). */
static int xml_check(const char *s, const char *count_name) {
    char stack[64][32];
    int depth = 0, count = 0, roots = 0;
    if (!strncmp(s, "<?xml", 5)) {
        s = strstr(s, "?>");
        if (!s) return -1;
        s += 2;
    }
    while (*s) {
        if (*s == '&') {
            const char *e = strchr(s, ';');
            if (!e || e - s > 6) return -1;
            s = e + 1;
            continue;
        }
        if (*s != '<') {
            if (depth == 0 && !strchr(" \t\r\n", *s)) return -1;
            s++;
            continue;
        }
        const bool close = s[1] == '/';
        const char *nm = s + (close ? 2 : 1);
        size_t len = strcspn(nm, " \t\n/>");
        if (len == 0 || len >= 32) return -1;
        const char *p = nm + len;
        /* attributes: name="value" */
        while (*p && *p != '>' && *p != '/') {
            if (strchr(" \t\n", *p)) {
                p++;
                continue;
            }
            const size_t an = strcspn(p, "= \t\n>");
            if (an == 0 || p[an] != '=' || p[an + 1] != '"') return -1;
            const char *q = strchr(p + an + 2, '"');
            if (!q) return -1;
            for (const char *c = p + an + 2; c < q; c++)
                if (*c == '<') return -1;
            p = q + 1;
        }
        const bool self = *p == '/';
        if (self) p++;
        if (*p != '>') return -1;
        if (close) {
            if (depth == 0 || strlen(stack[depth - 1]) != len ||
                strncmp(stack[depth - 1], nm, len))
                return -1;
            depth--;
        } else {
            if (depth == 0) roots++;
            if (len == strlen(count_name) && !strncmp(nm, count_name, len)) count++;
            if (!self) {
                if (depth == 64) return -1;
                memcpy(stack[depth], nm, len);
                stack[depth][len] = 0;
                depth++;
            }
        }
        s = p + 1;
    }
    return depth == 0 && roots == 1 ? count : -1;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b) {
        b[fread(b, 1, (size_t)n, f)] = 0;
    }
    fclose(f);
    return b;
}

static void test_svg(void) {
    CHECK(xml_check("<a><b x=\"1\"/></a>", "b") == 1, "checker accepts good XML");
    CHECK(xml_check("<a><b></a></b>", "b") == -1, "checker rejects bad nesting");
    CHECK(xml_check("<a>x & y</a>", "a") == -1, "checker rejects a raw &");
    CHECK(xml_check("<a x=1></a>", "a") == -1, "checker rejects an unquoted attribute");
    char path[] = "/tmp/ts_demo_svg_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    const ts__demo_point p[] = {{1, 30, 31, 33.3}, {2, 35, 36, 57.1}, {4, 48, 50, 83.3},
                                {8, 80, 90, 100.0}, {16, 190, 200, 84.2}};
    const double x[] = {25, 50, 100, 200, 10000};
    CHECK(ts__demo_write_svg(path, "dsv4-mini <R = 2> & \"L\"", p, 5, x, 5) == 0, "write");
    char *s = slurp(path);
    CHECK(s != NULL, "read back");
    if (s) {
        const int circles = xml_check(s, "circle");
        /* 5 points + one ring per limit that has a best point and lies in the plot (50, 100,
         * 200; 25 has none, 10000 is beyond the axis) */
        CHECK(circles == 5 + 3, "svg well formed with 8 circles (got %d)", circles);
        CHECK(strstr(s, "B=16") && strstr(s, "B=1<") && strstr(s, "X = 200 ms"), "labels");
        CHECK(strstr(s, "&lt;R = 2&gt; &amp; &quot;L&quot;") != NULL, "title escaped");
        CHECK(!strstr(s, "X = 10000 ms"), "a limit far beyond the data is left out");
        CHECK(!strstr(s, "nan") && !strstr(s, "inf"), "no non-finite coordinates");
        free(s);
    }
    /* one point, no limits: still a valid file */
    CHECK(ts__demo_write_svg(path, "one", p, 1, NULL, 0) == 0, "write one point");
    s = slurp(path);
    CHECK(s && xml_check(s, "circle") == 1, "one-point svg");
    free(s);
    remove(path);
    CHECK(ts__demo_write_svg("/nonexistent-dir/x.svg", "t", p, 1, x, 1) == -1,
          "unwritable path reported");
}

int ts__demo_selftest(void) {
    test_options();
    test_selection();
    test_svg();
    printf("demo selftest: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
