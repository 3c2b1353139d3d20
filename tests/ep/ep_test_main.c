/* Runner of the multi-rank EP tests (run under mpirun). Every rank runs every test; a test
 * fails if it failed on any rank. Rank 0 prints the usual "N passed, N failed" line.
 * `tilestack_ep_tests [substring...] [-substring...]` runs the tests whose names contain any
 * substring given (all when none is), less those containing a substring given after '-'
 * (tests that force nodes fit them to the machines found: g_ep_machine_ranks); `--kill-test` is the fault drill of
 * scripts/run_ep_tests.sh (a rank is SIGKILLed after creating a buffer); `--stop-test` that of
 * scripts/check_peer_loss.sh (the last rank stops itself, SIGSTOP, between tests: the others
 * must end the job with TS_ERR_TIMEOUT naming it, within TS_EP_TEST_WAIT_S). Every wait of the
 * driver on a peer has that deadline (ep_test_coll.c). */
#include "ep_test_util.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TS_MAX_TESTS 256
#include "ts_test_registry.h"

int g_ep_rank, g_ep_size, g_ep_machine_ranks = 1;

static int machine_ranks(void) {
    MPI_Comm shared;
    int size = 1, local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_ep_rank, MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &size);
    MPI_Comm_rank(shared, &local);
    MPI_Comm_free(&shared);
    /* equal machines of consecutive ranks: the same size everywhere, local rank = rank % size */
    int mine[2] = {size, local == g_ep_rank % size ? 1 : 0}, lo[2] = {0, 0}, hi = 0;
    MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&size, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return lo[0] == hi && lo[1] ? size : 1;
}

void ts_test_fail(ts_test_ctx *t, const char *file, int line, const char *fmt, ...) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[rank %d] ", g_ep_rank);
    va_list ap;
    va_start(ap, fmt);
    ts_test__vfail(t, prefix, file, line, fmt, ap);
    va_end(ap);
}

/* `--kill-test ll`: the same with a low-latency buffer; survivors wait for the dead rank's
 * dispatch signal (shared memory) or header message (another node). */
static int kill_test_ll(void) {
    const int R = g_ep_size;
    int64_t bytes = 0;
    ts_ep_buffer *buf = NULL;
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = 2.0;
    if (ts_ep_get_low_latency_rdma_size_hint(1, 128, R, R, &bytes) != TS_OK ||
        ts_ep_buffer_create(MPI_COMM_WORLD, 0, bytes, true, &o, &buf) != TS_OK) {
        printf("kill-test: create failed: %s\n", ts_last_error());
        return 1;
    }
    ep_test_barrier();
    if (g_ep_rank == R - 1) raise(SIGKILL);
    uint16_t x[128] = {0}, rx[128 * 64];
    int64_t idx[1] = {R - 1};
    int32_t cnt[1];
    ts_tensor xt = ts_tensor_2d(x, TS_BF16, 1, 128), it = ts_tensor_2d(idx, TS_I64, 1, 1);
    ts_tensor rxt = ts_tensor_3d(rx, TS_BF16, 1, R, 128), ct = ts_tensor_1d(cnt, TS_I32, 1);
    ts_ep_ll_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &xt;
    a.topk_idx = &it;
    a.num_max_dispatch_tokens_per_rank = 1;
    a.num_experts = R;
    ts_ep_ll_dispatch_out out = {&rxt, NULL, &ct};
    ts_ep_ll_handle *h = NULL;
    ts_status st = ts_ep_low_latency_dispatch(buf, &a, &out, &h, NULL);
    printf("kill-test: rank %d: %s: %s\n", g_ep_rank, ts_status_str(st), ts_last_error());
    fflush(stdout);
    if (st == TS_OK) ts_ep_ll_handle_destroy(h);
    ts_ep_buffer_destroy(buf);
    return st == TS_ERR_TIMEOUT ? 0 : 1;
}

static int kill_test(void) {
    ts_ep_buffer *buf = NULL;
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = 2.0;
    if (ts_ep_buffer_create(MPI_COMM_WORLD, 1 << 20, 0, false, &o, &buf) != TS_OK) {
        printf("kill-test: create failed: %s\n", ts_last_error());
        return 1;
    }
    ep_test_barrier();
    if (g_ep_rank == g_ep_size - 1) raise(SIGKILL);
    /* The others wait for the dead rank at a shared-memory barrier: a timeout, not a hang. */
    int32_t tpr[64] = {0}, tpe[64] = {0};
    bool in_rank[1];
    ts_tensor xt = ts_tensor_2d(tpr, TS_BF16, 0, 64);
    ts_tensor a = ts_tensor_1d(tpr, TS_I32, g_ep_size), e = ts_tensor_1d(tpe, TS_I32, g_ep_size);
    ts_tensor ir = ts_tensor_2d(in_rank, TS_BOOL, 0, g_ep_size);
    ts_ep_dispatch_args args;
    memset(&args, 0, sizeof args);
    args.x = &xt;
    args.num_tokens_per_rank = &a;
    args.num_tokens_per_expert = &e;
    args.is_token_in_rank = &ir;
    ts_ep_dispatch_result res;
    ts_status st = ts_ep_dispatch(buf, &args, &res, NULL);
    printf("kill-test: rank %d: %s: %s\n", g_ep_rank, ts_status_str(st), ts_last_error());
    fflush(stdout);
    ts_ep_buffer_destroy(buf);
    return st == TS_ERR_TIMEOUT ? 0 : 1;
}

/* The verdict of one test over every rank: the driver's wait between tests. */
static long verdict(long mine) {
    long any = 0;
    ep_test_allreduce(&mine, &any, 1, MPI_LONG, MPI_SUM);
    return any;
}

/* `--stop-test`: the last rank stops (as a debugger or a job-control signal would stop it)
 * where a test ends; the others reach the verdict and must not wait for it forever. Returns
 * only if the wait did not end the job. */
static int stop_test(void) {
    ep_test_barrier();
    if (g_ep_rank == g_ep_size - 1) raise(SIGSTOP);
    verdict(0);
    printf("stop-test: rank %d: the verdict passed with rank %d stopped\n", g_ep_rank, g_ep_size - 1);
    return 1;
}

/* Whether the arguments select the test NAME (see the top of this file). */
static int selected(const char *name, int argc, char **argv) {
    int any_include = 0, included = 0;
    for (int a = 1; a < argc; a++) {
        if (argv[a][0] == '-') {
            if (argv[a][1] && strstr(name, argv[a] + 1)) return 0;
        } else {
            any_include = 1;
            if (strstr(name, argv[a])) included = 1;
        }
    }
    return !any_include || included;
}

int main(int argc, char **argv) {
    /* SERIALIZED: the async calls run MPI on the buffer's worker thread (internode) */
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_ep_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_ep_size);
    g_ep_machine_ranks = machine_ranks();
    if (argc > 1 && !strcmp(argv[1], "--kill-test")) {
        /* A peer is dead: MPI_Finalize could wait for it forever. */
        _exit(argc > 2 && !strcmp(argv[2], "ll") ? kill_test_ll() : kill_test());
    }
    if (argc > 1 && !strcmp(argv[1], "--stop-test")) _exit(stop_test());
    qsort(g_tests, (size_t)g_ntests, sizeof g_tests[0], cmp_entry);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_ntests; i++) {
        if (!selected(g_tests[i].name, argc, argv)) continue;
        ts_test_ctx ctx = {g_tests[i].name, 0};
        struct timespec t0, t1;
        ep_test_barrier();
        clock_gettime(CLOCK_MONOTONIC, &t0);
        g_tests[i].fn(&ctx);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const long any = verdict(ctx.failures);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
        if (any) failed++;
        else passed++;
        if (g_ep_rank == 0) {
            printf("%s %-48s (%d ranks, %ld failed checks, %.0f ms)\n", any ? "FAIL" : "ok  ", g_tests[i].name,
                   g_ep_size, any, ms);
            fflush(stdout);
        }
    }
    if (g_ep_rank == 0) printf("%d passed, %d failed\n", passed, failed);
    ep_test_barrier(); /* MPI_Finalize cannot be polled: a missing rank is named here first */
    MPI_Finalize();
    return failed ? 1 : 0;
}
