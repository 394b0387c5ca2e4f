/* Layers of the image-to-image GANs (Pix2Pix, CycleGAN): ConvTranspose2d,
 * InstanceNorm2d, ReflectionPad2d and Dropout with PyTorch's state-dict
 * names and default init, and MMEditing's generation_init_weights. */
#include "duet/nn.h"

#include <math.h>

static int one_input(const duet_module *m, int nin) {
    if (nin != 1)
        return duet__error(DUET_EINVAL, "%s takes one input, got %d", duet_module_type_name(m),
                           nin);
    return DUET_OK;
}

/* Uniform in [-bound, bound), as torch's uniform_(-bound, bound). */
static void fill_uniform(duet_tensor *t, float bound, duet_rng *rng) {
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = -bound + 2.0f * bound * duet_rng_uniform(rng);
}

/* A parameter of `n` elements filled with v (or uniform in +-bound when
 * rng is given), registered under name; m is destroyed on failure. */
static int add_filled(duet_module *m, const char *name, int ndim, const int64_t *shape, float v,
                      float bound, duet_rng *rng) {
    duet_tensor *t = NULL;
    int rc = duet_tensor_create(ndim, shape, &t);
    if (rc == DUET_OK) {
        if (rng != NULL)
            fill_uniform(t, bound, rng);
        else
            duet_tensor_fill(t, v);
        rc = duet_module_add_param(m, name, t);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    return rc;
}

/* ---- ConvTranspose2d ---------------------------------------------------------- */

typedef struct tconv_impl {
    int stride, padding, output_padding;
    bool bias;
} tconv_impl;

static int tconv_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(one_input(self, nin));
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

/* ---- InstanceNorm2d ------------------------------------------------------------- */

typedef struct inorm_impl {
    float eps;
    bool affine;
} inorm_impl;

static int inorm_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(one_input(self, nin));
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

/* ---- ReflectionPad2d -------------------------------------------------------------- */

typedef struct pad_impl {
    int padding;
} pad_impl;

static int pad_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    DUET_TRY(one_input(self, nin));
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
    DUET_TRY(one_input(self, nin));
    const dropout_impl *d = duet_module_impl(self);
    return duet_dropout(in[0], d->p, duet_module_is_training(self), d->rng, out);
}

static const duet_module_type dropout_type = {"Dropout", dropout_forward, free};

int duet_dropout_module_create(float p, duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (!(p >= 0.0f && p <= 1.0f))
        return duet__error(DUET_EINVAL, "Dropout(%g): p must be in [0, 1]", (double)p);
    dropout_impl *d = malloc(sizeof *d);
    if (d == NULL) return duet__error(DUET_ENOMEM, "Dropout: out of memory");
    *d = (dropout_impl){p, rng};
    return duet_module_create(&dropout_type, d, out);
}

/* ---- generation_init_weights ------------------------------------------------------ */

static void fill_normal(duet_tensor *t, float mean, float std, duet_rng *rng) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = mean + std * duet_rng_normal(rng);
}

void duet_generation_init_weights(duet_module *m, float gain, duet_rng *rng) {
    DUET_ASSERT(m != NULL && rng != NULL);
    /* module.apply visits children before the module itself. */
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        duet_generation_init_weights(duet_module_child_at(m, i), gain, rng);
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    float mean;
    if (duet_module_is(m, "Conv2d") || duet_module_is(m, "ConvTranspose2d") ||
        duet_module_is(m, "Linear"))
        mean = 0.0f;
    else if (duet_module_is(m, "BatchNorm2d"))
        mean = 1.0f;
    else
        return;
    if (w != NULL) fill_normal(w, mean, gain, rng);
    if (b != NULL) duet_tensor_fill(b, 0.0f);
}
