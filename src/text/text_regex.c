/* Pre-tokenizer regexes through Oniguruma, the regex library inside `tokenizers`, so that
 * \p{..} classes, \s and look-ahead match exactly what the reference matches. */
#include "text/text_internal.h"
#include "core/internal.h"

#include <oniguruma.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t g_onig_once = PTHREAD_ONCE_INIT;
static int g_onig_rc;

static void onig_setup(void) {
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    g_onig_rc = onig_initialize(enc, 1);
}

/* Escapes every byte of a literal pattern ("String" splits) so Oniguruma matches it as is. */
static char *quote_literal(const char *s, size_t len, size_t *out_len) {
    char *q = malloc(2 * len + 1);
    size_t o = 0;
    if (!q) return NULL;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || c == ' ' || c == '_'))
            q[o++] = '\\';
        q[o++] = (char)c;
    }
    q[o] = 0;
    *out_len = o;
    return q;
}

ts_status ts__regex_compile(const char *pattern, size_t len, bool literal, void **out,
                            const char *what) {
    *out = NULL;
    pthread_once(&g_onig_once, onig_setup);
    if (g_onig_rc != ONIG_NORMAL)
        return ts__fail(TS_ERR_INTERNAL, "tokenizer: Oniguruma failed to initialise (%d)", g_onig_rc);
    if (ts__utf8_first_invalid((const unsigned char *)pattern, len) != len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the pattern is not valid UTF-8", what);
    size_t qlen = len;
    char *q = literal ? quote_literal(pattern, len, &qlen) : NULL;
    if (literal && !q) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: pattern copy", what);
    const OnigUChar *p = (const OnigUChar *)(q ? q : pattern);
    OnigRegex re = NULL;
    OnigErrorInfo einfo;
    const int rc = onig_new(&re, p, p + qlen, ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                            ONIG_SYNTAX_RUBY, &einfo);
    free(q);
    if (rc != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the regex does not compile: %s", what,
                        (const char *)msg);
    }
    *out = re;
    return TS_OK;
}

void ts__regex_free(void *re) {
    if (re) onig_free((OnigRegex)re);
}

void *ts__regex_region_new(void) { return onig_region_new(); }

void ts__regex_region_free(void *region) {
    if (region) onig_region_free((OnigRegion *)region, 1);
}

int ts__regex_next(void *re, void *region, const unsigned char *s, size_t end, size_t start,
                   size_t *m0, size_t *m1) {
    OnigRegion *rg = (OnigRegion *)region;
    const int r = onig_search((OnigRegex)re, s, s + end, s + start, s + end, rg,
                              ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) return 0;
    if (r < 0) return -1; /* e.g. the retry limit: a pattern that backtracks without end */
    *m0 = (size_t)rg->beg[0];
    *m1 = (size_t)rg->end[0];
    return 1;
}
