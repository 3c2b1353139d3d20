/* `tilestack export-hf`: a model (built-in and seeded, tilestack's weight file, or a checkpoint
 * directory) written as a DeepSeek-V4 checkpoint directory (ts_model_export_hf,
 * docs/models.md). Tests and generators make their checkpoints with it. */
#include "cli.h"
#include "tilestack/model.h"
#include "model/hf_v4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f, "usage: tilestack export-hf (--model NAME|DIR | --weights FILE) --out DIR\n"
               "                           [--layout release|hf|modules] [--shards N]\n"
               "                           [--dequantize] [--seed S]\n"
               "  --model NAME      a built-in config (dsv4-tiny, dsv4-mini, ...), weights from its seed\n"
               "  --model DIR       a checkpoint directory (re-exported, e.g. in another layout)\n"
               "  --weights FILE    a file written by `tilestack demo --save-weights`\n"
               "  --out DIR         the checkpoint directory to write (must not exist, or be empty)\n"
               "  --layout L        release (DeepSeek's names, default) | hf (transformers'\n"
               "                    save_pretrained names) | modules (transformers' module names)\n"
               "  --shards N        N safetensors files and model.safetensors.index.json (default 1)\n"
               "  --dequantize      FP8 / FP4 weights as BF16, no quantization_config\n"
               "  --seed S          the built-in config's weight seed (default: the config's)\n");
}

static bool parse_u64(const char *s, uint64_t hi, uint64_t *v) {
    if (!s || !*s || *s == '-') return false;
    errno = 0;
    char *end = NULL;
    const unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end || x > hi) return false;
    *v = x;
    return true;
}

int ts__cmd_export_hf(int argc, char **argv) {
    const char *model = NULL, *weights = NULL, *out = NULL;
    ts_hf_export_options o = {TS_HF_LAYOUT_RELEASE, 1, false};
    bool seed_set = false;
    const char *skeleton = NULL; /* --skeleton CONFIG.json: headers only, data a hole */
    uint64_t seed = 0, v = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dequantize")) {
            o.dequantize = true;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--weights") || !strcmp(a, "--out") ||
                   !strcmp(a, "--layout") || !strcmp(a, "--shards") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--skeleton")) {
            if (!has_val) {
                fprintf(stderr, "tilestack export-hf: %s needs a value\n", a);
                return 2;
            }
            const char *val = argv[++i];
            if (!strcmp(a, "--skeleton")) skeleton = val;
            else if (!strcmp(a, "--model")) model = val;
            else if (!strcmp(a, "--weights")) weights = val;
            else if (!strcmp(a, "--out")) out = val;
            else if (!strcmp(a, "--layout")) {
                if (!strcmp(val, "release")) o.layout = TS_HF_LAYOUT_RELEASE;
                else if (!strcmp(val, "hf")) o.layout = TS_HF_LAYOUT_HF;
                else if (!strcmp(val, "modules")) o.layout = TS_HF_LAYOUT_HF_MODULES;
                else {
                    fprintf(stderr, "tilestack export-hf: --layout: '%s' is not release, hf or modules\n", val);
                    return 2;
                }
            } else if (!strcmp(a, "--shards")) {
                if (!parse_u64(val, 4096, &v) || v < 1) {
                    fprintf(stderr, "tilestack export-hf: --shards: '%s' is not an integer in [1, 4096]\n", val);
                    return 2;
                }
                o.shards = (int32_t)v;
            } else {
                if (!parse_u64(val, UINT64_MAX, &seed)) {
                    fprintf(stderr, "tilestack export-hf: --seed: '%s' is not a non-negative integer\n", val);
                    return 2;
                }
                seed_set = true;
            }
        } else {
            fprintf(stderr, "tilestack export-hf: unknown option '%s' (--help lists them)\n", a);
            return 2;
        }
    }
    if (skeleton) { /* docs/models.md "Memory per rank": a plan-only checkpoint */
        if (!out) {
            fprintf(stderr, "tilestack export-hf: --skeleton needs --out\n");
            return 2;
        }
        const ts_status st = ts__hf_v4_write_skeleton(skeleton, out);
        if (st != TS_OK) fprintf(stderr, "tilestack export-hf: %s\n", ts_last_error());
        else printf("wrote %s (headers only; the data is a hole)\n", out);
        return st == TS_OK ? 0 : 1;
    }
    if (!out || (!model == !weights)) {
        fprintf(stderr, "tilestack export-hf: give --out and one of --model / --weights\n");
        usage(stderr);
        return 2;
    }
    struct stat sb;
    ts_model_config cfg;
    /* a built-in name first; a directory called like one is ./NAME */
    const bool builtin = model && ts_model_config_builtin(model, &cfg) == TS_OK;
    const bool is_dir = model && !builtin && stat(model, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (seed_set && (weights || is_dir)) {
        fprintf(stderr, "tilestack export-hf: --seed applies to a built-in config only\n");
        return 2;
    }
    ts_model *m = NULL;
    ts_status st;
    if (weights) {
        st = ts_model_load(weights, 1, &m);
    } else if (is_dir) {
        st = ts_model_load_dir_keep(model, 1, &m); /* its records are what it writes */
    } else {
        if (!builtin) {
            (void)ts_model_config_builtin(model, &cfg); /* its message lists the names */
            fprintf(stderr, "tilestack export-hf: --model: %s (or a checkpoint directory)\n", ts_last_error());
            return 2;
        }
        if (seed_set) cfg.seed = seed;
        st = ts_model_create(&cfg, 1, &m);
    }
    if (st != TS_OK) {
        fprintf(stderr, "tilestack export-hf: %s\n", ts_last_error());
        return 1;
    }
    st = ts_model_export_hf(m, out, &o);
    if (st != TS_OK) fprintf(stderr, "tilestack export-hf: %s\n", ts_last_error());
    else printf("wrote %s (%s, %s layout%s)\n", out, ts_model_get_config(m)->name,
                o.layout == TS_HF_LAYOUT_RELEASE ? "release" : o.layout == TS_HF_LAYOUT_HF ? "hf" : "modules",
                o.dequantize ? ", dequantised" : "");
    ts_model_free(m);
    return st == TS_OK ? 0 : 1;
}
