/* bench_train: MMEditing's SRGAN training step (generator step with pixel,
 * perceptual and GAN losses, then the discriminator step on real and fake)
 * in duet, next to the same model in PyTorch (bench/train_torch.py: one DDP
 * per network over gloo, broadcast_buffers false, 1 torch thread per
 * process), on 1 and 2 processes, for the tiny config and MMEditing's
 * full-size one. Prints images/s, the ratio duet / PyTorch and the peak
 * resident memory per process.
 *
 *   bench_train [--models tiny,full] [--nproc 1,2] [--steps N] [--warmup N]
 *               [--torch-script bench/train_torch.py] [--no-torch]
 *
 * It launches itself under `mpirun -n P` (as `bench_train --worker ...`)
 * and PyTorch through /usr/bin/python3 (DUET_PYTHON overrides), so run it
 * from the source folder (make bench does) or give --torch-script. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "duet/duet.h"

typedef struct bench_model {
    const char *name;
    int mid, blocks, dmid, crop, batch; /* batch: per process */
    int ncfg;
    int cfg[24];                        /* perceptual VGG, 0 = max pool */
    int layer;                          /* perceptual feature layer */
} bench_model;

static const bench_model models[] = {
    {"tiny", 32, 4, 16, 64, 8, 8, {16, 16, 0, 32, 32, 0, 64, 64}, 12},
    /* MMEditing's srgan_x4c64b16: vgg19 features up to conv5_4 (layer 34). */
    {"full", 64, 16, 64, 128, 16, 21,
     {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512,
      0}, 34},
};

static const bench_model *find_model(const char *name) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

#define CHECK(expr)                                                                   \
    do {                                                                              \
        int rc_ = (expr);                                                             \
        if (rc_ != DUET_OK)                                                           \
            duet_comm_abort(NULL, 1, "%s: %s", #expr, duet_last_error());             \
    } while (0)

/* One process of the duet side: prints {"step_s", "peak_rss_mb"} (maxima
 * over ranks) on rank 0. */
static int worker(const bench_model *bm, int steps, int warmup) {
    duet_comm *comm = NULL;
    CHECK(duet_comm_world(&comm));
    int rank = duet_comm_rank(comm), world = duet_comm_size(comm);
    duet_log_set_rank(rank, false);
    duet_log_set_level(DUET_LOG_ERROR); /* no random-VGG warning */

    duet_srgan_opts so = duet_srgan_opts_default();
    so.generator.mid_channels = bm->mid;
    so.generator.num_blocks = bm->blocks;
    so.discriminator.mid_channels = bm->dmid;
    so.discriminator.input_size = bm->crop;
    so.perceptual_loss.ncfg = bm->ncfg;
    memcpy(so.perceptual_loss.cfg, bm->cfg, sizeof bm->cfg);
    so.perceptual_loss.nlayer_weights = 1;
    so.perceptual_loss.layer_ids[0] = bm->layer;
    so.perceptual_loss.layer_weights[0] = 1.0f;
    duet_rng rng = duet_rng_make(0, 0);
    duet_model *model = NULL;
    CHECK(duet_srgan_create(&model, &so, &rng));
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    const char *devices[] = {"cpu"};
    duet_wrapper *w = NULL;
    CHECK(duet_wrapper_create(&w, model, comm, devices, 1, &wo));
    duet_optimizer_set *opts = NULL;
    CHECK(duet_optimizer_set_create(&opts));
    duet_adam_opts adam = duet_adam_opts_default();
    adam.lr = 1e-4f;
    CHECK(duet_optimizer_set_add_adam(opts, duet_wrapper_model(w), "generator", adam));
    CHECK(duet_optimizer_set_add_adam(opts, duet_wrapper_model(w), "discriminator", adam));

    /* A fixed synthetic batch per rank: gt uniform, lq its 4x4 box average. */
    duet_rng drng = duet_rng_make(1, (uint64_t)rank);
    int64_t b = bm->batch, c = bm->crop, l = bm->crop / 4;
    duet_tensor *gt = NULL, *lq = NULL;
    CHECK(duet_tensor_create4(&gt, b, 3, c, c));
    CHECK(duet_tensor_create4(&lq, b, 3, l, l));
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
    CHECK(duet_batch_add_tensor(&batch, "lq", lq));
    CHECK(duet_batch_add_tensor(&batch, "gt", gt));

    duet_log_vars lv;
    for (int i = 0; i < warmup; i++) CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    CHECK(duet_comm_barrier(comm));
    double t0 = duet_time_now();
    for (int i = 0; i < steps; i++) CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    CHECK(duet_comm_barrier(comm));
    double res[2] = {(duet_time_now() - t0) / steps, peak_rss_mb()};
    CHECK(duet_comm_allreduce(comm, res, 2, DUET_DTYPE_F64, DUET_REDUCE_MAX));
    if (rank == 0) {
        printf("{\"framework\": \"duet\", \"model\": \"%s\", \"nproc\": %d, \"batch\": %" PRId64
               ", \"step_s\": %.6f, \"images_per_s\": %.4f, \"peak_rss_mb\": %.1f}\n",
               bm->name, world, b * world, res[0], (double)(b * world) / res[0], res[1]);
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

/* Runs a command and keeps the last line that starts with '{'. */
static bool run_json(const char *cmd, char *line, size_t size) {
    FILE *p = popen(cmd, "r");
    if (p == NULL) return false;
    char buf[1024];
    bool found = false;
    while (fgets(buf, sizeof buf, p) != NULL)
        if (buf[0] == '{') {
            snprintf(line, size, "%s", buf);
            found = true;
        }
    int st = pclose(p);
    return found && st == 0;
}

/* The number after "key": in a one-line JSON object; NAN when absent. */
static double json_num(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *s = strstr(line, pat);
    return s != NULL ? strtod(s + strlen(pat), NULL) : 0.0 / 0.0;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_train [--models tiny,full] [--nproc 1,2] [--steps N] "
                    "[--warmup N] [--torch-script PATH] [--no-torch]\n");
}

int main(int argc, char **argv) {
    const char *model_list = "tiny,full", *nproc_list = "1,2", *script = NULL;
    int steps = 0, warmup = 1;
    bool is_worker = false, torch = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--worker") == 0) is_worker = true;
        else if (strcmp(a, "--no-torch") == 0) torch = false;
        else if (strcmp(a, "--models") == 0 && v) model_list = argv[++i];
        else if (strcmp(a, "--nproc") == 0 && v) nproc_list = argv[++i];
        else if (strcmp(a, "--steps") == 0 && v) steps = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(argv[++i]);
        else if (strcmp(a, "--torch-script") == 0 && v) script = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (is_worker) {
        const bench_model *bm = find_model(model_list);
        if (bm == NULL) {
            usage();
            return 2;
        }
        return worker(bm, steps > 0 ? steps : 3, warmup);
    }

    if (script == NULL) script = "bench/train_torch.py";
    if (torch && access(script, R_OK) != 0) {
        fprintf(stderr, "bench_train: %s not found: run from the source folder, give "
                        "--torch-script, or --no-torch\n", script);
        return 1;
    }
    const char *python = getenv("DUET_PYTHON") ? getenv("DUET_PYTHON") : "/usr/bin/python3";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = '\0';
    const char *root = getuid() == 0 ? " --allow-run-as-root" : "";

    printf("SRGAN training step, synthetic data, 1 BLAS/torch thread per process "
           "(%d warm-up steps, then the mean of the timed ones)\n\n", warmup);
    printf("%-5s %5s %6s | %10s %10s %7s | %10s %10s\n", "model", "procs", "batch",
           "duet img/s", "torch img/s", "ratio", "duet MB", "torch MB");
    printf("-------------------+--------------------------------+----------------------\n");
    fflush(stdout);
    char mlist[256];
    snprintf(mlist, sizeof mlist, "%s", model_list);
    for (char *save = NULL, *m = strtok_r(mlist, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        const bench_model *bm = find_model(m);
        if (bm == NULL) {
            fprintf(stderr, "bench_train: unknown model %s (tiny, full)\n", m);
            return 2;
        }
        int nsteps = steps > 0 ? steps : (strcmp(m, "full") == 0 ? 2 : 5);
        char plist[64];
        snprintf(plist, sizeof plist, "%s", nproc_list);
        for (char *s2 = NULL, *p = strtok_r(plist, ",", &s2); p; p = strtok_r(NULL, ",", &s2)) {
            int np = atoi(p);
            char cmd[8192], dline[1024] = "", tline[1024] = "";
            snprintf(cmd, sizeof cmd,
                     "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 mpirun -n %d --oversubscribe%s "
                     "'%s' --worker --models %s --steps %d --warmup %d",
                     np, root, self, m, nsteps, warmup);
            bool dok = run_json(cmd, dline, sizeof dline);
            bool tok = false;
            if (torch) {
                snprintf(cmd, sizeof cmd,
                         "OMP_NUM_THREADS=1 '%s' '%s' --model %s --nproc %d --steps %d "
                         "--warmup %d",
                         python, script, m, np, nsteps, warmup);
                tok = run_json(cmd, tline, sizeof tline);
            }
            double di = dok ? json_num(dline, "images_per_s") : 0.0 / 0.0;
            double ti = tok ? json_num(tline, "images_per_s") : 0.0 / 0.0;
            char ts[32] = "-", rs[32] = "-", tm[32] = "-", ds[32] = "failed", dm[32] = "-";
            if (dok) snprintf(ds, sizeof ds, "%.2f", di);
            if (dok) snprintf(dm, sizeof dm, "%.0f", json_num(dline, "peak_rss_mb"));
            if (tok) snprintf(ts, sizeof ts, "%.2f", ti);
            if (tok) snprintf(tm, sizeof tm, "%.0f", json_num(tline, "peak_rss_mb"));
            if (dok && tok) snprintf(rs, sizeof rs, "%.2fx", di / ti);
            printf("%-5s %5d %6d | %10s %10s %7s | %10s %10s\n", m, np, bm->batch * np, ds, ts,
                   rs, dm, tm);
            fflush(stdout);
        }
    }
    printf("\nratio = duet images/s / PyTorch images/s (> 1: duet is faster); MB = peak "
           "resident memory of the largest process.\n");
    return 0;
}
