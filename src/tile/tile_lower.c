/* tilec lowering: tile operations become loops over elements, written in the core language
 * itself (parallel/serial loops, lets, vars, element assignments, if). The result is checked
 * again as a program (races included), printed by --emit-ir, and emitted as C.
 *
 * Orders fixed here are part of the language (docs/tile-language.md): reduce<sum> uses eight
 * interleaved partial sums combined as ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)) unless
 * order="serial"; cumsum and gemm accumulate along k in ascending order (gemm with fma, as
 * the library's canonical GEMM order; register-blocked rows, see lower_gemm). */
#include "tile/tile_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct lw {
    ts__tile_arena *a;
    ts__tile_diag *d;
    int uid;
    bool oom;
} lw;

static ts__tile_node *nn(lw *L, int kind, ts__tile_loc loc) {
    ts__tile_node *n = ts__tile_node_new(L->a, kind, loc);
    if (!n) L->oom = true;
    return n;
}
static const char *tmpname(lw *L, int id, const char *what, int k) {
    char b[64];
    if (k >= 0) snprintf(b, sizeof b, "__%s%d_%d", what, id, k);
    else snprintf(b, sizeof b, "__%s%d", what, id);
    const char *s = ts__tile_strdup(L->a, b, strlen(b));
    if (!s) L->oom = true;
    return s;
}
static ts__tile_node *name(lw *L, const char *s, ts__tile_loc loc) {
    ts__tile_node *n = nn(L, TN_NAME, loc);
    if (n) n->name = s;
    return n;
}
static ts__tile_node *intl(lw *L, int64_t v, ts__tile_loc loc) {
    ts__tile_node *n = nn(L, TN_INT, loc);
    if (n) n->ival = v;
    return n;
}
static ts__tile_node *bin(lw *L, int op, ts__tile_node *x, ts__tile_node *y) {
    ts__tile_node *n = nn(L, TN_BINARY, x ? x->loc : (ts__tile_loc){0, 0});
    if (n) n->op = op, n->a = x, n->b = y;
    return n;
}
static ts__tile_node *clone(lw *L, ts__tile_node *x) {
    ts__tile_node *c = ts__tile_clone(L->a, x);
    if (x && !c) L->oom = true;
    return c;
}
static ts__tile_node **arr(lw *L, int n) {
    if (n <= 0) return NULL;
    ts__tile_node **v = ts__tile_alloc(L->a, (size_t)n * sizeof *v);
    if (!v) L->oom = true;
    return v;
}
static ts__tile_node *call(lw *L, const char *f, const char *targ, ts__tile_loc loc, int nargs) {
    ts__tile_node *n = nn(L, TN_CALL, loc);
    if (!n) return NULL;
    n->name = f;
    n->targ = targ;
    if (targ) n->dt = ts__tile_dt_from_name(targ);
    n->nlist = nargs;
    n->list = arr(L, nargs);
    return n;
}
static ts__tile_node *index_of(lw *L, const char *buf, ts__tile_node **ix, int n, ts__tile_loc loc) {
    ts__tile_node *r = nn(L, TN_INDEX, loc);
    if (!r) return NULL;
    r->a = name(L, buf, loc);
    r->nlist = n;
    r->list = arr(L, n);
    for (int i = 0; r->list && i < n; i++) r->list[i] = ix[i];
    return r;
}
static ts__tile_node *assign(lw *L, ts__tile_node *lhs, ts__tile_node *rhs) {
    ts__tile_node *n = nn(L, TN_ASSIGN, lhs ? lhs->loc : (ts__tile_loc){0, 0});
    if (n) n->op = TO_SET, n->a = lhs, n->b = rhs;
    return n;
}
static ts__tile_node *blockn(lw *L, ts__tile_loc loc, int cap) {
    ts__tile_node *b = nn(L, TN_BLOCK, loc);
    if (b) b->list = arr(L, cap);
    return b;
}
static void add(ts__tile_node *b, ts__tile_node *s) {
    if (b && b->list && s) b->list[b->nlist++] = s;
}
/* for v0..vn-1 in form(ext...) { body } */
static ts__tile_node *loop(lw *L, const char *form, const char **vars, ts__tile_node **ext, int n,
                           ts__tile_node *body, ts__tile_loc loc) {
    ts__tile_node *f = nn(L, TN_FOR, loc);
    if (!f) return NULL;
    f->a = call(L, form, NULL, loc, n);
    f->nlist2 = n;
    f->list2 = arr(L, n);
    for (int i = 0; f->a && f->a->list && f->list2 && i < n; i++) {
        f->a->list[i] = ext[i];
        f->list2[i] = name(L, vars[i], loc);
    }
    f->b = body;
    return f;
}
static ts__tile_node *let(lw *L, const char *nm, ts__tile_node *v) {
    ts__tile_node *n = nn(L, TN_LET, v ? v->loc : (ts__tile_loc){0, 0});
    if (n) n->name = nm, n->a = v;
    return n;
}
static ts__tile_node *var(lw *L, const char *nm, int dt, ts__tile_node *init, ts__tile_loc loc) {
    ts__tile_node *n = nn(L, TN_VAR, loc);
    if (n) n->name = nm, n->dt = dt, n->a = init;
    return n;
}

static ts__tile_sym *sym_of(ts__tile_node *n) {
    if (n->kind == TN_INDEX) return n->sym ? n->sym : n->a->sym;
    return n->sym;
}

/* The value 0 (or false) for an element of dtype dt. */
static ts__tile_node *zero(lw *L, int dt, ts__tile_loc loc) {
    if (dt == TT_BOOL) {
        ts__tile_node *b = nn(L, TN_BOOL, loc);
        return b;
    }
    return intl(L, 0, loc);
}

/* True if the expression is a literal (so it can be repeated instead of bound to a let). */
static bool literal(ts__tile_node *e) {
    if (e->kind == TN_UNARY && e->op == TO_NEG) e = e->a;
    return e->kind == TN_INT || e->kind == TN_FLOAT || e->kind == TN_BOOL;
}

/* A dimension of a tensor as an expression: the constant or the dim symbol's name. */
static ts__tile_node *tensor_dim(lw *L, ts__tile_sym *t, int d, ts__tile_loc loc) {
    if (t->dimsym[d]) return name(L, t->dimsym[d]->name, loc);
    return intl(L, t->cdims[d], loc);
}

static ts__tile_node *lower_copy(lw *L, ts__tile_node *st, ts__tile_node *c) {
    int id = ++L->uid;
    ts__tile_loc loc = c->loc;
    ts__tile_node *src = c->list[0], *dst = c->list[1];
    ts__tile_sym *ss = sym_of(src), *ds = sym_of(dst);
    ts__tile_node *out = blockn(L, loc, 8);
    if (!out) return NULL;
    if (ss->kind == SYM_TILE && ds->kind == SYM_TILE) {
        const char *v[TS__TILE_MAX_RANK];
        ts__tile_node *ext[TS__TILE_MAX_RANK], *ix1[TS__TILE_MAX_RANK], *ix2[TS__TILE_MAX_RANK];
        for (int d = 0; d < ss->rank; d++) {
            v[d] = tmpname(L, id, "i", d);
            ext[d] = intl(L, ss->cdims[d], loc);
            ix1[d] = name(L, v[d], loc);
            ix2[d] = name(L, v[d], loc);
        }
        ts__tile_node *body = blockn(L, loc, 1);
        add(body, assign(L, index_of(L, ds->name, ix2, ds->rank, loc), index_of(L, ss->name, ix1, ss->rank, loc)));
        add(out, loop(L, "parallel", v, ext, ss->rank, body, loc));
        (void)st;
        return out;
    }
    bool load = ss->kind == SYM_TENSOR;
    ts__tile_sym *T = load ? ss : ds, *t = load ? ds : ss;
    ts__tile_node *treg = load ? src : dst;
    /* starts, bound once before the loop */
    const char *sname[TS__TILE_MAX_RANK];
    for (int d = 0; d < T->rank; d++) {
        ts__tile_node *s;
        if (treg->kind == TN_NAME) s = intl(L, 0, loc);
        else {
            ts__tile_node *ix = treg->list[d];
            s = clone(L, ix->kind == TN_SLICE ? ix->a : ix);
        }
        sname[d] = tmpname(L, id, "s", d);
        add(out, let(L, sname[d], s));
    }
    const char *v[TS__TILE_MAX_RANK];
    ts__tile_node *ext[TS__TILE_MAX_RANK];
    for (int d = 0; d < t->rank; d++) {
        v[d] = tmpname(L, id, "i", d);
        ext[d] = intl(L, t->cdims[d], loc);
    }
    ts__tile_node *body = blockn(L, loc, TS__TILE_MAX_RANK + 2);
    const char *g[TS__TILE_MAX_RANK];
    ts__tile_node *cond = NULL;
    const bool flat = treg->kind == TN_INDEX && treg->ival == TS__TILE_COPY_FLAT;
    for (int d = 0; d < T->rank; d++) {
        g[d] = tmpname(L, id, "g", d);
        int td = -1;
        for (int q = 0; q < t->rank && !flat; q++)
            if ((int)((treg->ival >> (4 * q)) & 15) - 1 == d) td = q;
        ts__tile_node *gv = td < 0 ? name(L, sname[d], loc)
                                   : bin(L, TO_ADD, name(L, sname[d], loc), name(L, v[td], loc));
        if (flat && d == T->rank - 1) { /* s + (i0 * n1 + i1) * n2 + ... + i_last */
            ts__tile_node *f = name(L, v[0], loc);
            for (int q = 1; q < t->rank; q++)
                f = bin(L, TO_ADD, bin(L, TO_MUL, f, intl(L, t->cdims[q], loc)), name(L, v[q], loc));
            gv = bin(L, TO_ADD, name(L, sname[d], loc), f);
        }
        add(body, let(L, g[d], gv));
        ts__tile_node *inb = bin(L, TO_LAND, bin(L, TO_GE, name(L, g[d], loc), intl(L, 0, loc)),
                                 bin(L, TO_LT, name(L, g[d], loc), tensor_dim(L, T, d, loc)));
        cond = cond ? bin(L, TO_LAND, cond, inb) : inb;
    }
    ts__tile_node *gi[TS__TILE_MAX_RANK], *ti[TS__TILE_MAX_RANK], *ti2[TS__TILE_MAX_RANK];
    for (int d = 0; d < T->rank; d++) gi[d] = name(L, g[d], loc);
    for (int d = 0; d < t->rank; d++) ti[d] = name(L, v[d], loc), ti2[d] = name(L, v[d], loc);
    ts__tile_node *iff = nn(L, TN_IF, loc);
    if (!iff) return NULL;
    iff->a = cond;
    iff->b = blockn(L, loc, 1);
    if (load) {
        add(iff->b, assign(L, index_of(L, t->name, ti, t->rank, loc), index_of(L, T->name, gi, T->rank, loc)));
        iff->c = blockn(L, loc, 1);
        ts__tile_node *fill = NULL;
        for (int32_t k = 0; k < c->nlist2; k++)
            if (!strcmp(c->list2[k]->name, "fill")) fill = c->list2[k]->a;
        ts__tile_node *fv;
        if (fill && !literal(fill)) {
            const char *fn = tmpname(L, id, "fill", -1);
            /* bind the fill value before the loop: evaluated once */
            ts__tile_node *fl = nn(L, TN_VAR, loc);
            if (!fl) return NULL;
            fl->name = fn;
            fl->dt = ts__tile_dt_is_narrow(t->dt) ? TT_F32 : t->dt;
            fl->a = clone(L, fill);
            add(out, fl);
            fv = name(L, fn, loc);
        } else fv = fill ? clone(L, fill) : zero(L, t->dt, loc);
        add(iff->c, assign(L, index_of(L, t->name, ti2, t->rank, loc), fv));
    } else {
        add(iff->b, assign(L, index_of(L, T->name, gi, T->rank, loc), index_of(L, t->name, ti, t->rank, loc)));
    }
    add(body, iff);
    add(out, loop(L, "parallel", v, ext, t->rank, body, loc));
    return out;
}

static ts__tile_node *lower_fill(lw *L, ts__tile_node *c, bool clear) {
    int id = ++L->uid;
    ts__tile_loc loc = c->loc;
    ts__tile_sym *t = c->list[0]->sym;
    ts__tile_node *out = blockn(L, loc, 2);
    ts__tile_node *val;
    if (clear) val = zero(L, t->dt, loc);
    else if (literal(c->list[1])) val = clone(L, c->list[1]);
    else {
        const char *fn = tmpname(L, id, "v", -1);
        add(out, var(L, fn, ts__tile_dt_is_narrow(t->dt) ? TT_F32 : t->dt, clone(L, c->list[1]), loc));
        val = name(L, fn, loc);
    }
    const char *v[TS__TILE_MAX_RANK];
    ts__tile_node *ext[TS__TILE_MAX_RANK], *ix[TS__TILE_MAX_RANK];
    for (int d = 0; d < t->rank; d++) {
        v[d] = tmpname(L, id, "i", d);
        ext[d] = intl(L, t->cdims[d], loc);
        ix[d] = name(L, v[d], loc);
    }
    ts__tile_node *body = blockn(L, loc, 1);
    add(body, assign(L, index_of(L, t->name, ix, t->rank, loc), val));
    add(out, loop(L, "parallel", v, ext, t->rank, body, loc));
    return out;
}

static int acc_type(int dt) {
    dt = ts__tile_dt_packed_raw(dt);
    return ts__tile_dt_is_narrow(dt) ? TT_F32 : dt;
}

static ts__tile_node *fcall1(lw *L, const char *f, ts__tile_node *x) {
    ts__tile_node *c = call(L, f, NULL, x ? x->loc : (ts__tile_loc){0, 0}, 1);
    if (c && c->list) c->list[0] = x;
    return c;
}
static ts__tile_node *fcall2(lw *L, const char *f, ts__tile_node *x, ts__tile_node *y) {
    ts__tile_node *c = call(L, f, NULL, x ? x->loc : (ts__tile_loc){0, 0}, 2);
    if (c && c->list) c->list[0] = x, c->list[1] = y;
    return c;
}

/* comb(acc, v) of reduction op */
static ts__tile_node *combine(lw *L, const char *op, ts__tile_node *acc, ts__tile_node *v) {
    if (!strcmp(op, "sum")) return bin(L, TO_ADD, acc, v);
    if (!strcmp(op, "abssum")) return bin(L, TO_ADD, acc, fcall1(L, "abs", v));
    if (!strcmp(op, "max")) return fcall2(L, "max", acc, v);
    if (!strcmp(op, "min")) return fcall2(L, "min", acc, v);
    if (!strcmp(op, "absmax")) return fcall2(L, "max", acc, fcall1(L, "abs", v));
    if (!strcmp(op, "and")) return bin(L, TO_BAND, acc, v);
    if (!strcmp(op, "or")) return bin(L, TO_BOR, acc, v);
    return bin(L, TO_BXOR, acc, v);
}

static ts__tile_node *identity(lw *L, const char *op, int t, ts__tile_loc loc) {
    bool flt = ts__tile_dt_is_float(t);
    if (!strcmp(op, "sum") || !strcmp(op, "abssum")) {
        if (!flt) return intl(L, 0, loc);
        /* -0.0 is the exact identity of IEEE addition (-0 + x == x for every x, -0 included) */
        ts__tile_node *z = nn(L, TN_FLOAT, loc), *u = nn(L, TN_UNARY, loc);
        if (!z || !u) return NULL;
        u->op = TO_NEG;
        u->a = z;
        return u;
    }
    if (!strcmp(op, "absmax")) return flt ? nn(L, TN_FLOAT, loc) : intl(L, 0, loc);
    if (!strcmp(op, "max") || !strcmp(op, "min")) {
        bool mx = op[1] == 'a';
        if (flt) {
            ts__tile_node *i = call(L, "inf", ts__tile_dt_name(t), loc, 0);
            if (!mx) return i;
            ts__tile_node *u = nn(L, TN_UNARY, loc);
            if (u) u->op = TO_NEG, u->a = i;
            return u;
        }
        return call(L, mx ? "minval" : "maxval", ts__tile_dt_name(t), loc, 0);
    }
    if (!strcmp(op, "and")) {
        ts__tile_node *u = nn(L, TN_UNARY, loc);
        if (u) u->op = TO_BNOT, u->a = intl(L, 0, loc);
        return u;
    }
    return intl(L, 0, loc);
}

/* src[..., k, ...] with the outer loop variables in the other positions */
static ts__tile_node *src_at(lw *L, ts__tile_sym *s, int ax, const char **ov, ts__tile_loc loc,
                             ts__tile_node *k) {
    ts__tile_node *ix[TS__TILE_MAX_RANK];
    for (int q = 0, o = 0; q < s->rank; q++) ix[q] = q == ax ? k : name(L, ov[o++], loc);
    return index_of(L, s->name, ix, s->rank, loc);
}

/* fold two partial results of op (abs already applied) */
static ts__tile_node *fold(lw *L, const char *op, ts__tile_node *x, ts__tile_node *y) {
    if (!strcmp(op, "sum") || !strcmp(op, "abssum")) return bin(L, TO_ADD, x, y);
    if (!strcmp(op, "absmax")) return fcall2(L, "max", x, y);
    return combine(L, op, x, y);
}

/* reduce<op>(src, dst, axis, accumulate, order) and cumsum(src, dst, axis) */
static ts__tile_node *lower_reduce(lw *L, ts__tile_node *c, bool cumsum) {
    int id = ++L->uid;
    ts__tile_loc loc = c->loc;
    ts__tile_sym *s = c->list[0]->sym, *d = c->list[1]->sym;
    int ax = s->rank - 1;
    bool accumulate = false, serial = cumsum;
    for (int32_t k = 0; k < c->nlist2; k++) {
        ts__tile_node *kw = c->list2[k];
        if (!strcmp(kw->name, "axis")) {
            /* checked: a compile-time integer, possibly negative */
            ts__tile_node *e = kw->a;
            int64_t v = e->kind == TN_INT ? e->ival : (e->kind == TN_UNARY && e->a->kind == TN_INT) ? -e->a->ival : ax;
            if (e->kind == TN_NAME && e->sym && ((ts__tile_sym *)e->sym)->is_const_int) v = ((ts__tile_sym *)e->sym)->ival;
            ax = (int)(v < 0 ? v + s->rank : v);
        } else if (!strcmp(kw->name, "accumulate")) accumulate = kw->a->ival != 0;
        else if (!strcmp(kw->name, "order")) serial = !strcmp(kw->a->name, "serial");
    }
    const char *op = cumsum ? "sum" : c->targ;
    int T = acc_type(s->dt);
    bool lanes = !serial && ts__tile_dt_is_float(T) && (!strcmp(op, "sum") || !strcmp(op, "abssum"));
    int64_t E = s->cdims[ax];
    /* outer loop over every dim except the axis */
    const char *ov[TS__TILE_MAX_RANK];
    ts__tile_node *oext[TS__TILE_MAX_RANK];
    int no = 0;
    for (int k = 0; k < s->rank; k++)
        if (k != ax) {
            ov[no] = tmpname(L, id, "o", no);
            oext[no] = intl(L, s->cdims[k], loc);
            no++;
        }
    const char *kv = tmpname(L, id, "k", -1);
    /* src[..., kexpr, ...] */
    ts__tile_node *body = blockn(L, loc, 16);
    ts__tile_node *dix[TS__TILE_MAX_RANK];
    int nd = 0;
    if (s->rank == 1) dix[nd++] = intl(L, 0, loc);
    else
        for (int o = 0; o < no; o++) dix[nd++] = name(L, ov[o], loc);
    if (cumsum) {
        const char *acc = tmpname(L, id, "acc", -1);
        add(body, var(L, acc, T, identity(L, "sum", T, loc), loc));
        ts__tile_node *inner = blockn(L, loc, 2);
        add(inner, assign(L, name(L, acc, loc), bin(L, TO_ADD, name(L, acc, loc), src_at(L, s, ax, ov, loc, name(L, kv, loc)))));
        ts__tile_node *cix[TS__TILE_MAX_RANK];
        for (int q = 0, o = 0; q < s->rank; q++) cix[q] = q == ax ? name(L, kv, loc) : name(L, ov[o++], loc);
        add(inner, assign(L, index_of(L, d->name, cix, d->rank, loc), name(L, acc, loc)));
        ts__tile_node *ext1 = intl(L, E, loc);
        add(body, loop(L, "serial", &kv, &ext1, 1, inner, loc));
    } else if (!lanes) {
        const char *acc = tmpname(L, id, "acc", -1);
        add(body, var(L, acc, T, identity(L, op, T, loc), loc));
        ts__tile_node *inner = blockn(L, loc, 1);
        add(inner, assign(L, name(L, acc, loc), combine(L, op, name(L, acc, loc), src_at(L, s, ax, ov, loc, name(L, kv, loc)))));
        ts__tile_node *ext1 = intl(L, E, loc);
        add(body, loop(L, "serial", &kv, &ext1, 1, inner, loc));
        ts__tile_node *res = name(L, acc, loc);
        if (accumulate) {
            ts__tile_node *dcopy[TS__TILE_MAX_RANK];
            for (int q = 0; q < nd; q++) dcopy[q] = clone(L, dix[q]);
            res = fold(L, op, index_of(L, d->name, dcopy, nd, loc), res);
        }
        add(body, assign(L, index_of(L, d->name, dix, nd, loc), res));
    } else {
        const char *a8[8];
        for (int l = 0; l < 8; l++) {
            a8[l] = tmpname(L, id, "a", l);
            add(body, var(L, a8[l], T, identity(L, "sum", T, loc), loc));
        }
        int64_t E8 = E - E % 8;
        if (E8 > 0) {
            ts__tile_node *inner = blockn(L, loc, 8);
            for (int l = 0; l < 8; l++) {
                ts__tile_node *kk = l ? bin(L, TO_ADD, name(L, kv, loc), intl(L, l, loc)) : name(L, kv, loc);
                add(inner, assign(L, name(L, a8[l], loc), combine(L, op, name(L, a8[l], loc), src_at(L, s, ax, ov, loc, kk))));
            }
            ts__tile_node *f = nn(L, TN_FOR, loc);
            if (!f) return NULL;
            f->a = call(L, "serial", NULL, loc, 3);
            if (!f->a || !f->a->list) return NULL;
            f->a->list[0] = intl(L, 0, loc);
            f->a->list[1] = intl(L, E8, loc);
            f->a->list[2] = intl(L, 8, loc);
            f->nlist2 = 1;
            f->list2 = arr(L, 1);
            if (f->list2) f->list2[0] = name(L, kv, loc);
            f->b = inner;
            add(body, f);
        }
        for (int64_t k = E8; k < E; k++) {
            int l = (int)(k - E8);
            add(body, assign(L, name(L, a8[l], loc), combine(L, op, name(L, a8[l], loc), src_at(L, s, ax, ov, loc, intl(L, k, loc)))));
        }
        ts__tile_node *r = bin(L, TO_ADD,
                               bin(L, TO_ADD, bin(L, TO_ADD, name(L, a8[0], loc), name(L, a8[4], loc)),
                                   bin(L, TO_ADD, name(L, a8[2], loc), name(L, a8[6], loc))),
                               bin(L, TO_ADD, bin(L, TO_ADD, name(L, a8[1], loc), name(L, a8[5], loc)),
                                   bin(L, TO_ADD, name(L, a8[3], loc), name(L, a8[7], loc))));
        if (accumulate) {
            ts__tile_node *dcopy[TS__TILE_MAX_RANK];
            for (int q = 0; q < nd; q++) dcopy[q] = clone(L, dix[q]);
            r = bin(L, TO_ADD, index_of(L, d->name, dcopy, nd, loc), r);
        }
        add(body, assign(L, index_of(L, d->name, dix, nd, loc), r));
    }
    if (no == 0) return body;
    ts__tile_node *out = blockn(L, loc, 1);
    add(out, loop(L, "parallel", ov, oext, no, body, loc));
    return out;
}

/* gemm: per element acc = 0; acc = fma(a, b, acc) for k ascending; C = acc or C + acc (the
 * canonical order). Written so that the SIMD pass gets a register-blocked kernel: R rows of C
 * per iteration (R accumulators sharing each B load, A broadcast), the vector running along
 * C's columns, which needs B[k, n] contiguous in n - so with tb the B tile is first copied
 * transposed into a compiler tile. Every C element still sees exactly the same operations. */
static ts__tile_node *lower_gemm(lw *L, ts__tile_node *c) {
    int id = ++L->uid;
    ts__tile_loc loc = c->loc;
    ts__tile_sym *A = c->list[0]->sym, *B = c->list[1]->sym, *C = c->list[2]->sym;
    bool ta = false, tb = false, clear = false;
    for (int32_t k = 0; k < c->nlist2; k++) {
        bool v = c->list2[k]->a->ival != 0;
        if (!strcmp(c->list2[k]->name, "ta")) ta = v;
        else if (!strcmp(c->list2[k]->name, "tb")) tb = v;
        else clear = v;
    }
    int64_t M = C->cdims[0], N = C->cdims[1], K = ta ? A->cdims[0] : A->cdims[1];
    int R = M % 4 == 0 ? 4 : M % 2 == 0 ? 2 : 1;
    ts__tile_node *out = blockn(L, loc, 3);
    const char *bname = B->name;
    if (tb) {
        /* tile __bt: dt[K, N]; for k, n in parallel(K, N) { __bt[k, n] = B[n, k]; } */
        bname = tmpname(L, id, "bt", -1);
        ts__tile_node *t = nn(L, TN_TILE, loc);
        if (!t) return NULL;
        t->name = bname;
        t->dt = B->dt;
        t->scope = TS_SCOPE_TILE;
        t->nlist = 2;
        t->list = arr(L, 2);
        if (!t->list) return NULL;
        t->list[0] = intl(L, K, loc);
        t->list[1] = intl(L, N, loc);
        add(out, t);
        const char *tv[2] = {tmpname(L, id, "tk", -1), tmpname(L, id, "tn", -1)};
        ts__tile_node *d2[2] = {name(L, tv[0], loc), name(L, tv[1], loc)};
        ts__tile_node *s2[2] = {name(L, tv[1], loc), name(L, tv[0], loc)};
        ts__tile_node *tbody = blockn(L, loc, 1);
        add(tbody, assign(L, index_of(L, bname, d2, 2, loc), index_of(L, B->name, s2, 2, loc)));
        ts__tile_node *te[2] = {intl(L, K, loc), intl(L, N, loc)};
        add(out, loop(L, "parallel", tv, te, 2, tbody, loc));
    }
    const char *mv = tmpname(L, id, "m", -1), *nv = tmpname(L, id, "n", -1), *kv = tmpname(L, id, "k", -1);
    const char *acc[4];
    ts__tile_node *body = blockn(L, loc, 2 * R + 1);
    ts__tile_node *inner = blockn(L, loc, R);
    for (int r = 0; r < R; r++) {
        acc[r] = tmpname(L, id, "acc", r);
        add(body, var(L, acc[r], TT_F32, nn(L, TN_FLOAT, loc), loc));
    }
    /* row m * R + r of C */
    ts__tile_node *rows[4];
    for (int r = 0; r < R; r++) {
        ts__tile_node *mm = R == 1 ? name(L, mv, loc) : bin(L, TO_MUL, name(L, mv, loc), intl(L, R, loc));
        rows[r] = r ? bin(L, TO_ADD, mm, intl(L, r, loc)) : mm;
    }
    for (int r = 0; r < R; r++) {
        ts__tile_node *ai[2], *bi[2] = {name(L, kv, loc), name(L, nv, loc)};
        ai[ta ? 1 : 0] = clone(L, rows[r]);
        ai[ta ? 0 : 1] = name(L, kv, loc);
        ts__tile_node *f = call(L, "fma", NULL, loc, 3);
        if (!f || !f->list) return NULL;
        f->list[0] = index_of(L, A->name, ai, 2, loc);
        f->list[1] = index_of(L, bname, bi, 2, loc);
        f->list[2] = name(L, acc[r], loc);
        add(inner, assign(L, name(L, acc[r], loc), f));
    }
    ts__tile_node *ek = intl(L, K, loc);
    add(body, loop(L, "serial", &kv, &ek, 1, inner, loc));
    for (int r = 0; r < R; r++) {
        ts__tile_node *ci[2] = {clone(L, rows[r]), name(L, nv, loc)};
        ts__tile_node *res = name(L, acc[r], loc);
        if (!clear) {
            ts__tile_node *ci2[2] = {clone(L, rows[r]), name(L, nv, loc)};
            res = bin(L, TO_ADD, index_of(L, C->name, ci2, 2, loc), res);
        }
        add(body, assign(L, index_of(L, C->name, ci, 2, loc), res));
    }
    const char *vs[2] = {mv, nv};
    ts__tile_node *ext[2] = {intl(L, M / R, loc), intl(L, N, loc)};
    add(out, loop(L, "parallel", vs, ext, 2, body, loc));
    return out;
}

static void lower_stmt(lw *L, ts__tile_node *n);

static void lower_list(lw *L, ts__tile_node *b) {
    for (int32_t i = 0; b && i < b->nlist && !L->oom; i++) lower_stmt(L, b->list[i]);
}

static void lower_stmt(lw *L, ts__tile_node *n) {
    if (!n) return;
    switch (n->kind) {
    case TN_BLOCK: lower_list(L, n); break;
    case TN_LAUNCH: lower_list(L, n->a); break;
    case TN_FOR: case TN_WHILE: lower_list(L, n->b); break;
    case TN_IF:
        lower_list(L, n->b);
        if (n->c) n->c->kind == TN_IF ? lower_stmt(L, n->c) : lower_list(L, n->c);
        break;
    case TN_CALLSTMT: {
        ts__tile_node *c = n->a, *r = NULL;
        const char *f = c->name;
        if (!strcmp(f, "copy")) r = lower_copy(L, n, c);
        else if (!strcmp(f, "fill")) r = lower_fill(L, c, false);
        else if (!strcmp(f, "clear")) r = lower_fill(L, c, true);
        else if (!strcmp(f, "reduce")) r = lower_reduce(L, c, false);
        else if (!strcmp(f, "cumsum")) r = lower_reduce(L, c, true);
        else if (!strcmp(f, "gemm")) r = lower_gemm(L, c);
        else break;
        if (!r) {
            L->oom = true;
            break;
        }
        /* the statement becomes the block of loops (a block keeps the temporaries local) */
        *n = *r;
        break;
    }
    default: break;
    }
}

bool ts__tile_lower(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog) {
    return ts__tile_lower_ex(a, d, prog, true);
}

bool ts__tile_recheck(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, const char *what,
                      bool clone_bodies) {
    /* The IR module: constants and macros as written, kernels with their current bodies. */
    ts__tile_node *m = ts__tile_node_new(a, TN_MODULE, (ts__tile_loc){1, 1});
    if (!m) goto oom;
    m->list = ts__tile_alloc(a, (size_t)(prog->module->nlist + 1) * sizeof *m->list);
    if (!m->list) goto oom;
    int ki = 0;
    for (int32_t i = 0; i < prog->module->nlist; i++) {
        ts__tile_node *it = prog->module->list[i], *c = NULL;
        if (it->kind == TN_CONST) c = ts__tile_clone(a, it);
        else if (it->kind == TN_KERNEL && ki < prog->nkernels) {
            ts__tile_node *body = prog->kernels[ki++].body;
            c = ts__tile_clone(a, it);
            if (c) c->a = clone_bodies ? ts__tile_clone(a, body) : body;
            if (c && !c->a) c = NULL;
        } else continue;
        if (!c) goto oom;
        m->list[m->nlist++] = c;
    }
    ts__tile_program out = {.nkernels = -1};
    int nerr = d->nerrors;
    if (!ts__tile_check(a, d, m, &out)) {
        if (d->nerrors > nerr)
            ts__tile_error(d, (ts__tile_loc){1, 1}, "internal error: the %s program does not check (a tilec bug)", what);
        return false;
    }
    *prog = out;
    return true;
oom:
    ts__tile_error(d, (ts__tile_loc){1, 1}, "program too large (compiler memory limit reached)");
    return false;
}

bool ts__tile_lower_ex(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, bool fuse) {
    lw L = {.a = a, .d = d};
    for (int i = 0; i < prog->nkernels && !L.oom; i++) lower_list(&L, prog->kernels[i].body);
    if (L.oom) {
        ts__tile_error(d, (ts__tile_loc){1, 1}, "program too large (compiler memory limit reached)");
        return false;
    }
    /* Re-check the IR: it must be a valid program (this also re-runs the race checker on the
     * loops the lowering wrote), and the emitter needs its symbols. */
    if (!ts__tile_recheck(a, d, prog, "lowered", false)) return false;
    return !fuse || ts__tile_fuse(a, d, prog);
}

void ts__tile_print_program(ts__tile_buf *b, const ts__tile_program *prog) {
    ts__tile_print(b, prog->module);
}
