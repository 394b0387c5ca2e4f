/* The runner's private state and the helpers its files share
 * (src/runner/runner.c: setup and the training loop; build.c: data,
 * optimizers and schedules from the config; evaluate.c: validation, test and
 * infer). */
#ifndef DUET_TRAIN_RUNNER_INTERNAL_H
#define DUET_TRAIN_RUNNER_INTERNAL_H

#include "duet/comm.h"
#include "duet/data.h"
#include "duet/models.h"
#include "duet/train.h"
#include "duet/wrapper.h"
#include "export/export.h"
#include "outputs/logger.h"
#include "outputs/plot.h"

/* custom_hooks: MMEditing's ExponentialMovingAverageHook (ema.c; n 0: none),
 * with as many module_keys as the config gives, of any length. */
typedef struct duet__ema_hook {
    int n;
    char **keys;    /* [n], owned: "generator_ema" */
    bool *created;  /* [n]: the runner made the copy (not the model) */
    float momentum, momentum_nontrainable;
    int64_t interval, start_iter;
} duet__ema_hook;

typedef struct duet__run {
    duet_comm *comm; /* the job */
    int rank, world;
    bool quiet;      /* no stdout */
    duet_config *cfg;
    char *work_dir;  /* owned */
    /* Files the run reads that no checkpoint may replace: the config and
     * load_from (borrowed; NULL when none). */
    const char *read_files[2];
    uint64_t seed;
    duet_rng rng;    /* model init; saved in checkpoints */
    /* infer --tile: the generator's receptive radius, measured once. */
    int64_t tile, tile_pad; /* opts' */
    const char *infer_mask; /* infer: an inpaintor's hole (opts' mask) */
    int64_t tile_radius;
    bool tile_radius_known;

    duet_wrapper *wrapper;    /* training: owns the model */
    duet_model *model;        /* borrowed from the wrapper, or owned (test, infer) */
    duet_optimizer_set *opts; /* training only */
    duet_lr_schedule sched;

    duet_dataset *train_set, *val_set; /* owned */
    duet_loader *loader;               /* training */
    int64_t samples_per_gpu;
    int prefetch;
    int64_t max_pixels; /* decoded images: data.max_image_pixels / DUET_MAX_IMAGE_PIXELS */
    int lock_fd;        /* rank 0 while training: flock on WORK_DIR/duet.lock; else -1,
                           or DUET__LOCK_UNSUPPORTED (the file system has no locks) */

    /* Hooks: every N iterations (0 = never). */
    int64_t total_iters, log_interval, ckpt_interval, eval_interval;
    bool save_optimizer, save_image;
    int64_t max_keep_ckpts; /* checkpoint_config.max_keep_ckpts: keep the newest N iter_*
                               files (<= 0: all, mmcv's -1) */
    int64_t eval_num_images; /* rows of the evaluation grid */
    duet_test_cfg test_cfg;  /* crop_border etc. for the bicubic numbers */
    /* Translation models: the test direction (model.test_cfg.direction,
     * else train_cfg's, else a2b), which the grid's columns and the
     * metrics' target follow: b2a turns B into A. */
    bool eval_b2a;

    duet__logger *log; /* rank 0 while training; NULL elsewhere */
    /* log_config.hooks' TensorboardLoggerHook: its log_dir (borrowed from
     * the config; "" for MMEditing's default WORK_DIR/tf_logs), or NULL. */
    const char *tensorboard_dir;
    /* The evaluated set's key: "data.val", or "data.test" in duet test when
     * the config has one (MMEditing's tools/test.py). */
    const char *val_key;

    duet__ema_hook ema;

    /* --dry-run: each problem is kept (duet__run_problem) and the check
     * goes on, so that one run names them all. */
    bool collect;
    int nproblems;
    duet__str problems;

    int kernel_threads; /* threads per process of the kernels (duet__run_setup_kernels) */
} duet__run;

/* system.c: on rank 0, a warning when the machine's load already fills its
 * cores and the kernels' threads (more than one) would spin-wait on each
 * other without OMP_WAIT_POLICY. Called once, by a training run (the
 * short commands and --dry-run do not lose enough to it to say so). */
void duet__run_warn_busy(const duet__run *r);

/* rc as it is, or, while r->collect, DUET_OK after keeping rc's message
 * (duet_last_error()) as one of the run's problems. */
int duet__run_problem(duet__run *r, int rc);


/* ---- system.c ---- */
/* The config's num_threads and gemm keys into duet_kernels_configure (with
 * the ranks on this node), and the startup line naming what runs. */
int duet__run_setup_kernels(duet__run *r);

/* ---- out_paths.c: infer and test --out ---- */
/* "<dir>/<stem>.png" for input file `name` (any folder and extension
 * dropped). New string; NULL when out of memory. */
char *duet__output_path(const char *dir, const char *name);
/* Before anything is written: DUET_EINVAL naming the paths when out_dir is
 * one of input_dirs (ndirs folders whose images a run reads), when two of
 * the n inputs map to one output, or when an output path is a symlink, not
 * a regular file, or one of the inputs or of the nothers other files the
 * command reads (config, checkpoint, mask; NULL entries skipped). */
int duet__check_outputs(const char *out_dir, const char *const *inputs, size_t n,
                        const char *const *input_dirs, size_t ndirs,
                        const char *const *others, size_t nothers);
/* Sample `t` (n = 0) saved as duet__output_path(dir, name) (evaluate.c). */
int duet__save_tensor_png(const duet_tensor *t, const char *dir, const char *name);
/* A translation model's output in [-1, 1] as an image in [0, 1]: new
 * tensor (x + 1) / 2 (MMEditing's tensor2img(min_max=(-1, 1)); saving
 * clamps). duet test --out and duet infer write it so. */
int duet__from_signed(const duet_tensor *t, duet_tensor **out);
/* t (N, 3, H, W) from BGR to RGB in place when b's meta "channel_order" is
 * "bgr" (the inpainting data as MMEditing's configs load it), for the PNG
 * writer; anything else is left as it is. */
void duet__to_rgb_for_png(const duet_batch *b, duet_tensor *t);

/* ---- workdir.c: one run per work dir ---- */
/* Rank 0 before it writes anything there: takes an exclusive flock on
 * WORK_DIR/duet.lock for the run's lifetime (r->lock_fd) and writes its pid
 * and host into it. DUET_ESTATE naming the other run's pid and host when the
 * lock is held. */
int duet__workdir_lock(duet__run *r);
#define DUET__LOCK_UNSUPPORTED (-2)
/* Releases the lock (the file stays: removing it would race a new run). */
void duet__workdir_unlock(duet__run *r);
/* With the lock held: removes the temporary checkpoint files
 * ("<name>.safetensors.tmp.<pid>.<n>") a killed write left in the work dir.
 * Only regular files of that pattern, only in the work dir itself. */
int duet__workdir_clean_temps(duet__run *r);
/* Writes WORK_DIR/name anew: a temporary created exclusively (never through
 * a link left at a path), renamed over the name. */
int duet__workdir_write_file(const duet__run *r, const char *name, const char *text);
/* A work dir that is, contains or lies inside one of the config's data
 * folders (data.*.dataroot, data.*.*_folder, however deep) is refused
 * (DUET_ECONFIG naming both and the key's file and line): the run's
 * pictures would be read back as data. Links are resolved first. */
int duet__workdir_check_data(duet__run *r);

/* ---- helper.c ---- */

/* ---- build.c ---- */
/* seed, total_iters, the hook settings, lr_config and model.test_cfg. */
int duet__run_read_settings(duet__run *r);
/* MMEditing's `<group>.by_epoch`: true is refused (duet counts iterations),
 * naming the key and its line. */
int duet__run_check_by_epoch(duet_config *cfg, const char *group);
/* mmedit_keys.c: MMEditing's run-level keys (log_level, log_config.hooks,
 * and those without effect in duet, marked used and, with notes, named on
 * rank 0 with the reason). */
int duet__run_read_mmedit_keys(duet__run *r, bool notes);
/* evaluate.c: a forward over x (SR input, (C, H, W) or (1, C, H, W)) whose
 * activations would not fit in the memory this process may use is refused
 * before it starts (DUET_ENOMEM naming `what`, the size, the estimate and
 * the limit); forwards over 32 and 64 pixel squares measure the bytes per
 * input pixel. Inputs up to 512 x 512 pass unmeasured. */
int duet__check_forward_memory(duet__run *r, const duet_tensor *x, const char *what);
/* infer --tile (tile.c): the SR generator's output of x (1, C, H, W) made
 * tile by tile (tile x tile input pixels, `pad` pixels of context around
 * each; pad < 0: the receptive radius, measured), equal to the whole-image
 * forward when pad covers the receptive radius. A progress bar on a
 * terminal. */
int duet__tiled_forward(duet__run *r, duet_tensor *x, int64_t tile, int64_t pad,
                        const char *path, duet_tensor **out);
/* data.train (with_train) and data.val (need_val; else it is only marked
 * read) into datasets. */
int duet__run_build_data(duet__run *r, bool with_train, bool need_val);
/* The training loader, starting at `start` (a resumed sampler state). */
int duet__run_build_loader(duet__run *r, duet_sampler_state start);
/* data.max_image_pixels, overridden by DUET_MAX_IMAGE_PIXELS, into r->max_pixels. */
int duet__run_read_pixel_limit(duet__run *r);
/* model.test_cfg's crop_border and convert_to (for the bicubic numbers). */
int duet__run_read_test_cfg(duet__run *r);
/* Sets every optimizer's lr for iteration `iter` (0-based). */
void duet__run_apply_lr(duet__run *r, int64_t iter);

/* ---- ema.c: MMEditing's ExponentialMovingAverageHook ---- */
/* custom_hooks from the config (marking them read). */
int duet__run_read_ema(duet__run *r);
/* Frees what read_ema kept (ema.n 0 after). */
void duet__run_clear_ema(duet__run *r);
/* Gives the model each configured P_ema it lacks: a frozen copy of part P,
 * built from the config group model.P and loaded with P's state. Before
 * the wrapper, so that it is checkpointed with the model. */
int duet__run_add_ema(duet__run *r, duet_model *model);
/* The copies made by add_ema take P's state again (after the wrapper
 * broadcast P from rank 0; not on resume). */
int duet__run_ema_sync(duet__run *r);
/* after_train_iter at 0-based iteration `iter`. */
int duet__run_ema_after_iter(duet__run *r, int64_t iter);

/* ---- evaluate.c ---- */
typedef struct duet__eval_result {
    int64_t images;
    double psnr, ssim, psnr_bicubic, ssim_bicubic; /* 0 when not in test_cfg */
    duet_log_vars metrics, metrics_bicubic;         /* test_cfg's metrics only */
    duet_log_vars metrics_input; /* inpainting: the masked input against gt_img */
} duet__eval_result;
/* Each rank evaluates images rank, rank + world, ...; sums are reduced so
 * that every rank gets the means over all images. grid_path (the same on
 * every rank, or NULL on every rank): rank 0 writes a PNG of the first
 * eval_num_images images, whose rows the other ranks send it;
 * out_dir (may be NULL): every output saved as <out_dir>/<name>.png by its
 * rank; bicubic: also measure bicubic upscaling (super-resolution) or the
 * masked input itself (inpainting). */
int duet__run_evaluate(duet__run *r, const char *grid_path, const char *out_dir, bool bicubic,
                       duet__eval_result *res);

/* ---- runner_stop.c ---- */
/* dist.timeout (seconds, default 600; DUET_TIMEOUT in the environment
 * overrides it) onto r->comm, before any DDP dups it. */
int duet__run_set_timeout(duet__run *r);
/* SIGTERM / SIGINT / SIGUSR1 handlers for the training loop (and SIGPIPE
 * ignored): the first signal asks for a stop at the next iteration
 * boundary, a second one stops at once. */
void duet__stop_install(void);
void duet__stop_restore(void);
/* After iteration `iter`: every rank agrees on whether one failed
 * (local_rc; returns the lowest failing rank's status, on every rank) and
 * on whether one got a stop signal (*stop; never on the last iteration). */
int duet__run_boundary(duet__run *r, int64_t iter, int local_rc, bool *stop);
/* Collective: rank 0 writes the checkpoint of `iter`, every rank gets its
 * status (a failure is returned on every rank). */
int duet__run_checkpoint(duet__run *r, int64_t iter);
/* Prints the stop message on this rank; returns DUET_ESTOPPED. */
int duet__run_stopped(duet__run *r, int64_t iter, bool saved);

#endif
