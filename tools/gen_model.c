/* gen_open_model: the one place that turns --model / --config / --weights / --tokenizer into a
 * model, a tokenizer and the facts generation needs from them (EOS, ids that cannot be spelt).
 * `--model DIR` is a Hugging Face checkpoint directory, which also carries DIR/tokenizer.json.
 *
 * Over R ranks (gen_peers, tools/ranks_gen.c) the same code runs on every rank: rank 0 alone
 * loads the tokenizer and checks the vocabulary, every rank resolves the config and takes part
 * in the collective model creation, and the ranks agree on the outcome after each phase, so
 * that all stop together and rank 0 prints the one message. */
#include "gen.h"

#include "core/file_read.h"
#include "core/internal.h"
#include "core/text_escape.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES ((size_t)64 << 20)

/* Where the messages go: in-process straight to stderr; over ranks each rank keeps its first
 * one until the phase's agreement, after which rank 0 prints the one agreed on. */
typedef struct opener {
    const char *cmd;
    const gen_peers *p;
    char msg[1024];
    bool peer; /* the failure is a report of another rank's (TS_ERR_PEER) */
} opener;

static int say(opener *o, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(opener *o, int rc, const char *fmt, ...) {
    char m[sizeof o->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (!o->p) fprintf(stderr, "tilestack %s: %s\n", o->cmd, m);
    else if (!o->msg[0]) snprintf(o->msg, sizeof o->msg, "%s", m);
    return rc;
}

/* The phase's end: in-process rc itself; over ranks the first failing rank's code (and rank
 * 0 prints its message). */
static int sync_ranks(opener *o, int rc) {
    if (!o->p) return rc;
    rc = o->p->agree(o->p->ctx, rc, o->peer, o->msg, sizeof o->msg);
    if (rc && o->p->rank == 0) fprintf(stderr, "tilestack %s: %s\n", o->cmd, o->msg);
    o->msg[0] = 0;
    o->peer = false;
    return rc;
}

static int fail(opener *o, int rc, const char *what) {
    return say(o, rc, "%s%s%s", what, *what ? ": " : "", ts_last_error());
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The config of a built-in name or a config file (weights then come from its seed). */
static int model_config(opener *o, const gen_args *a, ts_model_config *cfg) {
    if (a->model) {
        if (ts_model_config_builtin(a->model, cfg) == TS_OK) return 0;
        char e[TS__ESC_CAP];
        return say(o, 2, "--model '%s' is neither a built-in model nor a directory (%s)",
                   ts__text_escape_str(a->model, e, sizeof e), ts_last_error());
    }
    char *text = NULL;
    size_t len = 0;
    ts_status st = ts__read_file_capped(AT_FDCWD, a->config, a->config, CONFIG_MAX_BYTES, true,
                                        &text, &len);
    if (st == TS_OK && strlen(text) != len)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "not a text file (NUL byte)");
    if (st == TS_OK) st = ts_model_config_parse_json(text, cfg);
    free(text);
    return st == TS_OK ? 0 : fail(o, 1, "--config");
}

/* A checkpoint's EOS id: generation_config.json's eos_token_id if the file exists, else
 * config.json's (an integer, or a list whose first entry is taken); none = -1. A value that
 * is not an id of the model is an error naming the file. */
static int checkpoint_eos(opener *o, const char *dir, const ts_model_config *cfg, int32_t *eos) {
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
            if (id < 0 || id >= cfg->vocab_size)
                rc = say(o, 1, "%s: eos_token_id is not an id of the model (vocabulary %lld)",
                         files[f], (long long)cfg->vocab_size);
            else *eos = (int32_t)id;
        }
        const bool found = v != NULL;
        json_decref(root);
        if (rc || found) return rc;
    }
    return 0;
}

/* Options whose range is the vocabulary, and a tokenizer whose ids the model cannot produce. */
static int check_vocab(opener *o, const gen_args *a, const ts_model_config *cfg,
                       const ts_tokenizer *tok) {
    const int64_t tv = ts_tokenizer_vocab_size(tok);
    if (tv > cfg->vocab_size)
        return say(o, 1, "the tokenizer has ids up to %lld but the model's vocabulary (%s) is "
                   "%lld: they do not belong together", (long long)tv - 1,
                   cfg->name[0] ? cfg->name : "vocab_size", (long long)cfg->vocab_size);
    if (ts_sampler_check(&a->sp, cfg->vocab_size) != TS_OK)
        return say(o, 2, "--top-k %lld: outside [1, %lld] (the model's vocabulary)",
                   (long long)a->sp.top_k, (long long)cfg->vocab_size);
    if (a->logprobs > cfg->vocab_size)
        return say(o, 2, "--logprobs %lld exceeds the vocabulary of %lld", (long long)a->logprobs,
                   (long long)cfg->vocab_size);
    return 0;
}

/* What generation needs beyond the model: the logits, the ids no token spells, the EOS. */
static int finish_root(opener *o, const gen_args *a, bool dir, gen_model *gm) {
    int rc = 0;
    if (dir || a->weights) rc = check_vocab(o, a, gm->cfg, gm->tok); /* config known only now */
    if (!rc && dir) rc = checkpoint_eos(o, a->model, gm->cfg, &gm->eos);
    if (rc) return rc;
    const int64_t v = gm->cfg->vocab_size;
    gm->logits = malloc((size_t)v * sizeof *gm->logits);
    gm->masked = malloc((size_t)v * sizeof *gm->masked);
    if (!gm->logits || !gm->masked) return say(o, 1, "out of memory");
    /* A model vocabulary can be larger than the tokenizer's (DeepSeek V3 pads it); a random
     * model would pick the padding as often as anything, and it has no text. */
    for (int64_t i = 0; i < v; i++)
        if (!ts_tokenizer_id_to_token(gm->tok, (int32_t)i)) gm->masked[gm->n_masked++] = (int32_t)i;
    /* The built-in and tilestack weight-file models carry no EOS id, nor does a checkpoint
     * without eos_token_id: the tokenizer's end of sentence stands for it. */
    if (gm->eos < 0) gm->eos = ts_tokenizer_token_to_id(gm->tok, "<｜end▁of▁sentence｜>");
    return 0;
}

int gen_open_model(const char *cmd, const gen_args *a, gen_model *gm) {
    return gen_open_model_on(cmd, a, NULL, gm);
}

int gen_open_model_on(const char *cmd, const gen_args *a, const gen_peers *p, gen_model *gm) {
    memset(gm, 0, sizeof *gm);
    gm->eos = -1;
    opener o = {.cmd = cmd, .p = p};
    const bool root = !p || p->rank == 0;
    const bool dir = a->model && is_dir(a->model);
    char tok_path[4096];
    const char *tp = a->tokenizer;
    int rc = 0;
    if (!tp && dir) {
        if (snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", a->model) >= (int)sizeof tok_path)
            rc = say(&o, 2, "--model: path too long");
        tp = tok_path;
    }
    if (!rc && !tp)
        rc = say(&o, 2, "--tokenizer FILE.json is required (with --model DIR it defaults to "
                 "DIR/tokenizer.json)");
    if (!rc && a->threads && ts_set_num_threads(a->threads) != TS_OK) rc = fail(&o, 2, "--threads");
    if (!rc && root && ts_tokenizer_load(tp, &gm->tok) != TS_OK) rc = fail(&o, 1, "");
    ts_model_config cfg;
    const bool builtin = !dir && !a->weights;
    if (!rc && builtin) rc = model_config(&o, a, &cfg);
    if (!rc && builtin && root) rc = check_vocab(&o, a, &cfg, gm->tok);
    if ((rc = sync_ranks(&o, rc))) goto out;
    /* the model: in-process, or collectively over the ranks (each binding its experts) */
    const char *w = dir ? NULL : a->weights, *d = dir ? a->model : NULL;
    const int64_t batch = a->max_batch > 0 ? a->max_batch : 1;
    const ts_status st = p ? p->create(p->ctx, builtin ? &cfg : NULL, w, d, &gm->m)
                       : d ? ts_model_load_dir(d, batch, &gm->m)
                       : w ? ts_model_load(w, batch, &gm->m)
                           : ts_model_create(&cfg, batch, &gm->m);
    if (st != TS_OK) rc = fail(&o, 1, dir ? "--model" : a->weights ? "--weights" : "creating the model");
    o.peer = st == TS_ERR_PEER;
    if ((rc = sync_ranks(&o, rc))) goto out;
    gm->cfg = ts_model_get_config(gm->m);
    if (root) rc = finish_root(&o, a, dir, gm);
    rc = sync_ranks(&o, rc);
out:
    if (rc) gen_close_model(gm); /* over ranks every one is here: the model's free is collective */
    return rc;
}
void gen_close_model(gen_model *gm) {
    ts_model_free(gm->m);
    ts_tokenizer_free(gm->tok);
    free(gm->logits);
    free(gm->masked);
    memset(gm, 0, sizeof *gm);
    gm->eos = -1;
}
