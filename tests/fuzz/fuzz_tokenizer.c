/* Fuzz target for the tokenizer reader (src/text/): the bytes up to the first NUL are a
 * tokenizer.json, the rest is text. Loading must end in a tokenizer or a status; a tokenizer
 * must encode any text (valid UTF-8 or refused), give only ids it has, decode them, and its
 * streaming decode must equal the batch decode byte for byte.
 *
 * Built with libFuzzer (scripts/run_fuzz.sh) or with the driver fuzz_driver.c (the CMake
 * target tilestack_fuzz_tokenizer); seeds in tests/fuzz/corpus_tokenizer/. */
#include "tilestack/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ids(const ts_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!ts_tokenizer_id_to_token(t, ids[i])) {
            fprintf(stderr, "fuzz_tokenizer: encode gave id %d, which has no token\n", (int)ids[i]);
            abort();
        }
    char *text = NULL;
    size_t len = 0;
    if (ts_tokenizer_decode(t, ids, n, false, &text, &len) != TS_OK) {
        fprintf(stderr, "fuzz_tokenizer: decode of encode's ids failed: %s\n", ts_last_error());
        abort();
    }
    /* the stream gives the same bytes */
    ts_tokenizer_stream s;
    ts_tokenizer_stream_init(&s, t, false);
    size_t cap = 64, at = 0;
    char *all = malloc(len + 64), *out = malloc(cap);
    for (size_t i = 0; i < n && all && out; i++) {
        const size_t need = 3 * strlen(ts_tokenizer_id_to_token(t, ids[i])) + 12;
        if (need > cap) {
            free(out);
            out = malloc(cap = need);
            if (!out) break;
        }
        size_t k = 0;
        if (ts_tokenizer_stream_put(&s, ids[i], out, cap, &k) != TS_OK || at + k > len) {
            fprintf(stderr, "fuzz_tokenizer: stream_put failed or overran the batch decode\n");
            abort();
        }
        memcpy(all + at, out, k);
        at += k;
    }
    size_t k = 0;
    if (all && out && ts_tokenizer_stream_finish(&s, out, cap, &k) == TS_OK && at + k <= len) {
        memcpy(all + at, out, k);
        at += k;
        if (at != len || memcmp(all, text, len)) {
            fprintf(stderr, "fuzz_tokenizer: streaming decode differs from the batch decode\n");
            abort();
        }
    }
    free(all);
    free(out);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t jlen = nul ? (size_t)(nul - data) : size;
    ts_tokenizer *t = NULL;
    if (ts_tokenizer_load_buffer((const char *)data, jlen, "fuzz.json", &t) != TS_OK) return 0;
    const char *text = nul ? (const char *)nul + 1 : (const char *)data;
    const size_t tlen = nul ? size - jlen - 1 : size;
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (ts_tokenizer_encode(t, text, tlen, special, &ids, &n) == TS_OK) check_ids(t, ids, n);
        free(ids);
    }
    ts_tokenizer_free(t);
    return 0;
}
