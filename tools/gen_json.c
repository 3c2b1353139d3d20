/* A reply as one line of JSON (jansson): what `--json` prints, per reply. */
#include "gen.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *ids_array(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* json_real refuses non-finite values; a log-probability of a sampled token is finite, and
 * -inf only marks an unused top slot, which is left out. */
static json_t *logprobs_array(const gen_result *r) {
    json_t *a = json_array();
    const size_t tn = (size_t)r->top_n;
    for (size_t k = 0; a && k < r->n_out; k++) {
        json_t *top = json_array();
        for (size_t j = 0; top && j < tn; j++) {
            if (r->top_ids[k * tn + j] < 0) continue;
            if (json_array_append_new(top, json_pack("{s:i, s:f}", "id", (json_int_t)r->top_ids[k * tn + j],
                                                     "logprob", r->top_lp[k * tn + j]))) {
                json_decref(top);
                top = NULL;
            }
        }
        json_t *step = top ? json_pack("{s:i, s:f, s:o}", "id", (json_int_t)r->out[k], "logprob",
                                       r->lp[k], "top", top)
                           : NULL;
        if (!step || json_array_append_new(a, step)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

char *gen_result_json(const gen_result *r, const gen_opts *o, uint64_t seed) {
    const size_t fed = r->n_prompt - r->reused;
    json_t *timings = json_pack(
        "{s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f}", "prefill_tokens", (json_int_t)fed,
        "prefill_s", r->prefill_s, "prefill_tokens_per_s",
        r->prefill_s > 0 ? (double)fed / r->prefill_s : 0.0, "ttft_s", r->ttft_s, "decode_steps",
        (json_int_t)r->decode_steps, "decode_s", r->decode_s, "decode_tokens_per_s",
        r->decode_s > 0 ? (double)r->decode_steps / r->decode_s : 0.0, "tpot_s",
        r->decode_steps > 0 ? r->decode_s / (double)r->decode_steps : 0.0);
    /* the seed is 64-bit unsigned, beyond the doubles many JSON readers use: written as text */
    char seed_s[24];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    json_t *sampler = json_pack("{s:f, s:I, s:f, s:s}", "temperature", o->sp.temperature, "top_k",
                                (json_int_t)o->sp.top_k, "top_p", o->sp.top_p, "seed", seed_s);
    json_t *obj = json_pack("{s:o, s:o, s:s%, s:s, s:I, s:o, s:o}", "prompt_ids",
                            ids_array(r->prompt, r->n_prompt), "output_ids",
                            ids_array(r->out, r->n_out), "text", r->text, r->text_len,
                            "finish_reason", r->finish, "reused_prompt_tokens",
                            (json_int_t)r->reused, "sampler", sampler, "timings", timings);
    if (obj && r->top_n) {
        json_t *lp = logprobs_array(r);
        if (!lp || json_object_set_new(obj, "logprobs", lp)) {
            json_decref(obj);
            obj = NULL;
        }
    }
    char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(obj);
    return s;
}
