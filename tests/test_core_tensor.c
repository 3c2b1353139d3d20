/* Status codes, last-error messages, dtype table and tensor view validation. */
#include "ts_test.h"

#include "tilestack/core.h"

#include <pthread.h>
#include <stdlib.h>

TS_TEST(status_codes_are_stable_and_named) {
    /* Codes are ABI: renumbering one breaks every binding. */
    TS_CHECK_EQ_INT(TS_OK, 0);
    TS_CHECK_EQ_INT(TS_ERR_NULL_POINTER, 1);
    TS_CHECK_EQ_INT(TS_ERR_SHAPE, 4);
    TS_CHECK_EQ_INT(TS_ERR_OVERFLOW, 7);
    TS_CHECK_EQ_INT(TS_ERR_ALIASING, 15);
    for (int s = 0; s < TS_STATUS_COUNT_; s++) {
        const char *str = ts_status_str((ts_status)s);
        TS_CHECK_MSG(str && strncmp(str, "TS_", 3) == 0, "status %d has no name", s);
    }
    TS_CHECK(strstr(ts_status_str((ts_status)999), "unknown") != NULL);
    TS_CHECK(strstr(ts_status_str((ts_status)-1), "unknown") != NULL);
}

TS_TEST(version_runtime_matches_headers) {
    TS_CHECK_EQ_INT(ts_version_number(), TS_VERSION_NUMBER);
    TS_CHECK(strcmp(ts_version_string(), TS_VERSION_STRING) == 0);
}

TS_TEST(dtype_sizes_and_names) {
    TS_CHECK_EQ_INT(ts_dtype_size(TS_BF16), 2);
    TS_CHECK_EQ_INT(ts_dtype_size(TS_E4M3), 1);
    TS_CHECK_EQ_INT(ts_dtype_size(TS_E2M1X2), 1);
    TS_CHECK_EQ_INT(ts_dtype_size(TS_UE8M0X4), 4);
    TS_CHECK_EQ_INT(ts_dtype_size(TS_I64), 8);
    TS_CHECK_EQ_INT(ts_dtype_size((ts_dtype)77), 0);
    TS_CHECK(strcmp(ts_dtype_name(TS_E5M2), "e5m2") == 0);
    TS_CHECK(strcmp(ts_dtype_name((ts_dtype)-3), "?") == 0);
    for (int d = 0; d < TS_DTYPE_COUNT_; d++) TS_CHECK(ts_dtype_size((ts_dtype)d) > 0);
}

TS_TEST(tensor_make_is_row_major) {
    float buf[24];
    ts_tensor t = ts_tensor_3d(buf, TS_F32, 2, 3, 4);
    TS_CHECK_EQ_INT(t.strides[0], 12);
    TS_CHECK_EQ_INT(t.strides[1], 4);
    TS_CHECK_EQ_INT(t.strides[2], 1);
    TS_CHECK_EQ_INT(ts_tensor_numel(&t), 24);
    TS_CHECK(ts_tensor_is_contiguous(&t));
    TS_CHECK_STATUS(ts_tensor_check(&t, "t"), TS_OK);
    int64_t nb = 0;
    TS_CHECK_STATUS(ts_tensor_nbytes(&t, &nb), TS_OK);
    TS_CHECK_EQ_INT(nb, 96);
}

TS_TEST(tensor_check_rejects_bad_views_with_named_messages) {
    float buf[16];
    TS_CHECK_STATUS(ts_tensor_check(NULL, "x"), TS_ERR_NULL_POINTER);
    TS_CHECK(strstr(ts_last_error(), "'x'") != NULL);

    ts_tensor t = ts_tensor_2d(NULL, TS_F32, 2, 8);
    TS_CHECK_STATUS(ts_tensor_check(&t, "weights"), TS_ERR_NULL_POINTER);
    TS_CHECK(strstr(ts_last_error(), "weights") != NULL);
    ts_tensor empty = ts_tensor_2d(NULL, TS_F32, 0, 8); /* empty views need no data */
    TS_CHECK_STATUS(ts_tensor_check(&empty, "e"), TS_OK);

    t = ts_tensor_2d(buf, TS_F32, 2, 8);
    t.dtype = (ts_dtype)99;
    TS_CHECK_STATUS(ts_tensor_check(&t, "x"), TS_ERR_DTYPE);
    t = ts_tensor_2d(buf, TS_F32, 2, 8);
    t.ndim = 5;
    TS_CHECK_STATUS(ts_tensor_check(&t, "x"), TS_ERR_SHAPE);
    t.ndim = 0;
    TS_CHECK_STATUS(ts_tensor_check(&t, "x"), TS_ERR_SHAPE);
    t = ts_tensor_2d(buf, TS_F32, 2, 8);
    t.shape[0] = -1;
    TS_CHECK_STATUS(ts_tensor_check(&t, "x"), TS_ERR_SHAPE);
    t = ts_tensor_2d(buf, TS_F32, 2, 8);
    t.strides[0] = -8;
    TS_CHECK_STATUS(ts_tensor_check(&t, "x"), TS_ERR_STRIDE);
}

TS_TEST(tensor_byte_size_overflow_is_detected) {
    float buf[1];
    /* 2^62 elements of 4 bytes: element count fits, byte count does not. */
    ts_tensor t = ts_tensor_1d(buf, TS_F32, (int64_t)1 << 62);
    TS_CHECK_STATUS(ts_tensor_check(&t, "big"), TS_ERR_OVERFLOW);
    int64_t nb = 123;
    TS_CHECK_STATUS(ts_tensor_nbytes(&t, &nb), TS_ERR_OVERFLOW);
    TS_CHECK_EQ_INT(nb, 123); /* output untouched on error */
    /* Element count itself overflows. */
    t = ts_tensor_2d(buf, TS_U8, (int64_t)1 << 40, (int64_t)1 << 40);
    TS_CHECK_STATUS(ts_tensor_check(&t, "big2"), TS_ERR_OVERFLOW);
    TS_CHECK_EQ_INT(ts_tensor_numel(&t), -1);
    /* A huge stride on a small shape overflows the span. */
    t = ts_tensor_2d(buf, TS_F32, 4, 1);
    t.strides[0] = INT64_MAX / 2;
    TS_CHECK_STATUS(ts_tensor_check(&t, "strided"), TS_ERR_OVERFLOW);
    int64_t r;
    TS_CHECK_STATUS(ts_mul_overflow_i64(INT64_MAX, 2, &r), TS_ERR_OVERFLOW);
    TS_CHECK_STATUS(ts_mul_overflow_i64(1 << 20, 1 << 20, &r), TS_OK);
    TS_CHECK_EQ_INT(r, (int64_t)1 << 40);
}

TS_TEST(tensor_shape_dtype_majorness_checks) {
    uint16_t buf[64];
    ts_tensor a = ts_tensor_2d(buf, TS_BF16, 4, 16);
    int64_t want[2] = {4, -1};
    TS_CHECK_STATUS(ts_tensor_check_shape(&a, "a", 2, want), TS_OK);
    int64_t bad[2] = {5, 16};
    TS_CHECK_STATUS(ts_tensor_check_shape(&a, "a", 2, bad), TS_ERR_SHAPE);
    TS_CHECK(strstr(ts_last_error(), "shape[0]") != NULL);
    TS_CHECK_STATUS(ts_tensor_check_shape(&a, "a", 3, NULL), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_tensor_check_dtype(&a, "a", TS_BF16), TS_OK);
    TS_CHECK_STATUS(ts_tensor_check_dtype(&a, "a", TS_F32), TS_ERR_DTYPE);
    TS_CHECK(ts_tensor_is_k_major(&a));
    TS_CHECK(!ts_tensor_is_mn_major(&a));
    TS_CHECK_STATUS(ts_tensor_check_major(&a, "a", true), TS_OK);
    TS_CHECK_STATUS(ts_tensor_check_major(&a, "a", false), TS_ERR_STRIDE);

    /* Transposed view of a [16, 4] buffer: [4, 16] with strides (1, 4) is MN-major. */
    ts_tensor b = a;
    b.strides[0] = 1;
    b.strides[1] = 4;
    TS_CHECK(ts_tensor_is_mn_major(&b));
    TS_CHECK(!ts_tensor_is_k_major(&b));
    TS_CHECK(!ts_tensor_is_contiguous(&b));
    TS_CHECK_STATUS(ts_tensor_check_last_contiguous(&b, "b"), TS_ERR_STRIDE);
    TS_CHECK_STATUS(ts_tensor_check_last_contiguous(&a, "a"), TS_OK);
    /* Padded rows: last dim contiguous, not fully contiguous. */
    ts_tensor c = ts_tensor_2d(buf, TS_BF16, 2, 16);
    c.strides[0] = 32;
    TS_CHECK(!ts_tensor_is_contiguous(&c));
    TS_CHECK_STATUS(ts_tensor_check_last_contiguous(&c, "c"), TS_OK);
}

TS_TEST(tensor_alignment_checks) {
    _Alignas(64) float buf[64];
    ts_tensor t = ts_tensor_2d(buf, TS_F32, 4, 16);
    TS_CHECK_STATUS(ts_tensor_check_aligned(&t, "t", 64), TS_OK);
    t.data = buf + 1;
    t.shape[0] = 3;
    TS_CHECK_STATUS(ts_tensor_check_aligned(&t, "t", 16), TS_ERR_ALIGNMENT);
    t.data = buf;
    t.strides[0] = 3; /* 12-byte row stride */
    t.shape[1] = 3;
    TS_CHECK_STATUS(ts_tensor_check_aligned(&t, "t", 16), TS_ERR_ALIGNMENT);
    TS_CHECK_STATUS(ts_tensor_check_aligned(&t, "t", 12), TS_ERR_INVALID_ARGUMENT);
}

static void *fail_on_other_thread(void *arg) {
    (void)arg;
    ts_tensor_check(NULL, "other_thread");
    return strstr(ts_last_error(), "other_thread") ? (void *)1 : NULL;
}

TS_TEST(last_error_is_thread_local_and_clearable) {
    ts_tensor_check(NULL, "first");
    pthread_t th;
    void *seen = NULL;
    TS_CHECK(pthread_create(&th, NULL, fail_on_other_thread, NULL) == 0);
    pthread_join(th, &seen);
    TS_CHECK(seen != NULL);
    TS_CHECK(strstr(ts_last_error(), "first") != NULL);
    ts_clear_error();
    TS_CHECK(ts_last_error()[0] == '\0');
}
