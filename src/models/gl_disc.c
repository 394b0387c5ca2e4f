/* MMEditing's MultiLayerDiscriminator, GLDiscs and DeepFillv1Discriminators
 * (mmedit/models/components/discriminators/multi_layer_disc.py, gl_disc.py,
 * deepfill_disc.py), the discriminators of the inpaintors: strided
 * ConvModules, an optional LinearModule head, all optionally under spectral
 * norm (DeepFillv2's SN-PatchGAN); GLDiscs joins a global and a local one by
 * a Linear, DeepFillv1Discriminators keeps their two predictions apart. */
#include <stdio.h>

#include "models/models_internal.h"

duet_multi_layer_disc_opts duet_multi_layer_disc_opts_default(void) {
    return (duet_multi_layer_disc_opts){.in_channels = 3, .max_channels = 512, .num_convs = 5,
                                        .fc_in_channels = 0, .fc_out_channels = 1024,
                                        .kernel_size = 5, .with_norm = false,
                                        .act = DUET_MLD_ACT_RELU, .out_act = DUET_MLD_ACT_RELU,
                                        .with_input_norm = true, .with_out_convs = false};
}

static duet__cm_act cm_act(duet_mld_act a) {
    switch (a) {
    case DUET_MLD_ACT_RELU: return DUET__CM_ACT_RELU;
    case DUET_MLD_ACT_LRELU: return DUET__CM_ACT_LRELU;
    case DUET_MLD_ACT_TANH: return DUET__CM_ACT_TANH;
    case DUET_MLD_ACT_ELU: return DUET__CM_ACT_ELU;
    default: return DUET__CM_ACT_NONE;
    }
}

/* ---- LinearModule: "linear", then "activate" when it has one ------------------ */

static int linear_module_forward(duet_module *self, int nin, duet_tensor *const *in,
                                 duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "LinearModule takes one input, got %d", nin);
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = duet__gan_step(duet_module_child(self, "linear"), &h);
    duet_module *act = duet_module_child(self, "activate");
    if (rc == DUET_OK && act != NULL) rc = duet__gan_step(act, &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type linear_module_type = {"LinearModule", linear_module_forward, NULL};

/* A Linear's or Conv2d's weight: "weight_orig" under spectral norm. */
static duet_tensor *layer_weight(const duet_module *m) {
    duet_tensor *w = duet_module_param(m, "weight");
    return w != NULL ? w : duet_module_param(m, "weight_orig");
}

/* nn.init.normal_(weight, 0, 0.02); constant_(bias, 0). */
static int init_linear(duet_module *lin, duet_rng *rng) {
    duet_tensor *w = layer_weight(lin), *b = duet_module_param(lin, "bias");
    float *d = NULL;
    DUET_TRY(duet_tensor_map_write(w, false, &d));
    for (int64_t i = 0; i < w->numel; i++) d[i] = 0.02f * duet_rng_normal(rng);
    DUET_TRY(duet_tensor_unmap_write(w, d));
    return b != NULL ? duet_tensor_fill(b, 0.0f) : DUET_OK;
}

static int linear_module_create(int64_t in, int outc, duet_mld_act act, bool sn,
                                duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (in > INT32_MAX)
        return duet__error(DUET_EINVAL, "LinearModule: fc_in_channels %lld is too large",
                           (long long)in);
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&linear_module_type, NULL, &m));
    int rc = sn ? duet_sn_linear_module_create((int)in, outc, true, 1e-12f, rng, &part)
                : duet_linear_module_create((int)in, outc, true, rng, &part);
    if (rc == DUET_OK) {
        rc = init_linear(part, rng);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "linear", part);
        else duet_module_destroy(part);
    }
    if (rc == DUET_OK && act != DUET_MLD_ACT_NONE) {
        const duet_activation kind = act == DUET_MLD_ACT_RELU    ? DUET_ACT_RELU
                                     : act == DUET_MLD_ACT_LRELU ? DUET_ACT_LEAKY_RELU
                                     : act == DUET_MLD_ACT_ELU   ? DUET_ACT_ELU
                                                                 : DUET_ACT_TANH;
        rc = duet_activation_module_create(kind, 0.2f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "activate", part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- MultiLayerDiscriminator ------------------------------------------------------ */

typedef struct mld_impl {
    int nconvs; /* num_convs + 2 with out convs */
    bool with_fc;
} mld_impl;

static int mld_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "MultiLayerDiscriminator takes one input, got %d", nin);
    const mld_impl *impl = duet_module_impl(self);
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = DUET_OK;
    for (int i = 1; i <= impl->nconvs && rc == DUET_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "conv%d", i);
        rc = duet__gan_step(duet_module_child(self, name), &h);
    }
    if (rc == DUET_OK && impl->with_fc) {
        /* x.view(N, -1) */
        duet_tensor *flat = NULL;
        rc = duet_reshape(h, 2, (int64_t[]){h->shape[0], h->numel / h->shape[0]}, &flat);
        duet_tensor_release(h);
        h = flat;
        if (rc == DUET_OK) {
            duet_module *fc = duet_module_child(self, "fc");
            int64_t want = layer_weight(duet_module_child(fc, "linear"))->shape[1];
            if (h->shape[1] != want)
                rc = duet__error(DUET_ESHAPE, "MultiLayerDiscriminator: the convs give %lld "
                                 "values per sample, fc_in_channels is %lld (for a %lldx%lld "
                                 "input)", (long long)h->shape[1], (long long)want,
                                 (long long)in[0]->shape[2], (long long)in[0]->shape[3]);
            else rc = duet__gan_step(fc, &h);
        }
    }
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return duet__error_context(rc, "MultiLayerDiscriminator forward");
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type mld_type = {"MultiLayerDiscriminator", mld_forward, free};

static int min_int(int a, int b) { return a < b ? a : b; }

static int add_conv(duet_module *m, int index, const duet__cm_opts *cm, duet_rng *rng) {
    duet_module *part = NULL;
    char name[24];
    snprintf(name, sizeof name, "conv%d", index);
    DUET_TRY(duet__conv_module_create(cm, rng, &part));
    return duet_module_add_child(m, name, part);
}

int duet_multi_layer_disc_create(const duet_multi_layer_disc_opts *opts, duet_rng *init_rng,
                                 duet_module **out) {
    *out = NULL;
    const duet_multi_layer_disc_opts o = *opts;
    if (o.in_channels < 1 || o.max_channels < 1 || o.num_convs < 1 || o.num_convs > 16 ||
        o.kernel_size < 1 || o.kernel_size > 15 || o.fc_in_channels < 0 ||
        (o.fc_in_channels > 0 && o.fc_out_channels < 1))
        return duet__error(DUET_EINVAL, "MultiLayerDiscriminator: in_channels %d, max_channels "
                           "%d, num_convs %d (1..16), kernel_size %d (1..15), fc_in_channels "
                           "%lld, fc_out_channels %d: out of range", o.in_channels,
                           o.max_channels, o.num_convs, o.kernel_size,
                           (long long)o.fc_in_channels, o.fc_out_channels);
    if (init_rng == NULL)
        return duet__error(DUET_EINVAL, "MultiLayerDiscriminator: init rng is NULL");
    mld_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "MultiLayerDiscriminator: out of memory");
    impl->nconvs = o.num_convs + (o.with_out_convs ? 2 : 0);
    impl->with_fc = o.fc_in_channels > 0;
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&mld_type, impl, &m));
    int rc = DUET_OK, cur = o.in_channels;
    for (int i = 0; i < o.num_convs && rc == DUET_OK; i++) {
        const int oc = min_int(64 << i, o.max_channels);
        bool norm = o.with_norm;
        duet_mld_act act = o.act;
        if (i == 0 && !o.with_input_norm) {
            norm = false;
        } else if (i == o.num_convs - 1 && !impl->with_fc && !o.with_out_convs) {
            norm = false;
            act = o.out_act;
        }
        /* mmcv's bias='auto': a bias when there is no norm */
        duet__cm_opts cm = {.in_channels = cur, .out_channels = oc, .kernel = o.kernel_size,
                            .stride = 2, .padding = o.kernel_size / 2, .bias = !norm,
                            .with_norm = norm, .norm = DUET_GEN_NORM_BN, .act = cm_act(act),
                            .spectral_norm = o.with_spectral_norm};
        rc = add_conv(m, i + 1, &cm, init_rng);
        cur = oc;
    }
    if (rc == DUET_OK && o.with_out_convs) {
        const int oc = min_int(64 << o.num_convs, o.max_channels);
        duet__cm_opts cm = {.in_channels = cur, .out_channels = oc, .kernel = o.kernel_size,
                            .stride = 1, .padding = o.kernel_size / 2, .bias = !o.with_norm,
                            .with_norm = o.with_norm, .norm = DUET_GEN_NORM_BN,
                            .act = cm_act(o.act), .spectral_norm = o.with_spectral_norm};
        rc = add_conv(m, o.num_convs + 1, &cm, init_rng);
        cm = (duet__cm_opts){.in_channels = oc, .out_channels = 1, .kernel = o.kernel_size,
                             .stride = 1, .padding = o.kernel_size / 2, .bias = true,
                             .act = DUET__CM_ACT_NONE, .spectral_norm = o.with_spectral_norm};
        if (rc == DUET_OK) rc = add_conv(m, o.num_convs + 2, &cm, init_rng);
    }
    if (rc == DUET_OK && impl->with_fc) {
        duet_module *fc = NULL;
        rc = linear_module_create(o.fc_in_channels, o.fc_out_channels, o.out_act,
                                  o.with_spectral_norm, init_rng, &fc);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "fc", fc);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- GLDiscs -------------------------------------------------------------------------- */

static int gl_discs_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "GLDiscs takes (global image, local patch), got %d "
                           "inputs", nin);
    duet_tensor *g = NULL, *l = NULL, *cat = NULL;
    int rc = duet_module_forward(duet_module_child(self, "global_disc"), in[0], &g);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "local_disc"), in[1], &l);
    /* torch.cat([g_pred, l_pred], dim=1) of (N, F) tensors: as channels of (N, F, 1, 1) */
    duet_tensor *g4 = NULL, *l4 = NULL;
    if (rc == DUET_OK) rc = duet_reshape(g, 4, (int64_t[]){g->shape[0], g->shape[1], 1, 1}, &g4);
    if (rc == DUET_OK) rc = duet_reshape(l, 4, (int64_t[]){l->shape[0], l->shape[1], 1, 1}, &l4);
    if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){g4, l4}, &cat);
    duet_tensor *flat = NULL;
    if (rc == DUET_OK)
        rc = duet_reshape(cat, 2, (int64_t[]){cat->shape[0], cat->shape[1]}, &flat);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "fc"), flat, out);
    duet_tensor_release(g);
    duet_tensor_release(l);
    duet_tensor_release(g4);
    duet_tensor_release(l4);
    duet_tensor_release(cat);
    duet_tensor_release(flat);
    return rc == DUET_OK ? rc : duet__error_context(rc, "GLDiscs forward");
}

static const duet_module_type gl_discs_type = {"GLDiscs", gl_discs_forward, NULL};

int duet_gl_discs_create(const duet_multi_layer_disc_opts *global,
                         const duet_multi_layer_disc_opts *local, duet_rng *init_rng,
                         duet_module **out) {
    *out = NULL;
    if (global->fc_in_channels <= 0 || local->fc_in_channels <= 0)
        return duet__error(DUET_EINVAL, "GLDiscs: global_disc_cfg and local_disc_cfg need "
                           "fc_in_channels (their outputs are joined by a Linear)");
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&gl_discs_type, NULL, &m));
    int rc = duet_multi_layer_disc_create(global, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "global_disc", part);
    if (rc == DUET_OK) rc = duet_multi_layer_disc_create(local, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "local_disc", part);
    if (rc == DUET_OK)
        rc = duet_linear_module_create(global->fc_out_channels + local->fc_out_channels, 1, true,
                                       init_rng, &part);
    if (rc == DUET_OK) {
        rc = init_linear(part, init_rng);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "fc", part);
        else duet_module_destroy(part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- DeepFillv1Discriminators ------------------------------------------------------ */

int duet_deepfill_v1_discs_forward(duet_module *discs, duet_tensor *global_img,
                                   duet_tensor *local_img, duet_tensor **global_pred,
                                   duet_tensor **local_pred) {
    *global_pred = *local_pred = NULL;
    duet_module *g = duet_module_child(discs, "global_disc");
    duet_module *l = duet_module_child(discs, "local_disc");
    if (g == NULL || l == NULL)
        return duet__error(DUET_EINVAL, "DeepFillv1Discriminators forward: a %s has no "
                           "global_disc and local_disc", duet_module_type_name(discs));
    int rc = duet_module_forward(g, global_img, global_pred);
    if (rc == DUET_OK) rc = duet_module_forward(l, local_img, local_pred);
    if (rc != DUET_OK) {
        duet_tensor_release(*global_pred);
        *global_pred = NULL;
        return duet__error_context(rc, "DeepFillv1Discriminators forward");
    }
    return DUET_OK;
}

/* (N, ...) -> (N, F, 1, 1), F the rest. */
static int as_channels(duet_tensor *t, duet_tensor **out) {
    return duet_reshape(t, 4, (int64_t[]){t->shape[0], t->numel / t->shape[0], 1, 1}, out);
}

static int deepfill_discs_forward(duet_module *self, int nin, duet_tensor *const *in,
                                  duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "DeepFillv1Discriminators takes (global image, local "
                           "patch), got %d inputs", nin);
    duet_tensor *g = NULL, *l = NULL, *g4 = NULL, *l4 = NULL, *cat = NULL;
    int rc = duet_deepfill_v1_discs_forward(self, in[0], in[1], &g, &l);
    if (rc == DUET_OK) rc = as_channels(g, &g4);
    if (rc == DUET_OK) rc = as_channels(l, &l4);
    if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){g4, l4}, &cat);
    if (rc == DUET_OK) rc = duet_reshape(cat, 2, (int64_t[]){cat->shape[0], cat->shape[1]}, out);
    duet_tensor *ts[] = {g, l, g4, l4, cat};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    return rc;
}

static const duet_module_type deepfill_discs_type = {"DeepFillv1Discriminators",
                                                     deepfill_discs_forward, NULL};

/* normal_init(m, 0, 0.02) of every Conv2d and Linear below m, in
 * self.modules() order. */
static int deepfill_init(duet_module *m, duet_rng *rng) {
    if (duet_module_is(m, "Conv2d") || duet_module_is(m, "Linear"))
        DUET_TRY(init_linear(m, rng));
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        DUET_TRY(deepfill_init(duet_module_child_at(m, i), rng));
    return DUET_OK;
}

int duet_deepfill_v1_discs_create(const duet_multi_layer_disc_opts *global,
                                  const duet_multi_layer_disc_opts *local, duet_rng *init_rng,
                                  duet_module **out) {
    *out = NULL;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&deepfill_discs_type, NULL, &m));
    int rc = duet_multi_layer_disc_create(global, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "global_disc", part);
    if (rc == DUET_OK) rc = duet_multi_layer_disc_create(local, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "local_disc", part);
    if (rc == DUET_OK) rc = deepfill_init(m, init_rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return duet__error_context(rc, "DeepFillv1Discriminators");
    }
    *out = m;
    return DUET_OK;
}
