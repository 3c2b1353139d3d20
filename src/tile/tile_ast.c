/* tilec AST: construction, deep copy, structural equality and the printer. The printer emits
 * surface syntax with the fewest parentheses that keep the tree: print -> parse gives an equal
 * tree (tested), which also makes the lowered IR readable and re-parseable. */
#include "tile/tile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ts__tile_node *ts__tile_node_new(ts__tile_arena *a, int kind, ts__tile_loc loc) {
    ts__tile_node *n = ts__tile_alloc(a, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->loc = loc;
    return n;
}

static ts__tile_node **clone_list(ts__tile_arena *a, ts__tile_node **l, int32_t n, bool *ok) {
    if (!n) return NULL;
    ts__tile_node **out = ts__tile_alloc(a, (size_t)n * sizeof *out);
    if (!out) {
        *ok = false;
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        out[i] = ts__tile_clone(a, l[i]);
        if (l[i] && !out[i]) *ok = false;
    }
    return out;
}

ts__tile_node *ts__tile_clone(ts__tile_arena *a, const ts__tile_node *n) {
    if (!n) return NULL;
    ts__tile_node *c = ts__tile_alloc(a, sizeof *c);
    if (!c) return NULL;
    *c = *n;
    c->ty = 0;
    c->sym = NULL;
    bool ok = true;
    c->a = ts__tile_clone(a, n->a);
    c->b = ts__tile_clone(a, n->b);
    c->c = ts__tile_clone(a, n->c);
    if ((n->a && !c->a) || (n->b && !c->b) || (n->c && !c->c)) ok = false;
    c->list = clone_list(a, n->list, n->nlist, &ok);
    c->list2 = clone_list(a, n->list2, n->nlist2, &ok);
    return ok ? c : NULL;
}

static bool str_eq(const char *x, const char *y) {
    if (!x || !y) return x == y;
    return !strcmp(x, y);
}

bool ts__tile_equal(const ts__tile_node *x, const ts__tile_node *y) {
    if (!x || !y) return x == y;
    if (x->kind != y->kind || x->op != y->op || x->dt != y->dt || x->scope != y->scope ||
        x->ival != y->ival || !str_eq(x->name, y->name) || !str_eq(x->targ, y->targ) ||
        x->nlist != y->nlist || x->nlist2 != y->nlist2)
        return false;
    if (x->kind == TN_FLOAT && memcmp(&x->fval, &y->fval, sizeof x->fval)) return false;
    if (!ts__tile_equal(x->a, y->a) || !ts__tile_equal(x->b, y->b) || !ts__tile_equal(x->c, y->c))
        return false;
    for (int32_t i = 0; i < x->nlist; i++)
        if (!ts__tile_equal(x->list[i], y->list[i])) return false;
    for (int32_t i = 0; i < x->nlist2; i++)
        if (!ts__tile_equal(x->list2[i], y->list2[i])) return false;
    return true;
}

/* ---------------- printer ---------------- */

static int prec_of(int op) {
    switch (op) {
    case TO_LOR: return 1;
    case TO_LAND: return 2;
    case TO_BOR: return 3;
    case TO_BXOR: return 4;
    case TO_BAND: return 5;
    case TO_EQ: case TO_NE: return 6;
    case TO_LT: case TO_LE: case TO_GT: case TO_GE: return 7;
    case TO_SHL: case TO_SHR: return 8;
    case TO_ADD: case TO_SUB: return 9;
    default: return 10;
    }
}

static void print_float(ts__tile_buf *b, double v) {
    char s[64];
    /* Shortest decimal that reads back to the same double. */
    for (int p = 1; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*g", p, v);
        if (strtod(s, NULL) == v) break;
    }
    if (!strpbrk(s, ".e")) strcat(s, ".0");
    ts__tile_buf_puts(b, s);
}

static void print_expr(ts__tile_buf *b, const ts__tile_node *n, int depth);

static void print_list(ts__tile_buf *b, ts__tile_node **l, int32_t n, int depth) {
    for (int32_t i = 0; i < n; i++) {
        if (i) ts__tile_buf_puts(b, ", ");
        print_expr(b, l[i], depth);
    }
}

static void print_expr(ts__tile_buf *b, const ts__tile_node *n, int depth) {
    if (!n) {
        ts__tile_buf_puts(b, "<null>");
        return;
    }
    if (depth > 4 * TS__TILE_MAX_DEPTH) { /* trees from the parser never get here */
        ts__tile_buf_puts(b, "...");
        return;
    }
    switch (n->kind) {
    case TN_INT: ts__tile_buf_printf(b, "%lld", (long long)n->ival); break;
    case TN_FLOAT: print_float(b, n->fval); break;
    case TN_BOOL: ts__tile_buf_puts(b, n->ival ? "true" : "false"); break;
    case TN_STRING:
        ts__tile_buf_puts(b, "\"");
        for (const char *p = n->name; p && *p; p++) {
            if (*p == '"') ts__tile_buf_puts(b, "\\\"");
            else if (*p == '\\') ts__tile_buf_puts(b, "\\\\");
            else if (*p == '\n') ts__tile_buf_puts(b, "\\n");
            else ts__tile_buf_printf(b, "%c", *p);
        }
        ts__tile_buf_puts(b, "\"");
        break;
    case TN_NAME: ts__tile_buf_puts(b, n->name); break;
    case TN_INDEX:
        print_expr(b, n->a, depth + 1);
        ts__tile_buf_puts(b, "[");
        print_list(b, n->list, n->nlist, depth + 1);
        ts__tile_buf_puts(b, "]");
        break;
    case TN_SLICE:
        print_expr(b, n->a, depth + 1);
        ts__tile_buf_puts(b, ":");
        print_expr(b, n->b, depth + 1);
        break;
    case TN_UNARY: {
        ts__tile_buf_puts(b, ts__tile_op_str(n->op));
        bool par = n->a && n->a->kind == TN_BINARY;
        if (par) ts__tile_buf_puts(b, "(");
        print_expr(b, n->a, depth + 1);
        if (par) ts__tile_buf_puts(b, ")");
        break;
    }
    case TN_BINARY: {
        int p = prec_of(n->op);
        bool pl = n->a && n->a->kind == TN_BINARY && prec_of(n->a->op) < p;
        bool pr = n->b && n->b->kind == TN_BINARY && prec_of(n->b->op) <= p;
        if (pl) ts__tile_buf_puts(b, "(");
        print_expr(b, n->a, depth + 1);
        if (pl) ts__tile_buf_puts(b, ")");
        ts__tile_buf_printf(b, " %s ", ts__tile_op_str(n->op));
        if (pr) ts__tile_buf_puts(b, "(");
        print_expr(b, n->b, depth + 1);
        if (pr) ts__tile_buf_puts(b, ")");
        break;
    }
    case TN_CALL:
        ts__tile_buf_puts(b, n->name);
        if (n->targ) ts__tile_buf_printf(b, "<%s>", n->targ);
        if (n->targ && !n->nlist && !n->nlist2 &&
            (!strcmp(n->name, "inf") || !strcmp(n->name, "maxval") || !strcmp(n->name, "minval")))
            break;
        ts__tile_buf_puts(b, "(");
        print_list(b, n->list, n->nlist, depth + 1);
        for (int32_t i = 0; i < n->nlist2; i++) {
            if (i || n->nlist) ts__tile_buf_puts(b, ", ");
            ts__tile_buf_printf(b, "%s=", n->list2[i]->name);
            print_expr(b, n->list2[i]->a, depth + 1);
        }
        ts__tile_buf_puts(b, ")");
        break;
    default: ts__tile_buf_puts(b, "<?>");
    }
}

static void indent(ts__tile_buf *b, int level) {
    for (int i = 0; i < level; i++) ts__tile_buf_puts(b, "    ");
}

static void print_stmt(ts__tile_buf *b, const ts__tile_node *n, int level);

/* a dtype position: the dtype, or in a template the dtype parameter's name */
static const char *dt_spelling(const ts__tile_node *n) {
    return n->dt == TT_NONE && n->targ ? n->targ : ts__tile_dt_name(n->dt);
}

static void print_block(ts__tile_buf *b, const ts__tile_node *n, int level) {
    ts__tile_buf_puts(b, "{\n");
    for (int32_t i = 0; n && i < n->nlist; i++) print_stmt(b, n->list[i], level + 1);
    indent(b, level);
    ts__tile_buf_puts(b, "}");
}

static void print_names(ts__tile_buf *b, ts__tile_node **l, int32_t n) {
    for (int32_t i = 0; i < n; i++) ts__tile_buf_printf(b, "%s%s", i ? ", " : "", l[i]->name);
}

static void print_stmt(ts__tile_buf *b, const ts__tile_node *n, int level) {
    if (level > TS__TILE_MAX_DEPTH + 8) return;
    indent(b, level);
    switch (n->kind) {
    case TN_BLOCK: print_block(b, n, level); break;
    case TN_LAUNCH:
        ts__tile_buf_puts(b, "launch (");
        print_list(b, n->list, n->nlist, 0);
        ts__tile_buf_puts(b, ") as (");
        print_names(b, n->list2, n->nlist2);
        ts__tile_buf_puts(b, ") ");
        print_block(b, n->a, level);
        break;
    case TN_TILE:
        ts__tile_buf_printf(b, "%s %s: %s[",
                            n->scope == TS_SCOPE_SHARED ? "shared"
                            : n->scope == TS_SCOPE_LOCAL ? "local"
                                                         : "tile",
                            n->name, dt_spelling(n));
        print_list(b, n->list, n->nlist, 0);
        ts__tile_buf_puts(b, "];");
        break;
    case TN_LET:
        ts__tile_buf_printf(b, "let %s = ", n->name);
        print_expr(b, n->a, 0);
        ts__tile_buf_puts(b, ";");
        break;
    case TN_VAR:
        ts__tile_buf_printf(b, "var %s: %s", n->name, dt_spelling(n));
        if (n->a) {
            ts__tile_buf_puts(b, " = ");
            print_expr(b, n->a, 0);
        }
        ts__tile_buf_puts(b, ";");
        break;
    case TN_ASSIGN:
        print_expr(b, n->a, 0);
        if (n->op == TO_SET) ts__tile_buf_puts(b, " = ");
        else ts__tile_buf_printf(b, " %s= ", ts__tile_op_str(n->op));
        print_expr(b, n->b, 0);
        ts__tile_buf_puts(b, ";");
        break;
    case TN_FOR:
        ts__tile_buf_puts(b, "for ");
        print_names(b, n->list2, n->nlist2);
        ts__tile_buf_puts(b, " in ");
        print_expr(b, n->a, 0);
        ts__tile_buf_puts(b, " ");
        print_block(b, n->b, level);
        break;
    case TN_IF: {
        const ts__tile_node *s = n;
        ts__tile_buf_puts(b, "if ");
        for (;;) {
            print_expr(b, s->a, 0);
            ts__tile_buf_puts(b, " ");
            print_block(b, s->b, level);
            if (!s->c) break;
            ts__tile_buf_puts(b, " else ");
            if (s->c->kind == TN_IF) {
                ts__tile_buf_puts(b, "if ");
                s = s->c;
                continue;
            }
            print_block(b, s->c, level);
            break;
        }
        break;
    }
    case TN_WHILE:
        ts__tile_buf_puts(b, "while ");
        print_expr(b, n->a, 0);
        ts__tile_buf_puts(b, " ");
        print_block(b, n->b, level);
        break;
    case TN_CALLSTMT:
        print_expr(b, n->a, 0);
        ts__tile_buf_puts(b, ";");
        break;
    case TN_BREAK: ts__tile_buf_puts(b, "break;"); break;
    case TN_CONTINUE: ts__tile_buf_puts(b, "continue;"); break;
    default: ts__tile_buf_puts(b, "<?>;");
    }
    ts__tile_buf_puts(b, "\n");
}

static void print_item(ts__tile_buf *b, const ts__tile_node *n) {
    switch (n->kind) {
    case TN_CONST:
        ts__tile_buf_printf(b, "const %s = ", n->name);
        print_expr(b, n->a, 0);
        ts__tile_buf_puts(b, ";\n");
        break;
    case TN_KERNEL:
        ts__tile_buf_printf(b, "kernel %s", n->name);
        if (n->nlist2) {
            static const char *const kinds[] = {"dtype", "int", "bool"};
            ts__tile_buf_puts(b, "<");
            for (int32_t i = 0; i < n->nlist2; i++)
                ts__tile_buf_printf(b, "%s%s: %s", i ? ", " : "", n->list2[i]->name,
                                    kinds[n->list2[i]->ival >= 0 && n->list2[i]->ival < 3 ? n->list2[i]->ival : 0]);
            ts__tile_buf_puts(b, ">");
        }
        ts__tile_buf_puts(b, "(");
        for (int32_t i = 0; i < n->nlist; i++) {
            const ts__tile_node *p = n->list[i];
            ts__tile_buf_printf(b, "%s%s: ", i ? ", " : "", p->name);
            if (p->scope) {
                ts__tile_buf_printf(b, "tensor<%s, [", dt_spelling(p));
                print_list(b, p->list, p->nlist, 0);
                ts__tile_buf_puts(b, "]");
                if (p->nlist2) {
                    ts__tile_buf_puts(b, ", strides=[");
                    print_list(b, p->list2, p->nlist2, 0);
                    ts__tile_buf_puts(b, "]");
                }
                ts__tile_buf_puts(b, ">");
            } else ts__tile_buf_puts(b, dt_spelling(p));
            if (p->a) {
                ts__tile_buf_puts(b, " if ");
                print_expr(b, p->a, 0);
            }
        }
        ts__tile_buf_puts(b, ") ");
        print_block(b, n->a, 0);
        ts__tile_buf_puts(b, "\n");
        break;
    case TN_INSTANCE:
        ts__tile_buf_printf(b, "instance %s = %s<", n->name, n->a ? n->a->name : "?");
        for (int32_t i = 0; i < n->nlist; i++) {
            /* arguments are unary expressions: anything looser goes in parentheses */
            bool par = n->list[i] && n->list[i]->kind == TN_BINARY;
            ts__tile_buf_printf(b, "%s%s", i ? ", " : "", par ? "(" : "");
            print_expr(b, n->list[i], 0);
            if (par) ts__tile_buf_puts(b, ")");
        }
        ts__tile_buf_puts(b, ">;\n");
        break;
    case TN_MACRO:
        ts__tile_buf_printf(b, "macro %s(", n->name);
        print_names(b, n->list, n->nlist);
        ts__tile_buf_puts(b, ") ");
        print_block(b, n->a, 0);
        ts__tile_buf_puts(b, "\n");
        break;
    default: print_stmt(b, n, 0);
    }
}

void ts__tile_print(ts__tile_buf *b, const ts__tile_node *n) {
    if (!n) return;
    if (n->kind == TN_MODULE) {
        for (int32_t i = 0; i < n->nlist; i++) {
            if (i) ts__tile_buf_puts(b, "\n");
            print_item(b, n->list[i]);
        }
    } else if (n->kind >= TN_INT) {
        print_expr(b, n, 0);
    } else print_item(b, n);
}
