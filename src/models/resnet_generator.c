/* MMEditing's ResnetGenerator (mmedit/models/backbones/generation_backbones/
 * resnet_generator.py) with padding_mode 'reflect', and its
 * ResidualBlockWithDropout (mmedit/models/common/generation_model_utils.py):
 * model = Sequential of a 7x7 ConvModule, two stride-2 downsampling
 * ConvModules, num_blocks residual blocks, two stride-2 ConvTranspose2d
 * ConvModules and a 7x7 ConvModule with Tanh. */
#include "models/models_internal.h"

/* ---- ResidualBlockWithDropout: x + block(x) ----------------------------------- */

static int resblock_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "ResidualBlockWithDropout takes one input, got %d", nin);
    duet_tensor *h = NULL;
    DUET_TRY(duet_module_forward(duet_module_child(self, "block"), in[0], &h));
    int rc = duet_add(in[0], h, out);
    duet_tensor_release(h);
    return rc;
}

static const duet_module_type resblock_type = {"ResidualBlockWithDropout", resblock_forward,
                                               NULL};

static int resblock_create(duet_module **out, int channels, duet_gen_norm norm,
                           bool use_dropout, duet_rng *rng, duet_rng *dropout_rng) {
    *out = NULL;
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&resblock_type, NULL, &m));
    duet__cm_opts cm = {.in_channels = channels, .out_channels = channels, .kernel = 3,
                        .stride = 1, .padding = 1, .bias = norm == DUET_GEN_NORM_IN,
                        .reflect = true, .with_norm = true, .norm = norm,
                        .act = DUET__CM_ACT_RELU};
    int rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "block", seq);
    if (rc == DUET_OK) rc = duet__conv_module_create(&cm, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    if (rc == DUET_OK && use_dropout) {
        rc = duet_dropout_module_create(0.5f, dropout_rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    }
    cm.act = DUET__CM_ACT_NONE;
    if (rc == DUET_OK) rc = duet__conv_module_create(&cm, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- ResnetGenerator ------------------------------------------------------------ */

duet_resnet_generator_opts duet_resnet_generator_opts_default(void) {
    return (duet_resnet_generator_opts){.in_channels = 3, .out_channels = 3,
                                        .base_channels = 64, .num_blocks = 9,
                                        .norm = DUET_GEN_NORM_IN, .use_dropout = false,
                                        .init_gain = 0.02f};
}

static int resnet_forward(duet_module *self, int nin, duet_tensor *const *in,
                          duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "ResnetGenerator takes one input, got %d", nin);
    int rc = duet_module_forward(duet_module_child(self, "model"), in[0], out);
    return rc == DUET_OK ? rc : duet__error_context(rc, "ResnetGenerator forward");
}

static const duet_module_type resnet_type = {"ResnetGenerator", resnet_forward, NULL};

/* Appends a ConvModule built from cm to seq. */
static int append_cm(duet_module *seq, const duet__cm_opts *cm, duet_rng *rng) {
    duet_module *part = NULL;
    DUET_TRY(duet__conv_module_create(cm, rng, &part));
    return duet_sequential_append(seq, part);
}

int duet_resnet_generator_create(const duet_resnet_generator_opts *opts, duet_rng *init_rng,
                                 duet_rng *dropout_rng, duet_module **out) {
    *out = NULL;
    const duet_resnet_generator_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.base_channels < 1 || o.num_blocks < 0)
        return duet__error(DUET_EINVAL, "ResnetGenerator: in_channels %d, out_channels %d, "
                           "base_channels %d, num_blocks %d; channels must be positive and "
                           "num_blocks >= 0", o.in_channels, o.out_channels, o.base_channels,
                           o.num_blocks);
    if (o.use_dropout && o.num_blocks > 0 && dropout_rng == NULL)
        return duet__error(DUET_EINVAL, "ResnetGenerator: use_dropout needs a dropout rng");
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "ResnetGenerator: init rng is NULL");
    const bool use_bias = o.norm == DUET_GEN_NORM_IN;
    const int b = o.base_channels;
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&resnet_type, NULL, &m));
    int rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "model", seq);
    duet__cm_opts cm = {.in_channels = o.in_channels, .out_channels = b, .kernel = 7,
                        .stride = 1, .padding = 3, .bias = use_bias, .reflect = true,
                        .with_norm = true, .norm = o.norm, .act = DUET__CM_ACT_RELU};
    if (rc == DUET_OK) rc = append_cm(seq, &cm, init_rng);
    /* Downsampling keeps zero padding: MMEditing passes no padding_mode there. */
    for (int i = 0; i < 2 && rc == DUET_OK; i++) {
        cm = (duet__cm_opts){.in_channels = b << i, .out_channels = b << (i + 1), .kernel = 3,
                             .stride = 2, .padding = 1, .bias = use_bias, .with_norm = true,
                             .norm = o.norm, .act = DUET__CM_ACT_RELU};
        rc = append_cm(seq, &cm, init_rng);
    }
    for (int i = 0; i < o.num_blocks && rc == DUET_OK; i++) {
        rc = resblock_create(&part, 4 * b, o.norm, o.use_dropout, init_rng, dropout_rng);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    }
    for (int i = 0; i < 2 && rc == DUET_OK; i++) {
        cm = (duet__cm_opts){.in_channels = b << (2 - i), .out_channels = b << (1 - i),
                             .kernel = 3, .stride = 2, .padding = 1, .bias = use_bias,
                             .deconv = true, .output_padding = 1, .with_norm = true,
                             .norm = o.norm, .act = DUET__CM_ACT_RELU};
        rc = append_cm(seq, &cm, init_rng);
    }
    cm = (duet__cm_opts){.in_channels = b, .out_channels = o.out_channels, .kernel = 7,
                         .stride = 1, .padding = 3, .bias = true, .reflect = true,
                         .with_norm = false, .act = DUET__CM_ACT_TANH};
    if (rc == DUET_OK) rc = append_cm(seq, &cm, init_rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    rc = duet_generation_init_weights(m, o.init_gain, init_rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
