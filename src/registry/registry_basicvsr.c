/* The BasicVSRNet row's reader, from the keys of MMEditing's
 * restorers/basicvsr configs' generator group (BasicVSRNet's constructor
 * arguments, same names and defaults). */
#include "registry/registry_internal.h"

void duet__reg_def_basicvsr_net(void *o) {
    *(duet_basicvsr_net_opts *)o = duet_basicvsr_net_opts_default();
}

/* spynet_pretrained (MMEditing's configs name a .pth URL): duet loads no
 * .pth files, so a path is refused, naming it; without one SPyNet starts
 * from its own init. */
int duet__reg_read_basicvsr_net(duet_config *c, void *opts) {
    duet_basicvsr_net_opts *o = opts;
    *o = duet_basicvsr_net_opts_default();
    DUET_TRY(duet__reg_get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(duet__reg_get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    const char *pre = "";
    DUET_TRY(duet_config_get_string_or(c, "spynet_pretrained", "", &pre));
    if (pre[0] != '\0')
        return duet__error(DUET_EUNSUPPORTED, "%s.spynet_pretrained = '%s': duet does not read "
                           ".pth files; convert the checkpoint with scripts/convert-pth.py and "
                           "start from it with load_from, or leave spynet_pretrained out to "
                           "train SPyNet from its init", duet_config_name(c), pre);
    return DUET_OK;
}

int duet__reg_make_basicvsr_net(const void *o, duet_rng *rng, duet_module **out) {
    return duet_basicvsr_net_create(o, rng, out);
}
