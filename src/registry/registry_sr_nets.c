/* The EDSR and RDN rows' readers, from the keys of MMEditing's
 * restorers/edsr and restorers/rdn configs' generator groups (the
 * backbones' constructor arguments, same names and defaults). */
#include "registry/registry_internal.h"

void duet__reg_def_edsr(void *o) { *(duet_edsr_opts *)o = duet_edsr_opts_default(); }

/* rgb_mean / rgb_std: 1 to DUET_EDSR_MAX_RGB numbers; one list of length 1
 * beside a longer one is broadcast to it, as torch broadcasts the two
 * (1, C, 1, 1) tensors. */
static int read_mean_std(duet_config *c, duet_edsr_opts *o) {
    double mean[DUET_EDSR_MAX_RGB], std[DUET_EDSR_MAX_RGB];
    size_t nm = (size_t)o->rgb_len, ns = (size_t)o->rgb_len;
    for (int i = 0; i < o->rgb_len; i++) {
        mean[i] = o->rgb_mean[i];
        std[i] = o->rgb_std[i];
    }
    if (duet_config_has(c, "rgb_mean"))
        DUET_TRY(duet_config_get_double_array(c, "rgb_mean", mean, DUET_EDSR_MAX_RGB, &nm));
    if (duet_config_has(c, "rgb_std"))
        DUET_TRY(duet_config_get_double_array(c, "rgb_std", std, DUET_EDSR_MAX_RGB, &ns));
    if (nm == 0 || ns == 0 || (nm != ns && nm != 1 && ns != 1))
        return duet__error(DUET_ECONFIG, "%s: rgb_mean has %zu values and rgb_std %zu; give "
                           "each one per channel (or one for all)", duet_config_name(c), nm, ns);
    const size_t n = nm > ns ? nm : ns;
    o->rgb_len = (int)n;
    for (size_t i = 0; i < n; i++) {
        o->rgb_mean[i] = (float)mean[nm == 1 ? 0 : i];
        o->rgb_std[i] = (float)std[ns == 1 ? 0 : i];
    }
    return DUET_OK;
}

int duet__reg_read_edsr(duet_config *c, void *opts) {
    duet_edsr_opts *o = opts;
    *o = duet_edsr_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(duet__reg_get_int(c, "upscale_factor", o->upscale_factor, &o->upscale_factor));
    DUET_TRY(duet__reg_get_float(c, "res_scale", o->res_scale, &o->res_scale));
    return read_mean_std(c, o);
}

int duet__reg_make_edsr(const void *o, duet_rng *rng, duet_module **out) {
    return duet_edsr_create(o, rng, out);
}

void duet__reg_def_rdn(void *o) { *(duet_rdn_opts *)o = duet_rdn_opts_default(); }

int duet__reg_read_rdn(duet_config *c, void *opts) {
    duet_rdn_opts *o = opts;
    *o = duet_rdn_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(duet__reg_get_int(c, "upscale_factor", o->upscale_factor, &o->upscale_factor));
    DUET_TRY(duet__reg_get_int(c, "num_layers", o->num_layers, &o->num_layers));
    return duet__reg_get_int(c, "channel_growth", o->channel_growth, &o->channel_growth);
}

int duet__reg_make_rdn(const void *o, duet_rng *rng, duet_module **out) {
    return duet_rdn_create(o, rng, out);
}

/* UNetDiscriminatorWithSpectralNorm's row, from the discriminator group of
 * MMEditing's realesrgan_c64b23g32 config (its constructor's arguments). */
void duet__reg_def_unet_disc(void *o) {
    *(duet_unet_disc_sn_opts *)o = duet_unet_disc_sn_opts_default();
}

int duet__reg_read_unet_disc(duet_config *c, void *opts) {
    duet_unet_disc_sn_opts *o = opts;
    *o = duet_unet_disc_sn_opts_default();
    DUET_TRY(duet__reg_get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    return duet_config_get_bool_or(c, "skip_connection", true, &o->skip_connection);
}

int duet__reg_make_unet_disc(const void *o, duet_rng *rng, duet_module **out) {
    return duet_unet_disc_sn_create(o, rng, out);
}
