/* The models a config can name: one row each (type name, parts with the
 * module types they may name, the reader of the model's own keys, create),
 * read from MMEditing's keys (its 0.x configs). registry.c reads the parts
 * through their module rows (registry_modules.c) before the model's own
 * keys. Every key read is marked used, so duet_config_check_unused reports
 * the others. */
#include "registry/registry_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- keys several models read ---------------------------------------------------- */

static int read_test_cfg(duet_config *c, const char *path, duet_test_cfg *o, int crop_default) {
    *o = duet_test_cfg_default();
    o->crop_border = crop_default;
    if (!duet_config_has(c, path)) return DUET_OK;
    duet_config *t = NULL;
    DUET_TRY(duet_config_sub(c, path, &t));
    int rc = DUET_OK;
    if (duet_config_has(t, "metrics")) {
        size_t n = 0;
        const char *names[DUET_MAX_METRICS];
        rc = duet_config_get_string_array(t, "metrics", names, DUET_MAX_METRICS, &n);
        for (size_t i = 0; i < n && rc == DUET_OK; i++) {
            /* Static names, so that the settings outlive the config. */
            if (strcmp(names[i], "PSNR") == 0) o->metrics[i] = "PSNR";
            else if (strcmp(names[i], "SSIM") == 0) o->metrics[i] = "SSIM";
            else
                rc = duet__error(DUET_ECONFIG, "%s.metrics: '%s' is not supported (PSNR, SSIM)",
                                 path, names[i]);
        }
        o->nmetrics = (int)n;
    }
    if (rc == DUET_OK)
        rc = duet__reg_get_int_in(t, "crop_border", o->crop_border, 0, &o->crop_border);
    const char *conv = "";
    if (rc == DUET_OK) rc = duet_config_get_string_or(t, "convert_to", "", &conv);
    if (rc == DUET_OK && conv[0] != '\0') {
        if (strcmp(conv, "y") == 0 || strcmp(conv, "Y") == 0) o->convert_to = "y";
        else rc = duet__error(DUET_ECONFIG, "%s.convert_to: '%s' (use \"y\" or leave it out)",
                              path, conv);
    }
    duet_config_destroy(t);
    return rc;
}


/* `train_cfg = {};` holds nothing to read; any key in it is reported as
 * unknown by duet_config_check_unused. */
static int mark_empty_group(duet_config *m, const char *key) {
    if (!duet_config_has(m, key)) return DUET_OK;
    size_t n = 0;
    DUET_TRY(duet_config_length(m, key, &n));
    return n == 0 ? duet_config_mark_used(m, key) : DUET_OK;
}

/* MMEditing's pretrained = path: duet starts from a checkpoint instead. */
static int check_pretrained(duet_config *m, const char *path) {
    const char *pre = "";
    DUET_TRY(duet_config_get_string_or(m, "pretrained", "", &pre));
    if (pre[0] != '\0')
        return duet__error(DUET_EUNSUPPORTED, "%s.pretrained = '%s': start from a checkpoint with "
                           "load_from instead", path, pre);
    return DUET_OK;
}


/* direction 'a2b' or 'b2a' at key (default def). */
static int read_direction(duet_config *m, const char *key, bool def, bool *b2a) {
    const char *d = def ? "b2a" : "a2b";
    DUET_TRY(duet_config_get_string_or(m, key, d, &d));
    if (strcmp(d, "a2b") != 0 && strcmp(d, "b2a") != 0)
        return duet__error(DUET_ECONFIG, "%s.%s: '%s' (use 'a2b' or 'b2a')", duet_config_name(m),
                           key, d);
    *b2a = strcmp(d, "b2a") == 0;
    return DUET_OK;
}

/* train_cfg.{disc_steps, disc_init_steps} (1, 0). */
static int read_disc_steps(duet_config *m, int *disc_steps, int *disc_init_steps) {
    DUET_TRY(duet__reg_get_int(m, "train_cfg.disc_steps", 1, disc_steps));
    return duet__reg_get_int(m, "train_cfg.disc_init_steps", 0, disc_init_steps);
}

/* ---- SRGAN and ESRGAN (mmedit/models/restorers) ------------------------------------ */

/* What SRGAN and ESRGAN read beyond their parts: an absent pixel_loss is
 * none (weight 0), an absent perceptual_loss none; train_cfg's discriminator
 * steps; test_cfg (crop_border defaults to the generator's factor);
 * pretrained refused. */
typedef struct sr_gan_keys {
    int upscale;
    float *pixel_loss_weight;
    bool *perceptual;
    int *disc_steps, *disc_init_steps;
    duet_test_cfg *test_cfg;
} sr_gan_keys;

static int read_sr_gan_keys(duet_config *m, const char *path, sr_gan_keys k) {
    if (!duet_config_has(m, "pixel_loss")) *k.pixel_loss_weight = 0.0f;
    *k.perceptual = duet_config_has(m, "perceptual_loss");
    DUET_TRY(read_disc_steps(m, k.disc_steps, k.disc_init_steps));
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", k.test_cfg, k.upscale));
    return check_pretrained(m, path);
}

static void def_srgan(void *o) { *(duet_srgan_opts *)o = duet_srgan_opts_default(); }

static int read_srgan(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_srgan_opts *o = opts;
    return read_sr_gan_keys(m, path, (sr_gan_keys){o->generator.upscale_factor,
                                                   &o->pixel_loss_weight, &o->perceptual,
                                                   &o->disc_steps, &o->disc_init_steps,
                                                   &o->test_cfg});
}

static int make_srgan(const void *o, duet_rng *rng, duet_model **out) {
    return duet_srgan_create(o, rng, out);
}

static void def_esrgan(void *o) { *(duet_esrgan_opts *)o = duet_esrgan_opts_default(); }

static int read_esrgan(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_esrgan_opts *o = opts;
    return read_sr_gan_keys(m, path, (sr_gan_keys){o->generator.upscale_factor,
                                                   &o->pixel_loss_weight, &o->perceptual,
                                                   &o->disc_steps, &o->disc_init_steps,
                                                   &o->test_cfg});
}

static int make_esrgan(const void *o, duet_rng *rng, duet_model **out) {
    return duet_esrgan_create(o, rng, out);
}

/* ---- RealESRGAN (mmedit/models/restorers/real_esrgan.py) ------------------------- */

static void def_real_esrgan(void *o) {
    *(duet_real_esrgan_opts *)o = duet_real_esrgan_opts_default();
}

/* Beyond its parts: discriminator and gan_loss both or neither (the
 * RealESRNet stage has neither), the is_use_* flags, train_cfg's
 * start_iter and discriminator steps, test_cfg (crop_border 0). */
static int read_real_esrgan(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_real_esrgan_opts *o = opts;
    const bool disc = duet_config_has(m, "discriminator"), gan = duet_config_has(m, "gan_loss");
    if (disc != gan)
        return duet__error(DUET_ECONFIG, "%s: %s without %s: RealESRGAN's GAN stage needs "
                           "both, its RealESRNet stage neither", path,
                           disc ? "discriminator" : "gan_loss", disc ? "gan_loss" : "discriminator");
    o->gan = disc;
    if (!duet_config_has(m, "pixel_loss")) o->pixel_loss_weight = 0.0f;
    o->perceptual = duet_config_has(m, "perceptual_loss");
    DUET_TRY(duet_config_get_bool_or(m, "is_use_sharpened_gt_in_pixel", false,
                                     &o->sharpened_gt_in_pixel));
    DUET_TRY(duet_config_get_bool_or(m, "is_use_sharpened_gt_in_percep", false,
                                     &o->sharpened_gt_in_percep));
    DUET_TRY(duet_config_get_bool_or(m, "is_use_sharpened_gt_in_gan", false,
                                     &o->sharpened_gt_in_gan));
    DUET_TRY(duet_config_get_bool_or(m, "is_use_ema", true, &o->use_ema));
    if (o->sharpened_gt_in_gan && !o->gan)
        return duet__error(DUET_ECONFIG, "%s.is_use_sharpened_gt_in_gan is true, but the model "
                           "has no discriminator", path);
    int64_t start = -1;
    DUET_TRY(duet_config_get_int_in_or(m, "train_cfg.start_iter", -1, -1, (int64_t)1 << 24,
                                       &start));
    o->start_iter = start;
    DUET_TRY(read_disc_steps(m, &o->disc_steps, &o->disc_init_steps));
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o->test_cfg, 0));
    return check_pretrained(m, path);
}

static int make_real_esrgan(const void *o, duet_rng *rng, duet_model **out) {
    return duet_real_esrgan_create(o, rng, out);
}

/* ---- BasicRestorer (around MSRResNet, RRDBNet: ESRGAN's PSNR stage, EDSR or RDN) -- */

/* pixel_loss's type (its part row allows L1Loss and MSELoss), train_cfg
 * (empty), test_cfg (crop_border defaults to the generator's factor),
 * pretrained refused. */
static int read_restorer_keys(duet_config *m, const char *path, int upscale,
                              duet_basic_restorer_opts *o) {
    const char *type = NULL;
    DUET_TRY(duet_config_get_string(m, "pixel_loss.type", &type));
    o->pixel_loss = strcmp(type, "MSELoss") == 0 ? "MSELoss" : "L1Loss"; /* static names */
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o->test_cfg, upscale));
    return check_pretrained(m, path);
}

static void def_restorer(void *o) {
    *(duet_basic_restorer_opts *)o = duet_basic_restorer_opts_default();
}

static int read_restorer(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_basic_restorer_opts *o = opts;
    return read_restorer_keys(m, path, o->generator.upscale_factor, o);
}

static int make_restorer(const void *o, duet_rng *rng, duet_model **out) {
    return duet_basic_restorer_create(o, rng, out);
}

typedef struct rrdb_restorer {
    duet_rrdbnet_opts generator;
    duet_basic_restorer_opts restorer; /* its generator unused */
} rrdb_restorer;

static void def_rrdb_restorer(void *opts) {
    rrdb_restorer *o = opts;
    o->generator = duet_rrdbnet_opts_default();
    o->restorer = duet_basic_restorer_opts_default();
}

static int read_rrdb_restorer(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    rrdb_restorer *o = opts;
    return read_restorer_keys(m, path, o->generator.upscale_factor, &o->restorer);
}

static int make_rrdb_restorer(const void *opts, duet_rng *rng, duet_model **out) {
    const rrdb_restorer *o = opts;
    return duet_basic_restorer_rrdbnet_create(&o->generator, &o->restorer, rng, out);
}

typedef struct edsr_restorer {
    duet_edsr_opts generator;
    duet_basic_restorer_opts restorer; /* its generator unused */
} edsr_restorer;

static void def_edsr_restorer(void *opts) {
    edsr_restorer *o = opts;
    o->generator = duet_edsr_opts_default();
    o->restorer = duet_basic_restorer_opts_default();
}

static int read_edsr_restorer(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    edsr_restorer *o = opts;
    return read_restorer_keys(m, path, o->generator.upscale_factor, &o->restorer);
}

static int make_edsr_restorer(const void *opts, duet_rng *rng, duet_model **out) {
    const edsr_restorer *o = opts;
    return duet_basic_restorer_edsr_create(&o->generator, &o->restorer, rng, out);
}

typedef struct rdn_restorer {
    duet_rdn_opts generator;
    duet_basic_restorer_opts restorer; /* its generator unused */
} rdn_restorer;

static void def_rdn_restorer(void *opts) {
    rdn_restorer *o = opts;
    o->generator = duet_rdn_opts_default();
    o->restorer = duet_basic_restorer_opts_default();
}

static int read_rdn_restorer(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    rdn_restorer *o = opts;
    return read_restorer_keys(m, path, o->generator.upscale_factor, &o->restorer);
}

static int make_rdn_restorer(const void *opts, duet_rng *rng, duet_model **out) {
    const rdn_restorer *o = opts;
    return duet_basic_restorer_rdn_create(&o->generator, &o->restorer, rng, out);
}

/* ---- Pix2Pix and CycleGAN (mmedit/models/synthesizers) ------------------------------ */

static void def_pix2pix(void *opts) {
    duet_pix2pix_opts *o = opts;
    *o = duet_pix2pix_opts_default();
    /* MMEditing's UnetGenerator defaults use_dropout to False; its pix2pix
     * configs set it. */
    o->generator.use_dropout = false;
}

/* An absent pixel_loss is none; train_cfg.{direction, disc_steps,
 * disc_init_steps}, test_cfg.{direction, show_input}; the dropout rng's
 * seed drawn from rng. */
static int read_pix2pix(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    duet_pix2pix_opts *o = opts;
    if (!duet_config_has(m, "pixel_loss")) o->pixel_loss_weight = 0.0f;
    /* Without train_cfg MMEditing takes the direction from test_cfg. */
    bool test_b2a = false, show_input = false;
    DUET_TRY(read_direction(m, "test_cfg.direction", false, &test_b2a));
    DUET_TRY(duet_config_get_bool_or(m, "test_cfg.show_input", false, &show_input));
    DUET_TRY(read_direction(m, "train_cfg.direction", test_b2a, &o->b2a));
    DUET_TRY(read_disc_steps(m, &o->disc_steps, &o->disc_init_steps));
    DUET_TRY(check_pretrained(m, path));
    o->dropout_seed = duet_rng_u64(rng);
    return DUET_OK;
}

static int make_pix2pix(const void *o, duet_rng *rng, duet_model **out) {
    return duet_pix2pix_create(o, rng, out);
}

static void def_cyclegan(void *opts) {
    duet_cyclegan_opts *o = opts;
    *o = duet_cyclegan_opts_default();
    /* MMEditing's class defaults (ResnetGenerator: IN, 9 blocks;
     * PatchDiscriminator: BN); its cyclegan configs set IN for both. */
    o->discriminator.norm = DUET_GEN_NORM_BN;
}

/* An absent id_loss is none; train_cfg.{direction, buffer_size,
 * disc_steps, disc_init_steps}, test_cfg.{direction, show_input,
 * test_direction}; the pool and dropout rngs' seeds drawn from rng. */
static int read_cyclegan(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    duet_cyclegan_opts *o = opts;
    if (!duet_config_has(m, "id_loss")) o->id_loss_weight = 0.0f; /* id_loss=None */
    /* Without train_cfg MMEditing takes the direction from test_cfg. */
    bool test_b2a = false;
    DUET_TRY(read_direction(m, "test_cfg.direction", false, &test_b2a));
    /* show_input: MMEditing saves real | fake images side by side; duet's
     * evaluation grid always shows the input next to the output. */
    bool show_input = false;
    DUET_TRY(duet_config_get_bool_or(m, "test_cfg.show_input", false, &show_input));
    DUET_TRY(read_direction(m, "test_cfg.test_direction", false, &o->test_b2a));
    if (duet_config_has(m, "train_cfg"))
        DUET_TRY(read_direction(m, "train_cfg.direction", false, &o->b2a));
    else
        o->b2a = test_b2a;
    int64_t buf = 50;
    DUET_TRY(duet_config_get_int_or(m, "train_cfg.buffer_size", 50, &buf));
    if (buf < 0 || buf > 1000000)
        return duet__error(DUET_ECONFIG, "%s.train_cfg.buffer_size: %lld images (use 0 for no "
                           "pool, or up to 1000000)", path, (long long)buf);
    o->buffer_size = buf;
    DUET_TRY(read_disc_steps(m, &o->disc_steps, &o->disc_init_steps));
    if (o->disc_steps < 1 || o->disc_init_steps < 0)
        return duet__error(DUET_ECONFIG, "%s.train_cfg: disc_steps %d must be >= 1 and "
                           "disc_init_steps %d >= 0", path, o->disc_steps, o->disc_init_steps);
    if (o->id_loss_weight > 0.0f && o->generator.in_channels != o->generator.out_channels)
        return duet__error(DUET_ECONFIG, "%s.id_loss: the identity loss needs the generator's "
                           "in_channels (%d) == out_channels (%d)", path,
                           o->generator.in_channels, o->generator.out_channels);
    DUET_TRY(check_pretrained(m, path));
    o->pool_seed = duet_rng_u64(rng);
    o->dropout_seed = duet_rng_u64(rng);
    return DUET_OK;
}

static int make_cyclegan(const void *o, duet_rng *rng, duet_model **out) {
    return duet_cyclegan_create(o, rng, out);
}

/* ---- inpaintors (mmedit/models/inpaintors) ----------------------------------------- */

/* train_cfg.local_size = [h, w], when present. */
static int read_local_size(duet_config *m, int *h, int *w) {
    if (!duet_config_has(m, "train_cfg.local_size")) return DUET_OK;
    int64_t ls[2];
    size_t n = 0;
    DUET_TRY(duet_config_get_int_array(m, "train_cfg.local_size", ls, 2, &n));
    if (n != 2 || ls[0] < 1 || ls[1] < 1 || ls[0] > 65536 || ls[1] > 65536)
        return duet_config_error(m, "train_cfg.local_size", "'train_cfg.local_size' must "
                                 "be [h, w] of positive sizes");
    *h = (int)ls[0];
    *w = (int)ls[1];
    return DUET_OK;
}

/* test_cfg.metrics (l1, psnr, ssim), when present. */
static int read_inpaint_metrics(duet_config *m, const char **metrics, int *count) {
    if (!duet_config_has(m, "test_cfg.metrics")) return DUET_OK;
    const char *names[4];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(m, "test_cfg.metrics", names, 4, &n));
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "l1") == 0) metrics[i] = "l1";
        else if (strcmp(names[i], "psnr") == 0) metrics[i] = "psnr";
        else if (strcmp(names[i], "ssim") == 0) metrics[i] = "ssim";
        else
            return duet_config_error(m, "test_cfg.metrics", "'test_cfg.metrics': '%s' (an "
                                     "inpaintor's metrics are l1, psnr, ssim)", names[i]);
    }
    *count = (int)n;
    return DUET_OK;
}

static void def_gl_inpaintor(void *opts) {
    duet_gl_inpaintor_opts *o = opts;
    *o = duet_gl_inpaintor_opts_default();
    /* An absent loss is none: the registry reads a present one's weight. */
    o->l1_hole_weight = o->l1_valid_weight = o->disc_shift_weight = 0.0f;
}

/* The losses OneStageInpaintor builds but GLInpaintor's train_step never
 * reads: refused rather than ignored. */
static const char *const gl_unused_losses[] = {"loss_gp", "loss_composed_percep",
                                               "loss_out_percep", "loss_tv"};

/* train_cfg.{disc_step, iter_tc, iter_td, start_iter, local_size},
 * test_cfg.metrics (l1, psnr, ssim). Absent parts' weights stay 0. */
static int read_gl_inpaintor(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_gl_inpaintor_opts *o = opts;
    for (size_t i = 0; i < sizeof gl_unused_losses / sizeof *gl_unused_losses; i++)
        if (duet_config_has(m, gl_unused_losses[i]))
            return duet_config_error(m, gl_unused_losses[i], "'%s': GLInpaintor's train_step "
                                     "does not use it (MMEditing builds it and never calls it): "
                                     "leave it out", gl_unused_losses[i]);
    if (!duet_config_has(m, "train_cfg"))
        return duet__error(DUET_ECONFIG, "%s.train_cfg is required (GLInpaintor's schedule: "
                           "disc_step, iter_tc, iter_td, local_size)", path);
    DUET_TRY(duet__reg_get_int_in(m, "train_cfg.disc_step", 1, 0, &o->disc_step));
    const char *iters[3] = {"train_cfg.iter_tc", "train_cfg.iter_td", "train_cfg.start_iter"};
    int64_t *dst[3] = {&o->iter_tc, &o->iter_td, &o->start_iter};
    for (int i = 0; i < 3; i++) {
        if (i < 2 && !duet_config_has(m, iters[i]))
            return duet_config_error(m, iters[i], "'%s' is required (GLInpaintor)", iters[i]);
        DUET_TRY(duet_config_get_int_in_or(m, iters[i], 0, 0, INT64_MAX / 2, dst[i]));
    }
    DUET_TRY(read_local_size(m, &o->local_h, &o->local_w));
    DUET_TRY(read_inpaint_metrics(m, o->metrics, &o->nmetrics));
    return check_pretrained(m, path);
}

static int make_gl_inpaintor(const void *o, duet_rng *rng, duet_model **out) {
    return duet_gl_inpaintor_create(o, rng, out);
}

static void def_pconv_inpaintor(void *opts) {
    duet_pconv_inpaintor_opts *o = opts;
    *o = duet_pconv_inpaintor_opts_default();
    /* An absent loss is none: the registry reads a present one's weight. */
    o->l1_hole_weight = o->l1_valid_weight = o->tv_weight = 0.0f;
}

/* loss_out_percep (a bool, its loss the composed one's), train_cfg.disc_step
 * (0: MMEditing's PConv configs have no discriminator), test_cfg.metrics;
 * a disc or a GAN loss is refused. */
static int read_pconv_inpaintor(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    (void)rng;
    duet_pconv_inpaintor_opts *o = opts;
    static const char *const refused[] = {"disc", "loss_gan", "loss_gp", "loss_disc_shift"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (duet_config_has(m, refused[i]))
            return duet_config_error(m, refused[i], "'%s': duet's PConvInpaintor trains without "
                                     "a discriminator (as MMEditing's PConv configs)",
                                     refused[i]);
    o->perceptual = duet_config_has(m, "loss_composed_percep");
    DUET_TRY(duet_config_get_bool_or(m, "loss_out_percep", false, &o->out_percep));
    if (o->out_percep && !o->perceptual)
        return duet_config_error(m, "loss_out_percep", "loss_out_percep = true needs "
                                 "loss_composed_percep (MMEditing computes it with that loss)");
    int disc_step = 0;
    DUET_TRY(duet__reg_get_int_in(m, "train_cfg.disc_step", 0, 0, &disc_step));
    if (disc_step != 0)
        return duet_config_error(m, "train_cfg.disc_step", "train_cfg.disc_step = %d: "
                                 "PConvInpaintor has no discriminator (use 0)", disc_step);
    DUET_TRY(read_inpaint_metrics(m, o->metrics, &o->nmetrics));
    return check_pretrained(m, path);
}

static int make_pconv_inpaintor(const void *o, duet_rng *rng, duet_model **out) {
    return duet_pconv_inpaintor_create(o, rng, out);
}

static void def_two_stage(void *opts) {
    duet_two_stage_inpaintor_opts *o = opts;
    *o = duet_two_stage_inpaintor_opts_default();
    o->l1_hole_weight = o->l1_valid_weight = o->disc_shift_weight = o->gp_weight = 0.0f;
}

static void def_deepfill_v1(void *opts) {
    def_two_stage(opts);
    ((duet_two_stage_inpaintor_opts *)opts)->deepfill_v1 = true;
}

/* OneStageInpaintor's losses duet does not compute. */
static const char *const ts_unsupported_losses[] = {"loss_composed_percep", "loss_out_percep",
                                                    "loss_tv"};

/* stageK_loss_type (a list of MMEditing's loss names; absent: the class
 * default kept). */
static int read_stage_losses(duet_config *m, const char *key, duet_inpaint_loss_kind *kinds,
                             int *count) {
    if (!duet_config_has(m, key)) return DUET_OK;
    const char *names[3];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(m, key, names, 3, &n));
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "loss_l1_hole") == 0) kinds[i] = DUET_INPAINT_LOSS_L1_HOLE;
        else if (strcmp(names[i], "loss_l1_valid") == 0) kinds[i] = DUET_INPAINT_LOSS_L1_VALID;
        else if (strcmp(names[i], "loss_gan") == 0) kinds[i] = DUET_INPAINT_LOSS_GAN;
        else
            return duet_config_error(m, key, "'%s': '%s' is not a loss duet computes (it has "
                                     "loss_l1_hole, loss_l1_valid, loss_gan; not "
                                     "loss_composed_percep, loss_out_percep, loss_tv)", key,
                                     names[i]);
    }
    *count = (int)n;
    return DUET_OK;
}

/* stage1_loss_type, stage2_loss_type, input_with_ones,
 * disc_input_with_mask, train_cfg.{disc_step, local_size}, test_cfg.metrics;
 * gp_seed drawn from rng. */
static int read_two_stage(duet_config *m, const char *path, duet_rng *rng, void *opts) {
    duet_two_stage_inpaintor_opts *o = opts;
    const char *type = o->deepfill_v1 ? "DeepFillv1Inpaintor" : "TwoStageInpaintor";
    for (size_t i = 0; i < sizeof ts_unsupported_losses / sizeof *ts_unsupported_losses; i++)
        if (duet_config_has(m, ts_unsupported_losses[i]))
            return duet_config_error(m, ts_unsupported_losses[i], "'%s': duet's %s does not "
                                     "compute this loss (it has loss_l1_hole, loss_l1_valid, "
                                     "loss_gan, loss_gp, loss_disc_shift)",
                                     ts_unsupported_losses[i], type);
    DUET_TRY(read_stage_losses(m, "stage1_loss_type", o->stage1, &o->nstage1));
    DUET_TRY(read_stage_losses(m, "stage2_loss_type", o->stage2, &o->nstage2));
    DUET_TRY(duet_config_get_bool_or(m, "input_with_ones", true, &o->input_with_ones));
    DUET_TRY(duet_config_get_bool_or(m, "disc_input_with_mask", false,
                                     &o->disc_input_with_mask));
    if (!duet_config_has(m, "train_cfg.disc_step"))
        return duet__error(DUET_ECONFIG, "%s.train_cfg.disc_step is required (%s's train_step "
                           "reads it)", path, type);
    DUET_TRY(duet__reg_get_int_in(m, "train_cfg.disc_step", 1, 0, &o->disc_step));
    if (o->deepfill_v1 && !duet_config_has(m, "train_cfg.local_size"))
        return duet__error(DUET_ECONFIG, "%s.train_cfg.local_size is required (the local "
                           "discriminator's patch, [h, w])", path);
    DUET_TRY(read_local_size(m, &o->local_h, &o->local_w));
    DUET_TRY(read_inpaint_metrics(m, o->metrics, &o->nmetrics));
    o->gp_seed = duet_rng_u64(rng);
    return check_pretrained(m, path);
}

static int make_two_stage(const void *o, duet_rng *rng, duet_model **out) {
    return duet_two_stage_inpaintor_create(o, rng, out);
}

/* ---- the rows ------------------------------------------------------------------------ */

#define PART(T, key, type, field) {key, {type}, offsetof(T, field), false}
#define OPTIONAL_PART(T, key, type, field) {key, {type}, offsetof(T, field), true}

const duet__model_row duet__model_rows[] = {
    {"SRGAN", sizeof(duet_srgan_opts), def_srgan,
     {PART(duet_srgan_opts, "generator", "MSRResNet", generator),
      PART(duet_srgan_opts, "discriminator", "ModifiedVGG", discriminator),
      PART(duet_srgan_opts, "gan_loss", "GANLoss", gan_loss),
      OPTIONAL_PART(duet_srgan_opts, "pixel_loss", "L1Loss", pixel_loss_weight),
      OPTIONAL_PART(duet_srgan_opts, "perceptual_loss", "PerceptualLoss", perceptual_loss)},
     read_srgan, make_srgan},
    {"ESRGAN", sizeof(duet_esrgan_opts), def_esrgan,
     {PART(duet_esrgan_opts, "generator", "RRDBNet", generator),
      PART(duet_esrgan_opts, "discriminator", "ModifiedVGG", discriminator),
      PART(duet_esrgan_opts, "gan_loss", "GANLoss", gan_loss),
      OPTIONAL_PART(duet_esrgan_opts, "pixel_loss", "L1Loss", pixel_loss_weight),
      OPTIONAL_PART(duet_esrgan_opts, "perceptual_loss", "PerceptualLoss", perceptual_loss)},
     read_esrgan, make_esrgan},
    {"BasicRestorer", sizeof(duet_basic_restorer_opts), def_restorer,
     {PART(duet_basic_restorer_opts, "generator", "MSRResNet", generator),
      {"pixel_loss", {"L1Loss", "MSELoss"}, offsetof(duet_basic_restorer_opts, pixel_loss_weight),
       false}},
     read_restorer, make_restorer},
    {"BasicRestorer", sizeof(rrdb_restorer), def_rrdb_restorer,
     {PART(rrdb_restorer, "generator", "RRDBNet", generator),
      {"pixel_loss", {"L1Loss", "MSELoss"}, offsetof(rrdb_restorer, restorer.pixel_loss_weight),
       false}},
     read_rrdb_restorer, make_rrdb_restorer},
    {"BasicRestorer", sizeof(edsr_restorer), def_edsr_restorer,
     {PART(edsr_restorer, "generator", "EDSR", generator),
      {"pixel_loss", {"L1Loss", "MSELoss"}, offsetof(edsr_restorer, restorer.pixel_loss_weight),
       false}},
     read_edsr_restorer, make_edsr_restorer},
    {"BasicRestorer", sizeof(rdn_restorer), def_rdn_restorer,
     {PART(rdn_restorer, "generator", "RDN", generator),
      {"pixel_loss", {"L1Loss", "MSELoss"}, offsetof(rdn_restorer, restorer.pixel_loss_weight),
       false}},
     read_rdn_restorer, make_rdn_restorer},
    {"Pix2Pix", sizeof(duet_pix2pix_opts), def_pix2pix,
     {PART(duet_pix2pix_opts, "generator", "UnetGenerator", generator),
      PART(duet_pix2pix_opts, "discriminator", "PatchDiscriminator", discriminator),
      PART(duet_pix2pix_opts, "gan_loss", "GANLoss", gan_loss),
      OPTIONAL_PART(duet_pix2pix_opts, "pixel_loss", "L1Loss", pixel_loss_weight)},
     read_pix2pix, make_pix2pix},
    {"CycleGAN", sizeof(duet_cyclegan_opts), def_cyclegan,
     {PART(duet_cyclegan_opts, "generator", "ResnetGenerator", generator),
      PART(duet_cyclegan_opts, "discriminator", "PatchDiscriminator", discriminator),
      PART(duet_cyclegan_opts, "gan_loss", "GANLoss", gan_loss),
      PART(duet_cyclegan_opts, "cycle_loss", "L1Loss", cycle_loss_weight),
      OPTIONAL_PART(duet_cyclegan_opts, "id_loss", "L1Loss", id_loss_weight)},
     read_cyclegan, make_cyclegan},
    {"GLInpaintor", sizeof(duet_gl_inpaintor_opts), def_gl_inpaintor,
     {PART(duet_gl_inpaintor_opts, "encdec", "GLEncoderDecoder", encdec),
      PART(duet_gl_inpaintor_opts, "disc", "GLDiscs", disc),
      PART(duet_gl_inpaintor_opts, "loss_gan", "GANLoss", loss_gan),
      OPTIONAL_PART(duet_gl_inpaintor_opts, "loss_l1_hole", "L1Loss", l1_hole_weight),
      OPTIONAL_PART(duet_gl_inpaintor_opts, "loss_l1_valid", "L1Loss", l1_valid_weight),
      OPTIONAL_PART(duet_gl_inpaintor_opts, "loss_disc_shift", "DiscShiftLoss",
                    disc_shift_weight)},
     read_gl_inpaintor, make_gl_inpaintor},
    {"TwoStageInpaintor", sizeof(duet_two_stage_inpaintor_opts), def_two_stage,
     {PART(duet_two_stage_inpaintor_opts, "encdec", "DeepFillEncoderDecoder", encdec),
      PART(duet_two_stage_inpaintor_opts, "disc", "MultiLayerDiscriminator", disc),
      PART(duet_two_stage_inpaintor_opts, "loss_gan", "GANLoss", loss_gan),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_l1_hole", "L1Loss", l1_hole_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_l1_valid", "L1Loss", l1_valid_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_gp", "GradientPenaltyLoss", gp_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_disc_shift", "DiscShiftLoss",
                    disc_shift_weight)},
     read_two_stage, make_two_stage},
    {"DeepFillv1Inpaintor", sizeof(duet_two_stage_inpaintor_opts), def_deepfill_v1,
     {PART(duet_two_stage_inpaintor_opts, "encdec", "DeepFillEncoderDecoder", encdec),
      PART(duet_two_stage_inpaintor_opts, "disc", "DeepFillv1Discriminators", discs),
      PART(duet_two_stage_inpaintor_opts, "loss_gan", "GANLoss", loss_gan),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_l1_hole", "L1Loss", l1_hole_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_l1_valid", "L1Loss", l1_valid_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_gp", "GradientPenaltyLoss", gp_weight),
      OPTIONAL_PART(duet_two_stage_inpaintor_opts, "loss_disc_shift", "DiscShiftLoss",
                    disc_shift_weight)},
     read_two_stage, make_two_stage},
    {"PConvInpaintor", sizeof(duet_pconv_inpaintor_opts), def_pconv_inpaintor,
     {PART(duet_pconv_inpaintor_opts, "encdec", "PConvEncoderDecoder", encdec),
      OPTIONAL_PART(duet_pconv_inpaintor_opts, "loss_composed_percep", "PerceptualLoss",
                    perceptual_loss),
      OPTIONAL_PART(duet_pconv_inpaintor_opts, "loss_l1_hole", "L1Loss", l1_hole_weight),
      OPTIONAL_PART(duet_pconv_inpaintor_opts, "loss_l1_valid", "L1Loss", l1_valid_weight),
      OPTIONAL_PART(duet_pconv_inpaintor_opts, "loss_tv", "MaskedTVLoss", tv_weight)},
     read_pconv_inpaintor, make_pconv_inpaintor},
    {"RealESRGAN", sizeof(duet_real_esrgan_opts), def_real_esrgan,
     {PART(duet_real_esrgan_opts, "generator", "RRDBNet", generator),
      OPTIONAL_PART(duet_real_esrgan_opts, "discriminator", "UNetDiscriminatorWithSpectralNorm",
                    discriminator),
      OPTIONAL_PART(duet_real_esrgan_opts, "gan_loss", "GANLoss", gan_loss),
      OPTIONAL_PART(duet_real_esrgan_opts, "pixel_loss", "L1Loss", pixel_loss_weight),
      OPTIONAL_PART(duet_real_esrgan_opts, "perceptual_loss", "PerceptualLoss", perceptual_loss)},
     read_real_esrgan, make_real_esrgan},
};
const size_t duet__model_row_count = sizeof duet__model_rows / sizeof *duet__model_rows;
