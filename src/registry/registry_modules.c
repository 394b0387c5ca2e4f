/* The networks and losses a config can name: one row each (type name,
 * options, reader, create), read from MMEditing's keys. Every key read is
 * marked used, so duet_config_check_unused reports the others. */
#include "registry/registry_internal.h"
#include "export/export.h"

#include <float.h>
#include <stdio.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- getters shared by the registry's readers ------------------------------------- */

/* Typed getters with defaults, narrowing to the types of the option structs. */
int duet__reg_get_int_in(duet_config *c, const char *key, int def, int min, int *out) {
    int64_t v;
    DUET_TRY(duet_config_get_int_in_or(c, key, def, min, INT_MAX, &v));
    *out = (int)v;
    return DUET_OK;
}

int duet__reg_get_int(duet_config *c, const char *key, int def, int *out) {
    return duet__reg_get_int_in(c, key, def, INT_MIN, out);
}

int duet__reg_get_float(duet_config *c, const char *key, float def, float *out) {
    double v;
    DUET_TRY(duet_config_get_double_in_or(c, key, def, -FLT_MAX, FLT_MAX, &v));
    *out = (float)v;
    return DUET_OK;
}

/* The group at path as a view, and its type. */
int duet__reg_open_group(duet_config *cfg, const char *path, duet_config **sub, const char **type) {
    *sub = NULL;
    DUET_TRY(duet_config_sub(cfg, path, sub));
    int rc = duet_config_get_string(*sub, "type", type);
    if (rc != DUET_OK) {
        duet_config_destroy(*sub);
        *sub = NULL;
    }
    return rc;
}

/* ---- option readers ------------------------------------------------------------- */

static int read_msrresnet(duet_config *c, void *opts) {
    duet_msrresnet_opts *o = opts;
    *o = duet_msrresnet_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    return duet__reg_get_int(c, "upscale_factor", o->upscale_factor, &o->upscale_factor);
}

static int read_modified_vgg(duet_config *c, void *opts) {
    duet_modified_vgg_opts *o = opts;
    *o = duet_modified_vgg_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    return duet__reg_get_int(c, "input_size", o->input_size, &o->input_size);
}

static int read_pixel_loss(duet_config *c, void *opts) {
    float *weight = opts;
    const char *red;
    DUET_TRY(duet__reg_get_float(c, "loss_weight", 1.0f, weight));
    DUET_TRY(duet_config_get_string_or(c, "reduction", "mean", &red));
    if (strcmp(red, "mean") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s: reduction '%s' is not supported (only 'mean')",
                           duet_config_name(c), red);
    return DUET_OK;
}

static int read_gan_loss(duet_config *c, void *opts) {
    duet_gan_loss_opts *o = opts;
    *o = duet_gan_loss_opts_default();
    DUET_TRY(duet_config_get_string_or(c, "gan_type", "vanilla", &o->gan_type));
    DUET_TRY(duet__reg_get_float(c, "real_label_val", o->real_label_val, &o->real_label_val));
    DUET_TRY(duet__reg_get_float(c, "fake_label_val", o->fake_label_val, &o->fake_label_val));
    return duet__reg_get_float(c, "loss_weight", o->loss_weight, &o->loss_weight);
}

/* torchvision's VGG configurations, 0 = max pool. */
static int vgg_cfg(const char *vgg_type, int *cfg, int *n) {
    static const int v11[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v13[] = {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v16[] = {64,  64,  0,   128, 128, 0,   256, 256, 256,
                              0,   512, 512, 512, 0,   512, 512, 512, 0};
    static const int v19[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                              512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
    const int *src;
    size_t len;
    if (strcmp(vgg_type, "vgg11") == 0) src = v11, len = sizeof v11 / sizeof *v11;
    else if (strcmp(vgg_type, "vgg13") == 0) src = v13, len = sizeof v13 / sizeof *v13;
    else if (strcmp(vgg_type, "vgg16") == 0) src = v16, len = sizeof v16 / sizeof *v16;
    else if (strcmp(vgg_type, "vgg19") == 0) src = v19, len = sizeof v19 / sizeof *v19;
    else
        return duet__error(DUET_ECONFIG, "PerceptualLoss: vgg_type '%s' (use vgg11, vgg13, vgg16, "
                           "vgg19, or give cfg = [...])", vgg_type);
    for (size_t i = 0; i < len; i++) cfg[i] = src[i];
    *n = (int)len;
    return DUET_OK;
}

/* layer_weights as two arrays: layer_ids = [34]; layer_weights = [1.0]; */
static int read_layer_arrays(duet_config *c, duet_perceptual_loss_opts *o) {
    int64_t ids[DUET_PERCEPTUAL_MAX_LAYERS];
    double w[DUET_PERCEPTUAL_MAX_LAYERS];
    size_t nids = 0, nw = 0;
    DUET_TRY(duet_config_get_double_array(c, "layer_weights", w, DUET_PERCEPTUAL_MAX_LAYERS,
                                          &nw));
    DUET_TRY(duet_config_get_int_array(c, "layer_ids", ids, DUET_PERCEPTUAL_MAX_LAYERS,
                                       &nids));
    if (nids != nw || nw == 0)
        return duet__error(DUET_ECONFIG, "%s: layer_ids has %zu entries and layer_weights "
                           "%zu; give one weight per layer index", duet_config_name(c),
                           nids, nw);
    o->nlayer_weights = (int)nw;
    for (size_t i = 0; i < nw; i++) {
        if (ids[i] < 0 || ids[i] > INT_MAX || !(fabs(w[i]) <= FLT_MAX))
            return duet__error(DUET_ECONFIG, "%s: layer_ids[%zu] = %lld / layer_weights[%zu] "
                               "= %g is out of range", duet_config_name(c), i,
                               (long long)ids[i], i, w[i]);
        o->layer_ids[i] = (int)ids[i];
        o->layer_weights[i] = (float)w[i];
    }
    return DUET_OK;
}

/* layer_weights as a group whose member names end in the layer index:
 * { conv34 = 1.0; }. */
static int read_layer_group(duet_config *c, duet_perceptual_loss_opts *o) {
    size_t n = 0;
    DUET_TRY(duet_config_length(c, "layer_weights", &n));
    if (n < 1 || n > DUET_PERCEPTUAL_MAX_LAYERS)
        return duet__error(DUET_ECONFIG, "%s: layer_weights has %zu entries (1 to %d)",
                           duet_config_name(c), n, DUET_PERCEPTUAL_MAX_LAYERS);
    o->nlayer_weights = (int)n;
    for (size_t i = 0; i < n; i++) {
        const char *name;
        DUET_TRY(duet_config_member_name(c, "layer_weights", i, &name));
        const char *digits = name + strlen(name);
        while (digits > name && digits[-1] >= '0' && digits[-1] <= '9') digits--;
        if (*digits == '\0')
            return duet__error(DUET_ECONFIG, "%s: layer_weights member '%s' must end in a "
                               "layer index (conv34 = 1.0 for MMEditing's '34'), or use "
                               "layer_ids = [34]; layer_weights = [1.0];",
                               duet_config_name(c), name);
        char *key = duet__strf("layer_weights.%s", name);
        if (key == NULL) return duet__error(DUET_ENOMEM, "registry: out of memory");
        double w;
        int rc = duet_config_get_double_in(c, key, -FLT_MAX, FLT_MAX, &w);
        free(key);
        DUET_TRY(rc);
        o->layer_ids[i] = atoi(digits);
        o->layer_weights[i] = (float)w;
    }
    return DUET_OK;
}

/* vgg_type or an explicit cfg = [64, 64, 0, ...] (0: a max pool). */
static int read_vgg_stack(duet_config *c, duet_perceptual_loss_opts *o) {
    const char *vgg_type;
    DUET_TRY(duet_config_get_string_or(c, "vgg_type", "vgg19", &vgg_type));
    if (duet_config_has(c, "cfg")) {
        int64_t v[DUET_VGG_MAX_CFG];
        size_t n = 0;
        DUET_TRY(duet_config_get_int_array(c, "cfg", v, DUET_VGG_MAX_CFG, &n));
        for (size_t i = 0; i < n; i++) {
            if (v[i] < 0 || v[i] > INT_MAX)
                return duet__error(DUET_ECONFIG, "%s: cfg[%zu] = %lld is out of range (channels, "
                                   "or 0 for a max pool)", duet_config_name(c), i,
                                   (long long)v[i]);
            o->cfg[i] = (int)v[i];
        }
        o->ncfg = (int)n;
    } else {
        DUET_TRY(vgg_cfg(vgg_type, o->cfg, &o->ncfg));
    }
    return DUET_OK;
}

static int resolve_vgg_weights(duet_config *c, const char *pre, duet_perceptual_loss_opts *o);

static int read_perceptual(duet_config *c, void *opts) {
    duet_perceptual_loss_opts *o = opts;
    *o = duet_perceptual_loss_opts_default();
    /* MMEditing writes layer_weights = {'34': 1.0}; libconfig names cannot
     * be numbers, so duet reads layer_ids = [34]; layer_weights = [1.0];
     * or a group whose member names end in the index: { conv34 = 1.0; }. */
    int kind = duet_config_kind(c, "layer_weights");
    if (kind == DUET_CONFIG_ARRAY || kind == DUET_CONFIG_LIST)
        DUET_TRY(read_layer_arrays(c, o));
    else if (kind != DUET_CONFIG_NONE)
        DUET_TRY(read_layer_group(c, o));
    DUET_TRY(read_vgg_stack(c, o));
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet_config_get_bool_or(c, "use_input_norm", o->use_input_norm, &o->use_input_norm));
    DUET_TRY(duet_config_get_bool_or(c, "norm_img", o->norm_img, &o->norm_img));
    DUET_TRY(duet__reg_get_float(c, "perceptual_weight", o->perceptual_weight,
                                 &o->perceptual_weight));
    DUET_TRY(duet__reg_get_float(c, "style_weight", o->style_weight, &o->style_weight));
    DUET_TRY(duet_config_get_string_or(c, "criterion", "l1", &o->criterion));
    /* MMEditing's default is torchvision's VGG19 (pretrained =
     * 'torchvision://vgg19'); duet's own small stacks (cfg = [...]) have no
     * torchvision file, so for them absent means a seeded random init. A
     * random network for a torchvision VGG must be asked for by name. */
    const char *pre = NULL;
    DUET_TRY(duet_config_get_string_or(c, "pretrained", NULL, &pre));
    if (pre == NULL) pre = duet_config_has(c, "cfg") ? "random" : "torchvision://vgg19";
    if (pre[0] == '\0')
        return duet__error(DUET_ECONFIG, "%s: pretrained = \"\": name the VGG weights (MMEditing's "
                           "\"torchvision://vgg19\", a .pth or a .safetensors file), or ask for "
                           "a seeded random network with pretrained = \"random\"",
                           duet_config_name(c));
    if (strcmp(pre, "random") == 0) {
        o->weights_path = NULL;
        o->random_init = true;
        return DUET_OK;
    }
    return resolve_vgg_weights(c, pre, o);
}

/* The VGG weights where a PyTorch user has them: torchvision://<name> in
 * torch.hub's folder, a .pth through scripts/convert-pth.py (no code of it
 * run; the hash in a torchvision file name checked there) into a temporary
 * safetensors file (o->weights_tmp, removed by duet__module_opts_release
 * once the loss is made), or duet's safetensors as they are. */
static int resolve_vgg_weights(duet_config *c, const char *pre, duet_perceptual_loss_opts *o) {
    char *found = NULL;
    o->weights_path = pre;
    if (strncmp(pre, "torchvision://", 14) == 0) {
        if (duet__torchvision_file(pre + 14) == NULL)
            return duet__error(DUET_ECONFIG, "%s: pretrained = '%s': duet knows torchvision's "
                               "vgg11, vgg13, vgg16 and vgg19 (duet's VGG has no batch norm)",
                               duet_config_name(c), pre);
        DUET_TRY(duet__torchvision_find(pre + 14, &found));
        o->weights_path = found;
    }
    int rc = DUET_OK;
    if (duet__is_pth(o->weights_path)) {
        rc = duet__helper_convert("convert-pth.py", o->weights_path, ".safetensors", false,
                                  &o->weights_tmp);
        o->weights_path = o->weights_tmp;
    }
    free(found);
    if (rc != DUET_OK) {
        o->weights_path = NULL;
        return duet__error_context(rc, "%s.pretrained", duet_config_name(c));
    }
    return DUET_OK;
}

void duet__module_opts_release(const char *type, void *opts) {
    if (strcmp(type, "PerceptualLoss") != 0) return;
    duet_perceptual_loss_opts *o = opts;
    if (o->weights_tmp != NULL) unlink(o->weights_tmp);
    free(o->weights_tmp);
    o->weights_tmp = NULL;
}


/* MMEditing's RRDBNet arguments; the factor is `upscale_factor` in
 * MMEditing 0.16.1 and `scale` in other 0.x releases (either; default 4). */
static int read_rrdbnet(duet_config *c, void *opts) {
    duet_rrdbnet_opts *o = opts;
    *o = duet_rrdbnet_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(duet__reg_get_int(c, "growth_channels", o->growth_channels, &o->growth_channels));
    if (duet_config_has(c, "upscale_factor") && duet_config_has(c, "scale"))
        return duet__error(DUET_ECONFIG, "%s: upscale_factor and scale are both set: they name "
                           "one thing (MMEditing 0.16.1 calls it upscale_factor)",
                           duet_config_name(c));
    if (duet_config_has(c, "upscale_factor"))
        return duet__reg_get_int(c, "upscale_factor", o->upscale_factor, &o->upscale_factor);
    return duet__reg_get_int(c, "scale", o->upscale_factor, &o->upscale_factor);
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
    return duet__reg_get_float(c, "init_cfg.gain", *gain, gain);
}


static int read_unet(duet_config *c, void *opts) {
    duet_unet_generator_opts *o = opts;
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "num_down", o->num_down, &o->num_down));
    DUET_TRY(duet__reg_get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(duet_config_get_bool_or(c, "use_dropout", false, &o->use_dropout));
    return read_norm_init(c, &o->norm, &o->init_gain);
}


static int read_patch(duet_config *c, void *opts) {
    duet_patch_discriminator_opts *o = opts;
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(duet__reg_get_int(c, "num_conv", o->num_conv, &o->num_conv));
    return read_norm_init(c, &o->norm, &o->init_gain);
}


/* ResnetGenerator: padding_mode 'reflect' only (MMEditing's default). */
static int read_resnet(duet_config *c, void *opts) {
    duet_resnet_generator_opts *o = opts;
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "base_channels", o->base_channels, &o->base_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(duet_config_get_bool_or(c, "use_dropout", false, &o->use_dropout));
    const char *pad = "reflect";
    DUET_TRY(duet_config_get_string_or(c, "padding_mode", "reflect", &pad));
    if (strcmp(pad, "reflect") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s.padding_mode: '%s' (duet has 'reflect')",
                           duet_config_name(c), pad);
    return read_norm_init(c, &o->norm, &o->init_gain);
}

/* ---- the Global&Local inpaintor's networks ------------------------------------------- */

/* norm_cfg of a GL part: none, or BN / SyncBN (SyncBN is BatchNorm on one
 * process; under the wrapper the DDP's SyncBatchNorm conversion applies). */
int duet__reg_read_gl_norm(duet_config *c, const char *key, bool *norm) {
    *norm = false;
    if (!duet_config_has(c, key)) return DUET_OK;
    const char *t = NULL;
    char k[64];
    if (duet_config_kind(c, key) == DUET_CONFIG_STRING) { /* MMEditing's None */
        DUET_TRY(duet_config_get_string(c, key, &t));
        if (strcmp(t, "None") != 0)
            return duet_config_error(c, key, "'%s' must be a group {type = ...} or \"None\"",
                                     key);
        return DUET_OK;
    }
    snprintf(k, sizeof k, "%s.type", key);
    DUET_TRY(duet_config_get_string(c, k, &t));
    if (strcmp(t, "BN") != 0 && strcmp(t, "SyncBN") != 0)
        return duet_config_error(c, k, "'%s' = \"%s\": duet has \"BN\" and \"SyncBN\" here", k, t);
    *norm = true;
    return DUET_OK;
}

static int read_gl_act(duet_config *c, const char *key, duet_mld_act def, duet_mld_act *out) {
    *out = def;
    if (!duet_config_has(c, key)) return DUET_OK;
    const char *t = NULL;
    char k[64];
    /* MMEditing's None: "None" or an empty group */
    if (duet_config_kind(c, key) == DUET_CONFIG_STRING) {
        DUET_TRY(duet_config_get_string(c, key, &t));
        if (strcmp(t, "None") != 0)
            return duet_config_error(c, key, "'%s' must be a group {type = ...} or \"None\"",
                                     key);
        *out = DUET_MLD_ACT_NONE;
        return DUET_OK;
    }
    snprintf(k, sizeof k, "%s.type", key);
    if (!duet_config_has(c, k)) {
        *out = DUET_MLD_ACT_NONE;
        return duet_config_mark_used(c, key);
    }
    DUET_TRY(duet_config_get_string(c, k, &t));
    if (strcmp(t, "ReLU") == 0) *out = DUET_MLD_ACT_RELU;
    else if (strcmp(t, "Tanh") == 0) *out = DUET_MLD_ACT_TANH;
    else if (strcmp(t, "ELU") == 0) {
        double alpha = 1.0;
        snprintf(k, sizeof k, "%s.alpha", key);
        DUET_TRY(duet_config_get_double_or(c, k, 1.0, &alpha));
        if (alpha != 1.0)
            return duet_config_error(c, k, "'%s': duet's ELU has alpha = 1.0", k);
        *out = DUET_MLD_ACT_ELU;
    }
    else if (strcmp(t, "LeakyReLU") == 0) {
        double slope = 0.01;
        snprintf(k, sizeof k, "%s.negative_slope", key);
        DUET_TRY(duet_config_get_double_or(c, k, 0.01, &slope));
        if (slope != 0.2)
            return duet_config_error(c, k, "'%s': duet's LeakyReLU here has negative_slope = "
                                     "0.2 (mmcv's default is 0.01: set it)", k);
        *out = DUET_MLD_ACT_LRELU;
    } else {
        return duet_config_error(c, k, "'%s' = \"%s\": duet has ReLU, LeakyReLU, Tanh, ELU", k,
                                 t);
    }
    return DUET_OK;
}

static int read_mld(duet_config *c, void *opts) {
    duet_multi_layer_disc_opts *o = opts;
    int64_t fc_in = o->fc_in_channels;
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "max_channels", o->max_channels, &o->max_channels));
    DUET_TRY(duet__reg_get_int(c, "num_convs", o->num_convs, &o->num_convs));
    if (duet_config_has(c, "fc_in_channels") &&
        duet_config_kind(c, "fc_in_channels") == DUET_CONFIG_STRING) {
        const char *t = NULL; /* MMEditing's None: no fc */
        DUET_TRY(duet_config_get_string(c, "fc_in_channels", &t));
        if (strcmp(t, "None") != 0)
            return duet_config_error(c, "fc_in_channels", "'fc_in_channels' must be a count or "
                                     "\"None\"");
        fc_in = 0;
    } else {
        DUET_TRY(duet_config_get_int_in_or(c, "fc_in_channels", fc_in, 0, INT32_MAX, &fc_in));
    }
    o->fc_in_channels = fc_in;
    DUET_TRY(duet__reg_get_int(c, "fc_out_channels", o->fc_out_channels, &o->fc_out_channels));
    DUET_TRY(duet__reg_get_int(c, "kernel_size", o->kernel_size, &o->kernel_size));
    DUET_TRY(duet__reg_read_gl_norm(c, "norm_cfg", &o->with_norm));
    DUET_TRY(read_gl_act(c, "act_cfg", DUET_MLD_ACT_RELU, &o->act));
    DUET_TRY(read_gl_act(c, "out_act_cfg", DUET_MLD_ACT_RELU, &o->out_act));
    DUET_TRY(duet_config_get_bool_or(c, "with_input_norm", true, &o->with_input_norm));
    DUET_TRY(duet_config_get_bool_or(c, "with_out_convs", false, &o->with_out_convs));
    DUET_TRY(duet_config_get_bool_or(c, "with_spectral_norm", false, &o->with_spectral_norm));
    return DUET_OK;
}

/* GLDiscs' and DeepFillv1Discriminators' global_disc_cfg and
 * local_disc_cfg: MultiLayerDiscriminators (a type key, when written, must
 * say so). */
static int read_disc_pair(duet_config *c, duet_gl_discs_opts *o, const char *owner) {
    static const char *const groups[2] = {"global_disc_cfg", "local_disc_cfg"};
    duet_multi_layer_disc_opts *dst[2] = {&o->global, &o->local};
    for (int i = 0; i < 2; i++) {
        if (!duet_config_has(c, groups[i]))
            return duet_config_error(c, groups[i], "'%s' is required (%s)", groups[i], owner);
        char k[64];
        const char *t = NULL;
        snprintf(k, sizeof k, "%s.type", groups[i]);
        DUET_TRY(duet_config_get_string_or(c, k, "MultiLayerDiscriminator", &t));
        if (strcmp(t, "MultiLayerDiscriminator") != 0)
            return duet_config_error(c, k, "'%s' = \"%s\": %s's discriminators are "
                                     "MultiLayerDiscriminators", k, t, owner);
        duet_config *g = NULL;
        DUET_TRY(duet_config_sub(c, groups[i], &g));
        int rc = read_mld(g, dst[i]);
        duet_config_destroy(g);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

static int read_gl_discs(duet_config *c, void *opts) {
    return read_disc_pair(c, opts, "GLDiscs");
}

static int read_deepfill_discs(duet_config *c, void *opts) {
    return read_disc_pair(c, opts, "DeepFillv1Discriminators");
}

/* encoder/decoder/dilation_neck groups with MMEditing's types and norm_cfg;
 * decoder.out_act 'clip' or 'sigmoid'. */
static int read_gl_encdec(duet_config *c, void *opts) {
    duet_gl_encdec_opts *o = opts;
    static const char *const parts[3] = {"encoder", "decoder", "dilation_neck"};
    static const char *const types[3] = {"GLEncoder", "GLDecoder", "GLDilationNeck"};
    bool *norms[3] = {&o->encoder_norm, &o->decoder_norm, &o->neck_norm};
    for (int i = 0; i < 3; i++) {
        char k[64];
        const char *t = NULL;
        snprintf(k, sizeof k, "%s.type", parts[i]);
        DUET_TRY(duet_config_get_string_or(c, k, types[i], &t));
        if (strcmp(t, types[i]) != 0)
            return duet_config_error(c, k, "'%s' = \"%s\": GLEncoderDecoder's %s is %s", k, t,
                                     parts[i], types[i]);
        snprintf(k, sizeof k, "%s.norm_cfg", parts[i]);
        DUET_TRY(duet__reg_read_gl_norm(c, k, norms[i]));
    }
    const char *act = "clip";
    DUET_TRY(duet_config_get_string_or(c, "decoder.out_act", "clip", &act));
    if (strcmp(act, "clip") != 0 && strcmp(act, "sigmoid") != 0)
        return duet_config_error(c, "decoder.out_act", "'decoder.out_act' = \"%s\": "
                                 "\"clip\" or \"sigmoid\"", act);
    o->out_sigmoid = strcmp(act, "sigmoid") == 0;
    const char *conv = "conv";
    DUET_TRY(duet_config_get_string_or(c, "dilation_neck.conv_type", "conv", &conv));
    if (strcmp(conv, "conv") != 0)
        return duet_config_error(c, "dilation_neck.conv_type", "'dilation_neck.conv_type' = "
                                 "\"%s\": duet has \"conv\"", conv);
    return DUET_OK;
}

static void def_mld(void *o) {
    *(duet_multi_layer_disc_opts *)o = duet_multi_layer_disc_opts_default();
}
static void def_gl_discs(void *o) {
    duet_gl_discs_opts *g = o;
    g->global = g->local = duet_multi_layer_disc_opts_default();
}
static void def_gl_encdec(void *o) { *(duet_gl_encdec_opts *)o = (duet_gl_encdec_opts){0}; }
static int make_mld(const void *o, duet_rng *rng, duet_module **out) {
    return duet_multi_layer_disc_create(o, rng, out);
}
static int make_gl_discs(const void *o, duet_rng *rng, duet_module **out) {
    const duet_gl_discs_opts *g = o;
    return duet_gl_discs_create(&g->global, &g->local, rng, out);
}
static int make_deepfill_discs(const void *o, duet_rng *rng, duet_module **out) {
    const duet_gl_discs_opts *g = o;
    return duet_deepfill_v1_discs_create(&g->global, &g->local, rng, out);
}
static int make_gl_encdec(const void *o, duet_rng *rng, duet_module **out) {
    return duet_gl_encdec_create(o, rng, out);
}

/* ---- the rows ------------------------------------------------------------------------ */

static void def_msrresnet(void *o) { *(duet_msrresnet_opts *)o = duet_msrresnet_opts_default(); }
static void def_modified_vgg(void *o) {
    *(duet_modified_vgg_opts *)o = duet_modified_vgg_opts_default();
}
static void def_rrdbnet(void *o) { *(duet_rrdbnet_opts *)o = duet_rrdbnet_opts_default(); }
static void def_unet(void *o) {
    *(duet_unet_generator_opts *)o = duet_unet_generator_opts_default();
}
static void def_patch(void *o) {
    *(duet_patch_discriminator_opts *)o = duet_patch_discriminator_opts_default();
}
static void def_resnet(void *o) {
    *(duet_resnet_generator_opts *)o = duet_resnet_generator_opts_default();
}
static void def_pixel_loss(void *o) { *(float *)o = 1.0f; }
static void def_disc_shift_loss(void *o) { *(float *)o = 0.1f; } /* MMEditing's default */
static int read_loss_weight(duet_config *c, void *opts) {
    return duet__reg_get_float(c, "loss_weight", *(float *)opts, opts);
}
static void def_gan_loss(void *o) { *(duet_gan_loss_opts *)o = duet_gan_loss_opts_default(); }
static void def_perceptual(void *o) {
    *(duet_perceptual_loss_opts *)o = duet_perceptual_loss_opts_default();
}

static int make_msrresnet(const void *o, duet_rng *rng, duet_module **out) {
    return duet_msrresnet_create(o, rng, out);
}
static int make_modified_vgg(const void *o, duet_rng *rng, duet_module **out) {
    return duet_modified_vgg_create(o, rng, out);
}
static int make_rrdbnet(const void *o, duet_rng *rng, duet_module **out) {
    return duet_rrdbnet_create(o, rng, out);
}
/* Built on their own, the generators have no dropout rng to borrow: one
 * with use_dropout is an error saying so (a model gives them its own). */
static int make_unet(const void *o, duet_rng *rng, duet_module **out) {
    return duet_unet_generator_create(o, rng, NULL, out);
}
static int make_patch(const void *o, duet_rng *rng, duet_module **out) {
    return duet_patch_discriminator_create(o, rng, out);
}
static int make_resnet(const void *o, duet_rng *rng, duet_module **out) {
    return duet_resnet_generator_create(o, rng, NULL, out);
}
static int make_l1_loss(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_l1_loss_module_create(*(const float *)o, out);
}
static int make_mse_loss(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_mse_loss_module_create(*(const float *)o, out);
}
static int make_gan_loss(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_gan_loss_create(o, out);
}
static int make_disc_shift_loss(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_disc_shift_loss_module_create(*(const float *)o, out);
}
static int make_gp_loss(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_gradient_penalty_loss_module_create(*(const float *)o, out);
}
static int make_perceptual(const void *o, duet_rng *rng, duet_module **out) {
    return duet_perceptual_loss_create(o, rng, out);
}

const duet__module_row duet__module_rows[] = {
    {"MSRResNet", sizeof(duet_msrresnet_opts), def_msrresnet, read_msrresnet, make_msrresnet},
    {"ModifiedVGG", sizeof(duet_modified_vgg_opts), def_modified_vgg, read_modified_vgg,
     make_modified_vgg},
    {"L1Loss", sizeof(float), def_pixel_loss, read_pixel_loss, make_l1_loss},
    {"MSELoss", sizeof(float), def_pixel_loss, read_pixel_loss, make_mse_loss},
    {"GANLoss", sizeof(duet_gan_loss_opts), def_gan_loss, read_gan_loss, make_gan_loss},
    {"DiscShiftLoss", sizeof(float), def_disc_shift_loss, read_loss_weight, make_disc_shift_loss},
    {"GradientPenaltyLoss", sizeof(float), def_pixel_loss, read_loss_weight, make_gp_loss},
    {"PerceptualLoss", sizeof(duet_perceptual_loss_opts), def_perceptual, read_perceptual,
     make_perceptual},
    {"RRDBNet", sizeof(duet_rrdbnet_opts), def_rrdbnet, read_rrdbnet, make_rrdbnet},
    {"UnetGenerator", sizeof(duet_unet_generator_opts), def_unet, read_unet, make_unet},
    {"PatchDiscriminator", sizeof(duet_patch_discriminator_opts), def_patch, read_patch,
     make_patch},
    {"ResnetGenerator", sizeof(duet_resnet_generator_opts), def_resnet, read_resnet,
     make_resnet},
    {"MultiLayerDiscriminator", sizeof(duet_multi_layer_disc_opts), def_mld, read_mld, make_mld},
    {"GLDiscs", sizeof(duet_gl_discs_opts), def_gl_discs, read_gl_discs, make_gl_discs},
    {"DeepFillv1Discriminators", sizeof(duet_gl_discs_opts), def_gl_discs, read_deepfill_discs,
     make_deepfill_discs},
    {"GLEncoderDecoder", sizeof(duet_gl_encdec_opts), def_gl_encdec, read_gl_encdec,
     make_gl_encdec},
    {"DeepFillEncoderDecoder", sizeof(duet_deepfill_encdec_opts), duet__reg_def_deepfill_encdec,
     duet__reg_read_deepfill_encdec, duet__reg_make_deepfill_encdec},
    {"EDSR", sizeof(duet_edsr_opts), duet__reg_def_edsr, duet__reg_read_edsr,
     duet__reg_make_edsr},
    {"RDN", sizeof(duet_rdn_opts), duet__reg_def_rdn, duet__reg_read_rdn, duet__reg_make_rdn},
    {"UNetDiscriminatorWithSpectralNorm", sizeof(duet_unet_disc_sn_opts), duet__reg_def_unet_disc,
     duet__reg_read_unet_disc, duet__reg_make_unet_disc},
    {"PConvEncoderDecoder", sizeof(duet_pconv_encdec_opts), duet__reg_def_pconv_encdec,
     duet__reg_read_pconv_encdec, duet__reg_make_pconv_encdec},
    {"MaskedTVLoss", sizeof(float), duet__reg_def_masked_tv, duet__reg_read_masked_tv,
     duet__reg_make_masked_tv},
};
const size_t duet__module_row_count = sizeof duet__module_rows / sizeof *duet__module_rows;

const duet__module_row *duet__module_row_find(const char *type) {
    for (size_t i = 0; i < duet__module_row_count; i++)
        if (strcmp(duet__module_rows[i].type, type) == 0) return &duet__module_rows[i];
    return NULL;
}
