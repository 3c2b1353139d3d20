/* The weight file's values and limits (docs/model.md §2, the loader's checks; issue 18): a
 * hostile or corrupt file is refused at load with the file, the tensor and the element named,
 * never crashes, leaks or runs out of memory later. Each case edits a valid dsv4-tiny file:
 * tid2eid entries out of range or repeated, scales that are not ue8m0 powers of two, NaN /
 * infinite floats and e4m3 NaN codes, a header length off by one (every tensor shifted),
 * trailing bytes, a header length above the cap, a directory or a device instead of a file,
 * control bytes in a tensor name, and a save that fails half way. */
#include "ts_test.h"

#include "model/model_internal.h"
#include "test_model_common.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

/* The saved dsv4-tiny file every case edits (made once). */
static char g_path[64];
static tm_blob g_file;

static int ensure_file(ts_test_ctx *ts_t_) {
    if (g_file.p) return 1;
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    c.max_seq_len = 64;
    snprintf(g_path, sizeof g_path, "/tmp/ts_model_values_XXXXXX");
    ts_model *m = tm_create_saved(ts_t_, &c, 1, g_path);
    if (!m) return 0;
    ts_model_free(m);
    g_file = tm_read_all(g_path);
    remove(g_path);
    TS_CHECK(g_file.p != NULL);
    return g_file.p != NULL;
}

/* Byte offset in the file of tensor `name`'s data, and its size; 0 if not found. */
static size_t data_of(const tm_blob *b, const char *name, size_t *nbytes) {
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)b->p[i] << (8 * i);
    char key[160];
    snprintf(key, sizeof key, "\"%s\": {", name);
    char *hdr = (char *)malloc(h + 1);
    if (!hdr) return 0;
    memcpy(hdr, b->p + 8, h);
    hdr[h] = 0;
    size_t at = 0;
    const char *e = strstr(hdr, key);
    const char *o = e ? strstr(e, "\"data_offsets\": [") : NULL;
    unsigned long long ob = 0, oe = 0;
    if (o && sscanf(o, "\"data_offsets\": [%llu, %llu]", &ob, &oe) == 2) {
        at = (size_t)(8 + h + ob);
        *nbytes = (size_t)(oe - ob);
    }
    free(hdr);
    return at;
}

static char g_tmp[] = "/tmp/ts_model_values_case_XXXXXX";

static const char *case_path(void) {
    static int made;
    if (!made) {
        int fd = mkstemp(g_tmp);
        if (fd >= 0) close(fd);
        made = 1;
    }
    return g_tmp;
}

/* Loads `path` and expects `code` with every needle in the message (and *out untouched). */
static void expect_load(ts_test_ctx *ts_t_, const char *path, ts_status code, const char *n1,
                        const char *n2) {
    ts_model *m = (ts_model *)(uintptr_t)0x1;
    TS_CHECK_STATUS(ts_model_load(path, 1, &m), code);
    const char *msg = ts_last_error();
    TS_CHECK_MSG(!n1 || strstr(msg, n1), "message \"%s\" lacks \"%s\"", msg, n1);
    TS_CHECK_MSG(!n2 || strstr(msg, n2), "message \"%s\" lacks \"%s\"", msg, n2);
    if (code != TS_OK) TS_CHECK(m == (ts_model *)(uintptr_t)0x1);
    else if (m != (ts_model *)(uintptr_t)0x1) ts_model_free(m);
}

/* The file with tensor `name`'s element i (of width w bytes) set to the bytes of v. */
static int write_patched(ts_test_ctx *ts_t_, const char *name, size_t i, const void *v,
                         size_t w) {
    size_t nb = 0;
    const size_t at = data_of(&g_file, name, &nb);
    TS_CHECK_MSG(at && (i + 1) * w <= nb, "tensor %s not found in the header", name);
    if (!at || (i + 1) * w > nb) return 0;
    uint8_t save[8];
    memcpy(save, g_file.p + at + i * w, w);
    memcpy(g_file.p + at + i * w, v, w);
    tm_write_all(case_path(), g_file.p, g_file.n);
    memcpy(g_file.p + at + i * w, save, w);
    return 1;
}

/* Every entry of tid2eid set to v. */
static void write_tid2eid_all(ts_test_ctx *ts_t_, int32_t v) {
    size_t nb = 0;
    const size_t at = data_of(&g_file, "0.ffn.gate.tid2eid", &nb);
    TS_CHECK(at != 0);
    if (!at) return;
    uint8_t *save = (uint8_t *)malloc(nb);
    memcpy(save, g_file.p + at, nb);
    for (size_t i = 0; i < nb / 4; i++) memcpy(g_file.p + at + 4 * i, &v, 4);
    tm_write_all(case_path(), g_file.p, g_file.n);
    memcpy(g_file.p + at, save, nb);
    free(save);
}

TS_TEST(model_file_tid2eid_checked) {
    if (!ensure_file(ts_t_)) return;
    const char *p = case_path();
    /* E = 8: every entry = E was a SIGSEGV in the MoE (memcpy out of bounds) */
    write_tid2eid_all(ts_t_, 8);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "0.ffn.gate.tid2eid", "[0, n_routed_experts = 8)");
    /* -1: heap corruption */
    write_tid2eid_all(ts_t_, -1);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "0.ffn.gate.tid2eid", "= -1");
    /* all zeros: a token listing expert 0 six times (a cryptic masked_m error at decode) */
    write_tid2eid_all(ts_t_, 0);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "0.ffn.gate.tid2eid", "listed twice");
    /* one entry of token 3 out of range */
    const int32_t big = 1 << 30;
    if (write_patched(ts_t_, "0.ffn.gate.tid2eid", 3 * 6 + 2, &big, 4))
        expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "element [3, 2] = 1073741824", NULL);
    /* a valid edit (token 0 routed to other distinct experts) loads and decodes */
    size_t nb = 0;
    const size_t at = data_of(&g_file, "0.ffn.gate.tid2eid", &nb);
    if (at) {
        int32_t row[6] = {7, 5, 3, 1, 0, 2}, save[6];
        memcpy(save, g_file.p + at, sizeof row);
        memcpy(g_file.p + at, row, sizeof row);
        tm_write_all(p, g_file.p, g_file.n);
        memcpy(g_file.p + at, save, sizeof row);
        ts_model *m = NULL;
        TS_CHECK_STATUS(ts_model_load(p, 1, &m), TS_OK);
        if (m) {
            float logits[512];
            int64_t s = 0;
            int32_t t = 0;
            TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &t, logits), TS_OK);
            ts_model_free(m);
        }
    }
    remove(p);
}

TS_TEST(model_file_scales_and_nonfinite_values) {
    if (!ensure_file(ts_t_)) return;
    const char *p = case_path();
    const float nan = NAN, inf = INFINITY, neg = -1.0f, three = 3.0f, zero = 0.0f;
    struct { const char *name; size_t i; const void *v; size_t w; const char *needle; } k[] = {
        {"0.attn.wq_a.scale", 1, &nan, 4, "powers of two"},
        {"0.attn.wq_a.scale", 0, &neg, 4, "powers of two"},
        {"1.attn.wkv.scale", 0, &three, 4, "powers of two"},
        {"2.attn.wo_b.scale", 0, &zero, 4, "powers of two"},
        {"0.ffn.experts.0.w1.scale", 5, &nan, 4, "powers of two"},
        {"2.ffn.experts.7.w2.scale", 0, &inf, 4, "powers of two"},
        {"0.attn_norm", 3, &nan, 4, "finite"},
        {"norm", 0, &inf, 4, "finite"},
        {"1.ffn.gate.bias", 0, &nan, 4, "finite"},
        {"0.hc_attn_fn", 0, &nan, 4, "finite"},
        {"embed", 7, &(uint16_t){0x7FC0}, 2, "finite"},
        {"head", 0, &(uint16_t){0xFF80}, 2, "finite"},
        {"1.attn.wq_b", 9, &(uint8_t){0x7F}, 1, "NaN code"},
        {"0.ffn.shared.w2", 0, &(uint8_t){0xFF}, 1, "NaN code"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (!write_patched(ts_t_, k[i].name, k[i].i, k[i].v, k[i].w)) continue;
        char tensor[160];
        snprintf(tensor, sizeof tensor, "tensor %s: element", k[i].name);
        expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, tensor, k[i].needle);
        TS_CHECK(strstr(ts_last_error(), p) != NULL); /* the file, too */
    }
    /* the smallest ue8m0 value (2^-127, an f32 subnormal) is a valid scale */
    const float tiny = ldexpf(1.0f, -127);
    if (write_patched(ts_t_, "0.attn.wq_a.scale", 0, &tiny, 4)) expect_load(ts_t_, p, TS_OK, NULL, NULL);
    remove(p);
}

/* The header length one byte short: the header is still valid JSON (its padding loses a space)
 * but every tensor's data is shifted by one byte. Before, this loaded, then corrupted the heap
 * at the first step (tid2eid read from shifted bytes) and crashed in ts_model_free; now the
 * shift is refused at load and everything the load allocated is freed (run under ASan). */
TS_TEST(model_file_shifted_data_refused_cleanly) {
    if (!ensure_file(ts_t_)) return;
    const char *p = case_path();
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)g_file.p[i] << (8 * i);
    TS_CHECK(g_file.p[8 + h - 1] == ' ');
    uint8_t len[8];
    memcpy(len, g_file.p, 8);
    for (int i = 0; i < 8; i++) g_file.p[i] = (uint8_t)((h - 1) >> (8 * i));
    tm_write_all(p, g_file.p, g_file.n);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "1 bytes after the last tensor", NULL);
    /* the same shift with the last byte gone: the sizes agree, the values do not */
    tm_write_all(p, g_file.p, g_file.n - 1);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "tensor ", "element");
    memcpy(g_file.p, len, 8);
    remove(p);
}

TS_TEST(model_file_size_header_cap_and_file_kind) {
    if (!ensure_file(ts_t_)) return;
    const char *p = case_path();
    /* trailing bytes after the data */
    uint8_t *big = (uint8_t *)malloc(g_file.n + 16);
    memcpy(big, g_file.p, g_file.n);
    memset(big + g_file.n, 0, 16);
    tm_write_all(p, big, g_file.n + 16);
    free(big);
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "16 bytes after the last tensor", NULL);
    /* a header length above the cap, in a sparse file that long (nothing is read past the
     * length field) */
    {
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const uint64_t hl = (uint64_t)1 << 30;
        uint8_t len[8];
        for (int i = 0; i < 8; i++) len[i] = (uint8_t)(hl >> (8 * i));
        TS_CHECK(fd >= 0 && write(fd, len, 8) == 8 && ftruncate(fd, (off_t)(hl + 4096)) == 0);
        if (fd >= 0) close(fd);
        expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "cap", "1073741824");
    }
    /* a config of 128 layers x 65536 experts in a small file: refused before the tensor list
     * (gigabytes of bookkeeping) is built */
    TS_CHECK(tm_write_edited(p, &g_file, "\\\"n_routed_experts\\\": 8",
                             "\\\"n_routed_experts\\\": 65536"));
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "fewer than the 1179648 expert tensors", NULL);
    /* not a regular file */
    expect_load(ts_t_, "/tmp", TS_ERR_INVALID_ARGUMENT, "is a directory", NULL);
    expect_load(ts_t_, "/dev/zero", TS_ERR_INVALID_ARGUMENT, "not a regular file", NULL);
    remove(p);
}

/* A tensor name with control bytes (here ESC [ 3 1 m, a terminal colour switch, and a
 * newline) is printed escaped, never raw. */
TS_TEST(model_file_names_escaped_in_messages) {
    if (!ensure_file(ts_t_)) return;
    const char *p = case_path();
    TS_CHECK(tm_write_edited(p, &g_file, "\"__metadata__\":",
                             "\"\\u001b[31mred\\n\": {\"dtype\": \"F32\", \"shape\": [1], "
                             "\"data_offsets\": [0, 4]}, \"__metadata__\":"));
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "\\x1b[31mred\\n", "not part of");
    TS_CHECK(strchr(ts_last_error(), 0x1b) == NULL && strchr(ts_last_error(), '\n') == NULL);
    TS_CHECK(tm_write_edited(p, &g_file, "\"embed\": {\"dtype\": \"BF16\"",
                             "\"embed\": {\"dtype\": \"BF\\u0007\""));
    expect_load(ts_t_, p, TS_ERR_INVALID_ARGUMENT, "BF\\x07", NULL);
    TS_CHECK(strchr(ts_last_error(), 0x07) == NULL);
    remove(p);
}

/* A save that fails half way (the file size limit, as `ulimit -f`) leaves the previous file
 * as it was: before, the file was truncated first. */
TS_TEST(model_file_save_is_atomic) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    c.max_seq_len = 64;
    char path[] = "/tmp/ts_model_save_XXXXXX";
    ts_model *m = tm_create_saved(ts_t_, &c, 1, path);
    if (!m) return;
    tm_blob before = tm_read_all(path);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 1 << 20; /* the file is ~9 MB */
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        TS_CHECK_STATUS(ts_model_save_weights(m, path), TS_ERR_IO);
        TS_CHECK(strstr(ts_last_error(), path) != NULL);
        setrlimit(RLIMIT_FSIZE, &old);
        tm_blob after = tm_read_all(path);
        TS_CHECK(after.p && after.n == before.n && memcmp(after.p, before.p, before.n) == 0);
        free(after.p);
        ts_model *l = NULL;
        TS_CHECK_STATUS(ts_model_load(path, 1, &l), TS_OK);
        ts_model_free(l);
    }
    signal(SIGXFSZ, prev);
    free(before.p);
    remove(path);
    ts_model_free(m);
}

/* The golden reader (--check --golden FILE) stops at its cap and refuses what is not a regular
 * file: `--golden /dev/zero` read without limit before (7 GB in 5 s). */
TS_TEST(model_golden_reader_capped) {
    ts__model_golden g;
    TS_CHECK_STATUS(ts__model_golden_load("/dev/zero", &g), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "not a regular file") != NULL);
    TS_CHECK_STATUS(ts__model_golden_load("/tmp", &g), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "is a directory") != NULL);
    const char *p = case_path();
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TS_CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 30) == 0); /* sparse: nothing is read */
    if (fd >= 0) close(fd);
    TS_CHECK_STATUS(ts__model_golden_load(p, &g), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "cap") != NULL);
    remove(p);
}
