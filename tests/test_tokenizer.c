/* Tokenizer (src/text/): BPE mechanics, split behaviours, added tokens, byte-level decode and
 * streaming on small hand-written tokenizer.json files whose expected ids are derived by hand
 * in the comments; hostile files refused by name. The DeepSeek V4 tokenizer itself is compared
 * with Hugging Face `tokenizers` on >= 10 MB of text by scripts/check_tokenizer.sh. */
#include "ts_test.h"

#include "tilestack/tokenizer.h"

#include <stdlib.h>

/* A character-level BPE (no byte-level mapping), vocab a b c ab abc bc and spaces. */
static const char *k_small =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, "
    "\"bc\": 4, \"abc\": 5, \" \": 6, \"aa\": 7, \"x\": 8},"
    " \"merges\": [\"a b\", \"b c\", [\"ab\", \"c\"], \"a a\"]},"
    " \"added_tokens\": [{\"id\": 9, \"content\": \"<s>\", \"special\": true},"
    "   {\"id\": 10, \"content\": \"<sep>\", \"special\": false, \"lstrip\": true, \"rstrip\": true}],"
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
    "   \"behavior\": \"Isolated\", \"invert\": false},"
    " \"decoder\": null}";

static ts_tokenizer *load(ts_test_ctx *ts_t_, const char *json) {
    ts_tokenizer *t = NULL;
    TS_CHECK_STATUS(ts_tokenizer_load_buffer(json, strlen(json), "test", &t), TS_OK);
    return t;
}

/* Encodes s and compares with the n expected ids. */
static void expect_ids(ts_test_ctx *ts_t_, const ts_tokenizer *t, const char *s, bool special,
                       const int32_t *want, size_t n) {
    int32_t *ids = NULL;
    size_t got = 0;
    TS_CHECK_STATUS(ts_tokenizer_encode(t, s, strlen(s), special, &ids, &got), TS_OK);
    bool same = got == n;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    if (!same) {
        char buf[256] = "";
        for (size_t i = 0; i < got && i < 20; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%d ", (int)ids[i]);
        TS_CHECK_MSG(same, "encode('%s'): got %zu ids [%s]", s, got, buf);
    }
    free(ids);
}

#define EXPECT(t, s, special, ...)                                                  \
    do {                                                                            \
        const int32_t w_[] = {__VA_ARGS__};                                          \
        expect_ids(ts_t_, t, s, special, w_, sizeof w_ / sizeof *w_);               \
    } while (0)

TS_TEST(tokenizer_bpe_merge_order) {
    ts_tokenizer *t = load(ts_t_, k_small);
    if (!t) return;
    TS_CHECK_EQ_INT(ts_tokenizer_vocab_size(t), 11);
    /* "abc": pairs (a,b) rank 0 and (b,c) rank 1; a b merges first -> ab c, then (ab,c) rank 2 */
    EXPECT(t, "abc", true, 5);
    /* "bc": only (b,c) -> bc */
    EXPECT(t, "bcb", true, 4, 1);
    /* "aaa": (a,a) rank 3 at positions 0 and 1; the leftmost merges, leaving aa a */
    EXPECT(t, "aaa", true, 7, 0);
    /* "aab": (a,b) rank 0 beats (a,a) rank 3 -> a ab */
    EXPECT(t, "aab", true, 0, 3);
    /* the split on " " isolates the spaces; "x" has no merges. A character with no token is
     * dropped before merging (tokenizers without an unk token), so a and b meet and merge */
    EXPECT(t, "ab x", true, 3, 6, 8);
    EXPECT(t, "azb", true, 3);
    ts_tokenizer_free(t);
}

TS_TEST(tokenizer_added_tokens) {
    ts_tokenizer *t = load(ts_t_, k_small);
    if (!t) return;
    EXPECT(t, "ab<s>c", true, 3, 9, 2);
    /* without parse_special the special token is text: <, s and > have no token and drop out,
     * leaving "abc" */
    EXPECT(t, "ab<s>c", false, 5);
    /* the non-special <sep> is cut out either way, and strips the spaces on both sides */
    EXPECT(t, "ab  <sep>  c", true, 3, 10, 2);
    EXPECT(t, "ab  <sep>  c", false, 3, 10, 2);
    TS_CHECK_EQ_INT(ts_tokenizer_token_to_id(t, "<s>"), 9);
    TS_CHECK(ts_tokenizer_is_special(t, 9) && !ts_tokenizer_is_special(t, 10));
    TS_CHECK(!strcmp(ts_tokenizer_id_to_token(t, 5), "abc"));
    TS_CHECK(ts_tokenizer_id_to_token(t, 11) == NULL && ts_tokenizer_id_to_token(t, -1) == NULL);
    ts_tokenizer_free(t);
}

/* Split behaviours on "a-b--c" with pattern "-" (tokenizers' SplitDelimiterBehavior docs). */
TS_TEST(tokenizer_split_behaviours) {
    static const struct { const char *behavior; bool invert; const char *pieces; } cases[] = {
        {"Removed", false, "a|b|c"},
        {"Isolated", false, "a|-|b|-|-|c"},
        {"MergedWithPrevious", false, "a-|b-|-|c"},
        {"MergedWithNext", false, "a|-b|-|-c"},
        {"Contiguous", false, "a|-|b|--|c"},
        {"Isolated", true, "a|-|b|-|-|c"},
        {"Removed", true, "-|-|-"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        /* every possible piece is a token, so ids spell the pieces */
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, "
                 "\"-\": 3, \"a-\": 4, \"b--\": 5, \"-b\": 6, \"-c\": 7, \"--\": 8, \"b-\": 9},"
                 " \"merges\": [\"a -\", \"b -\", \"b- -\", \"- b\", \"- c\", \"- -\"],"
                 " \"ignore_merges\": true},"
                 " \"added_tokens\": [], \"decoder\": null,"
                 " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"-\"},"
                 " \"behavior\": \"%s\", \"invert\": %s}}",
                 cases[k].behavior, cases[k].invert ? "true" : "false");
        ts_tokenizer *t = load(ts_t_, json);
        if (!t) return;
        int32_t *ids = NULL;
        size_t n = 0;
        TS_CHECK_STATUS(ts_tokenizer_encode(t, "a-b--c", 6, true, &ids, &n), TS_OK);
        char got[64] = "";
        for (size_t i = 0; i < n; i++) {
            if (i) strcat(got, "|");
            strncat(got, ts_tokenizer_id_to_token(t, ids[i]), sizeof got - strlen(got) - 1);
        }
        /* invert swaps what counts as the delimiter: with Isolated the pieces are the same */
        TS_CHECK_MSG(!strcmp(got, cases[k].pieces), "%s invert=%d: got %s, want %s",
                     cases[k].behavior, cases[k].invert, got, cases[k].pieces);
        free(ids);
        ts_tokenizer_free(t);
    }
}

/* A byte-level vocabulary: the 256 byte symbols as ids 0-255, plus merges. */
static char *bytelevel_json(void) {
    size_t cap = 64 * 1024, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        /* GPT-2's byte alphabet, written out independently of the library's table */
        int cp = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
            int k = 0;
            for (int x = 0; x < b; x++)
                k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE));
            cp = 256 + k;
        }
        char u[16];
        if (cp < 0x80) {
            if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", cp);
            else snprintf(u, sizeof u, "%c", cp);
        } else {
            snprintf(u, sizeof u, "\\u%04x", cp);
        }
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\": %d", b ? ", " : "", u, b);
    }
    /* "Ġ" (U+0120) is the space byte; "é" as bytes C3 A9 is "Ã©" */
    n += (size_t)snprintf(j + n, cap - n,
                          ", \"\\u0120h\": 256, \"\\u0120hi\": 257, \"\\u00c3\\u00a9\": 258},"
                          " \"merges\": [\"\\u0120 h\", \"\\u0120h i\", \"\\u00c3 \\u00a9\"]},"
                          " \"added_tokens\": [{\"id\": 259, \"content\": \"<|U|>\", \"special\": true}],"
                          " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                          " \"use_regex\": true},"
                          " \"decoder\": {\"type\": \"ByteLevel\"}}");
    return j;
}

TS_TEST(tokenizer_bytelevel_encode_decode_stream) {
    char *json = bytelevel_json();
    ts_tokenizer *t = load(ts_t_, json);
    free(json);
    if (!t) return;
    /* GPT-2 split: "a", " hi", " é": " hi" -> Ġh i -> Ġhi; " é" -> Ġ, Ã©; '!' is byte 0x21 */
    EXPECT(t, "a hi é!", true, 'a', 257, 0x20, 258, '!');
    EXPECT(t, "<|U|>\n", true, 259, 0x0A);
    /* decode: bytes back; the added token stays as written; special tokens skipped on request */
    const int32_t ids[] = {'a', 257, 0x20, 258, 259, 0x0A};
    char *text = NULL;
    size_t len = 0;
    TS_CHECK_STATUS(ts_tokenizer_decode(t, ids, 6, false, &text, &len), TS_OK);
    TS_CHECK(text && !strcmp(text, "a hi \xC3\xA9<|U|>\n"));
    free(text);
    TS_CHECK_STATUS(ts_tokenizer_decode(t, ids, 6, true, &text, &len), TS_OK);
    TS_CHECK(text && !strcmp(text, "a hi \xC3\xA9\n"));
    free(text);
    /* a character split across ids: C3 then A9. Batch decode joins them; a lone C3 is U+FFFD */
    const int32_t split[] = {0xC3, 0xA9, 'x', 0xC3};
    TS_CHECK_STATUS(ts_tokenizer_decode(t, split, 4, false, &text, &len), TS_OK);
    TS_CHECK(text && !strcmp(text, "\xC3\xA9x\xEF\xBF\xBD"));
    free(text);
    /* streaming: nothing comes out for the first half of é, the whole character with the second */
    ts_tokenizer_stream s;
    ts_tokenizer_stream_init(&s, t, false);
    char out[64], all[64] = "";
    size_t n;
    TS_CHECK_STATUS(ts_tokenizer_stream_put(&s, 0xC3, out, sizeof out, &n), TS_OK);
    TS_CHECK_EQ_INT(n, 0);
    for (int i = 1; i < 4; i++) {
        TS_CHECK_STATUS(ts_tokenizer_stream_put(&s, split[i], out, sizeof out, &n), TS_OK);
        strncat(all, out, n);
    }
    TS_CHECK_STATUS(ts_tokenizer_stream_finish(&s, out, sizeof out, &n), TS_OK);
    strncat(all, out, n);
    TS_CHECK(!strcmp(all, "\xC3\xA9x\xEF\xBF\xBD"));
    /* invalid bytes mid-stream: C3 followed by 'x' is U+FFFD then x (maximal subpart rule) */
    ts_tokenizer_stream_init(&s, t, false);
    TS_CHECK_STATUS(ts_tokenizer_stream_put(&s, 0xC3, out, sizeof out, &n), TS_OK);
    TS_CHECK_STATUS(ts_tokenizer_stream_put(&s, 'x', out, sizeof out, &n), TS_OK);
    TS_CHECK(n == 4 && !memcmp(out, "\xEF\xBF\xBDx", 4));
    /* bad ids and input */
    const int32_t bad_id[] = {5000};
    TS_CHECK_STATUS(ts_tokenizer_decode(t, bad_id, 1, false, &text, &len), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_tokenizer_stream_put(&s, -1, out, sizeof out, &n), TS_ERR_INVALID_ARGUMENT);
    int32_t *got = NULL;
    TS_CHECK_STATUS(ts_tokenizer_encode(t, "ok\xC3(", 4, true, &got, &len), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "byte 2") != NULL);
    TS_CHECK_STATUS(ts_tokenizer_encode(t, "\xED\xA0\x80", 3, true, &got, &len), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_tokenizer_encode(t, "", 0, true, &got, &len), TS_OK);
    TS_CHECK_EQ_INT(len, 0);
    free(got);
    ts_tokenizer_free(t);
}

/* Hostile or unsupported files: each refused with its own code and the component named. */
TS_TEST(tokenizer_bad_files) {
    static const struct { const char *json; ts_status st; const char *needle; } cases[] = {
        {"{\"model\": ", TS_ERR_INVALID_ARGUMENT, "invalid JSON"},
        {"[]", TS_ERR_INVALID_ARGUMENT, "not an object"},
        {"{\"added_tokens\": []}", TS_ERR_INVALID_ARGUMENT, "model"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"added_tokens\": []}",
         TS_ERR_UNSUPPORTED, "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "outside"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}, \"merges\": []}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "outside"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "share one id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "duplicate"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a q\"]}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "merges[0]"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"aq\"]}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "\"a b\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}, \"added_tokens\": []}",
         TS_ERR_UNSUPPORTED, "dropout"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [],"
         " \"normalizer\": {\"type\": \"NFKC\"}}", TS_ERR_UNSUPPORTED, "NFKC"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [],"
         " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
         TS_ERR_INVALID_ARGUMENT, "does not compile"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [],"
         " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}",
         TS_ERR_UNSUPPORTED, "Sideways"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [],"
         " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}",
         TS_ERR_INVALID_ARGUMENT, "byte 0x00"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [],"
         " \"decoder\": {\"type\": \"WordPiece\"}}", TS_ERR_UNSUPPORTED, "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
         " \"added_tokens\": [{\"id\": 0, \"content\": \"b\"}]}", TS_ERR_INVALID_ARGUMENT, "share one id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
         " \"added_tokens\": [{\"id\": 1}]}", TS_ERR_INVALID_ARGUMENT, "content"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"added_tokens\": []}",
         TS_ERR_INVALID_ARGUMENT, "no tokens"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ts_tokenizer *t = (ts_tokenizer *)1;
        const ts_status st = ts_tokenizer_load_buffer(cases[k].json, strlen(cases[k].json), "bad.json", &t);
        TS_CHECK_MSG(st == cases[k].st && t == NULL && strstr(ts_last_error(), cases[k].needle) &&
                         strstr(ts_last_error(), "bad.json"),
                     "case %zu: status %d (want %d), message '%s' (want '%s')", k, (int)st,
                     (int)cases[k].st, ts_last_error(), cases[k].needle);
    }
    ts_tokenizer *t = NULL;
    TS_CHECK_STATUS(ts_tokenizer_load("/nonexistent/tokenizer.json", &t), TS_ERR_IO);
    TS_CHECK_STATUS(ts_tokenizer_load("/tmp", &t), TS_ERR_IO);
    TS_CHECK(strstr(ts_last_error(), "regular file") != NULL);
    TS_CHECK_STATUS(ts_tokenizer_load(NULL, &t), TS_ERR_NULL_POINTER);
}

/* Chat prompts: marker ids around message ids, the V4 / V3 turn shapes, bad orders refused. */
TS_TEST(tokenizer_chat_prompts) {
    static const char *json =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"<\": 2, \">\": 3},"
        " \"merges\": []}, \"decoder\": null, \"added_tokens\": ["
        " {\"id\": 10, \"content\": \"<｜begin▁of▁sentence｜>\", \"special\": true},"
        " {\"id\": 11, \"content\": \"<｜end▁of▁sentence｜>\", \"special\": true},"
        " {\"id\": 12, \"content\": \"<｜User｜>\", \"special\": false},"
        " {\"id\": 13, \"content\": \"<｜Assistant｜>\", \"special\": false},"
        " {\"id\": 14, \"content\": \"<think>\", \"special\": false},"
        " {\"id\": 15, \"content\": \"</think>\", \"special\": false}]}";
    ts_tokenizer *t = load(ts_t_, json);
    if (!t) return;
    const ts_chat_message conv[] = {{TS_CHAT_SYSTEM, "b", 1}, {TS_CHAT_USER, "a", 1},
                                    {TS_CHAT_ASSISTANT, "bb", 2}, {TS_CHAT_USER, "a<think>", 8}};
    int32_t *ids = NULL;
    size_t n = 0;
    /* V4: BOS b | User a Assistant | </think> b b EOS | User a < > Assistant <think>; the typed
     * "<think>" stays characters (t, h, ... have no token and drop out) */
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, conv, 4, true, &ids, &n), TS_OK);
    const int32_t v4[] = {10, 1, 12, 0, 13, 15, 1, 1, 11, 12, 0, 2, 3, 13, 14};
    TS_CHECK(n == sizeof v4 / sizeof *v4 && !memcmp(ids, v4, sizeof v4));
    free(ids);
    /* V3: BOS b | User a | Assistant b b EOS | User a < > | Assistant */
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V3, conv, 4, true, &ids, &n), TS_OK);
    const int32_t v3[] = {10, 1, 12, 0, 13, 1, 1, 11, 12, 0, 2, 3, 13};
    TS_CHECK(n == sizeof v3 / sizeof *v3 && !memcmp(ids, v3, sizeof v3));
    free(ids);
    const ts_chat_message no_user[] = {{TS_CHAT_SYSTEM, "b", 1}};
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, no_user, 1, false, &ids, &n), TS_ERR_INVALID_ARGUMENT);
    const ts_chat_message two_users[] = {{TS_CHAT_USER, "a", 1}, {TS_CHAT_USER, "a", 1}};
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, two_users, 2, false, &ids, &n), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "message 1") != NULL);
    const ts_chat_message late_system[] = {{TS_CHAT_USER, "a", 1}, {TS_CHAT_SYSTEM, "b", 1}};
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, late_system, 2, false, &ids, &n), TS_ERR_INVALID_ARGUMENT);
    const ts_chat_message bad_utf8[] = {{TS_CHAT_USER, "a\xff", 2}};
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, bad_utf8, 1, false, &ids, &n), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "message 0") != NULL);
    /* the encoder's own reason, intact (it was once formatted into its own buffer) */
    TS_CHECK(strstr(ts_last_error(), "not valid UTF-8 (byte 1") != NULL);
    ts_tokenizer_free(t);
    /* a tokenizer without the markers cannot render a prompt */
    t = load(ts_t_, k_small);
    if (!t) return;
    TS_CHECK_STATUS(ts_chat_encode(t, TS_CHAT_DEEPSEEK_V4, conv, 4, true, &ids, &n), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "begin") != NULL);
    ts_tokenizer_free(t);
}
