/* The keys of MMEditing 0.16's configs that are not about the model, the
 * data or the optimizers: an MMEditing config moves to duet without edits.
 * Each is either read as MMEditing reads it (log_level; exp_name and
 * resume_from in runner.c; data.train_dataloader.samples_per_gpu in
 * build.c; log_config.hooks' TextLoggerHook) or read and named, once, as
 * having no effect in duet, with the reason. A key neither of these knows
 * is still an unknown-key error (a typo must not pass silently). */
#include <string.h>
#include <strings.h>

#include "runner/runner_internal.h"

typedef struct no_effect {
    const char *path;
    const char *why;
} no_effect;

static const no_effect no_effects[] = {
    {"workflow", "duet's runner trains for total_iters; evaluation follows evaluation.interval"},
    {"dist_params", "processes talk over MPI; the launcher (mpirun, srun) sets up the group"},
    {"gpu_ids", "duet runs on the CPU; one process per device comes from the launcher"},
    {"cudnn_benchmark", "no cuDNN in duet's CPU backend"},
    {"mp_start_method", "duet's loader prefetches with a thread, not worker processes"},
    {"opencv_num_threads", "duet decodes and resizes with its own code"},
    {"find_unused_parameters", "duet's DDP detects parameters without a gradient itself and names "
                               "them"},
    {"visual_config", "evaluation pictures are written by evaluation.save_image"},
    {"data.workers_per_gpu", "one prefetch thread per process (data.prefetch batches ahead)"},
    {"data.val_workers_per_gpu", "evaluation reads its images on the evaluating process"},
    {"data.val_samples_per_gpu", "evaluation runs one image at a time, as MMEditing's SR "
                                 "val_dataloader does"},
    {"data.val_dataloader", "evaluation runs one image at a time"},
    {"data.test_dataloader", "duet test runs one image at a time"},
    {"data.test", "duet train evaluates data.val; duet test evaluates data.test (as "
                  "MMEditing's tools/test.py)"},
    {"data.train_dataloader.drop_last", "duet's sampler draws whole batches without end "
                                        "(iteration-based)"},
    {"data.drop_last", "duet's sampler draws whole batches without end (iteration-based)"},
    {"data.persistent_workers", "no worker processes"},
    {"data.train_dataloader.persistent_workers", "no worker processes"},
    {"data.train_dataloader.workers_per_gpu", "no worker processes"},
    {"evaluation.gpu_collect", "results are gathered over MPI"},
    {"fp16", "duet's mixed precision is bfloat16, which needs no loss scaling: set "
             "mixed_precision = \"bf16\" (on CPUs with AVX512-BF16 or AMX; docs/performance.md)"},
};

/* MMEditing's log_level, as duet_log's level (duet's messages: notes,
 * warnings; the training log's lines follow log_config); DUET_LOG in the
 * environment wins (it is the user's choice for this run). */
static int read_log_level(duet__run *r) {
    const char *s = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "log_level", NULL, &s));
    if (s == NULL) return DUET_OK;
    static const struct {
        const char *name;
        int level;
    } levels[] = {{"DEBUG", DUET_LOG_DEBUG}, {"INFO", DUET_LOG_INFO}, {"WARNING", DUET_LOG_WARN},
                  {"WARN", DUET_LOG_WARN},   {"ERROR", DUET_LOG_ERROR}, {"CRITICAL", DUET_LOG_ERROR}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (strcasecmp(s, levels[i].name) == 0) {
            const char *env = getenv("DUET_LOG");
            if (env == NULL || env[0] == '\0') duet_log_set_level(levels[i].level);
            return DUET_OK;
        }
    return duet_config_error(r->cfg, "log_level", "log_level = \"%s\": use DEBUG, INFO, WARNING "
                             "or ERROR (as MMEditing's)", s);
}

/* log_config.hooks: TextLoggerHook is what duet's text log does,
 * TensorboardLoggerHook writes TensorBoard events (log_dir, default
 * WORK_DIR/tf_logs, as mmcv's); both log every log_config.interval. Other
 * loggers are named as not there. */
static int read_log_hooks(duet__run *r, bool notes) {
    if (!duet_config_has(r->cfg, "log_config.hooks")) return DUET_OK;
    size_t n = 0;
    DUET_TRY(duet_config_length(r->cfg, "log_config.hooks", &n));
    for (size_t i = 0; i < n; i++) {
        char path[64], key[96];
        snprintf(path, sizeof path, "log_config.hooks.[%zu]", i);
        const char *type = NULL;
        snprintf(key, sizeof key, "%s.type", path);
        DUET_TRY(duet_config_get_string(r->cfg, key, &type));
        if (strcmp(type, "TextLoggerHook") == 0 || strcmp(type, "TensorboardLoggerHook") == 0) {
            DUET_TRY(duet__run_check_by_epoch(r->cfg, path));
            static const char *const ignored[] = {"interval", "ignore_last", "reset_flag",
                                                  "interval_exp_name"};
            for (size_t k = 0; k < sizeof ignored / sizeof ignored[0]; k++) {
                snprintf(key, sizeof key, "%s.%s", path, ignored[k]);
                if (duet_config_has(r->cfg, key)) DUET_TRY(duet_config_mark_used(r->cfg, key));
            }
            if (strcmp(type, "TensorboardLoggerHook") == 0) {
                snprintf(key, sizeof key, "%s.log_dir", path);
                DUET_TRY(duet_config_get_string_or(r->cfg, key, "", &r->tensorboard_dir));
            }
            continue;
        }
        DUET_TRY(duet_config_mark_used(r->cfg, path));
        if (notes && r->rank == 0)
            duet_log(DUET_LOG_INFO, "config: %s (%s) has no effect in duet: its loggers are the "
                     "text log, WORK_DIR/log.jsonl (one JSON record per logged iteration) and "
                     "TensorboardLoggerHook", path, type);
    }
    return DUET_OK;
}

int duet__run_read_mmedit_keys(duet__run *r, bool notes) {
    DUET_TRY(read_log_level(r));
    /* One line names them all (a converted config has eight or nine);
     * each reason at DEBUG. */
    duet__str names = {0};
    size_t n = 0;
    int rc = DUET_OK;
    for (size_t i = 0; i < sizeof no_effects / sizeof no_effects[0] && rc == DUET_OK; i++) {
        const no_effect *k = &no_effects[i];
        if (!duet_config_has(r->cfg, k->path)) continue;
        /* duet test read data.test as its dataset: its keys are checked. */
        if (r->val_key != NULL && strcmp(k->path, r->val_key) == 0) continue;
        rc = duet_config_mark_used(r->cfg, k->path);
        duet__str_add_item(&names, ", ", "%s", k->path);
        n++;
        if (notes && r->rank == 0)
            duet_log(DUET_LOG_DEBUG, "config: %s has no effect in duet: %s", k->path, k->why);
    }
    if (rc == DUET_OK && notes && r->rank == 0 && n > 0)
        duet_log(DUET_LOG_INFO, "config: %zu MMEditing key%s with no effect in duet: %s (each "
                 "reason with log_level = \"DEBUG\")", n, n == 1 ? "" : "s",
                 duet__str_get(&names));
    duet__str_free(&names);
    DUET_TRY(rc);
    return read_log_hooks(r, notes);
}
