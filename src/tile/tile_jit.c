/* The tile JIT: ts_tile_compile / ts_tile_launch / ts_tile_kernel_release.
 *
 * source -> the tilec pipeline (wrappers prefixed tsjitk_) -> one C file: a prelude renaming
 * every library entry point the code may call (tile_jit_rt.h), the generated C, and an
 * epilogue with the thunks, the module's init function and one trampoline per kernel that
 * unpacks an argument array into the wrapper's C signature -> the system compiler -> a
 * shared object in the disk cache (tile_cache.c) -> dlopen, init with the runtime table. */
#include "tilestack/tile.h"
#include "core/internal.h"
#include "tilestack/numerics.h"
#include "tile/tile_internal.h"
#include "tile/tile_jit_internal.h"
#include "tile/tile_jit_rt.h"
#include "tile/tile_sha256.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PARAMS 64
#define WRAP_PREFIX "tsjitk_"

/* ---- the runtime table (library side; the module gets the same layout as text) ---- */
typedef struct ts__tile_jit_rt {
    unsigned abi, size;
    ts_status (*vfail)(ts_status code, const char *fmt, va_list ap);
#define TS__RT_X(R, N, P, A) R(*f_##N) P;
#define TS__RT_V(N, P, A) void(*f_##N) P;
    TS__TILE_JIT_RT_LIST(TS__RT_X, TS__RT_V)
#undef TS__RT_X
#undef TS__RT_V
} ts__tile_jit_rt;

static ts_status rt_vfail(ts_status code, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return ts__fail(code, "%s", msg);
}

static const ts__tile_jit_rt g_rt = {
    TS__TILE_JIT_ABI, sizeof(ts__tile_jit_rt), rt_vfail,
#define TS__RT_X(R, N, P, A) N,
#define TS__RT_V(N, P, A) N,
    TS__TILE_JIT_RT_LIST(TS__RT_X, TS__RT_V)
#undef TS__RT_X
#undef TS__RT_V
};

/* The module side, as C text. */
#define TS__TXT_RENAME_X(R, N, P, A) "#define " #N " tsjit__" #N "\n"
#define TS__TXT_RENAME_V(N, P, A) "#define " #N " tsjit__" #N "\n"
static const char k_prelude[] =
    "/* tilestack JIT module: library entry points go through the runtime table */\n"
    "#define ts__fail tsjit__ts__fail\n"
    TS__TILE_JIT_RT_LIST(TS__TXT_RENAME_X, TS__TXT_RENAME_V)
    TS__TILE_NUMERICS_PRELUDE;

#define TS__TXT_FIELD_X(R, N, P, A) "    " #R " (*f_" #N ")" #P ";\n"
#define TS__TXT_FIELD_V(N, P, A) "    void (*f_" #N ")" #P ";\n"
#define TS__TXT_THUNK_X(R, N, P, A) #R " " #N #P " { return tsjit__rt->f_" #N #A "; }\n"
#define TS__TXT_THUNK_V(N, P, A) "void " #N #P " { tsjit__rt->f_" #N #A "; }\n"
#define TS__STR(x) #x
#define TS__XSTR(x) TS__STR(x)
static const char k_epilogue[] =
    "\n/* ---- tilestack JIT epilogue ---- */\n"
    "#include <stdarg.h>\n"
    "struct tsjit__rt_t {\n"
    "    unsigned abi, size;\n"
    "    ts_status (*vfail)(ts_status code, const char *fmt, va_list ap);\n"
    TS__TILE_JIT_RT_LIST(TS__TXT_FIELD_X, TS__TXT_FIELD_V)
    "};\n"
    "static const struct tsjit__rt_t *tsjit__rt;\n"
    "ts_status ts__fail(ts_status code, const char *fmt, ...) {\n"
    "    va_list ap;\n"
    "    va_start(ap, fmt);\n"
    "    ts_status r = tsjit__rt->vfail(code, fmt, ap);\n"
    "    va_end(ap);\n"
    "    return r;\n"
    "}\n"
    TS__TILE_JIT_RT_LIST(TS__TXT_THUNK_X, TS__TXT_THUNK_V)
    TS__TILE_NUMERICS_EPILOGUE
    "TS_API int tsjit__init(const void *rt, size_t size, unsigned abi) {\n"
    "    if (abi != " TS__XSTR(TS__TILE_JIT_ABI) " || size != sizeof(struct tsjit__rt_t)) return -1;\n"
    "    tsjit__rt = (const struct tsjit__rt_t *)rt;\n"
    "    return 0;\n"
    "}\n";

/* ---- the kernel object ---- */
typedef struct jit_kernel {
    char *name;
    int nparams;
    char **pnames;
    int *pdt; /* -1: tensor; else the scalar's ts__tile_dt */
    ts_status (*call)(void *const *argv);
} jit_kernel;

struct ts_tile_kernel {
    void *handle;
    int nkernels;
    jit_kernel *k;
    bool cache_hit;
    char key[65];
    char *path;
};

static void kernel_free(ts_tile_kernel *m) {
    if (!m) return;
    for (int i = 0; i < m->nkernels; i++) {
        for (int j = 0; j < m->k[i].nparams; j++) free(m->k[i].pnames[j]);
        free(m->k[i].pnames);
        free(m->k[i].pdt);
        free(m->k[i].name);
    }
    free(m->k);
    free(m->path);
    if (m->handle) dlclose(m->handle);
    free(m);
}

void ts_tile_kernel_release(ts_tile_kernel *kernel) { kernel_free(kernel); }

static const char *scalar_ctype(int dt) {
    switch (dt) {
    case TT_BOOL: return "bool";
    case TT_I8: return "int8_t";
    case TT_I16: return "int16_t";
    case TT_I32: return "int32_t";
    case TT_I64: return "int64_t";
    case TT_U8: return "uint8_t";
    case TT_U16: return "uint16_t";
    case TT_U32: return "uint32_t";
    case TT_U64: return "uint64_t";
    case TT_F32: return "float";
    case TT_F64: return "double";
    default: return NULL;
    }
}

/* Signatures from the checked program; the trampolines go into `c`. */
static ts_status take_signatures(const ts__tile_program *prog, ts_tile_kernel *m, ts__tile_buf *c) {
    m->k = calloc((size_t)prog->nkernels, sizeof *m->k);
    if (!m->k) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    m->nkernels = prog->nkernels;
    for (int i = 0; i < prog->nkernels; i++) {
        const ts__tile_kernel *kk = &prog->kernels[i];
        jit_kernel *k = &m->k[i];
        k->name = strdup(kk->decl->name);
        k->pnames = calloc((size_t)kk->nparams + 1, sizeof *k->pnames);
        k->pdt = calloc((size_t)kk->nparams + 1, sizeof *k->pdt);
        if (!k->name || !k->pnames || !k->pdt) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        if (kk->nparams > MAX_PARAMS)
            return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: kernel '%s' has %d parameters (the JIT takes at most %d)",
                            k->name, kk->nparams, MAX_PARAMS);
        k->nparams = kk->nparams;
        ts__tile_buf_printf(c, "TS_API ts_status tsjit__call_%d(void *const *a) {\n    return " WRAP_PREFIX "%s(",
                            i, k->name);
        for (int j = 0; j < kk->nparams; j++) {
            const ts__tile_sym *p = kk->params[j];
            k->pnames[j] = strdup(p->name);
            if (!k->pnames[j]) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
            if (p->kind == SYM_TENSOR) {
                k->pdt[j] = -1;
                ts__tile_buf_printf(c, "%s*(const ts_tensor *const *)a[%d]", j ? ", " : "", j);
            } else {
                const char *ct = scalar_ctype(p->dt);
                if (!ct)
                    return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: kernel '%s' parameter '%s': scalar type %s is not supported by the JIT",
                                    k->name, p->name, ts__tile_dt_name(p->dt));
                k->pdt[j] = p->dt;
                ts__tile_buf_printf(c, "%s*(const %s *)a[%d]", j ? ", " : "", ct, j);
            }
        }
        ts__tile_buf_puts(c, ");\n}\n");
    }
    return TS_OK;
}

static char *buf_take(ts__tile_buf *b) {
    char *s = malloc(b->len + 1);
    if (s) {
        if (b->len) memcpy(s, b->data, b->len);
        s[b->len] = 0;
    }
    return s;
}

static void set_log(const ts_tile_options *o, const char *text) {
    if (!o || !o->log) return;
    *o->log = strdup(text ? text : "");
}

/* Front end: the complete C file and the kernel signatures. On program errors the log gets
 * the diagnostics. */
static ts_status front_end(const char *source, const char *filename, const ts_tile_options *o, int lanes,
                           ts_tile_kernel *m, char **ctext) {
    *ctext = NULL;
    size_t len = strlen(source);
    ts__tile_arena arena = {0};
    ts__tile_diag d = {.file = filename, .src = source, .src_len = len};
    ts__tile_buf gen = {0}, file = {0};
    ts_status st = TS_OK;
    ts__tile_program prog = {0};
    ts__tile_node *mod = ts__tile_parse(&arena, &d);
    bool ok = mod && ts__tile_check(&arena, &d, mod, &prog) && ts__tile_lower(&arena, &d, &prog);
    if (ok) {
        ts__tile_emit_opts eo = {.prefix = WRAP_PREFIX, .lanes = lanes};
        ok = ts__tile_emit_c(&gen, &d, &prog, &eo);
    }
    if (gen.oom || d.out.oom || arena.exhausted) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    } else if (!ok) {
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s", d.first[0] ? d.first : "tile program has errors");
        ts__tile_buf_puts(&d.out, "");
        set_log(o, d.out.data);
    } else if (prog.nkernels == 0) {
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_compile: the module defines no kernel");
    } else {
        ts__tile_buf_puts(&file, k_prelude);
        ts__tile_buf_puts(&file, gen.data);
        ts__tile_buf_puts(&file, k_epilogue);
        st = take_signatures(&prog, m, &file);
        if (st == TS_OK) {
            *ctext = file.oom ? NULL : buf_take(&file);
            if (!*ctext) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        }
    }
    ts__tile_buf_free(&gen);
    ts__tile_buf_free(&file);
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&arena);
    return st;
}

/* dlopen + key + init + trampolines; false (with *why) when the object is unusable. The
 * path is in the checked cache directory and the file was checked on a descriptor (tile_cache.c);
 * the module's own tsjit__key must then be the key asked for, so an object the loader found by
 * another route (one already loaded under that name) is never run as this module. */
static bool load(ts_tile_kernel *m, const char *path, char *why, size_t nwhy) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, nwhy, "%s", e ? e : "dlopen failed");
        return false;
    }
    const char *key = dlsym(h, "tsjit__key");
    if (!key || strncmp(key, m->key, sizeof m->key)) {
        snprintf(why, nwhy, "%s: not the module of key %s", path, m->key);
        dlclose(h);
        return false;
    }
    int (*init)(const void *, size_t, unsigned) = NULL;
    void *sym = dlsym(h, "tsjit__init");
    memcpy(&init, &sym, sizeof init); /* object -> function pointer, as POSIX allows */
    if (!init || init(&g_rt, sizeof g_rt, TS__TILE_JIT_ABI) != 0) {
        snprintf(why, nwhy, "%s: missing or mismatched tsjit__init", path);
        dlclose(h);
        return false;
    }
    for (int i = 0; i < m->nkernels; i++) {
        char name[48];
        snprintf(name, sizeof name, "tsjit__call_%d", i);
        sym = dlsym(h, name);
        if (!sym) {
            snprintf(why, nwhy, "%s: missing %s", path, name);
            dlclose(h);
            return false;
        }
        memcpy(&m->k[i].call, &sym, sizeof sym);
    }
    m->handle = h;
    return true;
}

static bool write_all(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

/* Compile ctext (+ the key symbol) into a sealed object in the cache directory: *so_name its
 * name there (malloc'd). Every path handed to the compiler is absolute (the directory's real
 * path), so none can be taken for an option. */
static ts_status build(const char *cc, const ts__tile_cache *c, const char *ctext, const char *key,
                       char *const *flags, int nflags, const ts_tile_options *o, char **so_name) {
    *so_name = NULL;
    char *cname = ts__tile_cache_tmp(".c"), *soname = ts__tile_cache_tmp(".so");
    char *cpath = NULL, *sopath = NULL, *iflag = NULL, *incdir = NULL;
    ts_status st = TS_OK;
    int fd = -1;
    if (!cname || !soname) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        goto done;
    }
    st = ts__tile_cache_headers(c, &incdir);
    if (st != TS_OK) goto done;
    size_t n1 = strlen(c->path) + strlen(cname) + 2, n2 = strlen(c->path) + strlen(soname) + 2;
    cpath = malloc(n1), sopath = malloc(n2), iflag = malloc(strlen(incdir) + 3);
    if (!cpath || !sopath || !iflag) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        goto done;
    }
    snprintf(cpath, n1, "%s/%s", c->path, cname);
    snprintf(sopath, n2, "%s/%s", c->path, soname);
    sprintf(iflag, "-I%s", incdir);
    fd = openat(c->fd, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    char keyline[128];
    snprintf(keyline, sizeof keyline, "\nTS_API const char tsjit__key[] = \"%s\";\n", key);
    if (fd < 0 || !write_all(fd, ctext) || !write_all(fd, keyline) || close(fd) != 0) {
        if (fd >= 0) close(fd);
        fd = -1;
        st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write '%s'", cpath);
        goto done;
    }
    fd = -1;
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)cc;
    for (int i = 0; i < nflags; i++) argv[n++] = flags[i];
    argv[n++] = iflag;
    argv[n++] = "-o";
    argv[n++] = sopath;
    argv[n++] = cpath;
    argv[n++] = "-lm";
    argv[n] = NULL;
    int code;
    char *out = NULL;
    st = ts__tile_cc_run(argv, &code, &out);
    if (st == TS_OK) {
        set_log(o, out);
        if (code != 0) {
            const char *msg = out;
            while (*msg == '\n') msg++;
            st = ts__fail(TS_ERR_INTERNAL, "ts_tile_compile: C compiler '%s' failed (exit %d): %.380s", cc, code,
                          *msg ? msg : "(no output)");
        } else {
            /* owner-only whatever the umask: a group- or other-writable entry is refused on load */
            fd = openat(c->fd, soname, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0 || fchmod(fd, 0700) != 0) st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot open the built object '%s'", sopath);
            else st = ts__tile_cache_seal(fd, key);
            if (fd >= 0 && close(fd) != 0 && st == TS_OK) st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write '%s'", sopath);
            fd = -1;
        }
    }
    free(out);
done:
    if (cname) unlinkat(c->fd, cname, 0);
    if (st != TS_OK && soname) unlinkat(c->fd, soname, 0);
    if (incdir) ts__tile_cache_remove_headers(incdir);
    free(incdir);
    free(cname);
    free(cpath);
    free(sopath);
    free(iflag);
    if (st == TS_OK) *so_name = soname;
    else free(soname);
    return st;
}

ts_status ts_tile_compile(const char *source, const ts_tile_options *options, ts_tile_kernel **kernel) {
    if (!kernel) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_compile: kernel is NULL");
    *kernel = NULL;
    if (options && options->log) *options->log = NULL;
    if (!source) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_compile: source is NULL");
    const ts_tile_options dflt = {0};
    const ts_tile_options *o = options ? options : &dflt;
    const char *filename = o->filename ? o->filename : "<jit>";
    const char *cc = o->cc ? o->cc : (getenv("TS_TILE_CC") && *getenv("TS_TILE_CC") ? getenv("TS_TILE_CC") : "cc");
    const bool use_cache = !(o->flags & TS_TILE_JIT_NO_CACHE);

    ts_tile_kernel *m = calloc(1, sizeof *m);
    if (!m) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    char *ctext = NULL, *ccpath = NULL, *ccid = NULL, *built = NULL;
    ts__tile_cache cache = {.fd = -1};
    /* The SIMD lowering's width: 8 lanes (ymm with AVX2, or the generic fallback), or 16
     * (zmm) on the avx512 path when asked with TS_TILE_JIT_LANES16. Not the default there
     * yet: several tile_rt.h helpers have only plain vector C at 16 lanes, and kernels built
     * on them ran slower than their 8-lane AVX2 code (docs/tile-language.md: per-token FP8
     * cast 0.55x); the flags below follow the choice. */
    const ts_isa isa = ts__active_isa();
    const bool zmm = isa == TS_ISA_AVX512 && (o->flags & TS_TILE_JIT_LANES16);
    ts_status st = front_end(source, filename, o, zmm ? 16 : 8, m, &ctext);
    if (st == TS_OK) st = ts__tile_cc_resolve(cc, &ccpath);
    if (st == TS_OK) st = ts__tile_cc_identity(ccpath, &ccid);
    if (st != TS_OK) goto out;

    char *flags[20];
    int nflags = 0;
    flags[nflags++] = "-std=c11";
    flags[nflags++] = "-O3";
    flags[nflags++] = "-fPIC";
    flags[nflags++] = "-shared";
    flags[nflags++] = "-ffp-contract=off";
    flags[nflags++] = "-fno-math-errno";
    flags[nflags++] = "-fvisibility=hidden";
    flags[nflags++] = "-D_GNU_SOURCE";
    flags[nflags++] = "-w";
    /* GCC's note that passing 32/64-byte vectors by value changed ABI in 4.6 is not silenced
     * by -w and filled the log; it concerns no real call: tile_rt.h's vector helpers are
     * always-inline statics, and every function the module exports takes pointers and
     * scalars only */
    flags[nflags++] = "-Wno-psabi";
    if (ts__isa_avx2_up(isa)) {
        flags[nflags++] = "-mavx2";
        flags[nflags++] = "-mfma";
        flags[nflags++] = "-mf16c";
        flags[nflags++] = "-DTS_HAVE_AVX2_KERNELS=1";
    }
    if (zmm) {
        flags[nflags++] = "-mavx512f";
        flags[nflags++] = "-mavx512bw";
        flags[nflags++] = "-mavx512vl";
        flags[nflags++] = "-mavx512dq";
    }

    /* the key: everything that can change the object */
    {
        ts__sha256 s;
        uint8_t d[32];
        char abi[64];
        snprintf(abi, sizeof abi, "tilestack-tile-jit abi %u", TS__TILE_JIT_ABI);
        ts__sha256_init(&s);
        ts__sha256_update(&s, abi, strlen(abi) + 1);
        ts__sha256_update(&s, TS_VERSION_STRING, sizeof TS_VERSION_STRING);
        ts__sha256_update(&s, ts_version_string(), strlen(ts_version_string()) + 1);
        ts__sha256_update(&s, ts__tile_cache_headers_hash(), 65);
        ts__sha256_update(&s, source, strlen(source) + 1);
        ts__sha256_update(&s, filename, strlen(filename) + 1);
        ts__sha256_update(&s, ctext, strlen(ctext) + 1);
        for (int i = 0; i < nflags; i++) ts__sha256_update(&s, flags[i], strlen(flags[i]) + 1);
        ts__sha256_update(&s, ccid, strlen(ccid) + 1);
        ts__sha256_final(&s, d);
        ts__sha256_to_hex(d, m->key);
    }

    /* without the cache, the build goes to a private temporary directory (no HOME needed) */
    st = use_cache ? ts__tile_cache_open(o->cache_dir, &cache) : ts__tile_cache_open_private(&cache);
    if (st != TS_OK) goto out;
    char why[512] = "", name[80];
    snprintf(name, sizeof name, "%s.so", m->key);
    if (use_cache) {
        bool hit = false;
        st = ts__tile_cache_lookup(&cache, m->key, &hit);
        if (st != TS_OK) goto out;
        m->path = malloc(strlen(cache.path) + sizeof name + 2);
        if (!m->path) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
            goto out;
        }
        sprintf(m->path, "%s/%s", cache.path, name);
        if (hit && load(m, m->path, why, sizeof why)) {
            m->cache_hit = true;
            set_log(o, "");
            goto out;
        }
    }
    st = build(ccpath, &cache, ctext, m->key, flags, nflags, o, &built);
    if (st != TS_OK) goto out;
    if (use_cache) {
        /* replaces a corrupt or planted entry (a symlink itself, not its target), or an equal
         * one another process just wrote */
        if (renameat(cache.fd, built, cache.fd, name) != 0) {
            st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot move the object into the cache at '%s': %s", m->path,
                          strerror(errno));
            unlinkat(cache.fd, built, 0);
            goto out;
        }
    } else {
        free(m->path);
        m->path = malloc(strlen(cache.path) + strlen(built) + 2);
        if (!m->path) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
            unlinkat(cache.fd, built, 0);
            goto out;
        }
        sprintf(m->path, "%s/%s", cache.path, built);
    }
    if (!load(m, m->path, why, sizeof why)) st = ts__fail(TS_ERR_INTERNAL, "ts_tile_compile: the built object does not load: %s", why);
    if (!use_cache) unlinkat(cache.fd, built, 0); /* the mapping stays valid */
out:
    free(ctext);
    free(ccpath);
    free(ccid);
    ts__tile_cache_close(&cache);
    free(built);
    if (st != TS_OK) {
        kernel_free(m);
        return st;
    }
    if (o->log && !*o->log) set_log(o, "");
    *kernel = m;
    return TS_OK;
}

/* ---- launch ---- */

typedef union slot {
    const ts_tensor *t;
    bool b;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
} slot;

static ts_status int_arg(const jit_kernel *k, int j, const ts_tile_arg *a, slot *s) {
    const int dt = k->pdt[j];
    int64_t lo = 0;
    uint64_t hi = 0;
    switch (dt) {
    case TT_I8: lo = INT8_MIN, hi = INT8_MAX; break;
    case TT_I16: lo = INT16_MIN, hi = INT16_MAX; break;
    case TT_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case TT_I64: lo = INT64_MIN, hi = INT64_MAX; break;
    case TT_U8: hi = UINT8_MAX; break;
    case TT_U16: hi = UINT16_MAX; break;
    case TT_U32: hi = UINT32_MAX; break;
    default: hi = UINT64_MAX; break;
    }
    bool neg = a->kind == TS_TILE_ARG_I64 && a->v.i < 0;
    uint64_t mag = a->kind == TS_TILE_ARG_I64 ? (uint64_t)a->v.i : a->v.u;
    if (neg ? a->v.i < lo : mag > hi) {
        if (a->kind == TS_TILE_ARG_I64)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: argument %d (%s) = %lld does not fit %s", k->name, j,
                            k->pnames[j], (long long)a->v.i, ts__tile_dt_name(dt));
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: argument %d (%s) = %llu does not fit %s", k->name, j,
                        k->pnames[j], (unsigned long long)a->v.u, ts__tile_dt_name(dt));
    }
    switch (dt) {
    case TT_I8: s->i8 = (int8_t)a->v.i; break;
    case TT_I16: s->i16 = (int16_t)a->v.i; break;
    case TT_I32: s->i32 = (int32_t)a->v.i; break;
    case TT_I64: s->i64 = (int64_t)mag; break;
    case TT_U8: s->u8 = (uint8_t)mag; break;
    case TT_U16: s->u16 = (uint16_t)mag; break;
    case TT_U32: s->u32 = (uint32_t)mag; break;
    default: s->u64 = mag; break;
    }
    return TS_OK;
}

static const char *kind_name(int kind) {
    switch (kind) {
    case TS_TILE_ARG_TENSOR: return "a tensor";
    case TS_TILE_ARG_BOOL: return "a bool";
    case TS_TILE_ARG_I64: return "an i64";
    case TS_TILE_ARG_U64: return "a u64";
    case TS_TILE_ARG_F64: return "an f64";
    default: return "an unknown kind";
    }
}

ts_status ts_tile_launch(const ts_tile_kernel *kernel, const char *name, const ts_tile_arg *args, int nargs) {
    if (!kernel) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_launch: kernel is NULL");
    const jit_kernel *k = NULL;
    if (!name) {
        if (kernel->nkernels != 1)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_launch: the module has %d kernels: name one", kernel->nkernels);
        k = &kernel->k[0];
    } else {
        for (int i = 0; i < kernel->nkernels && !k; i++)
            if (!strcmp(kernel->k[i].name, name)) k = &kernel->k[i];
        if (!k) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_launch: no kernel named '%s' in the module", name);
    }
    if (nargs != k->nparams)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tile_launch: %s takes %d arguments, got %d", k->name, k->nparams, nargs);
    if (nargs > 0 && !args) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_launch: args is NULL");
    slot slots[MAX_PARAMS];
    void *ptrs[MAX_PARAMS + 1];
    for (int j = 0; j < nargs; j++) {
        const ts_tile_arg *a = &args[j];
        const int dt = k->pdt[j];
        slot *s = &slots[j];
        ptrs[j] = s;
        bool ok;
        if (dt < 0) ok = a->kind == TS_TILE_ARG_TENSOR;
        else if (dt == TT_BOOL) ok = a->kind == TS_TILE_ARG_BOOL;
        else if (dt == TT_F32 || dt == TT_F64) ok = a->kind == TS_TILE_ARG_F64;
        else ok = a->kind == TS_TILE_ARG_I64 || a->kind == TS_TILE_ARG_U64;
        if (!ok)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: argument %d (%s) must be %s, got %s", k->name, j, k->pnames[j],
                            dt < 0 ? "a tensor" : dt == TT_BOOL ? "a bool" : (dt == TT_F32 || dt == TT_F64) ? "an f64" : "an i64 or u64",
                            kind_name(a->kind));
        if (dt < 0) s->t = a->v.tensor;
        else if (dt == TT_BOOL) s->b = a->v.b;
        else if (dt == TT_F32) s->f32 = (float)a->v.f;
        else if (dt == TT_F64) s->f64 = a->v.f;
        else TS__RETURN_IF_ERROR(int_arg(k, j, a, s));
    }
    ptrs[nargs] = NULL;
    return k->call(ptrs);
}

ts_status ts_tile_kernel_info_get(const ts_tile_kernel *kernel, ts_tile_kernel_info *info) {
    if (!kernel) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_kernel_info_get: kernel is NULL");
    if (!info) return ts__fail(TS_ERR_NULL_POINTER, "ts_tile_kernel_info_get: info is NULL");
    info->nkernels = kernel->nkernels;
    info->cache_hit = kernel->cache_hit;
    memcpy(info->key, kernel->key, sizeof info->key);
    info->path = kernel->path;
    return TS_OK;
}

const char *ts_tile_kernel_name(const ts_tile_kernel *kernel, int i) {
    if (!kernel || i < 0 || i >= kernel->nkernels) return NULL;
    return kernel->k[i].name;
}
