/* The tile language compiler (tilec): shared internal types.
 *
 * Pipeline: source -> lexer -> parser -> AST (tile_ast.c) -> macro expansion + checker
 * (tile_check.c) -> lowering of tile operations into loops (tile_lower.c, the "IR": the core
 * subset of the language itself, so it prints and re-parses) -> C11 (tile_emit_c.c; the SIMD
 * lowering in tile_simd.c, tile_simd2.c).
 * Every stage reports through one diagnostics sink and stops cleanly; nothing aborts on user
 * input. Memory comes from one arena per compilation with a hard cap. */
#ifndef TS_TILE_INTERNAL_H
#define TS_TILE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits (every one is reported as a diagnostic, never a crash) ---- */
#define TS__TILE_MAX_SOURCE (4u << 20)     /* bytes of source */
#define TS__TILE_MAX_ARENA (256u << 20)    /* bytes of AST/IR per compilation */
#define TS__TILE_MAX_DEPTH 200             /* parser / checker recursion depth */
#define TS__TILE_MAX_ERRORS 20             /* diagnostics kept before stopping */
#define TS__TILE_MAX_RANK 4                /* tensor / tile rank (== TS_MAX_DIMS) */
#define TS__TILE_MAX_MACRO_DEPTH 16
#define TS__TILE_MAX_TILE_ELEMS (1ll << 24) /* elements per tile */

/* ---- arena ---- */
typedef struct ts__tile_arena_blk ts__tile_arena_blk;
typedef struct ts__tile_arena {
    ts__tile_arena_blk *head;
    size_t used_total;
    bool exhausted;
} ts__tile_arena;
void *ts__tile_alloc(ts__tile_arena *a, size_t bytes); /* zeroed; NULL once over the cap */
char *ts__tile_strdup(ts__tile_arena *a, const char *s, size_t n);
void ts__tile_arena_free(ts__tile_arena *a);

/* ---- growable text buffer (output of printers, emitters, diagnostics) ---- */
typedef struct ts__tile_buf {
    char *data;
    size_t len, cap;
    bool oom;
} ts__tile_buf;
void ts__tile_buf_puts(ts__tile_buf *b, const char *s);
void ts__tile_buf_printf(ts__tile_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ts__tile_buf_free(ts__tile_buf *b);

/* Append `s` escaped for the inside of a C string literal (tile_escape.c says how): the
 * literal then holds exactly `s`. FORMAT: the literal is a printf format that prints `s`.
 * COMMENT: for the inside of a C comment (no `*`, so never a closing `* /`). */
typedef enum ts__tile_esc { TS__ESC_STRING, TS__ESC_FORMAT, TS__ESC_COMMENT } ts__tile_esc;
void ts__tile_buf_escape(ts__tile_buf *b, const char *s, ts__tile_esc mode);

/* ---- diagnostics ---- */
typedef struct ts__tile_loc {
    int32_t line, col; /* 1-based; col counts bytes */
} ts__tile_loc;

typedef struct ts__tile_diag {
    const char *file;
    const char *src;
    size_t src_len;
    int nerrors;
    bool stopped; /* too many errors or a fatal one: later stages must not run */
    ts__tile_buf out; /* "file:line:col: error: msg\n<line>\n<caret>\n" ... */
    char first[512];  /* first message without location, for ts_last_error() */
    /* While a template instance is checked: "in instance 'x' of template 'y'", printed as a
     * note (with the instance's line and caret) after each error; NULL otherwise. */
    const char *note;
    ts__tile_loc note_loc;
} ts__tile_diag;
void ts__tile_error(ts__tile_diag *d, ts__tile_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- dtypes of the language ---- */
typedef enum ts__tile_dt {
    TT_NONE = 0,
    TT_BOOL, TT_I8, TT_I16, TT_I32, TT_I64, TT_U8, TT_U16, TT_U32, TT_U64,
    TT_F16, TT_BF16, TT_F32, TT_F64,
    TT_E4M3, TT_E5M2, TT_E2M1, TT_UE8M0, TT_E5M6,
    TT_E2M1X2, TT_UE8M0X4, TT_E5M6X8,
    TT_DT_COUNT,
    /* types of values only, never of storage */
    TT_INTLIT, TT_FLOATLIT, TT_VOID, TT_STRING, TT_ERROR
} ts__tile_dt;
const char *ts__tile_dt_name(int dt);
int ts__tile_dt_from_name(const char *s); /* TT_NONE if not a dtype */
int ts__tile_dt_bytes(int dt);            /* storage bytes */
bool ts__tile_dt_is_int(int dt);          /* bool excluded */
bool ts__tile_dt_is_signed(int dt);
bool ts__tile_dt_is_float(int dt);        /* f32 / f64 */
bool ts__tile_dt_is_narrow(int dt);       /* f16 bf16 e4m3 e5m2 e2m1 ue8m0 e5m6: widen to f32 */
int ts__tile_dt_packed_raw(int dt);       /* e2m1x2 -> u8, ue8m0x4 -> i32, e5m6x8 -> u8; else dt */
int ts__tile_dt_to_ts(int dt);            /* ts_dtype code or -1 when no tensor dtype exists */

/* ---- AST ---- */
typedef enum ts__tile_kind {
    /* module level */
    TN_MODULE, TN_CONST, TN_KERNEL, TN_PARAM, TN_MACRO,
    TN_TPARAM,   /* template parameter: name, ival = ts__tile_tparam_kind */
    TN_INSTANCE, /* `instance name = tmpl<args>;`: name, a = TN_NAME of the template, list = args */
    /* statements */
    TN_LAUNCH, TN_BLOCK, TN_TILE, TN_LET, TN_VAR, TN_ASSIGN, TN_FOR, TN_IF, TN_WHILE,
    TN_CALLSTMT, TN_BREAK, TN_CONTINUE,
    /* expressions */
    TN_INT, TN_FLOAT, TN_BOOL, TN_STRING, TN_NAME, TN_INDEX, TN_SLICE, TN_UNARY, TN_BINARY,
    TN_CALL, TN_KWARG,
    TN_KIND_COUNT
} ts__tile_kind;

/* Operators: the token punctuation, stored as small codes. */
typedef enum ts__tile_op {
    TO_NONE = 0,
    TO_ADD, TO_SUB, TO_MUL, TO_DIV, TO_MOD, TO_SHL, TO_SHR, TO_BAND, TO_BOR, TO_BXOR,
    TO_LAND, TO_LOR, TO_EQ, TO_NE, TO_LT, TO_LE, TO_GT, TO_GE,
    TO_NEG, TO_NOT, TO_BNOT, /* unary */
    TO_SET /* plain '=' in TN_ASSIGN; compound assignments use the binary op */
} ts__tile_op;
const char *ts__tile_op_str(int op);

typedef enum ts__tile_tparam_kind { TP_DTYPE = 0, TP_INT, TP_BOOL } ts__tile_tparam_kind;

typedef enum ts__tile_scope { TS_SCOPE_TILE = 0, TS_SCOPE_SHARED, TS_SCOPE_LOCAL } ts__tile_scope;

typedef struct ts__tile_node ts__tile_node;
struct ts__tile_node {
    int kind;
    ts__tile_loc loc;
    int op;        /* TN_UNARY/TN_BINARY/TN_ASSIGN */
    int dt;        /* TN_TILE/TN_VAR/TN_PARAM element dtype; TN_CALL template dtype */
    int scope;     /* TN_TILE: ts__tile_scope; TN_PARAM: 1 if tensor */
    const char *name;  /* identifiers, callee, kernel/const/macro name, string value */
    const char *targ;  /* TN_CALL: template argument spelling (dtype or reduce op), or NULL;
                        * TN_TILE/TN_VAR/TN_PARAM in a template: the name of a dtype template
                        * parameter (then dt == TT_NONE until instantiation) */
    int64_t ival;      /* TN_INT, TN_BOOL */
    double fval;       /* TN_FLOAT */
    ts__tile_node *a, *b, *c;
    ts__tile_node **list;   /* args, statements, indices, params, dims */
    int32_t nlist;
    ts__tile_node **list2;  /* kwargs, loop/grid variable names, strides, template params */
    int32_t nlist2;
    /* filled by the checker */
    int ty;                 /* value type of an expression */
    void *sym;              /* resolved symbol (ts__tile_sym *) */
};

/* The checker's mark on a copy() tensor region (its `ival`) that fills the whole tile, in
 * row-major order, from a run along the tensor's last dim (else ival maps tile dims to
 * tensor dims, a nibble each). */
#define TS__TILE_COPY_FLAT (INT64_C(1) << 62)

ts__tile_node *ts__tile_node_new(ts__tile_arena *a, int kind, ts__tile_loc loc);
/* Deep copy (checker annotations dropped). NULL in, NULL out. */
ts__tile_node *ts__tile_clone(ts__tile_arena *a, const ts__tile_node *n);
/* Structural equality ignoring locations and checker annotations. */
bool ts__tile_equal(const ts__tile_node *x, const ts__tile_node *y);
/* Pretty-print a module (or any statement / expression) in surface syntax that re-parses to
 * an equal tree. */
void ts__tile_print(ts__tile_buf *b, const ts__tile_node *n);

/* ---- front end ---- */
/* Parse `src` into a TN_MODULE; NULL (with diagnostics) on the first syntax error. */
ts__tile_node *ts__tile_parse(ts__tile_arena *a, ts__tile_diag *d);

/* ---- symbols (checker) ---- */
typedef enum ts__tile_symkind {
    SYM_CONST, SYM_DIM, SYM_STRIDE, SYM_SCALAR, SYM_TENSOR, SYM_TILE, SYM_LET, SYM_VAR,
    SYM_LOOPVAR, SYM_GRIDVAR, SYM_MACRO, SYM_TEMPLATE
} ts__tile_symkind;

typedef struct ts__tile_sym ts__tile_sym;
struct ts__tile_sym {
    int kind;
    const char *name;
    ts__tile_node *decl;
    int dt;                       /* element / value type */
    int rank;
    int64_t cdims[TS__TILE_MAX_RANK]; /* tiles: constant dims; tensors: constant dim or -1 */
    ts__tile_sym *dimsym[TS__TILE_MAX_RANK]; /* tensors: symbol of a symbolic dim */
    ts__tile_sym *stridesym[TS__TILE_MAX_RANK]; /* tensors with strides=: symbols, NULL=const */
    int64_t cstrides[TS__TILE_MAX_RANK];
    bool strided;                 /* tensor declared with strides= */
    bool is_const_int;            /* SYM_CONST holding an integer */
    int64_t ival;
    double fval;
    int depth;                    /* scope depth of the declaration */
    int loop_kind;                /* SYM_LOOPVAR: 1 if the loop is `parallel` */
    int index;                    /* position among params / tiles (emission) */
    uint64_t deps;                /* bit i: depends on parallel-loop variable slot i */
    int uid;                      /* unique per compilation: C names never shadow wrongly */
    ts__tile_sym *next;           /* scope chain */
};

/* A checked kernel: the macro-expanded body, with symbols attached. */
typedef struct ts__tile_kernel {
    ts__tile_node *decl;     /* original TN_KERNEL */
    ts__tile_node *body;     /* TN_BLOCK after macro expansion, checked */
    ts__tile_sym **params;   /* in declaration order */
    int nparams;
    ts__tile_sym **dims;     /* symbolic dims and strides, first binding order */
    int ndims;
} ts__tile_kernel;

typedef struct ts__tile_program {
    ts__tile_node *module;   /* as checked: templates dropped, instances replaced by their kernels */
    ts__tile_kernel *kernels;
    int nkernels;
    ts__tile_sym *consts; /* module constants */
} ts__tile_program;

/* Name resolution, types, shapes, races. Returns false when any error was reported. */
bool ts__tile_check(ts__tile_arena *a, ts__tile_diag *d, ts__tile_node *module,
                    ts__tile_program *out);

/* Lower tile operations (copy, fill, clear, reduce, cumsum, gemm) of every kernel body into
 * loops over elements, in place on prog->kernels[i].body (re-checked afterwards). */
bool ts__tile_lower(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog);
/* The same with the fusion pass (tile_fuse.c) switchable: ts__tile_lower fuses; tests and
 * `tilestack tilec --no-fuse` use fuse=false to get the unfused IR, which the fused one must
 * match bit for bit. */
bool ts__tile_lower_ex(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, bool fuse);
/* Forward element-wise producers into their consumers (docs/tile-language.md §11b), in place
 * on a lowered, checked program (checked again afterwards). */
bool ts__tile_fuse(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog);
/* prog rebuilt as a module (constants, kernels with their current bodies, cloned or not) and
 * checked again; what names the pass in the internal-error message ("lowered", "fused") */
bool ts__tile_recheck(ts__tile_arena *a, ts__tile_diag *d, ts__tile_program *prog, const char *what,
                      bool clone_bodies);

typedef struct ts__tile_emit_opts {
    const char *prefix; /* public wrapper prefix, default "ts_" */
    bool scalar;        /* no SIMD lowering: plain C loops (the reference the SIMD code matches) */
    int lanes;          /* SIMD lanes: 8 (default, also for 0) or 16 (64-byte vectors, AVX-512) */
} ts__tile_emit_opts;
bool ts__tile_emit_c(ts__tile_buf *out, ts__tile_diag *d, const ts__tile_program *prog,
                     const ts__tile_emit_opts *opts);

/* The IR printer: the lowered kernels as a module (re-parses). */
void ts__tile_print_program(ts__tile_buf *b, const ts__tile_program *prog);

#endif
