/* MMEditing's PatchDiscriminator (mmedit/models/components/discriminators/
 * patch_disc.py): a Sequential "model" of ConvModules (4x4 convs, LeakyReLU
 * 0.2) ending in a plain Conv2d to a one-channel map of patch logits. */
#include "models/models_internal.h"

duet_patch_discriminator_opts duet_patch_discriminator_opts_default(void) {
    return (duet_patch_discriminator_opts){.in_channels = 6, .base_channels = 64, .num_conv = 3,
                                           .norm = DUET_GEN_NORM_BN, .init_gain = 0.02f};
}

static int patch_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "PatchDiscriminator takes one input, got %d", nin);
    int rc = duet_module_forward(duet_module_child(self, "model"), in[0], out);
    return rc == DUET_OK ? rc : duet__error_context(rc, "PatchDiscriminator forward");
}

static const duet_module_type patch_type = {"PatchDiscriminator", patch_forward, NULL};

static int min_int(int a, int b) { return a < b ? a : b; }

int duet_patch_discriminator_create(const duet_patch_discriminator_opts *opts, duet_rng *init_rng,
                                    duet_module **out) {
    *out = NULL;
    const duet_patch_discriminator_opts o = *opts;
    if (o.in_channels < 1 || o.base_channels < 1 || o.num_conv < 1 || o.num_conv > 30)
        return duet__error(DUET_EINVAL, "PatchDiscriminator: in_channels %d, base_channels %d, "
                           "num_conv %d; all must be positive (num_conv at most 30)",
                           o.in_channels, o.base_channels, o.num_conv);
    if (init_rng == NULL)
        return duet__error(DUET_EINVAL, "PatchDiscriminator: init rng is NULL");
    const bool use_bias = o.norm == DUET_GEN_NORM_IN;
    const int b = o.base_channels;
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&patch_type, NULL, &m));
    int rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "model", seq);
    /* Input layer: stride 2, bias, no norm. */
    duet__cm_opts cm = {.in_channels = o.in_channels, .out_channels = b, .kernel = 4,
                        .stride = 2, .padding = 1, .bias = true, .with_norm = false,
                        .norm = o.norm, .act = DUET__CM_ACT_LRELU};
    if (rc == DUET_OK) rc = duet__conv_module_create(&cm, init_rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    /* num_conv - 1 stride-2 layers and one stride-1 layer, the channel
     * multiple doubling up to 8. */
    int mult = 1;
    for (int n = 1; n <= o.num_conv && rc == DUET_OK; n++) {
        const int next = min_int(1 << min_int(n, 3), 8);
        cm = (duet__cm_opts){.in_channels = b * mult, .out_channels = b * next, .kernel = 4,
                             .stride = n < o.num_conv ? 2 : 1, .padding = 1, .bias = use_bias,
                             .with_norm = true, .norm = o.norm, .act = DUET__CM_ACT_LRELU};
        rc = duet__conv_module_create(&cm, init_rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
        mult = next;
    }
    if (rc == DUET_OK) rc = duet_conv2d_module_create(b * mult, 1, 4, 1, 1, true, init_rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
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
