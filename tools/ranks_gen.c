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
 * same bits (model_ep.h).
 *
 * `serve` spreads its sequences instead (gen_args.spread): slot s lives on rank s % R as its
 * sequence s / R, so every rank attends its share of a step (data-parallel attention, as the
 * demo) while the experts serve all rows. Rank 0 still decides everything: it posts each step's
 * rows (slot, token) and each prompt chunk to every rank, each rank runs its rows, and the
 * other ranks send their rows' logits back for rank 0 to sample. A reset goes to the owner
 * only (not collective). The rows' logits are the single-process bits wherever they ran. */
#include "demo.h"
#include "gen.h"

#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#define RANKS_TIMEOUT_S 60.0 /* a wait on a peer, as the demo's --timeout default */

/* what rank 0 posts before each collective call; a spread call's post carries its payload's
 * bytes above the low byte (the payload follows: ts__demo_post_data) */
enum { POST_END = -1, POST_STEP = 1, POST_PREFILL = 2, POST_SPREAD_STEP = 3, POST_SPREAD_PREFILL = 4,
       POST_SPREAD_RESET = 5 };

typedef struct rank_ctx {
    ts__demo_comm c;
    /* the sequences each rank's model holds: rank 0's all (serve --max-batch, every rank's
     * EP buffers sized alike), or spread: ceil(max_batch / R) each */
    int64_t max_batch;
    bool spread;
    int64_t kv_tokens;     /* spread: the pool of ceil(kv_tokens / R) tokens per rank (0: default) */
    int64_t *msg;          /* a spread call's payload (int64), grown to the largest one */
    int64_t msg_cap;
    float *logits;         /* [max_batch][vocab]: a rank's rows of a spread step */
    int64_t *seqs;
    int32_t *toks;
    int64_t vocab;
    ts_model *m;
} rank_ctx;

static ts_status create(void *ctx, const ts_model_config *cfg, const char *weights,
                        const char *dir, ts_model **m) {
    rank_ctx *r = ctx;
    TS__RETURN_IF_ERROR(
        ts__demo_model_create(&r->c, cfg, weights, dir, r->max_batch, false, r->c.timeout_s, m));
    ts_model_kv_pages p;
    /* every rank alike: a model without pages (V3) keeps its slots; serve refuses the option */
    if (r->spread && r->kv_tokens && ts_model_get_kv_pages(*m, &p) == TS_OK && p.paged) {
        const int64_t tok = (r->kv_tokens + r->c.size - 1) / r->c.size;
        TS__RETURN_IF_ERROR(ts_model_set_kv_pages(*m, 0, (tok + p.page_tokens - 1) / p.page_tokens));
    }
    return TS_OK;
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

/* ---- spread sequences (serve over ranks): the payloads, int64 each
 *   step:    n, then n x (slot, token)
 *   prefill: slot, n, want_logits, then n tokens
 *   reset:   slot
 * The slot's owner is slot % R, its sequence there slot / R. */

static bool grow_msg(rank_ctx *r, int64_t n) {
    if (n <= r->msg_cap) return true;
    int64_t *p = realloc(r->msg, (size_t)n * sizeof *p);
    if (!p) return false;
    r->msg = p;
    r->msg_cap = n;
    return true;
}

static void post_spread(rank_ctx *r, int64_t kind, int64_t n) {
    int64_t what = kind | (n * (int64_t)sizeof(int64_t)) << 8;
    ts__demo_post(&r->c, &what);
    ts__demo_post_data(&r->c, r->msg, n * (int64_t)sizeof(int64_t));
}

/* This rank's rows of a step (the payload in r->msg): decoded, logits into r->logits. */
static ts_status spread_step_mine(rank_ctx *r, int64_t *mine) {
    const int64_t n = r->msg[0], R = r->c.size;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (r->msg[1 + 2 * i] % R == r->c.rank) {
            r->seqs[k] = r->msg[1 + 2 * i] / R;
            r->toks[k++] = (int32_t)r->msg[2 + 2 * i];
        }
    *mine = k;
    return ts_model_decode(r->m, k, r->seqs, r->toks, k ? r->logits : NULL);
}

/* This rank's part of a prefill: its slot's tokens, or none. */
static ts_status spread_prefill_mine(rank_ctx *r, bool *mine) {
    const int64_t slot = r->msg[0], n = r->msg[1], R = r->c.size;
    *mine = slot % R == r->c.rank;
    if (!*mine) return ts_model_prefill(r->m, 0, 0, NULL, NULL);
    for (int64_t i = 0; i < n; i++) r->toks[i] = (int32_t)r->msg[3 + i];
    return ts_model_prefill(r->m, slot / R, n, r->toks, r->msg[2] ? r->logits : NULL);
}

static ts_status spread_decode(void *ctx, int64_t n, const int64_t *slots, const int32_t *tokens,
                               float *logits) {
    rank_ctx *r = ctx;
    const int64_t R = r->c.size, V = r->vocab;
    if (!grow_msg(r, 1 + 2 * n)) return ts__fail(TS_ERR_OUT_OF_MEMORY, "serve: out of memory (a step's rows)");
    r->msg[0] = n;
    for (int64_t i = 0; i < n; i++) r->msg[1 + 2 * i] = slots[i], r->msg[2 + 2 * i] = tokens[i];
    post_spread(r, POST_SPREAD_STEP, 1 + 2 * n);
    int64_t k = 0;
    TS__RETURN_IF_ERROR(spread_step_mine(r, &k));
    /* the rows in order: rank 0's from its own logits, the others' as they send them */
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++)
        if (slots[i] % R == 0) memcpy(logits + i * V, r->logits + (j++) * V, (size_t)V * sizeof(float));
    for (int q = 1; q < R; q++) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < n; i++) cnt += slots[i] % R == q;
        if (!cnt) continue;
        TS__RETURN_IF_ERROR(ts__demo_recv_back(&r->c, q, r->logits, cnt * V * (int64_t)sizeof(float)));
        j = 0;
        for (int64_t i = 0; i < n; i++)
            if (slots[i] % R == q) memcpy(logits + i * V, r->logits + (j++) * V, (size_t)V * sizeof(float));
    }
    return TS_OK;
}

static ts_status spread_prefill(void *ctx, int64_t slot, int64_t n, const int32_t *tokens,
                                float *last_logits) {
    rank_ctx *r = ctx;
    if (!grow_msg(r, 3 + n)) return ts__fail(TS_ERR_OUT_OF_MEMORY, "serve: out of memory (a prompt chunk)");
    r->msg[0] = slot, r->msg[1] = n, r->msg[2] = last_logits != NULL;
    for (int64_t i = 0; i < n; i++) r->msg[3 + i] = tokens[i];
    post_spread(r, POST_SPREAD_PREFILL, 3 + n);
    const int owner = (int)(slot % r->c.size);
    if (owner == 0)
        return ts_model_prefill(r->m, slot / r->c.size, n, tokens, last_logits);
    TS__RETURN_IF_ERROR(ts_model_prefill(r->m, 0, 0, NULL, NULL));
    return last_logits ? ts__demo_recv_back(&r->c, owner, last_logits, r->vocab * (int64_t)sizeof(float)) : TS_OK;
}

static void spread_reset(void *ctx, int64_t slot) {
    rank_ctx *r = ctx;
    if (slot % r->c.size == 0) {
        ts_model_reset_sequence(r->m, slot / r->c.size);
        return;
    }
    if (!grow_msg(r, 1)) ts__demo_abort(&r->c, "out of memory");
    r->msg[0] = slot;
    post_spread(r, POST_SPREAD_RESET, 1);
}

/* A rank other than 0: every call rank 0 posts, with no sequence (or its spread sequences'
 * rows), until it posts POST_END. */
static void follow(rank_ctx *r, ts_model *m) {
    for (;;) {
        int64_t what = 0;
        ts__demo_post(&r->c, &what);
        if (what == POST_END) return;
        const int64_t kind = what & 0xff, bytes = what >> 8;
        if (kind >= POST_SPREAD_STEP) {
            if (!grow_msg(r, bytes / (int64_t)sizeof(int64_t))) ts__demo_abort(&r->c, "out of memory");
            ts__demo_post_data(&r->c, r->msg, bytes);
        }
        ts_status st = TS_OK;
        if (kind == POST_SPREAD_RESET) {
            if (r->msg[0] % r->c.size == r->c.rank) ts_model_reset_sequence(m, r->msg[0] / r->c.size);
            continue;
        } else if (kind == POST_SPREAD_STEP) {
            int64_t k = 0;
            st = spread_step_mine(r, &k);
            if (st == TS_OK && k)
                ts__demo_send_back(&r->c, r->logits, k * r->vocab * (int64_t)sizeof(float));
        } else if (kind == POST_SPREAD_PREFILL) {
            bool mine = false;
            st = spread_prefill_mine(r, &mine);
            if (st == TS_OK && mine && r->msg[2])
                ts__demo_send_back(&r->c, r->logits, r->vocab * (int64_t)sizeof(float));
        } else {
            st = kind == POST_PREFILL ? ts_model_prefill(m, 0, 0, NULL, NULL)
                                      : ts_model_decode(m, 0, NULL, NULL, NULL);
        }
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
    r->spread = a->spread && r->c.size > 1;
    r->kv_tokens = a->kv_tokens;
    if (r->spread) r->max_batch = (r->max_batch + r->c.size - 1) / r->c.size;
    /* the launcher's terminals, which a rank behind mpirun's pipes cannot see */
    const char *tty = getenv(TS__RANKS_TTY_ENV);
    if (tty && strlen(tty) == 2) gen_set_tty(tty[0] == '1', tty[1] == '1');
    const gen_peers p = {.rank = r->c.rank, .create = create, .agree = agree, .ctx = r};
    int rc = gen_open_model_on(cmd, a, &p, gm);
    if (!rc && r->spread) {
        /* a step's rows and a prompt chunk's tokens (ts_model_prefill takes int32) */
        const int64_t rows = r->max_batch > 48 ? r->max_batch : 48;
        r->m = gm->m;
        r->vocab = gm->cfg->vocab_size;
        r->logits = malloc((size_t)(r->max_batch * r->vocab) * sizeof *r->logits);
        r->seqs = malloc((size_t)r->max_batch * sizeof *r->seqs);
        r->toks = malloc((size_t)(rows > (1 << 16) ? rows : (1 << 16)) * sizeof *r->toks);
        if (!r->logits || !r->seqs || !r->toks) {
            fprintf(stderr, "tilestack %s: out of memory\n", cmd);
            rc = 1;
        }
    }
    if (!rc && r->c.rank != 0) {
        follow(r, gm->m);
        rk->done = true;
    }
    if (rc || rk->done) return gen_ranks_close(rk, gm, rc);
    gm->announce = announce;
    gm->announce_ctx = r;
    if (r->spread) {
        gm->spread = r->c.size;
        gm->spread_decode = spread_decode;
        gm->spread_prefill = spread_prefill;
        gm->spread_reset = spread_reset;
    }
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
        free(r->msg), free(r->logits), free(r->seqs), free(r->toks);
        free(r);
        rk->comm = NULL;
    }
    rk->done = true;
    return rc;
}
