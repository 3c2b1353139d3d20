/* The command line of `tilestack generate` and `tilestack chat`: every value parsed whole and
 * range-checked before anything is loaded (exit 2 naming the option). */
#include "gen.h"

#include "core/text_escape.h"
#include "text/text_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void gen_usage(const char *cmd, FILE *f) {
    const bool chat = !strcmp(cmd, "chat");
    fprintf(f,
            "usage: tilestack %s (--model NAME | --config FILE.json | --weights FILE)\n"
            "                 --tokenizer FILE.json %s[options]\n"
            "%s"
            "model:\n"
            "  --model NAME       a built-in model: dsv4-mini | dsv4-tiny | dsv32-tiny |\n"
            "                     dsv4-flash-layer (random weights: the text is gibberish)\n"
            "  --model DIR        a Hugging Face checkpoint directory (docs/models.md)\n"
            "  --config FILE      a config file (docs/model.md §1), weights from its seed\n"
            "  --weights FILE     a weight file written by `tilestack demo --save-weights`\n"
            "  --tokenizer FILE   its tokenizer.json (default DIR/tokenizer.json with --model DIR)\n"
            "prompt:\n"
            "%s"
            "  --chat FORMAT      v4 | v4-thinking | v3 (DeepSeek chat prompt; %s)\n"
            "  --system TEXT      a system message (with a chat format)\n"
            "sampling:\n"
            "  -n N               at most N new tokens per reply (default 128)\n"
            "  --temperature T    0 (greedy) or in [1e-6, 1e6] (default 1)\n"
            "  --top-k K          keep the K most likely tokens, K in [1, vocab] (default all)\n"
            "  --top-p P          nucleus: the fewest most likely tokens with mass >= P, (0, 1]\n"
            "  --seed S           the sampler's seed, 0 .. 2^64-1 (default 0)\n"
            "  --stop STR         end the reply before STR (repeatable, up to %d)\n"
            "output:\n"
            "  --json             one JSON object per reply instead of the streamed text\n"
            "  --logprobs N       with --json: the top-N log-probabilities of every step (N <= %d)\n"
            "  --threads T        threads (default TS_NUM_THREADS or all cores; per rank with\n"
            "                     --ranks: cores / R)\n"
            "parallelism:\n"
            "  --ranks R          expert parallel over R processes (mpirun; each holds E/R\n"
            "                     experts, rank 0 the sequence; default 1)\n"
            "%s"
            "Streams the reply to stdout; prefill and decode tokens/s to stderr at the end.\n"
            "Exit codes: 0 ok, 1 failure while running, 2 bad command line.\n",
            cmd, chat ? "" : "--prompt TEXT ",
            chat ? "Reads user turns from stdin, one per line; /reset clears the history, /exit or\n"
                   "end of input (Ctrl-D) ends.\n"
                 : "",
            chat ? "" : "  --prompt TEXT      the prompt (UTF-8), encoded as it is unless --chat\n",
            chat ? "default v4" : "default: the raw prompt", GEN_MAX_STOPS, GEN_MAX_LOGPROBS,
            chat ? ""
                 : "memory plan (generate --model DIR only; no prompt, no tokenizer):\n"
                   "  --dry-run          print the bytes each rank needs (weights mapped /\n"
                   "                     converted / packed, caches, workspace); reads only\n"
                   "                     config.json and the safetensors headers\n"
                   "  --ranks R          the plan of R ranks (default: a table for 1, 2, 4, 8)\n"
                   "  --batch B          sequences (default 1)\n"
                   "  --context L        tokens per sequence (default: the loader's 8192 cap)\n");
}

int gen_bad(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tilestack %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

const char *gen_esc(const char *v) {
    static char buf[TS__ESC_CAP];
    return ts__text_escape_str(v, buf, sizeof buf);
}

bool gen_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v) {
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return false;
    *v = x;
    return true;
}

static bool parse_u64(const char *s, uint64_t *v) {
    if (*s < '0' || *s > '9') return false; /* strtoull would take "-1" as 2^64 - 1 */
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *v = x;
    return true;
}

bool gen_parse_f64(const char *s, double *v) {
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(x)) return false;
    *v = x;
    return true;
}

int gen_parse_args(const char *cmd, int argc, char **argv, gen_args *a) {
    const bool chat = !strcmp(cmd, "chat");
    memset(a, 0, sizeof *a);
    a->chat = chat ? GEN_CHAT_V4 : GEN_CHAT_NONE;
    a->sp = ts_sampler_default_params();
    a->max_new = 128;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) return gen_usage(cmd, stdout), 1;
        if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        if (!chat && !strcmp(o, "--dry-run")) {
            a->dry_run = true;
            continue;
        }
        static const char *const with_value[] = {
            "--model", "--config", "--weights", "--tokenizer", "--prompt", "--system", "--chat",
            "-n", "--temperature", "--top-k", "--top-p", "--seed", "--stop", "--logprobs",
            "--threads"};
        static const char *const plan_opts[] = {"--batch", "--context"};
        bool known = !strcmp(o, "--ranks");
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= !strcmp(o, with_value[k]);
        for (size_t k = 0; !chat && k < sizeof plan_opts / sizeof *plan_opts; k++)
            known |= !strcmp(o, plan_opts[k]);
        if (!known) return gen_bad(cmd, "unknown option '%s' (see --help)", gen_esc(o));
        if (i + 1 >= argc) return gen_bad(cmd, "%s needs a value", o);
        const char *v = argv[++i];
        int64_t n;
        if (!strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "--config")) a->config = v;
        else if (!strcmp(o, "--weights")) a->weights = v;
        else if (!strcmp(o, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(o, "--prompt")) a->prompt = v;
        else if (!strcmp(o, "--ranks")) {
            if (!gen_parse_i64(v, 1, 1024, &a->ranks)) return gen_bad(cmd, "%s: '%s' is not an integer in [1, 1024]", o, gen_esc(v));
        } else if (!strcmp(o, "--batch")) {
            if (!gen_parse_i64(v, 1, 1 << 20, &a->batch)) return gen_bad(cmd, "%s: '%s' is not an integer in [1, 2^20]", o, gen_esc(v));
        } else if (!strcmp(o, "--context")) {
            if (!gen_parse_i64(v, 1, INT64_C(1) << 24, &a->context))
                return gen_bad(cmd, "%s: '%s' is not an integer in [1, 2^24]", o, gen_esc(v));
        }
        else if (!strcmp(o, "--system")) a->system = v;
        else if (!strcmp(o, "--chat")) {
            if (!strcmp(v, "v4")) a->chat = GEN_CHAT_V4;
            else if (!strcmp(v, "v4-thinking")) a->chat = GEN_CHAT_V4_THINKING;
            else if (!strcmp(v, "v3")) a->chat = GEN_CHAT_V3;
            else return gen_bad(cmd, "%s: '%s' is not v4, v4-thinking or v3", o, gen_esc(v));
        } else if (!strcmp(o, "-n")) {
            if (!gen_parse_i64(v, 1, INT64_C(1) << 30, &a->max_new))
                return gen_bad(cmd, "%s: '%s' is not an integer in [1, 2^30]", o, gen_esc(v));
        } else if (!strcmp(o, "--temperature")) {
            const double t = gen_parse_f64(v, &a->sp.temperature) ? a->sp.temperature : -1;
            if (!(t == 0 || (t >= TS_SAMPLER_MIN_TEMPERATURE && t <= TS_SAMPLER_MAX_TEMPERATURE)))
                return gen_bad(cmd, "%s: '%s' is not 0 (greedy) or a number in [%g, %g]", o, gen_esc(v),
                           TS_SAMPLER_MIN_TEMPERATURE, TS_SAMPLER_MAX_TEMPERATURE);
        } else if (!strcmp(o, "--top-k")) {
            /* the upper bound is the vocabulary, checked once the model is known */
            if (!gen_parse_i64(v, 1, INT32_MAX, &a->sp.top_k))
                return gen_bad(cmd, "%s: '%s' is not an integer in [1, vocab]", o, gen_esc(v));
        } else if (!strcmp(o, "--top-p")) {
            if (!gen_parse_f64(v, &a->sp.top_p) || !(a->sp.top_p > 0 && a->sp.top_p <= 1))
                return gen_bad(cmd, "%s: '%s' is not a number in (0, 1]", o, gen_esc(v));
        } else if (!strcmp(o, "--seed")) {
            if (!parse_u64(v, &a->seed))
                return gen_bad(cmd, "%s: '%s' is not an integer in [0, 2^64)", o, gen_esc(v));
        } else if (!strcmp(o, "--stop")) {
            const size_t len = strlen(v);
            if (a->n_stops == GEN_MAX_STOPS) return gen_bad(cmd, "%s: more than %d stop strings", o, GEN_MAX_STOPS);
            if (!len) return gen_bad(cmd, "%s: an empty stop string would end every reply at once", o);
            if (ts__utf8_first_invalid((const unsigned char *)v, len) != len)
                return gen_bad(cmd, "%s: '%s' is not valid UTF-8 (no reply could contain it)", o, gen_esc(v));
            a->stops[a->n_stops++] = v;
        } else if (!strcmp(o, "--logprobs")) {
            if (!gen_parse_i64(v, 1, GEN_MAX_LOGPROBS, &a->logprobs))
                return gen_bad(cmd, "%s: '%s' is not an integer in [1, %d]", o, gen_esc(v), GEN_MAX_LOGPROBS);
        } else if (!strcmp(o, "--threads")) {
            if (!gen_parse_i64(v, 1, 1024, &n)) return gen_bad(cmd, "%s: '%s' is not an integer in [1, 1024]", o, gen_esc(v));
            a->threads = (int)n;
        }
    }
    if (!!a->model + !!a->config + !!a->weights != 1)
        return gen_bad(cmd, "give one of --model NAME|DIR, --config FILE.json or --weights FILE");
    if (chat && a->prompt)
        return gen_bad(cmd, "--prompt: chat reads its turns from stdin");
    if ((a->batch || a->context) && !a->dry_run)
        return gen_bad(cmd, "--batch and --context go with --dry-run");
    if (a->dry_run) {
        if (!a->model) return gen_bad(cmd, "--dry-run plans a checkpoint directory: give --model DIR");
        if (!a->batch) a->batch = 1;
        return 0; /* no prompt, no tokenizer */
    }
    if (!chat && !a->prompt) return gen_bad(cmd, "--prompt TEXT is required");
    if (a->system && a->chat == GEN_CHAT_NONE)
        return gen_bad(cmd, "--system needs a chat format (--chat v4 | v4-thinking | v3)");
    if (a->logprobs && !a->json)
        return gen_bad(cmd, "--logprobs: log-probabilities are written in the JSON output: add --json");
    return 0;
}
