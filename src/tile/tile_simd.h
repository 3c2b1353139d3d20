/* The C emitter's state and the functions its files share: tile_emit_c.c (types, scalar
 * expressions, statements, kernels), tile_simd.c (the SIMD lowering of parallel and fold
 * loops) and tile_simd2.c (its second set: shifts, lane folds, transposed reads, strided
 * groups, gathers, affine division). Internal to those three files. */
#ifndef TS_TILE_SIMD_H
#define TS_TILE_SIMD_H

#include "tile/tile_internal.h"

typedef struct em {
    ts__tile_buf *o;
    ts__tile_diag *d;
    const ts__tile_kernel *k;
    const char *kname;
    int nchecks;
    ts__tile_buf checks; /* C string literals of check messages, comma separated */
    bool fail;
    /* SIMD lowering (see "SIMD lowering" below) */
    bool simd;                 /* off: plain scalar loops (the reference emission) */
    int lanes;                 /* lanes per vector (ts__tv_* of tile_rt.h): 8 or 16 */
    bool invec;                /* emitting inside a vectorised loop */
    bool vfail;                /* the loop being vectorised has something unsupported */
    const ts__tile_sym *vj;    /* the vector loop variable */
    char vjname[300];          /* C name of its first lane */
    struct {
        const ts__tile_sym *s;
        int kind;   /* VS_VEC: a vector C variable w<uid>_<name>; VS_AFF: base + j */
        char *base; /* VS_AFF: C text of base */
    } vt[256];
    int nvt;
    int vtmp;                  /* counter for unique temporaries */
    const ts__tile_node *thenv[64]; /* ifs known true in the vector range */
    int nthen;
    /* 32-lane narrowing stores: in a 4 x 8 unrolled copy of a vector loop, the stores to
     * 8-bit destinations that nothing else in the body touches are kept in registers and
     * packed once per 32 lanes (vec_parallel) */
    bool nodefer;              /* retry without them (a deferred store could not be emitted) */
    bool vscalar;              /* vec_parallel without vectors: the hoisted range, scalar loops */
    bool inrange;              /* emitting the in-range scalar loop: thenv ifs hold */
    int ndef, defu, defid;     /* defu: the copy being emitted (0..3), -1 outside */
    const ts__tile_node *defv[8], *defval[8]; /* the store, its value (an outer cast peeled) */
    bool defe4m3[8];           /* e4m3: f32 values kept (ts__tv_st_e4m3x32); else u32 codes */
    bool defbf16[8];           /* bf16 from f32: f32 values kept (ts__tv_st_bf16x32) */
    bool defbfk[8];            /* bf16 of a NaN-canonicalising select: codes kept (vbf16_nank) */
    bool deff16[8];            /* f16 from f32: f32 values kept (ts__tv_st_f16x32) */
    bool defnz[8];             /* e4m3 values known zero or >= 2^-6 in magnitude (assume) */
    const ts__tile_node *defbf[8], *defbfs[8]; /* such a value as bf16 element * scalar */
    bool defbfh[8];                             /* the scalar read once, before the loop */
    const ts__tile_node *nzv[8]; /* values with that fact in the current vector body */
    int nnz;
    /* bounds tests of a vector loop that do not change from row to row (the outer dims) are
     * computed once before them, into pre (vec_parallel); rowv: what does change */
    ts__tile_buf *pre;
    int prelv;                 /* its indentation */
    /* a row fold fused into the vector loop before it (ts__em_body() finds the pair, vec_parallel
     * emits it): for o in parallel(R) { var acc = init; for k in serial(C) { acc = acc OP
     * f(X[o, k]) } Y[o] = acc } after the loop over (i, j) in (R, C) that writes X[i, j] */
    struct {
        const ts__tile_node *loop; /* the vector loop they join */
        int n;                     /* folds (consecutive statements after the loop) */
        struct {
            const ts__tile_node *var, *fold, *store; /* var acc, acc = acc OP f, Y[o] = acc */
            const ts__tile_sym *o, *k, *acc;
            const char *op;
            const ts__tile_sym *x; /* the tile folded; xdead: read by this fold only */
            bool xdead;
        } f[4];
        bool done;
    } rf;
    const void *rowv[64];
    int nrowv;
    /* pairs of stride-2 stores x[2 j + c] = a; x[2 j + c + 1] = b (adjacent statements of a
     * vector body, x touched nowhere else in it): one interleaved store (ts__tv_st2x_*) */
    const ts__tile_node *pfirst[8], *psecond[8];
    int npairs, pid;
    int rfid;                  /* names the registers of dead fold tiles (rfx<rfid>_<r>) */
    /* second set (tile_simd2.c): tiles the vector loop reads transposed, x[j, i], and
     * the ids of their transposed copies */
    const ts__tile_sym *v2tr[8];
    int v2trid[8], nv2tr;
    /* strided groups of the vector body: x[..., K j + c] read (or stored) for every c < K */
    struct {
        const ts__tile_sym *s;
        const ts__tile_node *acc; /* one of the accesses (its other indices) */
        const ts__tile_node *last; /* stores: the last of the K statements */
        int64_t K;
        bool st;
        int id;
    } v2g[4];
    int nv2g;
} em;

enum { VS_VEC = 1, VS_AFF = 2 };

/* tile_emit_c.c: types, scalar expressions, statements */
const char *ts__em_ctype(int dt);
const char *ts__em_utype(int t);
const char *ts__em_helper_suffix(int t);
int ts__em_natural(int t);
int ts__em_arith(int t);
int ts__em_irank(int t);
int ts__em_join(int x, int y);
char *ts__em_conv(const char *s, int from, int to);
bool ts__em_lit_int(const ts__tile_node *n, int64_t *v);
bool ts__em_lit_float(const ts__tile_node *n, double *v);
char *ts__em_ex_str(em *e, const ts__tile_node *n, int want);
void ts__em_sym_ref(em *e, ts__tile_buf *b, const ts__tile_sym *s);
void ts__em_stride_factor(ts__tile_buf *b, const ts__tile_sym *s, int i);
const char *ts__em_unary_fn(const char *f, int t);
void ts__em_ind(em *e, int lv);
void ts__em_body(em *e, const ts__tile_node *blk, int lv);
void ts__em_st(em *e, const ts__tile_node *n, int lv);

/* tile_simd.c: the SIMD lowering */
char *ts__em_sdup(const char *s);
bool ts__em_dep(const em *e, const ts__tile_node *n);
bool ts__em_refs(const ts__tile_node *n, const void *s);
char *ts__em_affine(em *e, const ts__tile_node *n);
const char *ts__em_vs(int t);
int ts__em_lane_bits(int t);
char *ts__em_elem_at(const ts__tile_sym *s, char **ix, int n);
char *ts__em_vex_natural(em *e, const ts__tile_node *n);
char *ts__em_vex(em *e, const ts__tile_node *n, int want);
bool ts__em_then_only(const em *e, const ts__tile_node *n);
bool ts__em_refs_written(const ts__tile_node *n, const void *s);
void ts__em_rf_dead_decls(em *e, int lv);
int ts__em_rf_dead_tile(const em *e, const void *s);
bool ts__em_rowfold_match(em *e, const ts__tile_node *a, const ts__tile_node *b);
int ts__em_count_names(const ts__tile_node *n, const void *s);
bool ts__em_vec_parallel(em *e, const ts__tile_node *n, int lv);
bool ts__em_eq_shift(const ts__tile_node *a, const ts__tile_node *b, const void *k, int64_t l);
bool ts__em_int_fold_type(int t);
const ts__tile_node *ts__em_fold_of(const ts__tile_node *s, const ts__tile_sym **acc, const char **op);
void ts__em_fold_step(em *e, const char *acc, int id, const char *op, const char *S, const char *U, bool flt, bool mm);
bool ts__em_vec_reduce(em *e, const ts__tile_node *n, int lv);
char *ts__em_sfmt(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* tile_simd2.c: its second set */
char *ts__em_v2_shift(int t, int op, const char *x, const char *y);
bool ts__em_v2_hfold(em *e, const char *av, const char *acc, const char *op, int t, int lv);
bool ts__em_v2_rf_hfold(em *e, int id, int r, int l, int lv);
void ts__em_v2_transposed_copies(em *e, const ts__tile_node *n, int lv);
char *ts__em_v2_transposed_addr(em *e, const ts__tile_node *n);
void ts__em_v2_find_groups(em *e, const ts__tile_node *bd, const bool *hoisted);
void ts__em_v2_group_begin(em *e, int lv);
char *ts__em_v2_group_read(em *e, const ts__tile_node *n);
bool ts__em_v2_group_store(em *e, const ts__tile_node *n, int lv);
char *ts__em_v2_group_widened(em *e, const ts__tile_node *n);
char *ts__em_v2_conv(char *s, int from, int to);
char *ts__em_v2_divaff(em *e, const ts__tile_node *n);
char *ts__em_v2_gather(em *e, const ts__tile_node *n);
char *ts__em_v2_shift8(int t, int op, const char *x, int k);

#endif
