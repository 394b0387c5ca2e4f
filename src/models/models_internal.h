/* The private helpers of src/models/, one header for the layer: what every
 * model shares (model.c), SRGAN's structure (srgan.c, esrgan.c), mmcv's
 * ConvModule for the generation backbones (conv_module.c) and MMEditing's
 * GANImageBuffer (image_pool.c). */
#ifndef DUET_MODELS_INTERNAL_H
#define DUET_MODELS_INTERNAL_H

#include "duet/models.h"

/* ---- every model (model.c) --------------------------------------------------- */

/* The part `name` of m, or DUET_ESTATE naming the model type and the part. */
int duet__need_part(duet_model *m, const char *name, duet_module **out);
/* PyTorch DDP's no_sync() on a part: while on, the part's backwards
 * accumulate its gradients locally and the next synchronised backward
 * reduces the sum (duet/ddp.h). A part that is no DDP (one process without
 * the wrapper) ignores it. Returns the previous setting. The one place
 * where a model asks for it, so that its two-backward steps reduce once. */
bool duet__part_set_no_sync(duet_module *part, bool no_sync);
/* MMEditing's parse_losses total: log "loss" = the sum of the values set
 * since index `from` (log->count before the group) whose names contain
 * "loss". The GANs whose MMEditing log drops "loss" (SRGAN, ESRGAN,
 * Pix2Pix, CycleGAN) call it after their generator's group. */
int duet__log_total(duet_log_vars *log, int from);
/* log[name] = the value of the one-element tensor t, read through
 * duet_tensor_copy_to_host (t may live on any device). */
int duet__log_scalar(duet_log_vars *log, const char *name, const duet_tensor *t);
/* A model's root module forward (a duet_module_type's forward): its child
 * "generator"'s, the test-mode output of the restorers and Pix2Pix. */
int duet__generator_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out);

/* MMEditing's forward_test: out->output = the model's forward(lq); with a
 * "gt" in the batch, the mean of each metric of cfg over the samples. */
int duet__restorer_val_step(duet_model *m, const duet_test_cfg *cfg, const duet_batch *batch,
                            duet_val_output *out);

/* ---- MMEditing's SR blocks (msrresnet.c): MSRResNet, EDSR ------------------- */

/* ResidualBlockNoBN(mid, res_scale): x + conv2(relu(conv1(x))) * res_scale,
 * 3x3 convs with bias. res_scale == 1: the block's init_weights
 * (default_init_weights 0.1, MSRResNet); otherwise PyTorch's default init
 * (EDSR's res_scale < 1). */
int duet__resblock_nobn_create(int mid, float res_scale, duet_rng *rng, duet_module **out);
/* PixelShufflePack(in, out, scale, kernel): pixel_shuffle(upsample_conv(x),
 * scale), upsample_conv in -> out * scale^2; its init_weights
 * (default_init_weights 1). */
int duet__pixel_shuffle_pack_create(int in_ch, int out_ch, int scale, int kernel, duet_rng *rng,
                                    duet_module **out);

/* ---- partial convolutions (pconv.c) ------------------------------------------ */

/* A PartialConv2d's output and, when new_mask is not NULL, its updated mask
 * (new references); mask (N, C, H, W) like x. */
int duet__pconv_forward(duet_module *pconv, duet_tensor *x, duet_tensor *mask, duet_tensor **out,
                        duet_tensor **new_mask);
/* A MaskConvModule's output and updated mask (new references). */
int duet__mask_conv_forward(duet_module *m, duet_tensor *x, duet_tensor *mask,
                            duet_tensor **out, duet_tensor **new_mask);

/* ---- SRGAN's structure, shared with ESRGAN (srgan.c, esrgan.c) ------------- */

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

/* ---- mmcv's ConvModule (conv_module.c): unet_generator.c,
 * patch_discriminator.c, resnet_generator.c ---------------------------------- */

typedef enum duet__cm_act {
    DUET__CM_ACT_NONE,
    DUET__CM_ACT_RELU,
    DUET__CM_ACT_LRELU, /* LeakyReLU(0.2) */
    DUET__CM_ACT_TANH,
    DUET__CM_ACT_ELU    /* ELU(alpha=1) */
} duet__cm_act;

typedef struct duet__cm_opts {
    int in_channels, out_channels, kernel, stride, padding;
    int dilation;       /* > 1: a dilated Conv2d (duet_conv2d_dilated); 0 or 1: plain */
    bool bias;
    bool deconv;        /* conv_cfg=dict(type='Deconv'): ConvTranspose2d */
    int output_padding; /* deconv only */
    bool reflect;       /* padding_mode='reflect': ReflectionPad2d, conv padding 0 */
    bool with_norm;
    duet_gen_norm norm;
    duet__cm_act act;
    bool act_first;     /* order=('act', 'conv', 'norm'), else conv-norm-act */
    bool spectral_norm; /* with_spectral_norm: the Conv2d under spectral_norm (not a deconv) */
} duet__cm_opts;

/* A "ConvModule" with children padding_layer, conv, bn or in, activate as
 * enabled, with PyTorch's default init from rng. A dilated conv is stride
 * 1 and not a deconv. */
int duet__conv_module_create(const duet__cm_opts *o, duet_rng *rng, duet_module **out);
/* Its forward; skip_act leaves the activation out (the caller applied it
 * already, see UnetSkipConnectionBlock). */
int duet__conv_module_forward(duet_module *m, duet_tensor *x, bool skip_act, duet_tensor **out);
/* Applies the ConvModule's activation alone (x retained when it has none). */
int duet__conv_module_act(duet_module *m, duet_tensor *x, duet_tensor **out);

/* Replaces *cur by m(*cur) (releasing the old tensor, also on failure). */
int duet__gan_step(duet_module *m, duet_tensor **cur);

/* MMEditing's SimpleGatedConvModule (gated_conv.c): child "conv", the
 * ConvModule of o with 2 * o->out_channels and no activation, then the
 * first half through "feat_act" (ELU, when feat_act) times the second
 * through "gate_act" (Sigmoid). o->act is ignored, as MMEditing ignores
 * act_cfg there. */
int duet__gated_conv_create(const duet__cm_opts *o, bool feat_act, duet_rng *rng,
                            duet_module **out);

/* ---- Global&Local's generator pieces, shared with DeepFill's (gl_encdec.c,
 * deepfill.c) ------------------------------------------------------------------ */

typedef enum duet__chain_out_act {
    DUET__CHAIN_OUT_NONE,
    DUET__CHAIN_OUT_CLIP,    /* torch.clamp(-1, 1) */
    DUET__CHAIN_OUT_SIGMOID,
    DUET__CHAIN_OUT_TANH
} duet__chain_out_act;

/* A module of `type` (whose forward is duet__conv_chain_forward) that runs
 * its children <prefix>1 .. <prefix>n in order, a nearest 2x upsampling
 * after child i + 1 where bit i of upsample_after is set, then out_act:
 * GLEncoder, GLDecoder, DeepFillEncoder, DeepFillDecoder. The caller adds
 * the children (duet__add_numbered). */
int duet__conv_chain_create(const duet_module_type *type, const char *prefix, int n,
                            duet__chain_out_act out_act, unsigned upsample_after,
                            duet_module **out);
int duet__conv_chain_forward(duet_module *self, int nin, duet_tensor *const *in,
                             duet_tensor **out);
/* Adds *part as child <prefix><i> of m when rc (the status of making it)
 * is OK; *part is read only after the call that made it has run. */
int duet__add_numbered(duet_module *m, const char *prefix, int i, int rc,
                       duet_module *const *part);

/* GLDilationNeck: dilation_convs.0..3, 3x3 ConvModules (or
 * SimpleGatedConvModules) of `channels` with dilation and padding 2, 4, 8,
 * 16, BN when norm (then no bias), act after each (gated: ELU always). */
typedef struct duet__neck_opts {
    int channels;
    bool norm, gated, reflect;
    duet__cm_act act;
} duet__neck_opts;
int duet__gl_dilation_neck_create(const duet__neck_opts *o, duet_rng *rng, duet_module **out);

/* A GLEncoderDecoder (children encoder, decoder, dilation_neck; forward
 * encoder -> neck -> decoder on (N, in_channels, H, W), H and W multiples
 * of 4) of the given parts, which it takes over (destroyed on failure). */
int duet__gl_encdec_assemble(int in_channels, duet_module *encoder, duet_module *decoder,
                             duet_module *neck, duet_module **out);

/* ---- MMEditing's GANImageBuffer (image_pool.c) --------------------------------
 * (mmedit/models/common/generation_model_utils.py): a history of generated
 * images that CycleGAN's discriminators train on, with its randomness drawn
 * from an rng the caller owns (so that every rank draws the same, and a
 * checkpoint can save it). */

typedef struct duet__image_pool duet__image_pool;

/* An empty pool of buffer_size images (0: query returns its input).
 * Free with duet__image_pool_destroy (NULL ok). */
int duet__image_pool_create(int64_t buffer_size, duet__image_pool **out);
void duet__image_pool_destroy(duet__image_pool *p);
int64_t duet__image_pool_count(const duet__image_pool *p); /* images held */

/* GANImageBuffer.query on images (N, C, H, W), sample by sample in order:
 * while the pool is not full the sample is stored and returned; then with
 * probability 0.5 (duet_rng_uniform(rng) < 0.5) a stored image chosen by
 * duet_rng_int(rng, 0, buffer_size - 1) is returned and the sample takes
 * its place, else the sample itself is returned. *out is a new tensor
 * (N, C, H, W) without autograd history (MMEditing stores image.data).
 * Every image must have the shape of the first one stored (DUET_ESHAPE). */
int duet__image_pool_query(duet__image_pool *p, const duet_tensor *images, duet_rng *rng,
                           duet_tensor **out);

/* Checkpoint: metadata "<key>.count" and, when not empty, the tensor
 * DUET_MODEL_STATE_PREFIX "<key>" of shape (count, C, H, W). load checks
 * the count against buffer_size (DUET_EFORMAT naming the key). */
int duet__image_pool_save(const duet__image_pool *p, duet_st_writer *w, const char *key);
int duet__image_pool_load(duet__image_pool *p, const duet_st *st, const char *key);

/* duet_gradient_penalty_loss_alpha with the discriminator's forward as a
 * function (a network reached through a DDP: duet_ddp_forward_child). */
typedef int (*duet__disc_fwd_fn)(void *disc, duet_tensor *x, duet_tensor **out);
int duet__gradient_penalty_fwd(duet__disc_fwd_fn disc_fwd, void *disc, duet_tensor *real,
                               duet_tensor *fake, duet_tensor *mask, float loss_weight,
                               const float *alpha, duet_tensor **interp_out, duet_tensor **out);
/* A GradientPenaltyLoss module's loss_weight. */
float duet__gradient_penalty_weight(duet_module *gp_loss);

/* ---- what the inpaintors share (inpaintor.c): gl_inpaintor.c,
 * two_stage_inpaintor.c ---------------------------------------------------------- */

/* mask_bbox (N, 4) = (top, left, h, w) grown to local_h x local_w around
 * its centre and clamped at the top-left (MMEditing's scale_bbox): the
 * patch corners in *tops / *lefts (N each, malloc'd; the caller frees them,
 * also on failure). Errors name the model. */
int duet__inpaint_local_boxes(const char *model, int local_h, int local_w,
                              const duet_tensor *bbox, int64_t n, int64_t **tops,
                              int64_t **lefts);
/* 1 - mask, a constant. */
int duet__inpaint_valid_mask(duet_tensor *mask, duet_tensor **out);
/* DUET_EINVAL naming the model unless every metric is l1, psnr or ssim and
 * there are at most 4. */
int duet__inpaint_check_metrics(const char *model, const char *const *metrics, int n);
/* Checkpoint metadata `key` as an integer in [lo, hi]: DUET_ENOTFOUND (a
 * checkpoint of another model) or DUET_EFORMAT, naming the key. */
int duet__inpaint_meta_int(const duet_st *ckpt, const char *model, const char *key, long long lo,
                           long long hi, long long *out);
int duet__inpaint_meta_set_int(duet_st_writer *w, const char *key, long long v);

#endif
