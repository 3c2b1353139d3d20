/* safetensors reader and Hugging Face checkpoint directories (src/model/safetensors.c,
 * hf_checkpoint.c): files written here byte by byte, good ones read back exactly, every kind of
 * malformed header and every way out of the directory refused by name. */
#include "ts_test.h"

#include "model/safetensors.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes an 8-byte length (hlen_override >= 0 replaces the true one), the header and `data`. */
static void write_st(const char *path, const char *header, const void *data, size_t data_len,
                     long long hlen_override) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    const unsigned long long h = hlen_override >= 0 ? (unsigned long long)hlen_override : strlen(header);
    for (int i = 0; i < 8; i++) fputc((int)((h >> (8 * i)) & 0xFF), f);
    fputs(header, f);
    if (data_len) fwrite(data, 1, data_len, f);
    fclose(f);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) fputs(s, f), fclose(f);
}

static char g_dir[64];

static const char *at(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static void make_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ts_st_XXXXXX");
    if (!mkdtemp(g_dir)) g_dir[0] = 0;
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
}

/* 12 bytes of BF16 [2, 3] then 16 bytes of F32 [4] */
static const char k_good_hdr[] =
    "{\"__metadata__\": {\"format\": \"pt\"},"
    " \"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
    " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [12, 28]}}";

static uint8_t g_data[28];

TS_TEST(safetensors_reads_a_good_file) {
    make_dir();
    for (int i = 0; i < 28; i++) g_data[i] = (uint8_t)(i * 7 + 1);
    write_st(at("a.safetensors"), k_good_hdr, g_data, 28, -1);
    ts__st_file *f = NULL;
    TS_CHECK_STATUS(ts__st_open(AT_FDCWD, at("a.safetensors"), NULL, &f), TS_OK);
    if (f) {
        TS_CHECK_EQ_INT(f->n, 2);
        const ts__st_tensor *w = ts__st_find(f, "w"), *b = ts__st_find(f, "b");
        TS_CHECK(w && w->dtype == TS_BF16 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3);
        TS_CHECK(b && b->dtype == TS_F32 && b->ndim == 1 && b->shape[0] == 4);
        TS_CHECK(w && !memcmp(w->data, g_data, 12) && b && !memcmp(b->data, g_data + 12, 16));
        TS_CHECK(ts__st_find(f, "__metadata__") == NULL && ts__st_find(f, "x") == NULL);
    }
    ts__st_close(f);
    remove_dir();
}

TS_TEST(safetensors_refuses_malformed_files) {
    static const struct { const char *hdr; size_t data; long long hlen; ts_status st; const char *needle; } cases[] = {
        {"{}", 0, 1000, TS_ERR_INVALID_ARGUMENT, "runs past the end"},
        {"{}", 0, (long long)1 << 40, TS_ERR_INVALID_ARGUMENT, "exceeds"},
        {"[1]", 0, -1, TS_ERR_INVALID_ARGUMENT, "not a JSON object"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, -1,
         TS_ERR_INVALID_ARGUMENT, "duplicate"},
        {"{\"w\": {\"dtype\": \"U16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, -1,
         TS_ERR_UNSUPPORTED, "'w'"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, -1,
         TS_ERR_INVALID_ARGUMENT, "do not span"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, -1,
         TS_ERR_INVALID_ARGUMENT, "dim"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4, -1,
         TS_ERR_INVALID_ARGUMENT, "8 dims"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, -1,
         TS_ERR_INVALID_ARGUMENT, "outside the data"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"v\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}", 8, -1,
         TS_ERR_INVALID_ARGUMENT, "overlap"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, -1,
         TS_ERR_INVALID_ARGUMENT, "gap"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8, -1,
         TS_ERR_INVALID_ARGUMENT, "the tensors own 4"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
         "\"data_offsets\": [0, 4]}}", 4, -1, TS_ERR_INVALID_ARGUMENT, "overflows"},
        {"{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, -1, TS_ERR_INVALID_ARGUMENT, "dtype"},
        {"{\"__metadata__\": {\"k\": 1}}", 0, -1, TS_ERR_INVALID_ARGUMENT, "__metadata__"},
    };
    make_dir();
    static uint8_t zeros[16];
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        write_st(at("bad.safetensors"), cases[k].hdr, zeros, cases[k].data, cases[k].hlen);
        ts__st_file *f = (ts__st_file *)1;
        const ts_status st = ts__st_open(AT_FDCWD, at("bad.safetensors"), NULL, &f);
        TS_CHECK_MSG(st == cases[k].st && !f && strstr(ts_last_error(), cases[k].needle) &&
                         strstr(ts_last_error(), "bad.safetensors"),
                     "case %zu: status %d (want %d): '%s' (want '%s')", k, (int)st, (int)cases[k].st,
                     ts_last_error(), cases[k].needle);
    }
    ts__st_file *f = NULL;
    write_text(at("short"), "abc");
    TS_CHECK_STATUS(ts__st_open(AT_FDCWD, at("short"), NULL, &f), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts__st_open(AT_FDCWD, g_dir, NULL, &f), TS_ERR_IO);
    TS_CHECK_STATUS(ts__st_open(AT_FDCWD, at("none"), NULL, &f), TS_ERR_IO);
    write_st(at("ok.safetensors"), k_good_hdr, g_data, 28, -1);
    TS_CHECK(symlink(at("ok.safetensors"), at("link.safetensors")) == 0);
    TS_CHECK_STATUS(ts__st_open(AT_FDCWD, at("link.safetensors"), NULL, &f), TS_ERR_IO);
    TS_CHECK(strstr(ts_last_error(), "symbolic link") != NULL);
    remove_dir();
}

/* Two shards: w in s1, b in s2. */
static void write_sharded(const char *index) {
    write_text(at("config.json"), "{\"model_type\": \"deepseek_v4\"}");
    write_st(at("s1.safetensors"), "{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}}",
             g_data, 12, -1);
    write_st(at("s2.safetensors"), "{\"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
             g_data + 12, 16, -1);
    write_text(at("model.safetensors.index.json"), index);
}

static void expect_dir_error(ts_test_ctx *ts_t_, const char *dir, ts_status want, const char *needle) {
    ts__hf_dir *d = (ts__hf_dir *)1;
    const ts_status st = ts__hf_open(dir, &d);
    TS_CHECK_MSG(st == want && !d && strstr(ts_last_error(), needle), "status %d (want %d): '%s' "
                 "(want '%s')", (int)st, (int)want, ts_last_error(), needle);
}

TS_TEST(hf_checkpoint_directories) {
    make_dir();
    /* single file */
    write_text(at("config.json"), "{\"model_type\": \"deepseek_v3\"}");
    write_st(at("model.safetensors"), k_good_hdr, g_data, 28, -1);
    ts__hf_dir *d = NULL;
    TS_CHECK_STATUS(ts__hf_open(g_dir, &d), TS_OK);
    TS_CHECK(d && d->n_shards == 1 && strstr(d->config, "deepseek_v3") && ts__hf_find(d, "b"));
    ts__hf_close(d);
    /* sharded */
    write_sharded("{\"metadata\": {}, \"weight_map\": {\"w\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    TS_CHECK_STATUS(ts__hf_open(g_dir, &d), TS_OK);
    if (d) {
        const ts__st_tensor *w = ts__hf_find(d, "w"), *b = ts__hf_find(d, "b");
        TS_CHECK(d->n_shards == 2 && d->n_tensors == 2 && w && b);
        TS_CHECK(w && !memcmp(w->data, g_data, 12) && b && !memcmp(b->data, g_data + 12, 16));
    }
    ts__hf_close(d);
    write_sharded("{\"weight_map\": {\"w\": \"s2.safetensors\", \"b\": \"s2.safetensors\"}}");
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "not in its shard");
    /* a shard holding a tensor the index leaves out */
    write_sharded("{\"weight_map\": {\"w\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    write_st(at("s1.safetensors"), "{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
             " \"x\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [12, 16]}}", g_data, 16, -1);
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "does not name");
    write_sharded("{\"weight_map\": {\"w\": \"../s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "plain file name");
    write_sharded("{\"weight_map\": {\"w\": \"/etc/passwd\", \"b\": \"s2.safetensors\"}}");
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "plain file name");
    write_sharded("{\"weight_map\": {\"w\": \"s3.safetensors\", \"b\": \"s2.safetensors\"}}");
    expect_dir_error(ts_t_, g_dir, TS_ERR_IO, "missing shard");
    write_sharded("{\"weight_map\": {\"w\": 7}}");
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "not a file name");
    write_sharded("{\"weight_map\": ");
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "invalid JSON");
    /* a symlinked shard: inside the directory it is followed, out of it refused */
    write_sharded("{\"weight_map\": {\"w\": \"l1.safetensors\", \"b\": \"s2.safetensors\"}}");
    TS_CHECK(symlink("s1.safetensors", at("l1.safetensors")) == 0);
    TS_CHECK_STATUS(ts__hf_open(g_dir, &d), TS_OK);
    ts__hf_close(d);
    char outside[64];
    snprintf(outside, sizeof outside, "%s.outside.safetensors", g_dir);
    write_st(outside, "{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}}", g_data, 12, -1);
    unlink(at("l1.safetensors"));
    TS_CHECK(symlink(outside, at("l1.safetensors")) == 0);
    expect_dir_error(ts_t_, g_dir, TS_ERR_INVALID_ARGUMENT, "leading out");
    unlink(outside);
    /* no config */
    unlink(at("config.json"));
    expect_dir_error(ts_t_, g_dir, TS_ERR_IO, "config.json");
    expect_dir_error(ts_t_, "/nonexistent-ts-dir", TS_ERR_IO, "not a readable directory");
    remove_dir();
}

/* The Hugging Face cache: snapshots/<rev>/<file> are links into the repository's blobs/. */
TS_TEST(hf_checkpoint_cache_snapshot_links) {
    make_dir();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/repo/blobs' '%s/repo/snapshots/rev1'", g_dir, g_dir);
    TS_CHECK(system(cmd) == 0);
    write_st(at("repo/blobs/abc123"), k_good_hdr, g_data, 28, -1);
    write_text(at("repo/blobs/cfg456"), "{\"model_type\": \"deepseek_v4\"}");
    TS_CHECK(symlink("../../blobs/abc123", at("repo/snapshots/rev1/model.safetensors")) == 0);
    /* config.json is read through its link too (a plain read, not a shard) */
    TS_CHECK(symlink("../../blobs/cfg456", at("repo/snapshots/rev1/config.json")) == 0);
    ts__hf_dir *d = NULL;
    const ts_status st = ts__hf_open(at("repo/snapshots/rev1"), &d);
    TS_CHECK_MSG(st == TS_OK, "snapshot open: %s", ts_last_error());
    TS_CHECK(d == NULL || ts__hf_find(d, "w") != NULL);
    ts__hf_close(d);
    /* a link from the snapshot to another repository's blob is refused */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/other/blobs'", g_dir);
    TS_CHECK(system(cmd) == 0);
    write_st(at("other/blobs/zzz"), k_good_hdr, g_data, 28, -1);
    unlink(at("repo/snapshots/rev1/model.safetensors"));
    TS_CHECK(symlink("../../../other/blobs/zzz", at("repo/snapshots/rev1/model.safetensors")) == 0);
    expect_dir_error(ts_t_, at("repo/snapshots/rev1"), TS_ERR_INVALID_ARGUMENT, "leading out");
    remove_dir();
}
