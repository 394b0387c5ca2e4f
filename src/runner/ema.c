/* MMEditing's ExponentialMovingAverageHook (mmedit/core/hooks/ema.py) for
 * the runner:
 *
 *   custom_hooks = ( { type = "ExponentialMovingAverageHook";
 *                      module_keys = ["generator_ema"]; interval = 1;
 *                      interp_cfg = { momentum = 0.999; }; } );
 *
 * before_run: a model without generator_ema gets a copy of its generator.
 * after_train_iter (runner.iter = the 0-based iteration just done): before
 * start_iter the copy takes the generator's state; from then on, every
 * `interval` iterations (never when interval <= 0, MMEditing's default -1),
 * ema = generator + (ema - generator) * momentum (duet_ema_update).
 *
 * The copy is a frozen part of the model, so it has no DDP and no
 * optimizer, is checkpointed as generator_ema.* and resumed with the model,
 * and forward / val_step use it (duet_model_forward). Every rank updates its
 * own copy from its own generator: DDP keeps the generators bit-identical,
 * so the copies are too, without communication. */
#include <string.h>

#include "runner/runner_internal.h"

static int bad_hook(duet__run *r, const char *path, const char *what) {
    return duet_config_error(r->cfg, path, "'%s' %s", path, what);
}

void duet__run_clear_ema(duet__run *r) {
    for (int i = 0; i < r->ema.n; i++) free(r->ema.keys[i]);
    free(r->ema.keys);
    free(r->ema.created);
    r->ema.keys = NULL;
    r->ema.created = NULL;
    r->ema.n = 0;
}

/* module_keys (a string or an array of them) into r->ema.keys. */
static int read_keys(duet__run *r, duet_config *h, const char *path) {
    const char **keys = NULL;
    size_t n = 1;
    if (duet_config_kind(h, "module_keys") != DUET_CONFIG_STRING)
        DUET_TRY(duet_config_length(h, "module_keys", &n));
    keys = calloc(n > 0 ? n : 1, sizeof *keys);
    r->ema.keys = calloc(n > 0 ? n : 1, sizeof *r->ema.keys);
    r->ema.created = calloc(n > 0 ? n : 1, sizeof *r->ema.created);
    int rc = keys != NULL && r->ema.keys != NULL && r->ema.created != NULL
                 ? DUET_OK
                 : duet__error(DUET_ENOMEM, "custom_hooks: out of memory");
    if (rc == DUET_OK && duet_config_kind(h, "module_keys") == DUET_CONFIG_STRING)
        rc = duet_config_get_string(h, "module_keys", &keys[0]);
    else if (rc == DUET_OK)
        rc = duet_config_get_string_array(h, "module_keys", keys, n, &n);
    for (size_t i = 0; i < n && rc == DUET_OK; i++) {
        size_t len = strlen(keys[i]);
        if (len <= 4 || strcmp(keys[i] + len - 4, "_ema") != 0) {
            rc = bad_hook(r, path, "module_keys: give names that end with \"_ema\" "
                          "(generator_ema: the average of generator)");
        } else if ((r->ema.keys[i] = duet__strdup(keys[i])) == NULL) {
            rc = duet__error(DUET_ENOMEM, "custom_hooks: out of memory");
        } else {
            r->ema.n = (int)i + 1; /* so that clear frees what is there */
        }
    }
    free(keys);
    return rc;
}

static int read_one(duet__run *r, duet_config *h, const char *path) {
    const char *type = NULL;
    DUET_TRY(duet_config_get_string(h, "type", &type));
    if (strcmp(type, "ExponentialMovingAverageHook") != 0) {
        char *p = duet__strf("%s.type", path);
        int rc = p == NULL ? duet__error(DUET_ENOMEM, "custom_hooks: out of memory")
                           : bad_hook(r, p, "is not a hook duet knows "
                                      "(ExponentialMovingAverageHook)");
        free(p);
        return rc;
    }
    if (r->ema.n > 0)
        return bad_hook(r, path, "is a second ExponentialMovingAverageHook: give all "
                        "module_keys to one");
    DUET_TRY(read_keys(r, h, path));
    const char *mode = "lerp";
    DUET_TRY(duet_config_get_string_or(h, "interp_mode", "lerp", &mode));
    if (strcmp(mode, "lerp") != 0)
        return bad_hook(r, path, "interp_mode: duet has \"lerp\" only");
    double mom = 0.999, mom_nt = 0.0;
    DUET_TRY(duet_config_get_double_or(h, "interp_cfg.momentum", 0.999, &mom));
    DUET_TRY(duet_config_get_double_or(h, "interp_cfg.momentum_nontrainable", 0.0, &mom_nt));
    DUET_TRY(duet_config_get_int_or(h, "interval", -1, &r->ema.interval));
    DUET_TRY(duet_config_get_int_or(h, "start_iter", 0, &r->ema.start_iter));
    r->ema.momentum = (float)mom;
    r->ema.momentum_nontrainable = (float)mom_nt;
    return DUET_OK;
}

int duet__run_read_ema(duet__run *r) {
    duet__run_clear_ema(r);
    if (!duet_config_has(r->cfg, "custom_hooks")) return DUET_OK;
    size_t n = 0;
    DUET_TRY(duet_config_length(r->cfg, "custom_hooks", &n));
    for (size_t i = 0; i < n; i++) {
        char path[64]; /* "custom_hooks.[i]": 16 characters and a size_t's 20 digits */
        snprintf(path, sizeof path, "custom_hooks.[%zu]", i);
        duet_config *h = NULL;
        DUET_TRY(duet_config_sub(r->cfg, path, &h));
        int rc = read_one(r, h, path);
        duet_config_destroy(h);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

/* The key without "_ema" (read_keys checked the suffix), malloc'd; NULL
 * when out of memory. */
static char *base_name(const char *key) { return duet__strf("%.*s", (int)(strlen(key) - 4), key); }

static int copy_state(duet_module *dst, duet_module *src) {
    return duet_ema_update(dst, src, 0.0f, 0.0f); /* m = 0: an exact copy */
}

/* Model part ema_keys[i] as a frozen copy of the part it averages, unless
 * the model has its own. */
static int add_one(duet__run *r, duet_model *model, int i, char *base) {
    const char *key = r->ema.keys[i];
    if (duet_model_part(model, key) != NULL) return DUET_OK; /* the model's own */
    duet_module *net = duet_model_part(model, base);
    if (net == NULL)
        return duet__error(DUET_ECONFIG, "custom_hooks: ExponentialMovingAverageHook "
                           "averages '%s', but the model (%s) has neither it nor '%s'", key,
                           duet_model_type_name(model), base);
    /* MMEditing deep-copies the network; duet builds it again from its
     * config group (own generator, so the model's init draws are
     * untouched) and copies the state in. */
    char *path = duet__strf("model.%s", base);
    if (path == NULL) return duet__error(DUET_ENOMEM, "custom_hooks: out of memory");
    duet_rng rng = duet_rng_make(r->seed, 0xe3a);
    duet_module *copy = NULL;
    int rc = duet_build_module(r->cfg, path, &rng, &copy);
    if (rc != DUET_OK) rc = duet__error_context(rc, "custom_hooks: making %s as a copy of %s", key, path);
    free(path);
    DUET_TRY(rc);
    rc = copy_state(copy, net);
    if (rc == DUET_OK) {
        duet_module_set_requires_grad(copy, false);
        rc = duet_module_add_child(duet_model_module(model), key, copy);
    } else {
        duet_module_destroy(copy);
    }
    DUET_TRY(rc);
    r->ema.created[i] = true;
    return DUET_OK;
}

int duet__run_add_ema(duet__run *r, duet_model *model) {
    for (int i = 0; i < r->ema.n; i++) {
        r->ema.created[i] = false;
        char *base = base_name(r->ema.keys[i]);
        int rc = base != NULL ? add_one(r, model, i, base)
                              : duet__error(DUET_ENOMEM, "custom_hooks: out of memory");
        free(base);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

int duet__run_ema_sync(duet__run *r) {
    for (int i = 0; i < r->ema.n; i++) {
        if (!r->ema.created[i]) continue;
        char *base = base_name(r->ema.keys[i]);
        int rc = base != NULL ? copy_state(duet_model_part(r->model, r->ema.keys[i]),
                                           duet_model_part(r->model, base))
                              : duet__error(DUET_ENOMEM, "custom_hooks: out of memory");
        free(base);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

int duet__run_ema_after_iter(duet__run *r, int64_t iter) {
    if (r->ema.n == 0) return DUET_OK;
    bool before = iter < r->ema.start_iter;
    if (!before && (r->ema.interval <= 0 || (iter + 1 - r->ema.start_iter) % r->ema.interval != 0))
        return DUET_OK;
    for (int i = 0; i < r->ema.n; i++) {
        char *base = base_name(r->ema.keys[i]);
        if (base == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", r->ema.keys[i]);
        duet_module *ema = duet_model_part(r->model, r->ema.keys[i]);
        duet_module *net = duet_model_part(r->model, base);
        free(base);
        int rc = before ? copy_state(ema, net)
                        : duet_ema_update(ema, net, r->ema.momentum,
                                          r->ema.momentum_nontrainable);
        if (rc != DUET_OK) return duet__error_context(rc, "%s", r->ema.keys[i]);
    }
    return DUET_OK;
}
