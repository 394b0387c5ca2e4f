/* PConvEncoderDecoder's and MaskedTVLoss's rows, from the keys of
 * MMEditing's inpainting/partial_conv configs: encdec = {type =
 * "PConvEncoderDecoder"; encoder = {type = "PConvEncoder"; norm_cfg;
 * norm_eval; ...}; decoder = {type = "PConvDecoder"; norm_cfg; ...}}, each
 * group starting from its class's defaults (7 layers, PConv with
 * multi_channel masks, BN). */
#include "registry/registry_internal.h"

#include <stdio.h>
#include <string.h>

/* norm_cfg at key: absent is MMEditing's default BN; "None" none; a group
 * of type BN or SyncBN (duet's SyncBN is the wrapper's sync_bn), with
 * requires_grad (true; false: a frozen affine, where frozen is given). */
static int read_norm(duet_config *c, const char *key, bool *norm, bool *frozen) {
    if (!duet_config_has(c, key)) {
        *norm = true;
        return DUET_OK;
    }
    DUET_TRY(duet__reg_read_gl_norm(c, key, norm));
    char k[64];
    snprintf(k, sizeof k, "%s.requires_grad", key);
    bool rg = true;
    if (*norm) DUET_TRY(duet_config_get_bool_or(c, k, true, &rg));
    if (!rg && frozen == NULL)
        return duet_config_error(c, k, "%s = false: duet freezes the encoder's BatchNorm only "
                                 "(as MMEditing's stage-2 configs)", k);
    if (frozen != NULL) *frozen = !rg;
    return DUET_OK;
}

/* conv_cfg: PConv with multi_channel masks, the only kind MMEditing's
 * PConv configs and duet build. */
static int read_conv_cfg(duet_config *c) {
    if (!duet_config_has(c, "conv_cfg")) return DUET_OK;
    const char *t = NULL;
    bool multi = false;
    DUET_TRY(duet_config_get_string(c, "conv_cfg.type", &t));
    DUET_TRY(duet_config_get_bool_or(c, "conv_cfg.multi_channel", false, &multi));
    if (strcmp(t, "PConv") != 0 || !multi)
        return duet_config_error(c, "conv_cfg", "conv_cfg: duet builds PConv with "
                                 "multi_channel = true only (got \"%s\", multi_channel %s)", t,
                                 multi ? "true" : "false");
    return DUET_OK;
}

/* The group `key` of c (its type checked) as a view; NULL when absent. */
static int open_group(duet_config *c, const char *key, const char *want, duet_config **sub) {
    *sub = NULL;
    if (!duet_config_has(c, key)) return DUET_OK;
    DUET_TRY(duet_config_sub(c, key, sub));
    const char *t = NULL;
    int rc = duet_config_get_string_or(*sub, "type", want, &t);
    if (rc == DUET_OK && strcmp(t, want) != 0)
        rc = duet_config_error(*sub, "type", "'type' = \"%s\": PConvEncoderDecoder's %s is a %s",
                               t, key, want);
    if (rc != DUET_OK) {
        duet_config_destroy(*sub);
        *sub = NULL;
    }
    return rc;
}

void duet__reg_def_pconv_encdec(void *o) {
    *(duet_pconv_encdec_opts *)o = duet_pconv_encdec_opts_default();
}

int duet__reg_read_pconv_encdec(duet_config *c, void *opts) {
    duet_pconv_encdec_opts *o = opts;
    *o = duet_pconv_encdec_opts_default();
    duet_config *enc = NULL, *dec = NULL;
    int enc_layers = 7, dec_layers = 7;
    bool enc_norm = true, dec_norm = true;
    int rc = open_group(c, "encoder", "PConvEncoder", &enc);
    if (rc == DUET_OK) rc = open_group(c, "decoder", "PConvDecoder", &dec);
    if (rc == DUET_OK && enc != NULL) {
        rc = duet__reg_get_int(enc, "in_channels", o->in_channels, &o->in_channels);
        if (rc == DUET_OK) rc = duet__reg_get_int(enc, "num_layers", 7, &enc_layers);
        if (rc == DUET_OK) rc = read_conv_cfg(enc);
        if (rc == DUET_OK) rc = read_norm(enc, "norm_cfg", &enc_norm, &o->norm_frozen);
        if (rc == DUET_OK)
            rc = duet_config_get_bool_or(enc, "norm_eval", false, &o->norm_eval);
    }
    if (rc == DUET_OK && dec != NULL) {
        const char *interp = "nearest";
        rc = duet__reg_get_int(dec, "num_layers", 7, &dec_layers);
        if (rc == DUET_OK) rc = read_conv_cfg(dec);
        if (rc == DUET_OK) rc = read_norm(dec, "norm_cfg", &dec_norm, NULL);
        if (rc == DUET_OK) rc = duet_config_get_string_or(dec, "interpolation", "nearest", &interp);
        if (rc == DUET_OK && strcmp(interp, "nearest") != 0)
            rc = duet_config_error(dec, "interpolation", "interpolation = \"%s\": duet's "
                                   "PConvDecoder upsamples with \"nearest\"", interp);
    }
    if (rc == DUET_OK && enc_layers != dec_layers)
        rc = duet__error(DUET_ECONFIG, "%s: encoder.num_layers %d and decoder.num_layers %d "
                         "differ", duet_config_name(c), enc_layers, dec_layers);
    if (rc == DUET_OK && enc_norm != dec_norm)
        rc = duet__error(DUET_EUNSUPPORTED, "%s: the encoder's norm_cfg and the decoder's differ "
                         "(one BN, one None); duet builds both alike", duet_config_name(c));
    o->num_layers = enc_layers;
    o->norm = enc_norm;
    duet_config_destroy(enc);
    duet_config_destroy(dec);
    return rc;
}

int duet__reg_make_pconv_encdec(const void *o, duet_rng *rng, duet_module **out) {
    return duet_pconv_encdec_create(o, rng, out);
}

void duet__reg_def_masked_tv(void *o) { *(float *)o = 1.0f; }

/* MaskedTVLoss(loss_weight=1.0): nothing else. */
int duet__reg_read_masked_tv(duet_config *c, void *opts) {
    return duet__reg_get_float(c, "loss_weight", 1.0f, opts);
}

int duet__reg_make_masked_tv(const void *o, duet_rng *rng, duet_module **out) {
    (void)rng;
    return duet_masked_tv_loss_module_create(*(const float *)o, out);
}
