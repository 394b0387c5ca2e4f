/* Layers: Conv2d, ConvTranspose2d, Linear, BatchNorm2d, InstanceNorm2d,
 * Sequential, activations, MaxPool2d, ReflectionPad2d and Dropout, with
 * PyTorch's state-dict names and default initialisation. */
#include "duet/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Only the forward of a layer whose own parameters exist; the layout of
 * params is fixed by the constructor (weight first, then bias). */
static int need_one_input(const duet_module *m, int nin) {
    if (nin != 1)
        return duet__error(DUET_EINVAL, "%s takes one input, got %d", duet_module_type_name(m),
                           nin);
    return DUET_OK;
}

/* Uniform in [-bound, bound), as torch's uniform_(-bound, bound). */
static int fill_uniform(duet_tensor *t, float bound, duet_rng *rng) {
    float *d = NULL;
    DUET_TRY(duet_tensor_map_write(t, false, &d));
    for (int64_t i = 0; i < t->numel; i++) d[i] = -bound + 2.0f * bound * duet_rng_uniform(rng);
    return duet_tensor_unmap_write(t, d);
}

/* PyTorch's reset_parameters for Conv2d and Linear: kaiming_uniform_ with
 * a = sqrt(5) gives gain sqrt(2 / (1 + 5)) and bound gain * sqrt(3 / fan_in)
 * = 1 / sqrt(fan_in); the bias is uniform in +-1/sqrt(fan_in) too. */
static int torch_default_init(duet_tensor *w, duet_tensor *b, int64_t fan_in, duet_rng *rng) {
    float bound = fan_in > 0 ? (float)(1.0 / sqrt((double)fan_in)) : 0.0f;
    DUET_TRY(fill_uniform(w, bound, rng));
    return b != NULL ? fill_uniform(b, bound, rng) : DUET_OK;
}

/* Gives m its "weight" of the given shape and, when bias, a "bias" of
 * shape[0] elements, both with PyTorch's default init. On failure m is
 * destroyed (it owns its impl already) and *out stays NULL. */
static int add_weight_and_bias(duet_module **out, duet_module *m, int ndim, const int64_t *shape,
                               bool bias, int64_t fan_in, duet_rng *rng) {
    duet_tensor *w = NULL, *b = NULL;
    int rc = duet_tensor_create(ndim, shape, &w);
    if (rc == DUET_OK && bias) rc = duet_tensor_create(1, shape, &b);
    if (rc == DUET_OK) rc = torch_default_init(w, b, fan_in, rng);
    if (rc == DUET_OK) {
        rc = duet_module_add_param(m, "weight", w);
        w = NULL;
        if (rc == DUET_OK && bias) {
            rc = duet_module_add_param(m, "bias", b);
            b = NULL;
        }
    }
    duet_tensor_release(w);
    duet_tensor_release(b);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* A parameter of `n` elements filled with v (or uniform in +-bound when
 * rng is given), registered under name; m is destroyed on failure. */
static int add_filled(duet_module *m, const char *name, int ndim, const int64_t *shape, float v,
                      float bound, duet_rng *rng) {
    duet_tensor *t = NULL;
    int rc = duet_tensor_create(ndim, shape, &t);
    if (rc == DUET_OK) rc = rng != NULL ? fill_uniform(t, bound, rng) : duet_tensor_fill(t, v);
    if (rc == DUET_OK) rc = duet_module_add_param(m, name, t);
    else duet_tensor_release(t);
    if (rc != DUET_OK) duet_module_destroy(m);
    return rc;
}

/* ---- Conv2d ------------------------------------------------------------------ */

typedef struct conv_impl {
    int stride, padding;
    bool bias;
} conv_impl;

static int conv_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const conv_impl *c = duet_module_impl(self);
    duet_tensor *b = c->bias ? duet_module_param_at(self, 1) : NULL;
    return duet_conv2d(in[0], duet_module_param_at(self, 0), b, c->stride, c->padding, out);
}

static const duet_module_type conv_type = {"Conv2d", conv_forward, free};

int duet_conv2d_module_create(int in_channels, int out_channels, int kernel, int stride,
                              int padding, bool bias, duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (in_channels < 1 || out_channels < 1 || kernel < 1 || stride < 1 || padding < 0)
        return duet__error(DUET_EINVAL, "Conv2d(%d, %d, kernel %d, stride %d, padding %d): "
                           "channels, kernel and stride must be positive, padding non-negative",
                           in_channels, out_channels, kernel, stride, padding);
    if (rng == NULL) return duet__error(DUET_EINVAL, "Conv2d: the rng for the init is NULL");
    conv_impl *c = malloc(sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "Conv2d: out of memory");
    *c = (conv_impl){stride, padding, bias};
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&conv_type, c, &m));
    int64_t shape[4] = {out_channels, in_channels, kernel, kernel};
    return add_weight_and_bias(out, m, 4, shape, bias, (int64_t)in_channels * kernel * kernel,
                               rng);
}

/* ---- ConvTranspose2d ---------------------------------------------------------- */

typedef struct tconv_impl {
    int stride, padding, output_padding;
    bool bias;
} tconv_impl;

static int tconv_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const tconv_impl *c = duet_module_impl(self);
    return duet_conv_transpose2d(in[0], duet_module_param_at(self, 0),
                                 c->bias ? duet_module_param_at(self, 1) : NULL, c->stride,
                                 c->padding, c->output_padding, out);
}

static const duet_module_type tconv_type = {"ConvTranspose2d", tconv_forward, free};

int duet_conv_transpose2d_module_create(int in_channels, int out_channels, int kernel,
                                        int stride, int padding, int output_padding, bool bias,
                                        duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (in_channels < 1 || out_channels < 1 || kernel < 1 || stride < 1 || padding < 0 ||
        output_padding < 0 || output_padding >= stride)
        return duet__error(DUET_EINVAL, "ConvTranspose2d(%d, %d, kernel %d, stride %d, padding "
                           "%d, output_padding %d): channels, kernel and stride must be "
                           "positive, padding non-negative and output_padding below stride",
                           in_channels, out_channels, kernel, stride, padding, output_padding);
    if (rng == NULL)
        return duet__error(DUET_EINVAL, "ConvTranspose2d: the rng for the init is NULL");
    tconv_impl *c = malloc(sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "ConvTranspose2d: out of memory");
    *c = (tconv_impl){stride, padding, output_padding, bias};
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&tconv_type, c, &m));
    /* PyTorch's fan_in is weight.size(1) * K * K, which for the (IN, OUT,
     * K, K) layout is OUT * K * K; kaiming_uniform(a=sqrt(5)) and the bias
     * then share the bound 1/sqrt(fan_in). */
    const float bound = (float)(1.0 / sqrt((double)out_channels * kernel * kernel));
    const int64_t shape[4] = {in_channels, out_channels, kernel, kernel};
    DUET_TRY(add_filled(m, "weight", 4, shape, 0.0f, bound, rng));
    if (bias) DUET_TRY(add_filled(m, "bias", 1, &shape[1], 0.0f, bound, rng));
    *out = m;
    return DUET_OK;
}

/* ---- Linear ------------------------------------------------------------------ */

typedef struct linear_impl {
    bool bias;
} linear_impl;

static int linear_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const linear_impl *l = duet_module_impl(self);
    duet_tensor *b = l->bias ? duet_module_param_at(self, 1) : NULL;
    return duet_linear(in[0], duet_module_param_at(self, 0), b, out);
}

static const duet_module_type linear_type = {"Linear", linear_forward, free};

int duet_linear_module_create(int in_features, int out_features, bool bias, duet_rng *rng,
                              duet_module **out) {
    *out = NULL;
    if (in_features < 1 || out_features < 1)
        return duet__error(DUET_EINVAL, "Linear(%d, %d): feature counts must be positive",
                           in_features, out_features);
    if (rng == NULL) return duet__error(DUET_EINVAL, "Linear: the rng for the init is NULL");
    linear_impl *l = malloc(sizeof *l);
    if (l == NULL) return duet__error(DUET_ENOMEM, "Linear: out of memory");
    l->bias = bias;
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&linear_type, l, &m));
    int64_t shape[2] = {out_features, in_features};
    return add_weight_and_bias(out, m, 2, shape, bias, in_features, rng);
}

/* ---- BatchNorm2d ---------------------------------------------------------------- */

typedef struct bn_impl {
    float eps, momentum;
    duet_reduce_fn reduce; /* SyncBatchNorm's cross-process sum, or NULL */
    void *reduce_ctx;
} bn_impl;

static int bn_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const bn_impl *b = duet_module_impl(self);
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    o.training = duet_module_is_training(self);
    o.eps = b->eps;
    o.momentum = b->momentum;
    o.reduce = b->reduce;
    o.reduce_ctx = b->reduce_ctx;
    return duet_batch_norm2d(in[0], duet_module_param_at(self, 0), duet_module_param_at(self, 1),
                             duet_module_buffer_at(self, 0), duet_module_buffer_at(self, 1),
                             duet_module_buffer_at(self, 2), &o, out);
}

static const duet_module_type bn_type = {"BatchNorm2d", bn_forward, free};

int duet_batch_norm2d_module_create(int channels, float eps, float momentum, duet_module **out) {
    *out = NULL;
    if (channels < 1 || !(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return duet__error(DUET_EINVAL, "BatchNorm2d(%d, eps %g, momentum %g): channels must be "
                           "positive, eps positive and momentum in [0, 1]",
                           channels, (double)eps, (double)momentum);
    bn_impl *b = malloc(sizeof *b);
    if (b == NULL) return duet__error(DUET_ENOMEM, "BatchNorm2d: out of memory");
    *b = (bn_impl){.eps = eps, .momentum = momentum, .reduce = NULL, .reduce_ctx = NULL};
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&bn_type, b, &m));
    const char *names[5] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    const float init[5] = {1.0f, 0.0f, 0.0f, 1.0f, 0.0f};
    int rc = DUET_OK;
    for (int i = 0; i < 5 && rc == DUET_OK; i++) {
        duet_tensor *t = NULL;
        rc = duet_tensor_create(1, (int64_t[]){i == 4 ? 1 : channels}, &t);
        if (rc != DUET_OK) break;
        duet_tensor_fill(t, init[i]);
        if (i < 2)
            rc = duet_module_add_param(m, names[i], t);
        else
            rc = duet_module_add_buffer(m, names[i], t, i == 4);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet_batch_norm2d_set_reduce(duet_module *bn, duet_reduce_fn fn, void *ctx) {
    if (!duet_module_is(bn, "BatchNorm2d"))
        return duet__error(DUET_EINVAL, "set_reduce: module is a %s, not a BatchNorm2d",
                           bn != NULL ? duet_module_type_name(bn) : "NULL");
    bn_impl *b = duet_module_impl(bn);
    b->reduce = fn;
    b->reduce_ctx = fn != NULL ? ctx : NULL;
    return DUET_OK;
}

/* ---- InstanceNorm2d ------------------------------------------------------------- */

typedef struct inorm_impl {
    float eps;
    bool affine;
} inorm_impl;

static int inorm_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const inorm_impl *n = duet_module_impl(self);
    return duet_instance_norm2d(in[0], n->affine ? duet_module_param_at(self, 0) : NULL,
                                n->affine ? duet_module_param_at(self, 1) : NULL, n->eps, out);
}

static const duet_module_type inorm_type = {"InstanceNorm2d", inorm_forward, free};

int duet_instance_norm2d_module_create(int channels, float eps, bool affine, duet_module **out) {
    *out = NULL;
    if (channels < 1 || !(eps > 0.0f))
        return duet__error(DUET_EINVAL, "InstanceNorm2d(%d, eps %g): channels and eps must be "
                           "positive", channels, (double)eps);
    inorm_impl *n = malloc(sizeof *n);
    if (n == NULL) return duet__error(DUET_ENOMEM, "InstanceNorm2d: out of memory");
    *n = (inorm_impl){eps, affine};
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&inorm_type, n, &m));
    const int64_t c = channels;
    if (affine) {
        DUET_TRY(add_filled(m, "weight", 1, &c, 1.0f, 0.0f, NULL));
        DUET_TRY(add_filled(m, "bias", 1, &c, 0.0f, 0.0f, NULL));
    }
    *out = m;
    return DUET_OK;
}

/* ---- Sequential ------------------------------------------------------------------ */

static int seq_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (duet_module_child_count(self) == 0) {
        DUET_TRY(need_one_input(self, nin));
        *out = duet_tensor_retain(in[0]);
        return DUET_OK;
    }
    duet_tensor *cur = NULL;
    for (size_t i = 0; i < duet_module_child_count(self); i++) {
        duet_tensor *next = NULL;
        int rc = i == 0 ? duet_module_forwardn(duet_module_child_at(self, i), nin, in, &next)
                        : duet_module_forward(duet_module_child_at(self, i), cur, &next);
        duet_tensor_release(cur);
        if (rc != DUET_OK)
            return duet__error_context(rc, "Sequential child %s (%s)",
                                       duet_module_child_name_at(self, i),
                                       duet_module_type_name(duet_module_child_at(self, i)));
        cur = next;
    }
    *out = cur;
    return DUET_OK;
}

static const duet_module_type seq_type = {"Sequential", seq_forward, NULL};

int duet_sequential_create(duet_module **out) {
    return duet_module_create(&seq_type, NULL, out);
}

int duet_sequential_append(duet_module *seq, duet_module *child) {
    char name[32]; /* a size_t: 20 digits at most */
    snprintf(name, sizeof name, "%zu", duet_module_child_count(seq));
    return duet_module_add_child(seq, name, child);
}

/* ---- activations and pooling ----------------------------------------------------- */

typedef struct act_impl {
    duet_activation kind;
    float negative_slope;
} act_impl;

static int act_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const act_impl *a = duet_module_impl(self);
    switch (a->kind) {
    case DUET_ACT_RELU: return duet_relu(in[0], out);
    case DUET_ACT_LEAKY_RELU: return duet_leaky_relu(in[0], a->negative_slope, out);
    case DUET_ACT_SIGMOID: return duet_sigmoid(in[0], out);
    case DUET_ACT_TANH: return duet_tanh(in[0], out);
    case DUET_ACT_ELU: return duet_elu(in[0], 1.0f, out);
    }
    return duet__error(DUET_EINVAL, "activation: unknown kind %d", (int)a->kind);
}

static const duet_module_type relu_type = {"ReLU", act_forward, free};
static const duet_module_type lrelu_type = {"LeakyReLU", act_forward, free};
static const duet_module_type sigmoid_type = {"Sigmoid", act_forward, free};
static const duet_module_type tanh_type = {"Tanh", act_forward, free};
static const duet_module_type elu_type = {"ELU", act_forward, free};

int duet_activation_module_create(duet_activation kind, float negative_slope, duet_module **out) {
    *out = NULL;
    const duet_module_type *type;
    switch (kind) {
    case DUET_ACT_RELU: type = &relu_type; break;
    case DUET_ACT_LEAKY_RELU: type = &lrelu_type; break;
    case DUET_ACT_SIGMOID: type = &sigmoid_type; break;
    case DUET_ACT_TANH: type = &tanh_type; break;
    case DUET_ACT_ELU: type = &elu_type; break;
    default: return duet__error(DUET_EINVAL, "activation: unknown kind %d", (int)kind);
    }
    act_impl *a = malloc(sizeof *a);
    if (a == NULL) return duet__error(DUET_ENOMEM, "activation: out of memory");
    *a = (act_impl){kind, negative_slope};
    return duet_module_create(type, a, out);
}

typedef struct pool_impl {
    int kernel, stride;
} pool_impl;

static int pool_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const pool_impl *p = duet_module_impl(self);
    return duet_max_pool2d(in[0], p->kernel, p->stride, out);
}

static const duet_module_type pool_type = {"MaxPool2d", pool_forward, free};

int duet_max_pool2d_module_create(int kernel, int stride, duet_module **out) {
    *out = NULL;
    if (kernel < 1 || stride < 1)
        return duet__error(DUET_EINVAL, "MaxPool2d(kernel %d, stride %d): both must be positive",
                           kernel, stride);
    pool_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "MaxPool2d: out of memory");
    *p = (pool_impl){kernel, stride};
    return duet_module_create(&pool_type, p, out);
}

/* ---- ReflectionPad2d -------------------------------------------------------------- */

typedef struct pad_impl {
    int padding;
} pad_impl;

static int pad_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const int p = ((const pad_impl *)duet_module_impl(self))->padding;
    return duet_reflection_pad2d(in[0], p, p, p, p, out);
}

static const duet_module_type pad_type = {"ReflectionPad2d", pad_forward, free};

int duet_reflection_pad2d_module_create(int padding, duet_module **out) {
    *out = NULL;
    if (padding < 0)
        return duet__error(DUET_EINVAL, "ReflectionPad2d(%d): padding must be >= 0", padding);
    pad_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "ReflectionPad2d: out of memory");
    p->padding = padding;
    return duet_module_create(&pad_type, p, out);
}

/* ---- Dropout ---------------------------------------------------------------------- */

typedef struct dropout_impl {
    float p;
    duet_rng *rng; /* borrowed: the owner saves and restores it */
} dropout_impl;

static int dropout_forward(duet_module *self, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    DUET_TRY(need_one_input(self, nin));
    const dropout_impl *d = duet_module_impl(self);
    return duet_dropout(in[0], d->p, duet_module_is_training(self), d->rng, out);
}

static const duet_module_type dropout_type = {"Dropout", dropout_forward, free};

int duet_layer_settings_of(const duet_module *m, duet_layer_settings *s) {
    *s = (duet_layer_settings){0};
    const duet_module_type *t = duet_module_get_type(m);
    const void *impl = duet_module_impl(m);
    if (t == &conv_type) {
        s->stride = ((const conv_impl *)impl)->stride;
        s->padding = ((const conv_impl *)impl)->padding;
    } else if (t == &tconv_type) {
        const tconv_impl *c = impl;
        s->stride = c->stride;
        s->padding = c->padding;
        s->output_padding = c->output_padding;
    } else if (t == &pad_type) {
        s->padding = ((const pad_impl *)impl)->padding;
    } else if (t == &bn_type) {
        s->eps = ((const bn_impl *)impl)->eps;
    } else if (t == &inorm_type) {
        s->eps = ((const inorm_impl *)impl)->eps;
        s->affine = ((const inorm_impl *)impl)->affine;
    } else if (t == &lrelu_type) {
        s->negative_slope = ((const act_impl *)impl)->negative_slope;
    } else if (t == &dropout_type) {
        s->p = ((const dropout_impl *)impl)->p;
    } else {
        return duet__error(DUET_EINVAL, "a %s has no layer settings", duet_module_type_name(m));
    }
    return DUET_OK;
}

int duet_dropout_module_create(float p, duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (!(p >= 0.0f && p <= 1.0f))
        return duet__error(DUET_EINVAL, "Dropout(%g): p must be in [0, 1]", (double)p);
    dropout_impl *d = malloc(sizeof *d);
    if (d == NULL) return duet__error(DUET_ENOMEM, "Dropout: out of memory");
    *d = (dropout_impl){p, rng};
    return duet_module_create(&dropout_type, d, out);
}
