/* Builders for the image-to-image GAN models from MMEditing's config keys
 * (the pix2pix configs of MMEditing 0.x): every key read is marked used,
 * so duet_config_check_unused reports the others. */
#include "runner/registry_gan.h"

#include <stdio.h>
#include <string.h>

static int get_int(duet_config *c, const char *key, int def, int *out) {
    int64_t v;
    DUET_TRY(duet_config_get_int_or(c, key, def, &v));
    if (v < -2147483647 || v > 2147483647)
        return duet__error(DUET_ECONFIG, "%s: %s = %lld is out of range", duet_config_name(c), key,
                           (long long)v);
    *out = (int)v;
    return DUET_OK;
}

static int get_float(duet_config *c, const char *key, float def, float *out) {
    double v;
    DUET_TRY(duet_config_get_double_or(c, key, def, &v));
    *out = (float)v;
    return DUET_OK;
}

/* The group `key` of m with type `want`, as a view to destroy. */
static int open_typed(duet_config *m, const char *path, const char *key, const char *want,
                      duet_config **out) {
    *out = NULL;
    DUET_TRY(duet_config_sub(m, key, out));
    const char *type = NULL;
    int rc = duet_config_get_string(*out, "type", &type);
    if (rc == DUET_OK && strcmp(type, want) != 0)
        rc = duet__error(DUET_EUNSUPPORTED, "%s.%s.type: '%s' is not supported here (duet has "
                         "%s)", path, key, type, want);
    if (rc != DUET_OK) {
        duet_config_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* norm_cfg.type: 'BN' or 'IN'; init_cfg: type 'normal' and its gain. */
static int read_norm_init(duet_config *c, duet_gen_norm *norm, float *gain) {
    const char *t = "BN";
    DUET_TRY(duet_config_get_string_or(c, "norm_cfg.type", *norm == DUET_GEN_NORM_IN ? "IN" : "BN",
                                       &t));
    if (strcmp(t, "BN") == 0) *norm = DUET_GEN_NORM_BN;
    else if (strcmp(t, "IN") == 0) *norm = DUET_GEN_NORM_IN;
    else
        return duet__error(DUET_EUNSUPPORTED, "%s.norm_cfg.type: '%s' (duet has 'BN' and 'IN')",
                           duet_config_name(c), t);
    const char *init = "normal";
    DUET_TRY(duet_config_get_string_or(c, "init_cfg.type", "normal", &init));
    if (strcmp(init, "normal") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s.init_cfg.type: '%s' (duet has 'normal')",
                           duet_config_name(c), init);
    return get_float(c, "init_cfg.gain", *gain, gain);
}

static int read_unet(duet_config *c, duet_unet_generator_opts *o) {
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(get_int(c, "num_down", o->num_down, &o->num_down));
    DUET_TRY(get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(duet_config_get_bool_or(c, "use_dropout", false, &o->use_dropout));
    return read_norm_init(c, &o->norm, &o->init_gain);
}

static int read_patch(duet_config *c, duet_patch_discriminator_opts *o) {
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(get_int(c, "num_conv", o->num_conv, &o->num_conv));
    return read_norm_init(c, &o->norm, &o->init_gain);
}

static int read_gan_loss(duet_config *c, duet_gan_loss_opts *o) {
    *o = duet_gan_loss_opts_default();
    DUET_TRY(duet_config_get_string_or(c, "gan_type", "vanilla", &o->gan_type));
    DUET_TRY(get_float(c, "real_label_val", o->real_label_val, &o->real_label_val));
    DUET_TRY(get_float(c, "fake_label_val", o->fake_label_val, &o->fake_label_val));
    return get_float(c, "loss_weight", o->loss_weight, &o->loss_weight);
}

static int read_l1(duet_config *c, float *weight) {
    const char *red = "mean";
    DUET_TRY(get_float(c, "loss_weight", 1.0f, weight));
    DUET_TRY(duet_config_get_string_or(c, "reduction", "mean", &red));
    if (strcmp(red, "mean") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s: reduction '%s' is not supported (only 'mean')",
                           duet_config_name(c), red);
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

/* Runs reader on the group key of type want. */
#define READ_PART(key, want, reader, opts)                                      \
    do {                                                                        \
        duet_config *g_ = NULL;                                                 \
        DUET_TRY(open_typed(m, path, key, want, &g_));                          \
        int rc_ = reader(g_, opts);                                             \
        duet_config_destroy(g_);                                                \
        DUET_TRY(rc_);                                                          \
    } while (0)

int duet__build_pix2pix(duet_config *m, const char *path, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_pix2pix_opts o = duet_pix2pix_opts_default();
    /* MMEditing's UnetGenerator defaults use_dropout to False; its pix2pix
     * configs set it. */
    o.generator.use_dropout = false;
    READ_PART("generator", "UnetGenerator", read_unet, &o.generator);
    READ_PART("discriminator", "PatchDiscriminator", read_patch, &o.discriminator);
    READ_PART("gan_loss", "GANLoss", read_gan_loss, &o.gan_loss);
    o.pixel_loss_weight = 0.0f;
    if (duet_config_has(m, "pixel_loss")) READ_PART("pixel_loss", "L1Loss", read_l1,
                                                    &o.pixel_loss_weight);
    /* Without train_cfg MMEditing takes the direction from test_cfg. */
    bool test_b2a = false, show_input = false;
    DUET_TRY(read_direction(m, "test_cfg.direction", false, &test_b2a));
    DUET_TRY(duet_config_get_bool_or(m, "test_cfg.show_input", false, &show_input));
    DUET_TRY(read_direction(m, "train_cfg.direction", test_b2a, &o.b2a));
    DUET_TRY(get_int(m, "train_cfg.disc_steps", 1, &o.disc_steps));
    DUET_TRY(get_int(m, "train_cfg.disc_init_steps", 0, &o.disc_init_steps));
    const char *pre = "";
    DUET_TRY(duet_config_get_string_or(m, "pretrained", "", &pre));
    if (pre[0] != '\0')
        return duet__error(DUET_EUNSUPPORTED, "%s.pretrained = '%s': start from a checkpoint "
                           "with load_from instead", path, pre);
    o.dropout_seed = duet_rng_u64(rng);
    return duet_pix2pix_create(&o, rng, out);
}

/* ResnetGenerator: padding_mode 'reflect' only (MMEditing's default). */
static int read_resnet(duet_config *c, duet_resnet_generator_opts *o) {
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(duet_config_get_bool_or(c, "use_dropout", false, &o->use_dropout));
    const char *pad = "reflect";
    DUET_TRY(duet_config_get_string_or(c, "padding_mode", "reflect", &pad));
    if (strcmp(pad, "reflect") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s.padding_mode: '%s' (duet has 'reflect')",
                           duet_config_name(c), pad);
    return read_norm_init(c, &o->norm, &o->init_gain);
}

int duet__build_cyclegan(duet_config *m, const char *path, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_cyclegan_opts o = duet_cyclegan_opts_default();
    /* MMEditing's class defaults (ResnetGenerator: IN, 9 blocks;
     * PatchDiscriminator: BN); its cyclegan configs set IN for both. */
    o.discriminator.norm = DUET_GEN_NORM_BN;
    READ_PART("generator", "ResnetGenerator", read_resnet, &o.generator);
    READ_PART("discriminator", "PatchDiscriminator", read_patch, &o.discriminator);
    READ_PART("gan_loss", "GANLoss", read_gan_loss, &o.gan_loss);
    READ_PART("cycle_loss", "L1Loss", read_l1, &o.cycle_loss_weight);
    o.id_loss_weight = 0.0f; /* id_loss=None */
    if (duet_config_has(m, "id_loss")) READ_PART("id_loss", "L1Loss", read_l1, &o.id_loss_weight);
    /* Without train_cfg MMEditing takes the direction from test_cfg. */
    bool test_b2a = false;
    DUET_TRY(read_direction(m, "test_cfg.direction", false, &test_b2a));
    /* show_input: MMEditing saves real | fake images side by side; duet's
     * evaluation grid always shows the input next to the output. */
    bool show_input = false;
    DUET_TRY(duet_config_get_bool_or(m, "test_cfg.show_input", false, &show_input));
    DUET_TRY(read_direction(m, "test_cfg.test_direction", false, &o.test_b2a));
    if (duet_config_has(m, "train_cfg"))
        DUET_TRY(read_direction(m, "train_cfg.direction", false, &o.b2a));
    else
        o.b2a = test_b2a;
    int64_t buf = 50;
    DUET_TRY(duet_config_get_int_or(m, "train_cfg.buffer_size", 50, &buf));
    if (buf < 0 || buf > 1000000)
        return duet__error(DUET_ECONFIG, "%s.train_cfg.buffer_size: %lld images (use 0 for no "
                           "pool, or up to 1000000)", path, (long long)buf);
    o.buffer_size = buf;
    DUET_TRY(get_int(m, "train_cfg.disc_steps", 1, &o.disc_steps));
    DUET_TRY(get_int(m, "train_cfg.disc_init_steps", 0, &o.disc_init_steps));
    if (o.disc_steps < 1 || o.disc_init_steps < 0)
        return duet__error(DUET_ECONFIG, "%s.train_cfg: disc_steps %d must be >= 1 and "
                           "disc_init_steps %d >= 0", path, o.disc_steps, o.disc_init_steps);
    if (o.id_loss_weight > 0.0f && o.generator.in_channels != o.generator.out_channels)
        return duet__error(DUET_ECONFIG, "%s.id_loss: the identity loss needs the generator's "
                           "in_channels (%d) == out_channels (%d)", path,
                           o.generator.in_channels, o.generator.out_channels);
    const char *pre = "";
    DUET_TRY(duet_config_get_string_or(m, "pretrained", "", &pre));
    if (pre[0] != '\0')
        return duet__error(DUET_EUNSUPPORTED, "%s.pretrained = '%s': start from a checkpoint "
                           "with load_from instead", path, pre);
    o.pool_seed = duet_rng_u64(rng);
    o.dropout_seed = duet_rng_u64(rng);
    return duet_cyclegan_create(&o, rng, out);
}
