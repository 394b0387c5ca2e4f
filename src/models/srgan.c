/* SRGAN as MMEditing builds and trains it (mmedit/models/restorers/srgan.py):
 * parts generator, discriminator, gan_loss, pixel_loss, perceptual_loss;
 * train_step alternates a generator step (discriminator frozen) and a
 * discriminator step on real and detached fake images. */
#include "models/models_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct srgan {
    int disc_steps, disc_init_steps;
    /* ESRGAN only: the relativistic means are taken over this many equal
     * groups of the local batch (1: MMEditing's torch.mean over it). */
    int mean_groups;
    int64_t step_counter;
    duet_test_cfg test_cfg;
} srgan;

duet_srgan_opts duet_srgan_opts_default(void) {
    duet_srgan_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_msrresnet_opts_default();
    o.discriminator = duet_modified_vgg_opts_default();
    o.gan_loss = duet_gan_loss_opts_default();
    o.gan_loss.loss_weight = 5e-3f;
    o.pixel_loss_weight = 1e-2f;
    o.perceptual = true;
    o.perceptual_loss = duet_perceptual_loss_opts_default();
    o.perceptual_loss.norm_img = false;
    /* MMEditing's srgan_x4c64b16 config: style_weight=0 (PerceptualLoss's
     * own default is 1.0). */
    o.perceptual_loss.style_weight = 0.0f;
    o.disc_steps = 1;
    o.disc_init_steps = 0;
    o.test_cfg = duet_test_cfg_default();
    o.test_cfg.crop_border = o.generator.upscale_factor;
    return o;
}

static const duet_module_type srgan_module_type = {"SRGAN", duet__generator_forward, NULL};
const duet_module_type duet__esrgan_module_type = {"ESRGAN", duet__generator_forward, NULL};

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

/* The mean of t's values in double, logged as MMEditing's logit means
 * (read on the host: in place on the CPU). */
static int log_mean(duet_log_vars *log, const char *name, const duet_tensor *t) {
    const float *d = NULL;
    DUET_TRY(duet_tensor_map_read(t, &d));
    double s = 0.0;
    for (int64_t i = 0; i < t->numel; i++) s += d[i];
    duet_tensor_unmap_read(t, d);
    return duet_log_vars_set(log, name, s / (double)t->numel);
}

/* SRGAN's adversarial term: gan_loss(D(fake), real, is_disc false). */
static int srgan_gan_term(duet_model *m, duet_tensor *fake, duet_tensor *gt, duet_tensor **out) {
    (void)gt;
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *pred = NULL;
    int rc = duet_module_forward(disc, fake, &pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, pred, true, false, out);
    duet_tensor_release(pred);
    return rc;
}

/* Pixel + perceptual (+ style) + the adversarial term (gan_term) on the
 * generator's output, one generator update. Log values go into *log in
 * parse_losses' order: loss_pix, loss_perceptual, loss_style, loss_gan. */
static int generator_step(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                          duet_optimizer *opt_g, duet_log_vars *log,
                          duet__gan_term_fn gan_term) {
    duet_module *pix = duet_model_part(m, "pixel_loss");
    duet_module *percep = duet_model_part(m, "perceptual_loss");
    duet_tensor *loss_g = NULL, *l = NULL, *style = NULL;
    const int from = log->count;
    int rc = DUET_OK;
    if (pix != NULL) {
        rc = duet_module_forward2(pix, fake, gt, &l);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_pix", l);
        if (rc == DUET_OK) rc = add_loss(&loss_g, l);
        else duet_tensor_release(l);
        l = NULL;
    }
    if (rc == DUET_OK && percep != NULL) {
        rc = duet_perceptual_loss(percep, fake, gt, &l, &style);
        if (rc == DUET_OK && l != NULL) {
            rc = duet__log_scalar(log, "loss_perceptual", l);
            if (rc == DUET_OK) rc = add_loss(&loss_g, l);
            else duet_tensor_release(l);
            l = NULL;
        }
        if (rc == DUET_OK && style != NULL) {
            rc = duet__log_scalar(log, "loss_style", style);
            if (rc == DUET_OK) rc = add_loss(&loss_g, style);
            else duet_tensor_release(style);
            style = NULL;
        }
        duet_tensor_release(l);
        duet_tensor_release(style);
        l = NULL;
    }
    if (rc == DUET_OK) rc = gan_term(m, fake, gt, &l);
    if (rc == DUET_OK) {
        rc = duet__log_scalar(log, "loss_gan", l);
        if (rc == DUET_OK) rc = add_loss(&loss_g, l);
        else duet_tensor_release(l);
    }
    /* "loss": the generator's parse_losses total. (MMEditing's SRGAN and
     * ESRGAN pop their log's "loss", which would be the discriminator's
     * fake term, the last one parsed; the generator's is the one that
     * tells how the generator fares.) */
    if (rc == DUET_OK) rc = duet__log_total(log, from);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt_g);
        rc = duet_backward(loss_g);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    duet_tensor_release(loss_g);
    return rc;
}

/* One discriminator update: real then detached fake, gradients summed. */
static int srgan_discriminator_step(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                                    duet_optimizer *opt_d, duet_log_vars *log) {
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *real_pred = NULL, *fake_pred = NULL, *loss = NULL, *fake_d = NULL;
    /* The real half's backward accumulates locally and the fake half's
     * reduces the sum: one allreduce of the discriminator's gradients per
     * step where MMEditing makes two, equal up to the order of the sums. */
    bool sync_prev = duet__part_set_no_sync(disc, true);
    int rc = duet_module_forward(disc, gt, &real_pred);
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
    if (rc == DUET_OK) rc = log_mean(log, "real_logit_mean", real_pred);
    if (rc == DUET_OK) rc = log_mean(log, "fake_logit_mean", fake_pred);
    duet_tensor_release(loss);
    duet_tensor_release(fake_d);
    duet_tensor_release(real_pred);
    duet_tensor_release(fake_pred);
    return rc;
}

int duet__srgan_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                           duet_log_vars *log, duet__gan_term_fn gan_term,
                           duet__disc_step_fn disc_step) {
    srgan *s = duet_model_impl(m);
    duet_tensor *lq = NULL, *gt = NULL, *fake = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *gen = NULL, *disc = NULL;
    DUET_TRY(duet_batch_require(batch, "lq", &lq));
    DUET_TRY(duet_batch_require(batch, "gt", &gt));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    DUET_TRY(duet_optimizer_set_require(opts, "discriminator", &opt_d));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    DUET_TRY(duet__need_part(m, "discriminator", &disc));

    int rc = duet_module_forward(gen, lq, &fake);
    /* No updates to the discriminator's parameters in the generator step. */
    duet_module_set_requires_grad(disc, false);
    if (rc == DUET_OK && s->step_counter % s->disc_steps == 0 &&
        s->step_counter >= s->disc_init_steps)
        rc = generator_step(m, fake, gt, opt_g, log, gan_term);
    duet_module_set_requires_grad(disc, true);
    if (rc == DUET_OK) rc = disc_step(m, fake, gt, opt_d, log);
    duet_tensor_release(fake);
    /* A failure may leave recorded nodes (a generator forward with no
     * backward); they belong to this step only. */
    if (rc != DUET_OK) duet_tape_clear();
    DUET_TRY(rc);
    s->step_counter++;
    return DUET_OK; /* duet_model_train_step averages the log values over the ranks */
}

static int srgan_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                            duet_log_vars *log) {
    return duet__srgan_train_step(m, batch, opts, log, srgan_gan_term, srgan_discriminator_step);
}

int duet__srgan_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    duet_module *gen = NULL;
    DUET_TRY(duet__need_part(m, "generator", &gen));
    return duet_module_forward(gen, lq, out);
}

int duet__restorer_val_step(duet_model *m, const duet_test_cfg *cfg, const duet_batch *batch,
                            duet_val_output *out) {
    duet_tensor *lq = NULL;
    DUET_TRY(duet_batch_require(batch, "lq", &lq));
    DUET_TRY(duet_model_forward(m, lq, &out->output));
    out->nsamples = lq->shape[0];
    duet_tensor *gt = duet_batch_tensor_get(batch, "gt");
    if (gt == NULL || cfg->nmetrics == 0) return DUET_OK;
    return duet_evaluate(cfg, out->output, gt, &out->metrics);
}

int duet__srgan_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    srgan *s = duet_model_impl(m);
    return duet__restorer_val_step(m, &s->test_cfg, batch, out);
}

/* MMEditing keeps step_counter in the model and loses it on resume; duet
 * keeps it in the checkpoint, so that disc_steps / disc_init_steps continue
 * where they were (a resumed run equals an uninterrupted one). */
int duet__srgan_save_state(duet_model *m, duet_st_writer *w) {
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, ((srgan *)duet_model_impl(m))->step_counter);
    return duet_st_writer_set_meta(w, "step_counter", v);
}

int duet__srgan_load_state(duet_model *m, const duet_st *ckpt) {
    const char *v = duet_st_meta(ckpt, "step_counter");
    if (v == NULL)
        return duet__error(DUET_ENOTFOUND, "the checkpoint has no metadata 'step_counter' (an "
                           "SRGAN checkpoint has): resume an SRGAN run, or start from it with "
                           "load_from");
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || n < 0)
        return duet__error(DUET_EFORMAT, "metadata 'step_counter' is '%s', not a count", v);
    ((srgan *)duet_model_impl(m))->step_counter = n;
    return DUET_OK;
}

/* forward and val_step use the generator only (or its moving average). */
static const char *const eval_parts[] = {"generator", NULL};

static const duet_model_ops srgan_ops = {
    .name = "SRGAN",
    .forward = duet__srgan_forward,
    .train_step = srgan_train_step,
    .val_step = duet__srgan_val_step,
    .destroy = free,
    .save_state = duet__srgan_save_state,
    .load_state = duet__srgan_load_state,
    .eval_parts = eval_parts,
};

int duet__srgan_create(const duet_model_ops *ops, const duet_module_type *root_type,
                       duet_module *generator, const duet_srgan_opts *opts,
                       duet_rng *rng, duet_model **out) {
    *out = NULL;
    if (opts->disc_steps < 1 || opts->disc_init_steps < 0) {
        duet_module_destroy(generator);
        return duet__error(DUET_EINVAL, "%s: disc_steps %d must be >= 1 and disc_init_steps "
                           "%d >= 0", ops->name, opts->disc_steps, opts->disc_init_steps);
    }
    srgan *s = calloc(1, sizeof *s);
    if (s == NULL) {
        duet_module_destroy(generator);
        return duet__error(DUET_ENOMEM, "%s: out of memory", ops->name);
    }
    s->disc_steps = opts->disc_steps;
    s->disc_init_steps = opts->disc_init_steps;
    s->mean_groups = 1;
    s->test_cfg = opts->test_cfg;

    duet_module *root = NULL, *part = NULL;
    int rc = duet_module_create(root_type, NULL, &root);
    if (rc != DUET_OK) {
        duet_module_destroy(generator);
        free(s);
        return rc;
    }
    rc = duet_module_add_child(root, "generator", generator);
    if (rc == DUET_OK) rc = duet_modified_vgg_create(&opts->discriminator, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "discriminator", part);
    if (rc == DUET_OK) rc = duet_gan_loss_create(&opts->gan_loss, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "gan_loss", part);
    if (rc == DUET_OK && opts->pixel_loss_weight > 0.0f) {
        rc = duet_l1_loss_module_create(opts->pixel_loss_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "pixel_loss", part);
    }
    if (rc == DUET_OK && opts->perceptual) {
        rc = duet_perceptual_loss_create(&opts->perceptual_loss, rng, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "perceptual_loss", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "%s", ops->name);
        duet_module_destroy(root);
        free(s);
        return rc;
    }
    return duet_model_create(ops, s, root, out);
}

int duet_srgan_create(const duet_srgan_opts *opts, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_module *gen = NULL;
    int rc = duet_msrresnet_create(&opts->generator, rng, &gen);
    if (rc != DUET_OK) return duet__error_context(rc, "SRGAN");
    return duet__srgan_create(&srgan_ops, &srgan_module_type, gen, opts, rng, out);
}

/* ESRGAN (esrgan.c) shares SRGAN's state. */
static bool has_step_counter(const duet_model *m) {
    return strcmp(duet_model_type_name(m), "SRGAN") == 0 ||
           strcmp(duet_model_type_name(m), "ESRGAN") == 0;
}

int64_t duet_srgan_step_counter(duet_model *m) {
    DUET_ASSERT(has_step_counter(m));
    return ((srgan *)duet_model_impl(m))->step_counter;
}

int duet__srgan_mean_groups(duet_model *m) {
    DUET_ASSERT(has_step_counter(m));
    return ((srgan *)duet_model_impl(m))->mean_groups;
}

void duet__esrgan_set_mean_groups(duet_model *m, int groups) {
    DUET_ASSERT(strcmp(duet_model_type_name(m), "ESRGAN") == 0 && groups >= 1);
    ((srgan *)duet_model_impl(m))->mean_groups = groups;
}

/* For tests and tools; --resume restores the counter through the model's
 * load_state hook. */
void duet_srgan_set_step_counter(duet_model *m, int64_t step_counter) {
    DUET_ASSERT(has_step_counter(m));
    ((srgan *)duet_model_impl(m))->step_counter = step_counter;
}
