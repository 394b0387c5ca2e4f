/* The model contract: batches, named log values, the optimizer set keyed by
 * part, and the model handle that dispatches forward / train_step /
 * val_step to its type. */
#include "models/models_internal.h"
#include "duet/comm.h"
#include "duet/ddp.h"

#include <inttypes.h>
#include <string.h>

/* ---- log values ------------------------------------------------------------ */

void duet_log_vars_clear(duet_log_vars *lv) {
    if (lv != NULL) lv->count = 0;
}

int duet__log_scalar(duet_log_vars *log, const char *name, const duet_tensor *t) {
    if (t->numel != 1)
        return duet__error(DUET_ESHAPE, "log '%s': a loss of %lld elements, not one", name,
                           (long long)t->numel);
    float v = 0;
    DUET_TRY(duet_tensor_copy_to_host(t, &v));
    return duet_log_vars_set(log, name, v);
}

int duet__log_total(duet_log_vars *log, int from) {
    double sum = 0;
    for (int i = from; i < log->count; i++)
        if (strstr(log->names[i], "loss") != NULL && strcmp(log->names[i], "loss") != 0)
            sum += log->values[i];
    return duet_log_vars_set(log, "loss", sum);
}

int duet_log_vars_set(duet_log_vars *lv, const char *name, double value) {
    for (int i = 0; i < lv->count; i++) {
        if (strcmp(lv->names[i], name) == 0) {
            lv->values[i] = value;
            return DUET_OK;
        }
    }
    if (strlen(name) >= DUET_LOG_VAR_NAME_MAX)
        return duet__error(DUET_EINVAL, "log values: name '%s' is longer than %d characters",
                           name, DUET_LOG_VAR_NAME_MAX - 1);
    if (lv->count == DUET_LOG_VARS_MAX)
        return duet__error(DUET_EINVAL, "log values: more than %d values (adding '%s')",
                           DUET_LOG_VARS_MAX, name);
    strcpy(lv->names[lv->count], name);
    lv->values[lv->count] = value;
    lv->count++;
    return DUET_OK;
}

bool duet_log_vars_get(const duet_log_vars *lv, const char *name, double *value) {
    for (int i = 0; i < lv->count; i++) {
        if (strcmp(lv->names[i], name) == 0) {
            *value = lv->values[i];
            return true;
        }
    }
    return false;
}

/* FNV-1a over the names in order: ranks that disagree on what they log
 * would otherwise average unrelated numbers. */
static uint64_t names_hash(const duet_log_vars *lv) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < lv->count; i++)
        for (const char *c = lv->names[i]; ; c++) {
            h = (h ^ (uint8_t)*c) * 1099511628211ull;
            if (*c == '\0') break;
        }
    return h;
}

int duet_log_vars_average(duet_log_vars *lv, duet_comm *comm) {
    if (comm == NULL || duet_comm_size(comm) == 1) return DUET_OK;
    int size = duet_comm_size(comm);
    uint64_t mine[2] = {(uint64_t)lv->count, names_hash(lv)};
    uint64_t *all = malloc((size_t)size * sizeof mine);
    if (all == NULL) return duet__error(DUET_ENOMEM, "log values: out of memory");
    int rc = duet_comm_allgather(comm, mine, all, 2, DUET_DTYPE_U64);
    for (int r = 0; r < size && rc == DUET_OK; r++)
        if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1])
            rc = duet__error(DUET_EMISMATCH,
                             "log values: rank %d logs %d values and rank %d logs %llu values "
                             "(or other names); every rank must log the same names in the same "
                             "order", duet_comm_rank(comm), lv->count, r,
                             (unsigned long long)all[2 * r]);
    free(all);
    DUET_TRY(rc);
    if (lv->count == 0) return DUET_OK;
    DUET_TRY(duet_comm_allreduce(comm, lv->values, (size_t)lv->count, DUET_DTYPE_F64,
                                 DUET_REDUCE_SUM));
    for (int i = 0; i < lv->count; i++) lv->values[i] /= size;
    return DUET_OK;
}

/* ---- optimizer set ------------------------------------------------------------ */

struct duet_optimizer_set {
    size_t count;
    char **names;
    duet_optimizer **opts;
};

int duet_optimizer_set_create(duet_optimizer_set **out) {
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return duet__error(DUET_ENOMEM, "optimizer set: out of memory");
    return DUET_OK;
}

void duet_optimizer_set_destroy(duet_optimizer_set *s) {
    if (s == NULL) return;
    for (size_t i = 0; i < s->count; i++) {
        free(s->names[i]);
        duet_optimizer_destroy(s->opts[i]);
    }
    free(s->names);
    free(s->opts);
    free(s);
}

int duet_optimizer_set_add(duet_optimizer_set *s, const char *name, duet_optimizer *opt) {
    if (duet_optimizer_set_get(s, name) != NULL) {
        duet_optimizer_destroy(opt);
        return duet__error(DUET_EINVAL, "optimizer set: there is already an optimizer for '%s'",
                           name);
    }
    char **names = realloc(s->names, (s->count + 1) * sizeof *names);
    if (names != NULL) s->names = names;
    duet_optimizer **opts = realloc(s->opts, (s->count + 1) * sizeof *opts);
    if (opts != NULL) s->opts = opts;
    char *n = duet__strdup(name);
    if (names == NULL || opts == NULL || n == NULL) {
        free(n);
        duet_optimizer_destroy(opt);
        return duet__error(DUET_ENOMEM, "optimizer set: out of memory adding '%s'", name);
    }
    s->names[s->count] = n;
    s->opts[s->count] = opt;
    s->count++;
    return DUET_OK;
}

static int part_params(duet_model *model, const char *child, duet_named_tensors *params) {
    duet_module *part = duet_model_part(model, child);
    if (part == NULL)
        return duet__error(DUET_ENOTFOUND, "optimizer set: model %s has no part '%s'",
                           duet_model_type_name(model), child);
    /* All parameters, as torch.optim over model.<child>.parameters(): a
     * part that is frozen for a moment (set_requires_grad) keeps its
     * optimizer state. */
    DUET_TRY(duet_module_named_parameters(part, false, params));
    if (params->count == 0) {
        duet_named_tensors_clear(params);
        return duet__error(DUET_EINVAL, "optimizer set: part '%s' of %s has no parameters",
                           child, duet_model_type_name(model));
    }
    return DUET_OK;
}

int duet_optimizer_set_add_adam(duet_optimizer_set *s, duet_model *model, const char *child,
                                const duet_adam_opts *opts) {
    duet_named_tensors params = {0};
    DUET_TRY(part_params(model, child, &params));
    duet_optimizer *opt = NULL;
    int rc = duet_adam_create(&params, opts, &opt);
    duet_named_tensors_clear(&params);
    DUET_TRY(rc);
    return duet_optimizer_set_add(s, child, opt);
}

int duet_optimizer_set_add_sgd(duet_optimizer_set *s, duet_model *model, const char *child,
                               const duet_sgd_opts *opts) {
    duet_named_tensors params = {0};
    DUET_TRY(part_params(model, child, &params));
    duet_optimizer *opt = NULL;
    int rc = duet_sgd_create(&params, opts, &opt);
    duet_named_tensors_clear(&params);
    DUET_TRY(rc);
    return duet_optimizer_set_add(s, child, opt);
}

duet_optimizer *duet_optimizer_set_get(const duet_optimizer_set *s, const char *name) {
    for (size_t i = 0; i < s->count; i++)
        if (strcmp(s->names[i], name) == 0) return s->opts[i];
    return NULL;
}

int duet_optimizer_set_require(const duet_optimizer_set *s, const char *name,
                               duet_optimizer **out) {
    *out = duet_optimizer_set_get(s, name);
    if (*out != NULL) return DUET_OK;
    duet__str have = {0};
    for (size_t i = 0; i < s->count; i++) duet__str_add_item(&have, ", ", "%s", s->names[i]);
    int rc = duet__error(DUET_ENOTFOUND,
                         "optimizer set: no optimizer for '%s' (the set has: %s); configure "
                         "optimizers.%s",
                         name, s->count ? duet__str_get(&have) : "none", name);
    duet__str_free(&have);
    return rc;
}

size_t duet_optimizer_set_count(const duet_optimizer_set *s) { return s->count; }

const char *duet_optimizer_set_name(const duet_optimizer_set *s, size_t i) {
    return i < s->count ? s->names[i] : NULL;
}

duet_optimizer *duet_optimizer_set_at(const duet_optimizer_set *s, size_t i) {
    return i < s->count ? s->opts[i] : NULL;
}

/* ---- models ------------------------------------------------------------------- */

struct duet_model {
    const duet_model_ops *ops;
    void *impl;
    duet_module *root;
    duet_module *outer; /* owns root when set (a DDP around the model) */
    duet_comm *comm;
    bool in_train_step; /* ops->train_step is running: duet_model_comm is NULL */
    int ema_depth;      /* nested forward / val_step calls with the EMA parts swapped in */
};

void duet_val_output_clear(duet_val_output *v) {
    if (v == NULL) return;
    duet_tensor_release(v->output);
    v->output = NULL;
    v->nsamples = 0;
    duet_log_vars_clear(&v->metrics);
}

int duet_model_create(const duet_model_ops *ops, void *impl, duet_module *root,
                      duet_model **out) {
    DUET_ASSERT(ops != NULL && root != NULL);
    *out = calloc(1, sizeof **out);
    if (*out == NULL) {
        if (ops->destroy != NULL) ops->destroy(impl);
        duet_module_destroy(root);
        return duet__error(DUET_ENOMEM, "model %s: out of memory", ops->name);
    }
    (*out)->ops = ops;
    (*out)->impl = impl;
    (*out)->root = root;
    return DUET_OK;
}

void duet_model_destroy(duet_model *m) {
    if (m == NULL) return;
    if (m->ops->destroy != NULL) m->ops->destroy(m->impl);
    duet_module_destroy(m->outer != NULL ? m->outer : m->root);
    free(m);
}

duet_module *duet_model_module(duet_model *m) { return m->root; }

void duet_model_set_outer(duet_model *m, duet_module *outer) {
    if (outer == NULL) m->root = NULL;
    m->outer = outer;
}

void *duet_model_impl(duet_model *m) { return m->impl; }
const char *duet_model_type_name(const duet_model *m) { return m->ops->name; }

duet_module *duet_model_part(duet_model *m, const char *name) {
    return m->root != NULL ? duet_module_child(m->root, name) : NULL;
}

static bool has_trainable_param(duet_module *part) {
    for (size_t i = 0; i < duet_module_param_count(part); i++)
        if (duet_module_param_at(part, i)->requires_grad) return true;
    for (size_t i = 0; i < duet_module_child_count(part); i++)
        if (has_trainable_param(duet_module_child_at(part, i))) return true;
    return false;
}

/* Part i of the evaluation parts, or NULL past the end; *count gets their
 * number when i is out of range. */
static const char *eval_part(duet_model *m, size_t i, size_t *count) {
    size_t n = 0;
    if (m->ops->eval_parts != NULL) {
        for (; m->ops->eval_parts[n] != NULL; n++)
            if (n == i) return m->ops->eval_parts[n];
    } else if (m->root != NULL) {
        for (size_t c = 0; c < duet_module_child_count(m->root); c++) {
            if (!has_trainable_param(duet_module_child_at(m->root, c))) continue;
            if (n++ == i) return duet_module_child_name_at(m->root, c);
        }
    }
    *count = n;
    return NULL;
}

size_t duet_model_eval_part_count(duet_model *m) {
    size_t n = 0;
    eval_part(m, SIZE_MAX, &n);
    return n;
}

const char *duet_model_eval_part_at(duet_model *m, size_t i) {
    size_t n = 0;
    return eval_part(m, i, &n);
}

void duet_model_set_comm(duet_model *m, duet_comm *comm) { m->comm = comm; }
/* Inside train_step the dispatcher owns the averaging: a model that still
 * averages its log values itself gets NULL, so its call does nothing and
 * the values go over the network once. */
duet_comm *duet_model_comm(const duet_model *m) { return m->in_train_step ? NULL : m->comm; }

int duet_model_save_state(duet_model *m, duet_st_writer *w) {
    if (m->ops->save_state == NULL) return DUET_OK;
    int rc = m->ops->save_state(m, w);
    if (rc != DUET_OK) duet__error_context(rc, "%s.save_state", m->ops->name);
    return rc;
}

int duet_model_load_state(duet_model *m, const duet_st *ckpt) {
    if (m->ops->load_state == NULL) return DUET_OK;
    int rc = m->ops->load_state(m, ckpt);
    if (rc != DUET_OK) duet__error_context(rc, "%s.load_state", m->ops->name);
    return rc;
}

/* ---- exponential moving averages --------------------------------------------------- */

int duet_ema_update(duet_module *ema, duet_module *net, float momentum,
                    float momentum_nontrainable) {
    duet_named_tensors e = {0}, n = {0};
    int rc = duet_module_state(ema, &e);
    if (rc == DUET_OK) rc = duet_module_state(net, &n);
    if (rc == DUET_OK && e.count != n.count)
        rc = duet__error(DUET_ESHAPE, "EMA: the copy has %zu state entries, the network %zu",
                         e.count, n.count);
    for (size_t i = 0; i < n.count && rc == DUET_OK; i++) {
        duet_tensor *a = n.items[i].tensor, *b = e.items[i].tensor;
        if (strcmp(n.items[i].name, e.items[i].name) != 0 || a->numel != b->numel)
            rc = duet__error(DUET_ESHAPE, "EMA: entry %zu is '%s' (%" PRId64 " values) in the "
                             "network but '%s' (%" PRId64 ") in the copy", i, n.items[i].name,
                             a->numel, e.items[i].name, b->numel);
        /* MMEditing's lerp(a=net, b=ema): a + (b - a) * m, in float32 as
         * torch computes it; buffers and frozen parameters use the
         * non-trainable momentum (0: copied). */
        float mom = a->requires_grad ? momentum : momentum_nontrainable;
        if (rc != DUET_OK) break;
        if (mom == 0.0f) { /* a + (b - a) * 0 is a, NaN aside */
            rc = duet_tensor_copy(b, a);
            continue;
        }
        /* On the host: in place on the CPU, through copies on a device. */
        const float *ad = NULL;
        float *bd = NULL;
        rc = duet_tensor_map_read(a, &ad);
        if (rc == DUET_OK) rc = duet_tensor_map_write(b, true, &bd);
        for (int64_t k = 0; rc == DUET_OK && k < a->numel; k++)
            bd[k] = ad[k] + (bd[k] - ad[k]) * mom;
        duet_tensor_unmap_read(a, ad);
        int urc = duet_tensor_unmap_write(b, bd);
        if (rc == DUET_OK) rc = urc;
    }
    duet_named_tensors_clear(&e);
    duet_named_tensors_clear(&n);
    return rc;
}

/* Swaps every part P with its moving average P_ema when the model has
 * both (MMEditing's forward_test with generator_ema); a second call swaps
 * back. */
static void swap_ema_parts(duet_model *m) {
    duet_module *root = m->root;
    if (root == NULL) return;
    for (size_t i = 0; i < duet_module_child_count(root); i++) {
        const char *name = duet_module_child_name_at(root, i);
        size_t len = strlen(name);
        if (len <= 4 || strcmp(name + len - 4, "_ema") != 0) continue;
        for (size_t j = 0; j < duet_module_child_count(root); j++) {
            const char *base = duet_module_child_name_at(root, j);
            if (strlen(base) != len - 4 || strncmp(base, name, len - 4) != 0) continue;
            duet_module_swap_children(root, i, j);
        }
    }
}

static void ema_enter(duet_model *m) {
    if (m->ema_depth++ == 0) swap_ema_parts(m);
}

static void ema_leave(duet_model *m) {
    if (--m->ema_depth == 0) swap_ema_parts(m);
}

const char *duet_model_input_key(duet_model *m) {
    return m->ops->input_key != NULL ? m->ops->input_key(m) : "lq";
}

int duet_model_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    *out = NULL;
    if (m->ops->forward == NULL)
        return duet__error(DUET_EUNSUPPORTED, "model %s has no forward", m->ops->name);
    ema_enter(m);
    int rc = m->ops->forward(m, lq, out);
    ema_leave(m);
    return rc;
}

int duet_model_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                          duet_log_vars *log) {
    duet_log_vars_clear(log);
    if (m->ops->train_step == NULL)
        return duet__error(DUET_EUNSUPPORTED, "model %s has no train_step", m->ops->name);
    m->in_train_step = true;
    int rc = m->ops->train_step(m, batch, opts, log);
    m->in_train_step = false;
    if (rc != DUET_OK) return duet__error_context(rc, "%s.train_step", m->ops->name);
    /* MMEditing's parse_losses: every rank reports the means over the job.
     * Done here, not by each model, so that no model can leave the other
     * ranks waiting in an allreduce it forgot (or make them disagree on
     * when to stop: a NaN on one rank is a NaN on all). */
    rc = duet_log_vars_average(log, m->comm);
    if (rc != DUET_OK) duet__error_context(rc, "%s.train_step: log values", m->ops->name);
    return rc;
}

bool duet_model_can_validate(const duet_model *m) { return m->ops->val_step != NULL; }

int duet_model_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    duet_val_output_clear(out);
    if (m->ops->val_step == NULL)
        return duet__error(DUET_EUNSUPPORTED, "model %s has no val_step", m->ops->name);
    bool was_training = duet_module_is_training(m->root);
    bool prev = duet_set_grad_enabled(false);
    duet_module_train(m->root, false);
    ema_enter(m);
    int rc = m->ops->val_step(m, batch, out);
    ema_leave(m);
    duet_module_train(m->root, was_training);
    duet_set_grad_enabled(prev);
    if (rc != DUET_OK) {
        duet__error_context(rc, "%s.val_step", m->ops->name);
        duet_val_output_clear(out);
    }
    return rc;
}

/* ---- helpers every model shares (models_internal.h) ------------------------------ */

int duet__need_part(duet_model *m, const char *name, duet_module **out) {
    *out = duet_model_part(m, name);
    if (*out == NULL)
        return duet__error(DUET_ESTATE, "%s: the model has no part '%s'",
                           duet_model_type_name(m), name);
    return DUET_OK;
}

bool duet__part_set_no_sync(duet_module *part, bool no_sync) {
    return duet_ddp_set_no_sync(part, no_sync);
}

int duet__generator_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    duet_module *g = duet_module_child(self, "generator");
    if (g == NULL)
        return duet__error(DUET_ESTATE, "%s has no generator", duet_module_type_name(self));
    return duet_module_forwardn(g, nin, in, out);
}
