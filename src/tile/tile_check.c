/* tilec checker: macro expansion, name resolution, types, shapes and obvious races.
 *
 * Works on a copy of each kernel body (the parsed AST stays untouched for --emit-ast).
 * Expressions get their value type in node->ty and names their symbol in node->sym; the
 * lowering and the C emitter rely on both. */
#include "tile/tile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chk {
    ts__tile_arena *a;
    ts__tile_diag *d;
    ts__tile_sym *scope;
    int depth;     /* scope depth */
    int rec;       /* recursion depth */
    ts__tile_kernel *k;
    ts__tile_program *prog;
    bool in_launch;
    int loop_depth;          /* loops that accept break/continue */
    bool in_par;             /* inside a parallel loop body (any depth) */
    int par_scope;           /* scope depth of the innermost parallel loop's variables */
    ts__tile_sym *par_vars[64];
    int npar_vars;           /* enclosing parallel-loop variables (slot = index) */
    uint64_t par_single;     /* those whose loop has a single iteration (extent 1): no race */
    int macro_depth;
    int exp_ids[TS__TILE_MAX_MACRO_DEPTH + 1]; /* ids of the expansions being checked, outermost first */
    int spliced_ids[64], nspliced;  /* expansions spliced into the kernel body (launch macros) */
    int expansions;
    bool lowered;            /* checking the IR: reserved names allowed */
    ts__tile_sym *dims_list[64];
    int uids;
} chk;

#define ERR(c, loc, ...) ts__tile_error((c)->d, (loc), __VA_ARGS__)

/* ---------------- scopes ---------------- */

static ts__tile_sym *lookup(chk *c, const char *name) {
    for (ts__tile_sym *s = c->scope; s; s = s->next)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

static ts__tile_sym *declare(chk *c, int kind, const char *name, ts__tile_node *decl) {
    if (!name) return NULL;
    for (ts__tile_sym *s = c->scope; s && s->depth == c->depth; s = s->next)
        if (!strcmp(s->name, name)) {
            ERR(c, decl->loc, "'%s' redefined (previous definition at %d:%d)", name,
                s->decl ? s->decl->loc.line : 0, s->decl ? s->decl->loc.col : 0);
            return NULL;
        }
    if (!c->lowered && name[0] == '_' && name[1] == '_') {
        ERR(c, decl->loc, "names starting with '__' are reserved for the compiler");
        return NULL;
    }
    ts__tile_sym *s = ts__tile_alloc(c->a, sizeof *s);
    if (!s) {
        ERR(c, decl->loc, "program too large (compiler memory limit reached)");
        return NULL;
    }
    s->kind = kind;
    s->name = name;
    s->decl = decl;
    s->uid = ++c->uids;
    s->depth = c->depth;
    s->next = c->scope;
    c->scope = s;
    return s;
}

static void pop_to(chk *c, int depth) {
    while (c->scope && c->scope->depth > depth) c->scope = c->scope->next;
    c->depth = depth;
}

/* ---------------- constants ---------------- */

static bool cfold(chk *c, ts__tile_node *n, int64_t *v);

static bool cfold_call(chk *c, ts__tile_node *n, int64_t *v) {
    int64_t x, y;
    if (n->nlist == 2 && n->nlist2 == 0 && cfold(c, n->list[0], &x) && cfold(c, n->list[1], &y)) {
        if (!strcmp(n->name, "min")) return *v = x < y ? x : y, true;
        if (!strcmp(n->name, "max")) return *v = x > y ? x : y, true;
        if (!strcmp(n->name, "ceildiv") && y > 0 && x >= 0) return *v = x / y + (x % y != 0), true;
    }
    return false;
}

static bool cfold_unop(int op, int64_t x, int64_t *v) {
    if (op == TO_NEG) return x != INT64_MIN && (*v = -x, true);
    if (op == TO_BNOT) return *v = ~x, true;
    return false;
}

static bool cfold_binop(int op, int64_t x, int64_t y, int64_t *v) {
    switch (op) {
    case TO_ADD: return !__builtin_add_overflow(x, y, v);
    case TO_SUB: return !__builtin_sub_overflow(x, y, v);
    case TO_MUL: return !__builtin_mul_overflow(x, y, v);
    case TO_DIV: return y != 0 && !(x == INT64_MIN && y == -1) && (*v = x / y, true);
    case TO_MOD: return y != 0 && !(x == INT64_MIN && y == -1) && (*v = x % y, true);
    case TO_SHL: return y >= 0 && y < 63 && x >= 0 && x <= (INT64_MAX >> y) && (*v = x << y, true);
    case TO_SHR: return y >= 0 && y < 64 && (*v = x >> y, true);
    case TO_BAND: return *v = x & y, true;
    case TO_BOR: return *v = x | y, true;
    case TO_BXOR: return *v = x ^ y, true;
    default: return false;
    }
}

/* Integer constant folding; false when not a compile-time constant (or it would overflow). */
static bool cfold(chk *c, ts__tile_node *n, int64_t *v) {
    if (!n) return false;
    switch (n->kind) {
    case TN_INT: *v = n->ival; return true;
    case TN_NAME: {
        ts__tile_sym *s = lookup(c, n->name);
        if (s && (s->kind == SYM_CONST || s->kind == SYM_LET) && s->is_const_int) {
            *v = s->ival;
            return true;
        }
        return false;
    }
    case TN_UNARY: {
        int64_t x;
        return cfold(c, n->a, &x) && cfold_unop(n->op, x, v);
    }
    case TN_BINARY: {
        int64_t x, y;
        return cfold(c, n->a, &x) && cfold(c, n->b, &y) && cfold_binop(n->op, x, y, v);
    }
    case TN_CALL: return cfold_call(c, n, v);
    default: return false;
    }
}

/* Why an expression did not fold, in one pass (linear in its size): 1 folded (*v), 0 some
 * operand is not a compile-time integer, -1 an operation on constants failed: *why says which
 * ("division by zero"), *at is its operator, so `const A = 1 / 0;` is named for what it is. */
static int cfold_explain(chk *c, ts__tile_node *n, int64_t *v, const char **why, const ts__tile_node **at) {
    int64_t x, y;
    if (n && n->kind == TN_UNARY) {
        int r = cfold_explain(c, n->a, &x, why, at);
        if (r <= 0) return r;
        if (cfold_unop(n->op, x, v)) return 1;
        if (n->op != TO_NEG) return 0;
        *why = "integer overflow", *at = n;
        return -1;
    }
    if (!n || n->kind != TN_BINARY) return cfold(c, n, v) ? 1 : 0;
    int ra = cfold_explain(c, n->a, &x, why, at);
    if (ra < 0) return ra;
    int rb = cfold_explain(c, n->b, &y, why, at);
    if (rb < 0) return rb;
    if (!ra || !rb) return 0;
    if (cfold_binop(n->op, x, y, v)) return 1;
    switch (n->op) {
    case TO_ADD: case TO_SUB: case TO_MUL: *why = "integer overflow"; break;
    case TO_DIV: *why = y == 0 ? "division by zero" : "integer overflow"; break;
    case TO_MOD: *why = y == 0 ? "modulo by zero (%)" : "integer overflow"; break;
    case TO_SHL: *why = y < 0 || y >= 63 ? "shift count out of range" : x < 0 ? "left shift of a negative value" : "integer overflow"; break;
    case TO_SHR: *why = "shift count out of range"; break;
    default: return 0; /* not an integer operation: not a constant */
    }
    *at = n;
    return -1;
}

/* hi - lo when it is a compile-time constant: both constant, or hi spelled `lo + K`. */
static bool slice_extent(chk *c, ts__tile_node *sl, int64_t *ext) {
    int64_t lo, hi;
    if (cfold(c, sl->a, &lo) && cfold(c, sl->b, &hi)) return !__builtin_sub_overflow(hi, lo, ext);
    ts__tile_node *h = sl->b;
    if (h->kind == TN_BINARY && h->op == TO_ADD && ts__tile_equal(h->a, sl->a)) return cfold(c, h->b, ext);
    return false;
}

/* ---------------- types ---------------- */

static int value_type(int dt) { return ts__tile_dt_packed_raw(dt); }

/* Operand type for arithmetic: narrow floats widen (exactly) to f32. */
static int arith_type(int t) { return ts__tile_dt_is_narrow(t) ? TT_F32 : t; }

static int int_rank(int t) {
    switch (t) {
    case TT_I8: case TT_U8: return 1;
    case TT_I16: case TT_U16: return 2;
    case TT_I32: case TT_U32: return 3;
    default: return 4;
    }
}

static int unify(chk *c, ts__tile_loc loc, int x, int y, const char *what) {
    if (x == TT_ERROR || y == TT_ERROR) return TT_ERROR;
    x = arith_type(x);
    y = arith_type(y);
    if (x == y) return x;
    if (x == TT_BOOL || y == TT_BOOL || x == TT_STRING || y == TT_STRING || x == TT_VOID || y == TT_VOID) {
        ERR(c, loc, "operands of %s have types '%s' and '%s'", what, ts__tile_dt_name(x),
            ts__tile_dt_name(y));
        return TT_ERROR;
    }
    if (x == TT_INTLIT && y == TT_FLOATLIT) return TT_FLOATLIT;
    if (y == TT_INTLIT && x == TT_FLOATLIT) return TT_FLOATLIT;
    if (x == TT_INTLIT) return y;
    if (y == TT_INTLIT) return x;
    if (x == TT_FLOATLIT && ts__tile_dt_is_float(y)) return y;
    if (y == TT_FLOATLIT && ts__tile_dt_is_float(x)) return x;
    bool xi = ts__tile_dt_is_int(x), yi = ts__tile_dt_is_int(y);
    if (xi && yi) {
        if (ts__tile_dt_is_signed(x) != ts__tile_dt_is_signed(y)) {
            ERR(c, loc, "mixed signed and unsigned operands of %s ('%s' and '%s'); use cast<...>",
                what, ts__tile_dt_name(x), ts__tile_dt_name(y));
            return TT_ERROR;
        }
        return int_rank(x) >= int_rank(y) ? x : y;
    }
    if (xi || yi) {
        ERR(c, loc, "mixed integer and float operands of %s ('%s' and '%s'); use cast<...>", what,
            ts__tile_dt_name(x), ts__tile_dt_name(y));
        return TT_ERROR;
    }
    ERR(c, loc, "mixed float operands of %s ('%s' and '%s'); use cast<...>", what,
        ts__tile_dt_name(x), ts__tile_dt_name(y));
    return TT_ERROR;
}

/* Can a value of type `from` be stored into a location of element dtype `to` implicitly? */
static bool assignable(int to, int from) {
    int tv = value_type(to);
    if (from == TT_ERROR) return true;
    if (tv == from) return true;
    if (ts__tile_dt_is_narrow(tv)) return from == TT_F32 || from == TT_FLOATLIT || from == TT_INTLIT ||
                                          ts__tile_dt_is_narrow(from);
    if (tv == TT_F32) return from == TT_FLOATLIT || from == TT_INTLIT || ts__tile_dt_is_narrow(from);
    if (tv == TT_F64) return from == TT_FLOATLIT || from == TT_INTLIT || from == TT_F32 || ts__tile_dt_is_narrow(from);
    if (ts__tile_dt_is_int(tv)) {
        if (from == TT_INTLIT) return true;
        if (!ts__tile_dt_is_int(from)) return false;
        if (ts__tile_dt_is_signed(tv) == ts__tile_dt_is_signed(from)) return int_rank(tv) >= int_rank(from);
        return ts__tile_dt_is_signed(tv) && int_rank(tv) > int_rank(from);
    }
    return false;
}

static void check_assign_types(chk *c, ts__tile_loc loc, int to, int from, const char *what) {
    if (!assignable(to, from))
        ERR(c, loc, "cannot convert '%s' to '%s' implicitly in %s; use cast<%s>(...)",
            ts__tile_dt_name(from), ts__tile_dt_name(value_type(to)), what, ts__tile_dt_name(value_type(to)));
}

/* ---------------- expressions ---------------- */

static int expr(chk *c, ts__tile_node *n);

static bool is_buffer(ts__tile_sym *s) { return s && (s->kind == SYM_TENSOR || s->kind == SYM_TILE); }

static int check_index(chk *c, ts__tile_node *n, bool allow_slices) {
    ts__tile_node *base = n->a;
    if (base->kind != TN_NAME) {
        ERR(c, n->loc, "only a tensor or a tile can be indexed");
        return TT_ERROR;
    }
    ts__tile_sym *s = lookup(c, base->name);
    if (!s) {
        ERR(c, base->loc, "unknown name '%s'", base->name);
        return TT_ERROR;
    }
    base->sym = s;
    if (!is_buffer(s)) {
        ERR(c, base->loc, "'%s' is not a tensor or a tile and cannot be indexed", base->name);
        return TT_ERROR;
    }
    n->sym = s;
    if (n->nlist != s->rank) {
        ERR(c, n->loc, "'%s' has rank %d but is indexed with %d indices", s->name, s->rank,
            (int)n->nlist);
        return TT_ERROR;
    }
    for (int32_t i = 0; i < n->nlist; i++) {
        ts__tile_node *ix = n->list[i];
        if (ix->kind == TN_SLICE) {
            if (!allow_slices) {
                ERR(c, ix->loc, "slices are only allowed in copy() regions");
                return TT_ERROR;
            }
            int t1 = expr(c, ix->a), t2 = expr(c, ix->b);
            if ((t1 != TT_ERROR && !ts__tile_dt_is_int(t1)) || (t2 != TT_ERROR && !ts__tile_dt_is_int(t2))) {
                ERR(c, ix->loc, "slice bounds must be integers");
                return TT_ERROR;
            }
            continue;
        }
        int t = expr(c, ix);
        if (t != TT_ERROR && !ts__tile_dt_is_int(t)) {
            ERR(c, ix->loc, "index must be an integer, found '%s'", ts__tile_dt_name(t));
            return TT_ERROR;
        }
        int64_t v;
        if (s->kind == SYM_TILE && !allow_slices && cfold(c, ix, &v) && (v < 0 || v >= s->cdims[i])) {
            ERR(c, ix->loc, "index %lld out of range for dimension %d of tile '%s' (size %lld)",
                (long long)v, (int)i, s->name, (long long)s->cdims[i]);
            return TT_ERROR;
        }
    }
    return value_type(s->dt);
}

static const char *const k_unary_math[] = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt",
                                           "sigmoid", "softplus", "floor", "ceil", "round",
                                           "trunc", NULL};
static bool in_list(const char *const *l, const char *s) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s)) return true;
    return false;
}
static const char *const k_tile_ops[] = {"copy", "fill", "clear", "reduce", "cumsum", "gemm",
                                         "atomic_add", "check", "assume", "prefetch", NULL};
/* the ones that act on one element (or none), so a parallel loop may contain them */
static const char *const k_element_ops[] = {"atomic_add", "check", "assume", "prefetch", NULL};

static int float_arg(chk *c, ts__tile_node *call, ts__tile_node *arg) {
    int t = arith_type(expr(c, arg));
    if (t == TT_ERROR) return t;
    if (t == TT_INTLIT || t == TT_FLOATLIT) return TT_F32;
    if (t != TT_F32 && t != TT_F64) {
        ERR(c, arg->loc, "%s() needs a float argument, found '%s'", call->name, ts__tile_dt_name(t));
        return TT_ERROR;
    }
    return t;
}

static int call_expr(chk *c, ts__tile_node *n) {
    const char *f = n->name;
    int na = n->nlist;
    if (in_list(k_tile_ops, f)) {
        ERR(c, n->loc, "'%s' is a statement, not a value", f);
        return TT_ERROR;
    }
    ts__tile_sym *ms = lookup(c, f);
    if (ms && ms->kind == SYM_MACRO) {
        ERR(c, n->loc, "macro '%s' expands to statements and cannot be used as a value", f);
        return TT_ERROR;
    }
    if (n->nlist2) {
        ERR(c, n->list2[0]->loc, "%s() takes no named arguments", f);
        return TT_ERROR;
    }
#define NARGS(k)                                                                          \
    do {                                                                                  \
        if (na != (k)) {                                                                  \
            ERR(c, n->loc, "%s() takes %d argument%s, %d given", f, (k), (k) == 1 ? "" : "s", na); \
            return TT_ERROR;                                                              \
        }                                                                                 \
    } while (0)
    if (!strcmp(f, "cast") || !strcmp(f, "bitcast")) {
        NARGS(1);
        if (!n->targ || !n->dt) {
            ERR(c, n->loc, "%s needs a dtype: %s<f32>(x)", f, f);
            return TT_ERROR;
        }
        int t = expr(c, n->list[0]);
        if (t == TT_ERROR) return t;
        if (t == TT_STRING || t == TT_VOID) {
            ERR(c, n->list[0]->loc, "cannot %s a %s", f, ts__tile_dt_name(t));
            return TT_ERROR;
        }
        int to = value_type(n->dt);
        if (f[0] == 'b') {
            if (t == TT_INTLIT || t == TT_FLOATLIT) {
                ERR(c, n->list[0]->loc, "bitcast needs a typed operand (cast the literal first)");
                return TT_ERROR;
            }
            /* an e2m1 value is a 4-bit code: it bitcasts to u8 / i8 (the code, 0..15), nothing
             * else; bool has no bit pattern to reinterpret */
            bool code = t == TT_E2M1 && (to == TT_U8 || to == TT_I8);
            if (!code && (t == TT_E2M1 || to == TT_E2M1 || t == TT_BOOL || to == TT_BOOL)) {
                ERR(c, n->loc, "bitcast from '%s' to '%s' is not defined (an e2m1 value bitcasts only to "
                    "u8 or i8, its 4-bit code; bool not at all): use cast",
                    ts__tile_dt_name(t), ts__tile_dt_name(to));
                return TT_ERROR;
            }
            if (!code && ts__tile_dt_bytes(t) != ts__tile_dt_bytes(to)) {
                ERR(c, n->loc, "bitcast from '%s' (%d bytes) to '%s' (%d bytes): sizes differ",
                    ts__tile_dt_name(t), ts__tile_dt_bytes(t), ts__tile_dt_name(to), ts__tile_dt_bytes(to));
                return TT_ERROR;
            }
        }
        return to;
    }
    if (!strcmp(f, "inf") || !strcmp(f, "maxval") || !strcmp(f, "minval")) {
        NARGS(0);
        if (!n->dt) {
            ERR(c, n->loc, "%s needs a dtype: %s<f32>", f, f);
            return TT_ERROR;
        }
        int t = value_type(n->dt);
        if (f[0] == 'i') {
            if (t != TT_F32 && t != TT_F64 && t != TT_F16 && t != TT_BF16 && t != TT_E5M2) {
                ERR(c, n->loc, "inf<%s>: dtype has no infinity", ts__tile_dt_name(t));
                return TT_ERROR;
            }
        } else if (t == TT_BOOL || t == TT_U16 + 100) {
            ERR(c, n->loc, "%s<bool> is not defined", f);
            return TT_ERROR;
        }
        return ts__tile_dt_is_narrow(t) ? TT_F32 : t;
    }
    if (!strcmp(f, "select")) {
        NARGS(3);
        int tc = expr(c, n->list[0]);
        if (tc != TT_ERROR && tc != TT_BOOL) {
            ERR(c, n->list[0]->loc, "select() condition must be bool, found '%s'", ts__tile_dt_name(tc));
            return TT_ERROR;
        }
        int a = expr(c, n->list[1]), b = expr(c, n->list[2]);
        if (a == TT_BOOL && b == TT_BOOL) return TT_BOOL;
        return unify(c, n->loc, a, b, "select()");
    }
    if (in_list(k_unary_math, f)) {
        NARGS(1);
        int t = float_arg(c, n, n->list[0]);
        if (t == TT_F64 && strcmp(f, "sqrt") && strcmp(f, "floor") && strcmp(f, "ceil") &&
            strcmp(f, "round") && strcmp(f, "trunc")) {
            ERR(c, n->loc, "%s() is defined for f32 only", f);
            return TT_ERROR;
        }
        return t;
    }
    if (!strcmp(f, "isfinite") || !strcmp(f, "isnan")) {
        NARGS(1);
        return float_arg(c, n, n->list[0]) == TT_ERROR ? TT_ERROR : TT_BOOL;
    }
    if (!strcmp(f, "abs")) {
        NARGS(1);
        int t = arith_type(expr(c, n->list[0]));
        if (t != TT_ERROR && !ts__tile_dt_is_int(t) && !ts__tile_dt_is_float(t)) {
            ERR(c, n->loc, "abs() needs a number, found '%s'", ts__tile_dt_name(t));
            return TT_ERROR;
        }
        return t;
    }
    if (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "ceildiv")) {
        NARGS(2);
        int t = unify(c, n->loc, expr(c, n->list[0]), expr(c, n->list[1]), f);
        if (f[0] == 'c' && t != TT_ERROR && !ts__tile_dt_is_int(t)) {
            ERR(c, n->loc, "ceildiv() needs integer operands");
            return TT_ERROR;
        }
        return t;
    }
    if (!strcmp(f, "clamp") || !strcmp(f, "fma")) {
        NARGS(3);
        int t = unify(c, n->loc, expr(c, n->list[0]), expr(c, n->list[1]), f);
        t = unify(c, n->loc, t, expr(c, n->list[2]), f);
        if (f[0] == 'f' && t != TT_ERROR && !ts__tile_dt_is_float(t)) {
            ERR(c, n->loc, "fma() needs float operands");
            return TT_ERROR;
        }
        if (t == TT_FLOATLIT || (f[0] == 'f' && t == TT_INTLIT)) t = TT_F32;
        return t;
    }
    ERR(c, n->loc, "unknown function '%s'", f);
    return TT_ERROR;
#undef NARGS
}

static int expr_inner(chk *c, ts__tile_node *n) {
    switch (n->kind) {
    case TN_INT: return TT_INTLIT;
    case TN_FLOAT: return TT_FLOATLIT;
    case TN_BOOL: return TT_BOOL;
    case TN_STRING: return TT_STRING;
    case TN_NAME: {
        ts__tile_sym *s = lookup(c, n->name);
        if (!s && ts__tile_dt_from_name(n->name) != TT_NONE) {
            ERR(c, n->loc, "dtype '%s' is not a value (dtypes compare only in conditions resolved "
                "when a template is instantiated)", n->name);
            return TT_ERROR;
        }
        if (!s) {
            ERR(c, n->loc, "unknown name '%s'", n->name);
            return TT_ERROR;
        }
        n->sym = s;
        switch (s->kind) {
        case SYM_TENSOR: case SYM_TILE:
            ERR(c, n->loc, "'%s' is a %s; index it to get an element", s->name,
                s->kind == SYM_TENSOR ? "tensor" : "tile");
            return TT_ERROR;
        case SYM_MACRO:
            ERR(c, n->loc, "'%s' is a macro", s->name);
            return TT_ERROR;
        case SYM_CONST:
            return s->is_const_int ? TT_INTLIT : TT_FLOATLIT;
        default: return s->dt;
        }
    }
    case TN_INDEX: return check_index(c, n, false);
    case TN_SLICE:
        ERR(c, n->loc, "slices are only allowed in copy() regions");
        return TT_ERROR;
    case TN_UNARY: {
        int t = expr(c, n->a);
        if (t == TT_ERROR) return t;
        if (n->op == TO_NOT) {
            if (t != TT_BOOL) {
                ERR(c, n->loc, "operand of '!' must be bool, found '%s'", ts__tile_dt_name(t));
                return TT_ERROR;
            }
            return TT_BOOL;
        }
        t = arith_type(t);
        if (n->op == TO_BNOT && !ts__tile_dt_is_int(t)) {
            ERR(c, n->loc, "operand of '~' must be an integer, found '%s'", ts__tile_dt_name(t));
            return TT_ERROR;
        }
        if (n->op == TO_NEG && !ts__tile_dt_is_int(t) && !ts__tile_dt_is_float(t)) {
            ERR(c, n->loc, "operand of '-' must be a number, found '%s'", ts__tile_dt_name(t));
            return TT_ERROR;
        }
        return t;
    }
    case TN_BINARY: {
        int x = expr(c, n->a), y = expr(c, n->b);
        if (x == TT_ERROR || y == TT_ERROR) return TT_ERROR;
        char what[32];
        snprintf(what, sizeof what, "'%s'", ts__tile_op_str(n->op));
        switch (n->op) {
        case TO_LAND: case TO_LOR:
            if (x != TT_BOOL || y != TT_BOOL) {
                ERR(c, n->loc, "operands of %s must be bool", what);
                return TT_ERROR;
            }
            return TT_BOOL;
        case TO_EQ: case TO_NE: case TO_LT: case TO_LE: case TO_GT: case TO_GE:
            if (x == TT_BOOL && y == TT_BOOL && (n->op == TO_EQ || n->op == TO_NE)) return TT_BOOL;
            return unify(c, n->loc, x, y, what) == TT_ERROR ? TT_ERROR : TT_BOOL;
        case TO_BAND: case TO_BOR: case TO_BXOR:
            if (x == TT_BOOL && y == TT_BOOL) return TT_BOOL;
            /* fallthrough */
        case TO_SHL: case TO_SHR: case TO_MOD: {
            int t = unify(c, n->loc, x, y, what);
            if (t != TT_ERROR && !ts__tile_dt_is_int(t)) {
                ERR(c, n->loc, "operands of %s must be integers, found '%s'", what, ts__tile_dt_name(t));
                return TT_ERROR;
            }
            return t;
        }
        default: {
            int t = unify(c, n->loc, x, y, what);
            if (t == TT_BOOL) {
                ERR(c, n->loc, "arithmetic on bool");
                return TT_ERROR;
            }
            return t;
        }
        }
    }
    case TN_CALL: return call_expr(c, n);
    default:
        ERR(c, n->loc, "not an expression");
        return TT_ERROR;
    }
}

static int expr(chk *c, ts__tile_node *n) {
    if (!n) return TT_ERROR;
    if (++c->rec > 4 * TS__TILE_MAX_DEPTH) {
        c->rec--;
        ERR(c, n->loc, "expression too deep");
        return TT_ERROR;
    }
    n->ty = expr_inner(c, n);
    c->rec--;
    return n->ty;
}

/* Bit set of enclosing parallel-loop variables an expression depends on (through lets). */
static uint64_t deps_of(chk *c, ts__tile_node *n) {
    if (!n) return 0;
    uint64_t m = 0;
    if (n->kind == TN_NAME) {
        ts__tile_sym *s = n->sym ? n->sym : lookup(c, n->name);
        if (s) m |= s->deps;
    }
    m |= deps_of(c, n->a) | deps_of(c, n->b) | deps_of(c, n->c);
    for (int32_t i = 0; i < n->nlist; i++) m |= deps_of(c, n->list[i]);
    for (int32_t i = 0; i < n->nlist2; i++) m |= deps_of(c, n->list2[i]);
    return m;
}

static uint64_t all_par_bits(chk *c) {
    return c->npar_vars >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << c->npar_vars) - 1);
}

/* A write inside a parallel loop must depend on every enclosing parallel variable. */
static void check_race_write(chk *c, ts__tile_node *target, ts__tile_loc loc) {
    if (!c->in_par) return;
    if (target->kind == TN_NAME) {
        ts__tile_sym *s = target->sym;
        if (s && s->depth < c->par_scope)
            ERR(c, loc,
                "race: every iteration of the parallel loop assigns '%s', declared outside it "
                "(use reduce, or a serial loop)", s->name);
        return;
    }
    ts__tile_sym *s = target->sym;
    if (!s || s->depth >= c->par_scope) return;
    uint64_t have = 0;
    for (int32_t i = 0; i < target->nlist; i++) have |= deps_of(c, target->list[i]);
    uint64_t need = all_par_bits(c) & ~c->par_single;
    if ((have & need) != need) {
        int miss = 0;
        while (miss < c->npar_vars && miss < 64 && ((have >> miss) & 1)) miss++;
        ERR(c, loc,
            "race: the index of this write to '%s' does not depend on parallel loop variable "
            "'%s', so iterations write the same element",
            s->name, miss < c->npar_vars ? c->par_vars[miss]->name : "?");
    }
}

/* ---------------- statements ---------------- */

static void stmt(chk *c, ts__tile_node *n);

static void block(chk *c, ts__tile_node *b) {
    int d = c->depth;
    c->depth++;
    for (int32_t i = 0; b && i < b->nlist && !c->d->stopped; i++) stmt(c, b->list[i]);
    pop_to(c, d);
}

static ts__tile_node *kwarg(ts__tile_node *call, const char *name) {
    for (int32_t i = 0; i < call->nlist2; i++)
        if (!strcmp(call->list2[i]->name, name)) return call->list2[i];
    return NULL;
}

static bool only_kwargs(chk *c, ts__tile_node *call, const char *const *allowed) {
    for (int32_t i = 0; i < call->nlist2; i++) {
        bool ok = false;
        for (int k = 0; allowed && allowed[k]; k++)
            if (!strcmp(allowed[k], call->list2[i]->name)) ok = true;
        if (!ok) {
            ERR(c, call->list2[i]->loc, "unknown argument '%s' for %s()", call->list2[i]->name, call->name);
            return false;
        }
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(call->list2[j]->name, call->list2[i]->name)) {
                ERR(c, call->list2[i]->loc, "argument '%s' given twice", call->list2[i]->name);
                return false;
            }
    }
    return true;
}

static bool const_bool_kw(chk *c, ts__tile_node *call, const char *name, bool *out) {
    ts__tile_node *k = kwarg(call, name);
    *out = false;
    if (!k) return true;
    if (k->a->kind != TN_BOOL) {
        ERR(c, k->a->loc, "'%s' must be true or false", name);
        return false;
    }
    *out = k->a->ival != 0;
    return true;
}

static ts__tile_sym *tile_arg(chk *c, ts__tile_node *call, int i, const char *role) {
    if (i >= call->nlist) return NULL;
    ts__tile_node *a = call->list[i];
    if (a->kind != TN_NAME) {
        ERR(c, a->loc, "%s() %s must be a whole tile", call->name, role);
        return NULL;
    }
    ts__tile_sym *s = lookup(c, a->name);
    if (!s) {
        ERR(c, a->loc, "unknown name '%s'", a->name);
        return NULL;
    }
    a->sym = s;
    if (s->kind != SYM_TILE) {
        ERR(c, a->loc, "%s() %s must be a tile; '%s' is %s", call->name, role, s->name,
            s->kind == SYM_TENSOR ? "a tensor" : "not a buffer");
        return NULL;
    }
    return s;
}

static bool nargs(chk *c, ts__tile_node *call, int lo, int hi) {
    if (call->nlist < lo || call->nlist > hi) {
        if (lo == hi)
            ERR(c, call->loc, "%s() takes %d arguments, %d given", call->name, lo, (int)call->nlist);
        else
            ERR(c, call->loc, "%s() takes %d to %d arguments, %d given", call->name, lo, hi,
                (int)call->nlist);
        return false;
    }
    return true;
}

static int const_axis(chk *c, ts__tile_node *call, int rank) {
    ts__tile_node *k = kwarg(call, "axis");
    int64_t ax = rank - 1;
    if (k && !cfold(c, k->a, &ax)) {
        ERR(c, k->a->loc, "axis must be a compile-time integer");
        return -1;
    }
    if (ax < 0) ax += rank;
    if (ax < 0 || ax >= rank) {
        ERR(c, k ? k->a->loc : call->loc, "axis %lld out of range for a rank-%d tile", (long long)ax, rank);
        return -1;
    }
    return (int)ax;
}

static void check_copy(chk *c, ts__tile_node *n) {
    static const char *const kw[] = {"fill", NULL};
    if (!nargs(c, n, 2, 2) || !only_kwargs(c, n, kw)) return;
    ts__tile_node *side[2] = {n->list[0], n->list[1]};
    ts__tile_sym *sym[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        ts__tile_node *r = side[i];
        ts__tile_node *base = r->kind == TN_INDEX ? r->a : r;
        if (base->kind != TN_NAME) {
            ERR(c, r->loc, "copy() %s must be a tensor or tile region", i ? "destination" : "source");
            return;
        }
        sym[i] = lookup(c, base->name);
        if (!sym[i]) {
            ERR(c, base->loc, "unknown name '%s'", base->name);
            return;
        }
        base->sym = sym[i];
        r->sym = sym[i];
        if (!is_buffer(sym[i])) {
            ERR(c, base->loc, "copy() %s must be a tensor or tile region; '%s' is not a buffer",
                i ? "destination" : "source", base->name);
            return;
        }
        if (r->kind == TN_INDEX) {
            if (sym[i]->kind == SYM_TILE) {
                ERR(c, r->loc, "the tile side of copy() must be a whole tile");
                return;
            }
            if (check_index(c, r, true) == TT_ERROR) return;
        }
    }
    if (sym[0]->kind == SYM_TENSOR && sym[1]->kind == SYM_TENSOR) {
        ERR(c, n->loc, "copy() needs a tile on at least one side");
        return;
    }
    int ti = sym[0]->kind == SYM_TILE ? 0 : 1; /* a tile side; the other may be a tensor */
    ts__tile_sym *tile = sym[ti], *other = sym[1 - ti];
    ts__tile_node *oreg = side[1 - ti];
    if (other->kind == SYM_TILE) {
        if (other->rank != tile->rank || memcmp(other->cdims, tile->cdims, sizeof tile->cdims)) {
            ERR(c, n->loc, "copy() between tiles '%s' and '%s' of different shapes", sym[0]->name, sym[1]->name);
            return;
        }
    } else {
        if (tile->rank > other->rank) {
            ERR(c, n->loc, "copy() tile '%s' has rank %d, more than tensor '%s' (rank %d)", tile->name,
                tile->rank, other->name, other->rank);
            return;
        }
        int lead = other->rank - tile->rank;
        int map[TS__TILE_MAX_RANK]; /* tensor dim of each tile dim, -1 for none */
        for (int d = 0; d < tile->rank; d++) map[d] = lead + d;
        bool slices = false;
        if (oreg->kind == TN_INDEX)
            for (int d = 0; d < other->rank; d++) slices |= oreg->list[d]->kind == TN_SLICE;
        if (oreg->kind == TN_NAME) {
            for (int d = 0; d < other->rank; d++) {
                int64_t want = d < lead ? 1 : tile->cdims[d - lead];
                if (other->cdims[d] != want) {
                    ERR(c, oreg->loc,
                        "copy() of the whole tensor '%s' needs constant dims matching the tile; "
                        "give a start corner like %s[r, 0]", other->name, other->name);
                    return;
                }
            }
        } else if (slices) {
            /* extents from the slices (1 for a plain index); the non-unit extents must equal
             * the tile's non-unit dims, in order */
            int64_t ext[TS__TILE_MAX_RANK];
            for (int d = 0; d < other->rank; d++) {
                ts__tile_node *ix = oreg->list[d];
                ext[d] = 1;
                if (ix->kind == TN_SLICE && !slice_extent(c, ix, &ext[d])) {
                    ERR(c, ix->loc, "slice extent must be a compile-time constant (write lo:lo+N)");
                    return;
                }
                if (ext[d] < 1) {
                    ERR(c, ix->loc, "slice extent %lld is not positive", (long long)ext[d]);
                    return;
                }
            }
            int p = 0;
            bool ok = true;
            for (int td = 0; td < tile->rank && ok; td++) {
                map[td] = -1;
                if (tile->cdims[td] == 1) continue;
                while (p < other->rank && ext[p] == 1) p++;
                if (p >= other->rank || ext[p] != tile->cdims[td]) ok = false;
                else map[td] = p++;
            }
            while (ok && p < other->rank && ext[p] == 1) p++;
            /* a run along the tensor's last dim as long as the whole tile fills the tile in
             * row-major order (a reshape: 8 groups of 128 channels of one row as [8, 128]) */
            int64_t numel = 1, run = ext[other->rank - 1];
            for (int td = 0; td < tile->rank; td++) numel *= tile->cdims[td];
            bool flat = !(ok && p == other->rank) && tile->rank >= 2 && run == numel;
            for (int d = 0; d + 1 < other->rank && flat; d++) flat = ext[d] == 1;
            if (flat) {
                oreg->ival = TS__TILE_COPY_FLAT;
                goto types;
            }
            if (!ok || p != other->rank) {
                char es[96] = "", ts_[96] = "";
                for (int d = 0; d < other->rank; d++)
                    snprintf(es + strlen(es), sizeof es - strlen(es), "%s%lld", d ? ", " : "", (long long)ext[d]);
                for (int d = 0; d < tile->rank; d++)
                    snprintf(ts_ + strlen(ts_), sizeof ts_ - strlen(ts_), "%s%lld", d ? ", " : "", (long long)tile->cdims[d]);
                ERR(c, oreg->loc, "copy() region extents [%s] do not match tile '%s' of shape [%s]", es,
                    tile->name, ts_);
                return;
            }
        }
        /* the lowering reads the mapping from here: nibble d = tensor dim of tile dim d, plus 1 */
        oreg->ival = 0;
        for (int d = 0; d < tile->rank; d++) oreg->ival |= (int64_t)(map[d] + 1) << (4 * d);
    }
types:;
    int from = value_type(sym[0]->dt), to = sym[1]->dt;
    if (!assignable(to, from) && !(ts__tile_dt_is_narrow(value_type(to)) && from == TT_F64)) {
        ERR(c, n->loc, "copy() from '%s' to '%s' needs an explicit cast", ts__tile_dt_name(from),
            ts__tile_dt_name(value_type(to)));
        return;
    }
    ts__tile_node *fk = kwarg(n, "fill");
    if (fk) {
        if (ti != 1 || other->kind != SYM_TENSOR) {
            ERR(c, fk->loc, "fill= applies only to a copy from a tensor into a tile");
            return;
        }
        check_assign_types(c, fk->a->loc, tile->dt, expr(c, fk->a), "the fill value");
    }
}

static void check_reduce(chk *c, ts__tile_node *n) {
    static const char *const ops[] = {"sum", "max", "min", "abssum", "absmax", "and", "or", "xor", NULL};
    static const char *const kw[] = {"axis", "accumulate", "order", NULL};
    if (!n->targ || !in_list(ops, n->targ)) {
        ERR(c, n->loc, "reduce needs one of sum, max, min, abssum, absmax, and, or, xor: reduce<sum>(src, dst)");
        return;
    }
    if (!nargs(c, n, 2, 2) || !only_kwargs(c, n, kw)) return;
    ts__tile_sym *s = tile_arg(c, n, 0, "source"), *d = tile_arg(c, n, 1, "destination");
    if (!s || !d) return;
    int ax = const_axis(c, n, s->rank);
    if (ax < 0) return;
    bool acc;
    if (!const_bool_kw(c, n, "accumulate", &acc)) return;
    ts__tile_node *ok = kwarg(n, "order");
    if (ok && (ok->a->kind != TN_STRING || (strcmp(ok->a->name, "lanes8") && strcmp(ok->a->name, "serial")))) {
        ERR(c, ok->a->loc, "order must be \"lanes8\" or \"serial\"");
        return;
    }
    bool shape_ok;
    if (s->rank == 1) shape_ok = d->rank == 1 && d->cdims[0] == 1;
    else {
        shape_ok = d->rank == s->rank - 1;
        for (int i = 0, j = 0; shape_ok && i < s->rank; i++)
            if (i != ax && d->cdims[j++] != s->cdims[i]) shape_ok = false;
    }
    if (!shape_ok) {
        ERR(c, n->loc, "reduce destination '%s' must have the source shape without axis %d%s", d->name,
            ax, s->rank == 1 ? " (shape [1] for a rank-1 source)" : "");
        return;
    }
    int st = arith_type(value_type(s->dt));
    bool bitwise = n->targ[0] == 'a' && n->targ[1] == 'n' ? true : (!strcmp(n->targ, "or") || !strcmp(n->targ, "xor"));
    if (bitwise && !ts__tile_dt_is_int(st)) {
        ERR(c, n->loc, "reduce<%s> needs integer tiles, '%s' is '%s'", n->targ, s->name, ts__tile_dt_name(st));
        return;
    }
    if (st == TT_BOOL) {
        ERR(c, n->loc, "reduce over a bool tile");
        return;
    }
    if (!assignable(d->dt, st)) {
        ERR(c, n->loc, "reduce result '%s' does not fit destination '%s' of '%s'", ts__tile_dt_name(st),
            d->name, ts__tile_dt_name(d->dt));
    }
    (void)acc;
}

static void check_call_stmt(chk *c, ts__tile_node *st);

/* The call's first argument as an element x[i, ...] (n_args arguments in all, no keywords):
 * its type, or TT_ERROR after a diagnostic (`not_element` when it is not an index). */
static int element_operand(chk *c, ts__tile_node *n, int n_args, const char *not_element) {
    if (!only_kwargs(c, n, NULL) || !nargs(c, n, n_args, n_args)) return TT_ERROR;
    ts__tile_node *r = n->list[0];
    if (r->kind != TN_INDEX) {
        ERR(c, r->loc, "%s", not_element);
        return TT_ERROR;
    }
    return check_index(c, r, false);
}

static void check_tile_op(chk *c, ts__tile_node *st, ts__tile_node *n) {
    const char *f = n->name;
    if (c->in_par && !in_list(k_element_ops, f)) {
        ERR(c, n->loc, "'%s' is not allowed inside a parallel loop (tile operations act on whole tiles)", f);
        return;
    }
    if (!c->in_launch && strcmp(f, "check") && strcmp(f, "assume")) {
        ERR(c, n->loc, "'%s' is only allowed inside a launch", f);
        return;
    }
    if (!strcmp(f, "copy")) return check_copy(c, n);
    if (!strcmp(f, "reduce")) return check_reduce(c, n);
    if (!strcmp(f, "fill") || !strcmp(f, "clear")) {
        bool fill = f[0] == 'f';
        if (!only_kwargs(c, n, NULL) || !nargs(c, n, fill ? 2 : 1, fill ? 2 : 1)) return;
        ts__tile_sym *t = tile_arg(c, n, 0, "target");
        if (t && fill) check_assign_types(c, n->list[1]->loc, t->dt, expr(c, n->list[1]), "fill()");
        return;
    }
    if (!strcmp(f, "cumsum")) {
        static const char *const kw[] = {"axis", NULL};
        if (!nargs(c, n, 2, 2) || !only_kwargs(c, n, kw)) return;
        ts__tile_sym *s = tile_arg(c, n, 0, "source"), *d = tile_arg(c, n, 1, "destination");
        if (!s || !d) return;
        if (const_axis(c, n, s->rank) < 0) return;
        if (s->rank != d->rank || memcmp(s->cdims, d->cdims, sizeof s->cdims))
            ERR(c, n->loc, "cumsum() source and destination must have the same shape");
        else if (!assignable(d->dt, arith_type(value_type(s->dt))))
            ERR(c, n->loc, "cumsum() result does not fit destination '%s'", d->name);
        return;
    }
    if (!strcmp(f, "gemm")) {
        static const char *const kw[] = {"ta", "tb", "clear", NULL};
        if (!nargs(c, n, 3, 3) || !only_kwargs(c, n, kw)) return;
        ts__tile_sym *A = tile_arg(c, n, 0, "A"), *B = tile_arg(c, n, 1, "B"), *C = tile_arg(c, n, 2, "C");
        bool ta, tb, cl;
        if (!A || !B || !C || !const_bool_kw(c, n, "ta", &ta) || !const_bool_kw(c, n, "tb", &tb) ||
            !const_bool_kw(c, n, "clear", &cl))
            return;
        if (A->rank != 2 || B->rank != 2 || C->rank != 2) {
            ERR(c, n->loc, "gemm() needs rank-2 tiles");
            return;
        }
        int64_t M = ta ? A->cdims[1] : A->cdims[0], K = ta ? A->cdims[0] : A->cdims[1];
        int64_t K2 = tb ? B->cdims[1] : B->cdims[0], N = tb ? B->cdims[0] : B->cdims[1];
        if (K != K2 || C->cdims[0] != M || C->cdims[1] != N) {
            ERR(c, n->loc, "gemm() shapes do not match: A is %lldx%lld, B is %lldx%lld, C is %lldx%lld (M=%lld K=%lld N=%lld)",
                (long long)A->cdims[0], (long long)A->cdims[1], (long long)B->cdims[0], (long long)B->cdims[1],
                (long long)C->cdims[0], (long long)C->cdims[1], (long long)M, (long long)K, (long long)N);
            return;
        }
        if (C->dt != TT_F32) ERR(c, n->list[2]->loc, "gemm() accumulates in f32: C must be an f32 tile");
        for (int i = 0; i < 2; i++) {
            int dt = i ? B->dt : A->dt;
            if (dt != TT_F32 && dt != TT_BF16 && dt != TT_F16 && dt != TT_E4M3 && dt != TT_E5M2)
                ERR(c, n->list[i]->loc, "gemm() inputs must be f32, bf16, f16, e4m3 or e5m2, found '%s'", ts__tile_dt_name(dt));
        }
        return;
    }
    if (!strcmp(f, "atomic_add")) {
        int t = element_operand(c, n, 2, "atomic_add() target must be an element like x[i, j]");
        if (t == TT_ERROR) return;
        ts__tile_node *r = n->list[0];
        if (t != TT_I32 && t != TT_I64 && t != TT_F32) {
            ERR(c, r->loc, "atomic_add() supports i32, i64 and f32 elements, not '%s'", ts__tile_dt_name(t));
            return;
        }
        check_assign_types(c, n->list[1]->loc, t, expr(c, n->list[1]), "atomic_add()");
        return;
    }
    if (!strcmp(f, "prefetch")) {
        /* a hint: the element's cache line is fetched; any index, in range or not */
        if (element_operand(c, n, 1, "prefetch() needs a tensor element like x[i, j]") == TT_ERROR) return;
        ts__tile_node *r = n->list[0];
        const ts__tile_sym *s = r->a->sym;
        if (s->kind != SYM_TENSOR) ERR(c, r->loc, "prefetch() needs a tensor element, '%s' is not a tensor", s->name);
        return;
    }
    /* check / assume */
    if (!only_kwargs(c, n, NULL) || !nargs(c, n, 1, f[0] == 'c' ? 2 : 1)) return;
    int t = expr(c, n->list[0]);
    if (t != TT_ERROR && t != TT_BOOL)
        ERR(c, n->list[0]->loc, "%s() condition must be bool, found '%s'", f, ts__tile_dt_name(t));
    if (n->nlist == 2 && n->list[1]->kind != TN_STRING)
        ERR(c, n->list[1]->loc, "check() message must be a string literal");
    (void)st;
}

/* ---- macros: expansion by substitution, locals renamed for hygiene ---- */
/* The same substitution instantiates templates (tmpl): parameters are TN_TPARAM, arguments
 * are literals or dtype names; nothing is renamed (a template's names are the instance's own),
 * declaring a name of a template parameter is an error (first such declaration in shadow),
 * and dtype positions naming a dtype parameter (`tile t: A[..]`, `cast<A>`) get the dtype. */

typedef struct subst {
    ts__tile_node **params;
    ts__tile_node **args;
    int n;
    const char *locals[256]; /* macro locals in scope, innermost last */
    int nlocals;
    int id;
    bool overflow;
    bool tmpl;
    ts__tile_node *shadow;
    ts__tile_arena *a;
} subst;

static int tparam_of(const subst *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->params[i]->name, name)) return i;
    return -1;
}

/* a declared name: renamed for a macro expansion; in a template, checked against the params */
static const char *local_name(subst *s, ts__tile_node *decl, const char *name);

static void subst_dtype(subst *s, ts__tile_node *n) {
    if (!n->targ || n->dt != TT_NONE || (n->kind == TN_CALL && !strcmp(n->name, "reduce"))) return;
    int i = tparam_of(s, n->targ);
    if (i < 0 || s->params[i]->ival != TP_DTYPE || s->args[i]->kind != TN_NAME) return;
    n->dt = ts__tile_dt_from_name(s->args[i]->name);
    n->targ = n->kind == TN_CALL ? s->args[i]->name : NULL;
}

static const char *rename_local(subst *s, const char *name) {
    char buf[300];
    snprintf(buf, sizeof buf, "%s__m%d", name, s->id);
    const char *r = ts__tile_strdup(s->a, buf, strlen(buf));
    return r ? r : name;
}

static void declare_local(subst *s, const char *name) {
    if (s->nlocals < 256) s->locals[s->nlocals++] = name;
    else s->overflow = true;
}

static const char *local_name(subst *s, ts__tile_node *decl, const char *name) {
    if (s->tmpl) {
        if (!s->shadow && tparam_of(s, name) >= 0) s->shadow = decl;
        return name;
    }
    declare_local(s, name);
    return rename_local(s, name);
}

/* Substitute parameters and rename the macro's own locals, following its scopes: a name
 * means the innermost macro local declared before it, else the parameter, else whatever the
 * call site sees. */
static ts__tile_node *apply_subst(subst *s, ts__tile_node *n) {
    if (!n) return NULL;
    int mark = s->nlocals;
    if (s->tmpl) subst_dtype(s, n);
    switch (n->kind) {
    case TN_NAME:
        for (int i = s->nlocals - 1; i >= 0; i--)
            if (!strcmp(s->locals[i], n->name)) {
                n->name = rename_local(s, n->name);
                return n;
            }
        for (int i = 0; i < s->n; i++)
            if (!strcmp(s->params[i]->name, n->name)) {
                ts__tile_node *v = ts__tile_clone(s->a, s->args[i]);
                /* a template argument is reported where the parameter is used */
                if (v && s->tmpl) v->loc = n->loc;
                if (v && s->tmpl && v->a) v->a->loc = n->loc;
                return v ? v : n;
            }
        return n;
    case TN_BLOCK:
        for (int32_t i = 0; i < n->nlist; i++) n->list[i] = apply_subst(s, n->list[i]);
        s->nlocals = mark;
        return n;
    case TN_LET: case TN_VAR: case TN_TILE:
        n->a = apply_subst(s, n->a);
        for (int32_t i = 0; i < n->nlist; i++) n->list[i] = apply_subst(s, n->list[i]);
        n->name = local_name(s, n, n->name);
        return n;
    case TN_FOR: case TN_LAUNCH:
        n->a = n->kind == TN_FOR ? apply_subst(s, n->a) : n->a;
        if (n->kind == TN_LAUNCH)
            for (int32_t i = 0; i < n->nlist; i++) n->list[i] = apply_subst(s, n->list[i]);
        for (int32_t i = 0; i < n->nlist2; i++)
            n->list2[i]->name = local_name(s, n->list2[i], n->list2[i]->name);
        if (n->kind == TN_FOR) n->b = apply_subst(s, n->b);
        else n->a = apply_subst(s, n->a);
        s->nlocals = mark;
        return n;
    default:
        /* a kwarg's name is a keyword, never substituted */
        n->a = apply_subst(s, n->a);
        n->b = apply_subst(s, n->b);
        n->c = apply_subst(s, n->c);
        for (int32_t i = 0; i < n->nlist; i++) n->list[i] = apply_subst(s, n->list[i]);
        for (int32_t i = 0; i < n->nlist2; i++) n->list2[i] = apply_subst(s, n->list2[i]);
        return n;
    }
}

/* A macro called from inside another macro's body (or after a launch macro spliced into the
 * kernel): its free names resolve where the call is written, where the enclosing macro's locals
 * (renamed `name__m<id>` by their expansion) go by their source names. So a free name means the innermost symbol in scope whose source name it
 * is: the name itself, or a local of an expansion still being checked. Names of the macro's
 * own locals (renamed with its own id) are left alone. */
static bool renamed_from(const char *sym_name, const char *name, int id) {
    size_t l = strlen(name);
    char suf[24];
    snprintf(suf, sizeof suf, "__m%d", id);
    return !strncmp(sym_name, name, l) && !strcmp(sym_name + l, suf);
}
static void bind_to_callers_locals(chk *c, ts__tile_node *n, int own_id) {
    if (!n) return;
    if (n->kind == TN_NAME && n->name && !n->sym) {
        char own[24];
        snprintf(own, sizeof own, "__m%d", own_id);
        size_t l = strlen(n->name), lo = strlen(own);
        bool mine = l > lo && !strcmp(n->name + l - lo, own);
        for (ts__tile_sym *sy = c->scope; sy && !mine; sy = sy->next) {
            if (!strcmp(sy->name, n->name)) break; /* the name itself is innermost */
            bool hit = false;
            for (int d = 0; d < c->macro_depth && !hit; d++) hit = renamed_from(sy->name, n->name, c->exp_ids[d]);
            for (int d = 0; d < c->nspliced && !hit; d++) hit = renamed_from(sy->name, n->name, c->spliced_ids[d]);
            if (hit) {
                n->name = sy->name;
                break;
            }
        }
    }
    bind_to_callers_locals(c, n->a, own_id);
    bind_to_callers_locals(c, n->b, own_id);
    bind_to_callers_locals(c, n->c, own_id);
    for (int32_t i = 0; i < n->nlist; i++) bind_to_callers_locals(c, n->list[i], own_id);
    for (int32_t i = 0; i < n->nlist2; i++) bind_to_callers_locals(c, n->list2[i], own_id);
}

/* A copy of macro m's body with the call's arguments substituted and its locals renamed for a
 * new expansion *id; NULL when out of memory; *overflow when it declares too many names. */
static ts__tile_node *expansion_of(chk *c, ts__tile_node *call, const ts__tile_sym *m, int *id, bool *overflow) {
    ts__tile_node *def = m->decl, *body = ts__tile_clone(c->a, def->a);
    subst *s = ts__tile_alloc(c->a, sizeof *s);
    if (!body || !s) return NULL;
    *s = (subst){.params = def->list, .args = call->list, .n = def->nlist, .id = ++c->expansions, .a = c->a};
    body = apply_subst(s, body);
    *id = s->id, *overflow = s->overflow;
    return body;
}

/* A copy of template kernel tk (parameters and body) with args substituted for its template
 * parameters; NULL when out of memory. *shadow: the first declaration of a template
 * parameter's name, if any. */
static ts__tile_node *instance_copy(chk *c, const ts__tile_node *tk, ts__tile_node **args, ts__tile_node **shadow) {
    ts__tile_node *k = ts__tile_clone(c->a, tk);
    subst *s = ts__tile_alloc(c->a, sizeof *s);
    if (!k || !s) return NULL;
    *s = (subst){.params = tk->list2, .args = args, .n = tk->nlist2, .tmpl = true, .a = c->a};
    for (int32_t i = 0; i < k->nlist; i++) k->list[i] = apply_subst(s, k->list[i]);
    k->a = apply_subst(s, k->a);
    *shadow = s->shadow;
    return k;
}

static void expand_macro(chk *c, ts__tile_node *st, ts__tile_node *call, ts__tile_sym *m) {
    ts__tile_node *def = m->decl;
    if (call->nlist != def->nlist || call->nlist2) {
        ERR(c, call->loc, "macro '%s' takes %d arguments, %d given", m->name, (int)def->nlist,
            (int)call->nlist + (int)call->nlist2);
        return;
    }
    if (c->macro_depth >= TS__TILE_MAX_MACRO_DEPTH || c->expansions > 100000) {
        ERR(c, call->loc, "macro expansion too deep (is '%s' recursive?)", m->name);
        return;
    }
    int id;
    bool overflow;
    ts__tile_node *body = expansion_of(c, call, m, &id, &overflow);
    if (!body) {
        ERR(c, call->loc, "program too large (compiler memory limit reached)");
        return;
    }
    if (overflow) {
        ERR(c, call->loc, "macro '%s' declares too many names (limit 256)", m->name);
        return;
    }
    if (c->macro_depth > 0 || c->nspliced > 0) bind_to_callers_locals(c, body, id);
    /* The call statement becomes the expanded block, so lowering and printing see it. */
    st->kind = TN_BLOCK;
    st->a = NULL;
    st->list = body->list;
    st->nlist = body->nlist;
    c->exp_ids[c->macro_depth] = id;
    c->macro_depth++;
    block(c, st);
    c->macro_depth--;
}

/* Kernel-body statements that call a macro with a launch among its top-level statements are
 * expanded in place before checking (the same renaming as any expansion), so that each launch
 * is a top-level statement of the kernel as lowering and emission expect. Calls with a wrong
 * argument count, and runaway recursion, are left to the checker, which reports them. */
static bool has_top_launch(const ts__tile_node *blk) {
    for (int32_t i = 0; blk && i < blk->nlist; i++)
        if (blk->list[i]->kind == TN_LAUNCH) return true;
    return false;
}
static void splice_launch_macros(chk *c, ts__tile_node *body) {
    int spliced = 0;
    for (int32_t i = 0; i < body->nlist && spliced < 64; i++) {
        ts__tile_node *st = body->list[i];
        if (st->kind != TN_CALLSTMT) continue;
        ts__tile_node *call = st->a;
        ts__tile_sym *m = lookup(c, call->name);
        if (!m || m->kind != SYM_MACRO || !has_top_launch(m->decl->a)) continue;
        ts__tile_node *def = m->decl;
        if (call->nlist != def->nlist || call->nlist2) continue;
        int id;
        bool overflow;
        ts__tile_node *x = expansion_of(c, call, m, &id, &overflow);
        if (!x) return;
        if (overflow) continue;
        int32_t n = body->nlist - 1 + x->nlist;
        ts__tile_node **l = ts__tile_alloc(c->a, (size_t)(n > 0 ? n : 1) * sizeof *l);
        if (!l) return;
        int32_t k = 0;
        for (int32_t j = 0; j < i; j++) l[k++] = body->list[j];
        for (int32_t j = 0; j < x->nlist; j++) l[k++] = x->list[j];
        for (int32_t j = i + 1; j < body->nlist; j++) l[k++] = body->list[j];
        body->list = l, body->nlist = n;
        if (c->nspliced < 64) c->spliced_ids[c->nspliced++] = id;
        spliced++;
        i--; /* the expansion may itself start with such a call */
    }
}

static void check_call_stmt(chk *c, ts__tile_node *st) {
    ts__tile_node *n = st->a;
    ts__tile_sym *m = lookup(c, n->name);
    if (m && m->kind == SYM_MACRO) {
        expand_macro(c, st, n, m);
        return;
    }
    if (in_list(k_tile_ops, n->name)) {
        check_tile_op(c, st, n);
        return;
    }
    int t = expr(c, n);
    if (t != TT_ERROR) ERR(c, n->loc, "result of %s() is unused", n->name);
}

static void check_for(chk *c, ts__tile_node *n) {
    ts__tile_node *it = n->a;
    const char *f = it->name;
    bool par = !strcmp(f, "parallel");
    bool ser = !strcmp(f, "serial") || !strcmp(f, "unroll");
    bool pipe = !strcmp(f, "pipelined");
    if (!par && !ser && !pipe) {
        ERR(c, it->loc, "unknown loop form '%s' (parallel, serial, unroll, pipelined)", f);
        return;
    }
    if (!c->in_launch) {
        ERR(c, n->loc, "loops are only allowed inside a launch");
        return;
    }
    static const char *const pkw[] = {"stages", NULL};
    if (!only_kwargs(c, it, pipe ? pkw : NULL)) return;
    if (par) {
        if (it->nlist != n->nlist2) {
            ERR(c, it->loc, "parallel() has %d extents for %d loop variables", (int)it->nlist, (int)n->nlist2);
            return;
        }
    } else {
        if (n->nlist2 != 1) {
            ERR(c, n->list2[1]->loc, "%s() loops have one variable", f);
            return;
        }
        if (it->nlist < 1 || it->nlist > (pipe ? 1 : 3)) {
            ERR(c, it->loc, pipe ? "pipelined() takes one extent and stages=N" : "%s() takes 1 to 3 arguments (stop | start, stop | start, stop, step)", f);
            return;
        }
        if (it->nlist == 3) {
            int64_t step;
            if (!cfold(c, it->list[2], &step) || step == 0) {
                ERR(c, it->list[2]->loc, "loop step must be a non-zero compile-time integer");
                return;
            }
        }
        ts__tile_node *sk = kwarg(it, "stages");
        int64_t stv;
        if (sk && (!cfold(c, sk->a, &stv) || stv < 1)) {
            ERR(c, sk->a->loc, "stages must be a positive compile-time integer");
            return;
        }
    }
    for (int32_t i = 0; i < it->nlist; i++) {
        int t = expr(c, it->list[i]);
        if (t != TT_ERROR && !ts__tile_dt_is_int(t)) {
            ERR(c, it->list[i]->loc, "loop bounds must be integers, found '%s'", ts__tile_dt_name(t));
            return;
        }
    }
    int d = c->depth;
    c->depth++;
    bool save_par = c->in_par;
    int save_scope = c->par_scope, save_npar = c->npar_vars;
    uint64_t save_single = c->par_single;
    if (par) {
        c->in_par = true;
        c->par_scope = c->depth;
    } else c->loop_depth++;
    for (int32_t i = 0; i < n->nlist2; i++) {
        ts__tile_sym *s = declare(c, SYM_LOOPVAR, n->list2[i]->name, n->list2[i]);
        if (!s) continue;
        s->dt = TT_I64;
        s->loop_kind = par;
        n->list2[i]->sym = s;
        if (par && c->npar_vars < 64) {
            s->deps = (uint64_t)1 << c->npar_vars;
            int64_t ext;
            if (n->nlist2 == it->nlist && cfold(c, it->list[i], &ext) && ext == 1) c->par_single |= s->deps;
            c->par_vars[c->npar_vars++] = s;
        } else if (!par) {
            s->deps = 0;
        }
    }
    int save_loop = c->loop_depth;
    if (par) c->loop_depth = 0; /* break/continue cannot leave a parallel iteration */
    block(c, n->b);
    c->loop_depth = save_loop;
    if (!par) c->loop_depth--;
    c->in_par = save_par;
    c->par_scope = save_scope;
    c->npar_vars = save_npar;
    c->par_single = save_single;
    pop_to(c, d);
}

static void stmt(chk *c, ts__tile_node *n) {
    if (!n) return;
    if (++c->rec > 4 * TS__TILE_MAX_DEPTH) {
        c->rec--;
        ERR(c, n->loc, "statements nested too deep");
        return;
    }
    switch (n->kind) {
    case TN_BLOCK: block(c, n); break;
    case TN_LAUNCH: {
        if (c->in_launch) {
            ERR(c, n->loc, "launch cannot be nested");
            break;
        }
        if (c->depth != 2) {
            ERR(c, n->loc, "launch must be a top-level statement of the kernel");
            break;
        }
        if (n->nlist < 1 || n->nlist > 3 || n->nlist != n->nlist2) {
            ERR(c, n->loc, "launch takes 1 to 3 grid extents and as many block index names (%d and %d given)",
                (int)n->nlist, (int)n->nlist2);
            break;
        }
        for (int32_t i = 0; i < n->nlist; i++) {
            int t = expr(c, n->list[i]);
            if (t != TT_ERROR && !ts__tile_dt_is_int(t))
                ERR(c, n->list[i]->loc, "grid extent must be an integer, found '%s'", ts__tile_dt_name(t));
        }
        int d = c->depth;
        c->depth++;
        for (int32_t i = 0; i < n->nlist2; i++) {
            ts__tile_sym *s = declare(c, SYM_GRIDVAR, n->list2[i]->name, n->list2[i]);
            if (s) s->dt = TT_I64, n->list2[i]->sym = s;
        }
        c->in_launch = true;
        block(c, n->a);
        c->in_launch = false;
        pop_to(c, d);
        break;
    }
    case TN_TILE: {
        if (!c->in_launch) {
            ERR(c, n->loc, "tiles can only be allocated inside a launch");
            break;
        }
        if (c->in_par) {
            ERR(c, n->loc, "tile allocation is not allowed inside a parallel loop");
            break;
        }
        if (n->nlist < 1 || n->nlist > TS__TILE_MAX_RANK) {
            ERR(c, n->loc, "tile rank %d is outside 1..%d", (int)n->nlist, TS__TILE_MAX_RANK);
            break;
        }
        if (n->dt >= TT_E2M1X2 && n->dt <= TT_E5M6X8) {
            ERR(c, n->loc, "packed dtype '%s' is for tensors only; use '%s' tiles", ts__tile_dt_name(n->dt),
                ts__tile_dt_name(ts__tile_dt_packed_raw(n->dt)));
            break;
        }
        int64_t dims[TS__TILE_MAX_RANK], total = 1;
        bool ok = true;
        for (int32_t i = 0; i < n->nlist && ok; i++) {
            if (!cfold(c, n->list[i], &dims[i]) || dims[i] <= 0) {
                ERR(c, n->list[i]->loc, "tile dimension must be a positive compile-time integer");
                ok = false;
            } else if (__builtin_mul_overflow(total, dims[i], &total) || total > TS__TILE_MAX_TILE_ELEMS) {
                ERR(c, n->list[i]->loc, "tile '%s' is too large (limit %lld elements)", n->name,
                    (long long)TS__TILE_MAX_TILE_ELEMS);
                ok = false;
            }
        }
        if (!ok) break;
        ts__tile_sym *s = declare(c, SYM_TILE, n->name, n);
        if (!s) break;
        s->dt = n->dt;
        s->rank = (int)n->nlist;
        for (int i = 0; i < s->rank; i++) s->cdims[i] = dims[i];
        n->sym = s;
        break;
    }
    case TN_LET: {
        int t = expr(c, n->a);
        if (t == TT_STRING || t == TT_VOID) {
            ERR(c, n->a->loc, "cannot bind a %s", ts__tile_dt_name(t));
            t = TT_ERROR;
        }
        ts__tile_sym *s = declare(c, SYM_LET, n->name, n);
        if (!s) break;
        s->dt = t == TT_INTLIT ? TT_I64 : t == TT_FLOATLIT ? TT_F32 : arith_type(t);
        int64_t v;
        if (cfold(c, n->a, &v)) s->is_const_int = true, s->ival = v;
        s->deps = deps_of(c, n->a);
        s->index = c->in_launch ? 0 : 1; /* kernel-level lets are computed by the wrapper */
        n->sym = s;
        n->ty = s->dt;
        break;
    }
    case TN_VAR: {
        if (!c->in_launch) {
            ERR(c, n->loc, "variables can only be declared inside a launch (use let)");
            break;
        }
        if (n->dt >= TT_E2M1X2 && n->dt <= TT_E5M6X8) {
            ERR(c, n->loc, "packed dtype '%s' cannot be a variable type", ts__tile_dt_name(n->dt));
            break;
        }
        if (n->a) check_assign_types(c, n->a->loc, n->dt, expr(c, n->a), "an initialisation");
        ts__tile_sym *s = declare(c, SYM_VAR, n->name, n);
        if (!s) break;
        s->dt = n->dt;
        n->sym = s;
        break;
    }
    case TN_ASSIGN: {
        if (!c->in_launch) {
            ERR(c, n->loc, "assignments are only allowed inside a launch");
            break;
        }
        ts__tile_node *lhs = n->a;
        int lt;
        if (lhs->kind == TN_NAME) {
            ts__tile_sym *s = lookup(c, lhs->name);
            if (!s) {
                ERR(c, lhs->loc, "unknown name '%s'", lhs->name);
                break;
            }
            lhs->sym = s;
            if (s->kind != SYM_VAR) {
                ERR(c, lhs->loc, "cannot assign to '%s': only 'var' variables and elements are assignable",
                    s->name);
                break;
            }
            lt = s->dt;
            lhs->ty = lt;
        } else {
            lt = expr(c, lhs);
            if (lt == TT_ERROR) break;
        }
        int rt = expr(c, n->b);
        if (n->op != TO_SET) {
            int t = unify(c, n->loc, lt, rt, "compound assignment");
            if (t == TT_ERROR) break;
            if ((n->op == TO_MOD || n->op == TO_BAND || n->op == TO_BOR || n->op == TO_BXOR) &&
                !ts__tile_dt_is_int(t)) {
                ERR(c, n->loc, "'%s=' needs integer operands", ts__tile_op_str(n->op));
                break;
            }
            rt = t;
        }
        int target_dt = lhs->kind == TN_NAME ? lt : lhs->sym ? ((ts__tile_sym *)lhs->sym)->dt : lt;
        check_assign_types(c, n->b->loc, target_dt, rt, "an assignment");
        check_race_write(c, lhs, n->loc);
        break;
    }
    case TN_FOR: check_for(c, n); break;
    case TN_IF: case TN_WHILE: {
        if (!c->in_launch) {
            ERR(c, n->loc, "control flow is only allowed inside a launch");
            break;
        }
        int t = expr(c, n->a);
        if (t != TT_ERROR && t != TT_BOOL)
            ERR(c, n->a->loc, "condition must be bool, found '%s'", ts__tile_dt_name(t));
        if (n->kind == TN_WHILE) c->loop_depth++;
        block(c, n->b);
        if (n->kind == TN_WHILE) c->loop_depth--;
        if (n->c) stmt(c, n->c);
        break;
    }
    case TN_BREAK: case TN_CONTINUE:
        if (c->loop_depth <= 0)
            ERR(c, n->loc, "'%s' outside a serial loop%s", n->kind == TN_BREAK ? "break" : "continue",
                c->in_par ? " (a parallel iteration cannot be left early)" : "");
        break;
    case TN_CALLSTMT: check_call_stmt(c, n); break;
    default: ERR(c, n->loc, "not a statement");
    }
    c->rec--;
}

/* ---------------- kernels and module ---------------- */

static ts__tile_sym *dim_symbol(chk *c, ts__tile_node *dn, int kind, int64_t *cval) {
    *cval = -1;
    if (dn->kind == TN_INT) {
        *cval = dn->ival;
        return NULL;
    }
    ts__tile_sym *s = lookup(c, dn->name);
    if (s && s->kind == SYM_CONST && s->is_const_int) {
        *cval = s->ival;
        return NULL;
    }
    if (s && (s->kind == SYM_DIM || s->kind == SYM_STRIDE) && s->depth == c->depth) return s;
    s = declare(c, kind, dn->name, dn);
    if (!s) return NULL;
    s->dt = TT_I64;
    if (c->k->ndims < 64) c->dims_list[c->k->ndims++] = s;
    else ERR(c, dn->loc, "too many symbolic dimensions (limit 64)");
    return s;
}

static void check_kernel(chk *c, ts__tile_node *kn, ts__tile_kernel *k) {
    k->decl = kn;
    c->k = k;
    int d0 = c->depth;
    c->depth++;
    k->params = ts__tile_alloc(c->a, (size_t)(kn->nlist + 1) * sizeof *k->params);
    if (!k->params) {
        ERR(c, kn->loc, "program too large (compiler memory limit reached)");
        return;
    }
    for (int32_t i = 0; i < kn->nlist; i++) {
        ts__tile_node *p = kn->list[i];
        if (p->scope) {
            if (ts__tile_dt_to_ts(p->dt) < 0) {
                ERR(c, p->loc, "dtype '%s' has no tensor storage (no ts_dtype for it)", ts__tile_dt_name(p->dt));
                continue;
            }
            if (p->nlist < 1 || p->nlist > TS__TILE_MAX_RANK) {
                ERR(c, p->loc, "tensor rank %d is outside 1..%d", (int)p->nlist, TS__TILE_MAX_RANK);
                continue;
            }
            if (p->nlist2 && p->nlist2 != p->nlist) {
                ERR(c, p->list2[0]->loc, "tensor '%s' has %d dims but %d strides", p->name, (int)p->nlist,
                    (int)p->nlist2);
                continue;
            }
        } else if (p->dt != TT_BOOL && !ts__tile_dt_is_int(p->dt) && p->dt != TT_F32 && p->dt != TT_F64) {
            ERR(c, p->loc, "scalar parameter '%s' must be bool, an integer, f32 or f64", p->name);
            continue;
        }
        /* dims first, so `x: tensor<f32, [N]>` can reuse N across parameters */
        ts__tile_sym *dsyms[TS__TILE_MAX_RANK] = {0}, *ssyms[TS__TILE_MAX_RANK] = {0};
        int64_t cd[TS__TILE_MAX_RANK], cs[TS__TILE_MAX_RANK];
        if (p->scope) {
            for (int32_t j = 0; j < p->nlist; j++) dsyms[j] = dim_symbol(c, p->list[j], SYM_DIM, &cd[j]);
            for (int32_t j = 0; j < p->nlist2; j++) ssyms[j] = dim_symbol(c, p->list2[j], SYM_STRIDE, &cs[j]);
        }
        ts__tile_sym *s = declare(c, p->scope ? SYM_TENSOR : SYM_SCALAR, p->name, p);
        if (!s) continue;
        s->dt = p->dt;
        s->index = k->nparams;
        p->sym = s;
        if (p->scope) {
            s->rank = (int)p->nlist;
            s->strided = p->nlist2 > 0;
            for (int j = 0; j < s->rank; j++) {
                s->cdims[j] = cd[j];
                s->dimsym[j] = dsyms[j];
                if (s->strided) s->cstrides[j] = cs[j], s->stridesym[j] = ssyms[j];
            }
        }
        k->params[k->nparams++] = s;
    }
    k->dims = ts__tile_alloc(c->a, (size_t)(k->ndims + 1) * sizeof *k->dims);
    if (k->dims) memcpy(k->dims, c->dims_list, (size_t)k->ndims * sizeof *k->dims);
    k->body = ts__tile_clone(c->a, kn->a);
    if (!k->body) {
        ERR(c, kn->loc, "program too large (compiler memory limit reached)");
        return;
    }
    c->nspliced = 0;
    splice_launch_macros(c, k->body);
    bool has_launch = has_top_launch(k->body);
    block(c, k->body);
    if (!has_launch) ERR(c, kn->loc, "kernel '%s' has no launch", kn->name);
    pop_to(c, d0);
}

/* ---------------- templates ---------------- */

/* Value of an expression made of literals and dtype names only (template arguments after
 * substitution): CV_NONE when it is not such a constant. */
enum { CV_NONE, CV_INT, CV_BOOL, CV_DTYPE };
static int tconst(const ts__tile_node *n, int64_t *v, int depth) {
    if (!n || depth > 4 * TS__TILE_MAX_DEPTH) return CV_NONE;
    int64_t x, y;
    switch (n->kind) {
    case TN_INT: *v = n->ival; return CV_INT;
    case TN_BOOL: *v = n->ival != 0; return CV_BOOL;
    case TN_NAME: return (*v = ts__tile_dt_from_name(n->name)) != TT_NONE ? CV_DTYPE : CV_NONE;
    case TN_UNARY: {
        int k = tconst(n->a, &x, depth + 1);
        if (n->op == TO_NOT && k == CV_BOOL) return *v = !x, CV_BOOL;
        if (n->op == TO_NEG && k == CV_INT && x != INT64_MIN) return *v = -x, CV_INT;
        if (n->op == TO_BNOT && k == CV_INT) return *v = ~x, CV_INT;
        return CV_NONE;
    }
    case TN_BINARY: {
        int kx = tconst(n->a, &x, depth + 1), ky = tconst(n->b, &y, depth + 1);
        if (kx == CV_NONE || kx != ky) return CV_NONE;
        switch (n->op) {
        case TO_EQ: return *v = x == y, CV_BOOL;
        case TO_NE: return *v = x != y, CV_BOOL;
        default: break;
        }
        if (kx == CV_BOOL) {
            if (n->op == TO_LAND) return *v = x && y, CV_BOOL;
            if (n->op == TO_LOR) return *v = x || y, CV_BOOL;
            return CV_NONE;
        }
        if (kx != CV_INT) return CV_NONE;
        switch (n->op) {
        case TO_LT: return *v = x < y, CV_BOOL;
        case TO_LE: return *v = x <= y, CV_BOOL;
        case TO_GT: return *v = x > y, CV_BOOL;
        case TO_GE: return *v = x >= y, CV_BOOL;
        case TO_ADD: return __builtin_add_overflow(x, y, v) ? CV_NONE : CV_INT;
        case TO_SUB: return __builtin_sub_overflow(x, y, v) ? CV_NONE : CV_INT;
        case TO_MUL: return __builtin_mul_overflow(x, y, v) ? CV_NONE : CV_INT;
        case TO_DIV: return y == 0 || (x == INT64_MIN && y == -1) ? CV_NONE : (*v = x / y, CV_INT);
        case TO_MOD: return y == 0 || (x == INT64_MIN && y == -1) ? CV_NONE : (*v = x % y, CV_INT);
        default: return CV_NONE;
        }
    }
    default: return CV_NONE;
    }
}

/* Resolve, in the statements of blk and every block inside, each `if` whose condition is a
 * constant bool: the statement is replaced by the taken branch's statements, spliced into
 * the enclosing block (no scope of its own, like D's `static if`), or by nothing. */
static bool resolve_static_ifs(chk *c, ts__tile_node *blk);

static bool resolve_in(chk *c, ts__tile_node *st) {
    if (!st) return true;
    switch (st->kind) {
    case TN_BLOCK: return resolve_static_ifs(c, st);
    case TN_LAUNCH: return resolve_in(c, st->a);
    case TN_FOR: case TN_WHILE: return resolve_in(c, st->b);
    case TN_IF: {
        if (!resolve_in(c, st->b)) return false;
        if (st->c && st->c->kind == TN_IF) {
            /* an `else if` chain whose later conditions are constant */
            ts__tile_node *w = ts__tile_node_new(c->a, TN_BLOCK, st->c->loc);
            ts__tile_node **l = ts__tile_alloc(c->a, sizeof *l);
            if (!w || !l) return false;
            l[0] = st->c;
            w->list = l, w->nlist = 1;
            if (!resolve_static_ifs(c, w)) return false;
            st->c = w->nlist == 0 ? NULL : w->nlist == 1 && w->list[0] == l[0] ? w->list[0] : w;
            return true;
        }
        return resolve_in(c, st->c);
    }
    default: return true;
    }
}

static bool resolve_static_ifs(chk *c, ts__tile_node *blk) {
    if (++c->rec > 4 * TS__TILE_MAX_DEPTH) {
        c->rec--;
        return true; /* the checker reports the depth */
    }
    bool ok = true;
    int32_t n = 0, cap = blk->nlist + 8;
    ts__tile_node **l = ts__tile_alloc(c->a, (size_t)cap * sizeof *l);
    if (!l) ok = false;
    for (int32_t i = 0; ok && i < blk->nlist; i++) {
        ts__tile_node *st = blk->list[i];
        int64_t v;
        ts__tile_node *taken = NULL;
        bool resolved = st->kind == TN_IF && tconst(st->a, &v, 0) == CV_BOOL;
        if (resolved) {
            taken = v ? st->b : st->c;
            if (taken && taken->kind == TN_IF) {
                ts__tile_node *w = ts__tile_node_new(c->a, TN_BLOCK, taken->loc);
                ts__tile_node **one = ts__tile_alloc(c->a, sizeof *one);
                if (!w || !one) {
                    ok = false;
                    break;
                }
                one[0] = taken;
                w->list = one, w->nlist = 1;
                taken = w;
            }
            if (taken && !(ok = resolve_static_ifs(c, taken))) break;
        } else if (!(ok = resolve_in(c, st))) break;
        int32_t add = resolved ? (taken ? taken->nlist : 0) : 1;
        if (n + add > cap) {
            int32_t ncap = 2 * (n + add);
            ts__tile_node **nl = ts__tile_alloc(c->a, (size_t)ncap * sizeof *nl);
            if (!nl) {
                ok = false;
                break;
            }
            memcpy(nl, l, (size_t)n * sizeof *nl);
            l = nl, cap = ncap;
        }
        if (!resolved) l[n++] = st;
        else
            for (int32_t j = 0; j < add; j++) l[n++] = taken->list[j];
    }
    if (ok) blk->list = l, blk->nlist = n;
    c->rec--;
    return ok;
}

static const char *const k_tparam_kinds[] = {"a dtype", "an int", "a bool"};

/* Registers template tk (a kernel with template parameters): nothing is checked or emitted
 * until an instance names it. */
static void declare_template(chk *c, ts__tile_node *tk) {
    for (int32_t i = 0; i < tk->nlist2; i++) {
        const char *pn = tk->list2[i]->name;
        if (ts__tile_dt_from_name(pn) != TT_NONE || (pn[0] == '_' && pn[1] == '_')) {
            ERR(c, tk->list2[i]->loc, "template parameter '%s' has the name of a dtype or a reserved name", pn);
            return;
        }
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(tk->list2[i]->name, tk->list2[j]->name)) {
                ERR(c, tk->list2[i]->loc, "template parameter '%s' redefined", tk->list2[i]->name);
                return;
            }
        for (int32_t j = 0; j < tk->nlist; j++)
            if (!strcmp(tk->list[j]->name, tk->list2[i]->name)) {
                ERR(c, tk->list[j]->loc, "parameter '%s' has the name of a template parameter", tk->list[j]->name);
                return;
            }
    }
    ts__tile_sym *s = declare(c, SYM_TEMPLATE, tk->name, tk);
    if (s) tk->sym = s;
}

/* The literal node of an integer template argument (negative values as `-k`, so that the
 * printed IR re-parses to the same tree). */
static ts__tile_node *int_node(chk *c, ts__tile_loc loc, int64_t v) {
    ts__tile_node *n = ts__tile_node_new(c->a, TN_INT, loc);
    if (!n || v >= 0) return n ? (n->ival = v, n) : NULL;
    if (v == INT64_MIN) {
        /* -(2^63 - 1) - 1 */
        ts__tile_node *b = ts__tile_node_new(c->a, TN_BINARY, loc), *one = int_node(c, loc, 1);
        if (!b || !one) return NULL;
        b->op = TO_SUB, b->a = int_node(c, loc, -INT64_MAX), b->b = one;
        return b->a ? b : NULL;
    }
    ts__tile_node *u = ts__tile_node_new(c->a, TN_UNARY, loc);
    if (!u) return NULL;
    n->ival = -v;
    u->op = TO_NEG, u->a = n;
    return u;
}

/* The kernel of `instance name = tmpl<args>`: arguments checked against the template's
 * parameters, substituted, optional parameters and constant `if`s resolved. NULL after an
 * error (or out of memory, reported). */
static ts__tile_node *instantiate(chk *c, ts__tile_node *inst, const ts__tile_program *out) {
    const char *tn = inst->a->name;
    ts__tile_sym *ts = lookup(c, tn);
    if (!ts || ts->kind != SYM_TEMPLATE) {
        bool kern = false;
        for (int j = 0; j < out->nkernels; j++) kern |= !strcmp(out->kernels[j].decl->name, tn);
        if (kern) ERR(c, inst->a->loc, "'%s' is a kernel, not a template", tn);
        else if (ts) ERR(c, inst->a->loc, "'%s' is not a template", tn);
        else ERR(c, inst->a->loc, "unknown template '%s'", tn);
        return NULL;
    }
    ts__tile_node *tk = ts->decl;
    if (inst->nlist != tk->nlist2) {
        ERR(c, inst->a->loc, "template '%s' takes %d argument%s, %d given", tn, (int)tk->nlist2,
            tk->nlist2 == 1 ? "" : "s", (int)inst->nlist);
        return NULL;
    }
    ts__tile_node **args = ts__tile_alloc(c->a, (size_t)(inst->nlist + 1) * sizeof *args);
    if (!args) goto oom;
    bool ok = true;
    for (int32_t i = 0; i < inst->nlist; i++) {
        ts__tile_node *p = tk->list2[i], *x = inst->list[i];
        int kind = (int)p->ival;
        bool is_dt = x->kind == TN_NAME && ts__tile_dt_from_name(x->name) != TT_NONE;
        int64_t v = 0;
        int kv = tconst(x, &v, 0);
        if (kind == TP_DTYPE) {
            if (is_dt) args[i] = x;
            else if (kv == CV_INT || kv == CV_BOOL || cfold(c, x, &v))
                ERR(c, x->loc, "template parameter '%s' of '%s' is a dtype, found %s", p->name, tn,
                    kv == CV_BOOL ? "a bool" : "an integer");
            else ERR(c, x->loc, "template parameter '%s' of '%s' needs a dtype name", p->name, tn);
        } else if (is_dt) {
            ERR(c, x->loc, "template parameter '%s' of '%s' is %s, found dtype '%s'", p->name, tn,
                k_tparam_kinds[kind], x->name);
        } else if (kind == TP_INT) {
            if (kv == CV_BOOL) ERR(c, x->loc, "template parameter '%s' of '%s' is an int, found a bool", p->name, tn);
            else if (!cfold(c, x, &v))
                ERR(c, x->loc, "template parameter '%s' of '%s' needs a compile-time integer", p->name, tn);
            else if (!(args[i] = int_node(c, x->loc, v))) goto oom;
        } else {
            if (kv == CV_BOOL) {
                args[i] = ts__tile_node_new(c->a, TN_BOOL, x->loc);
                if (!args[i]) goto oom;
                args[i]->ival = v;
            } else if (kv == CV_INT || cfold(c, x, &v))
                ERR(c, x->loc, "template parameter '%s' of '%s' is a bool, found an integer", p->name, tn);
            else ERR(c, x->loc, "template parameter '%s' of '%s' needs true or false", p->name, tn);
        }
        ok = ok && args[i];
    }
    if (!ok) return NULL;
    /* from here on errors are in the template's text: each gets a note naming the instance
     * (check_module clears it after checking the kernel) */
    char note[600];
    snprintf(note, sizeof note, "in instance '%s' of template '%s'", inst->name, tn);
    c->d->note = ts__tile_strdup(c->a, note, strlen(note));
    c->d->note_loc = inst->loc;
    ts__tile_node *shadow = NULL, *k = instance_copy(c, tk, args, &shadow);
    if (!k) goto oom;
    if (shadow) {
        ERR(c, shadow->loc, "'%s' has the name of a template parameter of '%s'", shadow->name, tn);
        return NULL;
    }
    /* optional parameters: kept when their condition holds */
    int32_t np = 0;
    for (int32_t i = 0; i < k->nlist; i++) {
        ts__tile_node *p = k->list[i];
        int64_t v;
        /* a dim or stride that was an int parameter must still be what the parser allows */
        for (int32_t j = 0; j < p->nlist + p->nlist2; j++) {
            ts__tile_node *dn = j < p->nlist ? p->list[j] : p->list2[j - p->nlist];
            if (!(dn->kind == TN_INT && dn->ival >= 0) &&
                !(dn->kind == TN_NAME && ts__tile_dt_from_name(dn->name) == TT_NONE)) {
                ERR(c, dn->loc, "a %s of '%s' must be a name or an integer >= 0", j < p->nlist ? "dimension" : "stride",
                    p->name);
                ok = false;
                break;
            }
        }
        if (p->a) {
            if (tconst(p->a, &v, 0) != CV_BOOL) {
                ERR(c, p->a->loc, "the condition of parameter '%s' must be a constant bool "
                    "(template parameters, literals, dtype comparisons)", p->name);
                ok = false;
                continue;
            }
            p->a = NULL;
            if (!v) continue;
        }
        k->list[np++] = p;
    }
    k->nlist = np;
    if (!ok) return NULL;
    if (!resolve_static_ifs(c, k->a)) goto oom;
    k->name = inst->name;
    k->list2 = NULL;
    k->nlist2 = 0;
    return k;
oom:
    ERR(c, inst->loc, "program too large (compiler memory limit reached)");
    return NULL;
}

static bool check_module(chk *c, ts__tile_node *m, ts__tile_program *out) {
    memset(out, 0, sizeof *out);
    /* the checked module: templates dropped, instances replaced by their kernels (the lowering
     * rebuilds it with the kernels in this order) */
    ts__tile_node *cm = ts__tile_node_new(c->a, TN_MODULE, m->loc);
    if (cm) cm->list = ts__tile_alloc(c->a, (size_t)(m->nlist + 1) * sizeof *cm->list);
    out->module = cm;
    int nk = 0;
    for (int32_t i = 0; i < m->nlist; i++) nk += m->list[i]->kind == TN_KERNEL || m->list[i]->kind == TN_INSTANCE;
    out->kernels = ts__tile_alloc(c->a, (size_t)(nk + 1) * sizeof *out->kernels);
    if (!out->kernels || !cm || !cm->list) {
        ERR(c, m->loc, "program too large (compiler memory limit reached)");
        return false;
    }
    c->depth = 0;
    for (int32_t i = 0; i < m->nlist && !c->d->stopped; i++) {
        ts__tile_node *it = m->list[i];
        if (it->kind == TN_CONST) {
            int t = expr(c, it->a);
            ts__tile_sym *s = declare(c, SYM_CONST, it->name, it);
            if (!s) continue;
            int64_t v;
            if (cfold(c, it->a, &v)) {
                s->is_const_int = true;
                s->ival = v;
                s->dt = TT_INTLIT;
            } else if (it->a->kind == TN_FLOAT || (it->a->kind == TN_UNARY && it->a->op == TO_NEG &&
                                                   it->a->a->kind == TN_FLOAT)) {
                s->fval = it->a->kind == TN_FLOAT ? it->a->fval : -it->a->a->fval;
                s->dt = TT_FLOATLIT;
            } else if (t != TT_ERROR) {
                const ts__tile_node *at = it->a;
                const char *why = NULL;
                if (cfold_explain(c, it->a, &v, &why, &at) < 0)
                    ERR(c, at->loc, "%s in the value of constant '%s' (line %d)", why, it->name, (int)at->loc.line);
                else
                    ERR(c, it->a->loc, "constant '%s' must be a compile-time integer or a float literal", it->name);
            }
            it->sym = s;
        } else if (it->kind == TN_MACRO) {
            ts__tile_sym *s = declare(c, SYM_MACRO, it->name, it);
            if (s) it->sym = s;
        } else if (it->kind == TN_KERNEL && it->nlist2) {
            declare_template(c, it);
            continue;
        } else if (it->kind == TN_KERNEL || it->kind == TN_INSTANCE) {
            ts__tile_node *k = it;
            for (int32_t j = 0; j < out->nkernels; j++)
                if (!strcmp(out->kernels[j].decl->name, it->name)) {
                    if (it->kind == TN_INSTANCE)
                        ERR(c, it->loc, "instance '%s': a kernel named '%s' is already defined", it->name, it->name);
                    else ERR(c, it->loc, "kernel '%s' redefined", it->name);
                    goto next;
                }
            if (it->kind == TN_INSTANCE && !(k = instantiate(c, it, out))) {
                c->d->note = NULL;
                goto next;
            }
            check_kernel(c, k, &out->kernels[out->nkernels++]);
            c->d->note = NULL;
            it = k;
        }
        cm->list[cm->nlist++] = it;
    next:;
    }
    out->consts = c->scope;
    return c->d->nerrors == 0;
}

bool ts__tile_check(ts__tile_arena *a, ts__tile_diag *d, ts__tile_node *module, ts__tile_program *out) {
    chk c = {.a = a, .d = d};
    c.lowered = out->nkernels == -1; /* set by the lowering to re-check its own output */
    return check_module(&c, module, out);
}
