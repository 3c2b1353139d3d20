/* The parts of V2's ElasticBuffer that tilestack does not build (docs/ep.md, "V2
 * ElasticBuffer"): Engram remote fetch / write, pipeline-parallel send / recv and the AGRS
 * all-gather sessions. They exist so that a port of V2 code links and gets a clear answer. */
#include "ep/ep_elastic_internal.h"

static ts_status unsupported(const char *what, const char *part) {
    return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s is not supported by tilestack's ElasticBuffer (docs/ep.md)", what, part);
}

ts_status ts_ep_elastic_engram_write(ts_ep_elastic_buffer *buf, const ts_tensor *storage, const ts_tensor *sf) {
    (void)buf, (void)storage, (void)sf;
    return unsupported("ts_ep_elastic_engram_write", "Engram storage");
}

ts_status ts_ep_elastic_engram_fetch(ts_ep_elastic_buffer *buf, const ts_tensor *indices, int32_t num_qps,
                                     ts_tensor *data, ts_tensor *sf) {
    (void)buf, (void)indices, (void)num_qps, (void)data, (void)sf;
    return unsupported("ts_ep_elastic_engram_fetch", "Engram remote fetch");
}

ts_status ts_ep_elastic_pp_set_config(ts_ep_elastic_buffer *buf, int64_t num_max_tensor_bytes,
                                      int64_t num_max_inflight_tensors) {
    (void)buf, (void)num_max_tensor_bytes, (void)num_max_inflight_tensors;
    return unsupported("ts_ep_elastic_pp_set_config", "pipeline-parallel send/recv");
}

ts_status ts_ep_elastic_pp_send(ts_ep_elastic_buffer *buf, const ts_tensor *t, int32_t dst_rank, int32_t num_sms) {
    (void)buf, (void)t, (void)dst_rank, (void)num_sms;
    return unsupported("ts_ep_elastic_pp_send", "pipeline-parallel send/recv");
}

ts_status ts_ep_elastic_pp_recv(ts_ep_elastic_buffer *buf, ts_tensor *t, int32_t src_rank, int32_t num_sms) {
    (void)buf, (void)t, (void)src_rank, (void)num_sms;
    return unsupported("ts_ep_elastic_pp_recv", "pipeline-parallel send/recv");
}

ts_status ts_ep_elastic_agrs_set_config(ts_ep_elastic_buffer *buf, int64_t num_max_session_bytes,
                                        int64_t num_max_all_gathers_per_session) {
    (void)buf, (void)num_max_session_bytes, (void)num_max_all_gathers_per_session;
    return unsupported("ts_ep_elastic_agrs_set_config", "the AGRS all-gather session");
}

ts_status ts_ep_elastic_create_agrs_session(ts_ep_elastic_buffer *buf) {
    (void)buf;
    return unsupported("ts_ep_elastic_create_agrs_session", "the AGRS all-gather session");
}

ts_status ts_ep_elastic_destroy_agrs_session(ts_ep_elastic_buffer *buf) {
    (void)buf;
    return unsupported("ts_ep_elastic_destroy_agrs_session", "the AGRS all-gather session");
}

ts_status ts_ep_elastic_all_gather(ts_ep_elastic_buffer *buf, const ts_tensor *t, ts_tensor *gathered) {
    (void)buf, (void)t, (void)gathered;
    return unsupported("ts_ep_elastic_all_gather", "the AGRS all-gather session");
}
