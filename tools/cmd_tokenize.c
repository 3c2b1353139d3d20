/* `tilestack tokenize`: a tokenizer.json applied to text (ids out, as a JSON array) or, with
 * --decode, to a JSON array of ids (text out, as a JSON string). docs/tokenizer.md. */
#include "cli.h"
#include "core/file_read.h"
#include "tilestack/tokenizer.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT_BYTES (INT64_C(1) << 30)

static void usage(FILE *f) {
    fprintf(f, "usage: tilestack tokenize (--model DIR | --tokenizer FILE) (--text T | --file F)\n"
               "                          [--decode] [--no-special] [--skip-special]\n"
               "  --model DIR       a Hugging Face checkpoint directory (its tokenizer.json)\n"
               "  --tokenizer FILE  a tokenizer.json\n"
               "  --text T / --file F   the input: text, or with --decode a JSON array of ids\n"
               "  --no-special      added special tokens written in the text stay text\n"
               "  --skip-special    --decode: leave special tokens out\n"
               "  --chat FORMAT     the input is a JSON array of {\"role\", \"content\"} messages,\n"
               "                    encoded as a prompt: FORMAT v4 (also V3.2) | v4-thinking | v3\n"
               "Prints a JSON array of ids, or with --decode the text as a JSON string.\n");
}

/* The whole file (at most MAX_INPUT_BYTES), malloc'ed. */
static char *read_input(const char *path, size_t *len) {
    char *buf = NULL;
    if (ts__read_file_capped(AT_FDCWD, path, path, (size_t)MAX_INPUT_BYTES, true, &buf, len) != TS_OK)
        fprintf(stderr, "tilestack tokenize: --file %s\n", ts_last_error());
    return buf;
}

static int decode(const ts_tokenizer *t, const char *in, size_t len, bool skip_special) {
    json_error_t err;
    json_t *arr = json_loadb(in, len, 0, &err);
    if (!json_is_array(arr)) {
        fprintf(stderr, "tilestack tokenize: --decode wants a JSON array of ids (%s)\n",
                arr ? "not an array" : err.text);
        json_decref(arr);
        return 1;
    }
    const size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        const json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "tilestack tokenize: --decode: entry %zu is not an id\n", i);
            free(ids);
            json_decref(arr);
            return 1;
        }
        ids[i] = (int32_t)x;
    }
    json_decref(arr);
    char *text = NULL;
    size_t tl = 0;
    ts_status st = ts_tokenizer_decode(t, ids, n, skip_special, &text, &tl);
    free(ids);
    if (st != TS_OK) {
        fprintf(stderr, "tilestack tokenize: %s\n", ts_last_error());
        return 1;
    }
    json_t *s = json_stringn(text, tl);
    char *out = s ? json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    if (out) printf("%s\n", out);
    free(out);
    json_decref(s);
    free(text);
    return out ? 0 : 1;
}

static int encode(const ts_tokenizer *t, const char *in, size_t len, bool special) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (ts_tokenizer_encode(t, in, len, special, &ids, &n) != TS_OK) {
        fprintf(stderr, "tilestack tokenize: %s\n", ts_last_error());
        return 1;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ",%ld" : "%ld", (long)ids[i]);
    printf("]\n");
    free(ids);
    return 0;
}

static int chat(const ts_tokenizer *t, const char *in, size_t len, const char *format) {
    const bool v3 = !strcmp(format, "v3"), think = !strcmp(format, "v4-thinking");
    json_error_t err;
    json_t *arr = json_loadb(in, len, 0, &err);
    const size_t n = json_array_size(arr);
    ts_chat_message *m = calloc(n ? n : 1, sizeof *m);
    int rc = json_is_array(arr) && m ? 0 : 1;
    if (rc) fprintf(stderr, "tilestack tokenize: --chat wants a JSON array of messages\n");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        const char *role = json_string_value(json_object_get(v, "role"));
        json_t *c = json_object_get(v, "content");
        if (rc || !role || !json_is_string(c)) {
            if (!rc) fprintf(stderr, "tilestack tokenize: --chat: message %zu needs a role and a "
                             "content string\n", i);
            rc = 1;
            break;
        }
        m[i].role = !strcmp(role, "system") ? TS_CHAT_SYSTEM : !strcmp(role, "user") ? TS_CHAT_USER
                  : !strcmp(role, "assistant") ? TS_CHAT_ASSISTANT : (ts_chat_role)-1;
        m[i].content = json_string_value(c);
        m[i].len = json_string_length(c);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (!rc && ts_chat_encode(t, v3 ? TS_CHAT_DEEPSEEK_V3 : TS_CHAT_DEEPSEEK_V4, m, n, think, &ids,
                              &n_ids) != TS_OK) {
        fprintf(stderr, "tilestack tokenize: %s\n", ts_last_error());
        rc = 1;
    }
    if (!rc) {
        putchar('[');
        for (size_t k = 0; k < n_ids; k++) printf(k ? ",%ld" : "%ld", (long)ids[k]);
        printf("]\n");
    }
    free(ids);
    free(m);
    json_decref(arr);
    return rc;
}

int ts__cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *tok = NULL, *text = NULL, *file = NULL, *chat_format = NULL;
    bool dec = false, special = true, skip = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const bool has_next = i + 1 < argc;
        if (!strcmp(a, "--model") && has_next) dir = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has_next) tok = argv[++i];
        else if (!strcmp(a, "--text") && has_next) text = argv[++i];
        else if (!strcmp(a, "--file") && has_next) file = argv[++i];
        else if (!strcmp(a, "--decode")) dec = true;
        else if (!strcmp(a, "--chat") && has_next) chat_format = argv[++i];
        else if (!strcmp(a, "--no-special")) special = false;
        else if (!strcmp(a, "--skip-special")) skip = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        else {
            fprintf(stderr, "tilestack tokenize: unknown option or missing value: '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!dir == !tok || !text == !file) {
        fprintf(stderr, "tilestack tokenize: give one of --model / --tokenizer and one of "
                        "--text / --file\n");
        return 2;
    }
    if (chat_format && (dec || (strcmp(chat_format, "v4") && strcmp(chat_format, "v4-thinking") &&
                                strcmp(chat_format, "v3")))) {
        fprintf(stderr, "tilestack tokenize: --chat takes v4, v4-thinking or v3, without --decode\n");
        return 2;
    }
    char path[4096];
    if (dir && snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path) {
        fprintf(stderr, "tilestack tokenize: --model path too long\n");
        return 2;
    }
    ts_tokenizer *t = NULL;
    if (ts_tokenizer_load(dir ? path : tok, &t) != TS_OK) {
        fprintf(stderr, "tilestack tokenize: %s\n", ts_last_error());
        return 1;
    }
    size_t len = text ? strlen(text) : 0;
    char *buf = file ? read_input(file, &len) : NULL;
    int rc = 1;
    if (!file || buf) {
        const char *in = file ? buf : text;
        rc = chat_format ? chat(t, in, len, chat_format)
             : dec       ? decode(t, in, len, skip)
                         : encode(t, in, len, special);
    }
    free(buf);
    ts_tokenizer_free(t);
    return rc;
}
