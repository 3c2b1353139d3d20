/* EP buffer: shared segments among node-local ranks, the deadline barrier, configs and the
 * size hint. */
#include "ep/ep_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TS__EP_NAME_LEN 64
#define TS__EP_DEFAULT_TIMEOUT_S 100.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ts_status ts__ep_barrier(ts_ep_buffer *b, const char *what) {
    const uint64_t target = ++b->barriers;
    atomic_store_explicit(&ts__ep_ctrl_of(b, b->rank)->arrive, target, memory_order_release);
    const double deadline = now_s() + b->timeout_s;
    for (int i = 1; i < b->num_ranks; i++) {
        const int r = (b->rank + i) % b->num_ranks;
        _Atomic uint64_t *w = &ts__ep_ctrl_of(b, r)->arrive;
        ts__ep_backoff wait = TS__EP_BACKOFF_INIT;
        while (atomic_load_explicit(w, memory_order_acquire) < target) {
            if (ts__ep_backoff_step(&wait) && now_s() > deadline) {
                b->broken = true;
                return ts__fail(TS_ERR_TIMEOUT,
                                "%s: rank %d waited %.1f s for rank %d, which did not arrive "
                                "(barrier %llu); the buffer can only be destroyed now",
                                what, b->rank, b->timeout_s, r, (unsigned long long)target);
            }
        }
    }
    return TS_OK;
}

ts_status ts__ep_check_usable(const ts_ep_buffer *b, const char *what) {
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", what);
    if (b->broken)
        return ts__fail(TS_ERR_PEER, "%s: buf: an earlier call timed out; only destroy is allowed", what);
    return TS_OK;
}

int ts__ep_threads(const ts_ep_config *cfg) {
    const int pool = ts_get_num_threads();
    if (!cfg || cfg->num_sms <= 0) return pool;
    return cfg->num_sms < pool ? cfg->num_sms : pool;
}

static ts_status make_config(int32_t num_ranks, ts_ep_config *out, int32_t nvl_send) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "config: out is NULL");
    if (num_ranks < 1) return ts__fail(TS_ERR_INVALID_ARGUMENT, "config: num_ranks %d < 1", num_ranks);
    /* Threads replace SMs: 0 = every pool thread. Chunk sizes are upstream's 8-rank values,
     * unused by the fixed-buffer design. */
    out->num_sms = 0;
    out->num_max_nvl_chunked_send_tokens = nvl_send;
    out->num_max_nvl_chunked_recv_tokens = 256;
    out->num_max_rdma_chunked_send_tokens = 6;
    out->num_max_rdma_chunked_recv_tokens = 128;
    return TS_OK;
}

ts_status ts_ep_get_dispatch_config(int32_t num_ranks, ts_ep_config *out) {
    return make_config(num_ranks, out, 6);
}

ts_status ts_ep_get_combine_config(int32_t num_ranks, ts_ep_config *out) {
    return make_config(num_ranks, out, 4);
}

ts_ep_buffer_options ts_ep_default_buffer_options(void) {
    ts_ep_buffer_options o;
    memset(&o, 0, sizeof o);
    o.num_qps_per_rank = 24;
    o.timeout_s = 0.0;
    return o;
}

ts_status ts_ep_get_buffer_size_hint(int32_t num_ranks, int64_t num_max_tokens_per_rank, int64_t hidden,
                                     int32_t num_topk, int64_t num_scales, bool use_fp8_dispatch,
                                     int64_t *num_nvl_bytes) {
    if (!num_nvl_bytes) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_get_buffer_size_hint: num_nvl_bytes is NULL");
    if (num_ranks < 1 || num_max_tokens_per_rank < 0 || hidden < 1 || num_topk < 0 || num_scales < 0 ||
        num_max_tokens_per_rank > (INT64_C(1) << 31) || hidden > (INT64_C(1) << 24) || num_scales > (1 << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_ep_get_buffer_size_hint: num_ranks %d, num_max_tokens_per_rank %lld, hidden %lld, "
                        "num_topk %d, num_scales %lld out of range",
                        num_ranks, (long long)num_max_tokens_per_rank, (long long)hidden, num_topk,
                        (long long)num_scales);
    const int64_t rows = (int64_t)num_ranks * num_max_tokens_per_rank;
    /* Dispatch area: the worst case is every rank sending every token here. */
    const int64_t xb = use_fp8_dispatch ? hidden : 2 * hidden;
    const int64_t disp = ts__align(rows * xb, 64) + ts__align(rows * num_scales * 4, 64) +
                         ts__align(rows * num_topk * 8, 64) + ts__align(rows * num_topk * 4, 64) +
                         ts__align(rows * 4, 64);
    const int64_t comb = ts__align(rows * hidden * 2, 64) + ts__align(rows * num_topk * 4, 64);
    const int64_t area = ts__align(ts__max64(disp, comb), 128);
    *num_nvl_bytes = ts__align(2 * area, INT64_C(2) << 20);
    return TS_OK;
}

static double env_timeout(void) {
    const char *s = getenv("TS_EP_TIMEOUT_S");
    if (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (end != s && v > 0) return v;
    }
    return TS__EP_DEFAULT_TIMEOUT_S;
}

static void unmap_all(ts_ep_buffer *b) {
    if (b->peer) {
        for (int r = 0; r < b->num_ranks; r++)
            if (b->peer[r]) munmap(b->peer[r], (size_t)b->seg_bytes);
        free(b->peer);
    }
}

ts_status ts_ep_buffer_create(MPI_Comm comm, int64_t num_nvl_bytes, int64_t num_rdma_bytes, bool low_latency_mode,
                              const ts_ep_buffer_options *opts, ts_ep_buffer **out) {
    static const char *what = "ts_ep_buffer_create";
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", what);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: MPI is not initialised", what);
    if (comm == MPI_COMM_NULL) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: comm is MPI_COMM_NULL", what);
    ts_ep_buffer_options o = opts ? *opts : ts_ep_default_buffer_options();
    /* Argument checks that every rank makes alike need no agreement round. */
    if (num_nvl_bytes < (low_latency_mode ? 0 : 1) || num_nvl_bytes % 128 != 0 || num_nvl_bytes > (INT64_C(1) << 46))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_nvl_bytes %lld must be a positive multiple of 128",
                        what, (long long)num_nvl_bytes);
    /* The rdma area is the low-latency area here (upstream: LL traffic goes through it). */
    if (num_rdma_bytes != 0 && !low_latency_mode)
        return ts__fail(TS_ERR_UNSUPPORTED,
                        "%s: num_rdma_bytes %lld needs low_latency_mode (intranode normal mode uses num_nvl_bytes "
                        "only)", what, (long long)num_rdma_bytes);
    if (low_latency_mode && (num_rdma_bytes <= 0 || num_rdma_bytes % 128 != 0 || num_rdma_bytes > (INT64_C(1) << 46)))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: low_latency_mode needs num_rdma_bytes (%lld) a positive multiple of 128; see "
                        "ts_ep_get_low_latency_rdma_size_hint", what, (long long)num_rdma_bytes);
    if (o.timeout_s < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: opts->timeout_s %g < 0", what, o.timeout_s);

    ts_ep_buffer *b = calloc(1, sizeof *b);
    if (!b) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the buffer", what);
    b->timeout_s = o.timeout_s > 0 ? o.timeout_s : env_timeout();
    b->num_nvl_bytes = num_nvl_bytes;
    if (MPI_Comm_dup(comm, &b->comm) != MPI_SUCCESS) {
        free(b);
        return ts__fail(TS_ERR_PEER, "%s: MPI_Comm_dup failed", what);
    }
    MPI_Comm_rank(b->comm, &b->rank);
    MPI_Comm_size(b->comm, &b->num_ranks);
    MPI_Comm node;
    MPI_Comm_split_type(b->comm, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    /* Every rank sees the same node sizes when the comm spans nodes, so all return alike. */
    int min_node = node_size;
    MPI_Allreduce(&node_size, &min_node, 1, MPI_INT, MPI_MIN, b->comm);
    if (min_node != b->num_ranks) {
        MPI_Comm_free(&b->comm);
        int R = b->num_ranks;
        free(b);
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: comm spans several nodes (%d of %d ranks share this node); "
                        "the internode path is not implemented yet", what, min_node, R);
    }
    b->ranks_per_node = b->num_ranks;
    b->data_off = ts__align(TS__EP_CTRL_BYTES + 2 * TS__EP_META_SLOT_BYTES, 4096);
    b->num_rdma_bytes = num_rdma_bytes;
    b->ll_off = ts__align(b->data_off + num_nvl_bytes, 4096);
    b->seg_bytes = b->ll_off + num_rdma_bytes;
    if (low_latency_mode && ts__ep_ll_init(b) != TS_OK) {
        MPI_Comm_free(&b->comm);
        free(b);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the low-latency state", what);
    }

    b->peer = calloc((size_t)b->num_ranks, sizeof *b->peer);
    b->rank_book = calloc((size_t)b->num_ranks, TS__EP_RANK_BOOK_BYTES);
    int err = !b->peer || !b->rank_book
                  ? ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for %d peers", what, b->num_ranks)
                  : TS_OK;
    char myname[TS__EP_NAME_LEN];
    static unsigned g_serial;
    snprintf(myname, sizeof myname, "/tilestack_ep.%ld.%u.%d", (long)getpid(), g_serial++, b->rank);
    int fd = -1;
    if (!err) {
        fd = shm_open(myname, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            err = TS_ERR_IO;
            ts__fail(TS_ERR_IO, "%s: shm_open(%s): %s", what, myname, strerror(errno));
        } else {
            int e = posix_fallocate(fd, 0, (off_t)b->seg_bytes);
            if (e) {
                err = TS_ERR_OUT_OF_MEMORY;
                ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: cannot reserve %lld bytes of shared memory: %s", what,
                         (long long)b->seg_bytes, strerror(e));
            } else {
                void *p = mmap(NULL, (size_t)b->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p == MAP_FAILED) {
                    err = TS_ERR_OUT_OF_MEMORY;
                    ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: mmap of %lld bytes: %s", what, (long long)b->seg_bytes,
                             strerror(errno));
                } else {
                    b->peer[b->rank] = p;
                    ts__ep_ctrl *c = p;
                    c->num_nvl_bytes = num_nvl_bytes;
                    c->data_off = b->data_off;
                }
            }
        }
    }
    /* Round 1: names and sizes. A rank that failed sends an empty name. */
    struct { int64_t size; char name[TS__EP_NAME_LEN]; } mine, *all = NULL;
    memset(&mine, 0, sizeof mine);
    if (!err) {
        mine.size = b->seg_bytes;
        memcpy(mine.name, myname, sizeof myname);
    }
    all = calloc((size_t)b->num_ranks, sizeof *all);
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all ? (void *)all : (void *)&mine,
                  all ? (int)sizeof mine : 0, MPI_BYTE, b->comm);
    if (!all && !err) err = TS_ERR_OUT_OF_MEMORY;
    int bad_rank = -1;
    for (int r = 0; all && r < b->num_ranks && bad_rank < 0; r++)
        if (!all[r].name[0]) bad_rank = r;
    /* Round 2: map every peer's segment. */
    if (!err && bad_rank < 0) {
        for (int r = 0; r < b->num_ranks && !err; r++) {
            if (r == b->rank) continue;
            int pfd = shm_open(all[r].name, O_RDWR, 0);
            if (pfd < 0) {
                err = TS_ERR_IO;
                ts__fail(TS_ERR_IO, "%s: cannot open rank %d's segment %s: %s", what, r, all[r].name, strerror(errno));
                break;
            }
            void *p = mmap(NULL, (size_t)all[r].size, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
            close(pfd);
            if (p == MAP_FAILED) {
                err = TS_ERR_OUT_OF_MEMORY;
                ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: cannot map rank %d's segment: %s", what, r, strerror(errno));
            } else {
                b->peer[r] = p;
            }
            if (all[r].size != b->seg_bytes) {
                /* Mapped with the peer's size; unmap_all uses ours, so reject mismatches. */
                munmap(p, (size_t)all[r].size);
                b->peer[r] = NULL;
                err = TS_ERR_INVALID_ARGUMENT;
                ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_nvl_bytes differs: rank %d has %lld, rank %d has %lld",
                         what, r, (long long)(all[r].size - b->data_off), b->rank, (long long)num_nvl_bytes);
            }
        }
    }
    /* Round 3: agreement; afterwards every peer has mapped every segment (or given up), so
     * the names can go: nothing is left in /dev/shm even if a rank is killed later. */
    int flag[2] = {err ? 1 : 0, err ? -b->rank : -b->num_ranks}, agg[2];
    MPI_Allreduce(flag, agg, 2, MPI_INT, MPI_MAX, b->comm);
    if (fd >= 0) {
        shm_unlink(myname);
        close(fd);
    }
    if (bad_rank < 0 && agg[0]) bad_rank = -agg[1];
    free(all);
    if (err || bad_rank >= 0) {
        ts_status st = err ? (ts_status)err
                           : ts__fail(TS_ERR_PEER, "%s: rank %d failed to set up its shared segment", what, bad_rank);
        unmap_all(b);
        free(b->rank_book);
        ts__ep_ll_free(b);
        MPI_Comm_free(&b->comm);
        free(b);
        return st;
    }
    *out = b;
    return TS_OK;
}

ts_status ts_ep_buffer_destroy(ts_ep_buffer *buf) {
    if (!buf) return TS_OK;
    /* No synchronisation: a peer's mapping outlives ours, and the segments were unlinked at
     * create, so the memory goes when the last rank unmaps (or dies). */
    unmap_all(buf);
    free(buf->rank_book);
    ts__ep_ll_free(buf);
    free(buf->expert_counts);
    MPI_Comm_free(&buf->comm);
    free(buf);
    return TS_OK;
}

ts_status ts_ep_buffer_get_rank(const ts_ep_buffer *buf, int32_t *rank, int32_t *num_ranks) {
    if (!buf) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_buffer_get_rank: buf is NULL");
    if (rank) *rank = buf->rank;
    if (num_ranks) *num_ranks = buf->num_ranks;
    return TS_OK;
}

ts_status ts_ep_buffer_set_timeout(ts_ep_buffer *buf, double timeout_s) {
    if (!buf) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_buffer_set_timeout: buf is NULL");
    if (!(timeout_s > 0) || timeout_s > 1e9)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_ep_buffer_set_timeout: timeout_s %g must be in (0, 1e9]", timeout_s);
    buf->timeout_s = timeout_s;
    return TS_OK;
}

ts_status ts__ep_check_peers(ts_ep_buffer *b, uint64_t call, const char *what) {
    const ts__ep_meta *m0 = ts__ep_meta_of(b, 0, call);
    /* A rank with bad input keeps its own specific code (message already recorded). */
    if (ts__ep_meta_of(b, b->rank, call)->status != TS_OK) return (ts_status)ts__ep_meta_of(b, b->rank, call)->status;
    for (int r = 0; r < b->num_ranks; r++) {
        const ts__ep_meta *m = ts__ep_meta_of(b, r, call);
        if (m->status != TS_OK) {
            if (r == b->rank) return (ts_status)m->status; /* message already recorded */
            return ts__fail(TS_ERR_PEER, "%s: rank %d rejected its arguments (%s)", what, r,
                            ts_status_str((ts_status)m->status));
        }
    }
    for (int r = 1; r < b->num_ranks; r++) {
        const ts__ep_meta *m = ts__ep_meta_of(b, r, call);
#define TS__EP_SAME(field, code)                                                                     \
    if (m->field != m0->field)                                                                     \
        return ts__fail(code, "%s: " #field " differs across ranks: rank %d has %lld, rank 0 has %lld", \
                        what, r, (long long)m->field, (long long)m0->field);
        TS__EP_SAME(op, TS_ERR_INVALID_ARGUMENT)
        TS__EP_SAME(hidden, TS_ERR_SHAPE)
        TS__EP_SAME(x_dtype, TS_ERR_DTYPE)
        TS__EP_SAME(scale_dtype, TS_ERR_DTYPE)
        TS__EP_SAME(num_scales, TS_ERR_SHAPE)
        TS__EP_SAME(has_topk, TS_ERR_INVALID_ARGUMENT)
        TS__EP_SAME(has_weights, TS_ERR_INVALID_ARGUMENT)
        TS__EP_SAME(num_topk, TS_ERR_SHAPE)
        TS__EP_SAME(idx_dtype, TS_ERR_DTYPE)
        TS__EP_SAME(num_experts, TS_ERR_SHAPE)
        TS__EP_SAME(cached, TS_ERR_INVALID_ARGUMENT)
#undef TS__EP_SAME
    }
    return TS_OK;
}
