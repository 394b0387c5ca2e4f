/* DeepFillEncoderDecoder from MMEditing's config keys (its DeepFillv1 and
 * v2 configs' encdec group): stage1 (a GLEncoderDecoder of DeepFillEncoder,
 * DeepFillDecoder, GLDilationNeck) and stage2 (DeepFillRefiner), every
 * part with its conv_type, padding_mode, channel_factor, in_channels and
 * activations. As in MMEditing, an absent group is the enclosing module's
 * default for it, and a group given starts from its own class's defaults
 * (a GLDilationNeck group without act_cfg is ReLU, without in_channels
 * 256); settings duet does not build are errors naming the key. */
#include "registry/registry_internal.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

/* The part group `path` of c as a view (NULL when absent: the defaults),
 * after checking its type. */
static int open_part(duet_config *c, const char *path, const char *want, duet_config **sub) {
    *sub = NULL;
    if (!duet_config_has(c, path)) return DUET_OK;
    DUET_TRY(duet_config_sub(c, path, sub));
    const char *t = NULL;
    int rc = duet_config_get_string_or(*sub, "type", want, &t);
    if (rc == DUET_OK && strcmp(t, want) != 0)
        rc = duet_config_error(*sub, "type", "'type' = \"%s\": DeepFill's %s is a %s", t, path,
                               want);
    if (rc != DUET_OK) {
        duet_config_destroy(*sub);
        *sub = NULL;
    }
    return rc;
}

/* conv_type 'conv' | 'gated_conv', padding_mode 'zeros' | 'reflect'. */
static int read_conv_kind(duet_config *c, bool *gated, bool *reflect) {
    const char *t = NULL;
    DUET_TRY(duet_config_get_string_or(c, "conv_type", *gated ? "gated_conv" : "conv", &t));
    if (strcmp(t, "conv") != 0 && strcmp(t, "gated_conv") != 0)
        return duet_config_error(c, "conv_type", "'conv_type' = \"%s\": \"conv\" or "
                                 "\"gated_conv\"", t);
    *gated = strcmp(t, "gated_conv") == 0;
    DUET_TRY(duet_config_get_string_or(c, "padding_mode", *reflect ? "reflect" : "zeros", &t));
    if (strcmp(t, "zeros") != 0 && strcmp(t, "reflect") != 0)
        return duet_config_error(c, "padding_mode", "'padding_mode' = \"%s\": duet has "
                                 "\"zeros\" and \"reflect\"", t);
    *reflect = strcmp(t, "reflect") == 0;
    return DUET_OK;
}

/* act_cfg: ELU, or ReLU where relu_ok; *elu keeps its default when absent. */
static int read_act(duet_config *c, bool relu_ok, bool *elu) {
    if (!duet_config_has(c, "act_cfg")) return DUET_OK;
    const char *t = NULL;
    DUET_TRY(duet_config_get_string(c, "act_cfg.type", &t));
    if (strcmp(t, "ELU") == 0) *elu = true;
    else if (relu_ok && strcmp(t, "ReLU") == 0) *elu = false;
    else
        return duet_config_error(c, "act_cfg.type", "'act_cfg.type' = \"%s\": duet has %s here",
                                 t, relu_ok ? "\"ELU\" and \"ReLU\"" : "\"ELU\"");
    return DUET_OK;
}

static int no_norm(duet_config *c) {
    if (duet_config_has(c, "norm_cfg") && duet_config_kind(c, "norm_cfg") != DUET_CONFIG_STRING)
        return duet_config_error(c, "norm_cfg", "'norm_cfg': duet builds this DeepFill part "
                                 "without a norm (MMEditing's None)");
    if (duet_config_has(c, "norm_cfg")) {
        const char *t = NULL;
        DUET_TRY(duet_config_get_string(c, "norm_cfg", &t));
        if (strcmp(t, "None") != 0)
            return duet_config_error(c, "norm_cfg", "'norm_cfg' must be \"None\" here");
    }
    return DUET_OK;
}

static int read_factor(duet_config *c, double *f) {
    return duet_config_get_double_in_or(c, "channel_factor", *f, 1e-6, 1e6, f);
}

/* MMEditing's required in_channels (DeepFillDecoder, ContextualAttentionNeck). */
static int required_channels(duet_config *c, int *out) {
    if (!duet_config_has(c, "in_channels"))
        return duet_config_error(c, "in_channels", "'in_channels' is required here");
    return duet__reg_get_int_in(c, "in_channels", 1, 1, out);
}

static int read_encoder(duet_config *parent, const char *path, duet_deepfill_encoder_opts *o) {
    duet_config *c = NULL;
    DUET_TRY(open_part(parent, path, "DeepFillEncoder", &c));
    if (c == NULL) return DUET_OK;
    *o = duet_deepfill_encoder_opts_default();
    static const char *const types[3] = {"stage1", "stage2_conv", "stage2_attention"};
    const char *t = NULL;
    bool elu = true;
    int rc = duet__reg_get_int_in(c, "in_channels", o->in_channels, 1, &o->in_channels);
    if (rc == DUET_OK)
        rc = duet_config_get_string_or(c, "encoder_type", types[o->encoder_type], &t);
    if (rc == DUET_OK) {
        int k = 0;
        while (k < 3 && strcmp(t, types[k]) != 0) k++;
        if (k == 3)
            rc = duet_config_error(c, "encoder_type", "'encoder_type' = \"%s\": \"stage1\", "
                                   "\"stage2_conv\" or \"stage2_attention\"", t);
        else o->encoder_type = (duet_deepfill_encoder_type)k;
    }
    if (rc == DUET_OK) rc = read_factor(c, &o->channel_factor);
    if (rc == DUET_OK) rc = read_conv_kind(c, &o->gated, &o->reflect);
    if (rc == DUET_OK) rc = read_act(c, false, &elu);
    if (rc == DUET_OK) rc = no_norm(c);
    duet_config_destroy(c);
    return rc;
}

static int read_decoder(duet_config *parent, const char *path, duet_deepfill_decoder_opts *o) {
    duet_config *c = NULL;
    DUET_TRY(open_part(parent, path, "DeepFillDecoder", &c));
    if (c == NULL) return DUET_OK;
    *o = duet_deepfill_decoder_opts_default();
    bool elu = true;
    int rc = required_channels(c, &o->in_channels);
    if (rc == DUET_OK) rc = read_factor(c, &o->channel_factor);
    if (rc == DUET_OK) rc = read_conv_kind(c, &o->gated, &o->reflect);
    if (rc == DUET_OK) rc = read_act(c, false, &elu);
    if (rc == DUET_OK) rc = no_norm(c);
    if (rc == DUET_OK && duet_config_has(c, "out_act_cfg")) {
        const char *t = NULL;
        if (duet_config_kind(c, "out_act_cfg") == DUET_CONFIG_STRING) {
            rc = duet_config_get_string(c, "out_act_cfg", &t);
            if (rc == DUET_OK && strcmp(t, "None") != 0)
                rc = duet_config_error(c, "out_act_cfg", "'out_act_cfg' must be a group {type "
                                       "= ...} or \"None\"");
            o->out_act = DUET_DEEPFILL_OUT_NONE;
        } else {
            rc = duet_config_get_string(c, "out_act_cfg.type", &t);
            double lo = -1, hi = 1;
            if (rc == DUET_OK && strcmp(t, "clip") == 0) {
                o->out_act = DUET_DEEPFILL_OUT_CLIP;
                rc = duet_config_get_double_or(c, "out_act_cfg.min", -1.0, &lo);
                if (rc == DUET_OK) rc = duet_config_get_double_or(c, "out_act_cfg.max", 1.0, &hi);
                if (rc == DUET_OK && (lo != -1.0 || hi != 1.0))
                    rc = duet_config_error(c, "out_act_cfg", "'out_act_cfg': duet's clip is "
                                           "min = -1.0, max = 1.0");
            } else if (rc == DUET_OK && strcmp(t, "Tanh") == 0) {
                o->out_act = DUET_DEEPFILL_OUT_TANH;
            } else if (rc == DUET_OK && strcmp(t, "Sigmoid") == 0) {
                o->out_act = DUET_DEEPFILL_OUT_SIGMOID;
            } else if (rc == DUET_OK) {
                rc = duet_config_error(c, "out_act_cfg.type", "'out_act_cfg.type' = \"%s\": "
                                       "\"clip\", \"Tanh\" or \"Sigmoid\"", t);
            }
        }
    }
    duet_config_destroy(c);
    return rc;
}

static int read_neck(duet_config *parent, const char *path, duet_gl_dilation_neck_opts *o) {
    duet_config *c = NULL;
    DUET_TRY(open_part(parent, path, "GLDilationNeck", &c));
    if (c == NULL) return DUET_OK;
    *o = duet_gl_dilation_neck_opts_default(); /* 256 channels, ReLU */
    int rc = duet__reg_get_int_in(c, "in_channels", o->in_channels, 1, &o->in_channels);
    if (rc == DUET_OK) rc = read_conv_kind(c, &o->gated, &o->reflect);
    if (rc == DUET_OK) rc = read_act(c, true, &o->elu);
    if (rc == DUET_OK) rc = duet__reg_read_gl_norm(c, "norm_cfg", &o->norm);
    duet_config_destroy(c);
    return rc;
}

static int read_ca_neck(duet_config *parent, const char *path, duet_ca_neck_opts *o) {
    duet_config *c = NULL;
    DUET_TRY(open_part(parent, path, "ContextualAttentionNeck", &c));
    if (c == NULL) return DUET_OK;
    *o = duet_ca_neck_opts_default();
    bool elu = true;
    int rc = required_channels(c, &o->in_channels);
    if (rc == DUET_OK) rc = read_conv_kind(c, &o->gated, &o->reflect);
    if (rc == DUET_OK) rc = read_act(c, false, &elu);
    if (rc == DUET_OK) rc = no_norm(c);
    if (rc == DUET_OK)
        rc = duet__reg_get_float(c, "contextual_attention_args.softmax_scale", o->softmax_scale,
                                 &o->softmax_scale);
    if (rc == DUET_OK)
        rc = duet__reg_get_int_in(c, "contextual_attention_args.fuse_kernel_size",
                                  o->fuse_kernel_size, 1, &o->fuse_kernel_size);
    duet_config_destroy(c);
    return rc;
}

void duet__reg_def_deepfill_encdec(void *opts) {
    *(duet_deepfill_encdec_opts *)opts = duet_deepfill_encdec_opts_default();
}

static int read_stage1(duet_config *s, duet_deepfill_encdec_opts *o) {
    static const char *const parts[3] = {"encoder", "decoder", "dilation_neck"};
    for (int i = 0; i < 3; i++)
        if (!duet_config_has(s, parts[i]))
            return duet_config_error(s, parts[i], "'%s' is required: GLEncoderDecoder's default "
                                     "is Global&Local's part, not DeepFill's", parts[i]);
    DUET_TRY(read_encoder(s, "encoder", &o->encoder));
    DUET_TRY(read_decoder(s, "decoder", &o->decoder));
    return read_neck(s, "dilation_neck", &o->dilation_neck);
}

static int read_stage2(duet_config *s, duet_deepfill_refiner_opts *r) {
    *r = duet_deepfill_refiner_opts_default();
    DUET_TRY(read_encoder(s, "encoder_attention", &r->encoder_attention));
    DUET_TRY(read_encoder(s, "encoder_conv", &r->encoder_conv));
    DUET_TRY(read_neck(s, "dilation_neck", &r->dilation_neck));
    DUET_TRY(read_ca_neck(s, "contextual_attention", &r->contextual_attention));
    return read_decoder(s, "decoder", &r->decoder);
}

int duet__reg_read_deepfill_encdec(duet_config *c, void *opts) {
    duet_deepfill_encdec_opts *o = opts;
    duet_config *s = NULL;
    DUET_TRY(open_part(c, "stage1", "GLEncoderDecoder", &s));
    int rc = s != NULL ? read_stage1(s, o) : DUET_OK;
    duet_config_destroy(s);
    DUET_TRY(rc);
    DUET_TRY(open_part(c, "stage2", "DeepFillRefiner", &s));
    rc = s != NULL ? read_stage2(s, &o->stage2) : DUET_OK;
    duet_config_destroy(s);
    DUET_TRY(rc);
    /* init_cfg: duet's key for the standard deviation MMEditing's
     * init_weights hard-codes (normal_init(m, 0, 0.02)), written as the
     * generation models' init_cfg (type 'normal', gain). */
    const char *init = "normal";
    DUET_TRY(duet_config_get_string_or(c, "init_cfg.type", "normal", &init));
    if (strcmp(init, "normal") != 0)
        return duet_config_error(c, "init_cfg.type", "'init_cfg.type' = \"%s\": "
                                 "DeepFillEncoderDecoder's init is 'normal'", init);
    DUET_TRY(duet__reg_get_float(c, "init_cfg.gain", o->init_gain, &o->init_gain));
    if (!(o->init_gain > 0.0f && o->init_gain < 1e3f))
        return duet_config_error(c, "init_cfg.gain", "'init_cfg.gain' = %g: the normal init's "
                                 "standard deviation must be positive", (double)o->init_gain);
    /* the offsets are always at hand (duet_deepfill_encdec_forward) */
    bool offset = false;
    return duet_config_get_bool_or(c, "return_offset", false, &offset);
}

int duet__reg_make_deepfill_encdec(const void *opts, duet_rng *rng, duet_module **out) {
    return duet_deepfill_encdec_create(opts, rng, out);
}
