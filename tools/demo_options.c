/* `tilestack demo` command line: every value is checked here, so a typo fails at once with the
 * option's name instead of minutes later inside a rank. */
#include "demo.h"
#include "core/atomic_file.h"
#include "tilestack/select.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void ts__demo_usage(FILE *f) {
    fprintf(f,
            "usage: tilestack demo [options]\n"
            "Decodes a DeepSeek-V4-style MoE model (docs/model.md) on R expert-parallel ranks and\n"
            "reports TPOT, tokens/s per rank, dispatch/combine traffic, expert load and a per-kernel\n"
            "breakdown against this machine's rooflines (docs/demo.md).\n\n"
            "model:\n"
            "  --model NAME        dsv4-mini (default) | dsv4-flash-layer | dsv4-tiny | dsv32-tiny\n"
            "  --model DIR         a DeepSeek-V4 checkpoint directory (config.json + safetensors,\n"
            "                      Hugging Face / DeepSeek release layout; docs/models.md); default\n"
            "                      1 rank (with --ranks R each rank maps only its experts)\n"
            "  --config FILE.json  a config file (docs/model.md §1 keys)\n"
            "  --attention v4|v32  override the config's attention (v32: V3.2 MLA + indexer,\n"
            "                      docs/model.md §8)\n"
            "  --weights FILE      weights (and config) from a file written by --save-weights\n"
            "  --save-weights FILE write the generated weights and exit\n"
            "run:\n"
            "  --ranks R           expert-parallel ranks (default 2 with MPI and mpirun, else 1)\n"
            "  --batch B           sequences per rank (default 8)\n"
            "  --context L         prefilled context per sequence (default 2048)\n"
            "  --steps N           timed steps (default 100; --quick 12)\n"
            "  --warmup W          untimed steps first (default 10; --quick 2)\n"
            "  --threads T         threads per rank (default cores / R)\n"
            "  --unfused           EP dispatch + grouped GEMMs + combine instead of MegaMoE\n"
            "  --sampling S        greedy (default) | topk:K\n"
            "  --timeout SEC       how long a rank waits for a peer before failing (default 60)\n"
            "  --quick             short run (CI)\n"
            "  --replay            after the timed steps, one untimed step that re-runs every\n"
            "                      idempotent kernel standalone (median of 5 after a warm-up),\n"
            "                      caches flushed before each run as in a DRAM-sized bench:\n"
            "                      the breakdown's standalone column (default on; off in --sweep)\n"
            "  --replay-warm       the same without flushing (kernels find their weights cached)\n"
            "  --no-replay         no replay step\n"
            "output:\n"
            "  --sweep             B = 1, 2, 4, ... 32: TPOT p50 and tokens/s per rank per B\n"
            "  --tpot-ms X,Y,...   TPOT limits for the sweep's table (default 25,50,100,200)\n"
            "  --plot FILE.svg     the sweep as an SVG plot (implies --sweep)\n"
            "  --json FILE         results as JSON\n"
            "  --check             dsv4-tiny and dsv32-tiny against the float64 reference and the\n"
            "                      golden logits\n"
            "  --golden FILE       one golden file for --check (default: tests/golden/dsv4_tiny.bin\n"
            "                      and dsv32_tiny.bin)\n"
            "exit codes: 0 ok, 1 failure while running (or --check failed), 2 bad command line\n");
}

static int bad(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return 2;
}

/* A whole-string integer in [lo, hi]. */
static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v) {
    if (!s || !*s) return false;
    errno = 0;
    char *end = NULL;
    const long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi) return false;
    *v = x;
    return true;
}

static bool parse_f64(const char *s, double lo, double hi, double *v) {
    if (!s || !*s) return false;
    errno = 0;
    char *end = NULL;
    const double x = strtod(s, &end);
    if (errno || *end || !(x >= lo && x <= hi)) return false;
    *v = x;
    return true;
}

static int parse_tpot_list(const char *s, ts__demo_opts *o, char *err, size_t cap) {
    char buf[256];
    if (strlen(s) >= sizeof buf) return bad(err, cap, "--tpot-ms: list too long");
    /* strtok would skip empty items: "1,,2", ",1" and "1," are typos, not lists */
    if (!*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        return bad(err, cap, "--tpot-ms: '%s' has an empty item (write X,Y,...)", s);
    strcpy(buf, s);
    o->n_tpot = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_tpot == TS__DEMO_MAX_TPOT)
            return bad(err, cap, "--tpot-ms: at most %d limits", TS__DEMO_MAX_TPOT);
        double x;
        if (!parse_f64(t, 1e-3, 1e7, &x))
            return bad(err, cap, "--tpot-ms: '%s' is not a positive number of milliseconds", t);
        o->tpot_ms[o->n_tpot++] = x;
    }
    if (o->n_tpot == 0) return bad(err, cap, "--tpot-ms: empty list");
    return 0;
}

/* Outputs are checked before anything runs: one that names an input would destroy it (exit 2),
 * and one that cannot be written would fail only after the whole run (exit 1). Each is
 * written atomically later (src/core/atomic_file.h). */
static int check_outputs(const ts__demo_opts *o, char *err, size_t cap) {
    const struct { const char *opt, *path; } out[] = {
        {"--json", o->json_path}, {"--plot", o->plot_path}, {"--save-weights", o->save_weights_path}};
    const struct { const char *opt, *path; } in[] = {
        {"--weights", o->weights_path}, {"--config", o->config_path}, {"--golden", o->golden_path},
        {"--model", o->model_dir}};
    const int n_out = (int)(sizeof out / sizeof *out), n_in = (int)(sizeof in / sizeof *in);
    for (int i = 0; i < n_out; i++) {
        if (!out[i].path) continue;
        for (int j = 0; j < n_in; j++)
            if (in[j].path && (!strcmp(out[i].path, in[j].path) || ts__same_file(out[i].path, in[j].path)))
                return bad(err, cap, "%s %s is also the %s input: it would be overwritten",
                           out[i].opt, out[i].path, in[j].opt);
        for (int j = 0; j < i; j++)
            if (out[j].path && !strcmp(out[i].path, out[j].path))
                return bad(err, cap, "%s and %s both write %s", out[j].opt, out[i].opt, out[i].path);
    }
    for (int i = 0; i < n_out; i++)
        if (out[i].path && ts__check_output_path(out[i].path) != TS_OK) {
            snprintf(err, cap, "%s: %s", out[i].opt, ts_last_error());
            return 3;
        }
    return 0;
}

int ts__demo_parse(int argc, char **argv, ts__demo_opts *o, char *err, size_t cap) {
    memset(o, 0, sizeof *o);
    o->model = "dsv4-mini";
    o->attention = -1;
    o->topk = 1;
    o->timeout_s = 60;
    o->tpot_ms[0] = 25, o->tpot_ms[1] = 50, o->tpot_ms[2] = 100, o->tpot_ms[3] = 200;
    o->n_tpot = 4;
    err[0] = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        /* options taking a value: "--opt V" or "--opt=V" */
        const char *val = NULL;
        char name[32];
        const char *eq = strchr(a, '=');
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
        static const char *const with_value[] = {
            "--model", "--config", "--weights", "--save-weights", "--ranks", "--batch",
            "--context", "--steps", "--warmup", "--threads", "--sampling", "--tpot-ms",
            "--plot", "--json", "--golden", "--timeout", "--attention"};
        bool takes = false;
        for (size_t j = 0; j < sizeof with_value / sizeof *with_value; j++)
            takes |= !strcmp(name, with_value[j]);
        if (takes && !val) {
            if (i + 1 >= argc) return bad(err, cap, "%s needs a value", name);
            val = argv[++i];
        } else if (!takes && val) {
            static const char *const flags[] = {"--unfused", "--sweep", "--check", "--quick",
                                                "--replay", "--no-replay", "--replay-warm",
                                                "--selftest", "--help"};
            bool flag = false;
            for (size_t j = 0; j < sizeof flags / sizeof *flags; j++) flag |= !strcmp(name, flags[j]);
            if (!flag)
                return bad(err, cap, "unknown option '%s' (tilestack demo --help lists them)", name);
            return bad(err, cap, "%s takes no value", name);
        }
        int64_t v;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) return 1;
        else if (!strcmp(name, "--model")) o->model = val;
        else if (!strcmp(name, "--config")) o->config_path = val;
        else if (!strcmp(name, "--weights")) o->weights_path = val;
        else if (!strcmp(name, "--save-weights")) o->save_weights_path = val;
        else if (!strcmp(name, "--golden")) o->golden_path = val;
        else if (!strcmp(name, "--attention")) {
            if (!strcmp(val, "v4")) o->attention = TS_MODEL_ATTN_V4;
            else if (!strcmp(val, "v32")) o->attention = TS_MODEL_ATTN_V32;
            else return bad(err, cap, "--attention: '%s' is not v4 or v32", val);
        }
        else if (!strcmp(name, "--json")) o->json_path = val;
        else if (!strcmp(name, "--plot")) o->plot_path = val, o->sweep = true;
        else if (!strcmp(name, "--ranks")) {
            if (!parse_i64(val, 1, 1024, &v))
                return bad(err, cap, "--ranks: '%s' is not an integer in [1, 1024]", val);
            o->ranks = (int)v;
        } else if (!strcmp(name, "--batch")) {
            if (!parse_i64(val, 1, 4096, &v))
                return bad(err, cap, "--batch: '%s' is not an integer in [1, 4096]", val);
            o->batch = v, o->batch_set = true;
        } else if (!strcmp(name, "--context")) {
            if (!parse_i64(val, 0, INT64_C(1) << 40, &v))
                return bad(err, cap, "--context: '%s' is not a non-negative integer", val);
            o->context = v, o->context_set = true;
        } else if (!strcmp(name, "--steps")) {
            if (!parse_i64(val, 1, 1000000, &v))
                return bad(err, cap, "--steps: '%s' is not an integer in [1, 1000000]", val);
            o->steps = (int)v, o->steps_set = true;
        } else if (!strcmp(name, "--warmup")) {
            if (!parse_i64(val, 0, 1000000, &v))
                return bad(err, cap, "--warmup: '%s' is not an integer in [0, 1000000]", val);
            o->warmup = (int)v, o->warmup_set = true;
        } else if (!strcmp(name, "--threads")) {
            if (!parse_i64(val, 1, 1024, &v))
                return bad(err, cap, "--threads: '%s' is not an integer in [1, 1024]", val);
            o->threads = (int)v;
        } else if (!strcmp(name, "--timeout")) {
            double t;
            if (!parse_f64(val, 0.1, 1e6, &t))
                return bad(err, cap, "--timeout: '%s' is not a number of seconds in [0.1, 1e6]",
                           val);
            o->timeout_s = t;
        } else if (!strcmp(name, "--sampling")) {
            if (!strcmp(val, "greedy")) o->topk = 1;
            else if (!strncmp(val, "topk:", 5) && parse_i64(val + 5, 1, TS_TOPK_MAX_K, &v))
                o->topk = v;
            else return bad(err, cap, "--sampling: '%s' is not greedy or topk:K (1 <= K <= %d; "
                            "K is also at most the vocabulary)", val, TS_TOPK_MAX_K);
        } else if (!strcmp(name, "--tpot-ms")) {
            const int rc = parse_tpot_list(val, o, err, cap);
            if (rc) return rc;
            o->sweep = true;
        } else if (!strcmp(name, "--unfused")) o->unfused = true;
        else if (!strcmp(name, "--sweep")) o->sweep = true;
        else if (!strcmp(name, "--check")) o->check = true;
        else if (!strcmp(name, "--quick")) o->quick = true;
        else if (!strcmp(name, "--replay")) o->replay = true, o->replay_set = true;
        else if (!strcmp(name, "--no-replay")) o->replay = false, o->replay_set = true;
        else if (!strcmp(name, "--replay-warm")) o->replay = true, o->replay_set = true, o->replay_warm = true;
        else if (!strcmp(name, "--selftest")) o->selftest = true;
        else return bad(err, cap, "unknown option '%s' (tilestack demo --help lists them)", a);
    }
    /* a --model that is no built-in name but a directory is a checkpoint (a directory called
     * like a built-in: ./dsv4-tiny) */
    struct stat sb;
    ts_model_config builtin;
    if (o->model && ts_model_config_builtin(o->model, &builtin) != TS_OK && stat(o->model, &sb) == 0 &&
        S_ISDIR(sb.st_mode)) {
        o->model_dir = o->model;
        if (o->weights_path || o->config_path || o->attention >= 0 || o->check)
            return bad(err, cap, "--model %s is a checkpoint directory: it gives the config and the "
                       "weights (drop --weights / --config / --attention / --check)", o->model_dir);
    }
    if (o->attention >= 0 && o->weights_path)
        return bad(err, cap, "--attention and --weights: the weight file's config fixes the "
                   "attention (its tensors differ)");
    if (o->config_path && o->weights_path)
        return bad(err, cap, "--config and --weights both give the config: use one");
    if (o->check && (o->sweep || o->save_weights_path))
        return bad(err, cap, "--check runs dsv4-tiny and dsv32-tiny on their own: drop --sweep / "
                   "--plot / --save-weights");
    return check_outputs(o, err, cap);
}

void ts__demo_apply_defaults(ts__demo_opts *o) {
    /* Sized so that plain `tilestack demo` takes ~30-60 s on 2 cores with 2 ranks (model
     * creation included) and --quick ~10-15 s (docs/demo.md). The CPU metric asks for >= 10
     * warm-up and >= 100 timed steps (deepseek_model.md §4.3). */
    if (!o->batch_set) o->batch = o->sweep ? 32 : 8; /* a sweep's largest B */
    if (!o->context_set) o->context = o->quick ? 1024 : 2048;
    if (!o->steps_set) o->steps = o->quick ? 12 : 100;
    if (!o->warmup_set) o->warmup = o->quick ? 2 : 10;
    /* the replay step costs ~6 steps of the re-runnable kernels: once per run, not per B */
    if (!o->replay_set) o->replay = !o->sweep;
}
