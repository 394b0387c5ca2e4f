/* MMEditing's UnetGenerator (mmedit/models/backbones/generation_backbones/
 * unet_generator.py) and UnetSkipConnectionBlock (mmedit/models/common/
 * generation_model_utils.py), built from the innermost block outwards.
 *
 * A block's "model" is a Sequential of down ConvModule, [inner block], up
 * ConvModule, [Tanh or Dropout]. Every block but the outermost returns
 * cat([x', model(x)], 1), where x' is LeakyReLU(x): in PyTorch the down
 * ConvModule's in-place LeakyReLU (order act-conv-norm) rewrites x before
 * torch.cat reads it, so the skip carries the activated input. duet
 * computes x' once and feeds it both to the skip and to the down conv.
 * (The parent's up ConvModule starts with a ReLU, and relu(lrelu(x)) ==
 * relu(x) in value and gradient, so the quirk changes no result; it is
 * kept so that the intermediate tensors are PyTorch's.) */
#include "models/models_internal.h"

#include <stdio.h>

typedef struct block_impl {
    bool outermost;
} block_impl;

typedef struct unet_impl {
    int num_down;
} unet_impl;

static int block_forward(duet_module *self, int nin, duet_tensor *const *in,
                         duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "UnetSkipConnectionBlock takes one input, got %d", nin);
    duet_module *seq = duet_module_child(self, "model");
    if (((const block_impl *)duet_module_impl(self))->outermost)
        return duet_module_forward(seq, in[0], out);
    duet_module *down = duet_module_child_at(seq, 0);
    duet_tensor *skip = NULL, *h = NULL;
    DUET_TRY(duet__conv_module_act(down, in[0], &skip));
    int rc = duet__conv_module_forward(down, skip, true, &h);
    for (size_t i = 1; i < duet_module_child_count(seq) && rc == DUET_OK; i++)
        rc = duet__gan_step(duet_module_child_at(seq, i), &h);
    if (rc == DUET_OK) {
        duet_tensor *parts[2] = {skip, h};
        rc = duet_concat_channels(2, parts, out);
    }
    duet_tensor_release(skip);
    duet_tensor_release(h);
    return rc;
}

static const duet_module_type block_type = {"UnetSkipConnectionBlock", block_forward, free};

typedef enum block_kind { BLOCK_INNERMOST, BLOCK_MIDDLE, BLOCK_OUTERMOST } block_kind;

/* One UnetSkipConnectionBlock(outer, inner, in_channels, submodule, kind,
 * norm, use_dropout); takes ownership of sub (NULL for the innermost). */
static int block_create(duet_module **out, int outer, int inner, int in_ch, duet_module *sub,
                        block_kind kind, duet_gen_norm norm, bool use_dropout,
                        duet_rng *rng, duet_rng *dropout_rng) {
    *out = NULL;
    const bool use_bias = norm == DUET_GEN_NORM_IN;
    duet__cm_opts down = {.in_channels = in_ch, .out_channels = inner, .kernel = 4, .stride = 2,
                          .padding = 1, .bias = use_bias, .with_norm = true, .norm = norm,
                          .act = DUET__CM_ACT_LRELU, .act_first = true};
    duet__cm_opts up = {.in_channels = 2 * inner, .out_channels = outer, .kernel = 4,
                        .stride = 2, .padding = 1, .bias = use_bias, .deconv = true,
                        .with_norm = true, .norm = norm, .act = DUET__CM_ACT_RELU,
                        .act_first = true};
    if (kind == BLOCK_OUTERMOST) {
        down.act = DUET__CM_ACT_NONE;
        down.with_norm = false;
        up.bias = true;
        up.with_norm = false;
    } else if (kind == BLOCK_INNERMOST) {
        down.with_norm = false;
        up.in_channels = inner;
    }
    block_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) {
        duet_module_destroy(sub);
        return duet__error(DUET_ENOMEM, "UnetSkipConnectionBlock: out of memory");
    }
    impl->outermost = kind == BLOCK_OUTERMOST;
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    int rc = duet_module_create(&block_type, impl, &m);
    if (rc == DUET_OK) rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "model", seq);
    if (rc == DUET_OK) rc = duet__conv_module_create(&down, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    if (rc == DUET_OK && sub != NULL) {
        rc = duet_sequential_append(seq, sub);
        sub = NULL;
    }
    if (rc == DUET_OK) rc = duet__conv_module_create(&up, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    if (rc == DUET_OK && kind == BLOCK_OUTERMOST) {
        rc = duet_activation_module_create(DUET_ACT_TANH, 0.0f, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    } else if (rc == DUET_OK && kind == BLOCK_MIDDLE && use_dropout) {
        rc = duet_dropout_module_create(0.5f, dropout_rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    }
    duet_module_destroy(sub);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

duet_unet_generator_opts duet_unet_generator_opts_default(void) {
    return (duet_unet_generator_opts){.in_channels = 3, .out_channels = 3, .num_down = 8,
                                      .base_channels = 64, .norm = DUET_GEN_NORM_BN,
                                      .use_dropout = false, .init_gain = 0.02f};
}

static int unet_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "UnetGenerator takes one input, got %d", nin);
    const int nd = ((const unet_impl *)duet_module_impl(self))->num_down;
    const duet_tensor *x = in[0];
    const int64_t f = (int64_t)1 << nd;
    if (x->ndim != 4 || x->shape[2] % f != 0 || x->shape[3] % f != 0) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "UnetGenerator: input %s; with num_down %d, H and W "
                           "must be multiples of %lld", duet_shape_str(x, s, sizeof s), nd,
                           (long long)f);
    }
    int rc = duet_module_forward(duet_module_child(self, "model"), in[0], out);
    return rc == DUET_OK ? rc : duet__error_context(rc, "UnetGenerator forward");
}

static const duet_module_type unet_type = {"UnetGenerator", unet_forward, free};

int duet_unet_generator_create(const duet_unet_generator_opts *opts, duet_rng *init_rng,
                               duet_rng *dropout_rng, duet_module **out) {
    *out = NULL;
    const duet_unet_generator_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.base_channels < 1 || o.num_down < 5 ||
        o.num_down > 16)
        return duet__error(DUET_EINVAL, "UnetGenerator: in_channels %d, out_channels %d, "
                           "base_channels %d, num_down %d; channels must be positive and "
                           "num_down in 5..16", o.in_channels, o.out_channels, o.base_channels,
                           o.num_down);
    if (o.use_dropout && o.num_down > 5 && dropout_rng == NULL)
        return duet__error(DUET_EINVAL, "UnetGenerator: use_dropout needs a dropout rng");
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "UnetGenerator: init rng is NULL");
    const int b = o.base_channels;
    duet_module *blk = NULL;
    int rc = block_create(&blk, 8 * b, 8 * b, 8 * b, NULL, BLOCK_INNERMOST, o.norm, false,
                          init_rng, dropout_rng);
    for (int i = 0; i < o.num_down - 5 && rc == DUET_OK; i++)
        rc = block_create(&blk, 8 * b, 8 * b, 8 * b, blk, BLOCK_MIDDLE, o.norm, o.use_dropout,
                          init_rng, dropout_rng);
    /* From 8b inner channels down to b: (outer, inner) = (4b, 8b), (2b, 4b), (b, 2b). */
    for (int k = 4; k >= 1 && rc == DUET_OK; k /= 2)
        rc = block_create(&blk, k * b, 2 * k * b, k * b, blk, BLOCK_MIDDLE, o.norm, false,
                          init_rng, dropout_rng);
    if (rc == DUET_OK)
        rc = block_create(&blk, o.out_channels, b, o.in_channels, blk, BLOCK_OUTERMOST, o.norm,
                          false, init_rng, dropout_rng);
    if (rc != DUET_OK) return rc;
    unet_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) {
        duet_module_destroy(blk);
        return duet__error(DUET_ENOMEM, "UnetGenerator: out of memory");
    }
    impl->num_down = o.num_down;
    duet_module *m = NULL;
    rc = duet_module_create(&unet_type, impl, &m);
    if (rc != DUET_OK) {
        duet_module_destroy(blk);
        return rc;
    }
    rc = duet_module_add_child(m, "model", blk); /* destroys blk on failure */
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
