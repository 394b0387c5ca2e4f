/* The registry's builders for the image-to-image GAN models
 * (registry_gan.c), called by duet_build_model. */
#ifndef DUET_REGISTRY_GAN_H
#define DUET_REGISTRY_GAN_H

#include "duet/train.h"

/* Pix2Pix from the model group m (at `path`), MMEditing's keys:
 * generator (UnetGenerator), discriminator (PatchDiscriminator), gan_loss
 * (GANLoss), pixel_loss (L1Loss, optional), train_cfg.{direction,
 * disc_steps, disc_init_steps}, test_cfg.{direction, show_input}. The
 * dropout rng's seed is drawn from rng. */
int duet__build_pix2pix(duet_config *m, const char *path, duet_rng *rng, duet_model **out);

/* CycleGAN from MMEditing's keys: generator (ResnetGenerator), discriminator
 * (PatchDiscriminator), gan_loss (GANLoss), cycle_loss (L1Loss), id_loss
 * (L1Loss, optional), train_cfg.{direction, buffer_size, disc_steps,
 * disc_init_steps}, test_cfg.{direction, show_input, test_direction}. The
 * pool and dropout rngs' seeds are drawn from rng. */
int duet__build_cyclegan(duet_config *m, const char *path, duet_rng *rng, duet_model **out);

#endif
