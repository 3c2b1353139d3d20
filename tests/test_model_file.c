/* The weight file (docs/model.md §2 "File format"): save / load round trip bit for bit (every
 * tensor, and the logits of a decode), and malformed files as specific errors naming the cause
 * (truncated, header not JSON, missing / extra tensor, wrong dtype or shape, offsets out of
 * the file or overlapping), never a crash. */
#include "ts_test.h"

#include "model/model_internal.h"
#include "test_model_common.h"

#include <stdlib.h>

static void expect_load_error(ts_test_ctx *ts_t_, const char *path, ts_status code,
                              const char *needle) {
    ts_model *m = (ts_model *)(uintptr_t)0x1;
    TS_CHECK_STATUS(ts_model_load(path, 1, &m), code);
    TS_CHECK_MSG(strstr(ts_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"",
                 ts_last_error(), needle);
    TS_CHECK(m == (ts_model *)(uintptr_t)0x1);
}

TS_TEST(model_file_round_trip_and_malformed) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    c.seed = 11;
    c.max_seq_len = 64;
    char path[] = "/tmp/ts_model_file_XXXXXX";
    ts_model *m = tm_create_saved(ts_t_, &c, 1, path), *l = NULL;
    if (!m) return;
    TS_CHECK_STATUS(ts_model_load(path, 2, &l), TS_OK);
    if (l) {
        TS_CHECK(memcmp(ts_model_get_config(l), &c, sizeof c) == 0);
        TS_CHECK_EQ_INT(l->nrecs, m->nrecs);
        for (int64_t i = 0; i < m->nrecs && i < l->nrecs; i++) {
            const ts__mtensor *a = &m->recs[i], *b = &l->recs[i];
            TS_CHECK_MSG(strcmp(a->name, b->name) == 0 && a->nbytes == b->nbytes &&
                             memcmp(a->data, b->data, a->nbytes) == 0,
                         "tensor %s differs after the round trip", a->name);
        }
        float la[512], lb[512];
        int64_t s = 0;
        for (int i = 0; i < 6; i++) {
            int32_t t = (int32_t)(i * 71 % 512);
            TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &t, la), TS_OK);
            TS_CHECK_STATUS(ts_model_decode(l, 1, &s, &t, lb), TS_OK);
            TS_CHECK(memcmp(la, lb, sizeof la) == 0);
        }
        ts_model_free(l);
    }
    tm_blob b = tm_read_all(path);
    TS_CHECK(b.p && b.n > 1000);
    if (b.p) {
        uint64_t h = 0;
        for (int i = 0; i < 8; i++) h |= (uint64_t)b.p[i] << (8 * i);
        TS_CHECK(h % 8 == 0 && 8 + h < b.n);
        /* truncated: no length, inside the header, inside the data */
        tm_write_all(path, b.p, 5);
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "truncated");
        tm_write_all(path, b.p, 8 + h / 2);
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "truncated");
        tm_write_all(path, b.p, b.n - 1);
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "tensor head: data_offsets");
        /* header not JSON */
        tm_write_edited(path, &b, "{\"__metadata__\"", "{\"__metadata__\",");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "invalid JSON");
        /* missing / unknown tensor */
        tm_write_edited(path, &b, "\"1.attn.wq_b\":", "\"1.attn.wq_B\":");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "1.attn.wq_b is missing");
        tm_write_edited(path, &b, "\"__metadata__\":", "\"extra\": {\"dtype\": \"F32\", \"shape\": "
                        "[1], \"data_offsets\": [0, 4]}, \"__metadata__\":");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "extra");
        /* wrong dtype, wrong shape */
        tm_write_edited(path, &b, "\"embed\": {\"dtype\": \"BF16\"",
                        "\"embed\": {\"dtype\": \"F32\"");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "embed: dtype \"F32\"");
        tm_write_edited(path, &b, "\"embed\": {\"dtype\": \"BF16\", \"shape\": [512, 256]",
                        "\"embed\": {\"dtype\": \"BF16\", \"shape\": [256, 512]");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "embed: shape");
        /* offsets out of the file, and overlapping (same size, shifted onto embed) */
        tm_write_edited(path, &b, "\"data_offsets\": [0, 262144]",
                        "\"data_offsets\": [0, 999999999]");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "embed: data_offsets");
        tm_write_edited(path, &b, "\"data_offsets\": [262144, 360448]", /* 0.hc_attn_fn */
                        "\"data_offsets\": [262140, 360444]");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "overlapping");
        /* bad config in the metadata, wrong format tag */
        tm_write_edited(path, &b, "\\\"head_dim\\\": 512", "\\\"head_dim\\\": 256");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "head_dim");
        tm_write_edited(path, &b, "tilestack-dsv4", "tilestack-dsv5");
        expect_load_error(ts_t_, path, TS_ERR_INVALID_ARGUMENT, "format");
        free(b.p);
    }
    remove(path);
    expect_load_error(ts_t_, "/nonexistent/dir/w.safetensors", TS_ERR_IO, "/nonexistent/dir");
    TS_CHECK_STATUS(ts_model_load(NULL, 1, &l), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_save_weights(m, "/nonexistent/dir/w"), TS_ERR_IO);
    ts_model_free(m);
}
