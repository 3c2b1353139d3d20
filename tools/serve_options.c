/* The command line of `tilestack serve`: every value parsed whole and range-checked before
 * anything is loaded (exit 2 naming the option). The model options are generate's. */
#include "serve.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tilestack serve (--model NAME|DIR | --config FILE.json | --weights FILE)\n"
            "                       [--tokenizer FILE.json] [options]\n"
            "An OpenAI-compatible HTTP server (docs/serve.md): POST /v1/chat/completions,\n"
            "POST /v1/completions (stream or not), GET /v1/models, /health, /metrics.\n"
            "model:\n"
            "  --model NAME|DIR   a built-in model or a Hugging Face checkpoint directory\n"
            "  --config FILE      a config file; --weights FILE a demo weight file\n"
            "  --tokenizer FILE   its tokenizer.json (default DIR/tokenizer.json)\n"
            "  --model-id ID      the id /v1/models lists and requests name (default: the\n"
            "                     model's name, or DIR's last component)\n"
            "  --threads T        threads (default: all cores; per rank with --ranks: cores / R)\n"
            "  --ranks R          expert parallel over R processes (mpirun; default 1)\n"
            "  --rank-timeout S   with --ranks: the longest wait on a rank before the server\n"
            "                     fails every request with 503 and exits 1 (default 60)\n"
            "server:\n"
            "  --host ADDR        the address to listen on (default 127.0.0.1)\n"
            "  --port P           the port (default 8000; 0: any free port)\n"
            "  --port-file FILE   write the bound port to FILE once listening\n"
            "  --api-key KEY      require 'Authorization: Bearer KEY' (or TS_SERVE_API_KEY)\n"
            "  --max-batch B      sequences decoded together (default 8)\n"
            "  --max-context L    prompt + completion tokens per request (default: the\n"
            "                     model's context)\n"
            "  --max-queue Q      requests waiting for a sequence; beyond, 503 (default 64)\n"
            "  --kv-cache-tokens N  the KV cache's page pool, in tokens over all requests (a\n"
            "                     request waits until its prompt + max_tokens fit; default:\n"
            "                     max-batch x the model's context)\n"
            "  --prefill-chunk C  prompt tokens fed per step between decode steps (default 32)\n"
            "  --prefill-share F  while requests decode, the share of time prompts may take,\n"
            "                     in (0, 1]: TPOT rises at most 1 / (1 - F) (default 0.15)\n"
            "  --max-body BYTES   largest request body; beyond, 413 (default 1048576)\n"
            "  --drain-timeout S  on SIGTERM, seconds the running requests may take (default 30)\n"
            "Exit codes: 0 after SIGTERM / SIGINT, 1 failure (a rank lost), 2 bad command line.\n");
}

int serve_parse_args(int argc, char **argv, serve_args *a) {
    memset(a, 0, sizeof *a);
    a->g.chat = GEN_CHAT_NONE;
    a->g.sp = ts_sampler_default_params();
    a->host = "127.0.0.1";
    a->port = 8000;
    a->max_batch = 8;
    a->max_queue = 64;
    a->prefill_chunk = 32;
    a->prefill_share = 0.15;
    a->max_body = 1 << 20;
    a->drain_s = 30;
    a->api_key = getenv("TS_SERVE_API_KEY");
    if (a->api_key && !*a->api_key) a->api_key = NULL;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) return usage(stdout), 1;
        static const char *const with_value[] = {
            "--model", "--config", "--weights", "--tokenizer", "--threads", "--ranks", "--host",
            "--port", "--port-file", "--api-key", "--max-batch", "--max-context", "--max-queue",
            "--prefill-chunk", "--max-body", "--drain-timeout", "--model-id", "--rank-timeout",
            "--prefill-share", "--kv-cache-tokens"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(o, with_value[k]);
        if (!known) return gen_bad("serve", "unknown option '%s' (see --help)", gen_esc(o));
        if (i + 1 >= argc) return gen_bad("serve", "%s needs a value", o);
        const char *v = argv[++i];
        int64_t n = 0;
        /* integer options: the bound and the field */
        const struct { const char *name; int64_t lo, hi; int64_t *dst; } ints[] = {
            {"--ranks", 1, 1024, &a->g.ranks},
            {"--threads", 1, 1024, &n},
            {"--port", 0, 65535, &n},
            {"--max-batch", 1, 4096, &a->max_batch},
            {"--max-context", 2, INT64_C(1) << 24, &a->max_context},
            {"--max-queue", 0, 1 << 20, &a->max_queue},
            {"--kv-cache-tokens", 1, INT64_C(1) << 40, &a->kv_tokens},
            {"--prefill-chunk", 1, 1 << 16, &a->prefill_chunk},
            {"--max-body", 1024, INT64_C(1) << 30, &a->max_body}};
        bool done = false;
        for (size_t k = 0; k < sizeof ints / sizeof *ints && !done; k++) {
            if (strcmp(o, ints[k].name)) continue;
            if (!gen_parse_i64(v, ints[k].lo, ints[k].hi, ints[k].dst))
                return gen_bad("serve", "%s: '%s' is not an integer in [%lld, %lld]", o, gen_esc(v),
                           (long long)ints[k].lo, (long long)ints[k].hi);
            if (!strcmp(o, "--threads")) a->g.threads = (int)n;
            if (!strcmp(o, "--port")) a->port = (int)n;
            done = true;
        }
        if (done) continue;
        if (!strcmp(o, "--model")) a->g.model = v;
        else if (!strcmp(o, "--config")) a->g.config = v;
        else if (!strcmp(o, "--weights")) a->g.weights = v;
        else if (!strcmp(o, "--tokenizer")) a->g.tokenizer = v;
        else if (!strcmp(o, "--host")) a->host = v;
        else if (!strcmp(o, "--port-file")) a->port_file = v;
        else if (!strcmp(o, "--api-key")) {
            if (!*v) return gen_bad("serve", "--api-key: an empty key");
            a->api_key = v;
        } else if (!strcmp(o, "--model-id")) {
            if (!*v || strlen(v) >= 128) return gen_bad("serve", "--model-id: 1 to 127 bytes");
            a->model_id = v;
        } else if (!strcmp(o, "--prefill-share")) {
            if (!gen_parse_f64(v, &a->prefill_share) || !(a->prefill_share > 0 && a->prefill_share <= 1))
                return gen_bad("serve", "%s: '%s' is not a number in (0, 1]", o, gen_esc(v));
        } else if (!strcmp(o, "--rank-timeout")) {
            if (!gen_parse_f64(v, &a->g.rank_timeout_s) || a->g.rank_timeout_s < 0.1 || a->g.rank_timeout_s > 3600)
                return gen_bad("serve", "%s: '%s' is not a number of seconds in [0.1, 3600]", o, gen_esc(v));
        } else if (!strcmp(o, "--drain-timeout")) {
            if (!gen_parse_f64(v, &a->drain_s) || a->drain_s < 0 || a->drain_s > 120)
                return gen_bad("serve", "%s: '%s' is not a number of seconds in [0, 120]", o, gen_esc(v));
        }
    }
    if (!!a->g.model + !!a->g.config + !!a->g.weights != 1)
        return gen_bad("serve", "give one of --model NAME|DIR, --config FILE.json or --weights FILE");
    a->g.max_batch = a->max_batch;
    /* over ranks every rank holds its share of the sequences (data-parallel attention) */
    a->g.spread = true;
    a->g.kv_tokens = a->kv_tokens;
    return 0;
}
