/* tilec front end: lexer and recursive-descent parser (grammar in docs/tile-language.md).
 * The whole file is tokenised first (bounded by the source size cap), then parsed with an
 * explicit depth counter; the first syntax error stops parsing cleanly. */
#include "tile/tile_internal.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { K_EOF, K_IDENT, K_KW, K_INT, K_FLOAT, K_STRING, K_PUNCT };

typedef struct tok {
    int kind;
    ts__tile_loc loc;
    int32_t off, len;
    char p[4]; /* punctuation spelling */
} tok;

static const char *const k_keywords[] = {
    "kernel", "const", "macro", "launch", "as", "for", "in", "if", "else", "while", "let",
    "var", "tile", "shared", "local", "true", "false", "break", "continue", "tensor", NULL};

static bool is_keyword(const char *s, size_t n) {
    for (int i = 0; k_keywords[i]; i++)
        if (strlen(k_keywords[i]) == n && !memcmp(k_keywords[i], s, n)) return true;
    return false;
}

typedef struct parser {
    ts__tile_arena *a;
    ts__tile_diag *d;
    const char *src;
    tok *t;
    int32_t nt, pos;
    int depth;
    bool failed;
    ts__tile_node **tparams; /* template parameters of the kernel being parsed (TN_TPARAM) */
    int32_t ntparams;
} parser;

/* ---------------- lexer ---------------- */

static bool lex(parser *P) {
    const char *s = P->src;
    size_t n = P->d->src_len, i = 0;
    int32_t line = 1, col = 1;
    size_t cap = 1024;
    P->t = malloc(cap * sizeof(tok));
    if (!P->t) return false;
    P->nt = 0;
#define ADV() (s[i] == '\n' ? (line++, col = 1) : col++, i++)
    for (;;) {
        while (i < n) {
            char c = s[i];
            if (c == ' ' || c == '\t' || c == '\r' || c == '\n') ADV();
            else if (c == '/' && i + 1 < n && s[i + 1] == '/') {
                while (i < n && s[i] != '\n') ADV();
            } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
                ts__tile_loc at = {line, col};
                ADV(), ADV();
                while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) ADV();
                if (i + 1 >= n) {
                    ts__tile_error(P->d, at, "unterminated comment");
                    return false;
                }
                ADV(), ADV();
            } else break;
        }
        if ((size_t)P->nt + 1 >= cap) {
            cap *= 2;
            tok *nt = realloc(P->t, cap * sizeof(tok));
            if (!nt) {
                ts__tile_error(P->d, (ts__tile_loc){line, col}, "out of memory");
                return false;
            }
            P->t = nt;
        }
        tok *t = &P->t[P->nt];
        memset(t, 0, sizeof *t);
        t->loc = (ts__tile_loc){line, col};
        t->off = (int32_t)i;
        if (i >= n) {
            t->kind = K_EOF;
            P->nt++;
            return true;
        }
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                             (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
                ADV();
            t->len = (int32_t)(i - (size_t)t->off);
            if (t->len > 255) {
                ts__tile_error(P->d, t->loc, "identifier too long (%d characters, limit 255)",
                               (int)t->len);
                return false;
            }
            t->kind = is_keyword(s + t->off, (size_t)t->len) ? K_KW : K_IDENT;
        } else if (c >= '0' && c <= '9') {
            bool flt = false;
            if (c == '0' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
                ADV(), ADV();
                while (i < n && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
                                 (s[i] >= 'A' && s[i] <= 'F')))
                    ADV();
            } else {
                while (i < n && s[i] >= '0' && s[i] <= '9') ADV();
                if (i < n && s[i] == '.' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9') {
                    flt = true;
                    ADV();
                    while (i < n && s[i] >= '0' && s[i] <= '9') ADV();
                }
                if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                    size_t j = i + 1;
                    if (j < n && (s[j] == '+' || s[j] == '-')) j++;
                    if (j < n && s[j] >= '0' && s[j] <= '9') {
                        flt = true;
                        while (i < j) ADV();
                        while (i < n && s[i] >= '0' && s[i] <= '9') ADV();
                    }
                }
            }
            if (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                          s[i] == '_' || s[i] == '.')) {
                ts__tile_error(P->d, (ts__tile_loc){line, col},
                               "invalid character '%c' in number", s[i]);
                return false;
            }
            t->len = (int32_t)(i - (size_t)t->off);
            t->kind = flt ? K_FLOAT : K_INT;
        } else if (c == '"') {
            ADV();
            while (i < n && s[i] != '"') {
                unsigned char q = (unsigned char)s[i];
                if (q == '\n' || q < 0x20 || q >= 0x7f) {
                    if (q == '\n')
                        ts__tile_error(P->d, t->loc, "unterminated string literal");
                    else
                        ts__tile_error(P->d, (ts__tile_loc){line, col},
                                       "invalid byte 0x%02X in string literal (printable ASCII only)",
                                       q);
                    return false;
                }
                if (q == '\\') {
                    ADV();
                    if (i >= n || (s[i] != '"' && s[i] != '\\' && s[i] != 'n')) {
                        ts__tile_error(P->d, (ts__tile_loc){line, col},
                                       "unknown escape in string literal (only \\\" \\\\ \\n)");
                        return false;
                    }
                }
                ADV();
            }
            if (i >= n) {
                ts__tile_error(P->d, t->loc, "unterminated string literal");
                return false;
            }
            ADV();
            t->len = (int32_t)(i - (size_t)t->off);
            t->kind = K_STRING;
        } else {
            static const char *const two[] = {"==", "!=", "<=", ">=", "<<", ">>", "&&", "||",
                                              "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
                                              NULL};
            static const char one[] = "()[]{}<>,;:=+-*/%&|^~!";
            t->kind = K_PUNCT;
            if (i + 1 < n) {
                for (int k = 0; two[k]; k++)
                    if (s[i] == two[k][0] && s[i + 1] == two[k][1]) {
                        /* `a<<b` vs `cast<f32>` never clash: templates close with a single '>'
                         * and shifts never follow a template name. */
                        memcpy(t->p, two[k], 2);
                        break;
                    }
            }
            if (t->p[0]) {
                ADV(), ADV();
            } else if (c && strchr(one, c)) {
                t->p[0] = (char)c;
                ADV();
            } else {
                if (c >= 0x80)
                    ts__tile_error(P->d, t->loc,
                                   "invalid byte 0x%02X (only ASCII is allowed outside comments)", c);
                else if (c < 0x20 || c == 0x7f)
                    ts__tile_error(P->d, t->loc, "invalid control character 0x%02X", c);
                else
                    ts__tile_error(P->d, t->loc, "unexpected character '%c'", c);
                return false;
            }
            t->len = (int32_t)strlen(t->p);
        }
        P->nt++;
    }
#undef ADV
}

/* ---------------- parser helpers ---------------- */

static tok *cur(parser *P) { return &P->t[P->pos]; }
static tok *peek(parser *P, int k) {
    int32_t p = P->pos + k;
    return &P->t[p < P->nt ? p : P->nt - 1];
}
static bool is_p(tok *t, const char *p) { return t->kind == K_PUNCT && !strcmp(t->p, p); }
static bool is_kw(parser *P, tok *t, const char *k) {
    return t->kind == K_KW && (size_t)t->len == strlen(k) && !memcmp(P->src + t->off, k, (size_t)t->len);
}
static bool is_ident(parser *P, tok *t, const char *k) {
    return t->kind == K_IDENT && (size_t)t->len == strlen(k) && !memcmp(P->src + t->off, k, (size_t)t->len);
}

static void describe(parser *P, tok *t, char *out, size_t n) {
    switch (t->kind) {
    case K_EOF: snprintf(out, n, "end of file"); break;
    case K_PUNCT: snprintf(out, n, "'%s'", t->p); break;
    case K_STRING: snprintf(out, n, "string literal"); break;
    default: snprintf(out, n, "'%.*s'", t->len > 40 ? 40 : (int)t->len, P->src + t->off);
    }
}

static void fail_at(parser *P, tok *t, const char *what) {
    if (P->failed) return;
    char got[64];
    describe(P, t, got, sizeof got);
    ts__tile_error(P->d, t->loc, "expected %s, found %s", what, got);
    P->failed = true;
}

static bool expect(parser *P, const char *p) {
    if (P->failed) return false;
    if (is_p(cur(P), p)) {
        P->pos++;
        return true;
    }
    char what[16];
    snprintf(what, sizeof what, "'%s'", p);
    fail_at(P, cur(P), what);
    return false;
}

static bool accept(parser *P, const char *p) {
    if (!P->failed && is_p(cur(P), p)) {
        P->pos++;
        return true;
    }
    return false;
}

static ts__tile_node *mk(parser *P, int kind, ts__tile_loc loc) {
    ts__tile_node *n = ts__tile_node_new(P->a, kind, loc);
    if (!n && !P->failed) {
        ts__tile_error(P->d, loc, "program too large (compiler memory limit reached)");
        P->failed = true;
    }
    return n;
}

static const char *ident(parser *P, const char *what) {
    tok *t = cur(P);
    if (P->failed) return NULL;
    if (t->kind != K_IDENT) {
        if (t->kind == K_KW) {
            char m[96];
            snprintf(m, sizeof m, "%s (keyword '%.*s' cannot be used as a name)", what,
                     (int)t->len, P->src + t->off);
            fail_at(P, t, m);
        } else fail_at(P, t, what);
        return NULL;
    }
    P->pos++;
    const char *s = ts__tile_strdup(P->a, P->src + t->off, (size_t)t->len);
    if (!s) {
        ts__tile_error(P->d, t->loc, "program too large (compiler memory limit reached)");
        P->failed = true;
    }
    return s;
}

/* Growable node lists live in malloc'd scratch while parsing, then move into the arena. */
typedef struct nlist {
    ts__tile_node **v;
    int32_t n, cap;
} nlist;
static bool push(parser *P, nlist *l, ts__tile_node *x) {
    if (!x) return false;
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 8;
        ts__tile_node **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            ts__tile_error(P->d, cur(P)->loc, "out of memory");
            P->failed = true;
            return false;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}
static ts__tile_node **finish(parser *P, nlist *l, int32_t *count) {
    *count = l->n;
    ts__tile_node **out = NULL;
    if (l->n) {
        out = ts__tile_alloc(P->a, (size_t)l->n * sizeof *out);
        if (out) memcpy(out, l->v, (size_t)l->n * sizeof *out);
        else if (!P->failed) {
            ts__tile_error(P->d, cur(P)->loc, "program too large (compiler memory limit reached)");
            P->failed = true;
        }
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
    return out;
}

static bool enter(parser *P) {
    if (++P->depth > TS__TILE_MAX_DEPTH) {
        if (!P->failed)
            ts__tile_error(P->d, cur(P)->loc, "nesting too deep (limit %d)", TS__TILE_MAX_DEPTH);
        P->failed = true;
        return false;
    }
    return true;
}
static void leave(parser *P) { P->depth--; }

/* ---------------- expressions ---------------- */

static ts__tile_node *parse_expr(parser *P);

static bool takes_template(const char *name) {
    return !strcmp(name, "cast") || !strcmp(name, "bitcast") || !strcmp(name, "reduce") ||
           !strcmp(name, "inf") || !strcmp(name, "maxval") || !strcmp(name, "minval");
}
static bool template_optional_parens(const char *name) {
    return !strcmp(name, "inf") || !strcmp(name, "maxval") || !strcmp(name, "minval");
}

static ts__tile_node *parse_call_rest(parser *P, ts__tile_node *call) {
    nlist args = {0}, kw = {0};
    if (!expect(P, "(")) return NULL;
    if (!is_p(cur(P), ")")) {
        for (;;) {
            if (P->failed) break;
            tok *t = cur(P);
            if (t->kind == K_IDENT && is_p(peek(P, 1), "=")) {
                ts__tile_node *k = mk(P, TN_KWARG, t->loc);
                if (!k) break;
                k->name = ident(P, "argument name");
                P->pos++; /* '=' */
                k->a = parse_expr(P);
                if (!k->a) break;
                push(P, &kw, k);
            } else {
                if (kw.n) {
                    fail_at(P, t, "a named argument (positional arguments come first)");
                    break;
                }
                if (!push(P, &args, parse_expr(P))) break;
            }
            if (!accept(P, ",")) break;
        }
    }
    call->list = finish(P, &args, &call->nlist);
    call->list2 = finish(P, &kw, &call->nlist2);
    if (!expect(P, ")")) return NULL;
    return P->failed ? NULL : call;
}

static ts__tile_node *parse_primary(parser *P) {
    tok *t = cur(P);
    if (P->failed) return NULL;
    if (t->kind == K_INT) {
        ts__tile_node *n = mk(P, TN_INT, t->loc);
        if (!n) return NULL;
        const char *s = P->src + t->off;
        uint64_t v = 0;
        bool hex = t->len >= 2 && (s[1] == 'x' || s[1] == 'X');
        if (hex && t->len == 2) {
            fail_at(P, t, "hex digits after '0x'");
            return NULL;
        }
        for (int32_t k = hex ? 2 : 0; k < t->len; k++) {
            char c = s[k];
            uint64_t dg = c <= '9' ? (uint64_t)(c - '0') : (uint64_t)((c | 0x20) - 'a' + 10);
            uint64_t base = hex ? 16 : 10;
            if (v > (UINT64_C(0x7fffffffffffffff) - dg) / base) {
                ts__tile_error(P->d, t->loc,
                               "integer literal too large (limit 9223372036854775807)");
                P->failed = true;
                return NULL;
            }
            v = v * base + dg;
        }
        n->ival = (int64_t)v;
        P->pos++;
        return n;
    }
    if (t->kind == K_FLOAT) {
        ts__tile_node *n = mk(P, TN_FLOAT, t->loc);
        if (!n) return NULL;
        char buf[512];
        if (t->len >= (int32_t)sizeof buf) {
            ts__tile_error(P->d, t->loc, "floating literal too long");
            P->failed = true;
            return NULL;
        }
        memcpy(buf, P->src + t->off, (size_t)t->len);
        buf[t->len] = 0;
        n->fval = strtod(buf, NULL);
        if (isinf(n->fval)) {
            ts__tile_error(P->d, t->loc, "floating literal out of range");
            P->failed = true;
            return NULL;
        }
        P->pos++;
        return n;
    }
    if (t->kind == K_STRING) {
        ts__tile_node *n = mk(P, TN_STRING, t->loc);
        if (!n) return NULL;
        /* Store the unescaped value; the printer escapes again. */
        char *v = ts__tile_alloc(P->a, (size_t)t->len);
        if (!v) {
            mk(P, -1, t->loc); /* reports the limit */
            P->failed = true;
            return NULL;
        }
        size_t k = 0;
        for (int32_t j = 1; j + 1 < t->len; j++) {
            char c = P->src[t->off + j];
            if (c == '\\') {
                c = P->src[t->off + ++j];
                if (c == 'n') c = '\n';
            }
            v[k++] = c;
        }
        n->name = v;
        P->pos++;
        return n;
    }
    if (is_kw(P, t, "true") || is_kw(P, t, "false")) {
        ts__tile_node *n = mk(P, TN_BOOL, t->loc);
        if (n) n->ival = is_kw(P, t, "true");
        P->pos++;
        return n;
    }
    if (is_p(t, "(")) {
        P->pos++;
        ts__tile_node *e = parse_expr(P);
        if (!expect(P, ")")) return NULL;
        return e;
    }
    if (t->kind == K_IDENT) {
        const char *name = ident(P, "a name");
        if (!name) return NULL;
        if (is_p(cur(P), "<") && takes_template(name)) {
            ts__tile_node *call = mk(P, TN_CALL, t->loc);
            if (!call) return NULL;
            call->name = name;
            P->pos++;
            tok *ta = cur(P);
            if (ta->kind != K_IDENT) {
                fail_at(P, ta, "a dtype or reduction name inside '<...>'");
                return NULL;
            }
            call->targ = ident(P, "a template argument");
            call->dt = ts__tile_dt_from_name(call->targ);
            if (!expect(P, ">")) return NULL;
            if (template_optional_parens(name) && !is_p(cur(P), "(")) return call;
            return parse_call_rest(P, call);
        }
        if (is_p(cur(P), "(")) {
            ts__tile_node *call = mk(P, TN_CALL, t->loc);
            if (!call) return NULL;
            call->name = name;
            return parse_call_rest(P, call);
        }
        ts__tile_node *n = mk(P, TN_NAME, t->loc);
        if (!n) return NULL;
        n->name = name;
        if (is_p(cur(P), "[")) {
            tok *lb = cur(P);
            P->pos++;
            ts__tile_node *ix = mk(P, TN_INDEX, lb->loc);
            if (!ix) return NULL;
            ix->a = n;
            nlist l = {0};
            for (;;) {
                ts__tile_node *e = parse_expr(P);
                if (!e) break;
                if (is_p(cur(P), ":")) {
                    ts__tile_node *sl = mk(P, TN_SLICE, cur(P)->loc);
                    P->pos++;
                    if (!sl) break;
                    sl->a = e;
                    sl->b = parse_expr(P);
                    if (!sl->b) break;
                    e = sl;
                }
                if (!push(P, &l, e)) break;
                if (!accept(P, ",")) break;
            }
            ix->list = finish(P, &l, &ix->nlist);
            if (!expect(P, "]")) return NULL;
            return ix;
        }
        return n;
    }
    fail_at(P, t, "an expression");
    return NULL;
}

static ts__tile_node *parse_unary(parser *P) {
    if (!enter(P)) return NULL;
    tok *t = cur(P);
    ts__tile_node *r;
    int op = is_p(t, "-") ? TO_NEG : is_p(t, "!") ? TO_NOT : is_p(t, "~") ? TO_BNOT : 0;
    if (op) {
        P->pos++;
        r = mk(P, TN_UNARY, t->loc);
        if (r) {
            r->op = op;
            r->a = parse_unary(P);
            if (!r->a) r = NULL;
        }
    } else r = parse_primary(P);
    leave(P);
    return r;
}

static int binop_of(tok *t, int *prec) {
    static const struct { const char *p; int op, prec; } k[] = {
        {"||", TO_LOR, 1}, {"&&", TO_LAND, 2}, {"|", TO_BOR, 3}, {"^", TO_BXOR, 4},
        {"&", TO_BAND, 5}, {"==", TO_EQ, 6},   {"!=", TO_NE, 6}, {"<", TO_LT, 7},
        {"<=", TO_LE, 7},  {">", TO_GT, 7},    {">=", TO_GE, 7}, {"<<", TO_SHL, 8},
        {">>", TO_SHR, 8}, {"+", TO_ADD, 9},   {"-", TO_SUB, 9}, {"*", TO_MUL, 10},
        {"/", TO_DIV, 10}, {"%", TO_MOD, 10},
    };
    if (t->kind != K_PUNCT) return 0;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(t->p, k[i].p)) {
            *prec = k[i].prec;
            return k[i].op;
        }
    return 0;
}

/* Precedence climbing; left-associative at every level. */
static ts__tile_node *parse_binary(parser *P, int min_prec) {
    if (!enter(P)) return NULL;
    ts__tile_node *lhs = parse_unary(P);
    int chain = 0;
    while (lhs && !P->failed) {
        int prec = 0, op = binop_of(cur(P), &prec);
        if (!op || prec < min_prec) break;
        tok *t = cur(P);
        /* a left-associative chain deepens the tree without recursing here; bound it so every
         * later tree walk stays shallow */
        if (P->depth + ++chain > 3 * TS__TILE_MAX_DEPTH) {
            ts__tile_error(P->d, t->loc, "expression too complex (more than %d nested operations)",
                           3 * TS__TILE_MAX_DEPTH);
            P->failed = true;
            break;
        }
        P->pos++;
        ts__tile_node *rhs = parse_binary(P, prec + 1);
        if (!rhs) {
            lhs = NULL;
            break;
        }
        ts__tile_node *b = mk(P, TN_BINARY, t->loc);
        if (!b) {
            lhs = NULL;
            break;
        }
        b->op = op;
        b->a = lhs;
        b->b = rhs;
        lhs = b;
    }
    leave(P);
    return P->failed ? NULL : lhs;
}

static ts__tile_node *parse_expr(parser *P) { return parse_binary(P, 1); }

/* ---------------- statements ---------------- */

static ts__tile_node *parse_block(parser *P);

/* A dtype name, or in a template the name of one of its dtype parameters: then TT_NONE with
 * the parameter's name in *tname (substituted at instantiation). */
static int parse_dtype(parser *P, const char **tname) {
    tok *t = cur(P);
    *tname = NULL;
    if (t->kind != K_IDENT) {
        fail_at(P, t, "a dtype");
        return TT_NONE;
    }
    char name[64];
    snprintf(name, sizeof name, "%.*s", t->len > 60 ? 60 : (int)t->len, P->src + t->off);
    int dt = ts__tile_dt_from_name(name);
    for (int32_t i = 0; !dt && i < P->ntparams; i++)
        if (P->tparams[i]->ival == TP_DTYPE && (size_t)t->len == strlen(P->tparams[i]->name) &&
            !memcmp(P->tparams[i]->name, P->src + t->off, (size_t)t->len)) {
            *tname = P->tparams[i]->name;
            P->pos++;
            return TT_NONE;
        }
    if (!dt) {
        ts__tile_error(P->d, t->loc, "unknown dtype '%s'", name);
        P->failed = true;
        return TT_NONE;
    }
    P->pos++;
    return dt;
}

static ts__tile_node **parse_name_list(parser *P, int32_t *count, const char *what) {
    nlist l = {0};
    for (;;) {
        tok *t = cur(P);
        ts__tile_node *n = mk(P, TN_NAME, t->loc);
        if (!n) break;
        n->name = ident(P, what);
        if (!n->name || !push(P, &l, n)) break;
        if (!accept(P, ",")) break;
    }
    return finish(P, &l, count);
}

static ts__tile_node *parse_stmt(parser *P) {
    if (!enter(P)) return NULL;
    tok *t = cur(P);
    ts__tile_node *n = NULL;
    if (is_p(t, "{")) {
        n = parse_block(P);
    } else if (is_kw(P, t, "launch")) {
        P->pos++;
        n = mk(P, TN_LAUNCH, t->loc);
        if (!n || !expect(P, "(")) goto out;
        nlist g = {0};
        for (;;) {
            if (!push(P, &g, parse_expr(P))) break;
            if (!accept(P, ",")) break;
        }
        n->list = finish(P, &g, &n->nlist);
        if (!expect(P, ")")) goto out;
        if (!is_kw(P, cur(P), "as")) {
            fail_at(P, cur(P), "'as'");
            goto out;
        }
        P->pos++;
        if (!expect(P, "(")) goto out;
        n->list2 = parse_name_list(P, &n->nlist2, "a block index name");
        if (!expect(P, ")")) goto out;
        n->a = parse_block(P);
    } else if (is_kw(P, t, "tile") || is_kw(P, t, "shared") || is_kw(P, t, "local")) {
        P->pos++;
        n = mk(P, TN_TILE, t->loc);
        if (!n) goto out;
        n->scope = is_kw(P, t, "tile") ? TS_SCOPE_TILE
                   : is_kw(P, t, "shared") ? TS_SCOPE_SHARED
                                            : TS_SCOPE_LOCAL;
        n->name = ident(P, "a tile name");
        if (!expect(P, ":")) goto out;
        n->dt = parse_dtype(P, &n->targ);
        if (!expect(P, "[")) goto out;
        nlist dl = {0};
        for (;;) {
            if (!push(P, &dl, parse_expr(P))) break;
            if (!accept(P, ",")) break;
        }
        n->list = finish(P, &dl, &n->nlist);
        if (!expect(P, "]")) goto out;
        expect(P, ";");
    } else if (is_kw(P, t, "let")) {
        P->pos++;
        n = mk(P, TN_LET, t->loc);
        if (!n) goto out;
        n->name = ident(P, "a name");
        if (!expect(P, "=")) goto out;
        n->a = parse_expr(P);
        expect(P, ";");
    } else if (is_kw(P, t, "var")) {
        P->pos++;
        n = mk(P, TN_VAR, t->loc);
        if (!n) goto out;
        n->name = ident(P, "a name");
        if (!expect(P, ":")) goto out;
        n->dt = parse_dtype(P, &n->targ);
        if (accept(P, "=")) n->a = parse_expr(P);
        expect(P, ";");
    } else if (is_kw(P, t, "for")) {
        P->pos++;
        n = mk(P, TN_FOR, t->loc);
        if (!n) goto out;
        n->list2 = parse_name_list(P, &n->nlist2, "a loop variable name");
        if (!P->failed && !is_kw(P, cur(P), "in")) {
            fail_at(P, cur(P), "'in'");
            goto out;
        }
        P->pos++;
        tok *it = cur(P);
        if (it->kind != K_IDENT || !is_p(peek(P, 1), "(")) {
            fail_at(P, it, "a loop form (parallel, serial, unroll, pipelined)");
            goto out;
        }
        n->a = mk(P, TN_CALL, it->loc);
        if (!n->a) goto out;
        n->a->name = ident(P, "a loop form");
        if (!parse_call_rest(P, n->a)) goto out;
        n->b = parse_block(P);
    } else if (is_kw(P, t, "if")) {
        P->pos++;
        n = mk(P, TN_IF, t->loc);
        if (!n) goto out;
        n->a = parse_expr(P);
        n->b = parse_block(P);
        if (!P->failed && is_kw(P, cur(P), "else")) {
            P->pos++;
            if (is_kw(P, cur(P), "if")) n->c = parse_stmt(P);
            else n->c = parse_block(P);
        }
    } else if (is_kw(P, t, "while")) {
        P->pos++;
        n = mk(P, TN_WHILE, t->loc);
        if (!n) goto out;
        n->a = parse_expr(P);
        n->b = parse_block(P);
    } else if (is_kw(P, t, "break") || is_kw(P, t, "continue")) {
        P->pos++;
        n = mk(P, is_kw(P, t, "break") ? TN_BREAK : TN_CONTINUE, t->loc);
        expect(P, ";");
    } else {
        ts__tile_node *e = parse_expr(P);
        if (!e) goto out;
        tok *o = cur(P);
        static const struct { const char *p; int op; } asg[] = {
            {"=", TO_SET}, {"+=", TO_ADD}, {"-=", TO_SUB}, {"*=", TO_MUL}, {"/=", TO_DIV},
            {"%=", TO_MOD}, {"&=", TO_BAND}, {"|=", TO_BOR}, {"^=", TO_BXOR}};
        int op = 0;
        for (size_t k = 0; k < sizeof asg / sizeof asg[0]; k++)
            if (is_p(o, asg[k].p)) op = asg[k].op;
        if (op) {
            if (e->kind != TN_NAME && e->kind != TN_INDEX) {
                ts__tile_error(P->d, o->loc,
                               "left side of '%s' must be a variable or an element", o->p);
                P->failed = true;
                goto out;
            }
            P->pos++;
            n = mk(P, TN_ASSIGN, o->loc);
            if (!n) goto out;
            n->op = op;
            n->a = e;
            n->b = parse_expr(P);
        } else {
            if (e->kind != TN_CALL) {
                fail_at(P, o, "'=' or a call statement");
                goto out;
            }
            n = mk(P, TN_CALLSTMT, e->loc);
            if (!n) goto out;
            n->a = e;
        }
        expect(P, ";");
    }
out:
    leave(P);
    return P->failed ? NULL : n;
}

static ts__tile_node *parse_block(parser *P) {
    tok *t = cur(P);
    if (!expect(P, "{")) return NULL;
    ts__tile_node *b = mk(P, TN_BLOCK, t->loc);
    if (!b) return NULL;
    nlist l = {0};
    while (!P->failed && !is_p(cur(P), "}")) {
        if (cur(P)->kind == K_EOF) {
            fail_at(P, cur(P), "'}'");
            break;
        }
        if (!push(P, &l, parse_stmt(P))) break;
    }
    b->list = finish(P, &l, &b->nlist);
    if (!expect(P, "}")) return NULL;
    return b;
}

/* ---------------- module level ---------------- */

static ts__tile_node *parse_dim(parser *P) {
    tok *t = cur(P);
    if (t->kind == K_INT) return parse_primary(P);
    ts__tile_node *n = mk(P, TN_NAME, t->loc);
    if (!n) return NULL;
    n->name = ident(P, "a dimension (integer or name)");
    return n->name ? n : NULL;
}

static ts__tile_node *parse_param(parser *P) {
    tok *t = cur(P);
    ts__tile_node *n = mk(P, TN_PARAM, t->loc);
    if (!n) return NULL;
    n->name = ident(P, "a parameter name");
    if (!expect(P, ":")) return NULL;
    if (is_kw(P, cur(P), "tensor")) {
        P->pos++;
        n->scope = 1;
        if (!expect(P, "<")) return NULL;
        n->dt = parse_dtype(P, &n->targ);
        if (!expect(P, ",") || !expect(P, "[")) return NULL;
        nlist dl = {0};
        for (;;) {
            if (!push(P, &dl, parse_dim(P))) break;
            if (!accept(P, ",")) break;
        }
        n->list = finish(P, &dl, &n->nlist);
        if (!expect(P, "]")) return NULL;
        if (accept(P, ",")) {
            if (!is_ident(P, cur(P), "strides")) {
                fail_at(P, cur(P), "'strides'");
                return NULL;
            }
            P->pos++;
            if (!expect(P, "=") || !expect(P, "[")) return NULL;
            nlist sl = {0};
            for (;;) {
                if (!push(P, &sl, parse_dim(P))) break;
                if (!accept(P, ",")) break;
            }
            n->list2 = finish(P, &sl, &n->nlist2);
            if (!expect(P, "]")) return NULL;
        }
        if (!expect(P, ">")) return NULL;
    } else {
        n->dt = parse_dtype(P, &n->targ);
    }
    /* `x: T if COND`: an optional parameter (templates only; kept when COND holds) */
    if (!P->failed && is_kw(P, cur(P), "if")) {
        if (!P->ntparams) {
            ts__tile_error(P->d, cur(P)->loc, "only parameters of a template can be conditional ('if')");
            P->failed = true;
            return NULL;
        }
        P->pos++;
        n->a = parse_expr(P);
    }
    return P->failed ? NULL : n;
}

/* NAME ":" ( "dtype" | "int" | "bool" ) { "," ... } */
static ts__tile_node **parse_template_params(parser *P, int32_t *count) {
    nlist l = {0};
    for (;;) {
        tok *t = cur(P);
        ts__tile_node *n = mk(P, TN_TPARAM, t->loc);
        if (!n) break;
        n->name = ident(P, "a template parameter name");
        if (!n->name || !expect(P, ":")) break;
        tok *k = cur(P);
        if (is_ident(P, k, "dtype")) n->ival = TP_DTYPE;
        else if (is_ident(P, k, "int")) n->ival = TP_INT;
        else if (is_ident(P, k, "bool")) n->ival = TP_BOOL;
        else {
            fail_at(P, k, "a template parameter kind (dtype, int, bool)");
            break;
        }
        P->pos++;
        if (!push(P, &l, n)) break;
        if (!accept(P, ",")) break;
    }
    return finish(P, &l, count);
}

/* "instance" NAME "=" NAME "<" targ { "," targ } ">" ";" with targ a unary expression (a dtype
 * name, a literal, a constant, or a parenthesised expression: a bare '>' would end the list) */
static ts__tile_node *parse_instance(parser *P) {
    P->pos++; /* 'instance' */
    tok *t = cur(P);
    ts__tile_node *it = mk(P, TN_INSTANCE, t->loc);
    if (!it) return NULL;
    it->name = ident(P, "an instance name");
    if (!expect(P, "=")) return NULL;
    tok *tn = cur(P);
    it->a = mk(P, TN_NAME, tn->loc);
    if (!it->a) return NULL;
    it->a->name = ident(P, "a template name");
    if (!expect(P, "<")) return NULL;
    nlist l = {0};
    for (;;) {
        if (!push(P, &l, parse_unary(P))) break;
        if (!accept(P, ",")) break;
    }
    it->list = finish(P, &l, &it->nlist);
    if (!expect(P, ">")) return NULL;
    expect(P, ";");
    return P->failed ? NULL : it;
}

static ts__tile_node *parse_module(parser *P) {
    ts__tile_node *m = mk(P, TN_MODULE, (ts__tile_loc){1, 1});
    if (!m) return NULL;
    nlist items = {0};
    while (!P->failed && cur(P)->kind != K_EOF) {
        tok *t = cur(P);
        ts__tile_node *it = NULL;
        if (is_kw(P, t, "const")) {
            P->pos++;
            it = mk(P, TN_CONST, t->loc);
            if (!it) break;
            it->name = ident(P, "a constant name");
            if (!expect(P, "=")) break;
            it->a = parse_expr(P);
            expect(P, ";");
        } else if (is_kw(P, t, "kernel") || is_kw(P, t, "macro")) {
            bool kern = is_kw(P, t, "kernel");
            P->pos++;
            it = mk(P, kern ? TN_KERNEL : TN_MACRO, t->loc);
            if (!it) break;
            it->name = ident(P, kern ? "a kernel name" : "a macro name");
            if (kern && is_p(cur(P), "<")) {
                P->pos++;
                it->list2 = parse_template_params(P, &it->nlist2);
                if (!expect(P, ">")) break;
                P->tparams = it->list2;
                P->ntparams = it->nlist2;
            }
            if (!expect(P, "(")) break;
            if (!is_p(cur(P), ")")) {
                if (kern) {
                    nlist pl = {0};
                    for (;;) {
                        if (!push(P, &pl, parse_param(P))) break;
                        if (!accept(P, ",")) break;
                    }
                    it->list = finish(P, &pl, &it->nlist);
                } else {
                    it->list = parse_name_list(P, &it->nlist, "a macro parameter name");
                }
            }
            if (!expect(P, ")")) break;
            it->a = parse_block(P);
            P->tparams = NULL;
            P->ntparams = 0;
        } else if (is_ident(P, t, "instance")) {
            it = parse_instance(P);
        } else {
            fail_at(P, t, "'kernel', 'macro', 'const' or 'instance'");
            break;
        }
        if (P->failed || !push(P, &items, it)) break;
    }
    m->list = finish(P, &items, &m->nlist);
    return P->failed ? NULL : m;
}

ts__tile_node *ts__tile_parse(ts__tile_arena *a, ts__tile_diag *d) {
    if (d->src_len > TS__TILE_MAX_SOURCE) {
        ts__tile_error(d, (ts__tile_loc){1, 1}, "source too large (%zu bytes, limit %u)",
                       d->src_len, (unsigned)TS__TILE_MAX_SOURCE);
        return NULL;
    }
    parser P = {.a = a, .d = d, .src = d->src};
    ts__tile_node *m = NULL;
    if (lex(&P)) m = parse_module(&P);
    free(P.t);
    return m;
}
