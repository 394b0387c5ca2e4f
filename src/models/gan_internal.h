/* mmcv's ConvModule, as the generation backbones of src/models/ build it
 * (unet_generator.c, patch_discriminator.c, resnet_generator.c). */
#ifndef DUET_GAN_INTERNAL_H
#define DUET_GAN_INTERNAL_H

#include "duet/models.h"

typedef enum duet__cm_act {
    DUET__CM_ACT_NONE,
    DUET__CM_ACT_RELU,
    DUET__CM_ACT_LRELU, /* LeakyReLU(0.2) */
    DUET__CM_ACT_TANH
} duet__cm_act;

typedef struct duet__cm_opts {
    int in_channels, out_channels, kernel, stride, padding;
    bool bias;
    bool deconv;        /* conv_cfg=dict(type='Deconv'): ConvTranspose2d */
    int output_padding; /* deconv only */
    bool reflect;       /* padding_mode='reflect': ReflectionPad2d, conv padding 0 */
    bool with_norm;
    duet_gen_norm norm;
    duet__cm_act act;
    bool act_first;     /* order=('act', 'conv', 'norm'), else conv-norm-act */
} duet__cm_opts;

/* A "ConvModule" with children padding_layer, conv, bn or in, activate as
 * enabled, with PyTorch's default init from rng. */
int duet__conv_module_create(const duet__cm_opts *o, duet_rng *rng, duet_module **out);
/* Its forward; skip_act leaves the activation out (the caller applied it
 * already, see UnetSkipConnectionBlock). */
int duet__conv_module_forward(duet_module *m, duet_tensor *x, bool skip_act, duet_tensor **out);
/* Applies the ConvModule's activation alone (x retained when it has none). */
int duet__conv_module_act(duet_module *m, duet_tensor *x, duet_tensor **out);

/* Replaces *cur by m(*cur) (releasing the old tensor, also on failure). */
int duet__gan_step(duet_module *m, duet_tensor **cur);

#endif
