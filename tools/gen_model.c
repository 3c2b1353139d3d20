/* gen_open_model: the one place that turns --model / --config / --weights / --tokenizer into a
 * model, a tokenizer and the facts generation needs from them (EOS, ids that cannot be spelt).
 * `--model DIR` (a Hugging Face checkpoint, which also carries DIR/tokenizer.json) is
 * recognised here so that its loader can be wired in without touching the commands. */
#include "gen.h"

#include "core/file_read.h"
#include "core/internal.h"
#include "core/text_escape.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES ((size_t)64 << 20)

static int fail(const char *cmd, int rc, const char *what) {
    fprintf(stderr, "tilestack %s: %s%s%s\n", cmd, what, *what ? ": " : "", ts_last_error());
    return rc;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The config of a built-in name or a config file (weights then come from its seed). */
static int model_config(const char *cmd, const gen_args *a, ts_model_config *cfg) {
    if (a->model) {
        if (ts_model_config_builtin(a->model, cfg) == TS_OK) return 0;
        char e[TS__ESC_CAP];
        fprintf(stderr, "tilestack %s: --model '%s' is neither a built-in model nor a directory "
                "(%s)\n", cmd, ts__text_escape_str(a->model, e, sizeof e), ts_last_error());
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    ts_status st = ts__read_file_capped(AT_FDCWD, a->config, a->config, CONFIG_MAX_BYTES, true,
                                        &text, &len);
    if (st == TS_OK && strlen(text) != len)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "not a text file (NUL byte)");
    if (st == TS_OK) st = ts_model_config_parse_json(text, cfg);
    free(text);
    return st == TS_OK ? 0 : fail(cmd, 1, "--config");
}

/* A checkpoint's EOS id: generation_config.json's eos_token_id if the file exists, else
 * config.json's (an integer, or a list whose first entry is taken); none = -1. A value that
 * is not an id of the model is an error naming the file. */
static int checkpoint_eos(const char *cmd, const char *dir, const ts_model_config *cfg,
                          int32_t *eos) {
    static const char *const files[2] = {"generation_config.json", "config.json"};
    *eos = -1;
    for (int f = 0; f < 2; f++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, files[f]) >= (int)sizeof path) return 0;
        char *text = NULL;
        size_t len = 0;
        if (ts__read_file_capped(AT_FDCWD, path, files[f], CONFIG_MAX_BYTES, true, &text, &len) !=
            TS_OK) {
            ts_clear_error();
            continue; /* generation_config.json is optional; config.json was read by the loader */
        }
        json_error_t je;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        free(text);
        json_t *v = root ? json_object_get(root, "eos_token_id") : NULL;
        if (json_is_array(v)) v = json_array_get(v, 0);
        int rc = 0;
        if (v && !json_is_null(v)) {
            const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= cfg->vocab_size) {
                fprintf(stderr, "tilestack %s: %s: eos_token_id is not an id of the model "
                        "(vocabulary %lld)\n", cmd, files[f], (long long)cfg->vocab_size);
                rc = 1;
            } else *eos = (int32_t)id;
        }
        const bool found = v != NULL;
        json_decref(root);
        if (rc || found) return rc;
    }
    return 0;
}

/* Options whose range is the vocabulary, and a tokenizer whose ids the model cannot produce. */
static int check_vocab(const char *cmd, const gen_args *a, const ts_model_config *cfg,
                       const ts_tokenizer *tok) {
    const int64_t tv = ts_tokenizer_vocab_size(tok);
    if (tv > cfg->vocab_size) {
        fprintf(stderr, "tilestack %s: the tokenizer has ids up to %lld but the model's "
                "vocabulary (%s) is %lld: they do not belong together\n", cmd, (long long)tv - 1,
                cfg->name[0] ? cfg->name : "vocab_size", (long long)cfg->vocab_size);
        return 1;
    }
    if (ts_sampler_check(&a->sp, cfg->vocab_size) != TS_OK) {
        fprintf(stderr, "tilestack %s: --top-k %lld: outside [1, %lld] (the model's vocabulary)\n",
                cmd, (long long)a->sp.top_k, (long long)cfg->vocab_size);
        return 2;
    }
    if (a->logprobs > cfg->vocab_size) {
        fprintf(stderr, "tilestack %s: --logprobs %lld exceeds the vocabulary of %lld\n", cmd,
                (long long)a->logprobs, (long long)cfg->vocab_size);
        return 2;
    }
    return 0;
}

int gen_open_model(const char *cmd, const gen_args *a, gen_model *gm) {
    memset(gm, 0, sizeof *gm);
    gm->eos = -1;
    const bool dir = a->model && is_dir(a->model);
    char tok_path[4096];
    const char *tp = a->tokenizer;
    if (!tp && dir) {
        if (snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", a->model) >= (int)sizeof tok_path) {
            fprintf(stderr, "tilestack %s: --model: path too long\n", cmd);
            return 2;
        }
        tp = tok_path;
    }
    if (!tp) {
        fprintf(stderr, "tilestack %s: --tokenizer FILE.json is required (with --model DIR it "
                "defaults to DIR/tokenizer.json)\n", cmd);
        return 2;
    }
    if (a->threads && ts_set_num_threads(a->threads) != TS_OK) return fail(cmd, 2, "--threads");
    if (ts_tokenizer_load(tp, &gm->tok) != TS_OK) return fail(cmd, 1, "");
    int rc = 0;
    ts_status st;
    if (dir) {
        if ((st = ts_model_load_dir(a->model, 1, &gm->m)) != TS_OK) rc = fail(cmd, 1, "--model");
        if (!rc) rc = check_vocab(cmd, a, ts_model_get_config(gm->m), gm->tok);
        if (!rc) rc = checkpoint_eos(cmd, a->model, ts_model_get_config(gm->m), &gm->eos);
    } else if (a->weights) {
        /* the config lives in the file's header: checked once loaded */
        if ((st = ts_model_load(a->weights, 1, &gm->m)) != TS_OK) rc = fail(cmd, 1, "--weights");
        if (!rc) rc = check_vocab(cmd, a, ts_model_get_config(gm->m), gm->tok);
    } else {
        ts_model_config cfg;
        rc = model_config(cmd, a, &cfg);
        if (!rc) rc = check_vocab(cmd, a, &cfg, gm->tok);
        if (!rc && ts_model_create(&cfg, 1, &gm->m) != TS_OK) rc = fail(cmd, 1, "creating the model");
    }
    if (rc) {
        gen_close_model(gm);
        return rc;
    }
    gm->cfg = ts_model_get_config(gm->m);
    const int64_t v = gm->cfg->vocab_size;
    gm->logits = malloc((size_t)v * sizeof *gm->logits);
    gm->masked = malloc((size_t)v * sizeof *gm->masked);
    if (!gm->logits || !gm->masked) {
        fprintf(stderr, "tilestack %s: out of memory\n", cmd);
        gen_close_model(gm);
        return 1;
    }
    /* A model vocabulary can be larger than the tokenizer's (DeepSeek V3 pads it); a random
     * model would pick the padding as often as anything, and it has no text. */
    for (int64_t i = 0; i < v; i++)
        if (!ts_tokenizer_id_to_token(gm->tok, (int32_t)i)) gm->masked[gm->n_masked++] = (int32_t)i;
    /* The built-in and tilestack weight-file models carry no EOS id, nor does a checkpoint
     * without eos_token_id: the tokenizer's end of sentence stands for it. */
    if (gm->eos < 0) gm->eos = ts_tokenizer_token_to_id(gm->tok, "<｜end▁of▁sentence｜>");
    return 0;
}

void gen_close_model(gen_model *gm) {
    ts_model_free(gm->m);
    ts_tokenizer_free(gm->tok);
    free(gm->logits);
    free(gm->masked);
    memset(gm, 0, sizeof *gm);
    gm->eos = -1;
}
