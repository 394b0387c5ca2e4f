/* Real-ESRGAN as MMEditing 0.16.1 trains it (mmedit/models/restorers/
 * real_esrgan.py): SRGAN's frame with an RRDBNet generator, an optional
 * UNetDiscriminatorWithSpectralNorm under the vanilla GAN (absent in the
 * RealESRNet stage), the sharpened GT (the batch's "gt_unsharp") for the
 * losses that ask for it, the step counter as a state entry of the model
 * (MMEditing's buffer) and the start_iter reload of the generator from
 * generator_ema. duet/models.h (duet_real_esrgan_opts) says what a step
 * does. */
#include "models/models_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct real_esrgan {
    bool sharp_pixel, sharp_percep, sharp_gan;
    int64_t start_iter;
    int disc_steps, disc_init_steps;
    duet_test_cfg test_cfg;
} real_esrgan;

duet_real_esrgan_opts duet_real_esrgan_opts_default(void) {
    duet_real_esrgan_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_rrdbnet_opts_default();
    o.gan = true;
    o.discriminator = duet_unet_disc_sn_opts_default();
    o.gan_loss = duet_gan_loss_opts_default();
    o.gan_loss.loss_weight = 0.1f;
    o.pixel_loss_weight = 1.0f;
    o.perceptual = true;
    o.perceptual_loss = duet_perceptual_loss_opts_default();
    static const int ids[5] = {2, 7, 16, 25, 34};
    static const float weights[5] = {0.1f, 0.1f, 1.0f, 1.0f, 1.0f};
    o.perceptual_loss.nlayer_weights = 5;
    memcpy(o.perceptual_loss.layer_ids, ids, sizeof ids);
    memcpy(o.perceptual_loss.layer_weights, weights, sizeof weights);
    o.perceptual_loss.style_weight = 0.0f;
    o.perceptual_loss.norm_img = false;
    o.sharpened_gt_in_pixel = true;
    o.sharpened_gt_in_percep = true;
    o.sharpened_gt_in_gan = false;
    o.use_ema = true;
    o.start_iter = -1;
    o.disc_steps = 1;
    o.disc_init_steps = 0;
    o.test_cfg = duet_test_cfg_default();
    o.test_cfg.crop_border = 0;
    return o;
}

static const duet_module_type real_esrgan_module_type = {"RealESRGAN", duet__generator_forward,
                                                         NULL};

/* The root's "step_counter" (one float, as MMEditing's buffer). */
static int counter_get(duet_model *m, double *out) {
    duet_tensor *t = duet_module_buffer(duet_model_module(m), "step_counter");
    DUET_ASSERT(t != NULL && t->numel == 1);
    float v = 0.0f;
    DUET_TRY(duet_tensor_copy_to_host(t, &v));
    *out = v;
    return DUET_OK;
}

static int counter_set(duet_model *m, double v) {
    duet_tensor *t = duet_module_buffer(duet_model_module(m), "step_counter");
    DUET_ASSERT(t != NULL && t->numel == 1);
    const float f = (float)v; /* float32 arithmetic, as torch's buffer += 1 */
    return duet_tensor_copy_from_host(t, &f);
}

/* total = total + l (total NULL: l), consuming l: parse_losses' sum. */
static int add_loss(duet_tensor **total, duet_tensor *l) {
    if (*total == NULL) {
        *total = l;
        return DUET_OK;
    }
    duet_tensor *s = NULL;
    int rc = duet_add(*total, l, &s);
    duet_tensor_release(*total);
    duet_tensor_release(l);
    *total = s;
    return rc;
}

/* log[name] = l and total += l, consuming l (also on failure). */
static int take_loss(duet_log_vars *log, const char *name, duet_tensor *l,
                     duet_tensor **total) {
    int rc = duet__log_scalar(log, name, l);
    if (rc != DUET_OK) {
        duet_tensor_release(l);
        return rc;
    }
    return add_loss(total, l);
}

/* The generator update: pixel, perceptual (+ style) and, with a
 * discriminator, the GAN term, summed in parse_losses' order. */
static int generator_step(duet_model *m, duet_tensor *fake, duet_tensor *gt_pixel,
                          duet_tensor *gt_percep, duet_optimizer *opt_g, duet_log_vars *log) {
    duet_module *pix = duet_model_part(m, "pixel_loss");
    duet_module *percep = duet_model_part(m, "perceptual_loss");
    duet_module *disc = duet_model_part(m, "discriminator");
    duet_module *gan = duet_model_part(m, "gan_loss");
    duet_tensor *total = NULL, *l = NULL, *style = NULL, *pred = NULL;
    const int from = log->count;
    int rc = DUET_OK;
    if (pix != NULL) {
        rc = duet_module_forward2(pix, fake, gt_pixel, &l);
        if (rc == DUET_OK) rc = take_loss(log, "loss_pix", l, &total);
        l = NULL;
    }
    if (rc == DUET_OK && percep != NULL) {
        rc = duet_perceptual_loss(percep, fake, gt_percep, &l, &style);
        if (rc == DUET_OK && l != NULL) rc = take_loss(log, "loss_perceptual", l, &total);
        else duet_tensor_release(l);
        l = NULL;
        if (rc == DUET_OK && style != NULL) rc = take_loss(log, "loss_style", style, &total);
        else duet_tensor_release(style);
    }
    if (rc == DUET_OK && disc != NULL) {
        rc = duet_module_forward(disc, fake, &pred);
        if (rc == DUET_OK) rc = duet_gan_loss(gan, pred, true, false, &l);
        if (rc == DUET_OK) rc = take_loss(log, "loss_gan", l, &total);
    }
    duet_tensor_release(pred);
    if (rc == DUET_OK && total == NULL)
        rc = duet__error(DUET_ESTATE, "RealESRGAN: the generator step has no loss (no "
                         "pixel_loss, perceptual_loss or discriminator)");
    if (rc == DUET_OK) rc = duet__log_total(log, from);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt_g);
        rc = duet_backward(total);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    duet_tensor_release(total);
    return rc;
}

/* One discriminator update: gt_gan as real, the detached fake as fake, one
 * allreduce of the summed gradients (SRGAN's, srgan.c). */
static int discriminator_step(duet_model *m, duet_module *disc, duet_tensor *fake,
                              duet_tensor *gt_gan, duet_optimizer *opt_d, duet_log_vars *log) {
    duet_module *gan = NULL;
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *real_pred = NULL, *fake_pred = NULL, *loss = NULL, *fake_d = NULL;
    bool sync_prev = duet__part_set_no_sync(disc, true);
    int rc = duet_module_forward(disc, gt_gan, &real_pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, real_pred, true, true, &loss);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_d_real", loss);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt_d);
        rc = duet_backward(loss);
    }
    duet__part_set_no_sync(disc, sync_prev);
    duet_tensor_release(loss);
    loss = NULL;
    if (rc == DUET_OK) rc = duet_detach(fake, &fake_d);
    if (rc == DUET_OK) rc = duet_module_forward(disc, fake_d, &fake_pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, fake_pred, false, true, &loss);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_d_fake", loss);
    if (rc == DUET_OK) rc = duet_backward(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor_release(loss);
    duet_tensor_release(fake_d);
    duet_tensor_release(real_pred);
    duet_tensor_release(fake_pred);
    return rc;
}

/* The batch's "gt_unsharp" where `sharp` asks for it, else gt. */
static int pick_gt(const duet_batch *batch, bool sharp, duet_tensor *gt, const char *flag,
                   duet_tensor **out) {
    if (!sharp) {
        *out = gt;
        return DUET_OK;
    }
    *out = duet_batch_tensor_get(batch, "gt_unsharp");
    if (*out == NULL)
        return duet__error(DUET_ENOTFOUND, "RealESRGAN: %s is true, but the batch has no "
                           "'gt_unsharp' (the pipeline's UnsharpMasking on gt makes it)", flag);
    return DUET_OK;
}

static int real_esrgan_train_step(duet_model *m, const duet_batch *batch,
                                  duet_optimizer_set *opts, duet_log_vars *log) {
    real_esrgan *s = duet_model_impl(m);
    duet_tensor *lq = NULL, *gt = NULL, *gt_pixel = NULL, *gt_percep = NULL, *gt_gan = NULL;
    duet_tensor *fake = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *gen = NULL;
    duet_module *disc = duet_model_part(m, "discriminator");
    duet_module *ema = duet_model_part(m, "generator_ema");
    DUET_TRY(duet_batch_require(batch, "lq", &lq));
    DUET_TRY(duet_batch_require(batch, "gt", &gt));
    DUET_TRY(pick_gt(batch, s->sharp_pixel, gt, "is_use_sharpened_gt_in_pixel", &gt_pixel));
    DUET_TRY(pick_gt(batch, s->sharp_percep, gt, "is_use_sharpened_gt_in_percep", &gt_percep));
    DUET_TRY(pick_gt(batch, s->sharp_gan, gt, "is_use_sharpened_gt_in_gan", &gt_gan));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    if (disc != NULL) DUET_TRY(duet_optimizer_set_require(opts, "discriminator", &opt_d));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    double counter = 0.0;
    DUET_TRY(counter_get(m, &counter));
    /* During initialisation, the weights of the moving average: every rank
     * holds the same (duet_ema_update), so the generators stay equal. */
    if (ema != NULL && counter == (double)s->start_iter)
        DUET_TRY(duet_ema_update(gen, ema, 0.0f, 0.0f));

    int rc = duet_module_forward(gen, lq, &fake);
    /* No updates to the discriminator's parameters in the generator step. */
    if (disc != NULL) duet_module_set_requires_grad(disc, false);
    if (rc == DUET_OK && fmod(counter, (double)s->disc_steps) == 0.0 &&
        counter >= (double)s->disc_init_steps)
        rc = generator_step(m, fake, gt_pixel, gt_percep, opt_g, log);
    if (disc != NULL) {
        duet_module_set_requires_grad(disc, true);
        if (rc == DUET_OK) rc = discriminator_step(m, disc, fake, gt_gan, opt_d, log);
    }
    duet_tensor_release(fake);
    /* A failure may leave recorded nodes (a generator forward with no
     * backward); they belong to this step only. */
    if (rc != DUET_OK) duet_tape_clear();
    DUET_TRY(rc);
    return counter_set(m, counter + 1.0);
}

static int real_esrgan_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    real_esrgan *s = duet_model_impl(m);
    return duet__restorer_val_step(m, &s->test_cfg, batch, out);
}

/* forward and val_step use the generator only (or generator_ema). */
static const char *const eval_parts[] = {"generator", NULL};

static const duet_model_ops real_esrgan_ops = {
    .name = "RealESRGAN",
    .forward = duet__srgan_forward,
    .train_step = real_esrgan_train_step,
    .val_step = real_esrgan_val_step,
    .destroy = free,
    .eval_parts = eval_parts,
};

/* generator_ema: a second RRDBNet of the same options holding the
 * generator's weights, frozen (MMEditing's deepcopy). Its own rng, so the
 * draws of the parts after it are those without it. */
static int make_ema(const duet_rrdbnet_opts *o, duet_module *gen, duet_module **out) {
    duet_rng rng = duet_rng_make(0, 0xe3a);
    DUET_TRY(duet_rrdbnet_create(o, &rng, out));
    int rc = duet_ema_update(*out, gen, 0.0f, 0.0f);
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
        return rc;
    }
    duet_module_set_requires_grad(*out, false);
    return DUET_OK;
}

static int add_part(duet_module *root, const char *name, int rc, duet_module *part) {
    if (rc != DUET_OK) return rc;
    return duet_module_add_child(root, name, part);
}

int duet_real_esrgan_create(const duet_real_esrgan_opts *opts, duet_rng *rng,
                            duet_model **out) {
    *out = NULL;
    const duet_real_esrgan_opts *o = opts;
    if (o->disc_steps < 1 || o->disc_init_steps < 0)
        return duet__error(DUET_EINVAL, "RealESRGAN: disc_steps %d must be >= 1 and "
                           "disc_init_steps %d >= 0", o->disc_steps, o->disc_init_steps);
    if (o->sharpened_gt_in_gan && !o->gan)
        return duet__error(DUET_EINVAL, "RealESRGAN: is_use_sharpened_gt_in_gan without a "
                           "discriminator and gan_loss");
    real_esrgan *s = calloc(1, sizeof *s);
    if (s == NULL) return duet__error(DUET_ENOMEM, "RealESRGAN: out of memory");
    s->sharp_pixel = o->sharpened_gt_in_pixel;
    s->sharp_percep = o->sharpened_gt_in_percep;
    s->sharp_gan = o->sharpened_gt_in_gan;
    s->start_iter = o->start_iter;
    s->disc_steps = o->disc_steps;
    s->disc_init_steps = o->disc_init_steps;
    s->test_cfg = o->test_cfg;

    duet_module *root = NULL, *gen = NULL, *part = NULL;
    duet_tensor *counter = NULL;
    int rc = duet_module_create(&real_esrgan_module_type, NULL, &root);
    if (rc != DUET_OK) {
        free(s);
        return rc;
    }
    /* MMEditing's construction order: generator, discriminator, losses,
     * then generator_ema and the step counter. */
    rc = duet_rrdbnet_create(&o->generator, rng, &gen);
    rc = add_part(root, "generator", rc, gen);
    if (rc == DUET_OK && o->gan) {
        rc = duet_unet_disc_sn_create(&o->discriminator, rng, &part);
        rc = add_part(root, "discriminator", rc, part);
        if (rc == DUET_OK) rc = duet_gan_loss_create(&o->gan_loss, &part);
        rc = add_part(root, "gan_loss", rc, part);
    }
    if (rc == DUET_OK && o->pixel_loss_weight > 0.0f) {
        rc = duet_l1_loss_module_create(o->pixel_loss_weight, &part);
        rc = add_part(root, "pixel_loss", rc, part);
    }
    if (rc == DUET_OK && o->perceptual) {
        rc = duet_perceptual_loss_create(&o->perceptual_loss, rng, &part);
        rc = add_part(root, "perceptual_loss", rc, part);
    }
    if (rc == DUET_OK && o->use_ema) {
        rc = make_ema(&o->generator, gen, &part);
        rc = add_part(root, "generator_ema", rc, part);
    }
    if (rc == DUET_OK) rc = duet_tensor_create(1, (int64_t[]){1}, &counter);
    if (rc == DUET_OK) {
        const float zero = 0.0f;
        rc = duet_tensor_copy_from_host(counter, &zero);
        if (rc == DUET_OK) rc = duet_module_add_buffer(root, "step_counter", counter, false);
        else duet_tensor_release(counter);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "RealESRGAN");
        duet_module_destroy(root);
        free(s);
        return rc;
    }
    return duet_model_create(&real_esrgan_ops, s, root, out);
}
