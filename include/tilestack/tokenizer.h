/* tilestack tokenizer: Hugging Face `tokenizer.json` files of the byte-level BPE family that
 * DeepSeek V3 / V3.2 / V4 ship (docs/tokenizer.md), with the ids of the `tokenizers` library.
 *
 * What is read: added tokens (special or not; lstrip / rstrip / single_word), the normalizer
 * (an empty Sequence only), the pre-tokenizer (Sequence, Split with a regex or a string and
 * any of its behaviours, ByteLevel with or without its own regex), the BPE model (vocab and
 * merges, in the old "a b" and the new ["a", "b"] form; ignore_merges) and the ByteLevel
 * decoder. Anything else is refused with TS_ERR_UNSUPPORTED naming the component, never
 * approximated. A tokenizer file is untrusted input: sizes are capped and every id checked.
 *
 * Text crosses the API as UTF-8 bytes with an explicit length; invalid UTF-8 is refused
 * (TS_ERR_INVALID_ARGUMENT with the byte offset). */
#ifndef TILESTACK_TOKENIZER_H
#define TILESTACK_TOKENIZER_H

#include "tilestack/core.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_tokenizer ts_tokenizer;

/* Largest tokenizer.json read (the DeepSeek V4 one is 6.4 MB). */
#define TS_TOKENIZER_MAX_FILE_BYTES (INT64_C(256) << 20)

/* Reads a tokenizer.json file (TS_ERR_IO when missing or unreadable, TS_ERR_INVALID_ARGUMENT
 * when malformed, TS_ERR_UNSUPPORTED for a component this reader does not implement; the
 * message names the file and the JSON path). */
TS_API ts_status ts_tokenizer_load(const char *path, ts_tokenizer **out);
/* The same from bytes in memory (`what` names them in messages). */
TS_API ts_status ts_tokenizer_load_buffer(const char *json, size_t len, const char *what,
                                          ts_tokenizer **out);
TS_API void ts_tokenizer_free(ts_tokenizer *t);

/* Ids of all tokens: one more than the largest id. */
TS_API int64_t ts_tokenizer_vocab_size(const ts_tokenizer *t);
/* The token's id, or -1 when it has none (the string is the token as the file spells it). */
TS_API int32_t ts_tokenizer_token_to_id(const ts_tokenizer *t, const char *token);
/* The token string of `id` (as the file spells it; NULL for an id with no token). */
TS_API const char *ts_tokenizer_id_to_token(const ts_tokenizer *t, int32_t id);
TS_API bool ts_tokenizer_is_special(const ts_tokenizer *t, int32_t id);

/* Encodes `len` bytes of UTF-8. With parse_special, added tokens written in the text become
 * their ids (what `tokenizers` does by default, and what chat templates need); without it
 * (text from a user, say) they are encoded as ordinary text. *ids is malloc'ed (free()). */
TS_API ts_status ts_tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len,
                                     bool parse_special, int32_t **ids, size_t *n_ids);

/* Decodes ids to UTF-8 (malloc'ed, NUL-terminated; *len excludes the NUL). Byte sequences that
 * are not UTF-8 (ids cut inside a character) become U+FFFD, as `tokenizers` does.
 * TS_ERR_INVALID_ARGUMENT for an id outside the vocabulary. */
TS_API ts_status ts_tokenizer_decode(const ts_tokenizer *t, const int32_t *ids, size_t n,
                                     bool skip_special, char **text, size_t *len);

/* Streaming decode for generation: feed one id at a time; what comes out is always whole
 * UTF-8 characters (bytes of a character split across tokens are held back until it is
 * complete), and the concatenation of all outputs plus ts_tokenizer_stream_finish's equals
 * ts_tokenizer_decode of the same ids. */
typedef struct ts_tokenizer_stream {
    const ts_tokenizer *tok;
    bool skip_special;
    unsigned char pending[8]; /* an incomplete UTF-8 sequence */
    int n_pending;
    bool started; /* a token was put (tokenizers without a decoder join with spaces) */
} ts_tokenizer_stream;

TS_API void ts_tokenizer_stream_init(ts_tokenizer_stream *s, const ts_tokenizer *t,
                                     bool skip_special);
/* Writes the text that `id` completes to out, its length in *len; cap must be at least
 * 3 * strlen(ts_tokenizer_id_to_token(t, id)) + 12. */
TS_API ts_status ts_tokenizer_stream_put(ts_tokenizer_stream *s, int32_t id, char *out,
                                         size_t cap, size_t *len);
/* Flushes a trailing incomplete character (as U+FFFD). */
TS_API ts_status ts_tokenizer_stream_finish(ts_tokenizer_stream *s, char *out, size_t cap,
                                            size_t *len);

/* ---- chat prompts (docs/tokenizer.md "Chat") ----
 * DeepSeek V4 / V3.2:  BOS {system} then per turn <｜User｜>{user}<｜Assistant｜>, an answered
 *   turn continuing </think>{answer}<｜end▁of▁sentence｜> (earlier reasoning is not kept), the
 *   open turn ending in <think> (thinking) or </think> (non-thinking).
 * DeepSeek V3:  BOS {system} <｜User｜>{user} <｜Assistant｜>{answer}<｜end▁of▁sentence｜> ...
 *   and <｜Assistant｜> to open the reply.
 * Message text is encoded with no added token recognised (special or not): a user who types
 * "<｜User｜>" gets the characters, never the token, so no message can forge a turn. */
typedef enum ts_chat_format { TS_CHAT_DEEPSEEK_V4 = 0, TS_CHAT_DEEPSEEK_V3 = 1 } ts_chat_format;

typedef enum ts_chat_role { TS_CHAT_SYSTEM = 0, TS_CHAT_USER = 1, TS_CHAT_ASSISTANT = 2 } ts_chat_role;

typedef struct ts_chat_message {
    ts_chat_role role;
    const char *content; /* UTF-8 */
    size_t len;
} ts_chat_message;

/* The prompt's ids (malloc'ed): system messages first (any number), then user and assistant
 * turns alternating from a user turn; when the last message is a user turn the reply is
 * opened (add_generation_prompt). TS_ERR_INVALID_ARGUMENT for an order that is none of these,
 * invalid UTF-8 or a bad role; TS_ERR_UNSUPPORTED when the tokenizer lacks a marker token. */
TS_API ts_status ts_chat_encode(const ts_tokenizer *t, ts_chat_format format,
                                const ts_chat_message *msgs, size_t n, bool thinking,
                                int32_t **ids, size_t *n_ids);

#ifdef __cplusplus
}
#endif

#endif
