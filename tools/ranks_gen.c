/* `generate --ranks R` and `chat --ranks R` (docs/models.md, "Expert parallelism"): the
 * demo's launcher starts R copies of the command under mpirun (demo_launch.c), each binds E/R
 * experts of the model (model_ep.h, through demo_comm.c, the tools' one MPI user).
 *
 * Rank 0 alone holds the sequence: it tokenises, samples, prints and reads chat's stdin. Every
 * prefill and decode step of an EP model is collective, so before each rank 0 posts which
 * (POST_PREFILL: the prompt, in one ts_model_prefill; POST_STEP: one decode step per sampled
 * token); the other ranks take part in it with no sequence of their own (a prefill of zero
 * tokens, a step of zero rows), and leave when rank 0 posts POST_END. The tokens are rank 0's
 * alone, so the ranks cannot disagree on them; they are those of R = 1, whose logits are the
 * same bits (model_ep.h). */
#include "demo.h"
#include "gen.h"

#include <stdlib.h>
#include <string.h>

#define RANKS_TIMEOUT_S 60.0 /* a wait on a peer, as the demo's --timeout default */

/* what rank 0 posts before each collective call */
enum { POST_END = -1, POST_STEP = 1, POST_PREFILL = 2 };

typedef struct rank_ctx {
    ts__demo_comm c;
    int64_t max_batch; /* rank 0's sequences (serve --max-batch); every rank sizes for them */
} rank_ctx;

static ts_status create(void *ctx, const ts_model_config *cfg, const char *weights,
                        const char *dir, ts_model **m) {
    rank_ctx *r = ctx;
    /* the sequences are rank 0's, but the EP buffers are sized alike on every rank */
    return ts__demo_model_create(&r->c, cfg, weights, dir, r->max_batch, false, r->c.timeout_s, m);
}

static int agree(void *ctx, int rc, bool peer, char *msg, size_t cap) {
    rank_ctx *r = ctx;
    /* the message: the first failing rank's (its own error before another's report of it) */
    const ts_status st = rc == 0 ? TS_OK : peer ? TS_ERR_PEER : TS_ERR_INVALID_ARGUMENT;
    ts__demo_agree(&r->c, st, msg, cap);
    double worst = rc;
    ts__demo_max(&r->c, &worst, 1);
    return (int)worst;
}

static void announce(void *ctx, bool prefill) {
    rank_ctx *r = ctx;
    int64_t what = prefill ? POST_PREFILL : POST_STEP;
    ts__demo_post(&r->c, &what);
}

/* A rank other than 0: every call rank 0 posts, with no sequence, until it posts POST_END. */
static void follow(rank_ctx *r, ts_model *m) {
    for (;;) {
        int64_t what = 0;
        ts__demo_post(&r->c, &what);
        if (what == POST_END) return;
        const ts_status st = what == POST_PREFILL ? ts_model_prefill(m, 0, 0, NULL, NULL)
                                                  : ts_model_decode(m, 0, NULL, NULL, NULL);
        /* rank 0's call was refused before anything ran: it says why, and ends its turn */
        if (st == TS_ERR_PEER) ts_clear_error();
        else if (st != TS_OK) ts__demo_abort(&r->c, ts_last_error());
    }
}

bool gen_ranks_take_token(int *argc, char **argv) { return ts__demo_take_rank_token(argc, argv); }

int gen_ranks_open(const char *cmd, const gen_args *a, bool is_rank, int argc, char **argv,
                   gen_ranks *rk, gen_model *gm) {
    memset(rk, 0, sizeof *rk);
    if (!is_rank && a->ranks <= 1) return gen_open_model(cmd, a, gm);
    if (!is_rank) {
        memset(gm, 0, sizeof *gm);
        rk->done = true;
        if (!ts__demo_have_ep()) {
            fprintf(stderr, "tilestack %s: --ranks %lld needs a build with MPI and the "
                    "expert-parallel model (tilestack/model_ep.h); this one has neither: use "
                    "--ranks 1\n", cmd, (long long)a->ranks);
            return 2;
        }
        int threads = a->threads;
        if (!threads) threads = ts__demo_cores() / (int)a->ranks;
        if (threads < 1) threads = 1;
        return ts__launch_ranks(cmd, (int)a->ranks, threads, !strcmp(cmd, "chat"), argc, argv);
    }
    rank_ctx *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "tilestack %s: out of memory\n", cmd);
        return 1;
    }
    ts__demo_comm_set_name(cmd);
    if (ts__demo_comm_init(&r->c, &argc, &argv, a->rank_timeout_s > 0 ? a->rank_timeout_s : RANKS_TIMEOUT_S) != TS_OK) {
        fprintf(stderr, "tilestack %s: %s\n", cmd, ts_last_error());
        free(r);
        return 1;
    }
    rk->comm = r;
    r->max_batch = a->max_batch > 0 ? a->max_batch : 1;
    /* the launcher's terminals, which a rank behind mpirun's pipes cannot see */
    const char *tty = getenv(TS__RANKS_TTY_ENV);
    if (tty && strlen(tty) == 2) gen_set_tty(tty[0] == '1', tty[1] == '1');
    const gen_peers p = {.rank = r->c.rank, .create = create, .agree = agree, .ctx = r};
    int rc = gen_open_model_on(cmd, a, &p, gm);
    if (!rc && r->c.rank != 0) {
        follow(r, gm->m);
        rk->done = true;
    }
    if (rc || rk->done) return gen_ranks_close(rk, gm, rc);
    gm->announce = announce;
    gm->announce_ctx = r;
    return 0;
}

void gen_ranks_abort(gen_ranks *rk, const char *msg) {
    rank_ctx *r = rk->comm;
    if (r) ts__demo_abort(&r->c, msg);
}

int gen_ranks_close(gen_ranks *rk, gen_model *gm, int rc) {
    rank_ctx *r = rk->comm;
    if (r && r->c.rank == 0 && gm->m) {
        int64_t end = POST_END;
        ts__demo_post(&r->c, &end);
    }
    gen_close_model(gm); /* collective over ranks */
    if (r) {
        ts__demo_comm_finalize(&r->c);
        free(r);
        rk->comm = NULL;
    }
    rk->done = true;
    return rc;
}
