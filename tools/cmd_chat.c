/* `tilestack chat`: turns from stdin, one per line, replies streamed; the conversation is
 * re-encoded whole each turn (ts_chat_encode) and the cache of the prefix it shares with what
 * the sequence already holds is kept (docs/models.md, "generate and chat"). With --ranks R
 * this runs on rank 0, which mpirun gives the launcher's stdin (ranks_gen.c). */
#include "cli.h"
#include "gen.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINE_BYTES ((size_t)1 << 20)

typedef struct history {
    ts_chat_message *m; /* contents malloc'ed */
    size_t n, cap;
} history;

static bool push(history *h, ts_chat_role role, const char *text, size_t len) {
    if (h->n == h->cap) {
        const size_t c = h->cap ? 2 * h->cap : 16;
        ts_chat_message *nm = realloc(h->m, c * sizeof *nm);
        if (!nm) return false;
        h->m = nm;
        h->cap = c;
    }
    char *s = malloc(len + 1);
    if (!s) return false;
    memcpy(s, text, len);
    s[len] = 0;
    h->m[h->n++] = (ts_chat_message){role, s, len};
    return true;
}

static void pop_to(history *h, size_t n) {
    while (h->n > n) free((char *)h->m[--h->n].content);
}

/* What the history keeps of a reply: with thinking, the answer after the last </think> (V4's
 * template drops earlier reasoning); else all of it. */
static const char *answer_of(const gen_result *r, bool thinking, size_t *len) {
    const char *a = r->text;
    if (thinking)
        for (const char *p = r->text; (p = strstr(p, GEN_THINK_END)); p += 8) a = p + 8;
    *len = r->text_len - (size_t)(a - r->text);
    return a;
}

/* One user line: the whole conversation encoded, the reply generated and kept. Returns 0, or
 * 1 after printing why the turn was dropped (2: and the chat cannot go on). */
static int turn(gen_model *gm, gen_seq *gs, history *h, const gen_args *a, const gen_opts *o,
                uint64_t *rng, const char *line, size_t len) {
    const size_t before = h->n;
    if (!push(h, TS_CHAT_USER, line, len)) {
        fprintf(stderr, "tilestack chat: out of memory\n");
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    gen_result r;
    const bool thinking = a->chat == GEN_CHAT_V4_THINKING;
    ts_status st = ts_chat_encode(gm->tok, a->chat == GEN_CHAT_V3 ? TS_CHAT_DEEPSEEK_V3 : TS_CHAT_DEEPSEEK_V4,
                                  h->m, h->n, thinking, &ids, &n);
    if (st == TS_OK) st = gen_turn(gm, gs, ids, n, o, rng, &r);
    free(ids);
    if (st != TS_OK) {
        fprintf(stderr, "tilestack chat: turn dropped: %s\n", ts_last_error());
        pop_to(h, before);
        /* a peer that timed out leaves a model that can only be freed */
        return st == TS_ERR_TIMEOUT ? 2 : 1;
    }
    int rc = 0;
    if (a->json) {
        char *js = gen_result_json(&r, o, a->seed);
        if (js) printf("%s\n", js);
        else rc = 1, fprintf(stderr, "tilestack chat: out of memory writing the JSON\n");
        free(js);
    } else {
        putchar('\n');
        gen_print_stats(stderr, &r);
    }
    fflush(stdout);
    size_t al;
    const char *ans = answer_of(&r, thinking, &al);
    if (!push(h, TS_CHAT_ASSISTANT, ans, al)) {
        fprintf(stderr, "tilestack chat: out of memory\n");
        pop_to(h, before);
        rc = 1;
    }
    gen_result_free(&r);
    return rc;
}

int ts__cmd_chat(int argc, char **argv) {
    const bool is_rank = gen_ranks_take_token(&argc, argv);
    gen_args a;
    int rc = gen_parse_args("chat", argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    gen_model gm;
    gen_ranks rk;
    if ((rc = gen_ranks_open("chat", &a, is_rank, argc, argv, &rk, &gm)) || rk.done) return rc;
    const gen_opts o = {.sp = a.sp, .max_new = a.max_new, .stops = a.stops, .n_stops = a.n_stops,
                        .logprobs = a.logprobs, .emit = a.json ? NULL : gen_stdout_emit};
    uint64_t rng = a.seed;
    gen_seq gs = {0};
    history h = {0};
    const bool interactive = gen_stdin_is_tty() && gen_stdout_is_tty() && !a.json;
    if (a.system && !push(&h, TS_CHAT_SYSTEM, a.system, strlen(a.system))) {
        fprintf(stderr, "tilestack chat: out of memory\n");
        return gen_ranks_close(&rk, &gm, 1);
    }
    const size_t base = h.n; /* /reset keeps the system message */
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (interactive) fputs("> ", stdout), fflush(stdout);
        const ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) break; /* end of input (Ctrl-D) */
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        line[len] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            pop_to(&h, base);
            if (interactive) fprintf(stderr, "(history cleared)\n");
            continue;
        }
        if (!len) continue;
        if (len > MAX_LINE_BYTES) {
            fprintf(stderr, "tilestack chat: turn dropped: a line of %zu bytes (at most %zu)\n",
                    len, MAX_LINE_BYTES);
            rc = 1;
            continue;
        }
        const int trc = turn(&gm, &gs, &h, &a, &o, &rng, line, len);
        if (trc) rc = 1;
        if (trc == 2) break;
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "tilestack chat: writing stdout failed\n");
        rc = 1;
    }
    free(line);
    pop_to(&h, 0);
    free(h.m);
    gen_seq_free(&gs);
    return gen_ranks_close(&rk, &gm, rc);
}
