/* EP buffer: shared segments among node-local ranks, the deadline barrier, configs and the
 * size hint. */
#include "ep/ep_coll.h"
#include "ep/ep_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TS__EP_NAME_LEN 64

ts_status ts__ep_check_usable(const ts_ep_buffer *b, const char *what) {
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", what);
    if (b->broken)
        return ts__fail(TS_ERR_PEER, "%s: buf: an earlier call timed out; only destroy is allowed", what);
    if (ts__ep_async_busy(b))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: an async call is in flight on buf; wait for its event first",
                        what);
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

ts_status ts_ep_get_internode_buffer_size_hint(int32_t num_ranks, int32_t ranks_per_node, int64_t num_max_tokens_per_rank,
                                               int64_t hidden, int32_t num_topk, int64_t num_scales, bool use_fp8_dispatch,
                                               int64_t *num_rdma_bytes) {
    static const char *what = "ts_ep_get_internode_buffer_size_hint";
    if (!num_rdma_bytes) return ts__fail(TS_ERR_NULL_POINTER, "%s: num_rdma_bytes is NULL", what);
    if (num_ranks < 1 || ranks_per_node < 1 || num_ranks % ranks_per_node != 0 || num_max_tokens_per_rank < 0 ||
        hidden < 1 || num_topk < 0 || num_topk > 1024 || num_scales < 0 ||
        num_max_tokens_per_rank > (INT64_C(1) << 31) || hidden > (INT64_C(1) << 24) || num_scales > (1 << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: num_ranks %d, ranks_per_node %d (must divide it), num_max_tokens_per_rank %lld, hidden "
                        "%lld, num_topk %d, num_scales %lld out of range",
                        what, num_ranks, ranks_per_node, (long long)num_max_tokens_per_rank, (long long)hidden,
                        num_topk, (long long)num_scales);
    const int64_t others = num_ranks / ranks_per_node - 1, T = num_max_tokens_per_rank, k = ranks_per_node;
    if (others == 0) {
        *num_rdma_bytes = 0;
        return TS_OK;
    }
    /* as ep_dispatch.c's record and ep_combine.c's copy */
    const int64_t xb = use_fp8_dispatch ? hidden : 2 * hidden;
    const int64_t rec = ts__align(ts__align(xb + 4 * num_scales, 8) + 12 * (int64_t)num_topk + 4 + 4 * k, 16);
    const int64_t cr = ts__align(2 * hidden + 4 * (int64_t)num_topk, 16);
    const int64_t half = ts__align(ts__max64(others * T * rec, others * T * k * cr), 64);
    *num_rdma_bytes = ts__align(2 * half, INT64_C(2) << 20);
    return TS_OK;
}

static void unmap_all(ts_ep_buffer *b) {
    if (b->peer) {
        for (int r = 0; r < b->num_ranks; r++)
            if (b->peer[r]) munmap(b->peer[r], (size_t)b->seg_bytes);
        free(b->peer);
    }
}

/* Ranks per node: opts->ranks_per_node, else TS_EP_RANKS_PER_NODE, else the machines' own
 * split (MPI_COMM_TYPE_SHARED; nodes must then hold equal runs of consecutive ranks). Every
 * node of k consecutive ranks must share one machine (it shares memory). *node receives the
 * communicator of this rank's node. All ranks return alike. */
static ts_status split_nodes(ts_ep_buffer *b, const ts_ep_buffer_options *o, MPI_Comm *node, const char *what) {
    const int R = b->num_ranks;
    int want = o->ranks_per_node;
    if (want <= 0) {
        const char *env = getenv("TS_EP_RANKS_PER_NODE");
        if (env && *env) want = atoi(env);
        if (want < 0) want = 0;
        if (want > R) want = R; /* the switch applies to any communicator, small ones too */
    }
    /* MPI_Comm_split* cannot be polled: a barrier with the deadline first, so a peer that is
     * already gone is named instead of hanging them */
    TS__RETURN_IF_ERROR(ts__ep_coll_barrier(b->comm, b->timeout_s, what));
    if (want <= 0) TS__RETURN_IF_ERROR(ts__ep_ranks_per_machine(b->comm, b->timeout_s, what, &want));
    int agg[2] = {want, -want};
    TS__RETURN_IF_ERROR(ts__ep_coll_allreduce(agg, 2, MPI_INT, MPI_MIN, b->comm, b->timeout_s, what));
    if (agg[0] != -agg[1])
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: ranks_per_node differs across ranks (%d to %d)", what, agg[0],
                        -agg[1]);
    if (want > R || R % want != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: ranks_per_node %d does not divide the %d ranks", what, want, R);
    b->ranks_per_node = want;
    b->num_nodes = R / want;
    b->node = b->rank / want;
    b->local_rank = b->rank % want;
    b->node_first = b->node * want;
    MPI_Comm_split(b->comm, b->node, b->rank, node);
    MPI_Comm shared;
    MPI_Comm_split_type(*node, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &shared);
    int sz = 0;
    MPI_Comm_size(shared, &sz);
    MPI_Comm_free(&shared);
    int all_ok = sz == want;
    const ts_status ast = ts__ep_coll_allreduce(&all_ok, 1, MPI_INT, MPI_MIN, b->comm, b->timeout_s, what);
    if (ast != TS_OK) {
        MPI_Comm_free(node);
        return ast;
    }
    if (!all_ok) {
        MPI_Comm_free(node);
        return ts__fail(TS_ERR_UNSUPPORTED,
                        "%s: the nodes of %d consecutive ranks do not each lie on one machine (set "
                        "TS_EP_RANKS_PER_NODE or opts->ranks_per_node to the ranks per machine)", what, want);
    }
    return TS_OK;
}

/* Internode state: metadata slots for remote ranks, the request table and the staging area of
 * normal mode (the same size on every rank, checked). Returns 0 or a code (message set). */
static int alloc_internode(ts_ep_buffer *b, int64_t stage_bytes, const char *what) {
    const int R = b->num_ranks;
    int64_t agg[2] = {stage_bytes, -stage_bytes};
    TS__RETURN_IF_ERROR(ts__ep_coll_allreduce(agg, 2, MPI_INT64_T, MPI_MIN, b->comm, b->timeout_s, what));
    if (agg[0] != -agg[1])
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_rdma_bytes differs across ranks (%lld to %lld)", what,
                        (long long)agg[0], (long long)-agg[1]);
    b->remote_meta = calloc(2 * (size_t)R, sizeof *b->remote_meta);
    b->reqs = calloc(4 * (size_t)R + 4, sizeof *b->reqs);
    b->req_rank = calloc(4 * (size_t)R + 4, sizeof *b->req_rank);
    if (!b->remote_meta || !b->reqs || !b->req_rank)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the internode state", what);
    for (int r = 0; r < 2 * R; r++)
        if (!ts__ep_is_local(b, r % R) && !(b->remote_meta[r] = calloc(1, TS__EP_META_SLOT_BYTES)))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the internode state", what);
    b->rdma_half = (stage_bytes / 2) & ~(int64_t)63;
    b->rdma = ts__aligned_alloc((size_t)(2 * b->rdma_half > 0 ? 2 * b->rdma_half : 64));
    if (!b->rdma)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for %lld staging bytes", what, (long long)stage_bytes);
    return 0;
}

static void free_internode(ts_ep_buffer *b) {
    if (b->remote_meta)
        for (int r = 0; r < 2 * b->num_ranks; r++) free(b->remote_meta[r]);
    free(b->remote_meta);
    free(b->reqs);
    free(b->req_rank);
    /* a transfer abandoned at a timeout may still read it (see ep_internode.c) */
    if (!b->stage_pinned) ts__aligned_free(b->rdma);
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
    /* Normal mode: num_rdma_bytes is the internode staging (unused with one node; 0 = as
     * large as num_nvl_bytes). */
    if (num_rdma_bytes < 0 || num_rdma_bytes % 128 != 0 || num_rdma_bytes > (INT64_C(1) << 46))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_rdma_bytes %lld must be a non-negative multiple of 128",
                        what, (long long)num_rdma_bytes);
    if (low_latency_mode && (num_rdma_bytes <= 0 || num_rdma_bytes % 128 != 0 || num_rdma_bytes > (INT64_C(1) << 46)))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: low_latency_mode needs num_rdma_bytes (%lld) a positive multiple of 128; see "
                        "ts_ep_get_low_latency_rdma_size_hint", what, (long long)num_rdma_bytes);
    if (o.timeout_s < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: opts->timeout_s %g < 0", what, o.timeout_s);

    ts_ep_buffer *b = calloc(1, sizeof *b);
    if (!b) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the buffer", what);
    b->timeout_s = o.timeout_s > 0 ? o.timeout_s : ts__ep_default_timeout_s();
    b->num_nvl_bytes = num_nvl_bytes;
    /* the caller's communicator carries none of our messages: a nonblocking dup, polled */
    MPI_Request dup_req = MPI_REQUEST_NULL;
    if (MPI_Comm_idup(comm, &b->comm, &dup_req) != MPI_SUCCESS) {
        free(b);
        return ts__fail(TS_ERR_PEER, "%s: MPI_Comm_idup failed", what);
    }
    const ts_status dst = ts__ep_coll_wait(&dup_req, comm, b->timeout_s, what);
    if (dst != TS_OK) {
        /* b stays allocated: MPI may still complete the dup into b->comm */
        return dst;
    }
    MPI_Comm_rank(b->comm, &b->rank);
    MPI_Comm_size(b->comm, &b->num_ranks);
    MPI_Comm_set_errhandler(b->comm, MPI_ERRORS_RETURN);
    MPI_Comm node = MPI_COMM_NULL;
    ts_status nst = split_nodes(b, &o, &node, what);
    if (nst != TS_OK) {
        MPI_Comm_free(&b->comm);
        free(b);
        return nst;
    }
    b->data_off = ts__align(TS__EP_CTRL_BYTES + 2 * TS__EP_META_SLOT_BYTES, 4096);
    b->num_rdma_bytes = low_latency_mode ? num_rdma_bytes : 0; /* the LL area in the segment */
    b->ll_off = ts__align(b->data_off + num_nvl_bytes, 4096);
    b->seg_bytes = b->ll_off + b->num_rdma_bytes;
    if (low_latency_mode && ts__ep_ll_init(b) != TS_OK) {
        MPI_Comm_free(&node);
        MPI_Comm_free(&b->comm);
        free(b);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the low-latency state", what);
    }

    b->peer = calloc((size_t)b->num_ranks, sizeof *b->peer);
    b->rank_book = calloc((size_t)b->num_ranks, TS__EP_RANK_BOOK_BYTES);
    int err = !b->peer || !b->rank_book
                  ? ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for %d peers", what, b->num_ranks)
                  : TS_OK;
    if (b->num_nodes > 1) { /* collective inside: every rank calls it */
        /* an LL buffer's num_rdma_bytes is its LL area: normal-mode staging then follows nvl */
        const int e = alloc_internode(b, num_rdma_bytes > 0 && !low_latency_mode ? num_rdma_bytes : num_nvl_bytes, what);
        if (!err) err = e;
    }
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
    /* Segments are shared inside a node only: round 1 runs on the node communicator (local
     * index i = global rank node_first + i). */
    const ts_status gst = ts__ep_coll_allgather(&mine, (int)sizeof mine, all, node, b->timeout_s, what);
    MPI_Comm_free(&node);
    if (gst != TS_OK) err = gst; /* a peer never came: round 3 would wait for it again */
    else if (!all && !err) err = TS_ERR_OUT_OF_MEMORY;
    int bad_rank = -1;
    for (int i = 0; all && i < b->ranks_per_node && bad_rank < 0; i++)
        if (!all[i].name[0]) bad_rank = b->node_first + i;
    /* Round 2: map every node-local peer's segment. */
    if (!err && bad_rank < 0) {
        for (int i = 0; i < b->ranks_per_node && !err; i++) {
            const int r = b->node_first + i;
            if (r == b->rank) continue;
            int pfd = shm_open(all[i].name, O_RDWR, 0);
            if (pfd < 0) {
                err = TS_ERR_IO;
                ts__fail(TS_ERR_IO, "%s: cannot open rank %d's segment %s: %s", what, r, all[i].name, strerror(errno));
                break;
            }
            void *p = mmap(NULL, (size_t)all[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
            close(pfd);
            if (p == MAP_FAILED) {
                err = TS_ERR_OUT_OF_MEMORY;
                ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: cannot map rank %d's segment: %s", what, r, strerror(errno));
            } else {
                b->peer[r] = p;
            }
            if (all[i].size != b->seg_bytes) {
                /* Mapped with the peer's size; unmap_all uses ours, so reject mismatches. */
                munmap(p, (size_t)all[i].size);
                b->peer[r] = NULL;
                err = TS_ERR_INVALID_ARGUMENT;
                ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_nvl_bytes differs: rank %d has %lld, rank %d has %lld",
                         what, r, (long long)(all[i].size - b->data_off), b->rank, (long long)num_nvl_bytes);
            }
        }
    }
    /* Round 3: agreement; afterwards every peer has mapped every segment (or given up), so
     * the names can go: nothing is left in /dev/shm even if a rank is killed later. */
    int agg[2] = {err ? 1 : 0, err ? -b->rank : -b->num_ranks};
    if (err != TS_ERR_TIMEOUT) {
        const ts_status ast = ts__ep_coll_allreduce(agg, 2, MPI_INT, MPI_MAX, b->comm, b->timeout_s, what);
        if (ast != TS_OK) err = ast;
    }
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
        free_internode(b);
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
    ts__ep_async_stop(buf);
    /* LL sends to other nodes read this rank's segment until they complete */
    if (buf->ll && !ts__ep_ll_quiesce(buf) && buf->peer) buf->peer[buf->rank] = NULL; /* kept mapped */
    unmap_all(buf);
    free_internode(buf);
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

ts_status ts_ep_buffer_get_ranks_per_node(const ts_ep_buffer *buf, int32_t *ranks_per_node) {
    if (!buf || !ranks_per_node)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_buffer_get_ranks_per_node: %s is NULL", buf ? "ranks_per_node" : "buf");
    *ranks_per_node = buf->ranks_per_node;
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
        TS__EP_SAME(expand_align, TS_ERR_INVALID_ARGUMENT)
#undef TS__EP_SAME
    }
    return TS_OK;
}
