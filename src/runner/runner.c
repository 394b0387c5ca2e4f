/* The iteration runner behind `duet train | test | infer`: setup from the
 * config (the registry builds the model, wrapper and optimizers), then
 * MMEditing's IterBasedRunner loop with its hooks: LR schedule, text /
 * JSON-lines logging, evaluation and checkpoints.
 *
 * Errors. Setup failures are agreed on (one allreduce per phase): the lowest
 * failing rank prints its message, every rank returns a status, and nobody
 * waits in a collective. In the loop, an error inside an iteration (a bad
 * image, a failed step) leaves the other ranks in a collective, so it prints
 * its message with the rank and aborts the job (duet_comm_abort); a stalled
 * rank ends the job the same way through the comm's watchdog (dist.timeout).
 * A non-finite loss is seen by every rank at once and ends the run cleanly.
 *
 * Iteration boundary (runner_stop.c). After every iteration the ranks agree,
 * in one small allreduce, on whether a rank failed outside a collective
 * (logging) and whether a rank got SIGTERM/SIGINT. A checkpoint is
 * collective: rank 0 writes it while every other rank waits for its status
 * (a wait the watchdog never cuts short), so no rank's error or abort path
 * can run while a checkpoint is being written: it finishes, or fails and
 * the previous one stays. On a stop signal, rank 0 writes a checkpoint and
 * every rank returns DUET_ESTOPPED (`duet` exits with DUET_EXIT_STOPPED). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/runner_ckpt.h"
#include "registry/registry_data.h"
#include "runner/runner_internal.h"

duet_runner_opts duet_runner_opts_default(void) {
    duet_runner_opts o;
    memset(&o, 0, sizeof o);
    o.tile_pad = -1; /* infer --tile: the measured receptive radius */
    return o;
}

/* ---- errors across ranks ---------------------------------------------------- */

static void print_error(int rc) {
    const char *msg = duet_last_error();
    fprintf(stderr, "duet: error: %s\n", msg[0] ? msg : duet_strerror(rc));
    fflush(stderr);
}

/* The job's exit status when aborting: a watchdog timeout says so. */
static int abort_code(const duet__run *r, int rc) {
    bool timed_out = rc == DUET_ETIMEOUT || duet_comm_timed_out(r->comm);
    return timed_out ? DUET_EXIT_TIMEOUT : 1;
}

/* Setup phases: every rank calls this with its own status. Returns DUET_OK
 * when every rank succeeded; otherwise the lowest failing rank prints its
 * message and every rank returns that rank's status. */
static int agree(duet__run *r, int rc) {
    if (r->comm == NULL || r->world == 1) {
        if (rc != DUET_OK) print_error(rc);
        return rc;
    }
    /* The lowest failing rank (INT32_MAX: none), then its status. */
    int32_t first = rc != DUET_OK ? r->rank : INT32_MAX;
    int crc = duet_comm_allreduce(r->comm, &first, 1, DUET_DTYPE_I32, DUET_REDUCE_MIN);
    if (crc != DUET_OK) /* MPI itself failed, or a rank stalled */
        duet_comm_abort(r->comm, abort_code(r, crc), "%s", duet_last_error());
    if (first == INT32_MAX) return DUET_OK;
    int32_t status = rc;
    crc = duet_comm_bcast(r->comm, &status, 1, DUET_DTYPE_I32, first);
    if (crc != DUET_OK) duet_comm_abort(r->comm, abort_code(r, crc), "%s", duet_last_error());
    if (first == r->rank) {
        print_error(rc);
        return rc;
    }
    return duet__error(status, "process %d failed (its message is above)", first);
}

/* In the training loop: an error ends the job (after a watchdog timeout
 * with DUET_EXIT_TIMEOUT, so that a scheduler can tell a hang). */
static int fail_loop(duet__run *r, int rc) {
    if (r->world > 1) duet_comm_abort(r->comm, abort_code(r, rc), "%s", duet_last_error());
    print_error(rc);
    return rc;
}

/* ---- setup and teardown ------------------------------------------------------ */

static int open_run(duet__run *r, const duet_runner_opts *o) {
    memset(r, 0, sizeof *r);
    r->lock_fd = -1;
    r->quiet = o->quiet;
    r->world = 1;
    if (o->config == NULL) return duet__error(DUET_EINVAL, "no config file given");
    DUET_TRY(duet_comm_world(&r->comm));
    r->rank = duet_comm_rank(r->comm);
    r->world = duet_comm_size(r->comm);
    duet_log_set_rank(r->rank, false);
    duet_comm_set_name(r->comm, "runner");
    DUET_TRY(duet__load_config_any(o->config, r->rank == 0 && !o->quiet, &r->cfg));
    r->read_files[0] = o->config;
    for (size_t i = 0; i < o->nsets; i++) {
        int rc = duet_config_set(r->cfg, o->sets[i]);
        if (rc != DUET_OK) return duet__error_context(rc, "--set %s", o->sets[i]);
    }
    DUET_TRY(duet__run_set_timeout(r));
    return duet__run_setup_kernels(r);
}

static void close_run(duet__run *r) {
    duet__logger_close(r->log);
    duet__workdir_unlock(r);
    duet_loader_destroy(r->loader);
    duet_optimizer_set_destroy(r->opts);
    if (r->wrapper != NULL)
        duet_wrapper_destroy(r->wrapper);
    else
        duet_model_destroy(r->model);
    duet_dataset_destroy(r->train_set);
    duet_dataset_destroy(r->val_set);
    duet_config_destroy(r->cfg);
    free(r->work_dir);
    duet__run_clear_ema(r);
    duet_comm_destroy(r->comm);
    memset(r, 0, sizeof *r);
}

/* Keys only training reads, accepted (not flagged as unknown) by test and
 * infer so that one config serves all three commands. */
static void mark_training_keys(duet_config *cfg) {
    static const char *const keys[] = {"optimizers", "lr_config", "total_iters",
                                       "checkpoint_config", "evaluation", "log_config", "wrapper",
                                       "seed", "work_dir", "load_from", "resume_from",
                                       "exp_name", "custom_hooks"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (duet_config_has(cfg, keys[i])) duet_config_mark_used(cfg, keys[i]);
}

/* The model of the config with weights from `ckpt` (test and infer). */
static int build_eval_model(duet__run *r, const char *ckpt) {
    int64_t seed = 0;
    DUET_TRY(duet_config_get_int_or(r->cfg, "seed", 0, &seed));
    r->seed = (uint64_t)seed;
    r->rng = duet_rng_make(r->seed, 0);
    DUET_TRY(duet_build_model(r->cfg, "model", &r->rng, &r->model));
    /* With an EMA hook the checkpoint's generator_ema.* are used (and must
     * be there, as the generator's are: the parts evaluation uses, which the
     * model names, and their moving averages). */
    DUET_TRY(duet__run_read_ema(r));
    DUET_TRY(duet__run_add_ema(r, r->model));
    char *converted = NULL; /* an MMEditing .pth, through scripts/convert-pth.py */
    if (duet__is_pth(ckpt))
        DUET_TRY(duet__helper_convert("convert-pth.py", ckpt, ".safetensors",
                                      r->rank == 0 && !r->quiet, &converted));
    int rc = duet_checkpoint_load_eval(converted != NULL ? converted : ckpt, r->model);
    if (converted != NULL) unlink(converted);
    free(converted);
    DUET_TRY(rc);
    duet_module_train(duet_model_module(r->model), false);
    return DUET_OK;
}

/* ---- training -------------------------------------------------------------------- */

static double peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0;
}

/* The work dir: --work-dir, else the config's work_dir, else
 * ./work_dirs/<config name without .cfg>. */
static int resolve_work_dir(duet__run *r, const duet_runner_opts *o) {
    const char *wd = NULL, *exp_name = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "work_dir", NULL, &wd));
    /* MMEditing's work_dir default: ./work_dirs/<exp_name>. */
    DUET_TRY(duet_config_get_string_or(r->cfg, "exp_name", NULL, &exp_name));
    if (o->work_dir != NULL) wd = o->work_dir;
    if ((wd == NULL || wd[0] == '\0') && exp_name != NULL && exp_name[0] != '\0') {
        if (strchr(exp_name, '/') != NULL || strcmp(exp_name, ".") == 0 ||
            strcmp(exp_name, "..") == 0)
            return duet_config_error(r->cfg, "exp_name", "exp_name = \"%s\" names the work "
                                     "dir ./work_dirs/<exp_name>: it must be one folder name",
                                     exp_name);
        r->work_dir = duet__strf("./work_dirs/%s", exp_name);
    } else if (wd == NULL || wd[0] == '\0') {
        const char *base = strrchr(o->config, '/');
        base = base != NULL ? base + 1 : o->config;
        size_t n = strlen(base);
        if (n > 4 && strcmp(base + n - 4, ".cfg") == 0) n -= 4;
        else if (n > 3 && strcmp(base + n - 3, ".py") == 0) n -= 3; /* MMEditing's */
        /* The whole name: configs that differ only past some length must
         * not share a work dir. (A file name is at most NAME_MAX bytes.) */
        r->work_dir = duet__strf("./work_dirs/%.*s", (int)n, base);
    } else {
        r->work_dir = duet__strdup(wd);
    }
    if (r->work_dir == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    return DUET_OK;
}

/* The config as run (after --set), next to the logs: WORK_DIR/config.cfg,
 * or config.run.cfg when config.cfg is the very file this run was started
 * from (`duet train W/config.cfg --work-dir W`), which is the user's and
 * keeps its comments. The config was read before anything is written. */
static int dump_config(duet__run *r, const char *source) {
    const char *name = "config.cfg";
    char *path = duet__path_join(r->work_dir, name);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    struct stat a, b;
    if (stat(source, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        name = "config.run.cfg";
        duet_log(DUET_LOG_INFO, "%s is this run's own config: left as it is; the config as run "
                 "goes to %s/%s", path, r->work_dir, name);
    }
    free(path);
    char *text = NULL;
    int rc = duet_config_text(r->cfg, &text);
    if (rc == DUET_OK) rc = duet__workdir_write_file(r, name, text);
    free(text);
    return rc;
}

/* The progress bar needs a terminal. Under mpirun, stdout is a pseudo
 * terminal whatever it ends in (a file, a pipe), so launched processes draw
 * no bar; DUET_PROGRESS=1 or 0 overrides. A launcher is told by what it
 * sets: Open MPI's OMPI_COMM_WORLD_SIZE, MPICH's PMI_RANK, Slurm's
 * SLURM_PROCID; not PMIX_RANK, which Open MPI sets in a process started
 * without a launcher too (a singleton), where the bar belongs. */
static void setup_progress_bar(duet__run *r) {
    const char *env = getenv("DUET_PROGRESS");
    if (env != NULL && env[0] != '\0') {
        duet__logger_set_progress(r->log, strcmp(env, "0") != 0);
        return;
    }
    if (r->world > 1 || getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_RANK") != NULL ||
        getenv("SLURM_PROCID") != NULL)
        duet__logger_set_progress(r->log, false);
}

int duet__run_problem(duet__run *r, int rc) {
    if (rc == DUET_OK || !r->collect) return rc;
    if (rc == DUET_ENOMEM) return rc;
    r->nproblems++;
    duet__str_addf(&r->problems, "\n  %d. %s", r->nproblems, duet_last_error());
    return DUET_OK;
}

/* What training needs, built and checked. Under --dry-run (r->collect) a
 * failed step is kept as a problem and the independent steps after it
 * still run: the keys, values, files and folders of the whole config are
 * checked in one run. A part that failed to build has its group marked
 * read, so that its unread keys are not reported as unknown too. */
static int setup_train(duet__run *r, const duet_runner_opts *o) {
    DUET_TRY(duet__run_problem(r, duet__run_read_mmedit_keys(r, true)));
    DUET_TRY(duet__run_read_settings(r));
    DUET_TRY(duet__run_problem(r, duet__run_read_test_cfg(r)));
    r->rng = duet_rng_make(r->seed, 0);
    const char *load_from = NULL;
    DUET_TRY(duet__run_problem(r, duet_config_get_string_or(r->cfg, "load_from", "",
                                                            &load_from)));
    if (load_from == NULL) load_from = "";
    if (load_from[0] != '\0') r->read_files[1] = load_from;

    duet_model *model = NULL;
    int rc = duet_build_model(r->cfg, "model", &r->rng, &model);
    if (rc != DUET_OK && r->collect) {
        /* Without a model: no wrapper or optimizers to check; the data
         * and the other keys still are. */
        static const char *const skipped[] = {"model", "optimizers", "wrapper", "custom_hooks"};
        for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
            if (duet_config_has(r->cfg, skipped[i])) duet_config_mark_used(r->cfg, skipped[i]);
        DUET_TRY(duet__run_problem(r, rc));
        /* No model to load its weights into: that the file is there. */
        if (load_from[0] != '\0' && !o->resume && access(load_from, R_OK) != 0)
            DUET_TRY(duet__run_problem(r, duet__error(DUET_EIO, "load_from: %s: cannot open: %s",
                                                      load_from, strerror(errno))));
        DUET_TRY(duet__run_problem(r, duet__run_build_data(r, true, r->eval_interval > 0)));
        return duet__run_problem(r, duet_config_check_unused(r->cfg));
    }
    DUET_TRY(rc);
    r->model = model; /* owned until the wrapper takes it */
    /* Known now, not after total_iters at the first evaluation. */
    if (r->eval_interval > 0 && !duet_model_can_validate(model))
        DUET_TRY(duet__run_problem(
            r, duet_config_error(r->cfg, "evaluation", "evaluation.interval = %lld, but a %s "
                                 "has no val_step to evaluate with: remove the evaluation "
                                 "group", (long long)r->eval_interval,
                                 duet_model_type_name(model))));
    if (load_from[0] != '\0' && !o->resume) {
        rc = duet__ckpt_load_weights(r, load_from, false, NULL);
        if (rc != DUET_OK) duet__error_context(rc, "load_from");
        DUET_TRY(duet__run_problem(r, rc));
        if (rc == DUET_OK && r->rank == 0 && !r->quiet)
            duet_log(DUET_LOG_INFO, "load_from %s: weights loaded", load_from);
    }
    /* MMEditing's EMA hook before_run: a copy of the generator, part of the
     * model from now on (after load_from, before the wrapper). */
    DUET_TRY(duet__run_read_ema(r));
    DUET_TRY(duet__run_add_ema(r, model));
    if (duet_config_has(r->cfg, "wrapper")) {
        r->model = NULL;
        DUET_TRY(duet_build_wrapper(r->cfg, "wrapper", model, r->comm, &r->wrapper));
    } else {
        duet_wrapper_opts wo = duet_wrapper_opts_default();
        const char *devices[] = {"cpu"};
        r->model = NULL;
        DUET_TRY(duet_wrapper_create(model, r->comm, devices, 1, &wo, &r->wrapper));
    }
    r->model = duet_wrapper_model(r->wrapper);
    /* The DDP took rank 0's generator: so does its copy (a resume loads it). */
    if (!o->resume) DUET_TRY(duet__run_ema_sync(r));
    rc = duet_build_optimizers(r->cfg, "optimizers", r->model, &r->opts);
    if (rc != DUET_OK && r->collect && duet_config_has(r->cfg, "optimizers"))
        duet_config_mark_used(r->cfg, "optimizers");
    DUET_TRY(duet__run_problem(r, rc));
    /* Evaluating needs data.val: its absence is an error then. */
    DUET_TRY(duet__run_problem(r, duet__run_build_data(r, true, r->eval_interval > 0)));
    return duet__run_problem(r, duet_config_check_unused(r->cfg));
}

/* Losses summed over a logging interval (MMEditing's log buffer average):
 * each value with the number of iterations that logged it, since a model
 * may log a value only in some iterations (SRGAN's loss_gan waits for
 * disc_init_steps; with disc_steps > 1 it comes every few steps). */
typedef struct interval_acc {
    duet_log_vars sum, count;
    int n;
    double time, data_time;
} interval_acc;

static void acc_add(interval_acc *a, const duet_log_vars *lv, double t, double dt) {
    for (int i = 0; i < lv->count; i++) {
        double prev = 0, seen = 0;
        duet_log_vars_get(&a->sum, lv->names[i], &prev);
        duet_log_vars_get(&a->count, lv->names[i], &seen);
        duet_log_vars_set(&a->sum, lv->names[i], prev + lv->values[i]);
        duet_log_vars_set(&a->count, lv->names[i], seen + 1);
    }
    a->n++;
    a->time += t;
    a->data_time += dt;
}

static int log_interval(duet__run *r, interval_acc *a, int64_t iter, double eta) {
    if (r->log == NULL || a->n == 0) return DUET_OK;
    duet__kv losses[DUET_LOG_VARS_MAX];
    size_t nopt = duet_optimizer_set_count(r->opts);
    /* Every optimizer's lr, however many the model has. */
    duet__kv *lr = malloc((nopt > 0 ? nopt : 1) * sizeof *lr);
    if (lr == NULL) return duet__error(DUET_ENOMEM, "log: out of memory");
    int nlr = 0;
    for (size_t i = 0; i < nopt; i++, nlr++) {
        lr[nlr].name = duet_optimizer_set_name(r->opts, i);
        lr[nlr].value = duet_optimizer_lr(duet_optimizer_set_at(r->opts, i));
    }
    for (int i = 0; i < a->sum.count; i++) {
        losses[i].name = a->sum.names[i];
        losses[i].value = a->sum.values[i] / a->count.values[i]; /* same order as sum */
    }
    duet__train_record rec = {.iter = iter, .max_iters = r->total_iters, .lr = lr, .nlr = nlr,
                              .losses = losses, .nlosses = a->sum.count,
                              .time = a->time / a->n, .data_time = a->data_time / a->n,
                              .eta = eta, .memory_mb = peak_rss_mb()};
    int rc = duet__logger_train(r->log, &rec);
    free(lr);
    return rc;
}

static int check_finite(duet__run *r, const duet_log_vars *lv, int64_t iter) {
    for (int i = 0; i < lv->count; i++)
        if (!isfinite(lv->values[i]))
            return duet__error(DUET_ENUMERIC,
                               "iteration %" PRId64 ": %s is %g (mean over %d process%s): "
                               "training diverged; lower the learning rate or check the data. "
                               "The last checkpoint in %s is intact.",
                               iter, lv->names[i], lv->values[i], r->world,
                               r->world == 1 ? "" : "es", r->work_dir);
    return DUET_OK;
}

static int evaluate_hook(duet__run *r, int64_t iter) {
    char name[64]; /* "val/iter_<int64>.png": 33 characters at most */
    snprintf(name, sizeof name, "val/iter_%" PRId64 ".png", iter);
    char *grid = NULL; /* every rank passes it; rank 0 writes it */
    if (r->save_image && r->eval_num_images > 0) {
        if (r->rank == 0) {
            char *dir = duet__path_join(r->work_dir, "val");
            int rc = dir == NULL ? duet__error(DUET_ENOMEM, "out of memory") : duet__mkdirs(dir);
            free(dir);
            DUET_TRY(rc);
        }
        grid = duet__path_join(r->work_dir, name);
        if (grid == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    }
    duet__eval_result res;
    int rc = duet__run_evaluate(r, grid, NULL, false, &res);
    if (rc == DUET_OK && r->log != NULL) {
        /* The metrics test_cfg names, no others. */
        duet__kv m[DUET_MAX_METRICS];
        for (int i = 0; i < res.metrics.count; i++)
            m[i] = (duet__kv){res.metrics.names[i], res.metrics.values[i]};
        rc = duet__logger_val(r->log, iter, res.images, m, res.metrics.count);
        if (rc == DUET_OK && grid != NULL) {
            duet__logger_text(r->log, "evaluation images (input | output | ground truth): %s",
                              grid);
            rc = duet__logger_tb_image(r->log, "val/images", iter, grid);
        }
    }
    free(grid);
    return rc;
}

/* FNV-1a over the bytes of every buffer of the model (BatchNorm statistics
 * and the like): what an evaluation may change. */
static uint64_t buffers_hash(duet__run *r) {
    duet_named_tensors l = {0};
    uint64_t h = 1469598103934665603ULL;
    if (duet_module_named_buffers(duet_model_module(r->model), &l) != DUET_OK) return 0;
    for (size_t i = 0; i < l.count; i++) {
        const unsigned char *b = (const unsigned char *)l.items[i].tensor->data;
        for (size_t k = 0; k < sizeof(float) * (size_t)l.items[i].tensor->numel; k++)
            h = (h ^ b[k]) * 1099511628211ULL;
    }
    duet_named_tensors_clear(&l);
    return h;
}

/* The checkpoint of `iter`; on failure every rank returns rank 0's status. */
static int checkpoint_now(duet__run *r, int64_t iter, bool *agreed) {
    int rc = duet__run_checkpoint(r, iter);
    if (rc != DUET_OK) {
        /* Every rank has rank 0's status: all stop together. */
        *agreed = rc != DUET_EMPI && rc != DUET_ETIMEOUT;
        if (*agreed && r->rank == 0) print_error(rc);
    }
    return rc;
}

/* Evaluation after the checkpoint of the same iteration (MMEditing's hook
 * order, and a failed evaluation then finds the checkpoint written). An
 * evaluation may change the model's state: Pix2Pix's val_step runs the
 * generator in training mode, as MMEditing's forward_test does, so
 * BatchNorm's running statistics move. The uninterrupted run goes on with
 * them; so that a run resumed from this checkpoint does the same, bit for
 * bit, the checkpoint is written again when rank 0's buffers changed. */
static int evaluate_then_recheckpoint(duet__run *r, int64_t iter, bool ckpt, bool *agreed) {
    const uint64_t before = ckpt && r->rank == 0 ? buffers_hash(r) : 0;
    DUET_TRY(evaluate_hook(r, iter));
    if (!ckpt) return DUET_OK;
    int32_t again = r->rank == 0 && buffers_hash(r) != before;
    if (r->world > 1) DUET_TRY(duet_comm_bcast(r->comm, &again, 1, DUET_DTYPE_I32, 0));
    return again ? checkpoint_now(r, iter, agreed) : DUET_OK;
}

static bool every(int64_t iter, int64_t interval, int64_t total) {
    return interval > 0 && (iter % interval == 0 || iter == total);
}

/* *agreed: every rank returns the same failure together (no abort needed;
 * the failing rank has printed its message). */
/* DUET_SAMPLE_TRACE=PREFIX: each rank appends "iteration epoch index..."
 * per iteration to PREFIX.<rank>, the dataset indices of its batch (how the
 * tests check that a resume on another world size continues the stream). */
static FILE *open_sample_trace(const duet__run *r) {
    const char *prefix = getenv("DUET_SAMPLE_TRACE");
    if (prefix == NULL || prefix[0] == '\0') return NULL;
    char *path = duet__strf("%s.%d", prefix, r->rank);
    int fd = path != NULL ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                                 0644)
                          : -1;
    if (fd < 0) duet_log(DUET_LOG_WARN, "DUET_SAMPLE_TRACE: cannot open %s", path ? path : prefix);
    free(path);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (f == NULL && fd >= 0) close(fd);
    return f;
}

static int train_loop_body(duet__run *r, int64_t start_iter, bool *agreed, FILE *trace) {
    *agreed = false;
    interval_acc acc;
    memset(&acc, 0, sizeof acc);
    double t_start = duet_time_now();
    for (int64_t iter = start_iter; iter < r->total_iters;) {
        double t0 = duet_time_now();
        duet__run_apply_lr(r, iter);
        duet_data_batch *db = NULL;
        DUET_TRY(duet_loader_next(r->loader, &db));
        if (trace != NULL) {
            fprintf(trace, "%" PRId64 " %" PRId64, iter + 1, db->epoch);
            for (int64_t i = 0; i < db->n; i++) fprintf(trace, " %" PRId64, db->indices[i]);
            fputc('\n', trace);
            fflush(trace);
        }
        /* The dataset's named tensors go to the model as they are. */
        duet_log_vars lv;
        duet_log_vars_clear(&lv);
        int rc = duet_wrapper_train_step(r->wrapper, &db->batch, r->opts, &lv);
        double data_time = db->data_time;
        duet_data_batch_destroy(db);
        if (rc == DUET_OK) rc = duet__run_ema_after_iter(r, iter);
        DUET_TRY(rc);
        iter++;
        /* Every rank holds the same averaged values: all stop together. */
        rc = check_finite(r, &lv, iter);
        if (rc != DUET_OK) return rc;
        acc_add(&acc, &lv, duet_time_now() - t0, data_time);
        double eta = duet__eta(duet_time_now() - t_start, iter - start_iter, iter, r->total_iters);
        duet__logger_progress(r->log, iter, r->total_iters, eta);
        int lrc = DUET_OK;
        if (every(iter, r->log_interval, r->total_iters)) {
            lrc = log_interval(r, &acc, iter, eta);
            memset(&acc, 0, sizeof acc);
        }
        /* The boundary: agree on errors outside collectives and on stop
         * signals before anything that needs every rank. */
        bool stop = false;
        rc = duet__run_boundary(r, iter, lrc, &stop);
        if (rc != DUET_OK) {
            *agreed = rc != DUET_EMPI && rc != DUET_ETIMEOUT;
            if (*agreed && lrc != DUET_OK) print_error(rc);
            return rc;
        }
        bool ckpt = every(iter, r->ckpt_interval, r->total_iters);
        const bool eval = every(iter, r->eval_interval, r->total_iters) && r->val_set != NULL;
        if (ckpt && eval && !stop && iter == r->total_iters) {
            /* The last iteration: nothing trains after it, so the
             * evaluation goes first and the one checkpoint holds what it
             * changed (Pix2Pix's BatchNorm statistics) for a run that
             * raises total_iters and resumes; written even when the
             * evaluation failed. */
            int erc = evaluate_hook(r, iter);
            DUET_TRY(checkpoint_now(r, iter, agreed));
            return erc;
        }
        if (ckpt || stop) {
            rc = checkpoint_now(r, iter, agreed);
            if (rc != DUET_OK) return rc;
        }
        if (stop) {
            *agreed = true;
            return duet__run_stopped(r, iter, true);
        }
        if (eval) DUET_TRY(evaluate_then_recheckpoint(r, iter, ckpt, agreed));
    }
    return DUET_OK;
}

static int train_loop(duet__run *r, int64_t start_iter, bool *agreed) {
    FILE *trace = open_sample_trace(r);
    int rc = train_loop_body(r, start_iter, agreed, trace);
    if (trace != NULL) fclose(trace);
    return rc;
}

static void describe(duet__run *r, int64_t start_iter) {
    if (r->log == NULL) return;
    duet__logger_text(r->log, "duet %s: %s on %d process%s, %" PRId64 " images per process, "
                      "%" PRId64 " per iteration; iterations %" PRId64 "..%" PRId64
                      "; work dir %s", DUET_VERSION_STRING, duet_model_type_name(r->model),
                      r->world, r->world == 1 ? "" : "es", r->samples_per_gpu,
                      r->samples_per_gpu * r->world, start_iter, r->total_iters, r->work_dir);
    size_t nddp = duet_wrapper_num_ddps(r->wrapper);
    duet__str parts = {0};
    for (size_t i = 0; i < nddp; i++) {
        const char *name = duet_wrapper_ddp_name(r->wrapper, i);
        duet__str_add_item(&parts, ", ", "%s", name[0] ? name : "the whole model");
    }
    duet__logger_text(r->log, "  data parallel: %zu DDP%s (%s)", nddp, nddp == 1 ? "" : "s",
                      duet__str_get(&parts));
    duet__str_free(&parts);
    duet_module *root = duet_model_module(r->model);
    for (size_t i = 0; i < duet_module_child_count(root); i++) {
        int64_t n = duet_module_num_parameters(duet_module_child_at(root, i), false);
        int64_t t = duet_module_num_parameters(duet_module_child_at(root, i), true);
        if (n > 0)
            duet__logger_text(r->log, "  %s: %" PRId64 " parameters (%" PRId64 " trainable)%s",
                              duet_module_child_name_at(root, i), n, t,
                              duet_is_ddp(duet_module_child_at(root, i)) ? ", own DDP" : "");
    }
}

/* A busy work dir is refused before the (possibly long) setup: the lock is
 * taken now when the folder exists. A new folder cannot be held by anyone
 * yet; it is made and locked after setup, so that a config error leaves no
 * empty work dir behind. */
static int claim_work_dir(duet__run *r, const duet_runner_opts *o) {
    DUET_TRY(resolve_work_dir(r, o));
    DUET_TRY(duet__workdir_check_data(r));
    if (o->dry_run) return DUET_OK; /* not even the lock file */
    struct stat st;
    if (r->rank == 0 && stat(r->work_dir, &st) == 0 && S_ISDIR(st.st_mode))
        return duet__workdir_lock(r);
    return DUET_OK;
}

/* What --resume without a path continues from: WORK_DIR/latest.safetensors,
 * or, when a crash or a preemption left none, the newest iter_N.safetensors
 * there (checkpoints are renamed into place whole, so every iter_N is
 * complete; its checksums are verified when it loads). NULL when out of
 * memory; the latest path when there is no checkpoint at all (its load then
 * says so). */
static char *resume_path(const duet__run *r) {
    char *latest = duet__path_join(r->work_dir, "latest.safetensors");
    struct stat st;
    if (latest == NULL || stat(latest, &st) == 0) return latest;
    DIR *d = opendir(r->work_dir);
    if (d == NULL) return latest;
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long n = -1;
        int end = 0;
        if (sscanf(e->d_name, "iter_%lld.safetensors%n", &n, &end) == 1 && end > 0 &&
            e->d_name[end] == '\0' && n > best &&
            fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            best = n;
    }
    closedir(d);
    if (best < 0) return latest;
    char *newest = duet__strf("%s/iter_%lld.safetensors", r->work_dir, best);
    if (newest == NULL) return latest;
    if (r->rank == 0)
        duet_log(DUET_LOG_WARN, "--resume: %s is missing (a run stopped before it was written, "
                 "or it was removed); resuming from %s, the newest checkpoint there", latest,
                 newest);
    free(latest);
    return newest;
}

/* MMEditing's resume_from: a checkpoint to resume from, as --resume=PATH
 * (which wins when given). */
static int read_resume_from(duet__run *r, duet_runner_opts *o) {
    const char *path = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "resume_from", NULL, &path));
    if (!o->resume && path != NULL && path[0] != '\0') {
        o->resume = true;
        o->resume_from = path;
    }
    return DUET_OK;
}

/* The run's header records (rank 0's logger; a no-op elsewhere). */
static int log_run_start(duet__run *r, const duet_runner_opts *o, int64_t start_iter,
                         const char *resumed) {
    if (r->log == NULL) return DUET_OK;
    duet__run_header h = {.config = o->config, .seed = r->seed, .world_size = r->world,
                          .start_iter = start_iter, .resumed_from = resumed};
    char *text = NULL, *env = NULL;
    size_t env_len = 0;
    int rc = duet_config_get_string_or(r->cfg, "exp_name", NULL, &h.exp_name);
    if (rc == DUET_OK) rc = duet_config_text(r->cfg, &text);
    FILE *f = rc == DUET_OK ? open_memstream(&env, &env_len) : NULL;
    if (f != NULL) {
        (void)duet_info_print(f); /* best effort: the header without it is still right */
        fclose(f);
    }
    h.config_text = text;
    h.env_info = env;
    if (rc == DUET_OK) rc = duet__logger_run_start(r->log, &h);
    free(text);
    free(env);
    return rc;
}

/* ---- --dry-run ------------------------------------------------------------------- */

/* Sample 0 of a set through its whole pipeline: a missing pair, an
 * unreadable image or a crop larger than the image shows now. */
static int dry_sample(duet__run *r, const duet_dataset *ds, const char *key) {
    duet_batch b = {0};
    int rc = duet_dataset_get_item(ds, 0, r->seed, 0, &b);
    if (rc != DUET_OK) return duet__error_context(rc, "%s, sample 0", key);
    duet__str line = {0};
    for (size_t i = 0; i < b.ntensors; i++) {
        const duet_tensor *t = b.tensors[i].tensor;
        duet__str_add_item(&line, ", ", "%s", b.tensors[i].name);
        for (int d = 1; d < t->ndim; d++)
            duet__str_addf(&line, "%s%" PRId64, d == 1 ? " " : "x", t->shape[d]);
    }
    const char *name = duet_dataset_name(ds, 0);
    printf("  %s: %" PRId64 " samples; sample 0 (%s) loads: %s\n", key, duet_dataset_size(ds),
           name != NULL ? name : "?", duet__str_get(&line));
    duet__str_free(&line);
    duet_batch_clear(&b);
    return DUET_OK;
}

/* The work dir as a run would find it; writes nothing. */
static void dry_work_dir(const duet__run *r, const duet_runner_opts *o) {
    struct stat st;
    if (stat(r->work_dir, &st) != 0) {
        char *parent = duet__strdup(r->work_dir);
        char *slash = parent != NULL ? strrchr(parent, '/') : NULL;
        while (parent != NULL && stat(parent, &st) != 0 && slash != NULL) {
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        const char *at = parent != NULL && stat(parent, &st) == 0 ? parent : ".";
        printf("  work dir: %s (would be created%s)\n", r->work_dir,
               access(at, W_OK) == 0 ? "" : "; NOT WRITABLE here");
        free(parent);
        return;
    }
    int ckpts = 0;
    DIR *d = opendir(r->work_dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        long long n;
        int end = 0;
        if (sscanf(e->d_name, "iter_%lld.safetensors%n", &n, &end) == 1 && end > 0 &&
            e->d_name[end] == '\0')
            ckpts++;
    }
    if (d != NULL) closedir(d);
    printf("  work dir: %s (exists, %d checkpoint%s; %s%s)\n", r->work_dir, ckpts,
           ckpts == 1 ? "" : "s",
           o->resume ? "the run would continue there" : "a new run would be added to its logs",
           access(r->work_dir, W_OK) == 0 ? "" : "; NOT WRITABLE");
}

/* duet train --dry-run: everything setup_train checked passed; also the
 * resume checkpoint and one sample per set, then a summary. */
static int dry_run(duet__run *r, const duet_runner_opts *o) {
    if (o->resume) {
        char *latest = o->resume_from == NULL ? resume_path(r) : NULL;
        const char *path = o->resume_from != NULL ? o->resume_from : latest;
        duet__ckpt_state s;
        int rc = path == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                              : duet__ckpt_resume(r, path, &s);
        if (rc == DUET_OK && r->rank == 0)
            printf("  resume: %s loads (iteration %" PRId64 ")\n", path, s.iter);
        free(latest);
        if (rc != DUET_OK) return duet__error_context(rc, "--resume");
    }
    if (r->rank != 0) return DUET_OK;
    printf("  model: %s\n", duet_model_type_name(r->model));
    duet_module *root = duet_model_module(r->model);
    for (size_t i = 0; i < duet_module_child_count(root); i++) {
        duet_module *c = duet_module_child_at(root, i);
        int64_t n = duet_module_num_parameters(c, false), t = duet_module_num_parameters(c, true);
        printf("    %s: %" PRId64 " parameters (%" PRId64 " trainable)%s\n",
               duet_module_child_name_at(root, i), n, t,
               duet_is_ddp(c) ? ", own DDP" : "");
    }
    for (size_t i = 0; i < duet_optimizer_set_count(r->opts); i++)
        printf("    optimizer %s: lr %g\n", duet_optimizer_set_name(r->opts, i),
               (double)duet_optimizer_base_lr(duet_optimizer_set_at(r->opts, i)));
    printf("  iterations: %" PRId64 ", %" PRId64 " images per process (%" PRId64
           " per iteration on %d process%s); log every %" PRId64 ", checkpoint every %" PRId64
           ", evaluate every %" PRId64 "%s\n", r->total_iters, r->samples_per_gpu,
           r->samples_per_gpu * r->world, r->world, r->world == 1 ? "" : "es",
           r->log_interval, r->ckpt_interval, r->eval_interval,
           r->eval_interval > 0 ? "" : " (never)");
    dry_work_dir(r, o);
    printf("duet train --dry-run: %s is ready to train; nothing was written\n", o->config);
    fflush(stdout);
    return DUET_OK;
}

int duet_runner_train(const duet_runner_opts *opts) {
    duet__run r;
    duet_runner_opts eff = *opts;
    const duet_runner_opts *o = &eff;
    int rc = agree(&r, open_run(&r, o));
    r.collect = o->dry_run;
    if (rc == DUET_OK) rc = agree(&r, read_resume_from(&r, &eff));
    if (rc == DUET_OK) rc = agree(&r, duet__run_problem(&r, claim_work_dir(&r, o)));
    if (rc == DUET_OK) rc = agree(&r, setup_train(&r, o));
    if (rc == DUET_OK && !o->dry_run) duet__run_warn_busy(&r);
    if (o->dry_run) {
        /* Sample 0 of each set through its pipeline (an image that does
         * not decode, a crop larger than the image): problems too. */
        if (rc == DUET_OK && r.rank == 0 && r.train_set != NULL)
            rc = duet__run_problem(&r, dry_sample(&r, r.train_set, "data.train"));
        if (rc == DUET_OK && r.rank == 0 && r.val_set != NULL)
            rc = duet__run_problem(&r, dry_sample(&r, r.val_set, r.val_key));
        /* Every problem of the config at once, then a failure (rank 0
         * alone may hold the samples' problems: every rank agrees). */
        if (rc == DUET_OK)
            rc = agree(&r, r.nproblems == 0
                               ? DUET_OK
                               : duet__error(DUET_ECONFIG, "%s: %d problem%s:%s\nduet train "
                                             "--dry-run names them all; nothing was written",
                                             o->config, r.nproblems,
                                             r.nproblems == 1 ? "" : "s",
                                             duet__str_get(&r.problems)));
        if (rc == DUET_OK) rc = agree(&r, dry_run(&r, o));
        duet__str_free(&r.problems);
        close_run(&r);
        return rc;
    }
    if (rc == DUET_OK) {
        int mrc = DUET_OK;
        if (r.rank == 0) {
            mrc = duet__mkdirs(r.work_dir);
            /* Before anything in the work dir is written. */
            if (mrc == DUET_OK && r.lock_fd == -1) mrc = duet__workdir_lock(&r);
            if (mrc == DUET_OK) mrc = duet__workdir_clean_temps(&r);
            if (mrc == DUET_OK) mrc = dump_config(&r, o->config);
            if (mrc == DUET_OK)
                mrc = duet__logger_open(r.work_dir, r.quiet ? NULL : stdout, &r.log);
            if (mrc == DUET_OK && r.tensorboard_dir != NULL) {
                char *dir = r.tensorboard_dir[0] != '\0'
                                ? duet__strdup(r.tensorboard_dir)
                                : duet__path_join(r.work_dir, "tf_logs");
                mrc = dir != NULL ? duet__logger_open_tensorboard(r.log, dir)
                                  : duet__error(DUET_ENOMEM, "out of memory");
                free(dir);
            }
            if (mrc == DUET_OK) setup_progress_bar(&r);
        }
        rc = agree(&r, mrc);
    }
    int64_t start_iter = 0;
    duet_sampler_state start = {0, 0};
    char *resumed = NULL; /* the checkpoint resumed from, for the run record */
    if (rc == DUET_OK && o->resume) {
        char *latest = NULL;
        const char *path = o->resume_from;
        if (path == NULL) {
            latest = resume_path(&r);
            path = latest;
        }
        duet__ckpt_state s;
        int lrc = path == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                               : duet__ckpt_resume(&r, path, &s);
        if (lrc != DUET_OK) duet__error_context(lrc, "--resume");
        if (lrc == DUET_OK) {
            start_iter = s.iter;
            start = s.sampler;
            if (start_iter >= r.total_iters && r.rank == 0)
                duet_log(DUET_LOG_WARN, "--resume: %s is at iteration %" PRId64 " and "
                         "total_iters is %" PRId64 ": the run is finished, nothing is trained; "
                         "to train on, raise total_iters (e.g. --set total_iters=%" PRId64 ")",
                         path, start_iter, r.total_iters, 2 * start_iter);
            if (r.log != NULL)
                duet__logger_text(r.log, "resumed from %s at iteration %" PRId64, path, s.iter);
            resumed = duet__strdup(path);
        }
        free(latest);
        rc = agree(&r, lrc);
    }
    /* log.jsonl keeps every run of the work dir: each starts with a mark. */
    if (rc == DUET_OK) rc = agree(&r, log_run_start(&r, o, start_iter, resumed));
    free(resumed);
    if (rc == DUET_OK) rc = agree(&r, duet__run_build_loader(&r, start));
    if (rc == DUET_OK) {
        describe(&r, start_iter);
        bool agreed = false;
        duet__stop_install();
        int lrc = train_loop(&r, start_iter, &agreed);
        if (lrc == DUET_ENUMERIC) {
            if (r.rank == 0) print_error(lrc);
            rc = lrc;
        } else if (lrc != DUET_OK && agreed) {
            rc = lrc;
        } else if (lrc != DUET_OK) {
            rc = fail_loop(&r, lrc);
        } else if (r.log != NULL) {
            duet__logger_text(r.log, "done: %" PRId64 " iterations; checkpoints in %s",
                              r.total_iters, r.work_dir);
        }
    }
    close_run(&r);
    /* A stop signal after the last iteration is recorded and changes
     * nothing: the run is complete. */
    if (!o->keep_signal_handlers) duet__stop_restore();
    return rc;
}

/* ---- test and infer ------------------------------------------------------------ */

/* test --out: outputs are named after the validation images, so they must
 * not land in the validation folders or collide with each other. */
static int check_test_outputs(duet__run *r, const duet_runner_opts *o) {
    const char *out_dir = o->out_dir;
    const char *others[2] = {o->config, o->checkpoint};
    int64_t n = duet_dataset_size(r->val_set);
    const char **names = calloc((size_t)n, sizeof *names);
    if (names == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) names[i] = duet_dataset_name(r->val_set, i);
    const char *dirs[2] = {NULL, NULL};
    char gt[64], lq[64];
    snprintf(gt, sizeof gt, "%s.gt_folder", r->val_key);
    snprintf(lq, sizeof lq, "%s.lq_folder", r->val_key);
    int rc = duet_config_get_string_or(r->cfg, gt, NULL, &dirs[0]);
    if (rc == DUET_OK) rc = duet_config_get_string_or(r->cfg, lq, NULL, &dirs[1]);
    if (rc == DUET_OK) rc = duet__check_outputs(out_dir, names, (size_t)n, dirs, 2, others, 2);
    free(names);
    if (rc != DUET_OK) return duet__error_context(rc, "--out");
    return DUET_OK;
}

int duet_runner_test(const duet_runner_opts *o, duet_test_result *result) {
    duet__run r;
    int rc = agree(&r, open_run(&r, o));
    if (rc == DUET_OK && o->checkpoint == NULL)
        rc = agree(&r, duet__error(DUET_EINVAL, "test needs a checkpoint"));
    if (rc == DUET_OK) {
        int src = duet__run_read_test_cfg(&r);
        if (src == DUET_OK) src = build_eval_model(&r, o->checkpoint);
        if (src == DUET_OK) src = duet__run_build_data(&r, false, true);
        mark_training_keys(r.cfg);
        if (src == DUET_OK) src = duet__run_read_mmedit_keys(&r, false);
        if (src == DUET_OK) src = duet_config_check_unused(r.cfg);
        if (src == DUET_OK && o->out_dir != NULL) src = check_test_outputs(&r, o);
        rc = agree(&r, src);
    }
    duet__eval_result res;
    memset(&res, 0, sizeof res);
    if (rc == DUET_OK) {
        r.eval_num_images = 0;
        int erc = duet__run_evaluate(&r, NULL, o->out_dir, true, &res);
        if (erc != DUET_OK) rc = fail_loop(&r, erc);
    }
    if (result != NULL) {
        memset(result, 0, sizeof *result);
        if (rc == DUET_OK) {
            result->images = res.images;
            result->crop_border = r.test_cfg.crop_border;
            result->rank = r.rank;
            result->psnr = res.psnr;
            result->ssim = res.ssim;
            result->psnr_bicubic = res.psnr_bicubic;
            result->ssim_bicubic = res.ssim_bicubic;
            result->metrics = res.metrics;
            result->metrics_bicubic = res.metrics_bicubic;
            result->metrics_input = res.metrics_input;
        }
    }
    close_run(&r);
    return rc;
}

/* A super-resolution model ("lq" input) takes the image in [0, 1] RGB and
 * its output is saved as it is. A translation model ("img_a" / "img_b")
 * takes the image through data.val.pipeline's steps for that key, as
 * duet test gives it the validation images (e.g. Normalize to [-1, 1]);
 * its val_step (MMEditing's forward_test: Pix2Pix's generator in training
 * mode, for instance) runs on a sample whose img_a and img_b are both that
 * image (the output of the test direction reads only its own input), and
 * the output is saved as duet test --out saves it: (x + 1) / 2. */
static int translate(duet__run *r, duet_tensor *x, duet_tensor **y) {
    duet_batch b = {0};
    duet_val_output vo = {0};
    int rc = duet_batch_add_tensor(&b, "img_a", x);
    if (rc == DUET_OK) rc = duet_batch_add_tensor(&b, "img_b", x);
    if (rc == DUET_OK) rc = duet_model_val_step(r->model, &b, &vo);
    if (rc == DUET_OK) *y = duet_tensor_retain(vo.output);
    duet_val_output_clear(&vo);
    duet_batch_clear(&b);
    return rc;
}

/* An inpaintor: image and mask through data.val.pipeline, its val_step's
 * composite, saved as duet test --out saves it: (x + 1) / 2, in RGB. */
static int inpaint(duet__run *r, const char *path, const char *mask, const char *out_dir) {
    duet_batch b = {0};
    duet_val_output vo = {0};
    duet_tensor *shown = NULL;
    int rc = duet__inpainting_infer_input(r->cfg, path, mask, r->max_pixels, &b);
    bool prev = duet_set_grad_enabled(false);
    if (rc == DUET_OK) rc = duet_model_val_step(r->model, &b, &vo);
    duet_set_grad_enabled(prev);
    if (rc == DUET_OK) rc = duet__from_signed(vo.output, &shown);
    if (rc == DUET_OK) duet__to_rgb_for_png(&b, shown);
    if (rc == DUET_OK) rc = duet__save_tensor_png(shown, out_dir, path);
    if (rc != DUET_OK) duet__error_context(rc, "%s", path);
    duet_tensor_release(shown);
    duet_val_output_clear(&vo);
    duet_batch_clear(&b);
    return rc;
}

static int infer_one(duet__run *r, const char *path, const char *out_dir) {
    if (r->infer_mask != NULL) return inpaint(r, path, r->infer_mask, out_dir);
    duet_image *img = NULL;
    duet_tensor *chw = NULL, *x = NULL, *y = NULL, *shown = NULL;
    const char *key = duet_model_input_key(r->model);
    const bool translation = strcmp(key, "lq") != 0;
    int rc = DUET_OK;
    if (translation) {
        rc = duet__translation_infer_input(r->cfg, key, path, r->max_pixels, &x);
    } else {
        rc = duet_image_load_limited(path, r->max_pixels, &img);
        if (rc == DUET_OK) rc = duet_image_to_tensor(img, &chw);
        if (rc == DUET_OK) {
            int64_t shape[4] = {1, chw->shape[0], chw->shape[1], chw->shape[2]};
            rc = duet_tensor_view(chw, 4, shape, &x);
        }
    }
    bool prev = duet_set_grad_enabled(false);
    if (rc == DUET_OK && translation && r->tile > 0)
        rc = duet__error(DUET_EUNSUPPORTED, "--tile: a %s's generator normalises over the whole "
                         "image (instance or batch statistics), so its output cannot be made "
                         "tile by tile; run without --tile", duet_model_type_name(r->model));
    if (rc == DUET_OK && !translation && r->tile > 0)
        rc = duet__tiled_forward(r, x, r->tile, r->tile_pad, path, &y);
    else if (rc == DUET_OK && !translation)
        rc = duet__check_forward_memory(r, x, path);
    if (rc == DUET_OK && y == NULL)
        rc = translation ? translate(r, x, &y) : duet_model_forward(r->model, x, &y);
    duet_set_grad_enabled(prev);
    if (rc == DUET_OK && translation) rc = duet__from_signed(y, &shown);
    if (rc == DUET_OK) rc = duet__save_tensor_png(shown != NULL ? shown : y, out_dir, path);
    if (rc != DUET_OK) duet__error_context(rc, "%s", path);
    duet_tensor_release(shown);
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_tensor_release(chw);
    duet_image_destroy(img);
    return rc;
}

int duet_runner_export(const duet_runner_opts *o, const char *part, const char *out_path) {
    duet__run r;
    int rc = agree(&r, open_run(&r, o));
    if (rc == DUET_OK) {
        const char *inputs[2] = {o->config, o->checkpoint};
        int src = o->checkpoint == NULL || out_path == NULL
                      ? duet__error(DUET_EINVAL, "export needs a checkpoint and an output file")
                      : duet__safe_check_inputs(out_path, inputs, 2);
        if (src == DUET_OK) src = duet__run_read_test_cfg(&r);
        if (src == DUET_OK) src = build_eval_model(&r, o->checkpoint);
        mark_training_keys(r.cfg);
        if (src == DUET_OK) src = duet__run_read_mmedit_keys(&r, false);
        if (duet_config_has(r.cfg, "data")) duet_config_mark_used(r.cfg, "data");
        if (src == DUET_OK) src = duet_config_check_unused(r.cfg);
        duet_module *root = src == DUET_OK ? duet_model_module(r.model) : NULL;
        if (root != NULL && part == NULL)
            part = duet_module_child(root, "generator_ema") != NULL ? "generator_ema"
                   : strcmp(duet_model_type_name(r.model), "CycleGAN") == 0
                       ? duet_cyclegan_test_generator(r.model)
                       : "generator";
        /* A dotted name reaches into dict parts (generators.a). */
        duet_module *net = root, *reached = root;
        char name[256], prefix[256] = "";
        snprintf(name, sizeof name, "%s", part != NULL ? part : "");
        for (char *save = NULL, *k = strtok_r(name, ".", &save); net != NULL && k != NULL;
             k = strtok_r(NULL, ".", &save)) {
            net = duet_module_child(net, k);
            if (net != NULL && duet_module_child_count(net) > 0 && strchr(save, '.') == NULL &&
                *save != '\0') {
                /* The parts one level down are listed when the last name is wrong. */
                reached = net;
                snprintf(prefix, sizeof prefix, "%.*s.", (int)(save - name - 1), part);
            }
        }
        if (src == DUET_OK && net == NULL) {
            duet__str have = {0};
            for (size_t i = 0; i < duet_module_child_count(reached); i++)
                duet__str_add_item(&have, ", ", "%s%s", prefix,
                                   duet_module_child_name_at(reached, i));
            src = duet__error(DUET_ENOTFOUND, "export: the %s has no part '%s' (its parts: %s)",
                              duet_model_type_name(r.model), part, duet__str_get(&have));
            duet__str_free(&have);
        }
        duet__onnx_stats st = {0};
        /* A translation model tests its generator in training mode
         * (MMEditing's forward_test, as duet infer runs it): BatchNorm2d
         * with the batch's statistics, and dropout, which ONNX cannot
         * reproduce (other draws), so it is left out and said so. */
        const bool train_mode =
            src == DUET_OK && strcmp(duet_model_input_key(r.model), "lq") != 0;
        const int opset = o->onnx_opset != 0 ? o->onnx_opset : DUET__ONNX_OPSET_DEFAULT;
        if (src == DUET_OK && r.rank == 0)
            src = duet__onnx_export(net, part, out_path, opset, train_mode, &st);
        if (src == DUET_OK && r.rank == 0 && !o->quiet)
            printf("duet export: %s of %s -> %s (ONNX opset %d, %zu nodes, input \"input\" "
                   "(N, C, H, W), output \"output\"%s)\n", part, o->checkpoint, out_path,
                   opset, st.nodes, train_mode && st.batch_norms > 0
                                        ? "; BatchNorm with the batch's statistics, as the "
                                          "model tests"
                                        : "");
        if (src == DUET_OK && r.rank == 0 && train_mode && st.dropouts > 0)
            duet_log(DUET_LOG_WARN, "export: %s has %d Dropout layer(s); the %s tests with them "
                     "active (random units dropped, as MMEditing's forward_test does) and the "
                     "ONNX model has them as identities, so it will not match duet infer "
                     "exactly", part, st.dropouts, duet_model_type_name(r.model));
        rc = agree(&r, src);
    }
    close_run(&r);
    return rc;
}

int duet_runner_infer(const duet_runner_opts *o) {
    duet__run r;
    int rc = agree(&r, open_run(&r, o));
    r.tile = o->tile;
    r.tile_pad = o->tile_pad;
    r.infer_mask = o->mask;
    if (rc == DUET_OK && (o->checkpoint == NULL || o->out_dir == NULL || o->nimages == 0))
        rc = agree(&r, duet__error(DUET_EINVAL, "infer needs a checkpoint, images and an "
                                                "output folder"));
    if (rc == DUET_OK) {
        /* test_cfg is read (and checked) as duet test reads it: the same
         * config serves both commands. */
        int src = duet__run_read_test_cfg(&r);
        if (src == DUET_OK) src = build_eval_model(&r, o->checkpoint);
        if (src == DUET_OK) {
            const bool inpaintor = strcmp(duet_model_input_key(r.model), "masked_img") == 0;
            if (inpaintor && o->mask == NULL)
                src = duet__error(DUET_EINVAL, "infer: a %s fills a hole: give the hole as "
                                  "--mask MASK (nonzero pixels)", duet_model_type_name(r.model));
            else if (!inpaintor && o->mask != NULL)
                src = duet__error(DUET_EINVAL, "infer: --mask is for inpaintors; a %s takes the "
                                  "image alone", duet_model_type_name(r.model));
            if (src == DUET_OK && inpaintor && r.tile > 0)
                src = duet__error(DUET_EUNSUPPORTED, "--tile: an inpaintor fills the hole from "
                                  "the whole image; run without --tile");
        }
        if (src == DUET_OK) src = duet__run_read_pixel_limit(&r);
        if (src == DUET_OK) src = duet__mkdirs(o->out_dir);
        /* Every rank checks all outputs (the same answer everywhere). */
        const char *others[3] = {o->mask, o->config, o->checkpoint};
        if (src == DUET_OK)
            src = duet__check_outputs(o->out_dir, o->images, o->nimages, NULL, 0, others, 3);
        mark_training_keys(r.cfg);
        if (src == DUET_OK) src = duet__run_read_mmedit_keys(&r, false);
        if (duet_config_has(r.cfg, "data")) duet_config_mark_used(r.cfg, "data");
        if (src == DUET_OK) src = duet_config_check_unused(r.cfg);
        rc = agree(&r, src);
    }
    int irc = DUET_OK;
    int64_t written = 0; /* counted, not assumed: the log line must be true */
    for (size_t i = (size_t)r.rank; rc == DUET_OK && irc == DUET_OK && i < o->nimages;
         i += (size_t)r.world) {
        irc = infer_one(&r, o->images[i], o->out_dir);
        if (irc == DUET_OK) written++;
    }
    if (rc == DUET_OK) rc = agree(&r, irc);
    if (rc == DUET_OK && r.world > 1)
        rc = agree(&r, duet_comm_allreduce(r.comm, &written, 1, DUET_DTYPE_I64, DUET_REDUCE_SUM));
    if (rc == DUET_OK && !o->quiet)
        duet_log(DUET_LOG_INFO, "infer: %" PRId64 " image%s %s into %s/", written,
                 written == 1 ? "" : "s",
                 strcmp(duet_model_input_key(r.model), "lq") == 0           ? "upscaled"
                 : strcmp(duet_model_input_key(r.model), "masked_img") == 0 ? "inpainted"
                                                                            : "translated",
                 o->out_dir);
    close_run(&r);
    return rc;
}

int duet_runner_plot(const char *work_dir, const char *out_png, const char *const *keys,
                     size_t nkeys, FILE *report) {
    return duet__plot(work_dir, out_png, keys, nkeys, report);
}
