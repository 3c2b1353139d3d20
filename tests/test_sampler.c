/* ts_sampler_* (model.h): every draw against an independent float64 reference of the
 * distribution (sorted with qsort, normalised softmax, top-k, then top-p over the renormalised
 * probabilities, then the interval in id order that holds the same uniform), properties
 * (top-p 1 == plain sampling, top-k 1 == greedy, renormalisation by frequency, masked and cut
 * tokens never chosen over 10k draws), log-probabilities, bad input, and no subnormal operand
 * or result (the MXCSR guard). */
#include "test_mxcsr_common.h"
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/model.h"

#include <math.h>
#include <stdlib.h>

/* ---- the reference ---- */

static const float *g_ref_logits; /* qsort has no context argument */

static int by_logit_desc(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_ref_logits[i], y = g_ref_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

/* The distribution the sampler draws from: q[vocab] (0 for tokens cut or masked), normalised.
 * *tight is set when the top-p cut sits within 1e-9 of top_p (a rounding-dependent case). */
static void reference_dist(const float *l, int64_t v, ts_sampler_params p, double *q, bool *tight) {
    int32_t *ord = malloc((size_t)v * sizeof *ord);
    int64_t n = 0;
    for (int64_t i = 0; i < v; i++)
        if (l[i] != -INFINITY) ord[n++] = (int32_t)i;
    g_ref_logits = l;
    qsort(ord, (size_t)n, sizeof *ord, by_logit_desc);
    double z = 0;
    for (int64_t j = 0; j < n; j++) z += exp((double)l[ord[j]] / p.temperature - (double)l[ord[0]] / p.temperature);
    for (int64_t i = 0; i < v; i++) q[i] = 0;
    const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
    double zk = 0;
    for (int64_t j = 0; j < k; j++) zk += exp((double)l[ord[j]] / p.temperature - (double)l[ord[0]] / p.temperature) / z;
    int64_t keep = k;
    *tight = false;
    if (p.top_p < 1) {
        double cum = 0;
        for (int64_t j = 0; j < k; j++) {
            cum += exp((double)l[ord[j]] / p.temperature - (double)l[ord[0]] / p.temperature) / z / zk;
            if (fabs(cum - p.top_p) < 1e-9) *tight = true;
            if (cum >= p.top_p) {
                keep = j + 1;
                break;
            }
        }
    }
    double zz = 0;
    for (int64_t j = 0; j < keep; j++) zz += exp((double)l[ord[j]] / p.temperature - (double)l[ord[0]] / p.temperature);
    for (int64_t j = 0; j < keep; j++)
        q[ord[j]] = exp((double)l[ord[j]] / p.temperature - (double)l[ord[0]] / p.temperature) / zz;
    free(ord);
}

/* The token whose interval (id order) holds u; *edge when u is within 1e-9 of a boundary. */
static int32_t reference_pick(const double *q, int64_t v, double u, bool *edge) {
    double acc = 0;
    *edge = false;
    for (int64_t i = 0; i < v; i++) {
        if (q[i] == 0) continue;
        if (fabs(u - acc) < 1e-9) *edge = true;
        acc += q[i];
        if (fabs(u - acc) < 1e-9) *edge = true;
        if (u < acc) return (int32_t)i;
    }
    *edge = true;
    return -1;
}

static double uniform_of(uint64_t state) {
    ts_prng g = ts_prng_seed(state);
    return (double)(ts_prng_next(&g) >> 11) * (1.0 / 9007199254740992.0);
}

static void random_logits(float *l, int64_t v, uint64_t seed, double scale, int64_t n_masked) {
    ts_prng g = ts_prng_seed(seed);
    for (int64_t i = 0; i < v; i++) l[i] = (float)(ts_prng_uniform(&g) * scale);
    for (int64_t m = 0; m < n_masked; m++) l[ts_prng_u32(&g) % v] = -INFINITY;
    /* ties: a few repeated values, the largest one among them */
    l[v / 3] = l[v / 2] = l[v - 1] = (float)(2 * scale);
}

TS_TEST(sampler_matches_float64_reference) {
    const int64_t v = 1000;
    float *l = malloc((size_t)v * sizeof *l);
    double *q = malloc((size_t)v * sizeof *q);
    static const double temps[] = {0.3, 1.0, 2.5};
    static const int64_t topks[] = {0, 2, 17, 400, 1000};
    static const double topps[] = {1.0, 0.95, 0.5, 0.05};
    long draws = 0, skipped = 0;
    for (int li = 0; li < 3; li++) {
        random_logits(l, v, 100 + (uint64_t)li, li == 2 ? 0.5 : 4.0, li * 40);
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 5; b++)
                for (size_t c = 0; c < 4; c++) {
                    const ts_sampler_params p = {temps[a], topks[b], topps[c]};
                    bool tight;
                    reference_dist(l, v, p, q, &tight);
                    if (tight) {
                        skipped++;
                        continue;
                    }
                    for (uint64_t s = 0; s < 40; s++) {
                        const uint64_t seed = s * 7919 + 3;
                        bool edge;
                        const int32_t want = reference_pick(q, v, uniform_of(seed), &edge);
                        draws++;
                        if (edge) {
                            skipped++;
                            continue;
                        }
                        uint64_t st = seed;
                        int32_t got = -2;
                        TS_CHECK_STATUS(ts_sampler_sample(l, v, &p, &st, &got), TS_OK);
                        TS_CHECK_MSG(got == want, "T %g top_k %lld top_p %g seed %llu: token %d, "
                                     "reference %d", p.temperature, (long long)p.top_k, p.top_p,
                                     (unsigned long long)seed, (int)got, (int)want);
                        /* one uniform per draw */
                        TS_CHECK(st == seed + 0x9E3779B97F4A7C15ull);
                    }
                }
    }
    TS_CHECK_MSG(skipped * 50 < draws, "%ld of %ld draws skipped as rounding-dependent", skipped, draws);
    free(l);
    free(q);
}

TS_TEST(sampler_greedy_settings) {
    const float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, -INFINITY, 2.0f};
    int32_t t = -1;
    ts_sampler_params p = ts_sampler_default_params();
    p.temperature = 0;
    /* ties to the lower id; rng may be NULL and is not consumed */
    TS_CHECK_STATUS(ts_sampler_sample(l, 6, &p, NULL, &t), TS_OK);
    TS_CHECK_EQ_INT(t, 1);
    p.temperature = 5.0;
    p.top_k = 1;
    uint64_t st = 42;
    TS_CHECK_STATUS(ts_sampler_sample(l, 6, &p, &st, &t), TS_OK);
    TS_CHECK_EQ_INT(t, 1);
    TS_CHECK_EQ_INT(st, 42);
    /* -0 and +0 are one logit: the lower id wins */
    const float z[3] = {-INFINITY, 0.0f, -0.0f};
    const float z2[3] = {-INFINITY, -0.0f, 0.0f};
    p.temperature = 0;
    TS_CHECK_STATUS(ts_sampler_sample(z, 3, &p, NULL, &t), TS_OK);
    TS_CHECK_EQ_INT(t, 1);
    TS_CHECK_STATUS(ts_sampler_sample(z2, 3, &p, NULL, &t), TS_OK);
    TS_CHECK_EQ_INT(t, 1);
    /* top-k 1 == greedy over random rows, any temperature; a near-zero temperature too */
    const int64_t v = 777;
    float *r = malloc((size_t)v * sizeof *r);
    for (uint64_t s = 0; s < 50; s++) {
        random_logits(r, v, s, 3.0, (int64_t)(s % 5) * 30);
        /* one largest logit: a near-zero temperature draws among tied maxima */
        r[v / 2] = r[v - 1] = 0.0f;
        ts_sampler_params g = {0, 0, 1}, k1 = {0.7 + (double)s, 1, 0.3}, cold = {1e-6, 0, 1};
        int32_t a, b, c;
        uint64_t s1 = s, s2 = s;
        TS_CHECK_STATUS(ts_sampler_sample(r, v, &g, NULL, &a), TS_OK);
        TS_CHECK_STATUS(ts_sampler_sample(r, v, &k1, &s1, &b), TS_OK);
        TS_CHECK_STATUS(ts_sampler_sample(r, v, &cold, &s2, &c), TS_OK);
        TS_CHECK(a == b && a == c);
    }
    free(r);
}

TS_TEST(sampler_properties) {
    const int64_t v = 500;
    float *l = malloc((size_t)v * sizeof *l);
    random_logits(l, v, 9, 2.0, 120);
    /* top-p 1 and top-k = vocab are plain temperature sampling, draw for draw */
    for (uint64_t s = 0; s < 2000; s++) {
        const ts_sampler_params plain = {0.8, 0, 1.0}, kall = {0.8, v, 1.0};
        uint64_t a = s, b = s;
        int32_t x, y;
        TS_CHECK_STATUS(ts_sampler_sample(l, v, &plain, &a, &x), TS_OK);
        TS_CHECK_STATUS(ts_sampler_sample(l, v, &kall, &b, &y), TS_OK);
        if (x != y) {
            TS_CHECK_MSG(0, "seed %llu: %d != %d", (unsigned long long)s, (int)x, (int)y);
            break;
        }
    }
    /* masked (-inf), cut by top-k, cut by top-p: never chosen over 10k draws; the kept ones
     * with the renormalised frequencies (within 5 sigma) */
    float small[12] = {1.0f, -INFINITY, 0.2f, 2.0f, 1.5f, -INFINITY, 0.0f, 1.9f, -3.0f, 1.0f, 0.5f, -INFINITY};
    const ts_sampler_params cases[] = {{1.0, 0, 1.0}, {1.3, 4, 1.0}, {0.9, 0, 0.6}, {2.0, 6, 0.8}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double q[12];
        bool tight;
        reference_dist(small, 12, cases[c], q, &tight);
        TS_CHECK(!tight);
        long count[12] = {0};
        uint64_t st = 1234 + c;
        const int draws = 10000;
        for (int d = 0; d < draws; d++) {
            int32_t t = -1;
            if (ts_sampler_sample(small, 12, &cases[c], &st, &t) != TS_OK || t < 0 || t >= 12) {
                TS_CHECK_MSG(0, "case %zu: draw %d failed", c, d);
                break;
            }
            count[t]++;
        }
        for (int i = 0; i < 12; i++) {
            if (q[i] == 0) {
                TS_CHECK_MSG(count[i] == 0, "case %zu: token %d (cut or masked) chosen %ld times", c, i, count[i]);
                continue;
            }
            const double want = q[i] * draws, sigma = sqrt(draws * q[i] * (1 - q[i])) + 1;
            TS_CHECK_MSG(fabs((double)count[i] - want) < 5 * sigma, "case %zu token %d: %ld draws, "
                         "expected %.1f", c, i, count[i], want);
        }
    }
    free(l);
}

TS_TEST(sampler_logprobs) {
    const int64_t v = 300;
    float *l = malloc((size_t)v * sizeof *l);
    random_logits(l, v, 5, 6.0, 30);
    long double z = 0, m = -INFINITY;
    for (int64_t i = 0; i < v; i++)
        if (l[i] != -INFINITY && l[i] > m) m = l[i];
    for (int64_t i = 0; i < v; i++)
        if (l[i] != -INFINITY) z += expl((long double)l[i] - m);
    const long double lse = m + logl(z);
    int32_t ids[8];
    double lp[8], tlp = 0;
    TS_CHECK_STATUS(ts_sampler_logprobs(l, v, 17, 8, &tlp, ids, lp), TS_OK);
    if (l[17] == -INFINITY) TS_CHECK(tlp == -INFINITY);
    else TS_CHECK(fabs(tlp - (double)((long double)l[17] - lse)) < 1e-12);
    /* the top 8 in the sampler's candidate order: the tie at 2 * scale first, lower ids first */
    TS_CHECK(ids[0] == v / 3 && ids[1] == v / 2 && ids[2] == v - 1);
    for (int j = 0; j < 8; j++) {
        TS_CHECK(fabs(lp[j] - (double)((long double)l[ids[j]] - lse)) < 1e-12);
        if (j) TS_CHECK(l[ids[j]] <= l[ids[j - 1]]);
    }
    /* fewer finite logits than asked: id -1, -inf */
    const float two[4] = {-INFINITY, 1.0f, -INFINITY, 1.0f};
    TS_CHECK_STATUS(ts_sampler_logprobs(two, 4, 0, 3, &tlp, ids, lp), TS_OK);
    TS_CHECK(tlp == -INFINITY && ids[0] == 1 && ids[1] == 3 && ids[2] == -1 && lp[2] == -INFINITY);
    TS_CHECK(fabs(lp[0] - log(0.5)) < 1e-15 && fabs(lp[1] - log(0.5)) < 1e-15);
    TS_CHECK_STATUS(ts_sampler_logprobs(two, 4, -1, 0, NULL, NULL, NULL), TS_OK);
    TS_CHECK_STATUS(ts_sampler_logprobs(two, 4, 4, 1, &tlp, ids, lp), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_sampler_logprobs(two, 4, 0, 5, &tlp, ids, lp), TS_ERR_INVALID_ARGUMENT);
    free(l);
}

TS_TEST(sampler_bad_input) {
    float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t t = -7;
    uint64_t st = 1;
    ts_sampler_params p = ts_sampler_default_params();
    const struct { double temp; int64_t k; double top_p; const char *needle; } bad[] = {
        {-1, 0, 1, "temperature"}, {NAN, 0, 1, "temperature"}, {INFINITY, 0, 1, "temperature"},
        {1e-7, 0, 1, "temperature"}, {1e-310, 0, 1, "temperature"}, {2e6, 0, 1, "temperature"},
        {1, -1, 1, "top_k"}, {1, 5, 1, "top_k"}, {1, 0, 0, "top_p"}, {1, 0, 1.5, "top_p"},
        {1, 0, NAN, "top_p"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const ts_sampler_params b = {bad[i].temp, bad[i].k, bad[i].top_p};
        TS_CHECK_STATUS(ts_sampler_sample(l, 4, &b, &st, &t), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_MSG(strstr(ts_last_error(), bad[i].needle) != NULL, "case %zu: '%s'", i, ts_last_error());
    }
    TS_CHECK_STATUS(ts_sampler_sample(l, 4, &p, NULL, &t), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_sampler_sample(NULL, 4, &p, &st, &t), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_sampler_sample(l, 4, NULL, &st, &t), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_sampler_sample(l, 0, &p, &st, &t), TS_ERR_INVALID_ARGUMENT);
    l[2] = NAN;
    TS_CHECK_STATUS(ts_sampler_sample(l, 4, &p, &st, &t), TS_ERR_NONFINITE);
    TS_CHECK(strstr(ts_last_error(), "logits[2]") != NULL);
    l[2] = INFINITY;
    TS_CHECK_STATUS(ts_sampler_sample(l, 4, &p, &st, &t), TS_ERR_NONFINITE);
    const float none[3] = {-INFINITY, -INFINITY, -INFINITY};
    TS_CHECK_STATUS(ts_sampler_sample(none, 3, &p, &st, &t), TS_ERR_INVALID_ARGUMENT);
    /* nothing written, nothing drawn */
    TS_CHECK_EQ_INT(t, -7);
    TS_CHECK_EQ_INT(st, 1);
}

/* The MXCSR guard (design brief, "Fast on every CPU"): exp arguments across the subnormal band
 * [-745, -708] and far below, tiny normal logits at both temperature bounds, every path. */
typedef struct sampler_mx {
    const float *l;
    int64_t v;
    ts_sampler_params p;
} sampler_mx;

static ts_status sampler_mx_op(void *c_) {
    const sampler_mx *c = c_;
    uint64_t st = 3;
    int32_t t, ids[16];
    double lp[16], tl;
    for (int d = 0; d < 4; d++) TS__RETURN_IF_ERROR(ts_sampler_sample(c->l, c->v, &c->p, &st, &t));
    return ts_sampler_logprobs(c->l, c->v, t, 16, &tl, ids, lp);
}

TS_TEST(mxcsr_sampler) {
    mx_fam f = mx_begin(ts_t_, "sampler (ts_sampler_*)");
    if (!f.ok) return;
    const int64_t v = 120000;
    float *ramp = malloc((size_t)v * sizeof *ramp), *tiny = malloc((size_t)v * sizeof *tiny);
    ts_prng g = ts_prng_seed(8);
    for (int64_t i = 0; i < v; i++) {
        ramp[i] = -0.01f * (float)i; /* (l - max) from 0 to -1200 */
        const uint32_t r = ts_prng_u32(&g);
        tiny[i] = ldexpf(1.0f + (float)(r & 0xFF) / 256.0f, -60 - (int)((r >> 8) % 60)) * ((r >> 31) ? -1.0f : 1.0f);
    }
    ramp[v - 1] = -1e30f;
    const ts_sampler_params ps[] = {{1, 0, 1}, {1, 0, 0.99}, {1, 5000, 0.9}, {0.5, 0, 1},
                                    {TS_SAMPLER_MIN_TEMPERATURE, 0, 0.5}, {TS_SAMPLER_MAX_TEMPERATURE, 0, 0.5},
                                    {0, 0, 1}};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++)
        for (int in = 0; in < 2; in++) {
            sampler_mx c = {in ? tiny : ramp, v, ps[k]};
            char what[96];
            snprintf(what, sizeof what, "%s T=%g top_k=%lld top_p=%g", in ? "tiny" : "ramp",
                     ps[k].temperature, (long long)ps[k].top_k, ps[k].top_p);
            mx_run(&f, what, sampler_mx_op, &c);
        }
    mx_end(&f);
    free(ramp);
    free(tiny);
}
