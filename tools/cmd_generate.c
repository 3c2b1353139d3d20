/* `tilestack generate`: one prompt, one streamed reply (docs/models.md, "generate and chat");
 * with --ranks R, over R expert-parallel processes (ranks_gen.c; this body runs on rank 0). */
#include "cli.h"
#include "gen.h"

#include <stdlib.h>
#include <string.h>

int ts__cmd_generate(int argc, char **argv) {
    const bool is_rank = gen_ranks_take_token(&argc, argv);
    gen_args a;
    int rc = gen_parse_args("generate", argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    if (a.dry_run) return gen_dry_run(&a);
    gen_model gm;
    gen_ranks rk;
    if ((rc = gen_ranks_open("generate", &a, is_rank, argc, argv, &rk, &gm)) || rk.done) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    ts_status st;
    if (a.chat == GEN_CHAT_NONE) {
        /* a raw prompt: special tokens written in it are tokens, as `tokenize` has them */
        st = ts_tokenizer_encode(gm.tok, a.prompt, strlen(a.prompt), true, &ids, &n);
    } else {
        const ts_chat_message msgs[2] = {
            {TS_CHAT_SYSTEM, a.system ? a.system : "", a.system ? strlen(a.system) : 0},
            {TS_CHAT_USER, a.prompt, strlen(a.prompt)}};
        st = ts_chat_encode(gm.tok, a.chat == GEN_CHAT_V3 ? TS_CHAT_DEEPSEEK_V3 : TS_CHAT_DEEPSEEK_V4,
                            a.system ? msgs : msgs + 1, a.system ? 2 : 1,
                            a.chat == GEN_CHAT_V4_THINKING, &ids, &n);
    }
    gen_opts o = {.sp = a.sp, .max_new = a.max_new, .stops = a.stops, .n_stops = a.n_stops,
                  .logprobs = a.logprobs, .emit = a.json ? NULL : gen_stdout_emit};
    uint64_t rng = a.seed;
    gen_seq gs = {0};
    gen_result r;
    if (st != TS_OK) fprintf(stderr, "tilestack generate: --prompt: %s\n", ts_last_error());
    else if ((st = gen_turn(&gm, &gs, ids, n, &o, &rng, &r)) != TS_OK)
        fprintf(stderr, "tilestack generate: %s\n", ts_last_error());
    rc = st == TS_OK ? 0 : 1;
    if (!rc && a.json) {
        char *js = gen_result_json(&r, &o, a.seed);
        if (js) printf("%s\n", js);
        else fprintf(stderr, "tilestack generate: out of memory writing the JSON\n");
        rc = js ? 0 : 1;
        free(js);
    } else if (!rc) {
        putchar('\n');
        gen_print_stats(stderr, &r);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "tilestack generate: writing stdout failed\n");
        rc = 1;
    }
    if (st == TS_OK) gen_result_free(&r);
    gen_seq_free(&gs);
    free(ids);
    return gen_ranks_close(&rk, &gm, rc);
}
