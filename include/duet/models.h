/* duet/models.h — concrete networks and models in MMEditing's structure and
 * naming, so that state dicts move between duet and PyTorch.
 *
 * Usage:
 *
 *   duet_rng rng = duet_rng_make(0, 0);
 *   duet_msrresnet_opts o = duet_msrresnet_opts_default();   // x4, 64 ch, 16 blocks
 *   duet_module *g = NULL;
 *   DUET_TRY(duet_msrresnet_create(&g, &o, &rng));
 *   duet_tensor *sr = NULL;
 *   DUET_TRY(duet_module_forward(g, lq, &sr));               // (N,3,4H,4W)
 */
#ifndef DUET_MODELS_H
#define DUET_MODELS_H

#include "duet/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- networks --------------------------------------------------------- */

/* MMEditing's MSRResNet: conv_first, trunk_net.<i>.conv1/conv2
 * (ResidualBlockNoBN, res_scale 1), upsample1.upsample_conv (and upsample2
 * for x4; x3 uses one PixelShufflePack of 3), conv_hr, conv_last; LeakyReLU
 * 0.1; the bilinear upsampled input is added to the output. Init as
 * MMEditing: default_init_weights scale 0.1 on the residual blocks, 0.1 on
 * conv_first/upsample/conv_hr, conv_last scale 0 for its weight is not
 * used — see the source for each. */
typedef struct duet_msrresnet_opts {
    int in_channels, out_channels, mid_channels, num_blocks, upscale_factor;
} duet_msrresnet_opts;
duet_msrresnet_opts duet_msrresnet_opts_default(void); /* 3, 3, 64, 16, 4 */
int duet_msrresnet_create(duet_module **out, const duet_msrresnet_opts *opts, duet_rng *rng);

/* MMEditing's ModifiedVGG discriminator: conv0_0 (3x3, bias), conv0_1 (4x4
 * s2, no bias), bn0_1, conv1_0, bn1_0, conv1_1, bn1_1, ... conv4_1, bn4_1,
 * linear1 (mid*8 * (input_size/32)^2 -> 100), linear2 (100 -> 1); LeakyReLU
 * 0.2. Output (N, 1) logits. input_size must be a multiple of 32. */
typedef struct duet_modified_vgg_opts {
    int in_channels, mid_channels, input_size;
} duet_modified_vgg_opts;
duet_modified_vgg_opts duet_modified_vgg_opts_default(void); /* 3, 64, 128 */
int duet_modified_vgg_create(duet_module **out, const duet_modified_vgg_opts *opts,
                             duet_rng *rng);

/* ---- model contract, losses, SRGAN, registry: below ------------------- */

#ifdef __cplusplus
}
#endif
#endif
