/* Buffer lifecycle: shared segments vanish from /dev/shm once mapped, argument checks,
 * configs and the size hint. */
#include "ep_test_util.h"

#include <dirent.h>
#include <unistd.h>

/* Entries in /dev/shm made by this process's EP buffers. */
static int my_segments(void) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tilestack_ep.%ld.", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

TS_TEST(ep_buffer_lifecycle) {
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    int32_t rank = -1, n = -1;
    TS_CHECK_STATUS(ts_ep_buffer_get_rank(b, &rank, &n), TS_OK);
    TS_CHECK_EQ_INT(rank, g_ep_rank);
    TS_CHECK_EQ_INT(n, g_ep_size);
    TS_CHECK_EQ_INT(my_segments(), 0); /* unlinked as soon as every peer mapped it */
    TS_CHECK_STATUS(ts_ep_buffer_set_timeout(b, 0.0), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_buffer_set_timeout(b, 5.0), TS_OK);
    TS_CHECK_STATUS(ts_ep_buffer_destroy(b), TS_OK);
    TS_CHECK_STATUS(ts_ep_buffer_destroy(NULL), TS_OK);
    /* a second buffer on a sub-communicator (every other rank) */
    MPI_Comm sub;
    ep_test_barrier(); /* MPI_Comm_split cannot be polled: a missing rank is named here first */
    MPI_Comm_split(MPI_COMM_WORLD, g_ep_rank % 2, g_ep_rank, &sub);
    ts_ep_buffer *s = NULL;
    TS_CHECK_STATUS(ts_ep_buffer_create(sub, 4096, 0, false, NULL, &s), TS_OK);
    TS_CHECK_STATUS(ts_ep_buffer_get_rank(s, &rank, &n), TS_OK);
    TS_CHECK_EQ_INT(rank, g_ep_rank / 2);
    ts_ep_buffer_destroy(s);
    MPI_Comm_free(&sub);
    TS_CHECK_EQ_INT(my_segments(), 0);
}

TS_TEST(ep_buffer_bad_args) {
    ts_ep_buffer *b = (ts_ep_buffer *)(uintptr_t)1;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 1000, 0, false, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(b == (ts_ep_buffer *)(uintptr_t)1);
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 0, 0, false, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    /* normal mode: num_rdma_bytes is the internode staging, a non-negative multiple of 128 */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 4096, -128, false, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 4096, 100, false, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.ranks_per_node = g_ep_size + 1; /* must divide the ranks */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 4096, 0, false, &o, &b), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(b == (ts_ep_buffer *)(uintptr_t)1);
    /* low-latency mode needs its area (num_rdma_bytes); test_ep_low_latency*.c covers the rest */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 4096, 0, true, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 4096, 0, false, NULL, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_NULL, 4096, 0, false, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_EQ_INT(my_segments(), 0);
}

TS_TEST(ep_config_and_size_hint) {
    ts_ep_config c;
    TS_CHECK_STATUS(ts_ep_get_dispatch_config(g_ep_size, &c), TS_OK);
    TS_CHECK(c.num_max_nvl_chunked_send_tokens >= 1 && c.num_sms >= 0);
    TS_CHECK_STATUS(ts_ep_get_combine_config(0, &c), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_get_combine_config(3, NULL), TS_ERR_NULL_POINTER);
    int64_t a = 0, b = 0, f = 0;
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(8, 4096, 7168, 8, 56, false, &a), TS_OK);
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(8, 4096, 7168, 8, 56, true, &f), TS_OK);
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(16, 4096, 7168, 8, 56, false, &b), TS_OK);
    /* both halves hold R*T rows: bf16 combine rows (2*hidden) bound it either way */
    TS_CHECK(a >= 2 * (int64_t)8 * 4096 * 7168 * 2 && a % (2 << 20) == 0);
    TS_CHECK(b > a && f <= a && f >= 2 * (int64_t)8 * 4096 * 7168 * 2);
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(0, 1, 1, 1, 0, false, &a), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(1, 1, 1, 1, 0, false, NULL), TS_ERR_NULL_POINTER);
}
