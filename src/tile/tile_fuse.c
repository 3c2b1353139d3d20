/* tilec fusion: an IR pass between lowering and C emission (docs/tile-language.md §11b).
 *
 * Lowering turns every tile operation into its own loop nest, so a kernel makes one pass
 * through its tiles per operation. This pass removes the passes that only carry a value from
 * one loop to the next through a compiler-visible tile:
 *
 *   for i, j in parallel(M, N) { T[i, j] = f(i, j); }      (the producer)
 *   ... later statements of the same block read T[a, b] ... (the consumers)
 *
 * becomes the consumers reading f(a, b) directly (cast to T's dtype when the store rounds),
 * and the producer's store disappears: a fold over T (reduce) then reads its input where it
 * is computed, a copy-out of T converts and stores in the loop that computes it, and the
 * tile is never written. The value each consumer sees is the one the store would have left
 * there, computed by the same operations in the same order, so the bits cannot change.
 *
 * It is done only when that is provably so:
 *  - the producer is a `parallel` loop whose iteration space is exactly T's shape and whose
 *    body stores T[i, j, ...] once, at the loop variables, from an expression built of lets
 *    of the body (inlined), loop variables and names visible at the consumers;
 *  - T is accessed nowhere else in the kernel except by reads in the statements after the
 *    producer in the same block (so every read sees this producer's values);
 *  - nothing the expression reads (tiles, vars; any tensor when any tensor is written, since
 *    tensors may overlap) is written between the producer and the last consumer, nor by the
 *    producer's own body, and no name the expression uses is redeclared there;
 *  - the consumers evaluate the expression no more often than the producer did (sum over
 *    read sites of the trip counts of the loops around them <= the number of elements), so
 *    a recomputation never costs more than the store and load it replaces.
 * Everything else is left alone. The result is checked again as a program. */
#include "tile/tile_internal.h"

#include <stdint.h>
#include <string.h>

typedef struct fz {
    ts__tile_arena *a;
    bool oom;
    int nfused;
} fz;

/* ---- small helpers ---- */

static bool cint(const ts__tile_node *n, int64_t *v) {
    if (!n) return false;
    if (n->kind == TN_INT) return *v = n->ival, true;
    if (n->kind == TN_NAME && n->sym && ((const ts__tile_sym *)n->sym)->kind == SYM_CONST &&
        ((const ts__tile_sym *)n->sym)->is_const_int)
        return *v = ((const ts__tile_sym *)n->sym)->ival, true;
    int64_t x, y;
    if (n->kind == TN_UNARY && n->op == TO_NEG && cint(n->a, &x)) return *v = (int64_t)(0u - (uint64_t)x), true;
    if (n->kind == TN_BINARY && cint(n->a, &x) && cint(n->b, &y)) {
        if (n->op == TO_ADD) return *v = (int64_t)((uint64_t)x + (uint64_t)y), true;
        if (n->op == TO_SUB) return *v = (int64_t)((uint64_t)x - (uint64_t)y), true;
        if (n->op == TO_MUL && x >= 0 && y >= 0 && (x == 0 || y <= INT64_MAX / x)) return *v = x * y, true;
        /* non-negative operands (extents like CH / G): the language's quotient is C's */
        if (n->op == TO_DIV && x >= 0 && y > 0) return *v = x / y, true;
        if (n->op == TO_MOD && x >= 0 && y > 0) return *v = x % y, true;
    }
    return false;
}

static const ts__tile_sym *isym(const ts__tile_node *n) {
    /* the tile / tensor of an element access */
    if (n->kind != TN_INDEX) return NULL;
    return n->sym ? n->sym : n->a ? n->a->sym : NULL;
}

/* trip count of a loop; -1 when not a compile-time constant */
static int64_t trips(const ts__tile_node *f) {
    const ts__tile_node *it = f->a;
    int64_t t = 1;
    if (!strcmp(it->name, "parallel")) {
        for (int32_t i = 0; i < it->nlist; i++) {
            int64_t e;
            if (!cint(it->list[i], &e)) return -1;
            if (e <= 0) return 0;
            if (t > INT64_MAX / e) return -1;
            t *= e;
        }
        return t;
    }
    int64_t lo = 0, hi, step = 1;
    if (it->nlist == 1) {
        if (!cint(it->list[0], &hi)) return -1;
    } else {
        if (!cint(it->list[0], &lo) || !cint(it->list[1], &hi)) return -1;
        if (it->nlist == 3 && !cint(it->list[2], &step)) return -1;
    }
    if (step == 0) return -1;
    if (step < 0) {
        int64_t x = lo;
        lo = hi, hi = x, step = -step;
    }
    if (hi <= lo) return 0;
    return ((hi - lo) + step - 1) / step;
}

/* ---- what a statement subtree touches ---- */

typedef struct touch {
    const void *T;        /* the producer's tile */
    const ts__tile_node *skip; /* the producer's store, not counted */
    int64_t treads;       /* dynamic reads of T (sum over sites of the enclosing trip counts) */
    int nsites;
    bool tother;          /* T written, or read in an unsupported way */
    bool unbounded;       /* a read of T under a loop without a constant trip count */
    /* sets of written symbols / declared names */
    const void *wr[128];
    int nwr;
    bool wr_tensor, wr_overflow;
    const char *decl[256];
    int ndecl;
    bool decl_overflow;
} touch;

static void add_wr(touch *t, const void *s) {
    if (!s) return;
    if (((const ts__tile_sym *)s)->kind == SYM_TENSOR) t->wr_tensor = true;
    for (int i = 0; i < t->nwr; i++)
        if (t->wr[i] == s) return;
    if (t->nwr < 128) t->wr[t->nwr++] = s;
    else t->wr_overflow = true;
}
static void add_decl(touch *t, const char *nm) {
    if (!nm) return;
    if (t->ndecl < 256) t->decl[t->ndecl++] = nm;
    else t->decl_overflow = true;
}

static void scan(touch *t, const ts__tile_node *n, int64_t mult);

static void scan_expr(touch *t, const ts__tile_node *n, int64_t mult) {
    if (!n) return;
    if (n->kind == TN_INDEX && isym(n) == t->T) {
        t->nsites++;
        if (mult < 0) t->unbounded = true;
        else if (t->treads <= INT64_MAX - mult) t->treads += mult;
        else t->unbounded = true;
    }
    if (n->kind == TN_NAME && n->sym == t->T) t->tother = true; /* the tile itself as a value */
    if (n->kind != TN_INDEX) scan_expr(t, n->a, mult); /* an access's a is the tile's name */
    scan_expr(t, n->b, mult);
    scan_expr(t, n->c, mult);
    for (int32_t i = 0; i < n->nlist; i++) scan_expr(t, n->list[i], mult);
    for (int32_t i = 0; i < n->nlist2; i++) scan_expr(t, n->list2[i], mult);
}

static void scan_list(touch *t, const ts__tile_node *b, int64_t mult) {
    for (int32_t i = 0; b && i < b->nlist; i++) scan(t, b->list[i], mult);
}

static void scan(touch *t, const ts__tile_node *n, int64_t mult) {
    if (!n) return;
    switch (n->kind) {
    case TN_BLOCK: scan_list(t, n, mult); return;
    case TN_LAUNCH:
        for (int32_t i = 0; i < n->nlist; i++) scan_expr(t, n->list[i], mult);
        for (int32_t i = 0; i < n->nlist2; i++) add_decl(t, n->list2[i]->name);
        scan_list(t, n->a, -1);
        return;
    case TN_TILE: add_decl(t, n->name); return;
    case TN_LET: case TN_VAR: add_decl(t, n->name); scan_expr(t, n->a, mult); return;
    case TN_ASSIGN: {
        const ts__tile_node *l = n->a;
        if (n == t->skip) return;
        if (l->kind == TN_INDEX) {
            const ts__tile_sym *s = isym(l);
            if (s == t->T) t->tother = true;
            add_wr(t, s);
            for (int32_t i = 0; i < l->nlist; i++) scan_expr(t, l->list[i], mult);
        } else add_wr(t, l->sym);
        scan_expr(t, n->b, mult);
        return;
    }
    case TN_FOR: {
        for (int32_t i = 0; i < n->a->nlist; i++) scan_expr(t, n->a->list[i], mult);
        for (int32_t i = 0; i < n->nlist2; i++) add_decl(t, n->list2[i]->name);
        int64_t k = trips(n);
        int64_t m = mult < 0 || k < 0 ? -1 : (k == 0 ? 0 : (mult > INT64_MAX / k ? -1 : mult * k));
        scan_list(t, n->b, m);
        return;
    }
    case TN_WHILE:
        scan_expr(t, n->a, -1);
        scan_list(t, n->b, -1);
        return;
    case TN_IF:
        scan_expr(t, n->a, mult);
        scan_list(t, n->b, mult);
        if (n->c) n->c->kind == TN_IF ? scan(t, n->c, mult) : scan_list(t, n->c, mult);
        return;
    case TN_CALLSTMT: {
        const ts__tile_node *c = n->a;
        if (!strcmp(c->name, "atomic_add") && c->nlist > 0) {
            const ts__tile_sym *s = isym(c->list[0]);
            if (s == t->T) t->tother = true;
            add_wr(t, s);
        }
        for (int32_t i = 0; i < c->nlist; i++) scan_expr(t, c->list[i], mult);
        return;
    }
    default: return;
    }
}

/* ---- the expression a producer stores ---- */

typedef struct subst {
    const void *sym[64];
    const ts__tile_node *val[64];
    int n;
} subst;

/* x with the names of s replaced by (copies of) their values; keep: keep the checker's
 * symbols (for a second substitution), else drop them as ts__tile_clone does */
static ts__tile_node *clone_subst(fz *F, const ts__tile_node *x, const subst *s, bool keep) {
    if (!x) return NULL;
    if (x->kind == TN_NAME && x->sym)
        for (int i = s->n - 1; i >= 0; i--)
            if (s->sym[i] == x->sym) return clone_subst(F, s->val[i], s, keep);
    ts__tile_node *c = ts__tile_alloc(F->a, sizeof *c);
    if (!c) {
        F->oom = true;
        return NULL;
    }
    *c = *x;
    if (!keep) c->ty = 0, c->sym = NULL;
    c->a = clone_subst(F, x->a, s, keep);
    c->b = clone_subst(F, x->b, s, keep);
    c->c = clone_subst(F, x->c, s, keep);
    if (x->nlist) {
        c->list = ts__tile_alloc(F->a, (size_t)x->nlist * sizeof *c->list);
        if (!c->list) return F->oom = true, NULL;
        for (int32_t i = 0; i < x->nlist; i++) c->list[i] = clone_subst(F, x->list[i], s, keep);
    }
    if (x->nlist2) {
        c->list2 = ts__tile_alloc(F->a, (size_t)x->nlist2 * sizeof *c->list2);
        if (!c->list2) return F->oom = true, NULL;
        for (int32_t i = 0; i < x->nlist2; i++) c->list2[i] = clone_subst(F, x->list2[i], s, keep);
    }
    return c;
}

/* The names, tiles/tensors and vars an expression (with the lets in `lets` seen through)
 * depends on. false when it uses something the forwarding cannot carry. */
typedef struct uses {
    const void *mem[64];
    int nmem;
    bool tensor;
    const ts__tile_sym *names[128];
    int nnames;
    bool overflow;
} uses;

static void use_name(uses *u, const ts__tile_sym *s) {
    for (int i = 0; i < u->nnames; i++)
        if (u->names[i] == s) return;
    if (u->nnames < 128) u->names[u->nnames++] = s;
    else u->overflow = true;
}

static void collect(uses *u, const ts__tile_node *x, const subst *lets) {
    if (!x) return;
    if (x->kind == TN_NAME && x->sym) {
        for (int i = 0; i < lets->n; i++)
            if (lets->sym[i] == x->sym) {
                collect(u, lets->val[i], lets);
                return;
            }
        use_name(u, x->sym);
        return;
    }
    if (x->kind == TN_INDEX) {
        const ts__tile_sym *s = isym(x);
        if (s) {
            if (s->kind == SYM_TENSOR) u->tensor = true;
            bool seen = false;
            for (int i = 0; i < u->nmem; i++) seen |= u->mem[i] == s;
            if (!seen) {
                if (u->nmem < 64) u->mem[u->nmem++] = s;
                else u->overflow = true;
            }
            use_name(u, s);
        }
        for (int32_t i = 0; i < x->nlist; i++) collect(u, x->list[i], lets);
        return;
    }
    collect(u, x->a, lets);
    collect(u, x->b, lets);
    collect(u, x->c, lets);
    for (int32_t i = 0; i < x->nlist; i++) collect(u, x->list[i], lets);
}

static bool conflicts(const touch *t, const uses *u, const void *const *loopvars, int nloop) {
    if (t->wr_overflow || t->decl_overflow || u->overflow) return true;
    if (u->tensor && t->wr_tensor) return true;
    for (int i = 0; i < t->nwr; i++) {
        for (int k = 0; k < u->nmem; k++)
            if (t->wr[i] == u->mem[k]) return true;
        for (int k = 0; k < u->nnames; k++)
            if (t->wr[i] == u->names[k]) return true; /* a var assigned */
    }
    for (int k = 0; k < u->nnames; k++) {
        bool lv = false;
        for (int q = 0; q < nloop; q++) lv |= loopvars[q] == (const void *)u->names[k];
        if (lv) continue; /* replaced by the consumer's indices */
        for (int i = 0; i < t->ndecl; i++)
            if (!strcmp(t->decl[i], u->names[k]->name)) return true;
    }
    return false;
}

/* ---- rewriting the consumers ---- */

typedef struct site_ctx {
    fz *F;
    const void *T;
    const ts__tile_node *expr;  /* the stored expression, lets already inlined */
    const void *const *loopvars;
    int nloop;
    const char *castdt;         /* NULL: the value as it is */
    int castdtc;
    const ts__tile_node *facts[4]; /* the producer's `assume`s about the value, lets inlined */
    int nfacts;
} site_ctx;

/* the read of T in statement n outside nested statement lists, if there is exactly one */
static const ts__tile_node *sole_read(const ts__tile_node *n, const void *T, int *count) {
    if (!n || n->kind == TN_BLOCK) return NULL;
    const ts__tile_node *r = NULL, *x;
    if (n->kind == TN_INDEX && isym(n) == T) ++*count, r = n;
    if ((x = sole_read(n->a, T, count))) r = x;
    if ((x = sole_read(n->b, T, count))) r = x;
    if ((x = sole_read(n->c, T, count))) r = x;
    for (int32_t i = 0; i < n->nlist; i++)
        if ((x = sole_read(n->list[i], T, count))) r = x;
    return r;
}

static void rewrite(site_ctx *c, ts__tile_node *n);

/* A statement list whose statement reads T once gets the producer's facts about the value,
 * stated for that read's indices, just before it: `assume(p == 0 || abs(p) >= K)` about the
 * stored let p becomes the same fact about the forwarded expression, which is what the
 * emitter's fact matching sees (docs/tile-language.md §11b). */
static void rewrite_list(site_ctx *c, ts__tile_node *b) {
    for (int32_t i = 0; i < b->nlist && !c->F->oom; i++) {
        ts__tile_node *s = b->list[i];
        int count = 0;
        const ts__tile_node *rd = c->nfacts && (s->kind == TN_ASSIGN || s->kind == TN_LET) ? sole_read(s, c->T, &count) : NULL;
        if (!rd || count != 1) {
            rewrite(c, s);
            continue;
        }
        subst at = {.n = 0};
        for (int k = 0; k < c->nloop; k++) at.sym[at.n] = c->loopvars[k], at.val[at.n++] = rd->list[k];
        ts__tile_node **l = ts__tile_alloc(c->F->a, (size_t)(b->nlist + c->nfacts) * sizeof *l);
        if (!l) {
            c->F->oom = true;
            return;
        }
        memcpy(l, b->list, (size_t)i * sizeof *l);
        for (int f = 0; f < c->nfacts; f++) {
            ts__tile_node *a = ts__tile_node_new(c->F->a, TN_CALLSTMT, s->loc);
            ts__tile_node *call = ts__tile_node_new(c->F->a, TN_CALL, s->loc);
            ts__tile_node **args = ts__tile_alloc(c->F->a, sizeof *args);
            ts__tile_node *x = clone_subst(c->F, c->facts[f], &at, false);
            if (!a || !call || !args || !x) {
                c->F->oom = true;
                return;
            }
            call->name = "assume", call->list = args, call->nlist = 1, args[0] = x;
            a->a = call;
            l[i + f] = a;
        }
        memcpy(l + i + c->nfacts, b->list + i, (size_t)(b->nlist - i) * sizeof *l);
        b->list = l;
        b->nlist += c->nfacts;
        i += c->nfacts;
        rewrite(c, s);
    }
}

static void rewrite(site_ctx *c, ts__tile_node *n) {
    if (!n || c->F->oom) return;
    if (n->kind == TN_INDEX && isym(n) == c->T) {
        subst s = {.n = 0};
        for (int i = 0; i < c->nloop; i++) {
            s.sym[s.n] = c->loopvars[i];
            s.val[s.n++] = n->list[i];
        }
        ts__tile_node *v = clone_subst(c->F, c->expr, &s, false);
        if (!v) return;
        if (c->castdt) {
            ts__tile_node *k = ts__tile_node_new(c->F->a, TN_CALL, n->loc);
            ts__tile_node **l = ts__tile_alloc(c->F->a, sizeof *l);
            if (!k || !l) {
                c->F->oom = true;
                return;
            }
            k->name = "cast";
            k->targ = c->castdt;
            k->dt = c->castdtc;
            k->list = l;
            k->nlist = 1;
            l[0] = v;
            v = k;
        }
        *n = *v;
        return;
    }
    rewrite(c, n->a);
    rewrite(c, n->b);
    rewrite(c, n->c);
    if (n->kind == TN_BLOCK) rewrite_list(c, n);
    else
        for (int32_t i = 0; i < n->nlist; i++) rewrite(c, n->list[i]);
    for (int32_t i = 0; i < n->nlist2; i++) rewrite(c, n->list2[i]);
}

static bool mentions(const ts__tile_node *n, const void *v) {
    if (!n) return false;
    if (n->kind == TN_NAME && n->sym == v) return true;
    if (mentions(n->a, v) || mentions(n->b, v) || mentions(n->c, v)) return true;
    for (int32_t i = 0; i < n->nlist; i++)
        if (mentions(n->list[i], v)) return true;
    return false;
}

/* Every element access of x uses the producer's last loop variable j at most as `j` or
 * `j + u` / `u + j` in its last index (u free of j): substituted at a consumer whose last
 * index is contiguous, the accesses stay contiguous, so forwarding never turns a vector loop
 * into a gather (which would leave it scalar, slower than the pass it saves). */
static bool contiguous_in(const ts__tile_node *x, const void *j) {
    if (!x) return true;
    if (x->kind == TN_INDEX) {
        for (int32_t i = 0; i < x->nlist; i++) {
            const ts__tile_node *ix = x->list[i];
            if (!mentions(ix, j)) continue;
            if (i + 1 < x->nlist) return false;
            bool ok = (ix->kind == TN_NAME && ix->sym == j) ||
                      (ix->kind == TN_BINARY && ix->op == TO_ADD &&
                       ((ix->a->kind == TN_NAME && ix->a->sym == j && !mentions(ix->b, j)) ||
                        (ix->b->kind == TN_NAME && ix->b->sym == j && !mentions(ix->a, j))));
            if (!ok) return false;
        }
        for (int32_t i = 0; i < x->nlist; i++)
            if (!contiguous_in(x->list[i], j)) return false;
        return true;
    }
    if (!contiguous_in(x->a, j) || !contiguous_in(x->b, j) || !contiguous_in(x->c, j)) return false;
    for (int32_t i = 0; i < x->nlist; i++)
        if (!contiguous_in(x->list[i], j)) return false;
    return true;
}

/* every name in x carries its symbol (x was not rewritten since the last check) */
static bool resolved(const ts__tile_node *x) {
    if (!x) return true;
    if (x->kind == TN_NAME && !x->sym) return false;
    if (!resolved(x->a) || !resolved(x->b) || !resolved(x->c)) return false;
    for (int32_t i = 0; i < x->nlist; i++)
        if (!resolved(x->list[i])) return false;
    return true;
}

/* May the value stored by `T[...] = e` (e of type ty) be carried as `e` / `cast<dt>(e)`? */
static bool carry_type(int dt, int ty, bool *cast) {
    *cast = false;
    if (ty == TT_INTLIT || ty == TT_FLOATLIT || ty == TT_NONE || ty == TT_ERROR) return false;
    if (dt != ts__tile_dt_packed_raw(dt) || dt == TT_E5M6) return false;
    if (ty == dt) return true;
    /* rounding to a storage format, or exact widening of one: the cast is the store's
     * conversion (the emitter uses the same routine for both) */
    if (ts__tile_dt_is_narrow(dt) && dt != TT_E5M6 && ty == TT_F32) return *cast = true;
    if (dt == TT_F32 && ts__tile_dt_is_narrow(ty) && ty != TT_E5M6) return *cast = true;
    return false;
}

/* Try to forward each tile store of the producer loop b->list[p] into the later statements
 * of block b. The kernel body `kb` is scanned for other accesses. */
static void forward_from(fz *F, ts__tile_node *kb, ts__tile_node *b, int32_t p) {
    ts__tile_node *P = b->list[p];
    ts__tile_node *pb = P->b;
    int nv = P->nlist2;
    if (!pb || nv < 1 || nv > TS__TILE_MAX_RANK) return;
    const void *lv[TS__TILE_MAX_RANK];
    int64_t ext[TS__TILE_MAX_RANK];
    for (int i = 0; i < nv; i++) {
        lv[i] = P->list2[i]->sym;
        if (!lv[i] || !cint(P->a->list[i], &ext[i])) return;
    }
    for (int32_t q = 0; q < pb->nlist && !F->oom; q++) {
        ts__tile_node *s = pb->list[q];
        if (s->kind != TN_ASSIGN || s->op != TO_SET || s->a->kind != TN_INDEX) continue;
        const ts__tile_sym *T = isym(s->a);
        if (!T || T->kind != SYM_TILE || T->rank != nv) continue;
        bool at_vars = true;
        int64_t numel = 1;
        for (int i = 0; i < nv; i++) {
            const ts__tile_node *ix = s->a->list[i];
            at_vars = at_vars && ix->kind == TN_NAME && ix->sym == lv[i] && T->cdims[i] == ext[i];
            numel *= T->cdims[i];
        }
        if (!at_vars) continue;
        /* a store rewritten earlier in this round holds names not yet resolved (clones lose
         * their symbols): its own forwarding waits for the next round, after the re-check */
        if (!resolved(s->b)) continue;
        bool cast;
        if (!carry_type(T->dt, s->b->ty, &cast)) continue;
        /* the lets of the body before the store, top level only, are inlined */
        subst lets = {.n = 0};
        bool ok = true;
        for (int32_t k = 0; k < q && ok; k++) {
            const ts__tile_node *x = pb->list[k];
            if (x->kind == TN_LET) {
                if (lets.n >= 64) ok = false;
                else lets.sym[lets.n] = x->sym, lets.val[lets.n++] = x->a;
            }
        }
        if (!ok) continue;
        uses u = {.nmem = 0};
        collect(&u, s->b, &lets);
        /* a name the expression uses must be a loop variable of the producer, or declared
         * outside it (lets inlined above; vars and nested declarations of the body are not) */
        touch inner = {.T = NULL};
        scan_list(&inner, pb, 1);
        for (int k = 0; k < u.nnames && ok; k++) {
            const ts__tile_sym *nm = u.names[k];
            bool isloop = false;
            for (int i = 0; i < nv; i++) isloop |= lv[i] == (const void *)nm;
            if (isloop) continue;
            for (int i = 0; i < inner.ndecl; i++)
                if (!strcmp(inner.decl[i], nm->name)) ok = false;
            if (nm == T) ok = false;
        }
        if (!ok || inner.decl_overflow) continue;
        /* the producer's body writes nothing the expression reads (other than T's store) */
        touch pw = {.T = T};
        for (int32_t k = 0; k < pb->nlist; k++)
            if (k != q) scan(&pw, pb->list[k], 1);
        if (pw.tother || pw.nsites) continue;
        pw.ndecl = 0; /* names of the body itself were checked above */
        if (conflicts(&pw, &u, lv, nv)) continue;
        /* T elsewhere: only reads, only in the statements after the producer */
        touch all = {.T = T, .skip = s};
        scan(&all, kb, 1);
        touch after = {.T = T};
        int32_t last = -1;
        for (int32_t k = p + 1; k < b->nlist; k++) {
            touch one = {.T = T};
            scan(&one, b->list[k], 1);
            if (one.nsites || one.tother) last = k;
        }
        if (last < 0) continue; /* never read: left to the C compiler */
        for (int32_t k = p + 1; k <= last; k++) scan(&after, b->list[k], 1);
        if (after.tother || after.unbounded || all.tother) continue;
        if (all.nsites != after.nsites + 0 || all.nsites == 0) continue;
        if (after.treads > numel) continue;
        if (conflicts(&after, &u, lv, nv)) continue;
        /* rewrite */
        ts__tile_node *e = clone_subst(F, s->b, &lets, true);
        if (!e) return;
        if (!contiguous_in(e, lv[nv - 1])) continue;
        site_ctx c = {.F = F, .T = T, .expr = e, .loopvars = lv, .nloop = nv,
                      .castdt = cast ? ts__tile_dt_name(T->dt) : NULL, .castdtc = T->dt};
        /* facts of the body that read nothing the value does not (so they hold at the
         * consumers as they did here) travel with it */
        for (int32_t k = 0; k < pb->nlist && c.nfacts < 4; k++) {
            const ts__tile_node *x = pb->list[k];
            if (x->kind != TN_CALLSTMT || strcmp(x->a->name, "assume") || x->a->nlist != 1 || !resolved(x->a->list[0]))
                continue;
            uses fu = {.nmem = 0};
            collect(&fu, x->a->list[0], &lets);
            bool inside = !fu.overflow && (!fu.tensor || u.tensor);
            for (int m = 0; m < fu.nnames && inside; m++) {
                bool found = false;
                for (int i = 0; i < nv; i++) found |= lv[i] == (const void *)fu.names[m];
                for (int i = 0; i < u.nnames; i++) found |= u.names[i] == fu.names[m];
                inside = found;
            }
            if (!inside) continue;
            ts__tile_node *fx = clone_subst(F, x->a->list[0], &lets, true);
            if (!fx) return;
            c.facts[c.nfacts++] = fx;
        }
        for (int32_t k = p + 1; k <= last; k++) rewrite(&c, b->list[k]);
        /* the store goes; the loop goes too when nothing with an effect is left in it */
        for (int32_t k = q; k + 1 < pb->nlist; k++) pb->list[k] = pb->list[k + 1];
        pb->nlist--;
        q--;
        F->nfused++;
    }
    bool effect = false;
    for (int32_t k = 0; k < pb->nlist; k++) /* an `assume` inside a block is not checked: no effect */
        effect |= pb->list[k]->kind != TN_LET &&
                  !(pb->list[k]->kind == TN_CALLSTMT && !strcmp(pb->list[k]->a->name, "assume"));
    if (!effect) {
        P->kind = TN_BLOCK;
        P->a = P->b = P->c = NULL;
        P->list = NULL;
        P->nlist = 0;
        P->list2 = NULL;
        P->nlist2 = 0;
    }
}

static void fuse_block(fz *F, ts__tile_node *kb, ts__tile_node *b);

static void fuse_stmt(fz *F, ts__tile_node *kb, ts__tile_node *n) {
    if (!n) return;
    switch (n->kind) {
    case TN_BLOCK: fuse_block(F, kb, n); break;
    case TN_LAUNCH: fuse_block(F, kb, n->a); break;
    case TN_FOR: case TN_WHILE: fuse_block(F, kb, n->b); break;
    case TN_IF:
        fuse_block(F, kb, n->b);
        if (n->c) n->c->kind == TN_IF ? fuse_stmt(F, kb, n->c) : fuse_block(F, kb, n->c);
        break;
    default: break;
    }
}

static void fuse_block(fz *F, ts__tile_node *kb, ts__tile_node *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->nlist && !F->oom; i++) {
        ts__tile_node *s = b->list[i];
        fuse_stmt(F, kb, s);
        if (s->kind == TN_FOR && !strcmp(s->a->name, "parallel")) forward_from(F, kb, b, i);
    }
    /* producers that lost their last effect became empty blocks: drop them */
    int32_t k = 0;
    for (int32_t i = 0; i < b->nlist; i++)
        if (!(b->list[i]->kind == TN_BLOCK && b->list[i]->nlist == 0)) b->list[k++] = b->list[i];
    b->nlist = k;
}

/* One round: forward what can be forwarded, then check the result again (which resolves the
 * rewritten expressions' names and types). *changed: something was forwarded. */
static bool fuse_round(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, bool *changed);

bool ts__tile_fuse(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog) {
    /* a chain producer -> producer -> consumer takes one round per link */
    bool changed = true;
    for (int round = 0; round < 4 && changed; round++)
        if (!fuse_round(a, d, prog, &changed)) return false;
    return true;
}

static bool fuse_round(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, bool *changed) {
    fz F = {.a = a};
    *changed = false;
    for (int i = 0; i < prog->nkernels && !F.oom; i++) fuse_block(&F, prog->kernels[i].body, prog->kernels[i].body);
    if (F.oom) goto oom;
    if (!F.nfused) return true;
    *changed = true;
    /* the fused module, checked again (types and symbols of the rewritten expressions) */
    return ts__tile_recheck(a, d, prog, "fused", true);
oom:
    ts__tile_error(d, (ts__tile_loc){1, 1}, "program too large (compiler memory limit reached)");
    return false;
}
