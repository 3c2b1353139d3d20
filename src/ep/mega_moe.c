/* Mega MoE, the fused path (ts_fp8_fp4_mega_moe / ts_bf16_mega_moe). One collective call, no
 * barrier inside:
 *   1. publish: this rank's verdict on its own arguments and num_tokens in its header, then
 *      `ready` = call number (its inputs already sit in its region: the caller wrote them).
 *   2. pull + compute: scan each ready source's topk_idx (in its region) for this rank's
 *      experts; per local expert gather its rows straight from the sources' x / x_sf (the
 *      dispatch's one copy), L1 GEMM, SwiGLU + FP8 cast, L2 GEMM written straight into this
 *      rank's out rows, and the row's position into pos[source]. Sources that are ready
 *      within a short grace period are processed together (one weight pass per expert); if a
 *      peer is late, the tokens at hand are computed expert by expert while it is awaited; an
 *      arrival stops that round between experts, and the next round takes every source's
 *      tokens for the experts not yet reached (and the late tokens of those already done).
 *   3. `done` = call number; wait for every rank's `done`.
 *   4. combine: each token sums, in top-k order, the rows its experts' ranks wrote.
 * Bits never depend on arrival, phases or threads: each output row is a GEMM row of its own
 * (docs/gemm.md), and the sum order is fixed. Protocol and hazards: docs/mega_moe.md. */
#include "ep/mega_moe_gemm.h"
#include "ep/mega_moe_internal.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double ts__mega_moe_now(void) { return now_s(); }

void ts__mega_moe_phase_times(const ts_mega_moe_buffer *b, bool fused, double out[TS__MM_NPHASE]) {
    for (int i = 0; i < TS__MM_NPHASE; i++) out[i] = fused ? b->prof_f[i] : b->prof_u[i];
}

/* Grace period for peers before a partial pass (s): env TS_MEGA_MOE_GRACE_US, default 200 us.
 * A pass over an expert's weights costs far more than this at decode sizes. */
static double grace_s(void) {
    static double g = -1.0;
    if (g < 0.0) {
        const char *e = getenv("TS_MEGA_MOE_GRACE_US");
        g = (e && atof(e) >= 0.0) ? atof(e) * 1e-6 : 200e-6;
    }
    return g;
}

typedef struct mm_call {
    ts_mega_moe_buffer *b;
    const ts_mega_moe_weights *w;
    float clamp;
    int parity;
    uint64_t seq;
    const bool *got;       /* [R] sources whose inputs are in this round */
    bool partial;          /* some source is missing: stop when one arrives */
    _Atomic int64_t next_row; /* out rows handed out so far this call */
    _Atomic int stop;      /* a failure, or (partial rounds) a new arrival */
    ts_status st;          /* first GEMM failure (a bug or out of memory) */
} mm_call;

/* Which GEMM the fused path runs per expert: env TS_MEGA_MOE_GEMM = "grouped" (the default:
 * always the grouped GEMM), "own" (mega_moe_gemm.c wherever it fits: up to 16 rows; the tests
 * use it), "small" (the own kernel for 1 or 2 rows and N >= 1024, own_gemm). Same bits every
 * way. Measured on Zen 3 (one expert, one rank, weights from DRAM): 1 row 1.23x, 2 rows 1.13x
 * the grouped GEMM's speed, 4 rows 0.99x, 8 rows 0.90x: vpmaddwd does twice the multiply-adds
 * of an FMA but issues at half the rate here, so only the cheaper weight decode is a gain. In
 * the whole call at R = 2 (both ranks streaming weights, 45-80% of the DRAM roofline) "small"
 * measured 0.82-1.05x of "grouped" in quiet A/B runs (TS_BENCH_MEGA_MOE_AB=1, 2026-11-30), so
 * it is not the default. */
static _Atomic int g_gemm_mode = -1;

void ts__mega_moe_set_gemm_mode(int mode) { atomic_store(&g_gemm_mode, mode < 0 ? -1 : mode); }

static int gemm_mode(void) {
    int f = atomic_load(&g_gemm_mode);
    if (f < 0) {
        const char *e = getenv("TS_MEGA_MOE_GEMM");
        f = e && !strcmp(e, "small") ? 0 : e && !strcmp(e, "own") ? 2 : 1;
        atomic_store(&g_gemm_mode, f);
    }
    return f;
}

/* Per GEMM: "small" also needs N >= 1024, where the per-call preparation of A (~m K values)
 * is small against the weight stream (N = 256, K = 4096: 0.87x). */
static bool own_gemm(const ts_mega_moe_weights *w, const ts_packed_weight *pw, int64_t m) {
    const int mode = gemm_mode();
    if (w->bf16 || mode == 1 || (mode == 0 && (m > 2 || ts__mega_moe_gemm_n(pw) < 1024))) return false;
    return ts__mega_moe_gemm_fits(pw, m);
}

/* A source outside the round has published its inputs. */
static bool new_arrival(const mm_call *c) {
    for (int r = 0; r < c->b->R; r++)
        if (!c->got[r] && atomic_load_explicit(&ts__mm_hdr_of(c->b, r)->ready, memory_order_acquire) >= c->seq)
            return true;
    return false;
}

/* The whole pipeline of one local expert over the current phase's entries. */
static ts_status expert_run(mm_call *c, int64_t e, int tid) {
    ts_mega_moe_buffer *b = c->b;
    const int64_t H = b->H, I = b->I, m = b->cnt[e], K = b->K;
    const ts__mm_entry *ent = b->ent + b->first[e];
    const bool bf = b->bf16;
    const int64_t xsb = b->x_row_bytes, sfw = H / 128, sfw2 = I / 128;
    const int64_t a2b = bf ? 2 : 1;
    /* scratch: a [m, x row], sfa [m, H/128], h [m, 2I] bf16, a2 [m, I], sfa2 [m, I/128], w [m], ends [El] */
    const size_t o_sfa = (size_t)ts__align(m * xsb, 64);
    const size_t o_h = o_sfa + (size_t)ts__align(m * sfw * 4, 64);
    const size_t o_a2 = o_h + (size_t)ts__align(m * 2 * I * 2, 64);
    const size_t o_sf2 = o_a2 + (size_t)ts__align(m * I * a2b, 64);
    const size_t o_w = o_sf2 + (size_t)ts__align(m * sfw2 * 4 + 4, 64);
    const size_t o_end = o_w + (size_t)ts__align(m * 4, 64);
    const bool own1 = own_gemm(c->w, c->w->l1, m), own2 = own_gemm(c->w, c->w->l2, m);
    const size_t o_g = (size_t)ts__align((int64_t)o_end + b->El * 4, 64);
    const size_t bytes = o_g + (own1 || own2 ? ts__mega_moe_gemm_scratch(m, H > I ? H : I) : 0);
    uint8_t *s = ts__mega_moe_tscratch(b, tid, bytes);
    if (!s) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_fp8_fp4_mega_moe: out of memory (%zu bytes of scratch)", bytes);
    uint8_t *a = s;
    int32_t *sfa = (int32_t *)(void *)(s + o_sfa);
    uint16_t *h = (uint16_t *)(void *)(s + o_h);
    uint8_t *a2 = s + o_a2;
    int32_t *sfa2 = (int32_t *)(void *)(s + o_sf2);
    float *wt = (float *)(void *)(s + o_w);
    int32_t *ends = (int32_t *)(void *)(s + o_end);
    double *pf = tid == 0 ? b->prof_f : NULL;
    double t0 = now_s(), t1;
    /* dispatch: pull the rows from the sources' regions */
    for (int64_t i = 0; i < m; i++) {
        const uint8_t *src = ts__mm_base(b, ent[i].src);
        memcpy(a + i * xsb, src + b->off_x + (int64_t)ent[i].tok * xsb, (size_t)xsb);
        if (!bf) memcpy(sfa + i * sfw, src + b->off_xsf + (int64_t)ent[i].tok * sfw * 4, (size_t)sfw * 4);
        wt[i] = ent[i].w;
    }
    /* psum layout with only group e populated: a grouped row has the bits of the dense call
     * on that row (docs/gemm.md), the same as in the unfused all-expert call */
    for (int64_t g = 0; g < b->El; g++) ends[g] = g < e ? 0 : (int32_t)m;
    ts_tensor gl = ts_tensor_1d(ends, TS_I32, b->El);
    ts_tensor ta = ts_tensor_2d(a, bf ? TS_BF16 : TS_E4M3, m, H);
    ts_tensor td = ts_tensor_2d(h, TS_BF16, m, 2 * I);
    if (pf) t1 = now_s(), pf[1] += t1 - t0, t0 = t1;
    static const int64_t recipe[3] = {1, 1, 32};
    ts_status st;
    if (own1) {
        ts__mega_moe_gemm(c->w->l1, e, a, sfa, m, h, 2 * I, s + o_g, false);
        st = TS_OK;
    } else if (bf) {
        st = ts_m_grouped_bf16_gemm_contiguous_packed(&ta, c->w->l1, &td, &gl, NULL, true, false);
    } else {
        ts_tensor tsa = ts_tensor_2d(sfa, TS_I32, m, sfw);
        st = ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&ta, &tsa, c->w->l1, &td, &gl, recipe, NULL, NULL, NULL,
                                                          false, true, false);
    }
    if (st != TS_OK) return st;
    if (pf) t1 = now_s(), pf[2] += t1 - t0, t0 = t1;
    ts__mega_moe_swiglu_cast(h, 2 * I, m, I, wt, c->clamp, bf, a2, I, sfa2, sfw2);
    if (pf) t1 = now_s(), pf[3] += t1 - t0, t0 = t1;
    /* L2 straight into this rank's out rows */
    uint16_t *out = (uint16_t *)(void *)(ts__mm_base(b, b->rank) + b->off_out[c->parity]);
    const int64_t orow = atomic_fetch_add(&c->next_row, m);
    ts_tensor ta2 = ts_tensor_2d(a2, bf ? TS_BF16 : TS_E4M3, m, I);
    ts_tensor to = ts_tensor_2d(out + orow * H, TS_BF16, m, H);
    if (own2) {
        ts__mega_moe_gemm(c->w->l2, e, a2, sfa2, m, out + orow * H, H, s + o_g, false);
        st = TS_OK;
    } else if (bf) {
        st = ts_m_grouped_bf16_gemm_contiguous_packed(&ta2, c->w->l2, &to, &gl, NULL, true, false);
    } else {
        ts_tensor tsa2 = ts_tensor_2d(sfa2, TS_I32, m, sfw2);
        st = ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&ta2, &tsa2, c->w->l2, &to, &gl, recipe, NULL, NULL, NULL,
                                                          false, true, false);
    }
    if (st != TS_OK) return st;
    if (pf) t1 = now_s(), pf[4] += t1 - t0, t0 = t1;
    int32_t *pos = (int32_t *)(void *)(ts__mm_base(b, b->rank) + b->off_pos[c->parity]);
    for (int64_t i = 0; i < m; i++)
        pos[((int64_t)ent[i].src * b->T + ent[i].tok) * K + ent[i].slot] = (int32_t)(orow + i);
    b->recv_total[e] += m;
    for (int r = 0; r < b->R; r++)
        if (c->got[r]) b->pdone[e * b->R + r] = 1;
    return TS_OK;
}

typedef struct phase_ctx {
    mm_call *c;
    const int32_t *list; /* experts to run */
} phase_ctx;

static void phase_task(void *v, int64_t begin, int64_t end, int tid) {
    phase_ctx *p = (phase_ctx *)v;
    for (int64_t i = begin; i < end; i++) {
        if (atomic_load_explicit(&p->c->stop, memory_order_relaxed)) return;
        if (p->c->partial && new_arrival(p->c)) {
            atomic_store(&p->c->stop, 1);
            return;
        }
        ts_status st = expert_run(p->c, p->list[i], tid);
        if (st != TS_OK && !atomic_exchange(&p->c->stop, 2)) p->c->st = st;
        if (st != TS_OK) p->c->st = p->c->st != TS_OK ? p->c->st : st;
    }
}

/* Entries of the sources in `take` that are not yet computed for their expert (pdone), by
 * (source, token, slot), bucketed by local expert into b->ent (b->first, b->cnt). Experts
 * with entries go to `list`, their count to *nlist. */
static void build_round(ts_mega_moe_buffer *b, const bool *take, int32_t *list, int64_t *nlist) {
    const int64_t El = b->El, K = b->K, R = b->R, lo = (int64_t)b->rank * El;
    int64_t n_ent = 0;
    memset(b->cnt, 0, (size_t)El * sizeof *b->cnt);
    for (int r = 0; r < R; r++) {
        if (!take[r]) continue;
        const uint8_t *base = ts__mm_base(b, r);
        const int64_t n = ts__mm_hdr_of(b, r)->num_tokens;
        const int64_t *idx = (const int64_t *)(const void *)(base + b->off_idx);
        const float *w = (const float *)(const void *)(base + b->off_w);
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = idx[t * K + k] - lo;
                if (e < 0 || e >= El || b->pdone[e * R + r]) continue;
                ts__mm_entry x = {r, (int32_t)t, (int32_t)k, (int32_t)e, w[t * K + k]};
                b->ent_tmp[n_ent++] = x;
                b->cnt[e]++;
            }
    }
    /* stable counting sort by expert: keeps (source, token, slot) order inside an expert */
    int64_t acc = 0, nl = 0;
    for (int64_t e = 0; e < El; e++) {
        b->first[e] = acc;
        if (b->cnt[e] > 0) list[nl++] = (int32_t)e;
        acc += b->cnt[e];
    }
    b->first[El] = acc;
    /* first[] serves as the cursors, then is shifted back */
    for (int64_t i = 0; i < n_ent; i++) {
        const ts__mm_entry x = b->ent_tmp[i];
        b->ent[b->first[x.expert]++] = x;
    }
    for (int64_t e = El; e > 0; e--) b->first[e] = b->first[e - 1];
    b->first[0] = 0;
    *nlist = nl;
}

/* Runs the experts of `list`; a partial round stops (between experts) when a missing source
 * arrives: the experts not reached keep their entries for the next round. */
static ts_status run_round(mm_call *c, const int32_t *list, int64_t nlist) {
    if (nlist == 0) return TS_OK;
    const int threads = ts_get_num_threads();
    ts_mega_moe_buffer *b = c->b;
    if (b->nthr < threads) {
        void **p = realloc(b->tscr, (size_t)threads * sizeof *p);
        if (!p) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_fp8_fp4_mega_moe: out of memory");
        b->tscr = p;
        size_t *q = realloc(b->tscr_bytes, (size_t)threads * sizeof *q);
        if (!q) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_fp8_fp4_mega_moe: out of memory");
        b->tscr_bytes = q;
        for (int i = b->nthr; i < threads; i++) b->tscr[i] = NULL, b->tscr_bytes[i] = 0;
        b->nthr = threads;
    }
    atomic_store(&c->stop, 0);
    c->st = TS_OK;
    if (threads > 1 && nlist >= 2 * threads) {
        /* experts claimed dynamically, each run whole by one thread (its GEMMs inline) */
        phase_ctx p = {c, list};
        ts__parallel_items(nlist, 1, phase_task, &p);
    } else {
        /* few experts: one at a time, each GEMM spread over the pool */
        for (int64_t i = 0; i < nlist && c->st == TS_OK; i++) {
            if (c->partial && new_arrival(c)) break;
            c->st = expert_run(c, list[i], 0);
        }
    }
    return c->st;
}

/* Sources whose `ready` reached seq; the first bad verdict or disagreement goes to *verdict. */
static void poll_ready(ts_mega_moe_buffer *b, uint64_t seq, bool *got, bool *fresh, int *ngot, ts_status *verdict,
                       const char *what) {
    const ts__mm_hdr *mine = ts__mm_hdr_of(b, b->rank);
    for (int r = 0; r < b->R; r++) {
        fresh[r] = false;
        if (got[r]) continue;
        const ts__mm_hdr *hd = ts__mm_hdr_of(b, r);
        if (atomic_load_explicit(&hd->ready, memory_order_acquire) < seq) continue;
        got[r] = fresh[r] = true;
        (*ngot)++;
        if (*verdict != TS_OK || r == b->rank) continue;
        if (hd->status != TS_OK)
            *verdict = ts__fail(TS_ERR_PEER, "%s: rank %d rejected its arguments (%s); this is rank %d", what, r,
                                ts_status_str((ts_status)hd->status), b->rank);
        else if (mine->status == TS_OK &&
                 (memcmp(&hd->clamp, &mine->clamp, sizeof(float)) != 0 || hd->fast_math != mine->fast_math))
            *verdict = ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "%s: activation_clamp / fast_math differ: rank %d has %g / %d, rank %d has %g / %d", what,
                                r, (double)hd->clamp, hd->fast_math, b->rank, (double)mine->clamp, mine->fast_math);
    }
}

/* Wait until every rank's counter (ready or done) reaches seq. */
static ts_status wait_all(ts_mega_moe_buffer *b, uint64_t seq, bool done, const char *what) {
    const double deadline = now_s() + b->ep->timeout_s;
    for (int i = 1; i < b->R; i++) {
        const int r = (b->rank + i) % b->R;
        const ts__mm_hdr *hd = ts__mm_hdr_of(b, r);
        const _Atomic uint64_t *f = done ? &hd->done : &hd->ready;
        ts__ep_backoff wait = TS__EP_BACKOFF_INIT;
        while (atomic_load_explicit(f, memory_order_acquire) < seq) {
            if (ts__ep_backoff_step(&wait) && now_s() > deadline) {
                b->ep->broken = true;
                return ts__fail(TS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for rank %d, which did not arrive", what,
                                b->rank, b->ep->timeout_s, r);
            }
        }
    }
    return TS_OK;
}

typedef struct comb_ctx {
    ts_mega_moe_buffer *b;
    const ts_tensor *y;
    int parity;
} comb_ctx;

static void comb_task(void *v, int64_t begin, int64_t end, int tid) {
    (void)tid;
    comb_ctx *c = (comb_ctx *)v;
    ts_mega_moe_buffer *b = c->b;
    const int64_t K = b->K, H = b->H;
    const int64_t *idx = (const int64_t *)(const void *)(ts__mm_base(b, b->rank) + b->off_idx);
    const uint16_t *rows[64];
    for (int64_t t = begin; t < end; t++) {
        int n = 0;
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = idx[t * K + k];
            if (e < 0) continue;
            const int r = (int)(e / b->El);
            const uint8_t *base = ts__mm_base(b, r);
            const int32_t *pos = (const int32_t *)(const void *)(base + b->off_pos[c->parity]);
            const int64_t row = pos[((int64_t)b->rank * b->T + t) * K + k];
            rows[n++] = (const uint16_t *)(const void *)(base + b->off_out[c->parity]) + row * H;
        }
        ts__mega_moe_sum_rows(rows, n, H, (uint16_t *)c->y->data + t * c->y->strides[0]);
    }
}

static ts_status mega_moe(ts_tensor *y, const ts_mega_moe_weights *w, ts_mega_moe_buffer *b, ts_tensor *stats,
                          const int64_t *recipe, const char *activation, float clamp, bool fast_math, bool want_bf16,
                          const char *what) {
    /* A NULL or broken buffer cannot take part: no publication is possible. */
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", what);
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b->ep, what));
    /* every rank knows the node count: all refuse alike, none enters the exchange */
    if (b->nodes > 1)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: the buffer's %d ranks span %d nodes; the fused call reads every "
                        "rank's region through shared memory, so it runs on one node only (ts_mega_moe_unfused "
                        "crosses nodes, with the same bits)", what, b->R, b->nodes);
    ts_status st = ts__mega_moe_check(b, y, w, stats, clamp, want_bf16, what);
    if (st == TS_OK && recipe && !(recipe[0] == 1 && recipe[1] == 1 && recipe[2] == 32))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: recipe (%lld, %lld, %lld) is not (1, 1, 32)", what,
                      (long long)recipe[0], (long long)recipe[1], (long long)recipe[2]);
    if (st == TS_OK && activation && strcmp(activation, "swiglu"))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: activation '%s' is not 'swiglu'", what, activation);
    const double t_start = now_s();
    memset(b->prof_f, 0, sizeof b->prof_f);
    const uint64_t seq = ++b->seq;
    const int parity = (int)(seq & 1);
    ts__mm_hdr *mine = ts__mm_hdr_of(b, b->rank);
    mine->status = (int32_t)st;
    mine->num_tokens = st == TS_OK ? y->shape[0] : 0;
    mine->clamp = clamp;
    mine->fast_math = fast_math ? 1 : 0;
    atomic_store_explicit(&mine->ready, seq, memory_order_release);

    ts_status verdict = st;
    bool got_buf[TS__EP_RANK_BOOK_BYTES], fresh_buf[TS__EP_RANK_BOOK_BYTES];
    bool *got = got_buf, *fresh = fresh_buf, *heap = NULL;
    if (b->R > TS__EP_RANK_BOOK_BYTES) {
        heap = calloc((size_t)b->R * 2, 1);
        if (!heap) verdict = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        got = heap, fresh = heap + b->R;
    }
    if (verdict == TS_OK) {
        memset(got, 0, (size_t)b->R);
        memset(b->recv_total, 0, (size_t)b->El * sizeof *b->recv_total);
        memset(b->pdone, 0, (size_t)(b->El * b->R));
    }
    int ngot = 0;
    mm_call c;
    c.b = b, c.w = w, c.clamp = clamp, c.parity = parity, c.seq = seq, c.got = got, c.partial = false;
    c.st = TS_OK;
    atomic_init(&c.next_row, 0);
    atomic_init(&c.stop, 0);
    if (verdict == TS_OK) {
        const double deadline = now_s() + b->ep->timeout_s;
        const double grace_end = now_s() + grace_s();
        ts__ep_backoff wait = TS__EP_BACKOFF_INIT;
        bool idle = false; /* every source at hand is computed: only waiting is left */
        for (;;) {
            const int before = ngot;
            poll_ready(b, seq, got, fresh, &ngot, &verdict, what);
            if (verdict != TS_OK) break;
            const bool all = ngot == b->R;
            if (ngot != before) idle = false;
            /* compute when everyone is here, or once the grace period is over */
            if (!idle && (all || now_s() > grace_end)) {
                int64_t nlist = 0;
                build_round(b, got, b->list, &nlist);
                c.partial = !all;
                verdict = run_round(&c, b->list, nlist);
                if (verdict != TS_OK) break;
                if (all) {
                    if (!atomic_load(&c.stop)) break; /* a full round that finished: all done */
                    continue;
                }
                /* partial: stopped for an arrival (poll again at once) or ran out of work */
                idle = !new_arrival(&c);
                wait.iter = 0, wait.sleep_ns = 2000;
                continue;
            }
            if (ts__ep_backoff_step(&wait) && now_s() > deadline) {
                for (int r = 0; r < b->R; r++)
                    if (!got[r]) {
                        b->ep->broken = true;
                        verdict = ts__fail(TS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for rank %d, which did not arrive",
                                           what, b->rank, b->ep->timeout_s, r);
                        break;
                    }
                if (verdict != TS_OK) break;
            }
        }
    }
    free(heap);
    if (b->ep->broken) return verdict;
    /* done: outputs of this call written (or abandoned), peers' inputs no longer read */
    atomic_store_explicit(&mine->done, seq, memory_order_release);
    if (verdict != TS_OK) {
        /* everyone has seen every verdict before leaving: wait so no peer still reads ours */
        const ts_status keep = verdict;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        if (wait_all(b, seq, true, what) != TS_OK) return TS_ERR_TIMEOUT;
        ts__fail(keep, "%s", msg);
        return keep;
    }
    double t0 = now_s();
    TS__RETURN_IF_ERROR(wait_all(b, seq, true, what));
    double t1 = now_s();
    b->prof_f[5] = t1 - t0;
    comb_ctx cc = {b, y, parity};
    ts__parallel_for(y->shape[0], 4, comb_task, &cc);
    t0 = now_s();
    b->prof_f[6] = t0 - t1;
    b->prof_f[0] = t0 - t_start;
    if (stats) {
        int32_t *s = (int32_t *)stats->data;
        for (int64_t e = 0; e < b->El; e++) s[e * stats->strides[0]] += (int32_t)b->recv_total[e];
    }
    return TS_OK;
}

ts_status ts_fp8_fp4_mega_moe(ts_tensor *y, const ts_mega_moe_weights *weights, ts_mega_moe_buffer *buf,
                              ts_tensor *cumulative_local_expert_recv_stats, const int64_t *recipe,
                              const char *activation, float activation_clamp, bool fast_math) {
    return mega_moe(y, weights, buf, cumulative_local_expert_recv_stats, recipe, activation, activation_clamp,
                    fast_math, false, "ts_fp8_fp4_mega_moe");
}

ts_status ts_bf16_mega_moe(ts_tensor *y, const ts_mega_moe_weights *weights, ts_mega_moe_buffer *buf,
                           ts_tensor *cumulative_local_expert_recv_stats, const char *activation,
                           float activation_clamp, bool fast_math) {
    return mega_moe(y, weights, buf, cumulative_local_expert_recv_stats, NULL, activation, activation_clamp,
                    fast_math, true, "ts_bf16_mega_moe");
}
