/* `tilestack demo`: the decode runner (docs/demo.md). R = 1 runs in this process; R > 1
 * re-executes this binary under mpirun, and each rank comes back here in rank mode. */
#include "cli.h"
#include "demo.h"
#include "bench.h"
#include "core/atomic_file.h"

#include <stdlib.h>
#include <string.h>

/* One run (in-process or one rank): model, probes, measurement or sweep, report. */
static int run(ts__demo_opts *o, const ts__demo_comm *c, double t_start) {
    const bool root = c->rank == 0;
    ts_status st = ts_set_num_threads(o->threads);
    if (st != TS_OK) {
        if (root) fprintf(stderr, "tilestack demo: --threads %d: %s\n", o->threads, ts_last_error());
        return 2;
    }
    if (o->check) return ts__demo_check(c, o);

    ts_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (!o->weights_path && !o->model_dir) {
        st = ts__demo_config(o, &cfg);
        if (st != TS_OK) {
            if (root) fprintf(stderr, "tilestack demo: %s\n", ts_last_error());
            return 1;
        }
    }
    /* the machine's limits for one rank, probed on every rank at once so the bandwidth is the
     * share a rank gets while the others run */
    ts__demo_barrier(c);
    const ts__machine *mach = ts__probe_machine(o->threads, true);
    ts__demo_barrier(c);

    if (root) {
        const char *from = o->model_dir ? o->model_dir : o->weights_path;
        printf("%s %s on %d rank%s (%s weights)...\n", from ? "loading" : "creating",
               from ? "the model" : cfg.name, c->size, c->size == 1 ? "" : "s",
               from ? from : "random, deterministic");
        fflush(stdout);
    }
    const double t0 = ts__now_s();
    ts_model *m = NULL;
    st = ts__demo_model_create(c, &cfg, o->weights_path, o->model_dir, o->batch, o->unfused,
                               o->timeout_s, &m);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
    st = ts__demo_agree(c, st, msg, sizeof msg);
    if (st != TS_OK) {
        if (root) fprintf(stderr, "tilestack demo: cannot create the model: %s\n", msg);
        ts_model_free(m);
        return 1;
    }
    const double create_s = ts__now_s() - t0;
    cfg = *ts_model_get_config(m);
    if (o->save_weights_path) {
        st = ts_model_save_weights(m, o->save_weights_path);
        if (st != TS_OK) fprintf(stderr, "tilestack demo: --save-weights: %s\n", ts_last_error());
        else printf("wrote %s (%s); run it with --weights %s\n", o->save_weights_path, cfg.name,
                    o->save_weights_path);
        ts_model_free(m);
        return st == TS_OK ? 0 : 1;
    }
    if (root) {
        printf("model ready in %.1f s\n\n", create_s);
        ts__demo_print_config(stdout, &cfg, o, c->size, o->threads, mach);
        fflush(stdout);
    }
    if (o->topk > cfg.vocab_size) { /* a --weights file's vocabulary is known only now */
        if (root) fprintf(stderr, "tilestack demo: --sampling topk:%lld exceeds %s's vocabulary "
                          "of %lld\n", (long long)o->topk, cfg.name, (long long)cfg.vocab_size);
        ts_model_free(m);
        return 2;
    }
    /* written to a temporary file and renamed at the end: a failed run leaves no half file */
    ts__atomic_file json_file = {0};
    FILE *json = NULL;
    if (root && o->json_path) {
        if (ts__atomic_open(&json_file, o->json_path) != TS_OK) {
            fprintf(stderr, "tilestack demo: --json: %s\n", ts_last_error());
            ts_model_free(m);
            return 1;
        }
        json = json_file.f;
    }
    if (json) {
        fputs("{\"config\":", json);
        ts__demo_json_config(json, &cfg, o, c->size, o->threads, mach);
    }
    int rc = 0;
    if (o->sweep) {
        rc = ts__demo_sweep(c, m, o, &cfg, mach, json);
    } else {
        ts__demo_result r;
        st = ts__demo_measure(c, m, o, o->batch, o->context, o->warmup, o->steps, &r);
        if (st != TS_OK) {
            if (root) fprintf(stderr, "tilestack demo: %s\n", ts_last_error());
            rc = 1;
        } else if (root) {
            ts__demo_print_result(stdout, &cfg, &r, mach);
            if (json) {
                fputs(",\"result\":", json);
                ts__demo_json_result(json, &r, mach);
            }
        }
        ts__demo_result_free(&r);
    }
    if (json && rc != 0) {
        ts__atomic_abort(&json_file);
    } else if (json) {
        fputs("}\n", json);
        if (ts__atomic_commit(&json_file) != TS_OK) {
            fprintf(stderr, "tilestack demo: --json: %s\n", ts_last_error());
            rc = 1;
        }
    }
    ts_model_free(m);
    if (root) {
        if (rc == 0 && !o->sweep)
            printf("\nMore: --sweep [--plot FILE.svg] (TPS@TPOT), --check (against the float64 "
                   "reference), --help.\n");
        printf("demo took %.1f s (model creation %.1f s)\n", ts__now_s() - t_start, create_s);
    }
    return rc;
}

static int rank_mode(ts__demo_opts *o, int argc, char **argv) {
    ts__demo_comm c;
    ts_status st = ts__demo_comm_init(&c, &argc, &argv, o->timeout_s);
    if (st != TS_OK) {
        fprintf(stderr, "tilestack demo: %s\n", ts_last_error());
        return 1;
    }
    const int rc = run(o, &c, ts__now_s());
    ts__demo_comm_finalize(&c);
    return rc;
}

int ts__cmd_demo(int argc, char **argv) {
    const double t_start = ts__now_s();
    /* rank mode comes from the launcher's token, never from an option a user could type */
    const bool is_rank = ts__demo_take_rank_token(&argc, argv);
    ts__demo_opts o;
    char err[512];
    const int prc = ts__demo_parse(argc, argv, &o, err, sizeof err);
    if (prc == 1) {
        ts__demo_usage(stdout);
        return 0;
    }
    if (prc == 2 || prc == 3) { /* 3: an output path that cannot be written (exit 1) */
        fprintf(stderr, "tilestack demo: %s\n", err);
        return prc == 2 ? 2 : 1;
    }
    if (o.selftest) return ts__demo_selftest();
    ts__demo_apply_defaults(&o);
    o.rank_mode = is_rank;
    if (o.rank_mode) return rank_mode(&o, argc, argv);

    char mpirun[4096];
    const bool have_mpirun = ts__demo_find_program("mpirun", mpirun, sizeof mpirun);
    if (o.save_weights_path && o.ranks > 1) {
        fprintf(stderr, "tilestack demo: --save-weights writes the whole model from one process: "
                "drop --ranks\n");
        return 2;
    }
    if (o.ranks == 0) {
        if (o.save_weights_path || o.model_dir) o.ranks = 1;
        else if (ts__demo_have_ep() && have_mpirun) o.ranks = 2;
        else {
            o.ranks = 1;
            printf("note: running R = 1 in this process (%s)\n",
                   !ts__demo_have_ep() ? "this build has no MPI / expert-parallel model"
                                       : "mpirun is not on PATH");
            fflush(stdout);
        }
    }
    if (o.ranks > 1 && !ts__demo_have_ep()) {
        fprintf(stderr, "tilestack demo: --ranks %d needs a build with MPI and the expert-parallel "
                "model (tilestack/model_ep.h); this one has neither: use --ranks 1\n", o.ranks);
        return 2;
    }
    if (o.threads == 0) {
        o.threads = ts__demo_cores() / o.ranks;
        if (o.threads < 1) o.threads = 1;
    }
    /* inconsistent options fail here, before any rank starts */
    ts_model_config cfg;
    if (o.check) {
        if (8 % o.ranks) {
            fprintf(stderr, "tilestack demo: --check runs dsv4-tiny and dsv32-tiny (8 experts): "
                    "--ranks %d does not divide them\n", o.ranks);
            return 2;
        }
    } else if (!o.weights_path && !o.model_dir) {
        ts_status st = ts__demo_config(&o, &cfg);
        if (st == TS_OK) st = ts_model_config_validate(&cfg, o.ranks);
        if (st == TS_OK && o.topk > cfg.vocab_size) {
            fprintf(stderr, "tilestack demo: --sampling topk:%lld exceeds %s's vocabulary of "
                    "%lld\n", (long long)o.topk, cfg.name, (long long)cfg.vocab_size);
            return 2;
        }
        if (st != TS_OK) {
            fprintf(stderr, "tilestack demo: %s\n", ts_last_error());
            return o.config_path ? 1 : 2;
        }
        if (!o.save_weights_path && o.context + o.warmup + o.steps > cfg.max_seq_len) {
            fprintf(stderr, "tilestack demo: --context %lld + --warmup %d + --steps %d = %lld "
                    "tokens exceed %s's max_seq_len %lld (the cache capacity per sequence)\n",
                    (long long)o.context, o.warmup, o.steps,
                    (long long)(o.context + o.warmup + o.steps), cfg.name,
                    (long long)cfg.max_seq_len);
            return 2;
        }
    }
    if (o.ranks > 1) return ts__demo_launch(&o, argc, argv);
    ts__demo_comm c = {.rank = 0, .size = 1, .mpi = false};
    return run(&o, &c, t_start);
}
