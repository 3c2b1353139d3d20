/* Internals of the tokenizer (src/text/): the string map, UTF-8 helpers, the byte-level
 * alphabet and the loaded tokenizer's structure. Not installed. */
#ifndef TILESTACK_TEXT_INTERNAL_H
#define TILESTACK_TEXT_INTERNAL_H

#include "tilestack/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- string -> int32 map, open addressing (text_map.c) ---- */
typedef struct ts__str_map {
    const char **keys; /* borrowed: point into the tokenizer's string arena */
    uint32_t *lens;
    int32_t *vals;
    size_t cap, n; /* cap a power of two */
} ts__str_map;

ts_status ts__str_map_init(ts__str_map *m, size_t expect);
void ts__str_map_free(ts__str_map *m);
/* Inserts key -> val; false (and nothing changed) when the key is there already. */
bool ts__str_map_put(ts__str_map *m, const char *key, size_t len, int32_t val);
int32_t ts__str_map_get(const ts__str_map *m, const char *key, size_t len); /* -1 if absent */

/* ---- (a, b) -> (rank, merged id) map of the BPE merges (text_map.c) ---- */
typedef struct ts__pair_map {
    uint64_t *keys; /* (a << 32 | b) + 1; 0 = empty */
    int32_t *rank, *merged;
    size_t cap, n;
} ts__pair_map;

ts_status ts__pair_map_init(ts__pair_map *m, size_t expect);
void ts__pair_map_free(ts__pair_map *m);
/* Inserts or replaces (a repeated pair keeps its later rank); false only when out of memory. */
bool ts__pair_map_put(ts__pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
bool ts__pair_map_get(const ts__pair_map *m, int32_t a, int32_t b, int32_t *rank,
                      int32_t *merged);

/* ---- UTF-8 (text_utf8.c) ---- */
/* Offset of the first byte that does not start a valid UTF-8 sequence, or len if all valid. */
size_t ts__utf8_first_invalid(const unsigned char *s, size_t len);
/* Length of the valid sequence starting at s[0] (1-4), assuming valid UTF-8. */
int ts__utf8_len(unsigned char lead);
/* Appends `len` bytes to out as UTF-8 with every maximal invalid subpart replaced by U+FFFD
 * (the rule of Rust's from_utf8_lossy). When `hold` is set, an incomplete but so far valid
 * sequence at the very end is not written: its length is returned (0 otherwise) so a stream
 * can keep it for the next call. *out_len grows; out must have room for 3 * len bytes. */
size_t ts__utf8_lossy(const unsigned char *s, size_t len, bool hold, char *out, size_t *out_len);

/* ---- byte-level alphabet (GPT-2's bytes_to_unicode; text_utf8.c) ---- */
/* The code point standing for byte b. */
uint32_t ts__bytelevel_char(unsigned char b);
/* The byte a code point stands for, or -1 if it stands for none. */
int ts__bytelevel_byte(uint32_t cp);
/* Writes code point cp as UTF-8 into out (room for 4); returns the length. */
int ts__utf8_put(uint32_t cp, char *out);
/* Decodes the code point at s (valid UTF-8 assumed), its length in *n. */
uint32_t ts__utf8_get(const unsigned char *s, int *n);

/* ---- the tokenizer (text_tokenizer_load.c builds it) ---- */
typedef enum ts__split_behavior {
    TS__SPLIT_REMOVED,
    TS__SPLIT_ISOLATED,
    TS__SPLIT_MERGED_WITH_PREVIOUS,
    TS__SPLIT_MERGED_WITH_NEXT,
    TS__SPLIT_CONTIGUOUS
} ts__split_behavior;

typedef struct ts__pretok {
    enum { TS__PRETOK_SPLIT, TS__PRETOK_BYTELEVEL } kind;
    void *regex; /* OnigRegex (text_regex.c), for SPLIT and for ByteLevel's own regex */
    ts__split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* ByteLevel */
} ts__pretok;

typedef struct ts__added_token {
    const char *content;
    uint32_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word;
} ts__added_token;

struct ts_tokenizer {
    char *arena; /* every token string, NUL-terminated */
    size_t arena_len, arena_cap;
    const char **id_str; /* id -> token string (NULL: no token) */
    uint32_t *id_len;
    bool *id_special;
    int64_t n_ids;
    ts__str_map vocab; /* model vocab and added tokens */
    ts__pair_map merges;
    bool ignore_merges;
    bool bytelevel; /* byte-level alphabet in use (pre-tokenizer) */
    ts__pretok *pretok;
    int n_pretok;
    ts__added_token *added;
    int n_added;
    int32_t byte_id[256]; /* id of the one-byte-symbol of each byte (-1: none) */
};

/* Regex splitting (text_regex.c): Oniguruma, the library `tokenizers` uses, so \p{..}, \s and
 * look-ahead mean the same. */
ts_status ts__regex_compile(const char *pattern, size_t len, bool literal, void **out,
                            const char *what);
void ts__regex_free(void *re);
void *ts__regex_region_new(void);
void ts__regex_region_free(void *region);
/* The first match at or after `start` in the subject s[0, end): 1 (found), 0 (none), -1 (the
 * search failed: Oniguruma's backtracking limit, which bounds a hostile pattern's time). */
int ts__regex_next(void *re, void *region, const unsigned char *s, size_t end, size_t start,
                   size_t *m0, size_t *m1);

/* Which added tokens written in the text become their ids: all (tokenizers' default), the
 * non-special ones (encode_special_tokens), or none (chat message text: no marker, special or
 * not, can be forged). */
typedef enum ts__added_mode { TS__ADDED_ALL, TS__ADDED_NON_SPECIAL, TS__ADDED_NONE } ts__added_mode;
ts_status ts__tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len,
                               ts__added_mode mode, int32_t **ids, size_t *n_ids);

/* BPE of one pre-tokenized piece (text_bpe.c): appends its ids to *ids (grown as needed).
 * Its symbol list and heap live in `scratch`, kept across the pieces of one encode (free with
 * ts__bpe_scratch_free), so a piece costs no allocation. */
typedef struct ts__bpe_scratch {
    void *sym, *heap;
    size_t cap; /* symbols the buffers hold */
} ts__bpe_scratch;
ts_status ts__bpe_word(const ts_tokenizer *t, const char *piece, size_t len,
                       ts__bpe_scratch *scratch, int32_t **ids, size_t *n, size_t *cap);
void ts__bpe_scratch_free(ts__bpe_scratch *scratch);

#endif
