/* The runner's settings from the config: hooks, LR schedule, datasets and
 * the loader. (Models, wrappers and optimizers come from the registry in
 * duet/wrapper.h.) */
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>

#include "duet/wrapper.h"
#include "runner/runner_internal.h"

/* DUET_ECONFIG "configs/x.cfg:12: 'lr_config.policy' ...": a bad value,
 * with where it was set. `path` is relative to cfg (full paths in messages
 * come from cfg's root, which is the whole config here). */
static int bad_value_in(duet_config *cfg, const char *group, const char *path,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad_value_in(duet_config *cfg, const char *group, const char *path,
                        const char *fmt, ...) {
    duet__str msg = {0};
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(&msg, fmt, ap);
    va_end(ap);
    int rc = msg.failed ? duet__error(DUET_ENOMEM, "config: out of memory for a message")
                        : duet_config_error(cfg, path, "'%s%s%s' %s", group ? group : "",
                                            group ? "." : "", path, duet__str_get(&msg));
    duet__str_free(&msg);
    return rc;
}
#define bad_value(cfg, path, ...) bad_value_in(cfg, NULL, path, __VA_ARGS__)

/* A positive or zero interval; 0 turns the hook off. */
static int get_interval(duet_config *cfg, const char *path, int64_t def, int64_t *out) {
    return duet_config_get_int_in_or(cfg, path, def, 0, INT64_MAX, out);
}

/* MMEditing's by_epoch flag: duet's runner counts iterations only. */
int duet__run_check_by_epoch(duet_config *cfg, const char *group) {
    char path[128]; /* group: "checkpoint_config", "log_config.hooks.[i]", ... */
    snprintf(path, sizeof path, "%s.by_epoch", group);
    bool by_epoch = false;
    DUET_TRY(duet_config_get_bool_or(cfg, path, false, &by_epoch));
    if (by_epoch)
        return bad_value(cfg, path,
                         "= true is not supported: duet's runner is iteration-based (set it "
                         "to false and give intervals in iterations)");
    return DUET_OK;
}

/* mmcv's LrUpdaterHook warmup keys, which every policy takes. */
static int read_warmup(duet_config *cfg, duet_lr_schedule *s) {
    const char *w = NULL;
    DUET_TRY(duet_config_get_string_or(cfg, "lr_config.warmup", NULL, &w));
    bool by_epoch = false;
    DUET_TRY(duet_config_get_bool_or(cfg, "lr_config.warmup_by_epoch", false, &by_epoch));
    if (by_epoch)
        return bad_value(cfg, "lr_config.warmup_by_epoch", "= true is not supported: duet's "
                         "runner is iteration-based (give warmup_iters in iterations)");
    double ratio = 0.1;
    DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.warmup_ratio", 0.1, 0.0, 1.0, &ratio));
    int64_t iters = 0;
    DUET_TRY(duet_config_get_int_in_or(cfg, "lr_config.warmup_iters", 0, 0, INT64_MAX, &iters));
    if (w == NULL) return DUET_OK; /* mmcv: warmup=None ignores the other two */
    static const struct {
        const char *name;
        duet_lr_warmup kind;
    } kinds[] = {{"constant", DUET_LR_WARMUP_CONSTANT},
                 {"linear", DUET_LR_WARMUP_LINEAR},
                 {"exp", DUET_LR_WARMUP_EXP}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(w, kinds[i].name) == 0) s->warmup = kinds[i].kind;
    if (s->warmup == DUET_LR_WARMUP_NONE)
        return bad_value(cfg, "lr_config.warmup", "= \"%s\" is not known (use \"constant\", "
                         "\"linear\" or \"exp\", as mmcv)", w);
    if (iters < 1)
        return bad_value(cfg, "lr_config.warmup_iters", "must be >= 1 with a warmup, got %lld",
                         (long long)iters);
    if (!(ratio > 0.0))
        return bad_value(cfg, "lr_config.warmup_ratio", "must be > 0 with a warmup, got %g",
                         ratio);
    s->warmup_iters = iters;
    s->warmup_ratio = (float)ratio;
    return DUET_OK;
}

static int read_lr_config(duet__run *r) {
    duet_config *cfg = r->cfg;
    r->sched = duet_lr_schedule_default();
    if (!duet_config_has(cfg, "lr_config")) return DUET_OK;
    DUET_TRY(duet__run_check_by_epoch(cfg, "lr_config"));
    const char *policy = NULL;
    DUET_TRY(duet_config_get_string_or(cfg, "lr_config.policy", "Fixed", &policy));
    duet_lr_schedule *s = &r->sched;
    size_t n = 0;
    if (strcmp(policy, "Fixed") == 0) {
        s->policy = DUET_LR_FIXED;
    } else if (strcmp(policy, "Step") == 0) {
        s->policy = DUET_LR_STEP;
        if (duet_config_kind(cfg, "lr_config.step") == DUET_CONFIG_INT) {
            /* mmcv: an int step drops the lr every `step` iterations. */
            DUET_TRY(duet_config_get_int_in(cfg, "lr_config.step", 1, INT64_MAX,
                                            &s->step_every));
        } else {
            DUET_TRY(duet_config_get_int_array(cfg, "lr_config.step", s->steps,
                                               DUET_LR_MAX_STEPS, &n));
        }
        double gamma = 0.1;
        DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.gamma", 0.1, 0.0, FLT_MAX, &gamma));
        s->gamma = (float)gamma;
        double min_lr = 0;
        DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.min_lr", 0.0, 0.0, FLT_MAX, &min_lr));
        s->min_lr = (float)min_lr;
        for (size_t i = 0; i < n; i++)
            if (s->steps[i] < 0)
                return bad_value(cfg, "lr_config.step", "must be >= 0, got %lld",
                                 (long long)s->steps[i]);
        for (size_t i = 1; i < n; i++)
            if (s->steps[i] <= s->steps[i - 1])
                return bad_value(cfg, "lr_config.step", "must increase, got %lld after %lld",
                                 (long long)s->steps[i], (long long)s->steps[i - 1]);
    } else if (strcmp(policy, "CosineRestart") == 0) {
        s->policy = DUET_LR_COSINE_RESTART;
        DUET_TRY(duet_config_get_int_array(cfg, "lr_config.periods", s->steps,
                                           DUET_LR_MAX_STEPS, &n));
        for (size_t i = 0; i < n; i++)
            if (s->steps[i] < 1)
                return bad_value(cfg, "lr_config.periods", "must be >= 1, got %lld",
                                 (long long)s->steps[i]);
        double w[DUET_LR_MAX_STEPS];
        size_t nw = 0;
        if (duet_config_has(cfg, "lr_config.restart_weights")) {
            DUET_TRY(duet_config_get_double_array(cfg, "lr_config.restart_weights", w,
                                                  DUET_LR_MAX_STEPS, &nw));
            if (nw != n)
                return bad_value(cfg, "lr_config.restart_weights",
                                 "has %zu values for %zu periods", nw, n);
        }
        for (size_t i = 0; i < nw; i++)
            if (!(w[i] >= 0 && w[i] <= FLT_MAX))
                return bad_value(cfg, "lr_config.restart_weights", "must be >= 0, got %g", w[i]);
        for (size_t i = 0; i < n; i++) s->restart_weights[i] = nw ? (float)w[i] : 1.0f;
        double min_lr = 0;
        /* mmcv asserts that exactly one of min_lr and min_lr_ratio is given;
         * duet's default end is 0 (min_lr = 0). */
        if (duet_config_has(cfg, "lr_config.min_lr") &&
            duet_config_has(cfg, "lr_config.min_lr_ratio"))
            return bad_value(cfg, "lr_config.min_lr_ratio", "and min_lr are both set: give one "
                             "(as mmcv's CosineRestartLrUpdaterHook asks)");
        DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.min_lr", 0.0, 0.0, FLT_MAX, &min_lr));
        s->min_lr = (float)min_lr;
        double ratio = -1;
        DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.min_lr_ratio", -1.0, 0.0, FLT_MAX,
                                              &ratio));
        s->min_lr_ratio = (float)ratio;
    } else if (strcmp(policy, "Linear") == 0) {
        /* MMEditing's LinearLrUpdaterHook (CycleGAN's, Pix2Pix's configs). */
        s->policy = DUET_LR_LINEAR;
        double target = 0;
        DUET_TRY(duet_config_get_double_in_or(cfg, "lr_config.target_lr", 0.0, 0.0, FLT_MAX,
                                              &target));
        s->target_lr = (float)target;
        DUET_TRY(duet_config_get_int_in_or(cfg, "lr_config.start", 0, 0, r->total_iters,
                                           &s->start));
        DUET_TRY(duet_config_get_int_in_or(cfg, "lr_config.interval", 1, 1, INT64_MAX,
                                           &s->interval));
        s->max_iters = r->total_iters;
        if (s->start < s->max_iters && (s->max_iters - s->start) / s->interval == 0)
            return bad_value(cfg, "lr_config.interval", "= %lld is longer than total_iters - "
                             "start = %lld (MMEditing's hook divides by zero there)",
                             (long long)s->interval, (long long)(s->max_iters - s->start));
    } else {
        return bad_value(cfg, "lr_config.policy",
                         "= \"%s\" is not known (use Fixed, Step, CosineRestart or Linear)",
                         policy);
    }
    s->nsteps = (int)n;
    return read_warmup(cfg, s);
}

int duet__run_read_settings(duet__run *r) {
    /* Independent settings: under --dry-run a bad one is kept as a problem
     * and the next is still read (duet__run_problem). */
    duet_config *cfg = r->cfg;
    int64_t seed = 0;
    DUET_TRY(duet__run_problem(r, duet_config_get_int_or(cfg, "seed", 0, &seed)));
    r->seed = (uint64_t)seed;
    int rc = duet_config_get_int_in(cfg, "total_iters", 1, INT64_MAX, &r->total_iters);
    if (rc != DUET_OK) r->total_iters = INT64_MAX / 2; /* what follows needs some length */
    DUET_TRY(duet__run_problem(r, rc));
    DUET_TRY(duet__run_problem(r, get_interval(cfg, "log_config.interval", 50,
                                               &r->log_interval)));
    DUET_TRY(duet__run_problem(r, duet__run_check_by_epoch(cfg, "checkpoint_config")));
    DUET_TRY(duet__run_problem(r, get_interval(cfg, "checkpoint_config.interval",
                                               r->total_iters, &r->ckpt_interval)));
    DUET_TRY(duet__run_problem(r, duet_config_get_bool_or(cfg, "checkpoint_config.save_optimizer",
                                                          true, &r->save_optimizer)));
    DUET_TRY(duet__run_problem(r, duet_config_get_int_in_or(cfg, "checkpoint_config.max_keep_ckpts",
                                                            -1, -1, INT32_MAX,
                                                            &r->max_keep_ckpts)));
    DUET_TRY(duet__run_problem(r, get_interval(cfg, "evaluation.interval", 0,
                                               &r->eval_interval)));
    DUET_TRY(duet__run_problem(r, duet_config_get_bool_or(cfg, "evaluation.save_image", true,
                                                          &r->save_image)));
    DUET_TRY(duet__run_problem(r, duet_config_get_int_in_or(cfg, "evaluation.num_images", 4, 0,
                                                            4096, &r->eval_num_images)));
    rc = read_lr_config(r);
    /* A bad lr_config stops its reader midway: its other keys are not
     * unknown. */
    if (rc != DUET_OK && r->collect && duet_config_has(cfg, "lr_config"))
        duet_config_mark_used(cfg, "lr_config");
    return duet__run_problem(r, rc);
}

/* The bicubic comparison uses the model's own test settings. */
int duet__run_read_test_cfg(duet__run *r) {
    duet_config *cfg = r->cfg;
    r->test_cfg = duet_test_cfg_default();
    /* An inpaintor's metrics are MMEditing's lower-case l1, psnr, ssim; its
     * configs name l1 alone. */
    const char *type = "";
    DUET_TRY(duet_config_get_string_or(cfg, "model.type", "", &type));
    const size_t tl = strlen(type);
    const bool inpaintor = tl >= 9 && strcmp(type + tl - 9, "Inpaintor") == 0;
    if (inpaintor) r->test_cfg = (duet_test_cfg){.nmetrics = 1, .metrics = {"l1"}};
    /* MMEditing's translation models compute no metrics (their test_cfg
     * names none): PSNR and SSIM only when the config asks for them. */
    const bool translation = strcmp(type, "Pix2Pix") == 0 || strcmp(type, "CycleGAN") == 0;
    if (translation) {
        r->test_cfg.nmetrics = 0;
        const char *dir = "a2b";
        DUET_TRY(duet_config_get_string_or(cfg, "model.train_cfg.direction", "a2b", &dir));
        DUET_TRY(duet_config_get_string_or(cfg, "model.test_cfg.direction", dir, &dir));
        r->eval_b2a = strcmp(dir, "b2a") == 0; /* the model's reader checks the value */
    }
    /* The metrics evaluation logs: test_cfg's (the model checks the names). */
    if (duet_config_has(cfg, "model.test_cfg.metrics")) {
        const char *names[DUET_MAX_METRICS];
        size_t n = 0;
        DUET_TRY(duet_config_get_string_array(cfg, "model.test_cfg.metrics", names,
                                              DUET_MAX_METRICS, &n));
        for (size_t i = 0; i < n; i++) {
            static const char *const sr[2] = {"PSNR", "SSIM"}, *const inp[3] = {"l1", "psnr",
                                                                                 "ssim"};
            const char *const *known = inpaintor ? inp : sr;
            const int nknown = inpaintor ? 3 : 2;
            r->test_cfg.metrics[i] = NULL;
            for (int k = 0; k < nknown; k++)
                if (strcmp(names[i], known[k]) == 0) r->test_cfg.metrics[i] = known[k];
            if (r->test_cfg.metrics[i] == NULL)
                return bad_value(cfg, "model.test_cfg.metrics", "names '%s' (use %s)", names[i],
                                 inpaintor ? "l1, psnr, ssim" : "PSNR, SSIM");
        }
        r->test_cfg.nmetrics = (int)n;
    }
    int64_t crop = 0;
    DUET_TRY(duet_config_get_int_in_or(cfg, "model.test_cfg.crop_border", 0, 0, INT_MAX, &crop));
    r->test_cfg.crop_border = (int)crop;
    const char *conv = NULL;
    DUET_TRY(duet_config_get_string_or(cfg, "model.test_cfg.convert_to", NULL, &conv));
    r->test_cfg.convert_to = conv;
    return DUET_OK;
}

/* One dataset group, data.train or data.val, through the registry; `times`
 * (MMEditing's RepeatDataset around the training set) is read here, so that
 * any registered dataset can be repeated. */
static int build_dataset(duet__run *r, const char *path, bool train, duet_dataset **out) {
    int64_t times = 1;
    /* path is "data.train", "data.val" or "data.test" (duet__run_build_data),
     * so key, pix and set fit with room to spare. */
    char key[64];
    snprintf(key, sizeof key, "%s.times", path);
    if (train) DUET_TRY(duet_config_get_int_in_or(r->cfg, key, 1, 1, INT64_MAX, &times));
    /* The run's pixel limit (data.max_image_pixels) reaches the dataset as
     * its own key unless the dataset sets one. */
    char pix[80];
    snprintf(pix, sizeof pix, "%s.max_image_pixels", path);
    bool injected = !duet_config_has(r->cfg, pix);
    if (injected) {
        char set[128];
        snprintf(set, sizeof set, "%s=%lldL", pix, (long long)r->max_pixels);
        DUET_TRY(duet_config_set(r->cfg, set));
    }
    duet_dataset *ds = NULL;
    int rc = duet_build_dataset(r->cfg, path, train, &ds);
    /* A dataset of the user's that reads no images leaves it unread: it is
     * ours, not a typo of theirs. */
    if (injected) duet_config_mark_used(r->cfg, pix);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", duet_config_name(r->cfg));
    if (train && times > 1) {
        rc = duet_repeat_dataset_create(ds, times, &ds);
        if (rc != DUET_OK) return duet__error_context(rc, "%s", key);
    }
    *out = ds;
    return DUET_OK;
}

int duet__run_read_pixel_limit(duet__run *r) {
    int64_t v = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(r->cfg, "data.max_image_pixels",
                                       DUET_IMAGE_MAX_PIXELS_DEFAULT, 0, INT64_MAX, &v));
    return duet_image_pixel_limit(v, &r->max_pixels);
}

int duet__run_build_data(duet__run *r, bool with_train, bool need_val) {
    DUET_TRY(duet__run_read_pixel_limit(r));
    if (with_train) {
        /* MMEditing's build_dataloader: train_dataloader's samples_per_gpu
         * overrides data's. */
        if (duet_config_has(r->cfg, "data.train_dataloader.samples_per_gpu")) {
            DUET_TRY(duet_config_get_int_in(r->cfg, "data.train_dataloader.samples_per_gpu", 1,
                                            INT32_MAX, &r->samples_per_gpu));
            if (duet_config_has(r->cfg, "data.samples_per_gpu"))
                duet_config_mark_used(r->cfg, "data.samples_per_gpu");
        } else {
            DUET_TRY(duet_config_get_int_in(r->cfg, "data.samples_per_gpu", 1, INT32_MAX,
                                            &r->samples_per_gpu));
        }
        int64_t prefetch = 2;
        DUET_TRY(duet_config_get_int_in_or(r->cfg, "data.prefetch", 2, 0, 64, &prefetch));
        r->prefetch = (int)prefetch;
        int rc = build_dataset(r, "data.train", true, &r->train_set);
        /* Its reader stopped midway: the rest of the group is not unknown. */
        if (rc != DUET_OK && r->collect) duet_config_mark_used(r->cfg, "data.train");
        DUET_TRY(duet__run_problem(r, rc));
    } else {
        /* test / infer read no training data: those keys are not typos. */
        if (duet_config_has(r->cfg, "data.train")) duet_config_mark_used(r->cfg, "data.train");
        static const char *const unread[] = {"data.samples_per_gpu", "data.prefetch",
                                             "data.train_dataloader"};
        for (size_t i = 0; i < sizeof unread / sizeof unread[0]; i++)
            if (duet_config_has(r->cfg, unread[i])) duet_config_mark_used(r->cfg, unread[i]);
    }
    /* duet test evaluates data.test where the config has one, as
     * MMEditing's tools/test.py does; training evaluates data.val. */
    r->val_key = !with_train && duet_config_has(r->cfg, "data.test") ? "data.test" : "data.val";
    const char *other = strcmp(r->val_key, "data.val") == 0 ? "data.test" : "data.val";
    if (need_val) {
        int rc = build_dataset(r, r->val_key, false, &r->val_set);
        if (rc != DUET_OK && r->collect && duet_config_has(r->cfg, r->val_key))
            duet_config_mark_used(r->cfg, r->val_key);
        DUET_TRY(duet__run_problem(r, rc));
    }
    else if (duet_config_has(r->cfg, r->val_key))
        duet_config_mark_used(r->cfg, r->val_key); /* no evaluation: not read */
    if (!with_train && duet_config_has(r->cfg, other)) duet_config_mark_used(r->cfg, other);
    return DUET_OK;
}

int duet__run_build_loader(duet__run *r, duet_sampler_state start) {
    duet_loader_opts lo = duet_loader_options_default();
    lo.samples_per_gpu = r->samples_per_gpu;
    lo.world_size = r->world;
    lo.rank = r->rank;
    lo.seed = r->seed;
    lo.shuffle = true;
    lo.prefetch = r->prefetch;
    lo.start = start;
    if (r->wrapper != NULL) lo.device = duet_wrapper_device(r->wrapper);
    int rc = duet_loader_create(r->train_set, &lo, &r->loader);
    if (rc != DUET_OK) return duet__error_context(rc, "data.train");
    return DUET_OK;
}

void duet__run_apply_lr(duet__run *r, int64_t iter) {
    size_t n = duet_optimizer_set_count(r->opts);
    for (size_t i = 0; i < n; i++) {
        duet_optimizer *o = duet_optimizer_set_at(r->opts, i);
        duet_optimizer_set_lr(o, duet_lr_at(&r->sched, duet_optimizer_base_lr(o), iter));
    }
}
