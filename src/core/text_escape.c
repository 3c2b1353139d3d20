/* Escaping untrusted bytes for messages (text_escape.h). */
#include "core/text_escape.h"

#include <string.h>

/* The escape of byte c into e (at most 4 bytes); returns its length. */
static size_t escape1(unsigned char c, char e[4]) {
    static const char hex[] = "0123456789abcdef";
    switch (c) {
    case '"': case '\\': e[0] = '\\', e[1] = (char)c; return 2;
    case '\n': e[0] = '\\', e[1] = 'n'; return 2;
    case '\r': e[0] = '\\', e[1] = 'r'; return 2;
    case '\t': e[0] = '\\', e[1] = 't'; return 2;
    default: break;
    }
    if (c >= 0x20 && c < 0x7F) {
        e[0] = (char)c;
        return 1;
    }
    e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15];
    return 4;
}

const char *ts__text_escape(const void *s, size_t n, char *buf, size_t cap) {
    const unsigned char *p = (const unsigned char *)s;
    if (!buf || cap == 0) return buf;
    buf[0] = 0;
    if (cap < 4) return buf; /* no room for even the cut mark */
    char e[4];
    size_t full = 0;
    for (size_t i = 0; i < n && full < cap; i++) full += escape1(p[i], e);
    /* everything fits: all of it; else as many whole escapes as leave room for "..." */
    const size_t room = full <= cap - 1 ? cap - 1 : cap - 4;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t k = escape1(p[i], e);
        if (o + k > room) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
        memcpy(buf + o, e, k);
        o += k;
    }
    buf[o] = 0;
    return buf;
}

const char *ts__text_escape_str(const char *s, char *buf, size_t cap) {
    if (!s) s = "(null)";
    return ts__text_escape(s, strlen(s), buf, cap);
}
