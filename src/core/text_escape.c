/* Escaping untrusted bytes for messages (text_escape.h). */
#include "core/text_escape.h"

#include <string.h>

const char *ts__text_escape(const void *s, size_t n, char *buf, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    if (!buf || cap == 0) return buf;
    if (cap < 4) { /* no room for anything but the cut mark's start */
        buf[0] = 0;
        return buf;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char e[4];
        size_t k = 0;
        const unsigned char c = p[i];
        if (c == '"' || c == '\\') e[k++] = '\\', e[k++] = (char)c;
        else if (c == '\n') e[k++] = '\\', e[k++] = 'n';
        else if (c == '\r') e[k++] = '\\', e[k++] = 'r';
        else if (c == '\t') e[k++] = '\\', e[k++] = 't';
        else if (c >= 0x20 && c < 0x7F) e[k++] = (char)c;
        else e[k++] = '\\', e[k++] = 'x', e[k++] = hex[c >> 4], e[k++] = hex[c & 15];
        /* the last piece may use the room the "..." would take only if nothing follows it */
        const size_t room = (i + 1 == n) ? cap - 1 : cap - 4;
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
