/* ts__text_escape (src/core/text_escape.c): bytes from files reach messages as printable ASCII
 * only, capped in length. */
#include "ts_test.h"

#include "core/text_escape.h"

TS_TEST(text_escape_controls_quotes_and_cap) {
    char b[TS__ESC_CAP];
    TS_CHECK(!strcmp(ts__text_escape_str("0.attn.wq_a", b, sizeof b), "0.attn.wq_a"));
    TS_CHECK(!strcmp(ts__text_escape_str("a\"b\\c", b, sizeof b), "a\\\"b\\\\c"));
    TS_CHECK(!strcmp(ts__text_escape_str("x\ny\rz\t", b, sizeof b), "x\\ny\\rz\\t"));
    TS_CHECK(!strcmp(ts__text_escape_str("\x1b[31m\x7f\x01", b, sizeof b), "\\x1b[31m\\x7f\\x01"));
    TS_CHECK(!strcmp(ts__text_escape_str("caf\xc3\xa9", b, sizeof b), "caf\\xc3\\xa9"));
    TS_CHECK(!strcmp(ts__text_escape("a\0b", 3, b, sizeof b), "a\\x00b"));
    TS_CHECK(!strcmp(ts__text_escape_str(NULL, b, sizeof b), "(null)"));
    TS_CHECK(!strcmp(ts__text_escape("", 0, b, sizeof b), ""));
    /* the cap: cut at an escape boundary, "..." appended, always terminated */
    char s8[8];
    TS_CHECK(!strcmp(ts__text_escape_str("abcdefg", s8, sizeof s8), "abcdefg")); /* fits exactly */
    TS_CHECK(!strcmp(ts__text_escape_str("abcdefgh", s8, sizeof s8), "abcd..."));
    TS_CHECK(!strcmp(ts__text_escape_str("abc\x01zzzz", s8, sizeof s8), "abc..."));
    TS_CHECK(!strcmp(ts__text_escape_str("\x01\x02", s8, sizeof s8), "\\x01..."));
    char s4[4];
    TS_CHECK(!strcmp(ts__text_escape_str("abc", s4, sizeof s4), "abc"));
    TS_CHECK(!strcmp(ts__text_escape_str("abcd", s4, sizeof s4), "..."));
    /* a long hostile name: bounded output, no raw byte >= 0x7f or < 0x20 */
    static char big[4096];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)(1 + i % 255);
    ts__text_escape_str(big, b, sizeof b);
    TS_CHECK(strlen(b) < sizeof b && !strcmp(b + strlen(b) - 3, "..."));
    for (const unsigned char *q = (const unsigned char *)b; *q; q++) TS_CHECK(*q >= 0x20 && *q < 0x7f);
}
