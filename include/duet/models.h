/* duet/models.h — concrete networks and models in MMEditing's structure and
 * naming, so that state dicts move between duet and PyTorch.
 *
 * Usage:
 *
 *   duet_rng rng = duet_rng_make(0, 0);
 *   duet_msrresnet_opts o = duet_msrresnet_opts_default();   // x4, 64 ch, 16 blocks
 *   duet_module *g = NULL;
 *   DUET_TRY(duet_msrresnet_create(&o, &rng, &g));
 *   duet_tensor *sr = NULL;
 *   DUET_TRY(duet_module_forward(g, lq, &sr));               // (N,3,4H,4W)
 */
#ifndef DUET_MODELS_H
#define DUET_MODELS_H

#include "duet/batch.h"
#include "duet/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- networks --------------------------------------------------------- */

/* MMEditing's MSRResNet: conv_first, trunk_net.<i>.conv1/conv2
 * (ResidualBlockNoBN, res_scale 1), upsample1.upsample_conv (and upsample2
 * for x4; x2 and x3 use one PixelShufflePack of 2 or 3), conv_hr,
 * conv_last; LeakyReLU 0.1; the bilinear upsampled input is added to the
 * output. Init as MMEditing 0.x after init_weights(): conv_first, conv_hr,
 * conv_last and each block's conv1/conv2 are kaiming_normal (fan_in, gain
 * sqrt 2) times 0.1 with bias 0; the upsample convs are kaiming_normal
 * times 1, bias 0 (PixelShufflePack.init_weights).
 * DUET_EINVAL for another scale factor. */
typedef struct duet_msrresnet_opts {
    int in_channels, out_channels, mid_channels, num_blocks, upscale_factor;
} duet_msrresnet_opts;
duet_msrresnet_opts duet_msrresnet_opts_default(void); /* 3, 3, 64, 16, 4 */
int duet_msrresnet_create(const duet_msrresnet_opts *opts, duet_rng *rng, duet_module **out);

/* MMEditing's ModifiedVGG discriminator: conv0_0 (3x3, bias), conv0_1 (4x4
 * s2, no bias), bn0_1, conv1_0, bn1_0, conv1_1, bn1_1, ... conv4_1, bn4_1,
 * linear1 (mid*8 * (input_size/32)^2 -> 100), linear2 (100 -> 1); LeakyReLU
 * 0.2. Output (N, 1) logits. input_size must be a multiple of 32 (MMEditing:
 * 128 only); forward fails with DUET_ESHAPE on another size. PyTorch
 * default init (uniform +-1/sqrt(fan_in)); BN eps 1e-5, momentum 0.1. */
typedef struct duet_modified_vgg_opts {
    int in_channels, mid_channels, input_size;
} duet_modified_vgg_opts;
duet_modified_vgg_opts duet_modified_vgg_opts_default(void); /* 3, 64, 128 */
int duet_modified_vgg_create(const duet_modified_vgg_opts *opts, duet_rng *rng,
                             duet_module **out);

/* MMEditing's RRDBNet, ESRGAN's generator: conv_first, body.<i> (RRDB:
 * rdb1..rdb3, each a ResidualDenseBlock conv1..conv5 with growth_channels,
 * LeakyReLU 0.2, x5 * 0.2 + x), RRDB's out * 0.2 + x, conv_body (added to
 * conv_first's output), nearest x2 + conv_up1, nearest x2 + conv_up2 (each
 * followed by LeakyReLU 0.2), conv_hr, LeakyReLU, conv_last. Init as
 * MMEditing 0.x: every conv kaiming_normal (fan_in, gain sqrt 2) times 0.1,
 * bias 0 (the dense blocks' in their constructor, the rest in
 * init_weights). x4 only (upscale_factor = MMEditing's `scale`): another
 * factor is DUET_EUNSUPPORTED. */
typedef struct duet_rrdbnet_opts {
    int in_channels, out_channels, mid_channels, num_blocks, growth_channels, upscale_factor;
} duet_rrdbnet_opts;
duet_rrdbnet_opts duet_rrdbnet_opts_default(void); /* 3, 3, 64, 23, 32, 4 */
int duet_rrdbnet_create(const duet_rrdbnet_opts *opts, duet_rng *rng, duet_module **out);

/* MMEditing's UNetDiscriminatorWithSpectralNorm (components/discriminators/
 * unet_disc.py), Real-ESRGAN's discriminator: conv_0 (3x3, bias), conv_1..3
 * (4x4 stride 2, mid * 2, 4, 8 channels), conv_4..6 (3x3 back to mid * 4,
 * 2, 1, each after a bilinear x2 upsampling, align_corners=False, plus the
 * down path's feature of the same size when skip_connection), conv_7 and
 * conv_8 (3x3), every one of conv_1..conv_8 without bias under
 * spectral_norm (weight_orig, weight_u, weight_v; eps 1e-12, one power
 * iteration per training forward); LeakyReLU 0.2 after each but conv_9
 * (3x3 to 1 channel, bias). Input (N, in_channels, H, W) with H and W
 * multiples of 8; output (N, 1, H, W) logits. PyTorch's default init. */
typedef struct duet_unet_disc_sn_opts {
    int in_channels, mid_channels;
    bool skip_connection;
} duet_unet_disc_sn_opts;
duet_unet_disc_sn_opts duet_unet_disc_sn_opts_default(void); /* 3, 64, skip_connection */
/* Free *out with duet_module_destroy. */
int duet_unet_disc_sn_create(const duet_unet_disc_sn_opts *opts, duet_rng *rng,
                             duet_module **out);

/* MMEditing's EDSR (sr_backbones/edsr.py): x = (x - rgb_mean) / rgb_std,
 * conv_first, body.<i> (ResidualBlockNoBN conv1/conv2, ReLU, the residual
 * times res_scale), conv_after_body (conv_first's output added),
 * upsample.<j>.upsample_conv (UpsampleModule: a PixelShufflePack of 2 per
 * factor of 2 for 2^n, one of 3 for 3), conv_last, then x * rgb_std +
 * rgb_mean. rgb_mean and rgb_std are constants (no state-dict entries), of
 * rgb_len values (1, broadcast, or in_channels == out_channels). Init as
 * MMEditing: PyTorch's default for conv_first, conv_after_body, conv_last
 * and, for res_scale != 1, the blocks; res_scale == 1 blocks kaiming_normal
 * times 0.1 (ResidualBlockNoBN's own init); the upsample convs
 * kaiming_normal times 1, bias 0. DUET_EINVAL for another factor. */
#define DUET_EDSR_MAX_RGB 4
typedef struct duet_edsr_opts {
    int in_channels, out_channels, mid_channels, num_blocks, upscale_factor;
    float res_scale;
    int rgb_len;
    float rgb_mean[DUET_EDSR_MAX_RGB], rgb_std[DUET_EDSR_MAX_RGB];
} duet_edsr_opts;
/* 3, 3, 64, 16, 4, res_scale 1, rgb_mean (0.4488, 0.4371, 0.4040), rgb_std 1s */
duet_edsr_opts duet_edsr_opts_default(void);
int duet_edsr_create(const duet_edsr_opts *opts, duet_rng *rng, duet_module **out);

/* MMEditing's RDN (sr_backbones/rdn.py): sfe1, sfe2 (3x3), rdbs.<i> (RDB:
 * layers.<j>.conv, a DenseLayer cat([x, relu(conv(x))]) growing by
 * channel_growth, then lff, a 1x1 conv back to mid, plus x), gff.0 (1x1 over
 * every RDB's output concatenated) and gff.1 (3x3), plus sfe1's output;
 * upscale (x2, x4: conv to 4 mid then PixelShuffle(2), as upscale.0 and
 * upscale.2; x3: upscale.0 to 9 mid, PixelShuffle(3)), output. PyTorch's
 * default init throughout (RDN has no init of its own). Factors 2, 3, 4. */
typedef struct duet_rdn_opts {
    int in_channels, out_channels, mid_channels, num_blocks, upscale_factor, num_layers,
        channel_growth;
} duet_rdn_opts;
duet_rdn_opts duet_rdn_opts_default(void); /* 3, 3, 64, 16, 4, 8 layers, growth 64 */
int duet_rdn_create(const duet_rdn_opts *opts, duet_rng *rng, duet_module **out);

/* MMEditing's PConvEncoderDecoder (backbones/encoder_decoders), the
 * generator of PConvInpaintor: encoder.enc1..enc<L> and decoder.dec<L>..dec1,
 * each a MaskConvModule (mmcv's ConvModule over a PartialConv2d with
 * multi_channel masks: children conv (weight; bias without a norm; buffer
 * weight_mask_updater), bn, activate). Encoder: 64, 128, 256, then 512
 * channels, kernels 7, 5, 5, 3..., stride 2, ReLU, no norm on enc1.
 * Decoder: nearest x2 of the features and the masks, concatenated with
 * the encoder's of the level below (the input and its mask for dec1), 3x3
 * MaskConvModules with LeakyReLU 0.2, dec1 without norm or activation. The
 * forward takes (masked image, mask) with the mask 1 where the image is
 * valid, per channel, (N, C, H, W), H and W multiples of 2^num_layers, and
 * gives the output; duet_pconv_encdec_forward also gives the final mask
 * (new reference, or pass NULL). Init as mmcv's ConvModule: kaiming_normal
 * (fan_out, a = 0, or 0.2 before a LeakyReLU), bias 0, BN 1 and 0.
 * norm_eval (MMEditing's fine-tuning stage): the encoder's BatchNorm layers
 * stay in eval mode (running statistics used, not updated) in training. */
#define DUET_PCONV_MAX_LAYERS 8
typedef struct duet_pconv_encdec_opts {
    int in_channels, num_layers;
    bool norm;      /* norm_cfg BN (true) or None, encoder and decoder alike */
    bool norm_eval; /* the encoder's */
    bool norm_frozen; /* the encoder's norm_cfg requires_grad = False: its BN
                         weight and bias never train (stage 2's) */
} duet_pconv_encdec_opts;
duet_pconv_encdec_opts duet_pconv_encdec_opts_default(void); /* 3, 7, BN, false */
int duet_pconv_encdec_create(const duet_pconv_encdec_opts *opts, duet_rng *rng,
                             duet_module **out);
int duet_pconv_encdec_forward(duet_module *m, duet_tensor *x, duet_tensor *mask,
                              duet_tensor **out, duet_tensor **final_mask);

/* ---- image-to-image GAN networks (Pix2Pix, CycleGAN) -------------------
 * MMEditing's generation backbones, built from mmcv ConvModules whose
 * children are named as in PyTorch: "conv" (Conv2d or ConvTranspose2d),
 * "bn" (BatchNorm2d) or "in" (InstanceNorm2d, no parameters), and the
 * parameter-free "padding_layer" and "activate". After construction the
 * weights are MMEditing's generation_init_weights (init_type 'normal'):
 * convolutions N(0, init_gain) with bias 0, BatchNorm weight N(1,
 * init_gain), bias 0 (duet_generation_init_weights). Dropout layers draw
 * their masks from dropout_rng (borrowed; it must outlive the network; the
 * model owning it saves it in checkpoints); it may be NULL without
 * use_dropout. */
/* A ConvModule's order, for exporters: true when its activation runs
 * first (act, [padding_layer], conv, norm), false for ([padding_layer],
 * conv, norm, act). DUET_EINVAL naming the type for any other module. */
int duet_conv_module_act_first(const duet_module *m, bool *act_first);

typedef enum duet_gen_norm {
    DUET_GEN_NORM_BN, /* norm_cfg=dict(type='BN'): BatchNorm2d, convs without bias */
    DUET_GEN_NORM_IN  /* norm_cfg=dict(type='IN'): InstanceNorm2d, convs with bias */
} duet_gen_norm;

/* UnetGenerator: model = the outermost UnetSkipConnectionBlock, each block
 * a Sequential "model" of down ConvModule (LeakyReLU 0.2, 4x4 s2 conv,
 * norm; order act-conv-norm), the inner block, up ConvModule (ReLU, 4x4 s2
 * ConvTranspose2d, norm), and Dropout(0.5) in the num_down - 5 middle
 * blocks with use_dropout; the outermost has no down act or norm, an up
 * conv with bias and a Tanh; the innermost no down norm. Every block but
 * the outermost returns cat([act(x), model(x)]): mmcv's in-place
 * LeakyReLU rewrites x before the skip is taken, and duet does the same
 * (the parent's leading ReLU makes it equivalent to the plain x).
 * Input H and W must be multiples of 2^num_down (DUET_ESHAPE otherwise). */
typedef struct duet_unet_generator_opts {
    int in_channels, out_channels, num_down, base_channels;
    duet_gen_norm norm;
    bool use_dropout;
    float init_gain;
} duet_unet_generator_opts;
duet_unet_generator_opts duet_unet_generator_opts_default(void); /* 3, 3, 8, 64, BN, no, 0.02 */
int duet_unet_generator_create(const duet_unet_generator_opts *opts, duet_rng *init_rng,
                               duet_rng *dropout_rng, duet_module **out);

/* MMEditing's MultiLayerDiscriminator (components/discriminators/
 * multi_layer_disc.py): conv1 .. conv<num_convs> ConvModules (kernel_size,
 * stride 2, padding kernel_size / 2, channels min(64 * 2^i, max_channels),
 * bias only without norm), each norm (BatchNorm, MMEditing's BN/SyncBN,
 * named "bn") then act; conv1 without norm unless with_input_norm; without
 * fc and out convs the last conv has no norm and out_act. with_out_convs adds
 * conv<n+1> (stride 1, to min(64 * 2^n, max_channels), norm, act) and
 * conv<n+2> (stride 1, to 1 channel, no act). With fc_in_channels > 0 the
 * output is flattened into fc, a LinearModule ("fc.linear", then out_act).
 * Init as its init_weights: Linear weights normal(0, 0.02), bias 0; convs
 * PyTorch's default. Activations: "ReLU", "LeakyReLU" (0.2), "Tanh", "ELU"
 * (alpha 1) or none. with_spectral_norm puts every conv and the fc's
 * Linear under spectral norm (duet_sn_conv2d_module_create,
 * duet_sn_linear_module_create: weight_orig, weight_u, weight_v, the power
 * iteration advancing in each training forward), DeepFillv2's SN-PatchGAN. */
typedef enum duet_mld_act {
    DUET_MLD_ACT_NONE,
    DUET_MLD_ACT_RELU,
    DUET_MLD_ACT_LRELU,
    DUET_MLD_ACT_TANH,
    DUET_MLD_ACT_ELU
} duet_mld_act;
typedef struct duet_multi_layer_disc_opts {
    int in_channels, max_channels, num_convs;
    int64_t fc_in_channels; /* 0: no fc */
    int fc_out_channels, kernel_size;
    bool with_norm;         /* norm_cfg BN / SyncBN */
    duet_mld_act act, out_act;
    bool with_input_norm, with_out_convs;
    bool with_spectral_norm;
} duet_multi_layer_disc_opts;
/* MMEditing's defaults: 3, 512, 5 convs, no fc, fc out 1024, kernel 5, no
 * norm, ReLU, out ReLU, with_input_norm, no out convs, no spectral norm. */
duet_multi_layer_disc_opts duet_multi_layer_disc_opts_default(void);
int duet_multi_layer_disc_create(const duet_multi_layer_disc_opts *opts, duet_rng *init_rng,
                                 duet_module **out);

/* GLDiscs (components/discriminators/gl_disc.py): global_disc and
 * local_disc (MultiLayerDiscriminators with fc) and fc, a Linear from their
 * concatenated outputs to one logit (MMEditing fixes its input at 2048, two
 * fc_out_channels of 1024; duet takes the sum). forward2(global image, local
 * patch) -> (N, 1). Linear weights normal(0, 0.02), bias 0. */
int duet_gl_discs_create(const duet_multi_layer_disc_opts *global,
                         const duet_multi_layer_disc_opts *local, duet_rng *init_rng,
                         duet_module **out);

/* DeepFillv1Discriminators (components/discriminators/deepfill_disc.py):
 * global_disc and local_disc, two independent MultiLayerDiscriminators
 * (DeepFillv1's config: ELU, no norm, fc to 1 with LeakyReLU(0.2)). Init as
 * its init_weights: every Conv2d and Linear weight normal(0, 0.02), bias 0.
 * MMEditing's forward((global image, local patch)) returns the tuple
 * (global_pred, local_pred): duet_deepfill_v1_discs_forward gives both;
 * the module's forward2(global image, local patch) gives them joined
 * along dim 1, (N, Fg + Fl), global first (each pred flattened to (N, F)).
 * The penalty of WGAN-GP runs on the child "global_disc" or "local_disc"
 * (a DDP reaches them with duet_ddp_forward_child). */
int duet_deepfill_v1_discs_create(const duet_multi_layer_disc_opts *global,
                                  const duet_multi_layer_disc_opts *local, duet_rng *init_rng,
                                  duet_module **out);
/* The two predictions of a DeepFillv1Discriminators; *global_pred and
 * *local_pred are new references (both NULL on failure). */
int duet_deepfill_v1_discs_forward(duet_module *discs, duet_tensor *global_img,
                                   duet_tensor *local_img, duet_tensor **global_pred,
                                   duet_tensor **local_pred);

/* GLEncoderDecoder (backbones/encoder_decoders/gl_encoder_decoder.py), the
 * Global&Local generator: encoder (GLEncoder: enc1..enc6 ConvModules from
 * the 4-channel masked image + mask, channels 64, 128, 128, 256, 256, 256,
 * kernels 5, 3.., strides 1, 2, 1, 2, 1, 1), dilation_neck (GLDilationNeck:
 * dilation_convs.0..3, 3x3 convs of 256 channels with dilation and padding
 * 2, 4, 8, 16, duet_conv2d_dilated), decoder (GLDecoder: dec1..dec7, dec3
 * and dec5 4x4 stride-2 ConvTranspose2d, dec7 to 3 channels without norm or
 * act, then the output act: 'clip' clamps to [-1, 1], or sigmoid). Each
 * ConvModule: conv (bias only without norm), "bn" when the part's norm is
 * on, ReLU. PyTorch's default init (MMEditing's init_weights keeps it). */
typedef struct duet_gl_encdec_opts {
    bool encoder_norm, neck_norm, decoder_norm; /* norm_cfg BN / SyncBN */
    bool out_sigmoid;                           /* out_act 'sigmoid' (else 'clip') */
} duet_gl_encdec_opts;
int duet_gl_encdec_create(const duet_gl_encdec_opts *opts, duet_rng *init_rng,
                          duet_module **out);

/* GLDiscs' two discriminators, as its config groups them. */
typedef struct duet_gl_discs_opts {
    duet_multi_layer_disc_opts global, local; /* global_disc_cfg, local_disc_cfg */
} duet_gl_discs_opts;

/* ---- DeepFill's generator (deepfill.c, gated_conv.c) ------------------------
 * MMEditing's DeepFillEncoderDecoder and its parts (backbones/
 * encoder_decoders/: two_stage_encoder_decoder.py, encoders/
 * deepfill_encoder.py, decoders/deepfill_decoder.py, necks/
 * gl_dilation.py, necks/contextual_attention_neck.py; components/refiners/
 * deepfill_refiner.py; common/gated_conv_module.py) under MMEditing's
 * names. Every part takes conv_type ('conv': mmcv ConvModules with ELU,
 * names <conv>.conv.weight; 'gated_conv': SimpleGatedConvModules, names
 * <conv>.conv.conv.weight) and padding_mode ('reflect': a ReflectionPad2d
 * "padding_layer" before each conv). Channel counts are int(c *
 * channel_factor), as MMEditing truncates them. The defaults are
 * MMEditing's class defaults; its DeepFillv1 config sets reflect on every
 * part, its DeepFillv2 config gated and reflect everywhere, channel_factor
 * 0.75 on the encoders and stage 1's decoder (so in_channels 96 and 192)
 * and the decoders' out_act Tanh. CPU (the contextual attention is).
 *
 * Usage:
 *
 *   duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
 *   duet_module *g = NULL;
 *   DUET_TRY(duet_deepfill_encdec_create(&o, &rng, &g));
 *   // x (N, 5, H, W) = [masked image, ones, mask], H and W multiples of 8
 *   duet_tensor *stage1 = NULL, *stage2 = NULL, *offset = NULL;
 *   DUET_TRY(duet_deepfill_encdec_forward(g, x, &stage1, &stage2, &offset));
 */

/* SimpleGatedConvModule: child conv (a ConvModule to 2 * out_channels with
 * bias, no activation), then feat_act(first half) * gate_act(second half),
 * children feat_act (ELU) and gate_act (Sigmoid) when on. Default: 3 -> 3
 * channels, 3x3, stride 1, padding 1, dilation 1, zeros padding, both
 * activations on. PyTorch's default init. */
typedef struct duet_gated_conv_opts {
    int in_channels, out_channels, kernel, stride, padding, dilation;
    bool reflect;  /* padding_mode 'reflect' */
    bool feat_act; /* feat_act_cfg ELU; false: None */
    bool gate_act; /* gate_act_cfg Sigmoid; false: None */
} duet_gated_conv_opts;
duet_gated_conv_opts duet_gated_conv_opts_default(void);
int duet_simple_gated_conv_module_create(const duet_gated_conv_opts *opts, duet_rng *init_rng,
                                         duet_module **out);

typedef enum duet_deepfill_encoder_type {
    DUET_DEEPFILL_ENC_STAGE1,           /* channels 32, 64, 64, 128, 128, 128 */
    DUET_DEEPFILL_ENC_STAGE2_CONV,      /* 32, 32, 64, 64, 128, 128 */
    DUET_DEEPFILL_ENC_STAGE2_ATTENTION  /* 32, 32, 64, 128, 128, 128 */
} duet_deepfill_encoder_type;

typedef enum duet_deepfill_out_act {
    DUET_DEEPFILL_OUT_CLIP,    /* out_act_cfg=dict(type='clip', min=-1., max=1.) */
    DUET_DEEPFILL_OUT_TANH,    /* dict(type='Tanh') */
    DUET_DEEPFILL_OUT_SIGMOID, /* dict(type='Sigmoid') */
    DUET_DEEPFILL_OUT_NONE     /* None */
} duet_deepfill_out_act;

/* DeepFillEncoder: enc1..enc6, kernels 5, 3, 3, 3, 3, 3, strides 1, 2, 1,
 * 2, 1, 1, ELU (gated: ELU feature act). (N, in, H, W) -> (N, C6, H/4, W/4)
 * for H, W multiples of 4. */
typedef struct duet_deepfill_encoder_opts {
    int in_channels; /* 5 */
    duet_deepfill_encoder_type encoder_type;
    double channel_factor; /* 1 */
    bool gated, reflect;
} duet_deepfill_encoder_opts;
/* DeepFillDecoder: dec1..dec7, 3x3 convs to 128, 128, 64, 64, 32, 16
 * (times channel_factor) and 3 channels, ELU after all but dec7 (gated:
 * dec7 without feature act), nearest 2x upsampling after dec2 and dec4,
 * then out_act. */
typedef struct duet_deepfill_decoder_opts {
    int in_channels;       /* 128 in stage 1, 256 in the refiner */
    double channel_factor; /* 1 */
    duet_deepfill_out_act out_act;
    bool gated, reflect;
} duet_deepfill_decoder_opts;
/* GLDilationNeck as DeepFill configures it: dilation_convs.0..3 of
 * in_channels, dilation and padding 2, 4, 8, 16, act ReLU or ELU (gated:
 * ELU feature act whatever act_cfg says, as MMEditing). BN when norm. */
typedef struct duet_gl_dilation_neck_opts {
    int in_channels; /* 256 (MMEditing's default); DeepFill's configs 128 */
    bool norm, elu, gated, reflect;
} duet_gl_dilation_neck_opts;
/* ContextualAttentionNeck: contextual_attention (ContextualAttentionModule
 * with these two settings), then conv1, conv2 (3x3, in_channels, ELU). */
typedef struct duet_ca_neck_opts {
    int in_channels;      /* 128 */
    int fuse_kernel_size; /* 3 */
    float softmax_scale;  /* 10 */
    bool gated, reflect;
} duet_ca_neck_opts;
/* DeepFillRefiner (stage 2): encoder_attention -> contextual_attention_neck
 * (with the mask resized to its size) and encoder_conv -> dilation_neck,
 * concatenated (conv branch first) into decoder. */
typedef struct duet_deepfill_refiner_opts {
    duet_deepfill_encoder_opts encoder_attention, encoder_conv;
    duet_gl_dilation_neck_opts dilation_neck;
    duet_ca_neck_opts contextual_attention;
    duet_deepfill_decoder_opts decoder;
} duet_deepfill_refiner_opts;
/* DeepFillEncoderDecoder: stage1 a GLEncoderDecoder of encoder,
 * dilation_neck and decoder; stage2 a DeepFillRefiner. init_gain: the
 * standard deviation of init_weights' normal init of every convolution
 * (MMEditing's normal_init(m, 0, 0.02): 0.02, the default; config key
 * init_cfg.gain, as the generation models' init_cfg writes it). */
typedef struct duet_deepfill_encdec_opts {
    duet_deepfill_encoder_opts encoder;
    duet_gl_dilation_neck_opts dilation_neck;
    duet_deepfill_decoder_opts decoder;
    duet_deepfill_refiner_opts stage2;
    float init_gain;
} duet_deepfill_encdec_opts;

duet_deepfill_encoder_opts duet_deepfill_encoder_opts_default(void);
duet_deepfill_decoder_opts duet_deepfill_decoder_opts_default(void); /* in_channels 128 */
duet_gl_dilation_neck_opts duet_gl_dilation_neck_opts_default(void);
duet_ca_neck_opts duet_ca_neck_opts_default(void);
duet_deepfill_refiner_opts duet_deepfill_refiner_opts_default(void);
duet_deepfill_encdec_opts duet_deepfill_encdec_opts_default(void);

/* The parts on their own, PyTorch's default init from init_rng (free with
 * duet_module_destroy). Bad channel settings are DUET_EINVAL naming the
 * part and the setting. */
int duet_deepfill_encoder_create(const duet_deepfill_encoder_opts *opts, duet_rng *init_rng,
                                 duet_module **out);
int duet_deepfill_decoder_create(const duet_deepfill_decoder_opts *opts, duet_rng *init_rng,
                                 duet_module **out);
int duet_gl_dilation_neck_create(const duet_gl_dilation_neck_opts *opts, duet_rng *init_rng,
                                 duet_module **out);
int duet_ca_neck_create(const duet_ca_neck_opts *opts, duet_rng *init_rng, duet_module **out);
int duet_deepfill_refiner_create(const duet_deepfill_refiner_opts *opts, duet_rng *init_rng,
                                 duet_module **out);
/* The generator, with DeepFillEncoderDecoder.init_weights: every Conv2d's
 * weight N(0, 0.02), bias 0 (BatchNorm weight 1, bias 0). The parts'
 * channels must chain (stage 1 encoder -> neck -> decoder; the refiner's
 * encoders into its necks, the two necks' sum into its decoder; stage 2's
 * encoders take stage 1's input channels): DUET_EINVAL naming the keys. */
int duet_deepfill_encdec_create(const duet_deepfill_encdec_opts *opts, duet_rng *init_rng,
                                duet_module **out);

/* ContextualAttentionNeck.forward(x, mask): x (N, C, H, W), mask (N, 1, H,
 * W), H and W even. *out (N, C, H, W); offset (may be NULL): the attention
 * scores (N, L, H/2, W/2), L = (H/2)*(W/2) (MMEditing's 5-D view of them).
 * The module's forward2(x, mask) gives out alone. */
int duet_ca_neck_forward(duet_module *m, duet_tensor *x, duet_tensor *mask, duet_tensor **out,
                         duet_tensor **offset);
/* DeepFillRefiner.forward(x, mask): x (N, C, H, W), mask (N, 1, H, W), H
 * and W multiples of 8; *out (N, 3, H, W) and the offset as above at H/4.
 * The module's forward2(x, mask) gives out alone. */
int duet_deepfill_refiner_forward(duet_module *m, duet_tensor *x, duet_tensor *mask,
                                  duet_tensor **out, duet_tensor **offset);
/* DeepFillEncoderDecoder.forward(x) with return_offset: x (N, C, H, W) is
 * [masked image (3), ones (1) when the inpaintor adds them (its
 * input_with_ones, the default; without them C = 4 and the encoders'
 * in_channels 4), mask (1)], H and W
 * multiples of 8 (and large enough for the reflect paddings: H/4 > 16 for
 * the necks). stage1 = stage 1's output; its image stage1 * mask +
 * masked_img * (1 - mask) with x's channels 3.. is the refiner's input,
 * with x's last channel as its mask; stage2 = the refiner's output;
 * offset (may be NULL) its attention scores (N, L, H/8, W/8). New
 * references; differentiable in x and every parameter. The module's own
 * forward (through a DDP) gives stage1 and stage2 concatenated along the
 * channels, (N, 6, H, W): split with duet_slice_channels. */
int duet_deepfill_encdec_forward(duet_module *m, duet_tensor *x, duet_tensor **stage1,
                                 duet_tensor **stage2, duet_tensor **offset);

/* PatchDiscriminator: model.0 (4x4 s2 conv with bias, LeakyReLU 0.2),
 * model.1 .. model.<num_conv-1> (4x4 s2, channels doubling up to 8x,
 * norm, LeakyReLU), model.<num_conv> (4x4 s1, norm, LeakyReLU), and
 * model.<num_conv+1> a plain 4x4 s1 Conv2d to one channel (logit map). */
typedef struct duet_patch_discriminator_opts {
    int in_channels, base_channels, num_conv;
    duet_gen_norm norm;
    float init_gain;
} duet_patch_discriminator_opts;
duet_patch_discriminator_opts duet_patch_discriminator_opts_default(void); /* 6, 64, 3, BN */
int duet_patch_discriminator_create(const duet_patch_discriminator_opts *opts, duet_rng *init_rng,
                                    duet_module **out);

/* ResnetGenerator (padding_mode 'reflect'): model.0 7x7 conv after
 * ReflectionPad2d(3), norm, ReLU; two 3x3 s2 downsampling ConvModules;
 * num_blocks ResidualBlockWithDropout (x + block(x), block = reflect-padded
 * 3x3 ConvModule with ReLU, Dropout(0.5) with use_dropout, reflect-padded
 * 3x3 ConvModule without act); two 3x3 s2 ConvTranspose2d (output_padding
 * 1) ConvModules; a reflect-padded 7x7 conv with bias and Tanh. */
typedef struct duet_resnet_generator_opts {
    int in_channels, out_channels, base_channels, num_blocks;
    duet_gen_norm norm;
    bool use_dropout;
    float init_gain;
} duet_resnet_generator_opts;
duet_resnet_generator_opts duet_resnet_generator_opts_default(void); /* 3, 3, 64, 9, IN, no */
int duet_resnet_generator_create(const duet_resnet_generator_opts *opts, duet_rng *init_rng,
                                 duet_rng *dropout_rng, duet_module **out);

/* ---- model contract, losses, SRGAN, registry: below ------------------- */

/* A model is a module whose top-level children are its parts (SRGAN:
 * generator, discriminator, gan_loss, pixel_loss, perceptual_loss), plus
 * three operations: forward (test mode: the generator's output), train_step
 * (one optimisation step, returning named log values) and val_step (outputs
 * and metrics). The model's code looks its parts up by name at every step
 * (duet_module_child), so a wrapper that replaces a child in place (a DDP
 * around the generator) is called through.
 *
 * Usage:
 *
 *   duet_srgan_opts so = duet_srgan_opts_default();      // MMEditing's x4 SRGAN
 *   duet_model *model = NULL;
 *   DUET_TRY(duet_srgan_create(&so, &rng, &model));
 *   duet_optimizer_set *opts = NULL;
 *   DUET_TRY(duet_optimizer_set_create(&opts));
 *   DUET_TRY(duet_optimizer_set_add_adam(opts, model, "generator", &adam_g));
 *   DUET_TRY(duet_optimizer_set_add_adam(opts, model, "discriminator", &adam_d));
 *   duet_batch batch = {0};
 *   DUET_TRY(duet_batch_add_tensor(&batch, "lq", lq));   // (N,3,h,w) in [0,1]
 *   DUET_TRY(duet_batch_add_tensor(&batch, "gt", gt));   // (N,3,4h,4w)
 *   duet_log_vars log;
 *   DUET_TRY(duet_model_train_step(model, &batch, opts, &log));
 *   double l;
 *   duet_log_vars_get(&log, "loss_pix", &l);
 *   duet_batch_clear(&batch);
 *   duet_optimizer_set_destroy(opts);
 *   duet_model_destroy(model);
 */

/* The process group of duet/comm.h (declared here so that models need not
 * include it). */
typedef struct duet_comm duet_comm;
typedef struct duet_model duet_model;

/* ---- batches: duet/batch.h (named tensors, from the dataset to the model) */

/* ---- named log values ------------------------------------------------- */

#define DUET_LOG_VARS_MAX 32
#define DUET_LOG_VAR_NAME_MAX 48

/* A small ordered map name -> double, a plain value (MMEditing's log_vars:
 * loss_pix, loss_gan, ...; or PSNR, SSIM). */
typedef struct duet_log_vars {
    int count;
    char names[DUET_LOG_VARS_MAX][DUET_LOG_VAR_NAME_MAX];
    double values[DUET_LOG_VARS_MAX];
} duet_log_vars;

void duet_log_vars_clear(duet_log_vars *lv);
/* Sets or replaces; DUET_EINVAL when full or the name is too long. */
int duet_log_vars_set(duet_log_vars *lv, const char *name, double value);
/* False when absent (*value untouched). */
bool duet_log_vars_get(const duet_log_vars *lv, const char *name, double *value);
/* Replaces every value with its mean over the ranks of comm (one allreduce;
 * every rank must hold the same names in the same order, else
 * DUET_EMISMATCH). comm NULL: no-op. MMEditing's parse_losses does this. */
int duet_log_vars_average(duet_log_vars *lv, duet_comm *comm);

/* ---- optimizers keyed by part ------------------------------------------ */

/* MMEditing's dict of optimizers: one per trainable part, keyed by the
 * child's name ("generator", "discriminator"), each with its own settings. */
typedef struct duet_optimizer_set duet_optimizer_set;

int duet_optimizer_set_create(duet_optimizer_set **out);
/* Destroys the set and its optimizers. NULL ok. */
void duet_optimizer_set_destroy(duet_optimizer_set *s);
/* Takes ownership of opt (destroyed on failure). Duplicate names fail. */
int duet_optimizer_set_add(duet_optimizer_set *s, const char *name, duet_optimizer *opt);
/* Adam / SGD over every parameter of the model's child `child` (as
 * torch.optim.Adam(model.generator.parameters())), added under its name.
 * opts NULL: the defaults. */
int duet_optimizer_set_add_adam(duet_optimizer_set *s, duet_model *model, const char *child,
                                const duet_adam_opts *opts);
int duet_optimizer_set_add_sgd(duet_optimizer_set *s, duet_model *model, const char *child,
                               const duet_sgd_opts *opts);
/* Borrowed, or NULL when absent. */
duet_optimizer *duet_optimizer_set_get(const duet_optimizer_set *s, const char *name);
/* DUET_ENOTFOUND naming the key and the keys there are. */
int duet_optimizer_set_require(const duet_optimizer_set *s, const char *name,
                               duet_optimizer **out);
size_t duet_optimizer_set_count(const duet_optimizer_set *s);
/* Name and optimizer i in insertion order; borrowed. */
const char *duet_optimizer_set_name(const duet_optimizer_set *s, size_t i);
duet_optimizer *duet_optimizer_set_at(const duet_optimizer_set *s, size_t i);

/* ---- models ------------------------------------------------------------ */

/* What val_step returns: the model's output and metrics. */
typedef struct duet_val_output {
    duet_tensor *output;   /* (N, C, H, W), one reference; NULL before */
    int64_t nsamples;
    /* Mean over the batch's samples of each metric in the model's test
     * settings ("PSNR", "SSIM"); empty when the batch has no "gt". */
    duet_log_vars metrics;
} duet_val_output;
void duet_val_output_clear(duet_val_output *v);

/* A model type: each operation gets the model (its parts through
 * duet_model_module) and its state (duet_model_impl). */
typedef struct duet_model_ops {
    const char *name; /* "SRGAN" */
    int (*forward)(duet_model *m, duet_tensor *lq, duet_tensor **out);
    /* Fills *log (cleared) with this rank's values; the dispatcher averages
     * them over the ranks afterwards. */
    int (*train_step)(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                      duet_log_vars *log);
    int (*val_step)(duet_model *m, const duet_batch *batch, duet_val_output *out);
    void (*destroy)(void *impl); /* may be NULL */
    /* The model's own state beyond its modules' state dict (SRGAN's step
     * counter, CycleGAN's image pools), for checkpoints; both may be NULL
     * (nothing to keep). save_state writes into the checkpoint being made:
     * metadata with duet_st_writer_set_meta (string values; keys other than
     * the runner's: iter, epoch, seed, rng_*, world_size, config, ...) and
     * tensors with duet_st_writer_add, named DUET_MODEL_STATE_PREFIX
     * "<what>" so that weight loading skips them. load_state reads them back
     * on --resume (duet_st_meta, duet_st_get), after the weights and the
     * optimizers; a missing entry is DUET_ENOTFOUND naming it. Tensors
     * that are part of a network (an EMA copy, BN statistics) belong in
     * the modules instead: they are checkpointed and resumed with them. */
    int (*save_state)(duet_model *m, duet_st_writer *w);
    int (*load_state)(duet_model *m, const duet_st *ckpt);
    /* The batch key of the image forward takes ("img_a" or "img_b" for an
     * image-to-image model, after its direction settings); may be NULL:
     * "lq" (super-resolution). */
    const char *(*input_key)(duet_model *m);
    /* The parts forward and val_step use, as a NULL-terminated list of
     * child names ({"generator", NULL}; CycleGAN: {"generators", NULL}):
     * `duet test` and `duet infer` refuse a checkpoint that lacks any of
     * their state-dict entries (duet_checkpoint_load_eval). May be NULL:
     * every part with a parameter that requires grad. */
    const char *const *eval_parts;
} duet_model_ops;

/* Names of the tensors a save_state hook writes start with this. */
#define DUET_MODEL_STATE_PREFIX "state."

/* Takes ownership of impl (freed by ops->destroy, also on failure) and of
 * root, the module whose children are the parts (destroyed on failure).
 * Free with duet_model_destroy. */
int duet_model_create(const duet_model_ops *ops, void *impl, duet_module *root,
                      duet_model **out);
void duet_model_destroy(duet_model *m);
/* The model as a module (type name = the model's): children are the parts,
 * state dict names are MMEditing's ("generator.conv_first.weight").
 * Borrowed. */
duet_module *duet_model_module(duet_model *m);
/* For a wrapper that puts one module (a DDP) around the whole model's root:
 * from now on `outer` owns the root and duet_model_destroy destroys outer
 * instead; duet_model_module and duet_model_part still find the root and its
 * parts. outer NULL: the root is gone (a failed wrap destroyed it); the
 * model is then only fit for duet_model_destroy. */
void duet_model_set_outer(duet_model *m, duet_module *outer);
void *duet_model_impl(duet_model *m);
const char *duet_model_type_name(const duet_model *m);
/* Borrowed part, or NULL. */
duet_module *duet_model_part(duet_model *m, const char *name);
/* The parts evaluation uses (the ops' eval_parts, or by default every part
 * with a parameter that requires grad), in order: their count, and the
 * name of part i (borrowed; NULL when i is out of range). */
size_t duet_model_eval_part_count(duet_model *m);
const char *duet_model_eval_part_at(duet_model *m, size_t i);
/* The process group to average log values over (borrowed; NULL: this
 * process only, the default). The wrapper sets it. duet_model_train_step
 * averages the log values over it after the model's train_step; while that
 * runs, duet_model_comm returns NULL, so a model that still calls
 * duet_log_vars_average(log, duet_model_comm(m)) averages nothing and the
 * values cross the network once. */
void duet_model_set_comm(duet_model *m, duet_comm *comm);
duet_comm *duet_model_comm(const duet_model *m);

/* MMEditing's ExponentialMovingAverageHook.lerp over a network's state
 * dict: each entry of `ema` becomes net + (ema - net) * m, computed in
 * float32 as PyTorch does, with m = momentum (0.999) for a parameter of
 * `net` that requires grad and momentum_nontrainable (0: a copy) for frozen
 * parameters and buffers. ema and net have the same state-dict names and
 * sizes, else DUET_ESHAPE naming the entry. No communication: net is the
 * same bits on every rank (DDP), so ema is too. */
int duet_ema_update(duet_module *ema, duet_module *net, float momentum,
                    float momentum_nontrainable);

/* The model's save_state / load_state hooks (DUET_OK when it has none);
 * errors get the model type as context. */
int duet_model_save_state(duet_model *m, duet_st_writer *w);
int duet_model_load_state(duet_model *m, const duet_st *ckpt);

/* forward: the test-mode output for `lq` (generator output), recorded on the
 * tape when grad mode is on. A part named P_ema (generator_ema: the moving
 * average of the generator, see duet_ema_update) stands in for P in forward
 * and val_step, as MMEditing's forward_test uses generator_ema. */
int duet_model_forward(duet_model *m, duet_tensor *lq, duet_tensor **out);
/* The batch key of forward's input: the ops' input_key, or "lq". `duet
 * infer` prepares an "img_a" / "img_b" input with the config's data.val
 * pipeline for that key, as `duet test` does (docs/gan_translation.md). */
const char *duet_model_input_key(duet_model *m);
/* One optimisation step. *log is cleared and filled with the named values
 * by the model's train_step, then averaged over the model's comm here (the
 * model need not, and every rank must log the same names in the same order:
 * else DUET_EMISMATCH on every rank). */
int duet_model_train_step(duet_model *m, const duet_batch *batch, duet_optimizer_set *opts,
                          duet_log_vars *log);
/* Output and metrics, without gradients; the model is put in eval mode for
 * the call and back to its previous mode after. *out must be zeroed or
 * cleared; fill it. */
int duet_model_val_step(duet_model *m, const duet_batch *batch, duet_val_output *out);
/* Whether the model has a val_step (a runner refuses evaluation at start-up
 * for one that has not, instead of failing at the first evaluation). */
bool duet_model_can_validate(const duet_model *m);

/* ---- losses (MMEditing's mmedit/models/losses) ---------------------------- */

/* L1Loss / MSELoss: module forward2(pred, target) = loss_weight * mean. */
int duet_l1_loss_module_create(float loss_weight, duet_module **out);
int duet_mse_loss_module_create(float loss_weight, duet_module **out);

/* GANLoss (mmedit/models/losses/gan_loss.py), gan_type:
 *   "vanilla"  BCE with logits against real_label_val / fake_label_val
 *   "lsgan"    MSE against the label
 *   "wgan"     -mean(pred) for a real target, mean(pred) for a fake one
 *   "hinge"    discriminator: mean(relu(1 - pred)) real, mean(relu(1 + pred))
 *              fake; generator: -mean(pred) whatever the target
 *   "smgan"    needs a mask (N, C, H, W): pred is first resized to the
 *              mask's size (bilinear, align_corners) when they differ;
 *              discriminator: MSE against the label (real) or against the
 *              mask blurred by a 71x71 Gaussian of sigma 10 (fake, no
 *              gradient); generator: mean(MSE * mask / mean(mask)) with the
 *              MSE a scalar, as MMEditing writes it (so the mask's weighting
 *              cancels out and this is the lsgan loss up to rounding).
 * loss_weight multiplies the generator's loss only (is_disc false).
 * forward(pred) is the generator's loss. */
typedef struct duet_gan_loss_opts {
    const char *gan_type; /* "vanilla" */
    float real_label_val, fake_label_val, loss_weight;
} duet_gan_loss_opts;
duet_gan_loss_opts duet_gan_loss_opts_default(void); /* vanilla, 1, 0, 1 */
/* An unknown gan_type is DUET_EUNSUPPORTED naming the known ones. */
int duet_gan_loss_create(const duet_gan_loss_opts *opts, duet_module **out);
/* smgan without a mask is DUET_EINVAL. */
int duet_gan_loss(duet_module *gan_loss, duet_tensor *pred, bool target_is_real, bool is_disc,
                  duet_tensor **out);
/* MMEditing's forward(input, target_is_real, is_disc, mask): mask is read by
 * smgan only (NULL for the others). */
int duet_gan_loss_masked(duet_module *gan_loss, duet_tensor *pred, bool target_is_real,
                         bool is_disc, duet_tensor *mask, duet_tensor **out);

/* DiscShiftLoss (gan_loss.py): forward(x) = loss_weight * mean(x^2)
 * (MMEditing's default weight 0.1). */
int duet_disc_shift_loss_module_create(float loss_weight, duet_module **out);

/* GradientPenaltyLoss (gan_loss.py's gradient_penalty_loss, WGAN-GP):
 * interp = alpha real + (1 - alpha) fake with alpha (N) per sample, a new
 * leaf that requires grad (no gradient reaches real or fake); g = d
 * sum(disc(interp)) / d interp through duet_autograd_grad with
 * create_graph; with a mask (N, 1 or C, H, W), g = g * mask (broadcast
 * over channels); then loss_weight * mean((|g|_2 over dim 1 - 1)^2), divided
 * by mean(mask) when masked. The result is differentiable in the
 * discriminator's parameters (a second-order backward); every op of disc
 * must have a backward in recorded ops (autograd.h). real, fake (N, C, H,
 * W) of one shape. duet_gradient_penalty_loss draws alpha from rng (one
 * duet_rng_uniform per sample, as torch.rand(N, 1, 1, 1)); the _alpha form
 * takes it (N floats) and, with interp_out not NULL, gives a reference to
 * interp (whose .grad a later backward fills). */
int duet_gradient_penalty_loss(duet_module *disc, duet_tensor *real, duet_tensor *fake,
                               duet_tensor *mask, float loss_weight, duet_rng *rng,
                               duet_tensor **out);
/* GradientPenaltyLoss as a config builds it (registry type
 * "GradientPenaltyLoss", loss_weight default 1): a module holding the
 * weight, applied with duet_gradient_penalty_apply (its forward refuses:
 * the penalty needs the discriminator). */
int duet_gradient_penalty_loss_module_create(float loss_weight, duet_module **out);
int duet_gradient_penalty_apply(duet_module *gp_loss, duet_module *disc, duet_tensor *real,
                                duet_tensor *fake, duet_tensor *mask, duet_rng *rng,
                                duet_tensor **out);
int duet_gradient_penalty_loss_alpha(duet_module *disc, duet_tensor *real, duet_tensor *fake,
                                     duet_tensor *mask, float loss_weight, const float *alpha,
                                     duet_tensor **interp_out, duet_tensor **out);

/* ContextualAttentionModule (mmedit/models/common/contextual_attention.py,
 * DeepFillv1's refiner neck) with MMEditing's defaults: raw patches 4x4
 * stride 2 padding 1, correlation patches 3x3 stride 1 padding 1 (dilation
 * 1), scale 0.5, fuse_kernel_size 3 (buffer fuse_kernel, the 3x3 identity,
 * as MMEditing's state dict), softmax_scale 10. Other settings are not
 * supported (create takes these two). */
int duet_contextual_attention_create(int fuse_kernel_size, float softmax_scale,
                                     duet_module **out);
/* forward(x, context, mask): x, context (N, C, H, W), H and W even; mask
 * (N, 1, H, W) with 1 in the hole (its context patches are not attended),
 * or NULL. *out (N, C, H, W); attention (may be NULL): the scores (N, L, h,
 * w), h = H/2, L = h*w (MMEditing's 5-D (n, h, w, h, w) view of them).
 * Differentiable in x and context. CPU. module forwardn takes (x, context
 * [, mask]) and gives the output. */
int duet_contextual_attention(duet_module *m, duet_tensor *x, duet_tensor *context,
                              duet_tensor *mask, duet_tensor **out, duet_tensor **attention);

/* PerceptualLoss over a frozen VGG-style feature network. Names as
 * MMEditing: child "vgg" (PerceptualVGG) with buffers mean, std (1,3,1,1)
 * when use_input_norm, and its child "vgg_layers" (torchvision's features,
 * truncated after the deepest layer in layer_weights; conv i is
 * vgg_layers.<i>.weight/bias). The VGG parameters never require grad.
 * layers: the torchvision cfg as channel counts with 0 for a max pool
 * (vgg19 when nlayers is 0); the indices of layer_weights count conv, ReLU
 * and pool modules as torchvision does ("34" = conv5_4 of vgg19, before its
 * ReLU). weights_path: a safetensors file with keys features.<i>.weight,
 * features.<i>.bias (torchvision's vgg converted); NULL or "": seeded random
 * init and a warning in the log. */
#define DUET_PERCEPTUAL_MAX_LAYERS 8
#define DUET_VGG_MAX_CFG 24
typedef struct duet_perceptual_loss_opts {
    int nlayer_weights;
    int layer_ids[DUET_PERCEPTUAL_MAX_LAYERS];       /* {34} */
    float layer_weights[DUET_PERCEPTUAL_MAX_LAYERS]; /* {1.0} */
    int ncfg;                                        /* 0: vgg19 */
    int cfg[DUET_VGG_MAX_CFG];
    int in_channels;                                 /* 3 */
    bool use_input_norm;                             /* true: ImageNet mean/std */
    bool norm_img;                                   /* true: x = (x+1)/2 first */
    float perceptual_weight;                         /* 1.0 */
    float style_weight;                              /* 1.0 as MMEditing; 0: off */
    const char *criterion;                           /* "l1" or "mse" */
    const char *weights_path;                        /* NULL: random init + warning */
    bool random_init; /* with weights_path NULL: the random init was asked for (no warning) */
    /* The config registry's own converted copy of the weights (a temporary
     * file it removes and frees once the loss is made); NULL otherwise.
     * Callers of duet_perceptual_loss_create leave it NULL. */
    char *weights_tmp;
} duet_perceptual_loss_opts;
/* MMEditing's PerceptualLoss defaults: vgg19 {34: 1.0}, norm_img true,
 * perceptual 1.0, style 1.0, l1. */
duet_perceptual_loss_opts duet_perceptual_loss_opts_default(void);
int duet_perceptual_loss_create(const duet_perceptual_loss_opts *opts, duet_rng *rng,
                                duet_module **out);
/* *percep (or NULL when perceptual_weight is 0) and *style (NULL when
 * style_weight is 0): style = style_weight * sum_k w_k *
 * criterion(gram(x_k), gram(gt_k)), gram(f) = F F^T / (C H W) per sample
 * (MMEditing's _gram_mat), over the same layers and weights as the
 * perceptual term. gt is treated as a constant (gt.detach()). */
int duet_perceptual_loss(duet_module *m, duet_tensor *x, duet_tensor *gt, duet_tensor **percep,
                         duet_tensor **style);

/* ---- inpaintors (mmedit/models/inpaintors) ---------------------------- */

/* GLInpaintor (mmedit/models/inpaintors/gl_inpaintor.py on one_stage.py):
 * parts generator (GLEncoderDecoder, the config's `encdec`), disc (GLDiscs
 * on the composite image and the patch of train_cfg.local_size around the
 * hole's box), loss_gan, and optionally loss_disc_shift; the L1 losses in
 * the hole and the valid region are MMEditing's L1Loss weighted by the
 * mask (duet_l1_loss_masked). One train_step, with cur_iter starting at
 * start_iter:
 *   fake_res = generator(cat(masked_img, mask)); fake_img = gt * (1 - mask)
 *   + fake_res * mask; fake_local and gt_local cut at mask_bbox grown to
 *   local_size around its centre (scale_bbox);
 *   cur_iter > iter_tc (and disc_step > 0): a discriminator update, fake
 *   (detached) then real, each with its own backward (plus half the disc
 *   shift loss of each); it ends the step (cur_iter++) unless this was the
 *   disc_step-th in a row and cur_iter > iter_td;
 *   cur_iter <= iter_tc or cur_iter > iter_td: a generator update on the L1
 *   losses, plus the adversarial loss (the frozen discriminator on fake_img
 *   and fake_local, target real) once cur_iter > iter_td.
 * Log keys as MMEditing: fake_loss, real_loss, loss_disc_shift,
 * loss_g_fake, loss_l1_hole, loss_l1_valid. val_step (forward_test): the
 * output is fake_res * mask + masked_img * (1 - mask), with test metrics
 * "l1" (the L1 in the hole, on [-1, 1]), "psnr" and "ssim" (on the uint8
 * images of tensor2img(min_max=(-1, 1))). forward takes cat(masked_img,
 * mask) (N, 4, H, W) and gives that composite. */
typedef struct duet_gl_inpaintor_opts {
    duet_gl_encdec_opts encdec;
    duet_gl_discs_opts disc;
    duet_gan_loss_opts loss_gan;
    float l1_hole_weight, l1_valid_weight; /* <= 0: no such loss */
    float disc_shift_weight;               /* <= 0: no loss_disc_shift */
    int disc_step;                         /* train_cfg.disc_step, 1 */
    int64_t iter_tc, iter_td, start_iter;  /* 0, 0, 0 */
    int local_h, local_w;                  /* train_cfg.local_size, 128 x 128 */
    int nmetrics;
    const char *metrics[4];                /* "l1", "psnr", "ssim" (static strings) */
} duet_gl_inpaintor_opts;
duet_gl_inpaintor_opts duet_gl_inpaintor_opts_default(void);
int duet_gl_inpaintor_create(const duet_gl_inpaintor_opts *opts, duet_rng *rng,
                             duet_model **out);
/* MMEditing's cur_iter (the schedule's clock) and disc_step_count. */
int64_t duet_gl_inpaintor_cur_iter(duet_model *m);
int duet_gl_inpaintor_disc_step_count(duet_model *m);

/* MMEditing's MaskedTVLoss (losses/pixelwise_loss.py): loss_weight times
 * the mask-weighted L1 (duet_l1_loss_masked) of the horizontal neighbour
 * differences pred[..., :-1] - pred[..., 1:] with mask[..., :-1], plus the
 * same vertically; pred (N, C, H, W), mask (N, 1 or C, H, W) a constant.
 * The module's forward takes (pred, mask). */
int duet_masked_tv_loss_module_create(float loss_weight, duet_module **out);
int duet_masked_tv_loss(duet_module *m, duet_tensor *pred, duet_tensor *mask, duet_tensor **out);

/* PConvInpaintor (mmedit/models/inpaintors/pconv_inpaintor.py on
 * one_stage.py; its configs have no discriminator): parts generator (a
 * PConvEncoderDecoder, the config's encdec) on (masked_img, 1 - mask over
 * the image's channels), loss_percep (the config's loss_composed_percep, a
 * PerceptualLoss with style, when `perceptual`) and loss_tv (MaskedTVLoss,
 * when tv_weight > 0). fake_img = gt * (1 - mask) + fake_res * mask. One
 * generator update a step on the sum of, as MMEditing logs them:
 * loss_l1_hole (L1 of fake_res in the hole), loss_l1_valid (outside it),
 * loss_composed_percep and loss_composed_style (on fake_img),
 * loss_out_percep and loss_out_style (on fake_res, with out_percep: the
 * config's loss_out_percep = True), loss_tv (on fake_img in the hole);
 * also `loss`, the sum. Optimizer "generator". val_step and forward as
 * GLInpaintor's (cat(masked_img, mask) in, the composite out). */
typedef struct duet_pconv_inpaintor_opts {
    duet_pconv_encdec_opts encdec;
    bool perceptual;                           /* a loss_composed_percep group */
    duet_perceptual_loss_opts perceptual_loss;
    bool out_percep;                           /* loss_out_percep */
    float l1_hole_weight, l1_valid_weight;     /* <= 0: no such loss */
    float tv_weight;                           /* <= 0: no loss_tv */
    int nmetrics;
    const char *metrics[4];                    /* "l1", "psnr", "ssim" (static strings) */
} duet_pconv_inpaintor_opts;
duet_pconv_inpaintor_opts duet_pconv_inpaintor_opts_default(void); /* no losses, metric l1 */
int duet_pconv_inpaintor_create(const duet_pconv_inpaintor_opts *opts, duet_rng *rng,
                                duet_model **out);

/* TwoStageInpaintor (mmedit/models/inpaintors/two_stage.py, DeepFillv2's
 * model) and DeepFillv1Inpaintor (deepfillv1.py on it): parts generator (a
 * DeepFillEncoderDecoder, the config's `encdec`), disc (TwoStageInpaintor:
 * a MultiLayerDiscriminator; DeepFillv1Inpaintor: DeepFillv1Discriminators,
 * global_disc on the image and local_disc on the patch of
 * train_cfg.local_size around the hole's box, scale_bbox as GLInpaintor),
 * loss_gan, and optionally loss_gp (GradientPenaltyLoss) and
 * loss_disc_shift. One train_step:
 *   x = cat(masked_img, ones (input_with_ones), mask); stage1, stage2 =
 *   generator(x); stageK_fake_img = masked_img * (1 - mask) + stageK * mask;
 *   disc_step > 0: a discriminator update on stage 2: fake (detached) then
 *   real, each with its own backward (GAN loss, plus half the disc shift
 *   loss of it; DeepFillv1: the global and the local discriminator's, each
 *   logged), then with loss_gp the penalty's backward (TwoStageInpaintor:
 *   loss_gp on the image, with the mask; DeepFillv1: loss_gp_global with the
 *   mask plus loss_gp_local on the patches without), the step;
 *   disc_step_count = (disc_step_count + 1) % disc_step, and the step ends
 *   there unless it is 0;
 *   a generator update on stage1_loss_type's losses of stage 1 then
 *   stage2_loss_type's of stage 2, each logged "stageK_" + name:
 *   loss_l1_hole and loss_l1_valid (L1 of stageK against gt weighted by
 *   the mask / 1 - mask) and loss_gan (the frozen discriminator on
 *   stageK_fake_img, with the mask as a fourth channel when
 *   disc_input_with_mask, target real, logged stageK_loss_g_fake;
 *   DeepFillv1: stage 2 only, global + local).
 * The penalty's alpha (one per sample, as torch.rand(N, 1, 1, 1)) comes
 * from the model's own rng (gp_seed), saved in checkpoints with
 * disc_step_count; under a DDP each rank draws the whole global batch's
 * alphas (its size times the DDP's world size) and takes its own slice, so
 * N ranks draw what one process with the whole batch draws. DeepFillv1's
 * penalties run through the discriminators' DDP (duet_ddp_forward_child),
 * where MMEditing reaches around it (docs/architecture.md). val_step and
 * forward as GLInpaintor's, on stage 2's output. */
typedef enum duet_inpaint_loss_kind {
    DUET_INPAINT_LOSS_L1_HOLE,
    DUET_INPAINT_LOSS_L1_VALID,
    DUET_INPAINT_LOSS_GAN
} duet_inpaint_loss_kind;

typedef struct duet_two_stage_inpaintor_opts {
    bool deepfill_v1; /* DeepFillv1Inpaintor (disc from `discs`), else TwoStageInpaintor */
    duet_deepfill_encdec_opts encdec;
    duet_multi_layer_disc_opts disc; /* TwoStageInpaintor's discriminator */
    duet_gl_discs_opts discs;        /* DeepFillv1Inpaintor's two */
    duet_gan_loss_opts loss_gan;
    float l1_hole_weight, l1_valid_weight; /* <= 0: no such loss */
    float disc_shift_weight, gp_weight;    /* <= 0: none */
    int nstage1, nstage2;                  /* ('loss_l1_hole',), ('loss_l1_hole', 'loss_gan') */
    duet_inpaint_loss_kind stage1[3], stage2[3];
    bool input_with_ones;                  /* true */
    bool disc_input_with_mask;             /* false */
    int disc_step;                         /* train_cfg.disc_step, 1 */
    int local_h, local_w;                  /* train_cfg.local_size (DeepFillv1), 128 x 128 */
    uint64_t gp_seed;                      /* the penalty's alpha */
    int nmetrics;
    const char *metrics[4];                /* "l1", "psnr", "ssim" (static strings) */
} duet_two_stage_inpaintor_opts;
/* MMEditing's class defaults (the parts' own defaults). */
duet_two_stage_inpaintor_opts duet_two_stage_inpaintor_opts_default(void);
int duet_two_stage_inpaintor_create(const duet_two_stage_inpaintor_opts *opts, duet_rng *rng,
                                    duet_model **out);
/* disc_step_count, and the penalty's rng (borrowed, a plain value). */
int duet_two_stage_inpaintor_disc_step_count(duet_model *m);
duet_rng *duet_two_stage_inpaintor_gp_rng(duet_model *m);

/* ---- metrics (mmedit/core/evaluation/metrics.py) ----------------------- */

/* tensor2img: one image (C, H, W) floats of min_max [0,1] -> uint8 HWC BGR
 * (clamped, *255, rounded half to even as numpy). img holds C*H*W bytes. */
void duet_tensor2img(uint8_t *img, const float *chw, int64_t c, int64_t h, int64_t w);
/* PSNR and SSIM of two uint8 HWC BGR images (C = 3 or 1), MMEditing's
 * formulas: crop_border pixels off each side, convert_to NULL (all channels)
 * or "y" (bgr2ycbcr y_only on [0,1], scaled back to 255); PSNR is +inf for
 * identical images; SSIM uses an 11x11 Gaussian (sigma 1.5) valid-mode
 * window, C1 (0.01*255)^2, C2 (0.03*255)^2, mean over channels. Images must
 * be larger than 2*crop_border (+10 for SSIM), else DUET_EINVAL. */
int duet_psnr(const uint8_t *img1, const uint8_t *img2, int64_t h, int64_t w, int64_t c,
              int crop_border, const char *convert_to, double *out);
int duet_ssim(const uint8_t *img1, const uint8_t *img2, int64_t h, int64_t w, int64_t c,
              int crop_border, const char *convert_to, double *out);

/* What val_step evaluates (MMEditing's test_cfg). */
#define DUET_MAX_METRICS 4
typedef struct duet_test_cfg {
    int nmetrics;
    const char *metrics[DUET_MAX_METRICS]; /* "PSNR", "SSIM" (static strings) */
    int crop_border;
    const char *convert_to; /* NULL or "y" */
} duet_test_cfg;
duet_test_cfg duet_test_cfg_default(void); /* PSNR, SSIM, crop 0, RGB */
/* Mean over the batch of each metric for output and gt (N, C, H, W). */
int duet_evaluate(const duet_test_cfg *cfg, const duet_tensor *output, const duet_tensor *gt,
                  duet_log_vars *metrics);

/* An inpaintor's metrics (OneStageInpaintor.forward_test), the mean over
 * the batch of each: "l1" MMEditing's L1Evaluation, the L1 of res (the
 * generator's output) against gt in the hole of mask, on [-1, 1]; "psnr"
 * and "ssim" of the composite img against gt as uint8 images of
 * tensor2img(min_max=(-1, 1)), crop_border 0. res, img, gt (N, C, H, W),
 * mask (N, 1 or C, H, W). */
int duet_inpainting_evaluate(const char *const *metrics, int nmetrics, const duet_tensor *res,
                             const duet_tensor *img, const duet_tensor *gt,
                             const duet_tensor *mask, duet_log_vars *out);

/* ---- SRGAN and BasicRestorer (mmedit/models/restorers) --------------------- */

typedef struct duet_srgan_opts {
    duet_msrresnet_opts generator;
    duet_modified_vgg_opts discriminator;
    duet_gan_loss_opts gan_loss;       /* vanilla, weight 5e-3 */
    float pixel_loss_weight;           /* L1, 1e-2; <= 0: no pixel loss */
    bool perceptual;                   /* true: a perceptual_loss part */
    duet_perceptual_loss_opts perceptual_loss; /* {34: 1.0}, vgg19, norm_img false */
    int disc_steps;                    /* 1 */
    int disc_init_steps;               /* 0 */
    duet_test_cfg test_cfg;
} duet_srgan_opts;
duet_srgan_opts duet_srgan_opts_default(void); /* MMEditing's srgan_x4c64b16 config */
/* Log values of train_step: loss_pix, loss_perceptual, loss_gan (when the
 * generator stepped), loss_d_real, loss_d_fake, real_logit_mean,
 * fake_logit_mean. Optimizers "generator" and "discriminator". */
int duet_srgan_create(const duet_srgan_opts *opts, duet_rng *rng, duet_model **out);
/* The model's step counter (MMEditing's step_counter). */
int64_t duet_srgan_step_counter(duet_model *m);
/* Sets it: a resumed run continues the count (disc_steps and
 * disc_init_steps depend on it). */
void duet_srgan_set_step_counter(duet_model *m, int64_t step_counter);

/* ESRGAN (mmedit/models/restorers/esrgan.py, a subclass of SRGAN): SRGAN's
 * parts and step frame (disc_steps, disc_init_steps, step counter: the
 * duet_srgan_step_counter calls work on it) with an RRDBNet generator and
 * the relativistic average GAN:
 *   generator step (discriminator frozen): real = D(gt) (detached),
 *     fake = D(G(lq)); loss_gan = (gan(fake - mean(real), real) +
 *     gan(real - mean(fake), fake)) / 2, one backward with the pixel and
 *     perceptual (and style) losses;
 *   discriminator step: fake_d = D(G(lq)).detach(), real = D(gt),
 *     loss_d_real = gan(real - mean(fake_d), real, disc) * 0.5, backward;
 *     fake = D(G(lq).detach()), loss_d_fake = gan(fake - mean(real.detach()),
 *     fake, disc) * 0.5, backward; one optimizer step.
 * Log values (MMEditing's keys): loss_pix, loss_perceptual, loss_style
 * (when on), loss_gan (when the generator stepped), loss_d_real,
 * loss_d_fake. Optimizers "generator" and "discriminator". */
typedef struct duet_esrgan_opts {
    duet_rrdbnet_opts generator;
    duet_modified_vgg_opts discriminator;
    duet_gan_loss_opts gan_loss;       /* vanilla, weight 5e-3 */
    float pixel_loss_weight;           /* L1, 1e-2; <= 0: no pixel loss */
    bool perceptual;                   /* true: a perceptual_loss part */
    duet_perceptual_loss_opts perceptual_loss; /* {34: 1.0}, vgg19, style 0, norm_img false */
    int disc_steps;                    /* 1 */
    int disc_init_steps;               /* 0 */
    duet_test_cfg test_cfg;            /* PSNR, SSIM, crop_border 4 */
} duet_esrgan_opts;
duet_esrgan_opts duet_esrgan_opts_default(void); /* MMEditing's esrgan_x4c64b23g32 config */
int duet_esrgan_create(const duet_esrgan_opts *opts, duet_rng *rng, duet_model **out);

/* Real-ESRGAN (mmedit/models/restorers/real_esrgan.py, a subclass of
 * SRGAN): an RRDBNet generator trained on synthetic degradations in two
 * stages from MMEditing's two configs. RealESRNet (gan false: no
 * discriminator or gan_loss part) trains the generator on the pixel loss
 * only; the GAN stage adds a UNetDiscriminatorWithSpectralNorm, the
 * vanilla GAN and the perceptual loss. train_step, as MMEditing's:
 *   when step_counter == start_iter and the model has generator_ema, the
 *     generator takes generator_ema's weights (the GAN stage starts from
 *     the RealESRNet's moving average: its config's start_iter is the
 *     RealESRNet's last iteration, whose step_counter load_from brings);
 *   gt_pixel, gt_percep, gt_gan = the batch's "gt", or its "gt_unsharp"
 *     where sharpened_gt_in_pixel / percep / gan say so;
 *   fake = G(lq); when step_counter % disc_steps == 0 and step_counter >=
 *     disc_init_steps, one generator update on pixel(fake, gt_pixel) +
 *     perceptual(fake, gt_percep) (+ style) + gan(D(fake), real) with the
 *     discriminator frozen;
 *   with a discriminator: loss_d_real = gan(D(gt_gan), real, disc),
 *     backward; loss_d_fake = gan(D(fake.detach()), fake, disc), backward;
 *     one discriminator update;
 *   step_counter += 1.
 * step_counter is a buffer of the model's root module (MMEditing's
 * register_buffer('step_counter', torch.zeros(1))): checkpointed, resumed
 * and brought by load_from as a state entry "step_counter". use_ema adds
 * the part generator_ema, a frozen copy of the generator (MMEditing's
 * deepcopy), which forward and val_step use and the runner's
 * ExponentialMovingAverageHook averages. Log values: loss_pix,
 * loss_perceptual, loss_style (when on), loss_gan, loss (the generator's
 * total) when the generator stepped; loss_d_real, loss_d_fake with a
 * discriminator. Optimizers "generator" (and "discriminator"). */
typedef struct duet_real_esrgan_opts {
    duet_rrdbnet_opts generator;
    bool gan;                          /* discriminator and gan_loss parts */
    duet_unet_disc_sn_opts discriminator;
    duet_gan_loss_opts gan_loss;       /* vanilla, weight 0.1 */
    float pixel_loss_weight;           /* L1, 1.0; <= 0: no pixel loss */
    bool perceptual;                   /* true: a perceptual_loss part */
    duet_perceptual_loss_opts perceptual_loss; /* MMEditing's GAN config's */
    bool sharpened_gt_in_pixel, sharpened_gt_in_percep, sharpened_gt_in_gan;
    bool use_ema;                      /* true: a generator_ema part */
    int64_t start_iter;                /* train_cfg.start_iter, -1 (never) */
    int disc_steps;                    /* 1 */
    int disc_init_steps;               /* 0 */
    duet_test_cfg test_cfg;            /* PSNR, crop_border 0 */
} duet_real_esrgan_opts;
/* MMEditing's realesrgan_c64b23g32 config's model (gan true; RealESRNet's:
 * gan false, perceptual false, sharpened_gt_in_percep false). */
duet_real_esrgan_opts duet_real_esrgan_opts_default(void);
int duet_real_esrgan_create(const duet_real_esrgan_opts *opts, duet_rng *rng, duet_model **out);

/* BasicRestorer: generator + pixel loss, PSNR-oriented pretraining. Log
 * values loss_pix, loss. Optimizer "generator". */
typedef struct duet_basic_restorer_opts {
    duet_msrresnet_opts generator;
    const char *pixel_loss;   /* "L1Loss" or "MSELoss" */
    float pixel_loss_weight;  /* 1.0 */
    duet_test_cfg test_cfg;
} duet_basic_restorer_opts;
duet_basic_restorer_opts duet_basic_restorer_opts_default(void);
int duet_basic_restorer_create(const duet_basic_restorer_opts *opts, duet_rng *rng,
                               duet_model **out);
/* BasicRestorer with an RRDBNet generator (MMEditing's ESRGAN PSNR
 * pretraining, esrgan_psnr_x4c64b23g32): as duet_basic_restorer_create,
 * opts->generator unused. */
int duet_basic_restorer_rrdbnet_create(const duet_rrdbnet_opts *generator,
                                       const duet_basic_restorer_opts *opts, duet_rng *rng,
                                       duet_model **out);

/* BasicRestorer with an EDSR or an RDN generator (MMEditing's
 * edsr_x*c64b16_g1_300k_div2k, rdn_x*c64b16_g1_1000k_div2k): as
 * duet_basic_restorer_create, opts->generator unused. */
int duet_basic_restorer_edsr_create(const duet_edsr_opts *generator,
                                    const duet_basic_restorer_opts *opts, duet_rng *rng,
                                    duet_model **out);
int duet_basic_restorer_rdn_create(const duet_rdn_opts *generator,
                                   const duet_basic_restorer_opts *opts, duet_rng *rng,
                                   duet_model **out);

/* ---- Pix2Pix (mmedit/models/synthesizers/pix2pix.py) --------------------- */

/* Parts generator (UnetGenerator), discriminator (PatchDiscriminator on
 * cat(real_a, image) of in + out channels), gan_loss, pixel_loss (L1).
 * Batches hold "img_a" and "img_b" (N, C, H, W) in [-1, 1]; direction a2b
 * translates img_a into img_b (b2a the reverse). train_step runs the
 * discriminator step first (fake and real forwards, one backward of half
 * their sum), then the generator step through the output computed before
 * the discriminator's update. Log values: loss_gan_d_fake, loss_gan_d_real,
 * and, when the generator stepped, loss_gan_g, loss_pixel. Optimizers
 * "generator" and "discriminator". val_step runs the generator in training
 * mode (MMEditing's forward_test) and computes no metrics. */
typedef struct duet_pix2pix_opts {
    duet_unet_generator_opts generator;        /* 3, 3, 8, 64, BN, dropout */
    duet_patch_discriminator_opts discriminator; /* 6, 64, 3, BN */
    duet_gan_loss_opts gan_loss;               /* vanilla, 1, 0, 1 */
    float pixel_loss_weight;                   /* 100; <= 0: no pixel loss */
    int disc_steps, disc_init_steps;           /* 1, 0 */
    bool b2a;                                  /* false: a2b */
    uint64_t dropout_seed;                     /* the dropout rng (stream 0) */
} duet_pix2pix_opts;
duet_pix2pix_opts duet_pix2pix_opts_default(void); /* MMEditing's pix2pix configs */
int duet_pix2pix_create(const duet_pix2pix_opts *opts, duet_rng *rng, duet_model **out);
/* MMEditing's step_counter (disc_steps and disc_init_steps depend on it). */
int64_t duet_pix2pix_step_counter(duet_model *m);
void duet_pix2pix_set_step_counter(duet_model *m, int64_t step_counter);
/* The generator's dropout rng (borrowed, lives with the model): a
 * checkpoint saves *rng and a resume restores it, so resumed runs drop the
 * same elements bitwise. */
duet_rng *duet_pix2pix_dropout_rng(duet_model *m);

/* ---- CycleGAN (mmedit/models/synthesizers/cycle_gan.py) -------------------- */

/* Parts generators and discriminators, each a container ("ModuleDict", no
 * forward) of two networks "a" and "b" built from the same settings
 * (ResnetGenerator, PatchDiscriminator), so state dicts are MMEditing's
 * (generators.a.model.0.conv.weight); gan_loss, cycle_loss (L1), id_loss
 * (L1, only when id_loss_weight > 0). The wrapper gives each container one
 * DDP holding both networks; the model forwards generators.a through it
 * (duet_ddp_forward_child), never around it.
 * Batches hold "img_a" and "img_b" (N, C, H, W) in [-1, 1], unpaired;
 * direction b2a swaps them. train_step: fake_b = G_a(real_a), rec_a =
 * G_b(fake_b), fake_a = G_b(real_b), rec_b = G_a(fake_a); then, as
 * MMEditing 0.x, the discriminator step first, on the image pools' answers
 * (loss_gan_d_a = (gan(D_a(pool_b(fake_b)), fake) + gan(D_a(real_b),
 * real)) / 2, pool_b queried first, then loss_gan_d_b the same way with
 * pool_a, fake_a and real_a), both in one backward (each network's gradient
 * comes from its own term, as MMEditing's two backwards give it); then,
 * when step_counter % disc_steps == 0 and step_counter >= disc_init_steps,
 * the generator step with the discriminators frozen, through the outputs
 * computed before the discriminators were updated (one backward of
 * loss_id_a = id(G_a(real_b), real_b) * cycle weight, loss_id_b likewise,
 * loss_gan_g_a = gan(D_a(fake_b), real), loss_gan_g_b = gan(D_b(fake_a),
 * real), loss_cycle_a = cycle(rec_a, real_a), loss_cycle_b = cycle(rec_b,
 * real_b)). Log values are those names, in that order. Optimizers
 * "generators" and "discriminators".
 * The pools (MMEditing's GANImageBuffer of buffer_size images each) draw
 * from the model's pool rng. Under the wrapper they hold the images of the
 * whole global batch (gathered from every rank in rank order) and are
 * identical on every rank, so N ranks match one process with the whole
 * batch and a checkpoint from rank 0 holds all of it; MMEditing keeps one
 * pool per GPU. val_step runs the generators in training mode (MMEditing's
 * forward_test) and outputs fake_b (test direction a2b) or fake_a (b2a);
 * no metrics. */
typedef struct duet_cyclegan_opts {
    duet_resnet_generator_opts generator;        /* 3, 3, 64, 9, IN, no dropout */
    duet_patch_discriminator_opts discriminator; /* 3, 64, 3, IN */
    duet_gan_loss_opts gan_loss;                 /* lsgan, 1, 0, 1 */
    float cycle_loss_weight;                     /* 10 */
    float id_loss_weight;                        /* 0.5; <= 0: no identity loss */
    int disc_steps, disc_init_steps;             /* 1, 0 */
    bool b2a;                                    /* train_cfg.direction: false = a2b */
    int64_t buffer_size;                         /* 50; 0: no pools */
    bool test_b2a;     /* test_cfg.test_direction b2a (flipped when b2a, as MMEditing) */
    uint64_t pool_seed, dropout_seed;            /* the model's rngs (stream 0) */
} duet_cyclegan_opts;
duet_cyclegan_opts duet_cyclegan_opts_default(void); /* MMEditing's cyclegan configs */
int duet_cyclegan_create(const duet_cyclegan_opts *opts, duet_rng *rng, duet_model **out);
int64_t duet_cyclegan_step_counter(duet_model *m);
/* The pools' rng (borrowed, lives with the model). Checkpoints save it, the
 * step counter, the dropout rng and both pools (see docs/gan_translation.md
 * for the keys), through the model's save_state / load_state. */
duet_rng *duet_cyclegan_pool_rng(duet_model *m);
/* Images held by pool "a" (fake_a's) or "b" (fake_b's). */
int64_t duet_cyclegan_pool_count(duet_model *m, char which);
/* The generator the test direction runs (what duet test and infer output):
 * "generators.a" (A to B) or "generators.b" (test_b2a). */
const char *duet_cyclegan_test_generator(duet_model *m);

#ifdef __cplusplus
}
#endif
#endif
