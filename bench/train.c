/* bench_train: MMEditing's SRGAN training step (generator step with pixel,
 * perceptual and GAN losses, then the discriminator step on real and fake)
 * in duet, next to the same model in PyTorch (bench/train_torch.py: one DDP
 * per network over gloo, broadcast_buffers false), on 1 and 2 processes, for
 * the tiny config and MMEditing's full-size one, in one run. Prints images/s,
 * the ratio duet / PyTorch, the peak resident memory per process, the GEMM
 * GF/s duet reached per core as a share of this machine's single-core sgemm
 * peak (measured here first), and which kernels ran on each side.
 *
 *   bench_train [--models tiny,full] [--nproc 1,2] [--threads T] [--steps N]
 *               [--warmup N] [--timeout S] [--torch-script bench/train_torch.py]
 *               [--torch-python PYTHON] [--omp-wait passive|active] [--no-torch]
 *               [--bf16]
 *
 * --bf16: duet's mixed precision (bf16 GEMM inputs, float32 sums and
 * state: mixed_precision = "bf16") against PyTorch's
 * torch.autocast("cpu", dtype=torch.bfloat16) around the forwards and
 * losses; both keep float32 weights and optimizer state.
 * --threads: threads per process for both duet and PyTorch (default: the
 * cores this process may use divided by the process count). The environment
 * is left as found (OPENBLAS_CORETYPE and all). --omp-wait sets
 * OMP_WAIT_POLICY for both sides' children: on a machine that other work
 * keeps busy, OpenMP threads that spin at each region's barrier (libgomp's
 * default) wait for a partner the scheduler took off its core, and 2 threads
 * can run 10x slower than 1; passive threads sleep instead. Every child runs under
 * `timeout` (default 1200 s), so the bench never hangs: a child that times
 * out shows as "timeout".
 *
 * It launches itself under `mpirun -n P` (as `bench_train --worker ...`)
 * and PyTorch through --torch-python (default $DUET_PYTHON, else
 * /usr/bin/python3: Debian's torch 1.13; the venv of
 * scripts/make-torch2-venv.sh has the current PyTorch), so run it from the
 * source folder (make bench does) or give --torch-script.
 *
 * DUET_BENCH_DDP_TRACE=PATH (a worker's environment): each rank writes its
 * DDPs' Chrome traces (duet_wrapper_opts.trace_path: "%s" the part, else
 * PATH.part.rankN), with every bucket's allreduce and the end-of-backward
 * wait. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/harness.h"
#include "common/srgan_models.h"
#include "duet/duet.h"

/* The counters of every DDP the wrapper made, summed (bytes handed to
 * allreduce, synchronised backwards, time waited after the backward). */
static duet_ddp_stats wrapper_ddp_stats(duet_wrapper *w) {
    duet_ddp_stats t = {0};
    for (size_t i = 0; i < duet_wrapper_num_ddps(w); i++) {
        duet_ddp_stats s = duet_ddp_get_stats(duet_wrapper_ddp(w, i));
        t.syncs += s.syncs;
        t.bytes += s.bytes;
        t.comm_s += s.comm_s;
        t.exposed_s += s.exposed_s;
        t.backward_s += s.backward_s;
    }
    return t;
}

/* One process of the duet side: prints {"step_s", "peak_rss_mb", the GEMM
 * work and the DDPs' allreduce MB, count and exposed wait per step} (maxima
 * over ranks) on rank 0. */
static int worker(const bench_model *bm, int steps, int warmup, bool bf16) {
    duet_comm *comm = NULL;
    BENCH_CHECK(duet_comm_world(&comm));
    if (bf16) { /* every GEMM on bf16 inputs, float32 sums (the config's mixed_precision) */
        duet_kernel_opts ko = duet_kernel_opts_default();
        ko.bf16 = true;
        BENCH_CHECK(duet_comm_local_size(comm, &ko.local_ranks));
        BENCH_CHECK(duet_kernels_configure(&ko));
    }
    int rank = duet_comm_rank(comm), world = duet_comm_size(comm);
    duet_log_set_rank(rank, false);
    duet_log_set_level(DUET_LOG_ERROR); /* no random-VGG warning */

    duet_srgan_opts so = bench_srgan_opts(bm);
    duet_rng rng = duet_rng_make(0, 0);
    duet_model *model = NULL;
    BENCH_CHECK(duet_srgan_create(&so, &rng, &model));
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    /* Each DDP's Chrome trace (forward, backward, bucket allreduces, the
     * end-of-backward wait "finalize"), for where a step's time goes. */
    const char *trace = getenv("DUET_BENCH_DDP_TRACE");
    if (trace != NULL && trace[0] != '\0') wo.trace_path = trace;
    const char *devices[] = {"cpu"};
    duet_wrapper *w = NULL;
    BENCH_CHECK(duet_wrapper_create(model, comm, devices, 1, &wo, &w));
    duet_optimizer_set *opts = NULL;
    BENCH_CHECK(duet_optimizer_set_create(&opts));
    duet_adam_opts adam = duet_adam_opts_default();
    adam.lr = 1e-4f;
    BENCH_CHECK(duet_optimizer_set_add_adam(opts, duet_wrapper_model(w), "generator", &adam));
    BENCH_CHECK(duet_optimizer_set_add_adam(opts, duet_wrapper_model(w), "discriminator", &adam));

    /* A fixed synthetic batch per rank: gt uniform, lq its 4x4 box average. */
    duet_rng drng = duet_rng_make(1, (uint64_t)rank);
    int64_t b = bm->batch, c = bm->crop, l = bm->crop / 4;
    duet_tensor *gt = NULL, *lq = NULL;
    BENCH_CHECK(duet_tensor_create4(b, 3, c, c, &gt));
    BENCH_CHECK(duet_tensor_create4(b, 3, l, l, &lq));
    for (int64_t i = 0; i < gt->numel; i++) gt->data[i] = duet_rng_uniform(&drng);
    for (int64_t n = 0; n < b * 3; n++)
        for (int64_t y = 0; y < l; y++)
            for (int64_t x = 0; x < l; x++) {
                float s = 0;
                for (int dy = 0; dy < 4; dy++)
                    for (int dx = 0; dx < 4; dx++)
                        s += gt->data[(n * c + y * 4 + dy) * c + x * 4 + dx];
                lq->data[(n * l + y) * l + x] = s / 16;
            }
    duet_batch batch = {0};
    BENCH_CHECK(duet_batch_add_tensor(&batch, "lq", lq));
    BENCH_CHECK(duet_batch_add_tensor(&batch, "gt", gt));

    duet_log_vars lv;
    for (int i = 0; i < warmup; i++) BENCH_CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    BENCH_CHECK(duet_comm_barrier(comm));
    /* Gradient traffic and exposed communication per step, from the DDPs'
     * own counters (the timed steps only). */
    duet_ddp_stats s0 = wrapper_ddp_stats(w);
    uint64_t f0 = duet_kernels_gemm_flops();
    double t0 = duet_time_now();
    for (int i = 0; i < steps; i++) BENCH_CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    BENCH_CHECK(duet_comm_barrier(comm));
    double dt = (duet_time_now() - t0) / steps;
    duet_ddp_stats s1 = wrapper_ddp_stats(w);
    double res[6] = {dt, bench_peak_rss_mb(), (double)(duet_kernels_gemm_flops() - f0) / steps,
                     (double)(s1.bytes - s0.bytes) / steps, (double)(s1.syncs - s0.syncs) / steps,
                     (s1.exposed_s - s0.exposed_s) / steps};
    BENCH_CHECK(duet_comm_allreduce(comm, res, 6, DUET_DTYPE_F64, DUET_REDUCE_MAX));
    duet_kernels_info ki;
    BENCH_CHECK(duet_kernels_info_get(&ki));
    if (rank == 0) {
        printf("{\"framework\": \"duet\", \"model\": \"%s\", \"nproc\": %d, \"batch\": %" PRId64
               ", \"step_s\": %.6f, \"images_per_s\": %.4f, \"peak_rss_mb\": %.1f, "
               "\"gemm_gflop_per_step\": %.3f, \"allreduce_mb_per_step\": %.3f, "
               "\"allreduces_per_step\": %.1f, \"exposed_comm_s\": %.6f, \"threads\": %d, "
               "\"kernels\": \"%s\"}\n",
               bm->name, world, b * world, res[0], (double)(b * world) / res[0], res[1],
               res[2] / 1e9, res[3] / (1 << 20), res[4], res[5], ki.num_threads, ki.summary);
        fflush(stdout);
    }
    duet_batch_clear(&batch);
    duet_tensor_release(gt);
    duet_tensor_release(lq);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
    duet_comm_destroy(comm);
    duet_comm_finalize();
    return 0;
}

/* Single-core sgemm peak of this machine through duet's GEMM: the best of
 * a few n = 1024 and 2048 products, in GF/s. */
static double measure_peak(void) {
    duet_kernel_opts ko = duet_kernel_opts_default();
    ko.num_threads = 1;
    if (duet_kernels_configure(&ko) != DUET_OK) return 0.0 / 0.0;
    double best = 0;
    for (int64_t n = 1024; n <= 2048; n *= 2) {
        float *a = duet_aligned_alloc(sizeof(float) * (size_t)(n * n));
        float *b = duet_aligned_alloc(sizeof(float) * (size_t)(n * n));
        float *c = duet_aligned_alloc(sizeof(float) * (size_t)(n * n));
        if (a == NULL || b == NULL || c == NULL) return 0.0 / 0.0;
        for (int64_t i = 0; i < n * n; i++) a[i] = b[i] = c[i] = (float)(i % 7) * 0.125f;
        for (int r = 0; r < 4; r++) {
            double t0 = duet_time_now();
            duet_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double gf = 2.0 * (double)n * (double)n * (double)n / (duet_time_now() - t0) / 1e9;
            if (gf > best) best = gf;
        }
        duet_aligned_free(a);
        duet_aligned_free(b);
        duet_aligned_free(c);
    }
    return best;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_train [--models tiny,full] [--nproc 1,2] [--threads T] "
                    "[--steps N] [--warmup N] [--timeout S] [--torch-script PATH] "
                    "[--torch-python PYTHON] [--omp-wait passive|active] [--no-torch] "
                    "[--bf16]\n");
}

int main(int argc, char **argv) {
    const char *model_list = "tiny,full", *nproc_list = "1,2", *script = NULL, *wait = NULL;
    const char *python = getenv("DUET_PYTHON") ? getenv("DUET_PYTHON") : "/usr/bin/python3";
    int steps = 0, warmup = 1, threads = 0, timeout_s = 1200;
    bool is_worker = false, torch = true, bf16 = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--worker") == 0) is_worker = true;
        else if (strcmp(a, "--no-torch") == 0) torch = false;
        else if (strcmp(a, "--bf16") == 0) bf16 = true;
        else if (strcmp(a, "--models") == 0 && v) model_list = argv[++i];
        else if (strcmp(a, "--nproc") == 0 && v) nproc_list = argv[++i];
        else if (strcmp(a, "--steps") == 0 && v) steps = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(argv[++i]);
        else if (strcmp(a, "--threads") == 0 && v) threads = atoi(argv[++i]);
        else if (strcmp(a, "--timeout") == 0 && v) timeout_s = atoi(argv[++i]);
        else if (strcmp(a, "--torch-script") == 0 && v) script = argv[++i];
        else if (strcmp(a, "--torch-python") == 0 && v) python = argv[++i];
        else if (strcmp(a, "--omp-wait") == 0 && v &&
                 (strcmp(v, "passive") == 0 || strcmp(v, "active") == 0))
            wait = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (is_worker) {
        const bench_model *bm = bench_find_model(model_list);
        if (bm == NULL) {
            usage();
            return 2;
        }
        return worker(bm, steps > 0 ? steps : 3, warmup, bf16);
    }

    if (script == NULL) script = "bench/train_torch.py";
    if (torch && access(script, R_OK) != 0) {
        fprintf(stderr, "bench_train: %s not found: run from the source folder, give "
                        "--torch-script, or --no-torch\n", script);
        return 1;
    }
    char self[4096];
    if (!bench_self_path(self, sizeof self)) return 1;
    const char *root = getuid() == 0 ? " --allow-run-as-root" : "";

    double peak = measure_peak();
    /* Back to the defaults, so that the line below names them rather than
     * the peak's 1 thread (each row says the threads it ran). */
    duet_kernel_opts kdef = duet_kernel_opts_default();
    if (duet_kernels_configure(&kdef) != DUET_OK) return 1;
    duet_kernels_info ki;
    if (duet_kernels_info_get(&ki) != DUET_OK) return 1;
    char torch_info[1024] = "?";
    if (torch) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "timeout -k 5 120 '%s' '%s' --info", python, script);
        if (!bench_run_json(cmd, torch_info, sizeof torch_info)) snprintf(torch_info, sizeof torch_info, "?");
    }
    printf("SRGAN training step, synthetic data, %d warm-up step(s), then the mean of the timed "
           "ones; %s\n", warmup, bf16 ? "bf16: duet's mixed_precision = \"bf16\" against "
           "torch.autocast(\"cpu\", dtype=torch.bfloat16)" : "float32");
    printf("duet:    %s (as found: OPENBLAS_CORETYPE=%s)\n", ki.summary,
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    if (torch) printf("PyTorch: %s\n", torch_info);
    const char *wait_found = getenv("OMP_WAIT_POLICY");
    printf("OpenMP wait policy: %s\n",
           wait ? wait : wait_found ? wait_found : "(unset: libgomp spins, then sleeps)");
    char wait_env[64] = "";
    if (wait != NULL) snprintf(wait_env, sizeof wait_env, "OMP_WAIT_POLICY=%s ", wait);
    printf("single-core sgemm peak (duet's GEMM, n = 1024..2048): %.1f GF/s\n\n", peak);
    printf("%-5s %5s %4s %6s | %10s %10s %7s | %8s %8s | %10s %6s\n", "model", "procs",
           "thr", "batch", "duet img/s", "torch img/s", "ratio", "duet MB", "torch MB",
           "GF/s/core", "peak");
    printf("------------------------+--------------------------------+-------------------+"
           "------------------\n");
    fflush(stdout);
    char mlist[256];
    snprintf(mlist, sizeof mlist, "%s", model_list);
    for (char *save = NULL, *m = strtok_r(mlist, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        const bench_model *bm = bench_find_model(m);
        if (bm == NULL) {
            fprintf(stderr, "bench_train: unknown model %s (tiny, full)\n", m);
            return 2;
        }
        int nsteps = steps > 0 ? steps : (strcmp(m, "full") == 0 ? 2 : 5);
        char plist[64];
        snprintf(plist, sizeof plist, "%s", nproc_list);
        for (char *s2 = NULL, *p = strtok_r(plist, ",", &s2); p; p = strtok_r(NULL, ",", &s2)) {
            int np = atoi(p);
            int thr = threads > 0 ? threads : duet_default_num_threads(np);
            char cmd[8192], dline[1024] = "", tline[1024] = "";
            snprintf(cmd, sizeof cmd,
                     "%sDUET_NUM_THREADS=%d timeout -k 10 %d mpirun -n %d --oversubscribe "
                     "--bind-to none%s '%s' --worker --models %s --steps %d --warmup %d%s",
                     wait_env, thr, timeout_s, np, root, self, m, nsteps, warmup,
                     bf16 ? " --bf16" : "");
            bool dok = bench_run_json(cmd, dline, sizeof dline);
            bool tok = false;
            if (torch) {
                snprintf(cmd, sizeof cmd,
                         "%sOMP_NUM_THREADS=%d timeout -k 10 %d '%s' '%s' --model %s --nproc %d "
                         "--threads %d --steps %d --warmup %d%s",
                         wait_env, thr, timeout_s, python, script, m, np, thr, nsteps, warmup,
                         bf16 ? " --bf16" : "");
                tok = bench_run_json(cmd, tline, sizeof tline);
                if (!tok) { /* gloo's rendezvous has failed now and then: once more */
                    fprintf(stderr, "bench_train: the PyTorch side failed; running it again\n");
                    tok = bench_run_json(cmd, tline, sizeof tline);
                }
            }
            double di = dok ? bench_json_num(dline, "images_per_s") : 0.0 / 0.0;
            double ti = tok ? bench_json_num(tline, "images_per_s") : 0.0 / 0.0;
            char ts[32] = "-", rs[32] = "-", tm[32] = "-", ds[32] = "failed", dm[32] = "-";
            char gs[32] = "-", ps[32] = "-";
            if (torch && !tok) snprintf(ts, sizeof ts, "failed");
            if (dok) {
                snprintf(ds, sizeof ds, "%.2f", di);
                snprintf(dm, sizeof dm, "%.0f", bench_json_num(dline, "peak_rss_mb"));
                /* GEMM work of one process per second, per core it ran on. */
                double gf = bench_json_num(dline, "gemm_gflop_per_step") / bench_json_num(dline, "step_s") /
                            bench_json_num(dline, "threads");
                snprintf(gs, sizeof gs, "%.1f", gf);
                snprintf(ps, sizeof ps, "%.0f%%", 100.0 * gf / peak);
            }
            if (tok) snprintf(ts, sizeof ts, "%.2f", ti);
            if (tok) snprintf(tm, sizeof tm, "%.0f", bench_json_num(tline, "peak_rss_mb"));
            if (dok && tok) snprintf(rs, sizeof rs, "%.2fx", di / ti);
            printf("%-5s %5d %4d %6d | %10s %10s %7s | %8s %8s | %10s %6s\n", m, np, thr,
                   bm->batch * np, ds, ts, rs, dm, tm, gs, ps);
            fflush(stdout);
        }
    }
    printf("\nratio = duet images/s / PyTorch images/s (> 1: duet is faster); MB = peak "
           "resident memory of the largest process; GF/s/core = duet's GEMM work per second "
           "per core, and its share of the single-core peak.\n");
    return 0;
}
