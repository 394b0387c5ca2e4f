/* Helpers shared by the restorers in src/models/. */
#ifndef DUET_MODELS_INTERNAL_H
#define DUET_MODELS_INTERNAL_H

#include "duet/models.h"

/* MMEditing's forward_test: out->output = the model's forward(lq); with a
 * "gt" in the batch, the mean of each metric of cfg over the samples. */
int duet__restorer_val_step(duet_model *m, const duet_test_cfg *cfg, const duet_batch *batch,
                            duet_val_output *out);

/* ---- SRGAN's structure, shared with ESRGAN (srgan.c, esrgan.c) ------------- */

/* The part `name` of m, or DUET_ESTATE naming it. */
int duet__need_part(duet_model *m, const char *name, duet_module **out);

/* The generator's adversarial term on the generator's output fake (the
 * discriminator frozen): one new reference in *out, logged as loss_gan. */
typedef int (*duet__gan_term_fn)(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                                 duet_tensor **out);
/* One discriminator update (zero_grad, backward(s), step) with its log
 * values. */
typedef int (*duet__disc_step_fn)(duet_model *m, duet_tensor *fake, duet_tensor *gt,
                                  duet_optimizer *opt_d, duet_log_vars *log);

/* SRGAN.train_step's frame: fake = generator(lq); with the discriminator
 * frozen, when step_counter % disc_steps == 0 and step_counter >=
 * disc_init_steps, one generator update on pixel + perceptual (+ style) +
 * gan_term; then disc_step; step_counter++; log values averaged over the
 * model's comm. */
int duet__srgan_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                           duet_log_vars *log, duet__gan_term_fn gan_term,
                           duet__disc_step_fn disc_step);
int duet__srgan_forward(duet_model *m, duet_tensor *lq, duet_tensor **out);
int duet__srgan_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out);
/* The step counter through the checkpoint (the models' save/load_state). */
int duet__srgan_save_state(duet_model *m, duet_st_writer *w);
int duet__srgan_load_state(duet_model *m, const duet_st *ckpt);
/* An SRGAN-structured model: parts generator (taken over, destroyed on
 * failure), discriminator, gan_loss, pixel_loss, perceptual_loss from opts
 * (opts->generator unused), SRGAN's state (step counter, disc_steps,
 * test_cfg) as impl, ops and the root module type given. */
int duet__srgan_create(const duet_model_ops *ops, const duet_module_type *root_type,
                       duet_module *generator, const duet_srgan_opts *opts,
                       duet_rng *rng, duet_model **out);
/* ESRGAN's relativistic means: over `groups` equal contiguous groups of
 * the batch's samples instead of the whole batch (default 1, MMEditing's
 * torch.mean). MMEditing under DDP takes each mean over one rank's share,
 * so one process with N groups computes what N ranks compute: the
 * world-size test's reference (tests/mpi/test_esrgan_mpi.c). */
void duet__esrgan_set_mean_groups(duet_model *m, int groups);
int duet__srgan_mean_groups(duet_model *m);
/* The root module type of ESRGAN ("ESRGAN"; forward = the generator's). */
extern const duet_module_type duet__esrgan_module_type;

#endif
