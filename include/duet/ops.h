/* duet/ops.h — differentiable ops with PyTorch semantics and layouts.
 *
 * Every op takes borrowed inputs, returns a new tensor in *out (one reference
 * for the caller) and records itself on the tape when an input requires grad
 * (duet/autograd.h). Shapes that do not fit fail with DUET_ESHAPE and a
 * message naming the op and both shapes; *out is then NULL.
 *
 * Usage:
 *
 *   duet_tensor *h = NULL, *a = NULL;
 *   DUET_TRY(duet_conv2d(x, w, b, 1, 1, &h));     // x (N,C,H,W), w (O,C,3,3)
 *   DUET_TRY(duet_leaky_relu(h, 0.1f, &a));
 *   duet_tensor_release(h);
 */
#ifndef DUET_OPS_H
#define DUET_OPS_H

#include "duet/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution, linear, normalisation, pooling ------------------------ */

/* x (N, C, H, W), w (O, C, KH, KW), b (O) or NULL; symmetric stride and zero
 * padding. out (N, O, (H+2p-KH)/s+1, (W+2p-KW)/s+1). im2col + SGEMM. */
int duet_conv2d(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride, int padding,
                duet_tensor **out);
/* Spectral normalisation (torch.nn.utils.spectral_norm): w (O, ...) viewed
 * as an (O, K) matrix, u (O) and v (K) its power iteration's vectors. With
 * `update`, n_power_iterations steps v = normalize(W^T u), u = normalize(W v)
 * overwrite u and v (PyTorch's training forward; no gradient flows through
 * them); then out = w / sigma with sigma = u . (W v), differentiable in w
 * through sigma too. normalize(x) = x / max(|x|, eps). CPU. */
int duet_spectral_norm(duet_tensor *w, duet_tensor *u, duet_tensor *v, bool update,
                       int n_power_iterations, float eps, duet_tensor **out);
/* x (N, IN), w (OUT, IN), b (OUT) or NULL; out (N, OUT) = x w^T + b. */
int duet_linear(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor **out);

/* Sums `count` floats in place across the processes that share a batch
 * (SyncBatchNorm); NULL in the options means a local batch. */
typedef int (*duet_reduce_fn)(void *ctx, float *buf, int64_t count);

typedef struct duet_batch_norm_opts {
    bool training;     /* batch statistics + running update, else running stats */
    float momentum;    /* 0.1 */
    float eps;         /* 1e-5 */
    duet_reduce_fn reduce; /* NULL: statistics of the local batch only */
    void *reduce_ctx;
} duet_batch_norm_opts;
duet_batch_norm_opts duet_batch_norm_opts_default(void);

/* x (N, C, H, W); weight, bias (C) or NULL (affine off); running_mean,
 * running_var (C) updated in place in training mode (momentum, unbiased
 * variance over the whole — possibly multi-process — batch); num_batches
 * (1 element) incremented in training mode, may be NULL. */
int duet_batch_norm2d(duet_tensor *x, duet_tensor *weight, duet_tensor *bias,
                      duet_tensor *running_mean, duet_tensor *running_var,
                      duet_tensor *num_batches, const duet_batch_norm_opts *opts,
                      duet_tensor **out);

/* x (N, C, H, W); no padding; out (N, C, (H-k)/s+1, (W-k)/s+1). */
int duet_max_pool2d(duet_tensor *x, int kernel, int stride, duet_tensor **out);

/* ---- activations and element-wise ---------------------------------------- */

int duet_relu(duet_tensor *x, duet_tensor **out);
int duet_leaky_relu(duet_tensor *x, float negative_slope, duet_tensor **out);
int duet_sigmoid(duet_tensor *x, duet_tensor **out);
int duet_tanh(duet_tensor *x, duet_tensor **out);
/* ELU (alpha > 0): x where x > 0, else alpha * (exp(x) - 1); its backward
 * reads the output. */
int duet_elu(duet_tensor *x, float alpha, duet_tensor **out);
/* torch.clamp(x, lo, hi): gradient 1 where lo <= x <= hi (bounds included,
 * as PyTorch), 0 elsewhere. CPU. */
int duet_clamp(duet_tensor *x, float lo, float hi, duet_tensor **out);
/* a, b same shape. */
int duet_add(duet_tensor *a, duet_tensor *b, duet_tensor **out);

/* In-place variants for networks that know an intermediate is dead (the
 * generators' activations): x (a) is overwritten with the result, which
 * comes back as a new reference to it or a view of it. They fall back to the
 * copying op unless duet_can_overwrite(x). The caller must not read x's old
 * values afterwards. Same results and gradients as duet_relu,
 * duet_leaky_relu (slope >= 0, else the copying op) and duet_add(a, b). */
int duet_relu_inplace(duet_tensor *x, duet_tensor **out);
int duet_leaky_relu_inplace(duet_tensor *x, float negative_slope, duet_tensor **out);
int duet_add_inplace(duet_tensor *a, duet_tensor *b, duet_tensor **out);
/* Whether an in-place op may overwrite x: x owns its data and is held only by
 * the caller and by the node that produced it, whose backward never reads
 * its output's values (conv2d, linear, batch_norm2d, add), or x has no
 * history and does not require grad. */
bool duet_can_overwrite(const duet_tensor *x);
int duet_sub(duet_tensor *a, duet_tensor *b, duet_tensor **out);
int duet_mul(duet_tensor *a, duet_tensor *b, duet_tensor **out);
/* out = s * x */
int duet_scale(duet_tensor *x, float s, duet_tensor **out);
/* Per-channel out[n,c,...] = x[n,c,...] * scale[c] + shift[c] with constant
 * (non-learned) scale and shift of C floats (e.g. ImageNet normalisation). */
int duet_channel_affine(duet_tensor *x, const float *scale, const float *shift,
                        duet_tensor **out);

/* ---- shape and resampling ------------------------------------------------ */

/* x (N, C*r*r, H, W) -> (N, C, H*r, W*r), PyTorch's pixel_shuffle. */
int duet_pixel_shuffle(duet_tensor *x, int r, duet_tensor **out);
/* Bilinear, align_corners=False, integer scale factor:
 * x (N, C, H, W) -> (N, C, H*f, W*f), as F.interpolate(scale_factor=f). */
int duet_upsample_bilinear(duet_tensor *x, int factor, duet_tensor **out);
/* (N, ...) -> (N, rest). */
int duet_flatten(duet_tensor *x, duet_tensor **out);
int duet_reshape(duet_tensor *x, int ndim, const int64_t *shape, duet_tensor **out);
/* Concatenation along dim 1 of n tensors (N, Ci, H, W) -> (N, sum Ci, H, W). */
int duet_concat_channels(int n, duet_tensor *const *xs, duet_tensor **out);
/* Channels [start, start + count) of x (N, C, ...) -> (N, count, ...), a
 * copy, as x[:, start:start + count] (torch.split's pieces). */
int duet_slice_channels(duet_tensor *x, int64_t start, int64_t count, duet_tensor **out);

/* ---- video: pyramids and optical-flow warping (src/ops/avg_pool.c,
 * src/ops/flow_warp.c, CPU) ------------------------------------------------ */

/* Average pooling without padding, as F.avg_pool2d(x, kernel, stride) (no
 * padding, ceil_mode False): x (N, C, H, W) -> (N, C, (H-k)/s+1,
 * (W-k)/s+1), each output the mean of its k x k window. *out: a new
 * tensor the caller releases. DUET_ESHAPE when x is not 4-D or smaller
 * than the window, DUET_EINVAL for kernel or stride < 1. */
int duet_avg_pool2d(duet_tensor *x, int kernel, int stride, duet_tensor **out);

/* How flow_warp samples outside the image: ZEROS, every corner outside
 * counts 0 (MMEditing's default); BORDER, the coordinate is clamped into
 * the image (SPyNet's), with a zero gradient where it clamps. */
typedef enum duet_flow_padding {
    DUET_FLOW_PAD_ZEROS = 0,
    DUET_FLOW_PAD_BORDER = 1,
} duet_flow_padding;

/* MMEditing's flow_warp(x, flow.permute(0, 2, 3, 1), 'bilinear', padding,
 * align_corners=True): x (N, C, H, W) warped by flow (N, 2, H, W), channel
 * 0 the horizontal and 1 the vertical displacement in pixels (the layout
 * SPyNet outputs; MMEditing's callers permute it to (N, H, W, 2)). Output
 * pixel (i, j) is x sampled bilinearly at (j + flow[0, i, j], i + flow[1,
 * i, j]), as F.grid_sample; an axis of one pixel samples at 0.
 * Differentiable in x and in flow. *out: a new tensor (N, C, H, W) the
 * caller releases; both inputs are borrowed. DUET_ESHAPE when the shapes
 * disagree, DUET_EINVAL for an unknown padding mode. */
int duet_flow_warp(duet_tensor *x, duet_tensor *flow, duet_flow_padding padding,
                   duet_tensor **out);

/* ---- ESRGAN and MMEditing's losses (src/ops/upsample.c) ------------------- */

/* Nearest neighbour, integer factor: x (N, C, H, W) -> (N, C, H*f, W*f), as
 * F.interpolate(scale_factor=f, mode='nearest'). */
int duet_upsample_nearest(duet_tensor *x, int factor, duet_tensor **out);
/* Bilinear resize to (out_h, out_w) with align_corners=True, as
 * F.interpolate(size=(out_h, out_w), mode='bilinear', align_corners=True). */
int duet_resize_bilinear_ac(duet_tensor *x, int64_t out_h, int64_t out_w, duet_tensor **out);
/* Gram matrix: x (N, C, H, W) -> (N, C, C) = F F^T / (C*H*W) with F = x
 * viewed as (N, C, H*W) (MMEditing's PerceptualLoss._gram_mat). */
int duet_gram_matrix(duet_tensor *x, duet_tensor **out);
/* a - mean(b), a and b of one shape (N, ...), the mean taken over each of
 * `groups` equal contiguous groups of samples (every element of the
 * group's samples); both get gradients. groups 1: ESRGAN's
 * pred - torch.mean(other_pred). */
int duet_sub_group_mean(duet_tensor *a, duet_tensor *b, int groups, duet_tensor **out);

/* ---- second-order autograd's building blocks (src/ops/grad_ops.c) -------- */

/* conv2d's weight gradient as an op: x (N, C, H, W), dy (N, O, OH, OW) the
 * gradient of conv2d(x, w, stride, padding)'s output with w (O, C, KH, KW);
 * out (O, C, KH, KW) = d<y, dy>/dw. Differentiable in x and dy. CPU. */
int duet_conv2d_weight_grad(duet_tensor *x, duet_tensor *dy, int kh, int kw, int stride,
                            int padding, duet_tensor **out);
/* x (R, C) -> (C, R). */
int duet_transpose2d(duet_tensor *x, duet_tensor **out);
/* x (N, C, ...) -> (C): the sum over every dim but 1 (a conv bias's
 * gradient). */
int duet_sum_channels(duet_tensor *x, duet_tensor **out);
/* x (N, C, ...) -> (N, ...): the 2-norm over dim 1, torch.norm(x, 2, dim=1);
 * its gradient is 0 where the norm is 0. */
int duet_channel_norm(duet_tensor *x, duet_tensor **out);

/* ---- contextual attention's ops (src/ops/attention.c, CPU) ---------------- */

/* Rows [start, start+count) of x along dim 0, a copy (differentiable). */
int duet_slice0(duet_tensor *x, int64_t start, int64_t count, duet_tensor **out);
/* F.unfold's patches as a filter bank: x (N, C, H, W) -> (N*L, C, k, k),
 * patch (n, oh, ow) at row (n*OH + oh)*OW + ow, zero padding. */
int duet_extract_patches(duet_tensor *x, int kernel, int stride, int padding,
                         duet_tensor **out);
/* F.interpolate(scale_factor=1/f, mode='nearest'): out[i, j] = x[i*f, j*f],
 * (N, C, H/f, W/f) rounded down. */
int duet_subsample_nearest(duet_tensor *x, int factor, duet_tensor **out);
/* Each row of x (dim 0) divided by max(its 2-norm, eps). */
int duet_normalize_rows(duet_tensor *x, float eps, duet_tensor **out);
/* MMEditing's ContextualAttentionModule.fuse_correlation_map with an odd
 * identity kernel: corr (N, H*W, H, W) -> same shape. */
int duet_fuse_correlation(duet_tensor *corr, int kernel, duet_tensor **out);
/* softmax over dim 1 of scale * x; masked (N*C bytes, or NULL): channels
 * (n, c) with masked[n*C + c] set get 0 (a -inf logit). A sample whose
 * channels are all masked gets 0 everywhere (and no gradient), where
 * PyTorch's softmax of -inf logits is NaN. */
int duet_softmax_channels(duet_tensor *x, float scale, const uint8_t *masked,
                          duet_tensor **out);

/* ---- the inpaintors' arithmetic (src/ops/inpaint.c, CPU) ------------------
 * A mask is (N, 1, H, W), standing for every channel of its (N, C, H, W)
 * image, or (N, C, H, W); it is a constant (no gradient reaches it). */

/* keep * (1 - mask) + fill * mask, MMEditing's composite of a generator's
 * output (fill) with the known pixels (keep); gradients to keep and fill. */
int duet_mask_composite(duet_tensor *keep, duet_tensor *fill, duet_tensor *mask,
                        duet_tensor **out);
/* MMEditing's L1Loss with weight=mask, reduction 'mean', sample_wise False:
 * weight * sum(|pred - target| * mask) / (sum(mask expanded to pred's
 * shape) + 1e-12); the gradient reaches pred only. */
int duet_l1_loss_masked(duet_tensor *pred, duet_tensor *target, duet_tensor *mask, float weight,
                        duet_tensor **out);
/* out[n] = x[n, :, tops[n]:tops[n]+h, lefts[n]:lefts[n]+w]: x (N, C, H, W)
 * -> (N, C, h, w) (extract_bbox_patch); a patch leaving its image is
 * DUET_EINVAL naming the sample. Differentiable in x. */
int duet_crop_boxes(duet_tensor *x, const int64_t *tops, const int64_t *lefts, int64_t h,
                    int64_t w, duet_tensor **out);

/* ---- reductions and losses (scalar outputs of shape [1]) ----------------- */

int duet_sum(duet_tensor *x, duet_tensor **out);
int duet_mean(duet_tensor *x, duet_tensor **out);
/* weight * mean(|pred - target|) */
int duet_l1_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out);
/* weight * mean((pred - target)^2) */
int duet_mse_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out);
/* weight * mean(max(x,0) - x*t + log(1 + exp(-|x|))), numerically stable;
 * target has x's shape. Gradient flows to logits only. */
int duet_bce_with_logits(duet_tensor *logits, duet_tensor *target, float weight,
                         duet_tensor **out);
/* Same with every target equal to `target` (a GAN's real/fake label). */
int duet_bce_with_logits_const(duet_tensor *logits, float target, float weight,
                               duet_tensor **out);

/* ---- kernels: the GEMM library and its threads ------------------------------ */

/* Which library runs duet_sgemm (and so every convolution and linear layer):
 * - ONEDNN: oneDNN's sgemm, JIT-compiled for the ISA cpuid reports, so a
 *   CPU newer than the library still gets AVX2 / AVX-512 kernels.
 * - OPENBLAS: OpenBLAS, whose kernels follow its table of CPU models (on a
 *   model newer than it knows, SSE3 unless OPENBLAS_CORETYPE names one).
 * - AUTO: DUET_GEMM from the environment when set ("onednn", "openblas"),
 *   else ONEDNN where it has a JIT for this CPU (AVX2 and up), else
 *   OPENBLAS.
 * Neither library's own variable is overridden: OPENBLAS_CORETYPE still
 * picks OpenBLAS's kernels and ONEDNN_MAX_CPU_ISA caps oneDNN's. */
typedef enum duet_gemm_backend {
    DUET_GEMM_AUTO = 0,
    DUET_GEMM_ONEDNN = 1,
    DUET_GEMM_OPENBLAS = 2,
} duet_gemm_backend;

/* How conv2d runs on the CPU (the config's `conv`, DUET_CONV when AUTO):
 * - AUTO: im2col + SGEMM in float32; in bf16 mixed precision oneDNN's bf16
 *   convolution primitives where they have JIT kernels for the shape.
 * - ONEDNN: as AUTO, and in float32 too the forward and the input gradient
 *   on oneDNN's float32 convolution primitives (16 input and output channels
 *   and more; the weight gradient stays on the GEMM). Faster on the inner
 *   layers, a different rounding (docs/performance.md says why it is not the
 *   default).
 * - IM2COL: every convolution on im2col + the GEMM, bf16 included.
 * - WINOGRAD: as ONEDNN, and the 3x3 stride-1 convolutions (16 input and
 *   output channels and more) on oneDNN's float32 Winograd F(4x4, 3x3)
 *   kernels, all three passes: 2.25x fewer multiplications, about 3.6x
 *   the rounding of a direct convolution in the forward and the input
 *   gradient (docs/performance.md has both measured). In bf16 mixed
 *   precision too (oneDNN has no bf16 Winograd kernels; these are faster
 *   than its bf16 direct ones and nearer float32); the other shapes as
 *   AUTO there. */
typedef enum duet_conv_path {
    DUET_CONV_AUTO = 0,
    DUET_CONV_ONEDNN = 1,
    DUET_CONV_IM2COL = 2,
    DUET_CONV_WINOGRAD = 3,
} duet_conv_path;

typedef struct duet_kernel_opts {
    duet_gemm_backend gemm;
    /* Threads inside this process for GEMMs. 0: DUET_NUM_THREADS when set,
     * else duet_default_num_threads(local_ranks). */
    int num_threads;
    /* Ranks of this job on this node (duet_comm_local_size), for the
     * default thread count. */
    int local_ranks;
    /* Mixed precision (MMEditing's `fp16` configs): true runs every GEMM on
     * bfloat16 inputs with float32 sums and outputs (oneDNN's bf16 matmul);
     * weights, gradients, optimizer state and all other arithmetic stay
     * float32. Needs a CPU with AVX512_BF16 or AMX-BF16 (else
     * DUET_EUNSUPPORTED naming the CPU). */
    bool bf16;
    duet_conv_path conv;
} duet_kernel_opts;
duet_kernel_opts duet_kernel_opts_default(void); /* AUTO, 0, 1, false */

/* Sets the path for every later op in this process (call it from one thread
 * before training; the runner does, from the config's `num_threads` and
 * `gemm` keys). Without a call, the first GEMM configures the defaults.
 * DUET_EINVAL for a bad value or a malformed DUET_GEMM / DUET_NUM_THREADS. */
int duet_kernels_configure(const duet_kernel_opts *opts);
/* min(the cores in this process's affinity mask, the node's online cores /
 * local_ranks), at least 1: an unbound rank takes its share of the node; a
 * rank bound to its own cores (mpirun --map-by slot:PE=T) takes those; a
 * rank bound to a set it shares (Open MPI binds to the socket above 2 ranks)
 * takes no more than its share. Open MPI binds each rank to one core when it
 * starts 1 or 2: there a rank gets 1 thread unless mpirun runs with
 * --bind-to none (or PE=T), or DUET_NUM_THREADS / num_threads says more. */
int duet_default_num_threads(int local_ranks);
/* "auto" / "onednn" / "openblas" (static string), and back; parse fails with
 * DUET_EINVAL naming the value. */
const char *duet_gemm_backend_name(duet_gemm_backend b);
int duet_gemm_backend_parse(const char *s, duet_gemm_backend *out);
/* "auto", "onednn", "im2col", "winograd"; parse: DUET_EINVAL naming them. */
const char *duet_conv_path_name(duet_conv_path c);
int duet_conv_path_parse(const char *s, duet_conv_path *out);

/* What runs, for the startup log line and `duet info`. */
typedef struct duet_kernels_info {
    duet_gemm_backend gemm; /* resolved: ONEDNN or OPENBLAS */
    int num_threads;
    char onednn[64];   /* "oneDNN 2.6.3 avx512_core_bf16" (the ISA its JIT uses) */
    char openblas[96]; /* "OpenBLAS 0.3.21 Cooperlake" (+ OPENBLAS_CORETYPE when set) */
    bool bf16;         /* mixed precision on */
    char bf16_impl[96]; /* oneDNN's matmul implementation for it ("brg:avx512_core_bf16") */
    char bf16_conv_impl[96]; /* its convolutions' ("jit_bf16:avx512_core_bf16", or
                              * "im2col + matmul") */
    duet_conv_path conv; /* resolved: never AUTO (IM2COL, ONEDNN or WINOGRAD) */
    char conv_impl[96]; /* float32 convolutions: oneDNN's implementation
                         * ("jit:avx512_common") with conv ONEDNN, or
                         * "im2col + sgemm" */
    char summary[384]; /* "GEMM: oneDNN 2.6.3 avx512_core_bf16, conv jit:avx512_common,
                        * 1 thread" (+ ", bf16 ...") */
} duet_kernels_info;
int duet_kernels_info_get(duet_kernels_info *out);
/* Floating-point operations (2 m n k per call) this process has sent
 * through duet_sgemm so far, and the GEMM-equivalent work of the
 * convolutions that ran on oneDNN's primitives (2 N O C KH KW OH OW per
 * pass): what a benchmark divides by time. */
uint64_t duet_kernels_gemm_flops(void);

/* ---- image-to-image GAN ops (Pix2Pix, CycleGAN) -------------------------- */

/* PyTorch's conv2d with dilation (>= 1): x (N, C, H, W), w (O, C, KH, KW),
 * b (O) or NULL; tap (i, j) reads input pixel (oh*s - p + i*d, ow*s - p +
 * j*d), zeros outside. out (N, O, (H + 2p - d(KH-1) - 1) / s + 1, ...).
 * im2col and one GEMM per sample, float32 on the CPU; duet_conv2d is the
 * (faster) dilation-1 op. */
int duet_conv2d_dilated(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride, int padding,
                        int dilation, duet_tensor **out);
/* PyTorch's conv_transpose2d: x (N, C, H, W), w (C, O, KH, KW) (ConvTranspose2d's
 * layout: input channels first), b (O) or NULL; symmetric stride, padding
 * and output_padding (< stride). out (N, O, (H-1)*s - 2p + KH + op,
 * (W-1)*s - 2p + KW + op). The adjoint of conv2d: GEMM + col2im. */
int duet_conv_transpose2d(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride,
                          int padding, int output_padding, duet_tensor **out);
/* PyTorch's instance_norm without running statistics (nn.InstanceNorm2d's
 * defaults, track_running_stats=False): each (sample, channel) plane of x
 * (N, C, H, W), H*W > 1, normalised by its own mean and biased variance;
 * weight, bias (C) or both NULL (affine=False). */
int duet_instance_norm2d(duet_tensor *x, duet_tensor *weight, duet_tensor *bias, float eps,
                         duet_tensor **out);
/* nn.ReflectionPad2d((left, right, top, bottom)): x (N, C, H, W) ->
 * (N, C, H+top+bottom, W+left+right), mirrored without repeating the edge;
 * each padding must be smaller than the dimension it pads. */
int duet_reflection_pad2d(duet_tensor *x, int left, int right, int top, int bottom,
                          duet_tensor **out);
/* nn.Dropout(p): in training, each element is kept (and scaled by 1/(1-p))
 * when a fresh duet_rng_uniform(rng) draw is < 1-p, zeroed otherwise; the
 * draws go in element order and advance rng by numel, so saving *rng
 * before a step and restoring it replays the same masks bitwise. Not
 * training, or p == 0: *out is x itself (one more reference) and rng is
 * untouched. p in [0, 1]. */
int duet_dropout(duet_tensor *x, float p, bool training, duet_rng *rng, duet_tensor **out);

/* ---- fused optimizer updates ---------------------------------------------- */

/* Adam's shared settings for duet_adam_update (torch.optim.Adam's, amsgrad
 * off; a plain value). */
typedef struct duet_adam_hparams {
    float lr, beta1, beta2, eps, weight_decay;
} duet_adam_hparams;

/* One Adam step over n parameter tensors at once, in place, as
 * torch.optim.Adam's single-tensor update: for each i, with g its gradient
 * (params[i]->grad, which must exist), g += wd * p; exp_avg = beta1 exp_avg
 * + (1 - beta1) g; exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) g^2; p -= lr
 * / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps),
 * t = steps[i] (>= 1, this step's count; bias corrections in double). All
 * tensors on one device (DUET_EDEVICE naming the first that is not), each
 * moment the shape of its parameter (DUET_ESHAPE); on a GPU one fused
 * kernel runs the whole list. */
int duet_adam_update(size_t n, duet_tensor *const *params, duet_tensor *const *exp_avg,
                     duet_tensor *const *exp_avg_sq, const int64_t *steps,
                     const duet_adam_hparams *hp);

/* ---- BLAS ---------------------------------------------------------------- */

/* Row-major C (M, N) = alpha * op(A) op(B) + beta * C, with op = transpose
 * when trans_* is true. The one place duet calls a GEMM library. */
void duet_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                float *c, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif
