/* ESRGAN as MMEditing trains it (mmedit/models/restorers/esrgan.py): SRGAN
 * with an RRDBNet generator and the relativistic average GAN. The parts,
 * the step frame (generator step with the discriminator frozen, then the
 * discriminator step; disc_steps / disc_init_steps and the step counter),
 * forward and val_step are SRGAN's (srgan.c); only the two adversarial
 * computations below are ESRGAN's own. */
#include "models/models_internal.h"

#include <string.h>

duet_esrgan_opts duet_esrgan_opts_default(void) {
    duet_srgan_opts s = duet_srgan_opts_default(); /* the same losses and discriminator */
    duet_esrgan_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_rrdbnet_opts_default();
    o.discriminator = s.discriminator;
    o.gan_loss = s.gan_loss;
    o.pixel_loss_weight = s.pixel_loss_weight;
    o.perceptual = s.perceptual;
    o.perceptual_loss = s.perceptual_loss; /* style_weight=0, norm_img=False */
    o.disc_steps = s.disc_steps;
    o.disc_init_steps = s.disc_init_steps;
    o.test_cfg = s.test_cfg;
    o.test_cfg.crop_border = o.generator.upscale_factor;
    return o;
}

/* out = gan_loss(a - mean(b), target_is_real, is_disc) * scale; the mean
 * over the local batch (under DDP: this rank's share, as MMEditing's), or
 * per group of it (duet__esrgan_set_mean_groups). */
static int relativistic(duet_model *m, duet_module *gan, duet_tensor *a, duet_tensor *b,
                        bool target_is_real, bool is_disc, float scale, duet_tensor **out) {
    duet_tensor *d = NULL, *l = NULL;
    int rc = duet_sub_group_mean(a, b, duet__srgan_mean_groups(m), &d);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, d, target_is_real, is_disc, &l);
    if (rc == DUET_OK) {
        if (scale == 1.0f) *out = duet_tensor_retain(l);
        else rc = duet_scale(l, scale, out);
    }
    duet_tensor_release(d);
    duet_tensor_release(l);
    return rc;
}

/* The generator's term, the discriminator frozen:
 *   real_d_pred = D(gt).detach(); fake_g_pred = D(fake)
 *   loss_gan = (gan(fake_g_pred - mean(real_d_pred), True) +
 *               gan(real_d_pred - mean(fake_g_pred), False)) / 2 */
static int esrgan_gan_term(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                           duet_tensor **out) {
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *real_pred = NULL, *real_d = NULL, *fake_pred = NULL;
    duet_tensor *l_fake = NULL, *l_real = NULL, *sum = NULL;
    int rc = duet_module_forward(disc, gt, &real_pred);
    if (rc == DUET_OK) rc = duet_detach(real_pred, &real_d);
    if (rc == DUET_OK) rc = duet_module_forward(disc, fake, &fake_pred);
    if (rc == DUET_OK) rc = relativistic(m, gan, fake_pred, real_d, true, false, 1.0f, &l_fake);
    if (rc == DUET_OK) rc = relativistic(m, gan, real_d, fake_pred, false, false, 1.0f, &l_real);
    if (rc == DUET_OK) rc = duet_add(l_fake, l_real, &sum);
    if (rc == DUET_OK) rc = duet_scale(sum, 0.5f, out);
    duet_tensor_release(real_pred);
    duet_tensor_release(real_d);
    duet_tensor_release(fake_pred);
    duet_tensor_release(l_fake);
    duet_tensor_release(l_real);
    duet_tensor_release(sum);
    return rc;
}

/* MMEditing's discriminator step, in its order:
 *   fake_d_pred = D(fake).detach(); real_d_pred = D(gt)
 *   loss_d_real = gan(real_d_pred - mean(fake_d_pred), True, disc) * 0.5
 *   zero_grad; backward
 *   fake_d_pred = D(fake.detach())
 *   loss_d_fake = gan(fake_d_pred - mean(real_d_pred.detach()), False, disc) * 0.5
 *   backward; step
 * The first D(fake) runs with gradients on, as there (its graph is simply
 * never used): BatchNorm's running statistics see three forwards per step,
 * and an armed DDP around D is armed by it like PyTorch's. */
static int esrgan_discriminator_step(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                                     duet_optimizer *opt_d, duet_log_vars *log) {
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *p = NULL, *fake_d_pred = NULL, *real_pred = NULL, *real_d = NULL;
    duet_tensor *fake_det = NULL, *fake_pred = NULL, *loss = NULL;
    /* One allreduce of D's gradients per step: the first backward
     * accumulates locally, the second reduces the sum (as in SRGAN's). */
    bool sync_prev = duet__part_set_no_sync(disc, true);
    int rc = duet_module_forward(disc, fake, &p);
    if (rc == DUET_OK) rc = duet_detach(p, &fake_d_pred);
    duet_tensor_release(p);
    if (rc == DUET_OK) rc = duet_module_forward(disc, gt, &real_pred);
    if (rc == DUET_OK) rc = relativistic(m, gan, real_pred, fake_d_pred, true, true, 0.5f, &loss);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_d_real", loss);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt_d);
        rc = duet_backward(loss);
    }
    duet__part_set_no_sync(disc, sync_prev);
    duet_tensor_release(loss);
    loss = NULL;
    if (rc == DUET_OK) rc = duet_detach(fake, &fake_det);
    if (rc == DUET_OK) rc = duet_module_forward(disc, fake_det, &fake_pred);
    if (rc == DUET_OK) rc = duet_detach(real_pred, &real_d);
    if (rc == DUET_OK) rc = relativistic(m, gan, fake_pred, real_d, false, true, 0.5f, &loss);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_d_fake", loss);
    if (rc == DUET_OK) rc = duet_backward(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor_release(loss);
    duet_tensor_release(fake_d_pred);
    duet_tensor_release(real_pred);
    duet_tensor_release(real_d);
    duet_tensor_release(fake_det);
    duet_tensor_release(fake_pred);
    return rc;
}

static int esrgan_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                             duet_log_vars *log) {
    return duet__srgan_train_step(m, batch, opts, log, esrgan_gan_term,
                                  esrgan_discriminator_step);
}

/* forward and val_step use the generator only (or its moving average). */
static const char *const eval_parts[] = {"generator", NULL};

static const duet_model_ops esrgan_ops = {
    .name = "ESRGAN",
    .forward = duet__srgan_forward,
    .train_step = esrgan_train_step,
    .val_step = duet__srgan_val_step,
    .destroy = free,
    .save_state = duet__srgan_save_state,
    .load_state = duet__srgan_load_state,
    .eval_parts = eval_parts,
};

int duet_esrgan_create(const duet_esrgan_opts *opts, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_rrdbnet_create(&opts->generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "ESRGAN");
    duet_srgan_opts s = duet_srgan_opts_default();
    s.discriminator = opts->discriminator;
    s.gan_loss = opts->gan_loss;
    s.pixel_loss_weight = opts->pixel_loss_weight;
    s.perceptual = opts->perceptual;
    s.perceptual_loss = opts->perceptual_loss;
    s.disc_steps = opts->disc_steps;
    s.disc_init_steps = opts->disc_init_steps;
    s.test_cfg = opts->test_cfg;
    return duet__srgan_create(&esrgan_ops, &duet__esrgan_module_type, gen, &s, rng, out);
}
