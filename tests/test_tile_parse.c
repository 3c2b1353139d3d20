/* Tile language front end: print -> parse round trips, one test per lexer/parser diagnostic
 * (exact text and position), and malformed input that must give a diagnostic, never a crash
 * (also run under ASan/UBSan). */
#include "test_tile_common.h"
#include "tile/tile_internal.h"
#include "ts_prng.h"

#include <stdio.h>

static ts__tile_node *parse_text(ts__tile_arena *a, ts__tile_diag *d, const char *src, size_t n) {
    memset(d, 0, sizeof *d);
    d->file = "t.tile";
    d->src = src;
    d->src_len = n;
    return ts__tile_parse(a, d);
}

/* parse -> print -> parse gives an equal tree, and printing is a fixed point */
static void check_round_trip(ts_test_ctx *ts_t_, const char *src) {
    ts__tile_arena a = {0};
    ts__tile_diag d1, d2;
    ts__tile_node *m1 = parse_text(&a, &d1, src, strlen(src));
    TS_CHECK_MSG(m1 != NULL, "parse failed: %s", d1.out.data ? d1.out.data : "");
    if (m1) {
        ts__tile_buf p1 = {0}, p2 = {0};
        ts__tile_print(&p1, m1);
        ts__tile_node *m2 = parse_text(&a, &d2, p1.data, p1.len);
        TS_CHECK_MSG(m2 != NULL, "re-parse failed: %s\n%s", d2.out.data ? d2.out.data : "", p1.data);
        if (m2) {
            TS_CHECK(ts__tile_equal(m1, m2));
            ts__tile_print(&p2, m2);
            TS_CHECK(p2.data && !strcmp(p1.data, p2.data));
        }
        ts__tile_buf_free(&p1);
        ts__tile_buf_free(&p2);
        ts__tile_buf_free(&d2.out);
    }
    ts__tile_buf_free(&d1.out);
    ts__tile_arena_free(&a);
}

TS_TEST(tile_parse_round_trip_kitchen_sink) { check_round_trip(ts_t_, tt_kitchen_sink); }

TS_TEST(tile_parse_round_trip_expressions) {
    /* precedence, associativity, unary chains, literals that need care when printed */
    check_round_trip(ts_t_,
                     "const A = 1 - (2 - 3) - 4 * (5 + 6) / 7 % 8 << 1 >> 2;\n"
                     "const B = -(-1) + ~(~2) + - -3;\n"
                     "const C = 0.1 + 1e-30 * 3.0e20 - 123456789.125;\n"
                     "const D = 1 < 2 == 3 >= 4 != (5 <= 6) && !(7 > 8) || false & true ^ true | false;\n"
                     "const E = 0x7FFFFFFFFFFFFFFF;\n"
                     "const F = ceildiv(max(1, 2), min(3, -4)) + inf<f32> + maxval<e4m3>() ;\n");
}

TS_TEST(tile_parse_round_trip_statements) {
    check_round_trip(ts_t_, TT_KERNEL("        tile t: f32[4, 8];\n"
                                      "        if s > 0.0 { fill(t, s); } else if s < 0.0 { clear(t); } else { }\n"
                                      "        { let a = b; { var c: i8 = cast<i8>(a); } }\n"
                                      "        check(true, \"quote \\\" backslash \\\\ newline \\n\");\n"));
}

TS_TEST(tile_parse_float_literals_exact) {
    /* the printer uses the shortest decimal that reads back to the same double */
    ts__tile_arena a = {0};
    ts__tile_diag d;
    const char *src = "const A = 0.30000000000000004;\nconst B = 5e-324;\nconst C = 1.7976931348623157e308;\n";
    ts__tile_node *m = parse_text(&a, &d, src, strlen(src));
    TS_CHECK(m != NULL);
    if (m) {
        ts__tile_buf p = {0};
        ts__tile_print(&p, m);
        TS_CHECK_MSG(p.data && strstr(p.data, "0.30000000000000004") && strstr(p.data, "5e-324") &&
                         strstr(p.data, "1.7976931348623157e+308"),
                     "%s", p.data ? p.data : "");
        ts__tile_buf_free(&p);
    }
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&a);
}

/* ---- one test per diagnostic of the lexer and parser ---- */

static void expect_diag(ts_test_ctx *ts_t_, const char *src, size_t n, const char *want) {
    char *out = NULL, *diag = NULL;
    ts_status st = ts_tile_translate(src, n, "t.tile", TS_TILE_EMIT_AST, NULL, &out, &diag);
    TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(out == NULL);
    size_t k = diag ? strcspn(diag, "\n") : 0;
    TS_CHECK_MSG(diag && strlen(want) == k && !strncmp(diag, want, k), "got  '%.*s'\nwant '%s'", (int)k,
                 diag ? diag : "", want);
    free(out);
    free(diag);
}
#define EXPECT_DIAG(src, want) expect_diag(ts_t_, (src), sizeof(src) - 1, (want))

TS_TEST(tile_diag_unexpected_character) {
    EXPECT_DIAG("kernel k() { @ }", "t.tile:1:14: error: unexpected character '@'");
}
TS_TEST(tile_diag_invalid_utf8_byte) {
    EXPECT_DIAG("const A = 1;\nkernel k\xC3\x28() {}",
                "t.tile:2:9: error: invalid byte 0xC3 (only ASCII is allowed outside comments)");
}
TS_TEST(tile_diag_utf8_in_comment_is_fine) {
    char *out = NULL, *diag = NULL;
    const char src[] = "// caf\xC3\xA9 \xFF\xFE\nconst A = 1; /* \xE2\x82\xAC */\n";
    TS_CHECK_STATUS(ts_tile_translate(src, sizeof src - 1, "t.tile", TS_TILE_EMIT_AST, NULL, &out, &diag), TS_OK);
    free(out);
    free(diag);
}
TS_TEST(tile_diag_control_character) {
    EXPECT_DIAG("const A = 1;\x01", "t.tile:1:13: error: invalid control character 0x01");
}
TS_TEST(tile_diag_nul_byte) {
    EXPECT_DIAG("const A =\0 1;", "t.tile:1:10: error: invalid control character 0x00");
}
TS_TEST(tile_diag_unterminated_comment) {
    EXPECT_DIAG("const A = 1;\n  /* never closed\n\n", "t.tile:2:3: error: unterminated comment");
}
TS_TEST(tile_diag_unterminated_string) {
    EXPECT_DIAG("kernel k() { check(true, \"abc\n\"); }", "t.tile:1:26: error: unterminated string literal");
}
TS_TEST(tile_diag_bad_byte_in_string) {
    EXPECT_DIAG("kernel k() { check(true, \"ab\xC3\xA9\"); }",
                "t.tile:1:29: error: invalid byte 0xC3 in string literal (printable ASCII only)");
}
TS_TEST(tile_diag_bad_escape) {
    EXPECT_DIAG("kernel k() { check(true, \"a\\t\"); }",
                "t.tile:1:29: error: unknown escape in string literal (only \\\" \\\\ \\n)");
}
TS_TEST(tile_diag_integer_too_large) {
    EXPECT_DIAG("const A = 9223372036854775808;",
                "t.tile:1:11: error: integer literal too large (limit 9223372036854775807)");
    EXPECT_DIAG("const A = 0x10000000000000000;",
                "t.tile:1:11: error: integer literal too large (limit 9223372036854775807)");
}
TS_TEST(tile_diag_float_out_of_range) {
    EXPECT_DIAG("const A = 1e999;", "t.tile:1:11: error: floating literal out of range");
}
TS_TEST(tile_diag_bad_number_suffix) {
    EXPECT_DIAG("const A = 12abc;", "t.tile:1:13: error: invalid character 'a' in number");
}
TS_TEST(tile_diag_empty_hex) {
    EXPECT_DIAG("const A = 0x;", "t.tile:1:11: error: expected hex digits after '0x', found '0x'");
}
TS_TEST(tile_diag_identifier_too_long) {
    char src[400];
    strcpy(src, "const ");
    memset(src + 6, 'a', 300);
    strcpy(src + 306, " = 1;");
    expect_diag(ts_t_, src, strlen(src), "t.tile:1:7: error: identifier too long (300 characters, limit 255)");
}
TS_TEST(tile_diag_expected_token) {
    EXPECT_DIAG("kernel k( {", "t.tile:1:11: error: expected a parameter name, found '{'");
    EXPECT_DIAG("const A = 1", "t.tile:1:12: error: expected ';', found end of file");
}
TS_TEST(tile_diag_keyword_as_name) {
    EXPECT_DIAG("const for = 1;",
                "t.tile:1:7: error: expected a constant name (keyword 'for' cannot be used as a name), found 'for'");
}
TS_TEST(tile_diag_unknown_dtype) {
    EXPECT_DIAG("kernel k(x: f33) {}", "t.tile:1:13: error: unknown dtype 'f33'");
}
TS_TEST(tile_diag_top_level_item) {
    EXPECT_DIAG("let a = 1;", "t.tile:1:1: error: expected 'kernel', 'macro', 'const' or 'instance', found 'let'");
}
TS_TEST(tile_diag_bad_assignment_target) {
    EXPECT_DIAG("kernel k() { launch (1) as (b) { 1 = 2; } }",
                "t.tile:1:36: error: left side of '=' must be a variable or an element");
}
TS_TEST(tile_diag_expression_statement) {
    EXPECT_DIAG("kernel k() { launch (1) as (b) { b; } }",
                "t.tile:1:35: error: expected '=' or a call statement, found ';'");
}
TS_TEST(tile_diag_missing_close_brace) {
    EXPECT_DIAG("kernel k() {\n  launch (1) as (b) {\n", "t.tile:3:1: error: expected '}', found end of file");
}
TS_TEST(tile_diag_positional_after_named) {
    EXPECT_DIAG("const A = max(a=1, 2);",
                "t.tile:1:20: error: expected a named argument (positional arguments come first), found '2'");
}
TS_TEST(tile_diag_missing_as) {
    EXPECT_DIAG("kernel k() { launch (1) (b) {} }", "t.tile:1:25: error: expected 'as', found '('");
}
TS_TEST(tile_diag_loop_form) {
    EXPECT_DIAG("kernel k() { launch (1) as (b) { for i in 4 {} } }",
                "t.tile:1:43: error: expected a loop form (parallel, serial, unroll, pipelined), found '4'");
}
TS_TEST(tile_diag_template_argument) {
    EXPECT_DIAG("const A = cast<4>(1);",
                "t.tile:1:16: error: expected a dtype or reduction name inside '<...>', found '4'");
}
TS_TEST(tile_diag_nesting_too_deep) {
    char src[1200];
    size_t n = 0;
    n += (size_t)sprintf(src, "const A = ");
    for (int i = 0; i < 300; i++) src[n++] = '(';
    src[n++] = '1';
    for (int i = 0; i < 300; i++) src[n++] = ')';
    src[n++] = ';';
    src[n] = 0;
    /* every parenthesis costs two levels (binary, unary): the 101st cannot be entered */
    expect_diag(ts_t_, src, n, "t.tile:1:111: error: nesting too deep (limit 200)");
}
TS_TEST(tile_diag_deep_blocks) {
    /* 100k nested blocks: a clean stop, not a stack overflow */
    size_t n = 100000;
    char *src = malloc(2 * n + 64);
    TS_CHECK(src != NULL);
    if (!src) return;
    size_t k = (size_t)sprintf(src, "kernel k() { launch (1) as (b) ");
    for (size_t i = 0; i < n; i++) src[k++] = '{';
    for (size_t i = 0; i < n; i++) src[k++] = '}';
    src[k++] = '}';
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(ts_tile_translate(src, k, "t.tile", TS_TILE_EMIT_C, NULL, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(diag && strstr(diag, "error: nesting too deep (limit 200)"));
    free(out);
    free(diag);
    free(src);
}
TS_TEST(tile_diag_source_too_large) {
    size_t n = (size_t)TS__TILE_MAX_SOURCE + 1;
    char *src = malloc(n);
    TS_CHECK(src != NULL);
    if (!src) return;
    memset(src, ' ', n);
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(ts_tile_translate(src, n, "t.tile", TS_TILE_EMIT_AST, NULL, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    const char *want = "t.tile:1:1: error: source too large (4194305 bytes, limit 4194304)\n";
    TS_CHECK(diag && !strncmp(diag, want, strlen(want)));
    free(out);
    free(diag);
    free(src);
}

TS_TEST(tile_diag_caret_line) {
    /* the message is followed by the source line and a caret under the column */
    char *out = NULL, *diag = NULL;
    const char *src = "const A = 1;\nconst B = 2 $ 3;\n";
    TS_CHECK_STATUS(tt_translate(src, TS_TILE_EMIT_AST, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(diag && !strcmp(diag, "t.tile:2:13: error: unexpected character '$'\n"
                                       "  const B = 2 $ 3;\n"
                                       "              ^\n"),
                 "%s", diag ? diag : "(null)");
    free(out);
    free(diag);
}

TS_TEST(tile_api_argument_errors) {
    char *out = (char *)1, *diag = NULL;
    TS_CHECK_STATUS(ts_tile_translate("x", 1, NULL, TS_TILE_EMIT_AST, NULL, NULL, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_tile_translate(NULL, 3, NULL, TS_TILE_EMIT_AST, NULL, &out, &diag), TS_ERR_NULL_POINTER);
    TS_CHECK(out == NULL);
    TS_CHECK_STATUS(ts_tile_translate("", 0, NULL, (ts_tile_emit)7, NULL, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_tile_translate("", 0, NULL, TS_TILE_EMIT_C, "9bad", &out, &diag), TS_ERR_INVALID_ARGUMENT);
    /* an empty module is valid and translates to a C file with no kernels */
    TS_CHECK_STATUS(ts_tile_translate(NULL, 0, NULL, TS_TILE_EMIT_C, "my_", &out, &diag), TS_OK);
    TS_CHECK(out && strstr(out, "#include \"tile/tile_rt.h\""));
    TS_CHECK(diag && diag[0] == 0);
    ts_tile_free(out);
    ts_tile_free(diag);
}

/* ---- malformed input: every prefix and many mutations of a valid program ---- */

static void expect_clean(ts_test_ctx *ts_t_, const char *src, size_t n, const char *what) {
    for (int w = 0; w < 3; w++) {
        char *out = NULL, *diag = NULL;
        ts_status st = ts_tile_translate(src, n, "t.tile", (ts_tile_emit)w, NULL, &out, &diag);
        bool ok = (st == TS_OK && out) || (st == TS_ERR_INVALID_ARGUMENT && !out && diag && strstr(diag, ": error: "));
        TS_CHECK_MSG(ok, "%s (len %zu, emit %d): status %d", what, n, w, (int)st);
        free(out);
        free(diag);
    }
}

TS_TEST(tile_robust_truncated_files) {
    size_t n = strlen(tt_kitchen_sink);
    for (size_t k = 0; k <= n && !TS_FAILED(); k += 7) expect_clean(ts_t_, tt_kitchen_sink, k, "prefix");
}

TS_TEST(tile_robust_mutations) {
    size_t n = strlen(tt_kitchen_sink);
    char *buf = malloc(n + 1);
    TS_CHECK(buf != NULL);
    if (!buf) return;
    ts_prng r = ts_prng_seed(0x711e);
    static const char pool[] = "(){}[]<>,;:=+-*/%&|^~!.0123456789eE_xaz \"\n\x80\xff";
    for (int it = 0; it < 400 && !TS_FAILED(); it++) {
        memcpy(buf, tt_kitchen_sink, n + 1);
        int edits = 1 + (int)(ts_prng_u32(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = ts_prng_u32(&r) % n;
            buf[at] = pool[ts_prng_u32(&r) % (sizeof pool - 1)];
        }
        expect_clean(ts_t_, buf, n, "mutation");
    }
    free(buf);
}

TS_TEST(tile_robust_huge_numbers_and_shapes) {
    const char *srcs[] = {
        "const A = 9223372036854775807 * 2;\nkernel k() { launch (A) as (b) { tile t: f32[A]; } }",
        "kernel k() { launch (1) as (b) { tile t: f32[65536, 65536]; } }",
        "kernel k() { launch (1) as (b) { tile t: f32[-1]; } }",
        "const A = 1 << 70;\nkernel k() { launch (1) as (b) { tile t: f32[A]; } }",
        "kernel k() { launch (1) as (b) { tile t: f32[4]; t[4] = 1.0; } }",
        "kernel k(x: tensor<f32, [1, 2, 3, 4, 5]>) { launch (1) as (b) { } }",
        "macro m(a) { m(a); }\nkernel k() { launch (1) as (b) { m(1); } }",
    };
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
        char *out = NULL, *diag = NULL;
        ts_status st = tt_translate(srcs[i], TS_TILE_EMIT_C, &out, &diag);
        TS_CHECK_MSG(st == TS_ERR_INVALID_ARGUMENT && diag && strstr(diag, ": error: "), "case %zu: status %d", i, (int)st);
        free(out);
        free(diag);
    }
}

TS_TEST(tile_diag_expression_too_complex) {
    /* 100k-term sums would make a 100k-deep tree: refused before any recursive walk */
    size_t terms = 100000;
    char *src = malloc(4 * terms + 64);
    TS_CHECK(src != NULL);
    if (!src) return;
    size_t k = (size_t)sprintf(src, "const A = 1");
    for (size_t i = 1; i < terms; i++) k += (size_t)sprintf(src + k, " + 1");
    k += (size_t)sprintf(src + k, ";");
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(ts_tile_translate(src, k, "t.tile", TS_TILE_EMIT_C, NULL, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    /* the 600th '+' (column 13 + 4 * 599) is the first that does not fit */
    const char *want = "t.tile:1:2409: error: expression too complex (more than 600 nested operations)\n";
    TS_CHECK_MSG(diag && !strncmp(diag, want, strlen(want)),
                 "%s", diag ? diag : "");
    free(out);
    free(diag);
    free(src);
}

TS_TEST(tile_robust_token_soup) {
    /* random sequences of the language's own tokens reach deeper into parser and checker
     * than random bytes do */
    static const char *const vocab[] = {
        "kernel", "k", "(", ")", "{", "}", "[", "]", "<", ">", ",", ";", ":", "=", "+", "-", "*",
        "/", "%", "launch", "as", "for", "in", "parallel", "serial", "if", "else", "while", "let",
        "var", "tile", "t", "x", "b", "i", "f32", "bf16", "e4m3", "i32", "tensor", "1", "4", "0.5",
        "copy", "reduce", "sum", "fill", "cast", "exp", "max", "macro", "m", "const", "N", "&&",
        "==", "!", "true", "\"s\"", "check", "gemm", "axis", "accumulate", "break", ":",
        "kernel k(x: tensor<f32, [N, 4]>) { launch (N) as (b) {", "tile t: f32[4, 4];",
        "for i in parallel(4) {", "copy(x[b, 0], t);", "} }",
    };
    const int nv = (int)(sizeof vocab / sizeof vocab[0]);
    ts_prng r = ts_prng_seed(0x50c9);
    char *buf = malloc(1 << 16);
    TS_CHECK(buf != NULL);
    if (!buf) return;
    for (int it = 0; it < 300 && !TS_FAILED(); it++) {
        size_t n = 0;
        int ntok = 20 + (int)(ts_prng_u32(&r) % 300);
        for (int k = 0; k < ntok; k++) {
            const char *t = vocab[ts_prng_u32(&r) % (uint32_t)nv];
            size_t l = strlen(t);
            memcpy(buf + n, t, l);
            n += l;
            buf[n++] = (ts_prng_u32(&r) & 7) ? ' ' : '\n';
        }
        expect_clean(ts_t_, buf, n, "token soup");
    }
    free(buf);
}
