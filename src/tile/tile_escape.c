/* The one way user text (check messages, kernel and file names, paths) enters generated C.
 *
 * Generated C is compiled with -std=c11, where trigraphs are on: `??/` is a backslash and a
 * check message "??/\"); system(...); //" once closed its string literal and ran code. So
 * nothing user-controlled is copied through as is except the printable ASCII that cannot
 * start an escape, a trigraph, a line splice or the end of a literal or a comment:
 *   "  \  ?   always escaped (\" \\ \?), so no `??x` trigraph can form;
 *   newline   \n;
 *   other bytes outside 0x20..0x7E (control bytes, non-ASCII)   three-digit octal, which
 *             never runs into the next character the way a hex escape would;
 *   %         %% in TS__ESC_FORMAT (the text is a printf format);
 *   *         \052 in TS__ESC_COMMENT, so the text can never close a comment.
 * The output never holds a raw newline, so no line splice either. */
#include "tile/tile_internal.h"

void ts__tile_buf_escape(ts__tile_buf *b, const char *s, ts__tile_esc mode) {
    char tmp[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const unsigned c = *p;
        const char *rep = NULL;
        if (c == '"') rep = "\\\"";
        else if (c == '\\') rep = "\\\\";
        else if (c == '?') rep = "\\?";
        else if (c == '\n') rep = "\\n";
        else if (c == '%' && mode == TS__ESC_FORMAT) rep = "%%";
        else if ((c == '*' && mode == TS__ESC_COMMENT) || c < 0x20 || c > 0x7E) {
            tmp[0] = '\\';
            tmp[1] = (char)('0' + ((c >> 6) & 7));
            tmp[2] = (char)('0' + ((c >> 3) & 7));
            tmp[3] = (char)('0' + (c & 7));
            tmp[4] = 0;
            rep = tmp;
        } else {
            tmp[0] = (char)c;
            tmp[1] = 0;
            rep = tmp;
        }
        ts__tile_buf_puts(b, rep);
    }
}
