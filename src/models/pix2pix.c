/* Pix2Pix as MMEditing 0.x trains it (mmedit/models/synthesizers/
 * pix2pix.py): parts generator (UnetGenerator), discriminator
 * (PatchDiscriminator on the pair concatenated on channels), gan_loss,
 * pixel_loss. One train_step:
 *   1. fake_b = generator(real_a), recorded;
 *   2. the discriminator step FIRST: D(cat(real_a, fake_b.detach())) as
 *      fake, D(cat(real_a, real_b)) as real, one backward of 0.5 * (sum of
 *      the two losses), a discriminator update. That backward keeps the
 *      generator's recorded graph (duet_backward_keep_unreached);
 *   3. the generator step: the updated, frozen discriminator on
 *      cat(real_a, fake_b), GAN loss with real targets plus the L1 pixel
 *      loss, backpropagated through the fake_b of step 1.
 * Log keys as MMEditing: loss_gan_d_fake, loss_gan_d_real, loss_gan_g,
 * loss_pixel. The generator's dropout masks come from the model's own rng
 * (duet_pix2pix_dropout_rng), which a checkpoint saves. */
#include "models/models_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

typedef struct pix2pix {
    int disc_steps, disc_init_steps;
    bool b2a;
    int64_t step_counter;
    duet_rng dropout_rng; /* borrowed by the generator's Dropout layers */
} pix2pix;

duet_pix2pix_opts duet_pix2pix_opts_default(void) {
    duet_pix2pix_opts o;
    memset(&o, 0, sizeof o);
    o.generator = duet_unet_generator_opts_default();
    o.generator.use_dropout = true;
    o.discriminator = duet_patch_discriminator_opts_default();
    o.gan_loss = duet_gan_loss_opts_default();
    o.pixel_loss_weight = 100.0f;
    o.disc_steps = 1;
    o.disc_init_steps = 0;
    o.b2a = false;
    o.dropout_seed = 0;
    return o;
}

static const duet_module_type pix2pix_module_type = {"Pix2Pix", duet__generator_forward,
                                                    NULL};

/* D(cat(a, b)) */
static int disc_on_pair(duet_module *disc, duet_tensor *a, duet_tensor *b, duet_tensor **pred) {
    duet_tensor *pair[2] = {a, b}, *ab = NULL;
    DUET_TRY(duet_concat_channels(2, pair, &ab));
    int rc = duet_module_forward(disc, ab, pred);
    duet_tensor_release(ab);
    return rc;
}

static int discriminator_step(duet_model *m, duet_tensor *real_a, duet_tensor *real_b,
                              duet_tensor *fake_b, duet_optimizer *opt_d, duet_log_vars *log) {
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_tensor *fake_d = NULL, *fake_pred = NULL, *real_pred = NULL, *l_fake = NULL,
                *l_real = NULL, *sum = NULL, *loss = NULL;
    duet_module_set_requires_grad(disc, true);
    duet_optimizer_zero_grad(opt_d);
    int rc = duet_detach(fake_b, &fake_d);
    if (rc == DUET_OK) rc = disc_on_pair(disc, real_a, fake_d, &fake_pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, fake_pred, false, true, &l_fake);
    if (rc == DUET_OK) rc = disc_on_pair(disc, real_a, real_b, &real_pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, real_pred, true, true, &l_real);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gan_d_fake", l_fake);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gan_d_real", l_real);
    /* parse_losses sums the two, then loss_d *= 0.5. */
    if (rc == DUET_OK) rc = duet_add(l_fake, l_real, &sum);
    if (rc == DUET_OK) rc = duet_scale(sum, 0.5f, &loss);
    if (rc == DUET_OK) rc = duet_backward_keep_unreached(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_d);
    duet_tensor *ts[7] = {fake_d, fake_pred, real_pred, l_fake, l_real, sum, loss};
    for (int i = 0; i < 7; i++) duet_tensor_release(ts[i]);
    return rc;
}

static int generator_step(duet_model *m, duet_tensor *real_a, duet_tensor *real_b,
                          duet_tensor *fake_b, duet_optimizer *opt_g, duet_log_vars *log) {
    duet_module *disc = NULL, *gan = NULL;
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    DUET_TRY(duet__need_part(m, "gan_loss", &gan));
    duet_module *pix = duet_model_part(m, "pixel_loss");
    duet_tensor *pred = NULL, *l_gan = NULL, *l_pix = NULL, *loss = NULL;
    /* No updates to the discriminator's parameters in the generator step. */
    duet_module_set_requires_grad(disc, false);
    duet_optimizer_zero_grad(opt_g);
    const int from = log->count;
    int rc = disc_on_pair(disc, real_a, fake_b, &pred);
    if (rc == DUET_OK) rc = duet_gan_loss(gan, pred, true, false, &l_gan);
    if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_gan_g", l_gan);
    if (rc == DUET_OK && pix != NULL) {
        rc = duet_module_forward2(pix, fake_b, real_b, &l_pix);
        if (rc == DUET_OK) rc = duet__log_scalar(log, "loss_pixel", l_pix);
        if (rc == DUET_OK) rc = duet_add(l_gan, l_pix, &loss);
    } else if (rc == DUET_OK) {
        loss = duet_tensor_retain(l_gan);
    }
    /* "loss": the generator's parse_losses total (MMEditing pops its log's
     * "loss"; the generator's is the one that tells how it fares). */
    if (rc == DUET_OK) rc = duet__log_total(log, from);
    if (rc == DUET_OK) rc = duet_backward(loss);
    if (rc == DUET_OK) rc = duet_optimizer_step(opt_g);
    duet_tensor *ts[4] = {pred, l_gan, l_pix, loss};
    for (int i = 0; i < 4; i++) duet_tensor_release(ts[i]);
    return rc;
}

static int pix2pix_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                              duet_log_vars *log) {
    pix2pix *p = duet_model_impl(m);
    duet_tensor *img_a = NULL, *img_b = NULL, *fake_b = NULL;
    duet_optimizer *opt_g = NULL, *opt_d = NULL;
    duet_module *gen = NULL, *disc = NULL;
    DUET_TRY(duet_batch_require(batch, "img_a", &img_a));
    DUET_TRY(duet_batch_require(batch, "img_b", &img_b));
    DUET_TRY(duet_optimizer_set_require(opts, "generator", &opt_g));
    DUET_TRY(duet_optimizer_set_require(opts, "discriminator", &opt_d));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    DUET_TRY(duet__need_part(m, "discriminator", &disc));
    duet_tensor *real_a = p->b2a ? img_b : img_a, *real_b = p->b2a ? img_a : img_b;

    int rc = duet_module_forward(gen, real_a, &fake_b);
    if (rc == DUET_OK) rc = discriminator_step(m, real_a, real_b, fake_b, opt_d, log);
    if (rc == DUET_OK && p->step_counter % p->disc_steps == 0 &&
        p->step_counter >= p->disc_init_steps)
        rc = generator_step(m, real_a, real_b, fake_b, opt_g, log);
    duet_module_set_requires_grad(disc, true);
    duet_tensor_release(fake_b);
    /* Without a generator step (or after a failure) the generator's graph
     * is still recorded; it belongs to this step only. */
    duet_tape_clear();
    DUET_TRY(rc);
    p->step_counter++;
    return DUET_OK; /* duet_model_train_step averages the log values over the ranks */
}

static int pix2pix_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    duet_module *gen = NULL;
    DUET_TRY(duet__need_part(m, "generator", &gen));
    return duet_module_forward(gen, lq, out);
}

/* MMEditing's forward_test runs the generator in training mode (batch
 * statistics and dropout at test time, the pix2pix paper's trick). The
 * dropout rng is put back afterwards so that evaluating does not change
 * the masks of later training steps. No metrics (MMEditing 0.x computes
 * none for Pix2Pix). */
static int pix2pix_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out) {
    pix2pix *p = duet_model_impl(m);
    duet_tensor *img_a = NULL, *img_b = NULL;
    duet_module *gen = NULL;
    DUET_TRY(duet_batch_require(batch, "img_a", &img_a));
    DUET_TRY(duet_batch_require(batch, "img_b", &img_b));
    DUET_TRY(duet__need_part(m, "generator", &gen));
    const bool was_training = duet_module_is_training(gen);
    const duet_rng saved = p->dropout_rng;
    duet_module_train(gen, true);
    duet_tensor *real_a = p->b2a ? img_b : img_a;
    int rc = duet_module_forward(gen, real_a, &out->output);
    duet_module_train(gen, was_training);
    p->dropout_rng = saved;
    DUET_TRY(rc);
    out->nsamples = real_a->shape[0];
    return DUET_OK;
}

/* The step counter and the dropout RNG go into the checkpoint, so that a
 * resumed run draws the same masks and steps as an uninterrupted one. */
static const char *const p2p_keys[] = {"pix2pix.step_counter", "pix2pix.dropout_seed",
                                       "pix2pix.dropout_stream", "pix2pix.dropout_counter"};

static int pix2pix_save_state(duet_model *m, duet_st_writer *w) {
    const pix2pix *p = duet_model_impl(m);
    const uint64_t v[4] = {(uint64_t)p->step_counter, p->dropout_rng.seed,
                           p->dropout_rng.stream, p->dropout_rng.counter};
    for (int i = 0; i < 4; i++) {
        char s[32];
        snprintf(s, sizeof s, "%" PRIu64, v[i]);
        DUET_TRY(duet_st_writer_set_meta(w, p2p_keys[i], s));
    }
    return DUET_OK;
}

static int pix2pix_load_state(duet_model *m, const duet_st *ckpt) {
    uint64_t v[4];
    for (int i = 0; i < 4; i++) {
        const char *s = duet_st_meta(ckpt, p2p_keys[i]);
        if (s == NULL)
            return duet__error(DUET_ENOTFOUND, "the checkpoint has no metadata '%s' (a Pix2Pix "
                               "checkpoint has): resume a Pix2Pix run, or start from it with "
                               "load_from", p2p_keys[i]);
        char *end = NULL;
        errno = 0;
        unsigned long long n = strtoull(s, &end, 10);
        if (end == s || *end != '\0' || errno != 0 || s[0] == '-' ||
            (i == 0 && n > (unsigned long long)INT64_MAX))
            return duet__error(DUET_EFORMAT, "metadata '%s' is '%s', not a count", p2p_keys[i], s);
        v[i] = n;
    }
    pix2pix *p = duet_model_impl(m);
    p->step_counter = (int64_t)v[0];
    p->dropout_rng.seed = v[1];
    p->dropout_rng.stream = v[2];
    p->dropout_rng.counter = v[3];
    return DUET_OK;
}

/* forward is the generator on real_a, which b2a takes from img_b. */
static const char *pix2pix_input_key(duet_model *m) {
    const pix2pix *p = duet_model_impl(m);
    return p->b2a ? "img_b" : "img_a";
}

/* forward and val_step use the generator only (or its moving average). */
static const char *const eval_parts[] = {"generator", NULL};

static const duet_model_ops pix2pix_ops = {
    .name = "Pix2Pix",
    .forward = pix2pix_forward,
    .train_step = pix2pix_train_step,
    .val_step = pix2pix_val_step,
    .destroy = free,
    .save_state = pix2pix_save_state,
    .load_state = pix2pix_load_state,
    .input_key = pix2pix_input_key,
    .eval_parts = eval_parts,
};

int duet_pix2pix_create(const duet_pix2pix_opts *opts, duet_rng *rng, duet_model **out) {
    *out = NULL;
    if (opts->disc_steps < 1 || opts->disc_init_steps < 0)
        return duet__error(DUET_EINVAL, "Pix2Pix: disc_steps %d must be >= 1 and "
                           "disc_init_steps %d >= 0", opts->disc_steps, opts->disc_init_steps);
    const int pair = opts->generator.in_channels + opts->generator.out_channels;
    if (opts->discriminator.in_channels != pair)
        return duet__error(DUET_EINVAL, "Pix2Pix: the discriminator takes %d channels but sees "
                           "the pair cat(real_a, fake_b) of %d + %d",
                           opts->discriminator.in_channels, opts->generator.in_channels,
                           opts->generator.out_channels);
    pix2pix *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "Pix2Pix: out of memory");
    p->disc_steps = opts->disc_steps;
    p->disc_init_steps = opts->disc_init_steps;
    p->b2a = opts->b2a;
    p->dropout_rng = duet_rng_make(opts->dropout_seed, 0);
    duet_module *root = NULL, *part = NULL;
    int rc = duet_module_create(&pix2pix_module_type, NULL, &root);
    if (rc != DUET_OK) {
        free(p);
        return rc;
    }
    rc = duet_unet_generator_create(&opts->generator, rng, &p->dropout_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "generator", part);
    if (rc == DUET_OK) rc = duet_patch_discriminator_create(&opts->discriminator, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "discriminator", part);
    if (rc == DUET_OK) rc = duet_gan_loss_create(&opts->gan_loss, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(root, "gan_loss", part);
    if (rc == DUET_OK && opts->pixel_loss_weight > 0.0f) {
        rc = duet_l1_loss_module_create(opts->pixel_loss_weight, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(root, "pixel_loss", part);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "Pix2Pix");
        duet_module_destroy(root);
        free(p);
        return rc;
    }
    return duet_model_create(&pix2pix_ops, p, root, out);
}

static pix2pix *impl_of(duet_model *m) {
    DUET_ASSERT(strcmp(duet_model_type_name(m), "Pix2Pix") == 0);
    return duet_model_impl(m);
}

int64_t duet_pix2pix_step_counter(duet_model *m) { return impl_of(m)->step_counter; }

void duet_pix2pix_set_step_counter(duet_model *m, int64_t step_counter) {
    impl_of(m)->step_counter = step_counter;
}

duet_rng *duet_pix2pix_dropout_rng(duet_model *m) { return &impl_of(m)->dropout_rng; }
