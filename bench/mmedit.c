/* bench_mmedit: duet's train_step against MMEditing 0.16.1's own
 * `model.train_step` (issues 19 and 22), the same model on both sides, in
 * one run: duet's built by its registry from duet's config under configs/
 * (with the overrides below), MMEditing's by MMEditing's registry from
 * MMEditing's own config (bench/mmedit_step.py, in the venv of
 * scripts/make-mmedit-venv.sh), each with the optimizers its config builds,
 * on synthetic tensors of the config's shapes, float32, the same threads per
 * process, warm-up steps before the timed ones. Repetitions interleave the
 * two sides (duet first in odd repetitions, MMEditing first in even ones)
 * and the result is the median of the within-repetition ratios, so that a
 * shared machine's load moves both sides alike.
 *
 *   bench_mmedit [--models srgan_tiny,srgan_full,deepfillv1,edsr_tiny,rdn_tiny,
 *                 pconv_tiny,realesrgan_tiny]
 *                [--nproc 1,2]
 *                [--reps 3] [--threads T] [--steps N] [--warmup N]
 *                [--timeout S] [--python PYTHON] [--script PATH]
 *                [--duet-only] [--config NAME=PATH] [--omp-wait passive|active]
 *                [--log FILE]
 *
 * Models (bench/mmedit_step.py says what MMEditing's side runs):
 *   srgan_full  configs/srgan_x4c64b16_div2k.cfg, pretrained = "random" (random
 *               VGG19 on both sides); batch 16 of 128x128
 *   srgan_tiny  configs/srgan_x4_tiny.cfg at 128x128 gt (MMEditing's
 *               ModifiedVGG takes 128 only): model.discriminator.input_size
 *               = 128, data.train.gt_patch_size = 128; batch 8
 *   deepfillv1  configs/deepfillv1_256x256_8x2_places.cfg; batch 2 of 256x256
 *               with bbox masks from the config's LoadMask (duet's
 *               random_bbox on duet's side, MMEditing's on its side). One
 *               train_step is a discriminator step, every disc_step-th also
 *               the generator's: the timed steps are whole cycles.
 *   edsr_tiny   configs/edsr_x4_tiny.cfg (BasicRestorer, EDSR 32x4);
 *   rdn_tiny    configs/rdn_x4_tiny.cfg (RDN 16, 3 blocks of 4 layers);
 *               both batch 8 of 64x64 gt
 *   realesrgan_tiny configs/realesrgan_x4_tiny.cfg (RealESRGAN's GAN stage:
 *               RRDBNet 16x2, U-Net discriminator 16, the tiny VGG) from its
 *               own init (load_from = ""); batch 8 of 64x64 gt
 *   pconv_tiny  configs/pconv_tiny.cfg (PConvInpaintor, 4 layers, L1 and TV
 *               losses); batch 4 of 64x64 with bbox masks (32x32 at most,
 *               margin 8) in place of its irregular ones
 * --config NAME=PATH runs model NAME from another duet config (same
 * overrides). --python: the MMEditing venv's python (default
 * $DUET_MMEDIT_PYTHON, else ~/.cache/duet/mmedit-venv/bin/python).
 * --duet-only: duet's side alone (the smoke test's mode). --omp-wait sets
 * OMP_WAIT_POLICY for both sides (default passive: on a shared machine
 * libgomp's spinning threads wait for partners the scheduler took away, and
 * 2 threads can run several times slower than 1; "active" is libgomp's
 * default spinning). The children's stderr goes to --log (default
 * /tmp/bench_mmedit.<pid>.log), named in the header. Exit status 1 when a
 * run of either side failed (its row shows nan).
 *
 * The duet side runs as `mpirun -n P --bind-to none bench_mmedit --worker
 * ...`; on P processes both sides wrap each trainable part in its own DDP
 * (duet's DistributedDataParallelWrapper over MPI; MMEditing's parts in
 * mmcv's MMDistributedDataParallel over gloo, as its wrapper does on CUDA).
 * Every child runs under `timeout`. Run from the source folder (the configs
 * and the script are found relative to it). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/harness.h"
#include "duet/duet.h"

typedef struct mm_model {
    const char *name, *config;
    const char *sets[6];  /* duet_config_set overrides, NULL-terminated */
    bool inpaint;         /* batch keys gt_img/mask/masked_img/mask_bbox, else lq/gt */
    int steps, warmup;    /* defaults (steps: whole disc_step cycles for inpainting) */
} mm_model;

static mm_model MODELS[] = {
    {"srgan_tiny", "configs/srgan_x4_tiny.cfg",
     {"model.discriminator.input_size=128", "data.train.gt_patch_size=128",
      "model.perceptual_loss.pretrained=\"random\"", NULL},
     false, 5, 1},
    {"srgan_full", "configs/srgan_x4c64b16_div2k.cfg",
     {"model.perceptual_loss.pretrained=\"random\"", NULL}, false, 2, 1},
    {"deepfillv1", "configs/deepfillv1_256x256_8x2_places.cfg", {NULL}, true, 5, 1},
    {"edsr_tiny", "configs/edsr_x4_tiny.cfg", {NULL}, false, 5, 1},
    {"rdn_tiny", "configs/rdn_x4_tiny.cfg", {NULL}, false, 5, 1},
    {"realesrgan_tiny", "configs/realesrgan_x4_tiny.cfg", {"load_from=\"\"", NULL}, false, 5, 1},
    {"pconv_tiny", "configs/pconv_tiny.cfg",
     {"data.train.pipeline.[1].mask_mode=\"bbox\"",
      "data.train.pipeline.[1].mask_config.max_bbox_shape=32",
      "data.train.pipeline.[1].mask_config.max_bbox_delta=8",
      "data.train.pipeline.[1].mask_config.min_margin=8", NULL},
     true, 5, 1},
};
#define NMODELS (sizeof MODELS / sizeof MODELS[0])

static mm_model *find_model(const char *name) {
    for (size_t i = 0; i < NMODELS; i++)
        if (strcmp(MODELS[i].name, name) == 0) return &MODELS[i];
    return NULL;
}

/* An int or an [h, w] pair at path (MMEditing writes both). */
static void get_pair(duet_config *c, const char *path, int64_t out[2]) {
    if (!duet_config_has(c, path)) return;
    if (duet_config_kind(c, path) == DUET_CONFIG_INT) {
        BENCH_CHECK(duet_config_get_int(c, path, &out[0]));
        out[1] = out[0];
        return;
    }
    size_t n = 0;
    BENCH_CHECK(duet_config_get_int_array(c, path, out, 2, &n));
    if (n != 2) duet_comm_abort(NULL, 1, "%s: expected an int or [h, w]", path);
}

/* The bbox options of the LoadMask step of data.train.pipeline. */
static duet_mask_opts train_mask_opts(duet_config *cfg) {
    duet_mask_opts o = duet_mask_options_default(DUET_MASK_BBOX);
    size_t n = 0;
    BENCH_CHECK(duet_config_length(cfg, "data.train.pipeline", &n));
    for (size_t i = 0; i < n; i++) {
        char key[96];
        const char *type = NULL, *mode = NULL;
        snprintf(key, sizeof key, "data.train.pipeline.[%zu].type", i);
        BENCH_CHECK(duet_config_get_string(cfg, key, &type));
        if (strcmp(type, "LoadMask") != 0) continue;
        snprintf(key, sizeof key, "data.train.pipeline.[%zu].mask_mode", i);
        BENCH_CHECK(duet_config_get_string(cfg, key, &mode));
        if (strcmp(mode, "bbox") != 0)
            duet_comm_abort(NULL, 1, "%s: bench_mmedit draws bbox masks only, not %s",
                            duet_config_name(cfg), mode);
        duet_config *mc = NULL;
        snprintf(key, sizeof key, "data.train.pipeline.[%zu].mask_config", i);
        BENCH_CHECK(duet_config_sub(cfg, key, &mc));
        int64_t shape[2] = {o.img_h, o.img_w};
        get_pair(mc, "img_shape", shape);
        o.img_h = shape[0];
        o.img_w = shape[1];
        get_pair(mc, "max_bbox_shape", o.max_bbox);
        get_pair(mc, "max_bbox_delta", o.max_delta);
        get_pair(mc, "min_margin", o.min_margin);
        duet_config_destroy(mc);
        BENCH_CHECK(duet_mask_options_check(&o));
        return o;
    }
    duet_comm_abort(NULL, 1, "%s: data.train.pipeline has no LoadMask step",
                    duet_config_name(cfg));
    return o;
}

/* The SR batch: gt uniform in [0, 1), lq its scale x scale box average. */
static void sr_batch(duet_config *cfg, int64_t b, duet_rng *rng, duet_batch *batch) {
    int64_t c = 0, scale = 0;
    BENCH_CHECK(duet_config_get_int(cfg, "data.train.gt_patch_size", &c));
    BENCH_CHECK(duet_config_get_int(cfg, "data.train.scale", &scale));
    int64_t l = c / scale;
    duet_tensor *gt = NULL, *lq = NULL;
    BENCH_CHECK(duet_tensor_create4(b, 3, c, c, &gt));
    BENCH_CHECK(duet_tensor_create4(b, 3, l, l, &lq));
    for (int64_t i = 0; i < gt->numel; i++) gt->data[i] = duet_rng_uniform(rng);
    for (int64_t n = 0; n < b * 3; n++)
        for (int64_t y = 0; y < l; y++)
            for (int64_t x = 0; x < l; x++) {
                float s = 0;
                for (int64_t dy = 0; dy < scale; dy++)
                    for (int64_t dx = 0; dx < scale; dx++)
                        s += gt->data[(n * c + y * scale + dy) * c + x * scale + dx];
                lq->data[(n * l + y) * l + x] = s / (float)(scale * scale);
            }
    BENCH_CHECK(duet_batch_add_tensor(batch, "lq", lq));
    BENCH_CHECK(duet_batch_add_tensor(batch, "gt", gt));
    duet_tensor_release(gt);
    duet_tensor_release(lq);
}

/* The inpainting batch: gt uniform in [-1, 1), a random bbox mask per
 * sample (1 in the hole), masked_img = gt * (1 - mask), mask_bbox (b, 4). */
static void inpaint_batch(duet_config *cfg, int64_t b, duet_rng *rng, duet_batch *batch) {
    duet_mask_opts mo = train_mask_opts(cfg);
    int64_t h = mo.img_h, w = mo.img_w;
    duet_tensor *gt = NULL, *mask = NULL, *masked = NULL, *bbox = NULL;
    BENCH_CHECK(duet_tensor_create4(b, 3, h, w, &gt));
    BENCH_CHECK(duet_tensor_create4(b, 1, h, w, &mask));
    BENCH_CHECK(duet_tensor_create4(b, 3, h, w, &masked));
    int64_t bshape[2] = {b, 4};
    BENCH_CHECK(duet_tensor_create(2, bshape, &bbox));
    for (int64_t i = 0; i < gt->numel; i++) gt->data[i] = 2.0f * duet_rng_uniform(rng) - 1.0f;
    for (int64_t n = 0; n < b; n++) {
        int64_t box[4];
        duet_mask_random_bbox(&mo, rng, box);
        for (int k = 0; k < 4; k++) bbox->data[n * 4 + k] = (float)box[k];
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                bool hole = y >= box[0] && y < box[0] + box[2] && x >= box[1] &&
                            x < box[1] + box[3];
                mask->data[(n * h + y) * w + x] = hole ? 1.0f : 0.0f;
                for (int64_t ch = 0; ch < 3; ch++) {
                    int64_t i = ((n * 3 + ch) * h + y) * w + x;
                    masked->data[i] = hole ? 0.0f : gt->data[i];
                }
            }
    }
    BENCH_CHECK(duet_batch_add_tensor(batch, "gt_img", gt));
    BENCH_CHECK(duet_batch_add_tensor(batch, "mask", mask));
    BENCH_CHECK(duet_batch_add_tensor(batch, "masked_img", masked));
    BENCH_CHECK(duet_batch_add_tensor(batch, "mask_bbox", bbox));
    duet_tensor_release(gt);
    duet_tensor_release(mask);
    duet_tensor_release(masked);
    duet_tensor_release(bbox);
}

/* One process of the duet side: prints {"step_s", "peak_rss_mb", ...}
 * (maxima over ranks) on rank 0. */
static int worker(const mm_model *mm, const char *config, int steps, int warmup) {
    duet_comm *comm = NULL;
    BENCH_CHECK(duet_comm_world(&comm));
    duet_kernel_opts ko = duet_kernel_opts_default(); /* DUET_NUM_THREADS, DUET_CONV */
    BENCH_CHECK(duet_comm_local_size(comm, &ko.local_ranks));
    BENCH_CHECK(duet_kernels_configure(&ko));
    int rank = duet_comm_rank(comm), world = duet_comm_size(comm);
    duet_log_set_rank(rank, false);
    duet_log_set_level(DUET_LOG_ERROR); /* no random-VGG warning */

    duet_config *cfg = NULL;
    BENCH_CHECK(duet_config_load(config, &cfg));
    for (int i = 0; mm->sets[i] != NULL; i++) BENCH_CHECK(duet_config_set(cfg, mm->sets[i]));
    duet_rng rng = duet_rng_make(0, 0);
    duet_model *model = NULL;
    BENCH_CHECK(duet_build_model(cfg, "model", &rng, &model));
    duet_wrapper *w = NULL;
    if (duet_config_has(cfg, "wrapper")) {
        BENCH_CHECK(duet_build_wrapper(cfg, "wrapper", model, comm, &w));
    } else { /* as duet train does: the default DistributedDataParallelWrapper */
        duet_wrapper_opts wo = duet_wrapper_opts_default();
        const char *devices[] = {"cpu"};
        BENCH_CHECK(duet_wrapper_create(model, comm, devices, 1, &wo, &w));
    }
    duet_optimizer_set *opts = NULL;
    BENCH_CHECK(duet_build_optimizers(cfg, "optimizers", duet_wrapper_model(w), &opts));

    int64_t b = 0;
    /* MMEditing's data.train_dataloader.samples_per_gpu (a converted
     * config), else duet's data.samples_per_gpu. */
    if (duet_config_has(cfg, "data.train_dataloader.samples_per_gpu"))
        BENCH_CHECK(duet_config_get_int(cfg, "data.train_dataloader.samples_per_gpu", &b));
    else
        BENCH_CHECK(duet_config_get_int(cfg, "data.samples_per_gpu", &b));
    duet_rng drng = duet_rng_make(1, (uint64_t)rank);
    duet_batch batch = {0};
    if (mm->inpaint) inpaint_batch(cfg, b, &drng, &batch);
    else sr_batch(cfg, b, &drng, &batch);

    duet_log_vars lv;
    for (int i = 0; i < warmup; i++) BENCH_CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    BENCH_CHECK(duet_comm_barrier(comm));
    double t0 = duet_time_now(), c0 = bench_cpu_seconds();
    for (int i = 0; i < steps; i++) BENCH_CHECK(duet_wrapper_train_step(w, &batch, opts, &lv));
    double cpu = (bench_cpu_seconds() - c0) / steps;
    BENCH_CHECK(duet_comm_barrier(comm));
    double res[2] = {(duet_time_now() - t0) / steps, bench_peak_rss_mb()};
    BENCH_CHECK(duet_comm_allreduce(comm, res, 2, DUET_DTYPE_F64, DUET_REDUCE_MAX));
    BENCH_CHECK(duet_comm_allreduce(comm, &cpu, 1, DUET_DTYPE_F64, DUET_REDUCE_SUM));
    duet_kernels_info ki;
    BENCH_CHECK(duet_kernels_info_get(&ki));
    if (rank == 0) {
        printf("{\"framework\": \"duet\", \"model\": \"%s\", \"nproc\": %d, \"batch\": %" PRId64
               ", \"step_s\": %.6f, \"images_per_s\": %.4f, \"peak_rss_mb\": %.1f, "
               "\"cpu_s_per_step\": %.4f, \"threads\": %d, \"kernels\": \"%s\"}\n",
               mm->name, world, b * world, res[0], (double)(b * world) / res[0], res[1], cpu,
               ki.num_threads, ki.summary);
        fflush(stdout);
    }
    duet_batch_clear(&batch);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
    duet_config_destroy(cfg);
    duet_comm_destroy(comm);
    duet_comm_finalize();
    return 0;
}

static double max_finite(const double *v, int n) {
    double m = NAN;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]) && !(m >= v[i])) m = v[i];
    return m;
}

static void print_load(const char *when) {
    double l[3];
    if (getloadavg(l, 3) == 3) printf("load %s: %.2f %.2f %.2f\n", when, l[0], l[1], l[2]);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_mmedit [--models srgan_tiny,srgan_full,deepfillv1] "
                    "[--nproc 1,2] [--reps R] [--threads T] [--steps N] [--warmup N] "
                    "[--timeout S] [--python PYTHON] [--script PATH] [--duet-only] "
                    "[--config NAME=PATH] [--omp-wait passive|active] [--log FILE]\n");
}

int main(int argc, char **argv) {
    const char *model_list = "srgan_tiny,srgan_full,deepfillv1", *nproc_list = "1,2";
    const char *script = "bench/mmedit_step.py", *config = NULL, *wait = "passive";
    char log[4096];
    snprintf(log, sizeof log, "/tmp/bench_mmedit.%d.log", (int)getpid());
    char default_python[4096];
    snprintf(default_python, sizeof default_python, "%s/.cache/duet/mmedit-venv/bin/python",
             getenv("HOME") ? getenv("HOME") : "/root");
    const char *python = getenv("DUET_MMEDIT_PYTHON") ? getenv("DUET_MMEDIT_PYTHON")
                                                      : default_python;
    int steps = 0, warmup = -1, threads = 0, timeout_s = 1800, reps = 3;
    bool is_worker = false, mmedit = true, failed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--worker") == 0) is_worker = true;
        else if (strcmp(a, "--duet-only") == 0) mmedit = false;
        else if (strcmp(a, "--models") == 0 && v) model_list = argv[++i];
        else if (strcmp(a, "--nproc") == 0 && v) nproc_list = argv[++i];
        else if (strcmp(a, "--reps") == 0 && v) reps = atoi(argv[++i]);
        else if (strcmp(a, "--steps") == 0 && v) steps = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(argv[++i]);
        else if (strcmp(a, "--threads") == 0 && v) threads = atoi(argv[++i]);
        else if (strcmp(a, "--timeout") == 0 && v) timeout_s = atoi(argv[++i]);
        else if (strcmp(a, "--python") == 0 && v) python = argv[++i];
        else if (strcmp(a, "--script") == 0 && v) script = argv[++i];
        else if (strcmp(a, "--config") == 0 && v) config = argv[++i];
        else if (strcmp(a, "--log") == 0 && v) snprintf(log, sizeof log, "%s", argv[++i]);
        else if (strcmp(a, "--omp-wait") == 0 && v &&
                 (strcmp(v, "passive") == 0 || strcmp(v, "active") == 0))
            wait = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (reps < 1 || reps > 64) {
        fprintf(stderr, "bench_mmedit: --reps %d is not in 1..64\n", reps);
        return 2;
    }
    /* --config NAME=PATH: model NAME from PATH. */
    if (config != NULL) {
        const char *eq = strchr(config, '=');
        char name[64];
        if (eq == NULL || (size_t)(eq - config) >= sizeof name) {
            fprintf(stderr, "bench_mmedit: --config %s: expected NAME=PATH\n", config);
            return 2;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - config), config);
        mm_model *m = find_model(name);
        if (m == NULL) {
            fprintf(stderr, "bench_mmedit: --config %s: no model %s\n", config, name);
            return 2;
        }
        m->config = eq + 1;
    }
    if (is_worker) {
        const mm_model *m = find_model(model_list);
        if (m == NULL) {
            usage();
            return 2;
        }
        return worker(m, m->config, steps > 0 ? steps : m->steps,
                      warmup >= 0 ? warmup : m->warmup);
    }

    char mlist[256];
    snprintf(mlist, sizeof mlist, "%s", model_list);
    for (char *save = NULL, *m = strtok_r(mlist, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        const mm_model *mm = find_model(m);
        if (mm == NULL) {
            fprintf(stderr, "bench_mmedit: unknown model %s (srgan_tiny, srgan_full, edsr_tiny, rdn_tiny, pconv_tiny, realesrgan_tiny, "
                            "deepfillv1)\n", m);
            return 2;
        }
        if (access(mm->config, R_OK) != 0) {
            fprintf(stderr, "bench_mmedit: %s: duet's config %s not found (run from the "
                            "source folder, or --config %s=PATH)\n", m, mm->config, m);
            return 1;
        }
    }
    if (mmedit && (access(script, R_OK) != 0 || access(python, X_OK) != 0)) {
        fprintf(stderr, "bench_mmedit: %s or %s not found: run from the source folder with "
                        "the venv of scripts/make-mmedit-venv.sh (--python), or --duet-only\n",
                script, python);
        return 1;
    }
    char self[4096];
    if (!bench_self_path(self, sizeof self)) return 1;
    const char *root = getuid() == 0 ? " --allow-run-as-root" : "";

    duet_kernel_opts kdef = duet_kernel_opts_default();
    if (duet_kernels_configure(&kdef) != DUET_OK) return 1;
    duet_kernels_info ki;
    if (duet_kernels_info_get(&ki) != DUET_OK) return 1;
    char mm_info[2048] = "?";
    if (mmedit) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "timeout -k 5 300 '%s' '%s' --info 2>/dev/null", python, script);
        if (!bench_run_json(cmd, mm_info, sizeof mm_info)) snprintf(mm_info, sizeof mm_info, "?");
    }
    printf("train_step of duet (its config) against MMEditing 0.16.1's own (its config), "
           "float32, synthetic batches of the configs' shapes; %d repetition(s), the two "
           "sides interleaved\n", reps);
    printf("duet:    %s\n", ki.summary);
    if (mmedit) printf("MMEditing: %s\n", mm_info);
    printf("OpenMP wait policy (both sides): %s; children's stderr: %s\n", wait, log);
    print_load("at start");
    printf("\n| model | procs x threads | batch | duet img/s | MMEditing img/s | ratio "
           "(median; runs) | CPU ratio (median; runs) | duet MB | MMEditing MB |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    snprintf(mlist, sizeof mlist, "%s", model_list);
    for (char *save = NULL, *m = strtok_r(mlist, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        const mm_model *mm = find_model(m);
        int nsteps = steps > 0 ? steps : mm->steps, nwarm = warmup >= 0 ? warmup : mm->warmup;
        char plist[64];
        snprintf(plist, sizeof plist, "%s", nproc_list);
        for (char *s2 = NULL, *p = strtok_r(plist, ",", &s2); p; p = strtok_r(NULL, ",", &s2)) {
            int np = atoi(p);
            if (np < 1) {
                fprintf(stderr, "bench_mmedit: --nproc %s: not a process count\n", p);
                return 2;
            }
            int thr = threads > 0 ? threads : duet_default_num_threads(np);
            double di[64], mi[64], dm[64], mmb[64], ratio[64], cratio[64];
            int batch = 0;
            char dcmd[16384], mcmd[16384];
            snprintf(dcmd, sizeof dcmd,
                     "OMP_WAIT_POLICY=%s DUET_NUM_THREADS=%d OMP_NUM_THREADS=%d timeout -k 10 "
                     "%d mpirun -n %d --oversubscribe --bind-to none%s '%s' --worker --models "
                     "%s --config %s='%s' --steps %d --warmup %d 2>>'%s'",
                     wait, thr, thr, timeout_s, np, root, self, m, m, mm->config, nsteps, nwarm,
                     log);
            snprintf(mcmd, sizeof mcmd,
                     "OMP_WAIT_POLICY=%s OMP_NUM_THREADS=%d timeout -k 10 %d '%s' '%s' --model "
                     "%s --nproc %d --threads %d --steps %d --warmup %d 2>>'%s'",
                     wait, thr, timeout_s, python, script, m, np, thr, nsteps, nwarm, log);
            for (int r = 0; r < reps; r++) {
                char dline[2048] = "", mline[2048] = "";
                bool dok = false, mok = false;
                for (int side = 0; side < 2; side++) {
                    bool duet_now = (side == 0) == (r % 2 == 0);
                    if (duet_now) dok = bench_run_json(dcmd, dline, sizeof dline);
                    else if (mmedit) mok = bench_run_json(mcmd, mline, sizeof mline);
                }
                di[r] = dok ? bench_json_num(dline, "images_per_s") : NAN;
                dm[r] = dok ? bench_json_num(dline, "peak_rss_mb") : NAN;
                mi[r] = mok ? bench_json_num(mline, "images_per_s") : NAN;
                mmb[r] = mok ? bench_json_num(mline, "peak_rss_mb") : NAN;
                ratio[r] = di[r] / mi[r];
                /* CPU seconds per step, all processes: MMEditing's over duet's. */
                cratio[r] = (mok ? bench_json_num(mline, "cpu_s_per_step") : NAN) /
                            (dok ? bench_json_num(dline, "cpu_s_per_step") : NAN);
                if (dok) batch = (int)bench_json_num(dline, "batch");
                /* Each repetition's raw numbers, on stderr. */
                fprintf(stderr, "bench_mmedit: %s %d x %d rep %d: duet step %.3f s, CPU %.3f "
                        "s/step, %.0f MB; MMEditing step %.3f s, CPU %.3f s/step, %.0f MB\n",
                        m, np, thr, r + 1, dok ? bench_json_num(dline, "step_s") : NAN,
                        dok ? bench_json_num(dline, "cpu_s_per_step") : NAN, dm[r],
                        mok ? bench_json_num(mline, "step_s") : NAN,
                        mok ? bench_json_num(mline, "cpu_s_per_step") : NAN, mmb[r]);
                if (!dok) fprintf(stderr, "bench_mmedit: duet's side failed (%s): %s\n", log, dcmd);
                if (mmedit && !mok)
                    fprintf(stderr, "bench_mmedit: MMEditing's side failed (%s): %s\n", log, mcmd);
                if (!dok || (mmedit && !mok)) failed = true;
            }
            char runs[512] = "", cruns[512] = "";
            for (int r = 0; r < reps; r++) {
                size_t len = strlen(runs);
                snprintf(runs + len, sizeof runs - len, "%s%.2f", r ? ", " : "", ratio[r]);
                len = strlen(cruns);
                snprintf(cruns + len, sizeof cruns - len, "%s%.2f", r ? ", " : "", cratio[r]);
            }
            if (mmedit)
                printf("| %s | %d x %d | %d | %.3g | %.3g | **%.2fx** (%s) | %.2fx (%s) | %.0f | "
                       "%.0f |\n",
                       m, np, thr, batch, bench_median(di, reps), bench_median(mi, reps),
                       bench_median(ratio, reps), runs, bench_median(cratio, reps), cruns,
                       max_finite(dm, reps), max_finite(mmb, reps));
            else
                printf("| %s | %d x %d | %d | %.3g | - | - | - | %.0f | - |\n", m, np, thr,
                       batch, bench_median(di, reps), max_finite(dm, reps));
            fflush(stdout);
        }
    }
    print_load("at end");
    printf("\nimg/s: medians over the repetitions; ratio = duet img/s / MMEditing img/s "
           "within each repetition (> 1: duet is faster); CPU ratio = MMEditing's CPU seconds "
           "(user + system, all processes) per timed step / duet's (> 1: duet needs less; "
           "the measure that a loaded machine moves least); MB = peak resident memory of the "
           "largest process (largest over the repetitions).\n");
    return failed ? 1 : 0;
}
