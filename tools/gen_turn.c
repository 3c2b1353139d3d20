/* One reply: the prompt into the sequence (keeping the cache of a shared prefix), then sample,
 * stream, decode, until EOS, a stop string, -n or the end of the context. */
#include "gen.h"

#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np) return false;
    *p = np;
    *cap = c;
    return true;
}

/* What the stop matcher releases: the caller's stream, and the reply's text. */
static void emit_text(void *vc, const char *text, size_t n) {
    gen_reply *c = vc;
    if (!grow((void **)&c->r->text, &c->text_cap, c->r->text_len + n + 1, 1)) {
        c->oom = true;
        return;
    }
    memcpy(c->r->text + c->r->text_len, text, n);
    c->r->text_len += n;
    c->r->text[c->r->text_len] = 0;
    if (c->o->emit) c->o->emit(c->o->emit_ctx, text, n);
}

/* The prompt into the cache: the tokens after the prefix the cache already holds, or, when the
 * prompt does not extend it (an edited history, a re-tokenised reply, a stop string cut), all
 * of them into a reset sequence. The model cannot drop a cache suffix, so nothing in between. */
static ts_status feed_prompt(gen_model *gm, gen_seq *gs, const int32_t *prompt, size_t n,
                             size_t *reused) {
    size_t keep = 0;
    const int64_t pos = ts_model_sequence_position(gm->m, gs->seq);
    if (gs->n && gs->n < n && pos == (int64_t)gs->n && !memcmp(gs->ids, prompt, gs->n * sizeof *prompt))
        keep = gs->n;
    else if (pos != 0) TS__RETURN_IF_ERROR(ts_model_reset_sequence(gm->m, gs->seq));
    gs->n = keep;
    *reused = keep;
    if (!grow((void **)&gs->ids, &gs->cap, n, sizeof *gs->ids))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "the prompt's %zu ids", n);
    if (n > keep) {
        /* batched (the rows of a chunk go through each GEMM together); over ranks, collective */
        if (gm->announce) gm->announce(gm->announce_ctx, true);
        TS__RETURN_IF_ERROR(ts_model_prefill(gm->m, gs->seq, (int64_t)(n - keep), prompt + keep,
                                             gm->logits));
    }
    memcpy(gs->ids + keep, prompt + keep, (n - keep) * sizeof *prompt);
    gs->n = n;
    return TS_OK;
}

static ts_status oom(const char *what) { return ts__fail(TS_ERR_OUT_OF_MEMORY, "generation: %s", what); }

/* Room for one more output token (its id, and its log-probabilities when asked for). */
static bool grow_out(gen_result *r, size_t *cap) {
    if (r->n_out < *cap) return true;
    const size_t c = *cap ? *cap * 2 : 64;
    int32_t *out = realloc(r->out, c * sizeof *out);
    if (out) r->out = out;
    if (!out) return false;
    if (r->top_n) {
        const size_t t = c * (size_t)r->top_n;
        double *lp = realloc(r->lp, c * sizeof *lp);
        if (lp) r->lp = lp;
        int32_t *ti = lp ? realloc(r->top_ids, t * sizeof *ti) : NULL;
        if (ti) r->top_ids = ti;
        double *tl = ti ? realloc(r->top_lp, t * sizeof *tl) : NULL;
        if (tl) r->top_lp = tl;
        if (!tl) return false;
    }
    *cap = c;
    return true;
}

/* Samples the next token from logits (masked first) and records it unless it is EOS. */
static ts_status sample(gen_reply *rp, float *logits, uint64_t *rng, int32_t *tok) {
    const gen_model *gm = rp->gm;
    gen_result *r = rp->r;
    const int64_t v = gm->cfg->vocab_size;
    for (size_t i = 0; i < gm->n_masked; i++) logits[gm->masked[i]] = -INFINITY;
    TS__RETURN_IF_ERROR(ts_sampler_sample(logits, v, &rp->o->sp, rng, tok));
    if (*tok == gm->eos && !rp->o->ignore_eos) return TS_OK;
    if (!grow_out(r, &rp->out_cap)) return oom("output ids");
    const size_t k = r->n_out, tn = (size_t)r->top_n;
    if (tn)
        TS__RETURN_IF_ERROR(ts_sampler_logprobs(logits, v, *tok, r->top_n, &r->lp[k],
                                                &r->top_ids[k * tn], &r->top_lp[k * tn]));
    r->out[r->n_out++] = *tok;
    return TS_OK;
}

/* The text of token `tok` (-1: the stream's end) into the stop matcher (which streams what
 * is final). */
static ts_status put_text(gen_reply *rp, int32_t tok) {
    const char *t = ts_tokenizer_id_to_token(rp->gm->tok, tok);
    const size_t need = 3 * (t ? strlen(t) : 0) + 12 + 64; /* the stream's bound, and finish's */
    if (!grow((void **)&rp->piece, &rp->piece_cap, need, 1)) return oom("text");
    size_t len = 0;
    TS__RETURN_IF_ERROR(tok >= 0 ? ts_tokenizer_stream_put(&rp->ds, tok, rp->piece, rp->piece_cap, &len)
                                 : ts_tokenizer_stream_finish(&rp->ds, rp->piece, rp->piece_cap, &len));
    if (gen_stop_push(&rp->stop, rp->piece, len, emit_text, rp) != TS_OK || rp->oom) return oom("text");
    return TS_OK;
}

ts_status gen_reply_begin(gen_reply *rp, const gen_model *gm, const gen_opts *o,
                          const int32_t *prompt, size_t n_prompt, gen_result *r) {
    memset(rp, 0, sizeof *rp);
    memset(r, 0, sizeof *r);
    rp->gm = gm;
    rp->o = o;
    rp->r = r;
    r->top_n = o->logprobs;
    r->n_prompt = n_prompt;
    ts_tokenizer_stream_init(&rp->ds, gm->tok, false);
    gen_stop_init(&rp->stop, o->stops, o->n_stops);
    if (!(r->prompt = malloc(n_prompt * sizeof *prompt))) return oom("prompt");
    memcpy(r->prompt, prompt, n_prompt * sizeof *prompt);
    return TS_OK;
}

ts_status gen_reply_take(gen_reply *rp, float *logits, uint64_t *rng, int64_t cached, int32_t *tok) {
    gen_result *r = rp->r;
    TS__RETURN_IF_ERROR(sample(rp, logits, rng, tok));
    if (*tok == rp->gm->eos && !rp->o->ignore_eos) {
        r->finish = "eos";
        return TS_OK;
    }
    TS__RETURN_IF_ERROR(put_text(rp, *tok));
    if (rp->stop.hit) r->finish = "stop";
    else if ((int64_t)r->n_out == rp->o->max_new) r->finish = "length";
    else if (cached == rp->gm->cfg->max_seq_len) r->finish = "context";
    return TS_OK;
}

ts_status gen_reply_end(gen_reply *rp, ts_status st) {
    gen_result *r = rp->r;
    /* a character cut by the end of the reply comes out as U+FFFD, as the batch decode has it */
    if (st == TS_OK && !rp->stop.hit) st = put_text(rp, -1);
    if (st == TS_OK) gen_stop_finish(&rp->stop, emit_text, rp);
    if (st == TS_OK && rp->oom) st = oom("text");
    if (st == TS_OK && !r->text && !(r->text = calloc(1, 1))) st = oom("text");
    free(rp->piece);
    rp->piece = NULL;
    gen_stop_free(&rp->stop);
    return st;
}

ts_status gen_turn(gen_model *gm, gen_seq *gs, const int32_t *prompt, size_t n_prompt,
                   const gen_opts *o, uint64_t *rng, gen_result *r) {
    memset(r, 0, sizeof *r);
    TS__RETURN_IF_ERROR(gen_check_prompt(gm->cfg->max_seq_len, n_prompt));
    gen_reply rp;
    const double t0 = now_s();
    ts_status st = gen_reply_begin(&rp, gm, o, prompt, n_prompt, r);
    if (st == TS_OK) st = feed_prompt(gm, gs, prompt, n_prompt, &r->reused);
    const double t1 = now_s();
    double t_first = t1, t_last = t1;
    for (bool first = true; st == TS_OK; first = false) {
        int32_t tok;
        st = gen_reply_take(&rp, gm->logits, rng, (int64_t)gs->n, &tok);
        t_last = now_s();
        if (first) t_first = t_last;
        if (st != TS_OK || r->finish) break;
        if (!grow((void **)&gs->ids, &gs->cap, gs->n + 1, sizeof *gs->ids)) {
            st = oom("sequence ids");
            break;
        }
        if (gm->announce) gm->announce(gm->announce_ctx, false);
        if ((st = ts_model_decode(gm->m, 1, &gs->seq, &tok, gm->logits)) != TS_OK) break;
        gs->ids[gs->n++] = tok;
        r->decode_steps++;
    }
    st = gen_reply_end(&rp, st);
    r->prefill_s = t1 - t0;
    r->ttft_s = t_first - t0;
    r->decode_s = t_last - t_first;
    if (st != TS_OK) {
        /* the cache may hold part of what was fed: start the next turn from nothing */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        ts_model_reset_sequence(gm->m, gs->seq);
        gs->n = 0;
        gen_result_free(r);
        return ts__fail(st, "%s", msg);
    }
    return TS_OK;
}

ts_status gen_check_prompt(int64_t ctx, size_t n_prompt) {
    if (n_prompt == 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "the prompt encodes to no tokens");
    if ((int64_t)n_prompt > ctx - 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "the prompt is %zu tokens, longer than the "
                        "model's context (max_seq_len %lld) minus 1 = %lld", n_prompt,
                        (long long)ctx, (long long)(ctx - 1));
    return TS_OK;
}

void gen_result_free(gen_result *r) {
    free(r->prompt);
    free(r->out);
    free(r->text);
    free(r->lp);
    free(r->top_ids);
    free(r->top_lp);
    memset(r, 0, sizeof *r);
}

void gen_seq_free(gen_seq *gs) {
    free(gs->ids);
    gs->ids = NULL;
    gs->n = gs->cap = 0;
}

void gen_print_stats(FILE *f, const gen_result *r) {
    const size_t fed = r->n_prompt - r->reused;
    fprintf(f, "prefill: %zu tokens", fed);
    if (r->reused) fprintf(f, " (+%zu reused from the cache)", r->reused);
    fprintf(f, " in %.3f s, %.1f tokens/s; ", r->prefill_s,
            r->prefill_s > 0 ? (double)fed / r->prefill_s : 0.0);
    if (r->decode_steps > 0 && r->decode_s > 0)
        fprintf(f, "decode: %lld steps in %.3f s, %.1f tokens/s, TPOT %.2f ms; ",
                (long long)r->decode_steps, r->decode_s, (double)r->decode_steps / r->decode_s,
                1e3 * r->decode_s / (double)r->decode_steps);
    else fprintf(f, "decode: no step; ");
    fprintf(f, "%zu tokens out, finish: %s\n", r->n_out, r->finish);
}
