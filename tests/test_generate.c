/* generate / chat's engine (tools/gen_*.c) on dsv4-tiny with tests/golden/chat_tokenizer.json
 * (byte-level BPE with DeepSeek's chat markers; tests/gen/gen_chat_tokenizer.py): greedy ids
 * against an independent loop over ts_model_decode + argmax, the same sampled ids for 1 and 2
 * threads, stop strings cut exactly (and never printed), the JSON against decode(output ids),
 * a chat turn that keeps the cache against a fresh prefill of the whole conversation, the
 * context limits, and the command line's errors. */
#include "gen.h"
#include "ts_prng.h"
#include "ts_test.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define TOKENIZER TS_GOLDEN_DIR "/chat_tokenizer.json"

/* stderr into a temporary file around calls that print expected errors; err_end returns what
 * was printed (at most cap - 1 bytes). */
static int err_begin(void) {
    fflush(stderr);
    char path[] = "/tmp/ts_gen_err_XXXXXX";
    const int fd = mkstemp(path), saved = dup(2);
    if (fd >= 0) unlink(path), dup2(fd, 2), close(fd);
    return saved;
}

static const char *err_end(int saved, char *buf, size_t cap) {
    fflush(stderr);
    const off_t n = lseek(2, 0, SEEK_CUR);
    ssize_t got = n > 0 ? pread(2, buf, cap - 1, 0) : 0;
    buf[got > 0 ? got : 0] = 0;
    if (saved >= 0) dup2(saved, 2), close(saved);
    return buf;
}

static int open_tiny(ts_test_ctx *ts_t_, gen_model *gm) {
    gen_args a;
    memset(&a, 0, sizeof a);
    a.model = "dsv4-tiny";
    a.tokenizer = TOKENIZER;
    a.sp = ts_sampler_default_params();
    const int rc = gen_open_model("test", &a, gm);
    TS_CHECK_MSG(rc == 0, "gen_open_model: %d (%s)", rc, ts_last_error());
    return rc == 0;
}

static int32_t *encode(const gen_model *gm, const char *s, size_t *n) {
    int32_t *ids = NULL;
    if (ts_tokenizer_encode(gm->tok, s, strlen(s), true, &ids, n) != TS_OK) return NULL;
    return ids;
}

typedef struct capture {
    char buf[1 << 14];
    size_t len;
    int pieces;
    const char *forbidden; /* a stop string: must never be in what is printed */
    bool saw_forbidden;
} capture;

static void capture_emit(void *c_, const char *text, size_t n) {
    capture *c = c_;
    if (c->len + n < sizeof c->buf) memcpy(c->buf + c->len, text, n), c->len += n;
    c->buf[c->len] = 0;
    c->pieces++;
    if (c->forbidden && strstr(c->buf, c->forbidden)) c->saw_forbidden = true;
}

static gen_opts greedy_opts(int64_t max_new) {
    gen_opts o = {.sp = {0, 0, 1}, .max_new = max_new};
    return o;
}

static bool decode_equals(const gen_model *gm, const int32_t *ids, size_t n, const char *text,
                          size_t len) {
    char *d = NULL;
    size_t dl = 0;
    if (ts_tokenizer_decode(gm->tok, ids, n, false, &d, &dl) != TS_OK) return false;
    const bool eq = dl == len && !memcmp(d, text, len);
    free(d);
    return eq;
}

/* An independent greedy loop: the prompt token by token, argmax over the ids the tokenizer
 * can spell (ties to the lower id), EOS ends, max_new ends. */
static size_t reference_greedy(ts_test_ctx *ts_t_, const gen_model *gm, const int32_t *prompt,
                               size_t n, size_t max_new, int32_t *out, bool *eos) {
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(gm->cfg, 1, &m), TS_OK);
    if (!m) return 0;
    const int64_t v = gm->cfg->vocab_size, seq = 0;
    float *lg = malloc((size_t)v * sizeof *lg);
    for (size_t i = 0; i < n; i++) TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &prompt[i], lg), TS_OK);
    size_t k = 0;
    *eos = false;
    for (;;) {
        int32_t best = -1;
        for (int64_t i = 0; i < v; i++)
            if (ts_tokenizer_id_to_token(gm->tok, (int32_t)i) && (best < 0 || lg[i] > lg[best]))
                best = (int32_t)i;
        if (best == gm->eos) {
            *eos = true;
            break;
        }
        out[k++] = best;
        if (k == max_new) break;
        TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &best, lg), TS_OK);
    }
    free(lg);
    ts_model_free(m);
    return k;
}

TS_TEST(generate_greedy_matches_decode_loop) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    TS_CHECK(gm.eos == 286 && gm.n_masked == 512 - 291);
    static const char *prompts[] = {"the cat", "hello world, in the end", "\xC3\xA9t\xC3\xA9"};
    for (size_t p = 0; p < 3; p++) {
        size_t n;
        int32_t *ids = encode(&gm, prompts[p], &n);
        TS_CHECK(ids != NULL);
        gen_seq gs = {0};
        gen_result r;
        gen_opts o = greedy_opts(20);
        capture cap = {.len = 0};
        o.emit = capture_emit;
        o.emit_ctx = &cap;
        TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &o, NULL, &r), TS_OK);
        int32_t want[64];
        bool eos = false;
        const size_t k = reference_greedy(ts_t_, &gm, ids, n, 20, want, &eos);
        TS_CHECK_MSG(r.n_out == k && !memcmp(r.out, want, k * sizeof *want),
                     "prompt %zu: %zu ids, reference %zu", p, r.n_out, k);
        TS_CHECK(!strcmp(r.finish, eos ? "eos" : "length"));
        TS_CHECK(decode_equals(&gm, r.out, r.n_out, r.text, r.text_len));
        TS_CHECK(cap.len == r.text_len && !memcmp(cap.buf, r.text, r.text_len));
        TS_CHECK(r.n_prompt == n && r.reused == 0 && gs.n == n + r.n_out - 1 + (eos ? 1 : 0));
        TS_CHECK((size_t)r.decode_steps == r.n_out - 1 + (eos ? 1 : 0));
        gen_result_free(&r);
        gen_seq_free(&gs);
        free(ids);
    }
    gen_close_model(&gm);
}

TS_TEST(generate_seeded_same_ids_any_threads) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    const int threads0 = ts_get_num_threads();
    size_t n;
    int32_t *ids = encode(&gm, "once upon a time", &n);
    const ts_sampler_params ps[] = {{0.9, 0, 0.9}, {1.2, 40, 1.0}, {0.7, 100, 0.8}};
    for (size_t c = 0; c < 3; c++) {
        gen_result r[2];
        for (int t = 0; t < 2; t++) {
            ts_set_num_threads(t + 1);
            gen_seq gs = {0};
            gen_opts o = {.sp = ps[c], .max_new = 24};
            uint64_t rng = 20261201 + c;
            TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &o, &rng, &r[t]), TS_OK);
            ts_model_reset_sequence(gm.m, 0);
            gen_seq_free(&gs);
        }
        TS_CHECK_MSG(r[0].n_out == r[1].n_out && !memcmp(r[0].out, r[1].out, r[0].n_out * 4) &&
                         !strcmp(r[0].finish, r[1].finish),
                     "params %zu: 1 and 2 threads sampled different ids", c);
        gen_result_free(&r[0]);
        gen_result_free(&r[1]);
    }
    ts_set_num_threads(threads0);
    free(ids);
    gen_close_model(&gm);
}

/* The first n bytes of s cut back to a character boundary. */
static size_t char_floor(const char *s, size_t n) {
    while (n && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

TS_TEST(generate_stop_strings_cut_exactly) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    size_t n;
    int32_t *ids = encode(&gm, "the end", &n);
    gen_seq gs = {0};
    gen_result full;
    gen_opts o = greedy_opts(40);
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &o, NULL, &full), TS_OK);
    TS_CHECK_MSG(full.text_len >= 12, "the greedy reply is only %zu bytes", full.text_len);
    int cut_cases = 0;
    for (size_t at = 2; full.text_len >= 12 && at + 4 < full.text_len; at += full.text_len / 5) {
        const size_t a = char_floor(full.text, at), e = char_floor(full.text, at + 3);
        if (e <= a) continue;
        char stop[16];
        memcpy(stop, full.text + a, e - a);
        stop[e - a] = 0;
        const char *stops[2] = {"\x01never", stop};
        gen_opts so = greedy_opts(40);
        so.stops = stops;
        so.n_stops = 2;
        capture cap = {.forbidden = stop};
        so.emit = capture_emit;
        so.emit_ctx = &cap;
        gen_result r;
        ts_model_reset_sequence(gm.m, 0);
        gs.n = 0;
        TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &so, NULL, &r), TS_OK);
        /* the text ends right before the first occurrence in the uncut reply */
        const size_t first = (size_t)((const char *)memmem(full.text, full.text_len, stop, e - a) - full.text);
        TS_CHECK(!strcmp(r.finish, "stop"));
        TS_CHECK_MSG(r.text_len == first && !memcmp(r.text, full.text, first),
                     "stop '%s': text of %zu bytes, want %zu", stop, r.text_len, first);
        TS_CHECK(cap.len == r.text_len && !memcmp(cap.buf, r.text, r.text_len) && !cap.saw_forbidden);
        /* ids: the uncut ones up to the token that completed the stop string */
        TS_CHECK(r.n_out >= 1 && r.n_out <= full.n_out && !memcmp(r.out, full.out, r.n_out * 4));
        char *d = NULL;
        size_t dl;
        ts_tokenizer_decode(gm.tok, r.out, r.n_out - 1, false, &d, &dl);
        TS_CHECK(d && !memmem(d, dl, stop, e - a));
        free(d);
        ts_tokenizer_decode(gm.tok, r.out, r.n_out, false, &d, &dl);
        TS_CHECK(d && memmem(d, dl, stop, e - a));
        free(d);
        gen_result_free(&r);
        cut_cases++;
    }
    TS_CHECK(cut_cases >= 3);
    /* a stop string that never occurs changes nothing */
    const char *never[1] = {"\x02\x03"};
    gen_opts no = greedy_opts(40);
    no.stops = never;
    no.n_stops = 1;
    gen_result r;
    ts_model_reset_sequence(gm.m, 0);
    gs.n = 0;
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &no, NULL, &r), TS_OK);
    TS_CHECK(r.text_len == full.text_len && !memcmp(r.text, full.text, r.text_len) &&
             !strcmp(r.finish, full.finish));
    gen_result_free(&r);
    gen_result_free(&full);
    gen_seq_free(&gs);
    free(ids);
    gen_close_model(&gm);
}

/* The matcher alone: pieces in, what is released out. */
TS_TEST(generate_stop_matcher) {
    static const struct { const char *stops[2]; const char *pieces[5]; const char *out; bool hit; } cases[] = {
        {{"cd"}, {"ab", "c", "de"}, "ab", true},
        {{"xyz", "yq"}, {"axy", "q"}, "ax", true},
        {{"xyz"}, {"xy", "a"}, "xya", false},
        {{"xyz"}, {"x", "y"}, "xy", false},            /* held back, then released at the end */
        {{"\xC3\xA9!"}, {"a\xC3\xA9", "\xC3\xA9", "!b"}, "a\xC3\xA9", true},
        {{"aa"}, {"baaa"}, "b", true},                  /* the first occurrence */
        /* the first to complete as the text grows, so the pieces do not matter */
        {{"abcd", "bc"}, {"abcd"}, "a", true},
        {{"abcd", "bc"}, {"a", "b", "c", "d"}, "a", true},
        {{"bcd", "abcd"}, {"abcd"}, "", true},           /* equal ends: the longer */
        {{"abcd", "bcd"}, {"ab", "cd"}, "", true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        gen_stop s;
        const int ns = cases[c].stops[1] ? 2 : 1;
        gen_stop_init(&s, cases[c].stops, ns);
        capture cap = {.len = 0};
        for (int p = 0; p < 5 && cases[c].pieces[p]; p++)
            TS_CHECK_STATUS(gen_stop_push(&s, cases[c].pieces[p], strlen(cases[c].pieces[p]),
                                          capture_emit, &cap), TS_OK);
        gen_stop_finish(&s, capture_emit, &cap);
        TS_CHECK_MSG(!strcmp(cap.buf, cases[c].out) && s.hit == cases[c].hit,
                     "case %zu: released '%s' (hit %d), want '%s'", c, cap.buf, (int)s.hit, cases[c].out);
        gen_stop_free(&s);
    }
    /* random texts over {a, b, c}, random stop strings, random splits: the released text is
     * the text cut where the earliest-ending stop string begins, whatever the split */
    ts_prng g = ts_prng_seed(77);
    for (int it = 0; it < 3000; it++) {
        char text[32], stop_buf[3][5];
        const char *stops[3];
        const size_t tl = ts_prng_u32(&g) % 31;
        for (size_t i = 0; i < tl; i++) text[i] = (char)('a' + ts_prng_u32(&g) % 3);
        text[tl] = 0;
        const int ns = 1 + (int)(ts_prng_u32(&g) % 3);
        for (int k = 0; k < ns; k++) {
            const size_t sl = 1 + ts_prng_u32(&g) % 4;
            for (size_t i = 0; i < sl; i++) stop_buf[k][i] = (char)('a' + ts_prng_u32(&g) % 3);
            stop_buf[k][sl] = 0;
            stops[k] = stop_buf[k];
        }
        size_t cut = tl, end = SIZE_MAX;
        for (int k = 0; k < ns; k++) {
            const char *p = strstr(text, stops[k]);
            const size_t at = p ? (size_t)(p - text) : 0, e = at + strlen(stops[k]);
            if (p && (e < end || (e == end && at < cut))) cut = at, end = e;
        }
        gen_stop st;
        gen_stop_init(&st, stops, ns);
        capture cap = {.len = 0};
        for (size_t i = 0; i < tl;) {
            const size_t piece = 1 + ts_prng_u32(&g) % 5, n = piece < tl - i ? piece : tl - i;
            TS_CHECK_STATUS(gen_stop_push(&st, text + i, n, capture_emit, &cap), TS_OK);
            i += n;
        }
        gen_stop_finish(&st, capture_emit, &cap);
        const bool hit = st.hit;
        gen_stop_free(&st);
        if (cap.len != cut || memcmp(cap.buf, text, cut) || hit != (end != SIZE_MAX)) {
            TS_CHECK_MSG(0, "text '%s', stops '%s' '%s' '%s': released '%s', want the first %zu bytes",
                         text, stops[0], ns > 1 ? stops[1] : "", ns > 2 ? stops[2] : "", cap.buf, cut);
            break;
        }
    }
}

/* The reasoning / answer split of a V4 thinking reply, against hand-worked cases: the first
 * marker splits, a tail that may begin the marker is held back until the reply is done. */
TS_TEST(generate_think_split) {
    static const struct {
        const char *text;
        bool done, found;
        size_t reasoning, answer;
    } cases[] = {
        {"abc</think>xyz", false, true, 3, 11},   {"abc</think>xyz", true, true, 3, 11},
        {"</think>", false, true, 0, 8},          {"a</think>b</think>c", true, true, 1, 9},
        {"abc</thi", false, false, 3, 8},         {"abc</thi", true, false, 8, 8},
        {"abc<", false, false, 3, 4},             {"abc<x", false, false, 5, 5},
        {"<</", false, false, 1, 3},              {"", false, false, 0, 0},
        {"think>", false, false, 6, 6},           {"a</think", false, false, 1, 8},
        {"a</think>", false, true, 1, 9},         {"x<t", false, false, 3, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gen_think t;
        gen_think_split(cases[i].text, strlen(cases[i].text), cases[i].done, &t);
        TS_CHECK_MSG(t.found == cases[i].found && t.reasoning == cases[i].reasoning &&
                         t.answer == cases[i].answer,
                     "'%s' (done %d): found %d reasoning %zu answer %zu", cases[i].text,
                     cases[i].done, t.found, t.reasoning, t.answer);
    }
}

TS_TEST(generate_json_matches_decode) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    size_t n;
    int32_t *ids = encode(&gm, "a json test", &n);
    gen_seq gs = {0};
    gen_result r;
    gen_opts o = {.sp = {0.8, 0, 0.95}, .max_new = 16, .logprobs = 3};
    uint64_t rng = 99;
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, n, &o, &rng, &r), TS_OK);
    char *js = gen_result_json(&r, &o, UINT64_MAX);
    json_error_t err;
    json_t *j = js ? json_loads(js, 0, &err) : NULL;
    TS_CHECK_MSG(j != NULL, "JSON does not parse: %s", js ? err.text : "(none)");
    if (j) {
        json_t *pi = json_object_get(j, "prompt_ids"), *oi = json_object_get(j, "output_ids");
        TS_CHECK(json_array_size(pi) == n && json_array_size(oi) == r.n_out);
        int32_t out[64];
        for (size_t i = 0; i < json_array_size(oi) && i < 64; i++)
            out[i] = (int32_t)json_integer_value(json_array_get(oi, i));
        for (size_t i = 0; i < n; i++) TS_CHECK(json_integer_value(json_array_get(pi, i)) == ids[i]);
        json_t *text = json_object_get(j, "text");
        TS_CHECK(json_is_string(text));
        TS_CHECK(decode_equals(&gm, out, r.n_out, json_string_value(text), json_string_length(text)));
        TS_CHECK(!strcmp(json_string_value(json_object_get(j, "finish_reason")), r.finish));
        TS_CHECK(!strcmp(json_string_value(json_object_get(json_object_get(j, "sampler"), "seed")),
                         "18446744073709551615"));
        json_t *t = json_object_get(j, "timings");
        TS_CHECK(json_integer_value(json_object_get(t, "prefill_tokens")) == (json_int_t)n);
        TS_CHECK(json_real_value(json_object_get(t, "prefill_s")) > 0);
        /* per step: the chosen id and its log-probability, the top 3 in order */
        json_t *lp = json_object_get(j, "logprobs");
        TS_CHECK(json_array_size(lp) == r.n_out);
        for (size_t k = 0; k < json_array_size(lp); k++) {
            json_t *st = json_array_get(lp, k), *top = json_object_get(st, "top");
            TS_CHECK(json_integer_value(json_object_get(st, "id")) == out[k]);
            const double chosen = json_real_value(json_object_get(st, "logprob"));
            TS_CHECK(chosen <= 0 && chosen == r.lp[k]);
            TS_CHECK(json_array_size(top) == 3);
            double prev = 0;
            for (size_t q = 0; q < json_array_size(top); q++) {
                const double v = json_real_value(json_object_get(json_array_get(top, q), "logprob"));
                TS_CHECK(v <= prev && v == r.top_lp[k * 3 + q]);
                prev = v;
            }
        }
    }
    json_decref(j);
    free(js);
    gen_result_free(&r);
    gen_seq_free(&gs);
    free(ids);
    gen_close_model(&gm);
}

/* A two-turn V4 chat where the second prompt extends what the cache holds: the kept cache
 * must give what a fresh prefill of the whole conversation gives (ids and text, same sampler
 * state). A reply that does not re-encode to the ids that were generated (random weights: a
 * lone byte of a character, a marker as text) makes the prompt diverge, so several first
 * messages are tried and at least one must keep the cache; every one must match. */
TS_TEST(chat_cache_reuse_matches_fresh_prefill) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    int reused_turns = 0;
    static const char *firsts[] = {"hi", "hello", "the weather", "in the", "a", "on", "ok then",
                                   "what", "tell", "so", "x", "yes", "no", "why", "me", "we"};
    size_t tried = 0;
    for (size_t f = 0; f < sizeof firsts / sizeof *firsts && reused_turns < 3; f++, tried++) {
        ts_model_reset_sequence(gm.m, 0);
        gen_seq gs = {0};
        ts_chat_message msgs[4] = {{TS_CHAT_SYSTEM, "be brief", 8},
                                   {TS_CHAT_USER, firsts[f], strlen(firsts[f])}};
        int32_t *p1 = NULL, *p2 = NULL;
        size_t n1, n2;
        TS_CHECK_STATUS(ts_chat_encode(gm.tok, TS_CHAT_DEEPSEEK_V4, msgs, 2, false, &p1, &n1), TS_OK);
        gen_opts o = {.sp = {1.0, 0, 0.9}, .max_new = 1 + f % 3};
        uint64_t rng = 7 + f;
        gen_result r1, r2, fresh;
        TS_CHECK_STATUS(gen_turn(&gm, &gs, p1, n1, &o, &rng, &r1), TS_OK);
        msgs[2] = (ts_chat_message){TS_CHAT_ASSISTANT, r1.text, r1.text_len};
        msgs[3] = (ts_chat_message){TS_CHAT_USER, "and then", 8};
        TS_CHECK_STATUS(ts_chat_encode(gm.tok, TS_CHAT_DEEPSEEK_V4, msgs, 4, false, &p2, &n2), TS_OK);
        const size_t held = gs.n;
        const bool extends = held < n2 && !memcmp(gs.ids, p2, held * 4);
        const uint64_t rng2 = rng;
        TS_CHECK_STATUS(gen_turn(&gm, &gs, p2, n2, &o, &rng, &r2), TS_OK);
        TS_CHECK_EQ_INT(r2.reused, extends ? held : 0);
        reused_turns += r2.reused > 0;
        /* fresh: another sequence state, the whole conversation from position 0 */
        ts_model_reset_sequence(gm.m, 0);
        gen_seq g2 = {0};
        uint64_t rng3 = rng2;
        TS_CHECK_STATUS(gen_turn(&gm, &g2, p2, n2, &o, &rng3, &fresh), TS_OK);
        TS_CHECK_MSG(fresh.n_out == r2.n_out && !memcmp(fresh.out, r2.out, r2.n_out * 4) &&
                         fresh.text_len == r2.text_len && !memcmp(fresh.text, r2.text, r2.text_len) &&
                         rng3 == rng,
                     "first message '%s' (reused %zu): the kept cache and a fresh prefill differ",
                     firsts[f], r2.reused);
        TS_CHECK(fresh.reused == 0);
        gen_result_free(&r1);
        gen_result_free(&r2);
        gen_result_free(&fresh);
        gen_seq_free(&gs);
        gen_seq_free(&g2);
        free(p1);
        free(p2);
    }
    TS_CHECK_MSG(reused_turns > 0, "no second turn of %zu kept the cache", tried);
    if (getenv("TS_GEN_VERBOSE")) printf("    %d of %zu second turns kept the cache\n", reused_turns, tried);
    /* a prompt that does not extend the cache: reset, nothing reused */
    ts_model_reset_sequence(gm.m, 0);
    gen_seq gs = {0};
    size_t na, nb;
    int32_t *a = encode(&gm, "first prompt", &na), *b = encode(&gm, "second", &nb);
    gen_opts o = greedy_opts(3);
    gen_result r;
    TS_CHECK_STATUS(gen_turn(&gm, &gs, a, na, &o, NULL, &r), TS_OK);
    gen_result_free(&r);
    TS_CHECK_STATUS(gen_turn(&gm, &gs, b, nb, &o, NULL, &r), TS_OK);
    TS_CHECK(r.reused == 0 && gs.n >= nb);
    gen_result_free(&r);
    gen_seq_free(&gs);
    free(a);
    free(b);
    gen_close_model(&gm);
}

TS_TEST(generate_context_limits) {
    gen_model gm;
    if (!open_tiny(ts_t_, &gm)) return;
    const int64_t ctx = gm.cfg->max_seq_len; /* 256 */
    int32_t *ids = malloc((size_t)ctx * sizeof *ids);
    for (int64_t i = 0; i < ctx; i++) ids[i] = 'a' + (int32_t)(i % 26);
    gen_seq gs = {0};
    gen_result r;
    gen_opts o = greedy_opts(1000);
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, (size_t)ctx, &o, NULL, &r), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "256 tokens") && strstr(ts_last_error(), "max_seq_len 256") &&
             strstr(ts_last_error(), "255"));
    TS_CHECK(gs.n == 0 && ts_model_sequence_position(gm.m, 0) == 0); /* nothing ran */
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, 0, &o, NULL, &r), TS_ERR_INVALID_ARGUMENT);
    /* ctx - 1 tokens fit: one token from the prefill's logits, one more after feeding it, then
     * the cache is full (unless EOS comes first) */
    TS_CHECK_STATUS(gen_turn(&gm, &gs, ids, (size_t)ctx - 1, &o, NULL, &r), TS_OK);
    TS_CHECK_MSG((!strcmp(r.finish, "context") && r.n_out == 2) || !strcmp(r.finish, "eos"),
                 "finish %s after %zu tokens", r.finish, r.n_out);
    TS_CHECK(ts_model_sequence_position(gm.m, 0) == (int64_t)gs.n && gs.n <= (size_t)ctx);
    gen_result_free(&r);
    gen_seq_free(&gs);
    free(ids);
    gen_close_model(&gm);
}

/* gen_parse_args / gen_open_model: exit 2 for a bad command line naming the option, 1 for
 * inputs that do not work, each with its message. */
TS_TEST(generate_command_line_errors) {
    static const struct { const char *cmd; const char *argv[8]; int rc; const char *needle; } cases[] = {
        {"generate", {"--model", "dsv4-tiny", "--tokenizer", "t", "--prompt", "x", "--bogus"}, 2, "'--bogus'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--temperature", "-1"}, 2, "--temperature: '-1'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--temperature", "nan"}, 2, "--temperature"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--temperature", "inf"}, 2, "--temperature"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--temperature", "1e-9"}, 2, "0 (greedy) or"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--top-p", "0"}, 2, "--top-p: '0'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--top-p", "1.01"}, 2, "(0, 1]"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--top-k", "0"}, 2, "--top-k"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "-n", "0"}, 2, "-n: '0'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "-n", "12x"}, 2, "-n: '12x'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--seed", "-1"}, 2, "--seed"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--stop", ""}, 2, "--stop"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--stop", "\xff"}, 2, "'\\xff' is not valid UTF-8"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--system", "s"}, 2, "--system"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--logprobs", "3"}, 2, "add --json"},
        {"generate", {"--model", "dsv4-tiny", "--prompt", "x", "--chat", "v5"}, 2, "--chat: 'v5'"},
        {"generate", {"--model", "dsv4-tiny", "--prompt"}, 2, "--prompt needs a value"},
        {"generate", {"--model", "dsv4-tiny"}, 2, "--prompt TEXT is required"},
        {"generate", {"--model", "dsv4-tiny", "--weights", "w", "--prompt", "x"}, 2, "give one of"},
        {"generate", {"--prompt", "x"}, 2, "give one of"},
        {"chat", {"--model", "dsv4-tiny", "--prompt", "x"}, 2, "stdin"},
        {"chat", {"--model", "dsv4-tiny", "--json", "--logprobs", "101"}, 2, "--logprobs: '101'"},
        {"chat", {"--model", "dsv4-tiny", "--json", "--logprobs", "2", "--seed", "18446744073709551615"}, 0, ""},
    };
    char buf[2048];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int argc = 0;
        while (argc < 8 && cases[c].argv[argc]) argc++;
        gen_args a;
        const int saved = err_begin();
        const int rc = gen_parse_args(cases[c].cmd, argc, (char **)cases[c].argv, &a);
        err_end(saved, buf, sizeof buf);
        TS_CHECK_MSG(rc == cases[c].rc && strstr(buf, cases[c].needle), "case %zu: %d, want %d; "
                     "message '%s' should contain '%s'", c, rc, cases[c].rc, buf, cases[c].needle);
    }
    /* what needs the model and the tokenizer */
    char big[] = "/tmp/ts_gen_tok_XXXXXX";
    const int fd = mkstemp(big);
    const char *json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 600}, \"merges\": []},"
                       " \"added_tokens\": [], \"decoder\": null}";
    if (fd >= 0) {
        TS_CHECK(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
        close(fd);
    }
    const struct { const char *model, *tok; int64_t top_k; int rc; const char *needle; } open_cases[] = {
        {"dsv4-tiny", NULL, 0, 2, "--tokenizer FILE.json is required"},
        {"no-such-model", TOKENIZER, 0, 2, "neither a built-in model nor a directory"},
        {"/dev", TOKENIZER, 0, 1, "config.json"}, /* a directory without a checkpoint */
        {"dsv4-tiny", "/nonexistent.json", 0, 1, "/nonexistent.json"},
        {"dsv4-tiny", TOKENIZER, 513, 2, "--top-k 513"},
        {"dsv4-tiny", big, 0, 1, "ids up to 600 but the model's vocabulary (dsv4-tiny) is 512"},
    };
    for (size_t c = 0; c < sizeof open_cases / sizeof *open_cases; c++) {
        gen_args a;
        memset(&a, 0, sizeof a);
        a.model = open_cases[c].model;
        a.tokenizer = open_cases[c].tok;
        a.sp = ts_sampler_default_params();
        a.sp.top_k = open_cases[c].top_k;
        gen_model gm;
        const int saved = err_begin();
        const int rc = gen_open_model("test", &a, &gm);
        err_end(saved, buf, sizeof buf);
        TS_CHECK_MSG(rc == open_cases[c].rc && gm.m == NULL && strstr(buf, open_cases[c].needle),
                     "open case %zu: %d, want %d; message '%s' should contain '%s'", c, rc,
                     open_cases[c].rc, buf, open_cases[c].needle);
        gen_close_model(&gm);
    }
    unlink(big);
}
