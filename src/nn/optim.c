/* Adam and SGD with the update rules of torch.optim (single-tensor code
 * path), and their state in safetensors files. */
#include "duet/nn.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

typedef enum optim_kind { OPTIM_ADAM, OPTIM_SGD } optim_kind;

struct duet_optimizer {
    optim_kind kind;
    duet_adam_opts adam;
    duet_sgd_opts sgd;
    float lr, base_lr;
    int64_t steps; /* calls to duet_optimizer_step */
    size_t n;
    char **names;           /* owned copies of the parameter names */
    duet_tensor **params;   /* borrowed */
    /* Per-parameter state, like torch's optimizer.state[p]: Adam's step
     * count, exp_avg and exp_avg_sq; SGD's momentum_buffer (has_buf false
     * while torch's buffer would still be None). */
    int64_t *pstep;
    duet_tensor **m1;
    duet_tensor **m2;
    bool *has_buf;
};

duet_adam_opts duet_adam_opts_default(void) {
    return (duet_adam_opts){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .weight_decay = 0.0f};
}

duet_sgd_opts duet_sgd_opts_default(void) {
    return (duet_sgd_opts){.lr = 1e-3f, .momentum = 0.0f, .dampening = 0.0f,
                           .weight_decay = 0.0f, .nesterov = false};
}

void duet_optimizer_destroy(duet_optimizer *opt) {
    if (opt == NULL) return;
    for (size_t i = 0; i < opt->n; i++) {
        if (opt->names != NULL) free(opt->names[i]);
        if (opt->m1 != NULL) duet_tensor_release(opt->m1[i]);
        if (opt->m2 != NULL) duet_tensor_release(opt->m2[i]);
    }
    free(opt->names);
    free(opt->params);
    free(opt->pstep);
    free(opt->m1);
    free(opt->m2);
    free(opt->has_buf);
    free(opt);
}

static int optimizer_create(duet_optimizer **out, const duet_named_tensors *params, optim_kind kind,
                            bool second_moment) {
    *out = NULL;
    const char *what = kind == OPTIM_ADAM ? "Adam" : "SGD";
    duet_optimizer *o = calloc(1, sizeof *o);
    if (o == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    o->kind = kind;
    size_t n = params->count;
    o->names = calloc(n + 1, sizeof *o->names);
    o->params = calloc(n + 1, sizeof *o->params);
    o->pstep = calloc(n + 1, sizeof *o->pstep);
    o->m1 = calloc(n + 1, sizeof *o->m1);
    o->m2 = calloc(n + 1, sizeof *o->m2);
    o->has_buf = calloc(n + 1, sizeof *o->has_buf);
    if (!o->names || !o->params || !o->pstep || !o->m1 || !o->m2 || !o->has_buf) {
        duet_optimizer_destroy(o);
        return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    }
    o->n = n;
    for (size_t i = 0; i < n; i++) {
        const duet_named_tensor *p = &params->items[i];
        if (p->tensor == NULL) {
            duet_optimizer_destroy(o);
            return duet__error(DUET_EINVAL, "%s: parameter %zu (%s) is NULL", what, i,
                               p->name ? p->name : "?");
        }
        for (size_t j = 0; j < i; j++)
            if (params->items[j].tensor == p->tensor) {
                duet_optimizer_destroy(o);
                return duet__error(DUET_EINVAL, "%s: parameter %s appears twice (also as %s)",
                                   what, p->name, params->items[j].name);
            }
        size_t len = strlen(p->name) + 1;
        o->names[i] = malloc(len);
        int rc = o->names[i] != NULL ? duet_tensor_create_like(p->tensor, &o->m1[i]) : DUET_ENOMEM;
        if (rc == DUET_OK && second_moment) rc = duet_tensor_create_like(p->tensor, &o->m2[i]);
        if (rc != DUET_OK) {
            duet_optimizer_destroy(o);
            return duet__error(DUET_ENOMEM, "%s: out of memory for the state of %s", what, p->name);
        }
        memcpy(o->names[i], p->name, len);
        o->params[i] = p->tensor;
    }
    *out = o;
    return DUET_OK;
}

int duet_adam_create(const duet_named_tensors *params, const duet_adam_opts *options,
                     duet_optimizer **out) {
    *out = NULL;
    const duet_adam_opts opts = options != NULL ? *options : duet_adam_opts_default();
    if (!(opts.lr >= 0.0f) || !(opts.eps >= 0.0f) || !(opts.beta1 >= 0.0f && opts.beta1 < 1.0f) ||
        !(opts.beta2 >= 0.0f && opts.beta2 < 1.0f) || !(opts.weight_decay >= 0.0f))
        return duet__error(DUET_EINVAL, "Adam: lr %g, betas (%g, %g), eps %g, weight_decay %g: "
                           "need lr, eps, weight_decay >= 0 and betas in [0, 1)",
                           (double)opts.lr, (double)opts.beta1, (double)opts.beta2,
                           (double)opts.eps, (double)opts.weight_decay);
    DUET_TRY(optimizer_create(out, params, OPTIM_ADAM, true));
    (*out)->adam = opts;
    (*out)->lr = (*out)->base_lr = opts.lr;
    return DUET_OK;
}

int duet_sgd_create(const duet_named_tensors *params, const duet_sgd_opts *options,
                    duet_optimizer **out) {
    *out = NULL;
    const duet_sgd_opts opts = options != NULL ? *options : duet_sgd_opts_default();
    if (!(opts.lr >= 0.0f) || !(opts.momentum >= 0.0f) || !(opts.weight_decay >= 0.0f))
        return duet__error(DUET_EINVAL, "SGD: lr %g, momentum %g, weight_decay %g: all must be "
                           ">= 0", (double)opts.lr, (double)opts.momentum,
                           (double)opts.weight_decay);
    if (opts.nesterov && (opts.momentum <= 0.0f || opts.dampening != 0.0f))
        return duet__error(DUET_EINVAL, "SGD: Nesterov momentum requires a momentum > 0 and "
                           "dampening 0 (momentum %g, dampening %g)", (double)opts.momentum,
                           (double)opts.dampening);
    DUET_TRY(optimizer_create(out, params, OPTIM_SGD, false));
    (*out)->sgd = opts;
    (*out)->lr = (*out)->base_lr = opts.lr;
    return DUET_OK;
}

/* torch.optim.Adam over the parameters that have a gradient: their step
 * counts advance and one duet_adam_update (duet/ops.h) updates them all, on
 * their device (one fused kernel on a GPU). */
static int adam_step(duet_optimizer *o) {
    duet_tensor **lists = malloc(3 * (o->n + 1) * sizeof *lists);
    int64_t *steps = malloc((o->n + 1) * sizeof *steps);
    if (lists == NULL || steps == NULL) {
        free(lists);
        free(steps);
        return duet__error(DUET_ENOMEM, "Adam: out of memory for the step's lists");
    }
    duet_tensor **p = lists, **m = lists + o->n + 1, **v = lists + 2 * (o->n + 1);
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        /* PyTorch skips parameters whose .grad is None; a frozen parameter
         * (requires_grad false) gets no gradient there either. */
        if (!duet_tensor_has_grad(o->params[i]) || !o->params[i]->requires_grad) continue;
        p[k] = o->params[i];
        m[k] = o->m1[i];
        v[k] = o->m2[i];
        steps[k++] = ++o->pstep[i];
    }
    const duet_adam_hparams hp = {.lr = o->lr, .beta1 = o->adam.beta1, .beta2 = o->adam.beta2,
                                  .eps = o->adam.eps, .weight_decay = o->adam.weight_decay};
    int rc = duet_adam_update(k, p, m, v, steps, &hp);
    free(lists);
    free(steps);
    return rc == DUET_OK ? DUET_OK : duet__error_context(rc, "Adam");
}

/* torch.optim.SGD for one tensor: grad += wd * p; with momentum the buffer
 * starts as a copy of the first gradient, then buf = momentum * buf +
 * (1 - dampening) * grad; Nesterov uses grad + momentum * buf; p -= lr * d. */
static int sgd_update(duet_optimizer *o, size_t i) {
    const duet_sgd_opts *s = &o->sgd;
    duet_tensor *p = o->params[i];
    /* On the host: in place on the CPU, through copies on a device (there
     * is no SGD op; the GAN models all use Adam's). */
    float *x = NULL, *buf = NULL;
    const float *g = NULL;
    int rc = duet_tensor_map_write(p, true, &x);
    if (rc == DUET_OK) rc = duet_tensor_map_write(o->m1[i], true, &buf);
    if (rc == DUET_OK) rc = duet_tensor_grad_map_read(p, &g);
    if (rc != DUET_OK) goto done;
    float wd = s->weight_decay, mom = s->momentum, damp = 1.0f - s->dampening, lr = o->lr;
    bool first = !o->has_buf[i];
    o->pstep[i]++;
    for (int64_t j = 0; j < p->numel; j++) {
        float d = wd != 0.0f ? g[j] + wd * x[j] : g[j];
        if (mom != 0.0f) {
            buf[j] = first ? d : buf[j] * mom + damp * d;
            d = s->nesterov ? d + mom * buf[j] : buf[j];
        }
        x[j] = x[j] - lr * d;
    }
    if (mom != 0.0f) o->has_buf[i] = true;
done:
    duet_tensor_unmap_read(p, g);
    int urc = duet_tensor_unmap_write(o->m1[i], buf);
    if (rc == DUET_OK) rc = urc;
    urc = duet_tensor_unmap_write(p, x);
    if (rc == DUET_OK) rc = urc;
    return rc;
}

int duet_optimizer_step(duet_optimizer *opt) {
    if (opt->kind == OPTIM_ADAM) {
        DUET_TRY(adam_step(opt));
    } else {
        for (size_t i = 0; i < opt->n; i++) {
            duet_tensor *p = opt->params[i];
            /* PyTorch skips parameters whose .grad is None; a frozen
             * parameter (requires_grad false) gets no gradient there either. */
            if (!duet_tensor_has_grad(p) || !p->requires_grad) continue;
            DUET_TRY(sgd_update(opt, i));
        }
    }
    opt->steps++;
    return DUET_OK;
}

void duet_optimizer_zero_grad(duet_optimizer *opt) {
    for (size_t i = 0; i < opt->n; i++) duet_tensor_zero_grad(opt->params[i]);
}

float duet_optimizer_lr(const duet_optimizer *opt) { return opt->lr; }
void duet_optimizer_set_lr(duet_optimizer *opt, float lr) { opt->lr = lr; }
float duet_optimizer_base_lr(const duet_optimizer *opt) { return opt->base_lr; }
int64_t duet_optimizer_steps(const duet_optimizer *opt) { return opt->steps; }

/* ---- state ------------------------------------------------------------------ */

static char *key_of(const char *prefix, const char *a, const char *b) {
    size_t n = strlen(prefix) + strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
    char *k = malloc(n);
    if (k != NULL) snprintf(k, n, "%s%s%s%s", prefix, a, b ? "." : "", b ? b : "");
    return k;
}

static int put_i64(duet_st_writer *w, const char *key, int64_t v) {
    return duet_st_writer_add_raw(w, key, "I64", 0, NULL, &v, sizeof v);
}

static int put_tensor(duet_st_writer *w, const char *prefix, const char *param, const char *what,
                      const duet_tensor *t) {
    char *k = key_of(prefix, param, what);
    if (k == NULL) return duet__error(DUET_ENOMEM, "optimizer save: out of memory");
    int rc = duet_st_writer_add(w, k, t);
    free(k);
    return rc;
}

int duet_optimizer_save_state(const duet_optimizer *opt, duet_st_writer *w, const char *prefix) {
    if (prefix == NULL) prefix = "";
    char *k = key_of(prefix, "step", NULL);
    if (k == NULL) return duet__error(DUET_ENOMEM, "optimizer save: out of memory");
    int rc = put_i64(w, k, opt->steps);
    free(k);
    if (rc != DUET_OK) return rc;
    duet_tensor *lr = NULL;
    DUET_TRY(duet_tensor_from_data(1, (int64_t[]){1}, &opt->lr, &lr));
    k = key_of(prefix, "lr", NULL);
    rc = k != NULL ? duet_st_writer_add(w, k, lr) : DUET_ENOMEM;
    free(k);
    duet_tensor_release(lr);
    if (rc != DUET_OK) return rc;
    for (size_t i = 0; i < opt->n && rc == DUET_OK; i++) {
        if (opt->kind == OPTIM_ADAM) {
            k = key_of(prefix, opt->names[i], "step");
            rc = k != NULL ? put_i64(w, k, opt->pstep[i]) : DUET_ENOMEM;
            free(k);
            if (rc == DUET_OK) rc = put_tensor(w, prefix, opt->names[i], "exp_avg", opt->m1[i]);
            if (rc == DUET_OK) rc = put_tensor(w, prefix, opt->names[i], "exp_avg_sq", opt->m2[i]);
        } else if (opt->has_buf[i]) {
            rc = put_tensor(w, prefix, opt->names[i], "momentum_buffer", opt->m1[i]);
        }
    }
    if (rc == DUET_ENOMEM) return duet__error(rc, "optimizer save: out of memory");
    return rc;
}

static int get_i64(const duet_st *st, const char *key, int64_t *v) {
    const char *dtype;
    const void *bytes;
    size_t nbytes;
    DUET_TRY(duet_st_raw(st, key, &dtype, &bytes, &nbytes, NULL, NULL));
    if (strcmp(dtype, "I64") != 0 || nbytes != sizeof *v)
        return duet__error(DUET_EFORMAT, "optimizer state %s: expected one I64 value, found %s "
                           "with %zu bytes", key, dtype, nbytes);
    memcpy(v, bytes, sizeof *v);
    return DUET_OK;
}

/* Reads into fresh tensors first and swaps them in at the end, so that a
 * failing load leaves the optimizer as it was. */
/* An optimizer state read from a file, held until all of it is read so that
 * a failing load changes nothing. */
typedef struct staged_state {
    int64_t steps;
    float lr;
    int64_t *pstep;
    bool *has_buf;
    duet_tensor **m1, **m2;
    size_t n;
} staged_state;

static void staged_free(staged_state *s) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->m1 != NULL) duet_tensor_release(s->m1[i]);
        if (s->m2 != NULL) duet_tensor_release(s->m2[i]);
    }
    free(s->m1);
    free(s->m2);
    free(s->pstep);
    free(s->has_buf);
}

/* Reads the entry `prefix a[.b]` with read(st, key, arg); DUET_ENOMEM for
 * the key. */
static int read_key(const duet_st *st, const char *prefix, const char *a, const char *b,
                    int (*read)(const duet_st *st, const char *key, void *arg), void *arg) {
    char *k = key_of(prefix, a, b);
    int rc = k != NULL ? read(st, k, arg) : DUET_ENOMEM;
    free(k);
    return rc;
}
static int read_i64(const duet_st *st, const char *key, void *v) { return get_i64(st, key, v); }
static int read_into(const duet_st *st, const char *key, void *t) {
    return duet_st_copy_into(st, key, t);
}
static int read_scalar(const duet_st *st, const char *key, void *v) {
    duet_tensor *t = NULL;
    DUET_TRY(duet_st_get(st, key, &t));
    int rc = DUET_OK;
    if (t->numel != 1)
        rc = duet__error(DUET_EFORMAT, "state %s: expected one value, found %" PRId64, key,
                         t->numel);
    else
        rc = duet_tensor_item(t, v);
    duet_tensor_release(t);
    return rc;
}

/* Parameter i's state: Adam's step and moments, or SGD's momentum buffer
 * when the file has one. */
static int read_param_state(const duet_optimizer *opt, const duet_st *st, const char *prefix,
                            size_t i, staged_state *s) {
    const char *name = opt->names[i];
    DUET_TRY(duet_tensor_create_like(opt->params[i], &s->m1[i]));
    if (opt->kind == OPTIM_ADAM) {
        DUET_TRY(duet_tensor_create_like(opt->params[i], &s->m2[i]));
        DUET_TRY(read_key(st, prefix, name, "step", read_i64, &s->pstep[i]));
        DUET_TRY(read_key(st, prefix, name, "exp_avg", read_into, s->m1[i]));
        return read_key(st, prefix, name, "exp_avg_sq", read_into, s->m2[i]);
    }
    char *k = key_of(prefix, name, "momentum_buffer");
    if (k == NULL) return DUET_ENOMEM;
    int rc = DUET_OK;
    if (duet_st_has(st, k)) {
        rc = duet_st_copy_into(st, k, s->m1[i]);
        s->has_buf[i] = true;
    }
    free(k);
    return rc;
}

static void swap_in(duet_optimizer *opt, staged_state *s) {
    for (size_t i = 0; i < s->n; i++) {
        duet_tensor *t = opt->m1[i];
        opt->m1[i] = s->m1[i];
        s->m1[i] = t;
        t = opt->m2[i];
        opt->m2[i] = s->m2[i];
        s->m2[i] = t;
        opt->pstep[i] = s->pstep[i];
        opt->has_buf[i] = s->has_buf[i];
    }
    opt->steps = s->steps;
    opt->lr = s->lr;
}

int duet_optimizer_load_state(duet_optimizer *opt, const duet_st *st, const char *prefix) {
    if (prefix == NULL) prefix = "";
    const char *what = opt->kind == OPTIM_ADAM ? "Adam" : "SGD";
    size_t n = opt->n;
    staged_state s = {.n = n,
                      .pstep = calloc(n + 1, sizeof(int64_t)),
                      .has_buf = calloc(n + 1, sizeof(bool)),
                      .m1 = calloc(n + 1, sizeof(duet_tensor *)),
                      .m2 = calloc(n + 1, sizeof(duet_tensor *))};
    int rc = !s.pstep || !s.has_buf || !s.m1 || !s.m2 ? DUET_ENOMEM : DUET_OK;
    if (rc == DUET_OK) rc = read_key(st, prefix, "step", NULL, read_i64, &s.steps);
    if (rc == DUET_OK) rc = read_key(st, prefix, "lr", NULL, read_scalar, &s.lr);
    for (size_t i = 0; i < n && rc == DUET_OK; i++) rc = read_param_state(opt, st, prefix, i, &s);
    /* Everything read: swap in. */
    if (rc == DUET_OK) swap_in(opt, &s);
    else if (rc == DUET_ENOMEM) rc = duet__error(rc, "%s load: out of memory", what);
    else rc = duet__error_context(rc, "loading %s state", what);
    staged_free(&s);
    return rc;
}
