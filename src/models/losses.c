/* MMEditing's pixel and GAN losses as parameterless modules, so that they
 * are parts of a model (pixel_loss, gan_loss) as in MMEditing's state. */
#include "models/models_internal.h"

#include <math.h>
#include <string.h>

/* ---- L1Loss / MSELoss ----------------------------------------------------- */

typedef struct pixel_loss {
    float loss_weight;
    bool mse;
} pixel_loss;

static int pixel_loss_forward(duet_module *self, int nin, duet_tensor *const *in,
                              duet_tensor **out) {
    pixel_loss *p = duet_module_impl(self);
    if (nin != 2)
        return duet__error(DUET_EINVAL, "%s takes (pred, target), got %d inputs",
                           duet_module_type_name(self), nin);
    if (p->mse) return duet_mse_loss(in[0], in[1], p->loss_weight, out);
    return duet_l1_loss(in[0], in[1], p->loss_weight, out);
}

static const duet_module_type l1_loss_type = {"L1Loss", pixel_loss_forward, free};
static const duet_module_type mse_loss_type = {"MSELoss", pixel_loss_forward, free};

static int pixel_loss_create(duet_module **out, float loss_weight, bool mse) {
    *out = NULL;
    pixel_loss *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "pixel loss: out of memory");
    p->loss_weight = loss_weight;
    p->mse = mse;
    return duet_module_create(mse ? &mse_loss_type : &l1_loss_type, p, out);
}

int duet_l1_loss_module_create(float loss_weight, duet_module **out) {
    return pixel_loss_create(out, loss_weight, false);
}

int duet_mse_loss_module_create(float loss_weight, duet_module **out) {
    return pixel_loss_create(out, loss_weight, true);
}

/* ---- GANLoss -------------------------------------------------------------- */

typedef enum gan_kind { GAN_VANILLA, GAN_LSGAN, GAN_WGAN, GAN_HINGE, GAN_SMGAN } gan_kind;

static const char *const gan_names[] = {"vanilla", "lsgan", "wgan", "hinge", "smgan", NULL};

typedef struct gan_loss {
    gan_kind kind;
    float real_label_val, fake_label_val, loss_weight;
} gan_loss;

duet_gan_loss_opts duet_gan_loss_opts_default(void) {
    return (duet_gan_loss_opts){.gan_type = "vanilla",
                                .real_label_val = 1.0f,
                                .fake_label_val = 0.0f,
                                .loss_weight = 1.0f};
}

static int gan_loss_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    if (nin != 1 && nin != 2)
        return duet__error(DUET_EINVAL, "GANLoss forward takes (pred) or (pred, mask), got %d "
                           "inputs", nin);
    return duet_gan_loss_masked(self, in[0], true, false, nin == 2 ? in[1] : NULL, out);
}

static const duet_module_type gan_loss_type = {"GANLoss", gan_loss_forward, free};

int duet_gan_loss_create(const duet_gan_loss_opts *opts, duet_module **out) {
    *out = NULL;
    const char *type = opts->gan_type != NULL ? opts->gan_type : "vanilla";
    int kind = 0;
    while (gan_names[kind] != NULL && strcmp(gan_names[kind], type) != 0) kind++;
    if (gan_names[kind] == NULL)
        return duet__error(DUET_EUNSUPPORTED, "GANLoss: gan_type '%s' is not supported (use "
                           "'vanilla', 'lsgan', 'wgan', 'hinge' or 'smgan')", type);
    gan_loss *g = malloc(sizeof *g);
    if (g == NULL) return duet__error(DUET_ENOMEM, "GANLoss: out of memory");
    g->kind = (gan_kind)kind;
    g->real_label_val = opts->real_label_val;
    g->fake_label_val = opts->fake_label_val;
    g->loss_weight = opts->loss_weight;
    return duet_module_create(&gan_loss_type, g, out);
}

/* weight * mean((pred - label)^2), the label a constant of pred's shape. */
static int mse_to_const(duet_tensor *pred, float label, float weight, duet_tensor **out) {
    duet_tensor *t = NULL;
    DUET_TRY(duet_tensor_create_like(pred, &t));
    duet_tensor_fill(t, label);
    int rc = duet_mse_loss(pred, t, weight, out);
    duet_tensor_release(t);
    return rc;
}

/* weight * mean(relu(1 + sign * pred)): hinge's discriminator loss. */
static int hinge_disc(duet_tensor *pred, float sign, duet_tensor **out) {
    duet_tensor *s = NULL, *one = NULL, *sum = NULL, *r = NULL;
    int rc = duet_scale(pred, sign, &s);
    if (rc == DUET_OK) rc = duet_tensor_create_like(pred, &one);
    if (rc == DUET_OK) {
        duet_tensor_fill(one, 1.0f);
        rc = duet_add(one, s, &sum);
    }
    if (rc == DUET_OK) rc = duet_relu(sum, &r);
    if (rc == DUET_OK) rc = duet_mean(r, out);
    duet_tensor_release(s);
    duet_tensor_release(one);
    duet_tensor_release(sum);
    duet_tensor_release(r);
    return rc;
}

/* weight * sign * mean(pred): wgan's losses and hinge's generator loss. */
static int signed_mean(duet_tensor *pred, float sign_weight, duet_tensor **out) {
    duet_tensor *m = NULL;
    DUET_TRY(duet_mean(pred, &m));
    int rc = duet_scale(m, sign_weight, out);
    duet_tensor_release(m);
    return rc;
}

/* MMEditing's GaussianBlur() of the smgan fake label: a 71x71 kernel of
 * sigma 10 (the outer product of two normalised 1-D kernels, in float as
 * torch computes them), zero padding 35, each channel on its own. */
#define SMGAN_K 71
static void gaussian_blur_71(float *out, const float *x, int64_t nc, int64_t h, int64_t w) {
    float g[SMGAN_K], sum = 0.0f;
    for (int i = 0; i < SMGAN_K; i++) {
        const double d = i - SMGAN_K / 2;
        g[i] = expf((float)(-(d * d) / (2.0 * 10.0 * 10.0)));
        sum += g[i];
    }
    for (int i = 0; i < SMGAN_K; i++) g[i] /= sum;
    const int r = SMGAN_K / 2;
    for (int64_t p = 0; p < nc; p++) {
        const float *xp = x + p * h * w;
        for (int64_t y = 0; y < h; y++)
            for (int64_t k = 0; k < w; k++) {
                float acc = 0.0f;
                for (int i = 0; i < SMGAN_K; i++) {
                    const int64_t yy = y + i - r;
                    if (yy < 0 || yy >= h) continue;
                    for (int j = 0; j < SMGAN_K; j++) {
                        const int64_t xx = k + j - r;
                        if (xx < 0 || xx >= w) continue;
                        acc += g[i] * g[j] * xp[yy * w + xx];
                    }
                }
                out[(p * h + y) * w + k] = acc;
            }
    }
}

/* smgan (see duet/models.h): pred resized to the mask's size, then MSE
 * against the label, the blurred mask, or masked as MMEditing writes it. */
static int smgan_loss(const gan_loss *g, duet_tensor *pred, bool target_is_real, bool is_disc,
                      duet_tensor *mask, float weight, duet_tensor **out) {
    char sp[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    if (mask == NULL)
        return duet__error(DUET_EINVAL, "GANLoss 'smgan' needs a mask (duet_gan_loss_masked)");
    if (pred->ndim != 4 || mask->ndim != 4 || mask->shape[0] != pred->shape[0] ||
        mask->shape[1] != pred->shape[1])
        return duet__error(DUET_ESHAPE, "GANLoss 'smgan': prediction %s and mask %s must both "
                           "be (N, C, H, W) with the same N and C",
                           duet_shape_str(pred, sp, sizeof sp),
                           duet_shape_str(mask, sm, sizeof sm));
    duet_tensor *in = NULL, *mse = NULL, *t = NULL;
    int rc = DUET_OK;
    if (pred->shape[2] != mask->shape[2] || pred->shape[3] != mask->shape[3])
        rc = duet_resize_bilinear_ac(pred, mask->shape[2], mask->shape[3], &in);
    else
        in = duet_tensor_retain(pred);
    if (rc != DUET_OK) return rc;
    const float label = target_is_real ? g->real_label_val : g->fake_label_val;
    if (is_disc && !target_is_real) {
        /* The blurred mask is a constant target (.detach()). */
        const float *md = NULL;
        float *td = NULL;
        rc = duet_tensor_create_like(mask, &t);
        if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &md); /* blurred on the host */
        if (rc == DUET_OK) rc = duet_tensor_map_write(t, false, &td);
        if (rc == DUET_OK)
            gaussian_blur_71(td, md, mask->shape[0] * mask->shape[1], mask->shape[2],
                             mask->shape[3]);
        duet_tensor_unmap_read(mask, md);
        if (t != NULL) {
            int urc = duet_tensor_unmap_write(t, td);
            if (rc == DUET_OK) rc = urc;
        }
        if (rc == DUET_OK) rc = duet_mse_loss(in, t, 1.0f, out);
    } else if (is_disc) {
        rc = mse_to_const(in, label, 1.0f, out);
    } else {
        /* loss = (mse * mask / mask.mean()).mean() with mse a scalar: the
         * same as mse * mean(mask / mean(mask)), whose factor is a constant
         * (the mask takes no gradient here, as MMEditing's masks). */
        const float *md = NULL; /* the sums in double on the host */
        rc = mse_to_const(in, label, 1.0f, &mse);
        if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &md);
        if (rc == DUET_OK) {
            double mm = 0.0;
            for (int64_t i = 0; i < mask->numel; i++) mm += md[i];
            const float mean = (float)(mm / (double)mask->numel);
            double f = 0.0;
            for (int64_t i = 0; i < mask->numel; i++) f += md[i] / mean;
            duet_tensor_unmap_read(mask, md);
            rc = duet_scale(mse, (float)(f / (double)mask->numel) * weight, out);
        }
    }
    duet_tensor_release(in);
    duet_tensor_release(mse);
    duet_tensor_release(t);
    return rc;
}

int duet_gan_loss_masked(duet_module *m, duet_tensor *pred, bool target_is_real, bool is_disc,
                         duet_tensor *mask, duet_tensor **out) {
    *out = NULL;
    if (!duet_module_is(m, "GANLoss"))
        return duet__error(DUET_EINVAL, "duet_gan_loss: the module is a %s, not a GANLoss",
                           duet_module_type_name(m));
    const gan_loss *g = duet_module_impl(m);
    const float target = target_is_real ? g->real_label_val : g->fake_label_val;
    /* MMEditing: the loss weight is for the generator only. */
    const float weight = is_disc ? 1.0f : g->loss_weight;
    switch (g->kind) {
    case GAN_VANILLA: return duet_bce_with_logits_const(pred, target, weight, out);
    case GAN_LSGAN: return mse_to_const(pred, target, weight, out);
    case GAN_WGAN: return signed_mean(pred, target_is_real ? -weight : weight, out);
    case GAN_HINGE:
        if (!is_disc) return signed_mean(pred, -weight, out);
        return hinge_disc(pred, target_is_real ? -1.0f : 1.0f, out);
    case GAN_SMGAN: return smgan_loss(g, pred, target_is_real, is_disc, mask, weight, out);
    }
    return duet__error(DUET_ESTATE, "GANLoss: unknown kind %d", (int)g->kind);
}

int duet_gan_loss(duet_module *m, duet_tensor *pred, bool target_is_real, bool is_disc,
                  duet_tensor **out) {
    return duet_gan_loss_masked(m, pred, target_is_real, is_disc, NULL, out);
}

/* ---- DiscShiftLoss -------------------------------------------------------- */

typedef struct disc_shift_loss {
    float loss_weight;
} disc_shift_loss;

static int disc_shift_forward(duet_module *self, int nin, duet_tensor *const *in,
                              duet_tensor **out) {
    const disc_shift_loss *d = duet_module_impl(self);
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "DiscShiftLoss takes (x), got %d inputs", nin);
    duet_tensor *sq = NULL, *m = NULL;
    int rc = duet_mul(in[0], in[0], &sq);
    if (rc == DUET_OK) rc = duet_mean(sq, &m);
    if (rc == DUET_OK) rc = duet_scale(m, d->loss_weight, out);
    duet_tensor_release(sq);
    duet_tensor_release(m);
    return rc;
}

static const duet_module_type disc_shift_type = {"DiscShiftLoss", disc_shift_forward, free};

int duet_disc_shift_loss_module_create(float loss_weight, duet_module **out) {
    *out = NULL;
    disc_shift_loss *d = malloc(sizeof *d);
    if (d == NULL) return duet__error(DUET_ENOMEM, "DiscShiftLoss: out of memory");
    d->loss_weight = loss_weight;
    return duet_module_create(&disc_shift_type, d, out);
}

/* ---- GradientPenaltyLoss -------------------------------------------------- */

/* mask (N, 1 or C, H, W) as a constant of g's shape (N, C, H, W). */
static int expand_mask(const duet_tensor *mask, const duet_tensor *g, duet_tensor **out) {
    char sm[DUET_SHAPE_STR_MAX], sg[DUET_SHAPE_STR_MAX];
    *out = NULL;
    if (mask->ndim != 4 || mask->shape[0] != g->shape[0] || mask->shape[2] != g->shape[2] ||
        mask->shape[3] != g->shape[3] || (mask->shape[1] != 1 && mask->shape[1] != g->shape[1]))
        return duet__error(DUET_ESHAPE, "GradientPenaltyLoss: mask %s must be (N, 1 or C, H, W) "
                           "for inputs %s", duet_shape_str(mask, sm, sizeof sm),
                           duet_shape_str(g, sg, sizeof sg));
    /* spread on the host (in place on the CPU), the result on g's device */
    const float *md = NULL;
    float *od = NULL;
    DUET_TRY(duet_tensor_create_like(g, out));
    const int64_t n = g->shape[0], c = g->shape[1], hw = g->shape[2] * g->shape[3];
    int rc = duet_tensor_map_read(mask, &md);
    if (rc == DUET_OK) rc = duet_tensor_map_write(*out, false, &od);
    for (int64_t s = 0; rc == DUET_OK && s < n; s++)
        for (int64_t ch = 0; ch < c; ch++)
            memcpy(od + (s * c + ch) * hw,
                   md + (s * mask->shape[1] + (mask->shape[1] == 1 ? 0 : ch)) * hw,
                   (size_t)hw * sizeof(float));
    duet_tensor_unmap_read(mask, md);
    int urc = duet_tensor_unmap_write(*out, od);
    if (rc == DUET_OK) rc = urc;
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

static int module_forward1(void *disc, duet_tensor *x, duet_tensor **out) {
    return duet_module_forward(disc, x, out);
}

int duet_gradient_penalty_loss_alpha(duet_module *disc, duet_tensor *real, duet_tensor *fake,
                                     duet_tensor *mask, float loss_weight, const float *alpha,
                                     duet_tensor **interp_out, duet_tensor **out) {
    return duet__gradient_penalty_fwd(module_forward1, disc, real, fake, mask, loss_weight, alpha,
                                      interp_out, out);
}

int duet__gradient_penalty_fwd(duet__disc_fwd_fn disc_fwd, void *disc, duet_tensor *real,
                               duet_tensor *fake, duet_tensor *mask, float loss_weight,
                               const float *alpha, duet_tensor **interp_out, duet_tensor **out) {
    *out = NULL;
    if (interp_out != NULL) *interp_out = NULL;
    char sr[DUET_SHAPE_STR_MAX], sf[DUET_SHAPE_STR_MAX];
    if (real->ndim != 4 || !duet_tensor_same_shape(real, fake))
        return duet__error(DUET_ESHAPE, "GradientPenaltyLoss: real %s and fake %s must be "
                           "(N, C, H, W) of one shape", duet_shape_str(real, sr, sizeof sr),
                           duet_shape_str(fake, sf, sizeof sf));
    duet_tensor *interp = NULL, *score = NULL, *g = NULL, *m = NULL, *gm = NULL, *nrm = NULL,
                *ones = NULL, *pen = NULL;
    /* alpha * real + (1 - alpha) * fake per sample, on the host (in place on
     * the CPU), interp on real's device */
    const float *rd = NULL, *fd = NULL;
    float *id = NULL;
    int rc = duet_tensor_create_like(real, &interp);
    if (rc == DUET_OK) rc = duet_tensor_map_read(real, &rd);
    if (rc == DUET_OK) rc = duet_tensor_map_read(fake, &fd);
    if (rc == DUET_OK) rc = duet_tensor_map_write(interp, false, &id);
    if (rc == DUET_OK) {
        const int64_t per = real->numel / real->shape[0];
        for (int64_t i = 0; i < real->numel; i++) {
            const float a = alpha[i / per];
            id[i] = a * rd[i] + (1.0f - a) * fd[i];
        }
    }
    duet_tensor_unmap_read(real, rd);
    duet_tensor_unmap_read(fake, fd);
    if (interp != NULL) {
        int urc = duet_tensor_unmap_write(interp, id);
        if (rc == DUET_OK) rc = urc;
    }
    if (rc == DUET_OK) {
        interp->requires_grad = true;
        rc = disc_fwd(disc, interp, &score);
    }
    if (rc == DUET_OK) rc = duet_autograd_grad(1, &score, NULL, 1, &interp, true, &g);
    double mask_mean = 1.0;
    if (rc == DUET_OK && mask != NULL) {
        const float *md = NULL;
        rc = expand_mask(mask, g, &m);
        if (rc == DUET_OK) rc = duet_mul(g, m, &gm);
        if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &md);
        if (rc == DUET_OK) {
            double s = 0.0;
            for (int64_t i = 0; i < mask->numel; i++) s += md[i];
            mask_mean = s / (double)mask->numel;
            duet_tensor_unmap_read(mask, md);
        }
    }
    if (rc == DUET_OK) rc = duet_channel_norm(gm != NULL ? gm : g, &nrm);
    if (rc == DUET_OK) rc = duet_tensor_create_like(nrm, &ones);
    if (rc == DUET_OK) rc = duet_tensor_fill(ones, 1.0f);
    if (rc == DUET_OK) rc = duet_mse_loss(nrm, ones, 1.0f, &pen);
    if (rc == DUET_OK) rc = duet_scale(pen, (float)(loss_weight / mask_mean), out);
    if (rc == DUET_OK && interp_out != NULL) *interp_out = duet_tensor_retain(interp);
    duet_tensor *tmp[] = {interp, score, g, m, gm, nrm, ones, pen};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) duet_tensor_release(tmp[i]);
    if (rc != DUET_OK) duet__error_context(rc, "GradientPenaltyLoss");
    return rc;
}

int duet_gradient_penalty_loss(duet_module *disc, duet_tensor *real, duet_tensor *fake,
                               duet_tensor *mask, float loss_weight, duet_rng *rng,
                               duet_tensor **out) {
    *out = NULL;
    if (real->ndim < 1) return duet__error(DUET_ESHAPE, "GradientPenaltyLoss: real is 0-D");
    const int64_t n = real->shape[0];
    float *alpha = malloc((size_t)n * sizeof *alpha);
    if (alpha == NULL) return duet__error(DUET_ENOMEM, "GradientPenaltyLoss: out of memory");
    for (int64_t i = 0; i < n; i++) alpha[i] = duet_rng_uniform(rng);
    int rc = duet_gradient_penalty_loss_alpha(disc, real, fake, mask, loss_weight, alpha, NULL, out);
    free(alpha);
    return rc;
}

/* ---- GradientPenaltyLoss as a module ------------------------------------ */

typedef struct gp_loss {
    float loss_weight;
} gp_loss;

static int gp_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    (void)self;
    (void)nin;
    (void)in;
    *out = NULL;
    return duet__error(DUET_EINVAL, "GradientPenaltyLoss needs the discriminator: call "
                       "duet_gradient_penalty_apply, not its forward");
}

static const duet_module_type gp_type = {"GradientPenaltyLoss", gp_forward, free};

int duet_gradient_penalty_loss_module_create(float loss_weight, duet_module **out) {
    *out = NULL;
    gp_loss *g = malloc(sizeof *g);
    if (g == NULL) return duet__error(DUET_ENOMEM, "GradientPenaltyLoss: out of memory");
    g->loss_weight = loss_weight;
    return duet_module_create(&gp_type, g, out);
}

float duet__gradient_penalty_weight(duet_module *m) {
    DUET_ASSERT(duet_module_is(m, "GradientPenaltyLoss"));
    return ((const gp_loss *)duet_module_impl(m))->loss_weight;
}

int duet_gradient_penalty_apply(duet_module *m, duet_module *disc, duet_tensor *real,
                                duet_tensor *fake, duet_tensor *mask, duet_rng *rng,
                                duet_tensor **out) {
    *out = NULL;
    if (!duet_module_is(m, "GradientPenaltyLoss"))
        return duet__error(DUET_EINVAL, "duet_gradient_penalty_apply: the module is a %s, not a "
                           "GradientPenaltyLoss", duet_module_type_name(m));
    const gp_loss *g = duet_module_impl(m);
    return duet_gradient_penalty_loss(disc, real, fake, mask, g->loss_weight, rng, out);
}
