/* The op table's test: iterates duet__op_id itself. Every op must have a
 * row (or be named in not_converted below, which may only shrink) and
 * cases here: an op without cases fails the test, naming it. Each case
 * runs on the CPU with
 *   - a finite-difference check of every differentiable input's gradient
 *     (L = sum(out * r), r fixed; central differences in float32 with
 *     tolerances for float32, inputs kept away from the ops' kinks),
 *   - for ops whose row has a backward in recorded ops: the gradient made
 *     by duet_autograd_grad(create_graph) against the kernel backward's,
 *     and its own gradient (second order, M = sum(g * s)) against finite
 *     differences of M,
 * and the same case on every other device the build can reach against the
 * CPU's output and gradients: the simulated device sim:0 (always; the CPU's
 * kernels on its stream, so bit for bit) and CUDA when a GPU is visible
 * (within a tolerance; skipped with the reason printed otherwise). An op
 * whose row has no kernel for a device is counted as refused there (the
 * refusal by name is test_ops_device's). White-box: includes
 * src/ops/op_table.h. */
#include "testutil.h"

#include "ops/ops_internal.h"

#include <math.h>
#include <string.h>

/* Ops whose public function does not go through duet__op_run yet (their
 * rows come with their conversion; see docs/architecture.md). A row for
 * an op listed here fails the test: take it off the list. */
static const duet__op_id not_converted[] = {
    DUET__OP_CONV2D_DILATED,
    DUET__OP_CONV_TRANSPOSE2D,
    DUET__OP_CONV2D_WEIGHT_GRAD,
    DUET__OP_BATCH_NORM2D,
    DUET__OP_INSTANCE_NORM2D,
    DUET__OP_SPECTRAL_NORM,
    DUET__OP_DROPOUT,
    DUET__OP_MASK_COMPOSITE,
    DUET__OP_SLICE0,
    DUET__OP_CROP_BOXES,
    DUET__OP_SUBSAMPLE_NEAREST,
    DUET__OP_EXTRACT_PATCHES,
    DUET__OP_NORMALIZE_ROWS,
    DUET__OP_FUSE_CORRELATION,
    DUET__OP_SOFTMAX_CHANNELS,
    DUET__OP_L1_LOSS_MASKED,
};

static bool is_not_converted(duet__op_id id) {
    for (size_t i = 0; i < sizeof not_converted / sizeof not_converted[0]; i++)
        if (not_converted[i] == id) return true;
    return false;
}

/* ---- cases ----------------------------------------------------------------- */

#define MAX_IN 6

/* How a case's input is drawn. */
typedef enum {
    SIGNED,   /* +-[0.2, 1]: away from 0, the rectifiers' and clamp's kink */
    POSITIVE, /* [0.5, 1.5] (variances) */
    UNIT,     /* [0, 1] (targets) */
    MASK,     /* 0 or 1 */
} value_kind;

typedef struct op_case {
    duet__op_id op;
    const char *what;
    int nin;
    int ndim[MAX_IN];
    int64_t shape[MAX_IN][DUET_MAX_DIMS];
    value_kind kind[MAX_IN];
    unsigned grad; /* inputs whose gradient is checked */
    int (*run)(duet_tensor **in, duet_tensor **out);
} op_case;

#define T1(a) 1, {a}
#define S(...) {__VA_ARGS__}

static int r_conv2d(duet_tensor **in, duet_tensor **out) {
    return duet_conv2d(in[0], in[1], in[2], 1, 1, out);
}
static int r_conv2d_s2(duet_tensor **in, duet_tensor **out) {
    return duet_conv2d(in[0], in[1], NULL, 2, 0, out);
}
static int r_conv2d_dilated(duet_tensor **in, duet_tensor **out) {
    return duet_conv2d_dilated(in[0], in[1], in[2], 1, 2, 2, out);
}
static int r_conv_transpose2d(duet_tensor **in, duet_tensor **out) {
    return duet_conv_transpose2d(in[0], in[1], in[2], 2, 1, 1, out);
}
static int r_conv2d_weight_grad(duet_tensor **in, duet_tensor **out) {
    return duet_conv2d_weight_grad(in[0], in[1], 3, 3, 1, 1, out);
}
static int r_linear(duet_tensor **in, duet_tensor **out) {
    return duet_linear(in[0], in[1], in[2], out);
}
static int r_batch_norm2d(duet_tensor **in, duet_tensor **out) {
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    return duet_batch_norm2d(in[0], in[1], in[2], in[3], in[4], NULL, &o, out);
}
static int r_batch_norm2d_eval(duet_tensor **in, duet_tensor **out) {
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    o.training = false;
    return duet_batch_norm2d(in[0], in[1], in[2], in[3], in[4], NULL, &o, out);
}
static int r_instance_norm2d(duet_tensor **in, duet_tensor **out) {
    return duet_instance_norm2d(in[0], in[1], in[2], 1e-5f, out);
}
static int r_spectral_norm(duet_tensor **in, duet_tensor **out) {
    return duet_spectral_norm(in[0], in[1], in[2], false, 1, 1e-12f, out);
}
static int r_relu(duet_tensor **in, duet_tensor **out) { return duet_relu(in[0], out); }
static int r_leaky_relu(duet_tensor **in, duet_tensor **out) {
    return duet_leaky_relu(in[0], 0.2f, out);
}
static int r_sigmoid(duet_tensor **in, duet_tensor **out) { return duet_sigmoid(in[0], out); }
static int r_tanh(duet_tensor **in, duet_tensor **out) { return duet_tanh(in[0], out); }
static int r_elu(duet_tensor **in, duet_tensor **out) { return duet_elu(in[0], 0.7f, out); }
static int r_clamp(duet_tensor **in, duet_tensor **out) {
    return duet_clamp(in[0], -0.55f, 0.6f, out);
}
/* A fresh generator per call: the same mask on every evaluation. */
static int r_dropout(duet_tensor **in, duet_tensor **out) {
    duet_rng rng = duet_rng_make(7, 3);
    return duet_dropout(in[0], 0.3f, true, &rng, out);
}
static int r_add(duet_tensor **in, duet_tensor **out) { return duet_add(in[0], in[1], out); }
static int r_sub(duet_tensor **in, duet_tensor **out) { return duet_sub(in[0], in[1], out); }
static int r_mul(duet_tensor **in, duet_tensor **out) { return duet_mul(in[0], in[1], out); }
static int r_scale(duet_tensor **in, duet_tensor **out) { return duet_scale(in[0], -2.5f, out); }
static int r_channel_affine(duet_tensor **in, duet_tensor **out) {
    return duet_channel_affine(in[0], (const float[]){0.5f, -1.0f, 2.0f},
                               (const float[]){0.1f, 0.2f, -0.3f}, out);
}
static int r_channel_affine_null(duet_tensor **in, duet_tensor **out) {
    return duet_channel_affine(in[0], NULL, (const float[]){0.1f, 0.2f, -0.3f}, out);
}
static int r_sub_group_mean(duet_tensor **in, duet_tensor **out) {
    return duet_sub_group_mean(in[0], in[1], 2, out);
}
static int r_mask_composite(duet_tensor **in, duet_tensor **out) {
    return duet_mask_composite(in[0], in[1], in[2], out);
}
static int r_reshape(duet_tensor **in, duet_tensor **out) {
    return duet_reshape(in[0], 2, (const int64_t[]){6, 4}, out);
}
static int r_flatten(duet_tensor **in, duet_tensor **out) { return duet_flatten(in[0], out); }
static int r_concat_channels(duet_tensor **in, duet_tensor **out) {
    return duet_concat_channels(3, in, out);
}
static int r_slice_channels(duet_tensor **in, duet_tensor **out) {
    return duet_slice_channels(in[0], 1, 2, out);
}
static int r_slice0(duet_tensor **in, duet_tensor **out) {
    return duet_slice0(in[0], 1, 2, out);
}
static int r_transpose2d(duet_tensor **in, duet_tensor **out) {
    return duet_transpose2d(in[0], out);
}
static int r_crop_boxes(duet_tensor **in, duet_tensor **out) {
    return duet_crop_boxes(in[0], (const int64_t[]){0, 2}, (const int64_t[]){1, 0}, 3, 3, out);
}
static int r_max_pool2d(duet_tensor **in, duet_tensor **out) {
    return duet_max_pool2d(in[0], 2, 2, out);
}
static int r_reflection_pad2d(duet_tensor **in, duet_tensor **out) {
    return duet_reflection_pad2d(in[0], 1, 2, 2, 1, out);
}
static int r_pixel_shuffle(duet_tensor **in, duet_tensor **out) {
    return duet_pixel_shuffle(in[0], 2, out);
}
static int r_upsample_bilinear(duet_tensor **in, duet_tensor **out) {
    return duet_upsample_bilinear(in[0], 2, out);
}
static int r_upsample_nearest(duet_tensor **in, duet_tensor **out) {
    return duet_upsample_nearest(in[0], 2, out);
}
static int r_resize_bilinear_ac(duet_tensor **in, duet_tensor **out) {
    return duet_resize_bilinear_ac(in[0], 5, 4, out);
}
static int r_subsample_nearest(duet_tensor **in, duet_tensor **out) {
    return duet_subsample_nearest(in[0], 2, out);
}
static int r_extract_patches(duet_tensor **in, duet_tensor **out) {
    return duet_extract_patches(in[0], 3, 1, 1, out);
}
static int r_normalize_rows(duet_tensor **in, duet_tensor **out) {
    return duet_normalize_rows(in[0], 1e-4f, out);
}
static int r_fuse_correlation(duet_tensor **in, duet_tensor **out) {
    return duet_fuse_correlation(in[0], 3, out);
}
static int r_softmax_channels(duet_tensor **in, duet_tensor **out) {
    return duet_softmax_channels(in[0], 2.0f, NULL, out);
}
static int r_softmax_channels_masked(duet_tensor **in, duet_tensor **out) {
    return duet_softmax_channels(in[0], 2.0f, (const uint8_t[]){0, 1, 0, 0, 0, 1}, out);
}
static int r_sum(duet_tensor **in, duet_tensor **out) { return duet_sum(in[0], out); }
static int r_mean(duet_tensor **in, duet_tensor **out) { return duet_mean(in[0], out); }
static int r_sum_channels(duet_tensor **in, duet_tensor **out) {
    return duet_sum_channels(in[0], out);
}
static int r_channel_norm(duet_tensor **in, duet_tensor **out) {
    return duet_channel_norm(in[0], out);
}
static int r_gram_matrix(duet_tensor **in, duet_tensor **out) {
    return duet_gram_matrix(in[0], out);
}
static int r_l1_loss(duet_tensor **in, duet_tensor **out) {
    return duet_l1_loss(in[0], in[1], 0.7f, out);
}
static int r_mse_loss(duet_tensor **in, duet_tensor **out) {
    return duet_mse_loss(in[0], in[1], 1.3f, out);
}
static int r_bce(duet_tensor **in, duet_tensor **out) {
    return duet_bce_with_logits(in[0], in[1], 0.9f, out);
}
static int r_bce_const(duet_tensor **in, duet_tensor **out) {
    return duet_bce_with_logits_const(in[0], 0.9f, 1.5f, out);
}
static int r_l1_loss_masked(duet_tensor **in, duet_tensor **out) {
    return duet_l1_loss_masked(in[0], in[1], in[2], 1.2f, out);
}
/* Adam updates in place and makes no output: the case's output is the
 * updated parameter (a copy), its inputs param, grad values, exp_avg,
 * exp_avg_sq (copied first, so that every evaluation starts alike). */
static int r_adam(duet_tensor **in, duet_tensor **out) {
    duet_tensor *p = NULL, *m = NULL, *v = NULL;
    int rc = duet_tensor_clone(in[0], &p);
    if (rc == DUET_OK) rc = duet_tensor_clone(in[2], &m);
    if (rc == DUET_OK) rc = duet_tensor_clone(in[3], &v);
    if (rc == DUET_OK) rc = duet_tensor_ensure_grad(p);
    if (rc == DUET_OK)
        rc = duet__device_copy(duet_tensor_device(p), p->grad, duet_tensor_device(in[1]),
                               in[1]->data, (size_t)p->numel * sizeof(float), "test");
    const duet_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                                  .weight_decay = 0.01f};
    if (rc == DUET_OK) rc = duet_adam_update(1, &p, &m, &v, (const int64_t[]){3}, &hp);
    if (rc == DUET_OK) rc = duet_tensor_clone(p, out);
    duet_tensor_release(p);
    duet_tensor_release(m);
    duet_tensor_release(v);
    return rc;
}
/* relu_backward: the recorded backward of leaky_relu(x), from the mask
 * that leaky_relu's node saved. */
static int r_relu_backward(duet_tensor **in, duet_tensor **out) {
    duet_tensor *x = NULL, *y = NULL;
    int rc = duet_tensor_clone(in[1], &x);
    if (rc != DUET_OK) return rc;
    x->requires_grad = true;
    bool prev = duet_set_grad_enabled(true);
    rc = duet_leaky_relu(x, 0.2f, &y);
    duet_set_grad_enabled(prev);
    if (rc == DUET_OK) {
        const struct {
            float slope;
            const void *bits;
        } p = {0.2f, duet__op_node_saved(y->grad_fn, 0)};
        rc = DUET__OP_RUN(DUET__OP_RELU_BACKWARD, &p, out, in[0], in[1]);
    }
    duet_tensor_release(y);
    duet_tensor_release(x);
    return rc;
}
static int r_elu_backward(duet_tensor **in, duet_tensor **out) {
    const float alpha = 0.7f;
    return DUET__OP_RUN(DUET__OP_ELU_BACKWARD, &alpha, out, in[0], in[1]);
}
static int r_expand_scalar(duet_tensor **in, duet_tensor **out) {
    return duet__graph_expand_scalar(in[0], 2, (const int64_t[]){2, 3}, 0.5f, out);
}

#define X4(n, c, h, w) 4, {n, c, h, w}
static const op_case cases[] = {
    {DUET__OP_CONV2D, "3x3 pad 1 bias", 3, {4, 4, 1}, {S(2, 3, 5, 5), S(4, 3, 3, 3), S(4)},
     {0}, 7, r_conv2d},
    {DUET__OP_CONV2D, "3x3 stride 2", 2, {4, 4}, {S(1, 2, 5, 5), S(3, 2, 3, 3)}, {0}, 3,
     r_conv2d_s2},
    {DUET__OP_CONV2D_DILATED, "dilation 2", 3, {4, 4, 1}, {S(1, 2, 6, 6), S(3, 2, 3, 3), S(3)},
     {0}, 7, r_conv2d_dilated},
    {DUET__OP_CONV_TRANSPOSE2D, "stride 2 output_padding 1", 3, {4, 4, 1},
     {S(1, 3, 3, 3), S(3, 2, 3, 3), S(2)}, {0}, 7, r_conv_transpose2d},
    {DUET__OP_CONV2D_WEIGHT_GRAD, "3x3", 2, {4, 4}, {S(1, 2, 4, 4), S(1, 3, 4, 4)}, {0}, 3,
     r_conv2d_weight_grad},
    {DUET__OP_LINEAR, "bias", 3, {2, 2, 1}, {S(3, 4), S(5, 4), S(5)}, {0}, 7, r_linear},
    {DUET__OP_BATCH_NORM2D, "training", 5, {4, 1, 1, 1, 1},
     {S(3, 2, 2, 2), S(2), S(2), S(2), S(2)}, {0, 0, 0, 0, POSITIVE}, 7, r_batch_norm2d},
    {DUET__OP_BATCH_NORM2D, "eval", 5, {4, 1, 1, 1, 1},
     {S(2, 2, 2, 2), S(2), S(2), S(2), S(2)}, {0, 0, 0, 0, POSITIVE}, 7, r_batch_norm2d_eval},
    {DUET__OP_INSTANCE_NORM2D, "affine", 3, {4, 1, 1}, {S(2, 2, 3, 3), S(2), S(2)}, {0}, 7,
     r_instance_norm2d},
    {DUET__OP_SPECTRAL_NORM, "no update", 3, {2, 1, 1}, {S(3, 4), S(3), S(4)}, {0}, 1,
     r_spectral_norm},
    {DUET__OP_RELU, "", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_relu},
    {DUET__OP_LEAKY_RELU, "slope 0.2", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_leaky_relu},
    {DUET__OP_SIGMOID, "", 1, {2}, {S(3, 5)}, {0}, 1, r_sigmoid},
    {DUET__OP_TANH, "", 1, {2}, {S(3, 5)}, {0}, 1, r_tanh},
    {DUET__OP_ELU, "alpha 0.7", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_elu},
    {DUET__OP_CLAMP, "", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_clamp},
    {DUET__OP_DROPOUT, "p 0.3", 1, {2}, {S(4, 6)}, {0}, 1, r_dropout},
    {DUET__OP_ADD, "", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0}, 3, r_add},
    {DUET__OP_SUB, "", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0}, 3, r_sub},
    {DUET__OP_MUL, "", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0}, 3, r_mul},
    {DUET__OP_SCALE, "", 1, {2}, {S(2, 3)}, {0}, 1, r_scale},
    {DUET__OP_CHANNEL_AFFINE, "scale and shift", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1,
     r_channel_affine},
    {DUET__OP_CHANNEL_AFFINE, "shift only", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1,
     r_channel_affine_null},
    {DUET__OP_SUB_GROUP_MEAN, "2 groups", 2, {2, 2}, {S(4, 3), S(4, 3)}, {0}, 3,
     r_sub_group_mean},
    {DUET__OP_MASK_COMPOSITE, "1-channel mask", 3, {4, 4, 4},
     {S(1, 2, 3, 3), S(1, 2, 3, 3), S(1, 1, 3, 3)}, {0, 0, MASK}, 3, r_mask_composite},
    {DUET__OP_RESHAPE, "", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_reshape},
    {DUET__OP_FLATTEN, "", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1, r_flatten},
    {DUET__OP_CONCAT_CHANNELS, "3 inputs", 3, {4, 4, 4},
     {S(1, 2, 2, 2), S(1, 3, 2, 2), S(1, 1, 2, 2)}, {0}, 7, r_concat_channels},
    {DUET__OP_SLICE_CHANNELS, "", 1, {4}, {S(2, 4, 2, 2)}, {0}, 1, r_slice_channels},
    {DUET__OP_SLICE0, "", 1, {2}, {S(4, 3)}, {0}, 1, r_slice0},
    {DUET__OP_TRANSPOSE2D, "", 1, {2}, {S(3, 4)}, {0}, 1, r_transpose2d},
    {DUET__OP_CROP_BOXES, "", 1, {4}, {S(2, 2, 5, 5)}, {0}, 1, r_crop_boxes},
    {DUET__OP_MAX_POOL2D, "2x2", 1, {4}, {S(1, 2, 4, 4)}, {0}, 1, r_max_pool2d},
    {DUET__OP_REFLECTION_PAD2D, "", 1, {4}, {S(1, 2, 4, 4)}, {0}, 1, r_reflection_pad2d},
    {DUET__OP_PIXEL_SHUFFLE, "r 2", 1, {4}, {S(1, 8, 2, 2)}, {0}, 1, r_pixel_shuffle},
    {DUET__OP_UPSAMPLE_BILINEAR, "x2", 1, {4}, {S(1, 2, 3, 3)}, {0}, 1, r_upsample_bilinear},
    {DUET__OP_UPSAMPLE_NEAREST, "x2", 1, {4}, {S(1, 2, 3, 3)}, {0}, 1, r_upsample_nearest},
    {DUET__OP_RESIZE_BILINEAR_AC, "3x3 to 5x4", 1, {4}, {S(1, 2, 3, 3)}, {0}, 1,
     r_resize_bilinear_ac},
    {DUET__OP_SUBSAMPLE_NEAREST, "/2", 1, {4}, {S(1, 2, 4, 4)}, {0}, 1, r_subsample_nearest},
    {DUET__OP_EXTRACT_PATCHES, "3x3 pad 1", 1, {4}, {S(1, 2, 4, 4)}, {0}, 1,
     r_extract_patches},
    {DUET__OP_NORMALIZE_ROWS, "", 1, {4}, {S(3, 2, 2, 2)}, {0}, 1, r_normalize_rows},
    {DUET__OP_FUSE_CORRELATION, "kernel 3", 1, {4}, {S(1, 4, 2, 2)}, {0}, 1,
     r_fuse_correlation},
    {DUET__OP_SOFTMAX_CHANNELS, "", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1, r_softmax_channels},
    {DUET__OP_SOFTMAX_CHANNELS, "masked", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1,
     r_softmax_channels_masked},
    {DUET__OP_SUM, "", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_sum},
    {DUET__OP_MEAN, "", 1, {3}, {S(2, 3, 4)}, {0}, 1, r_mean},
    {DUET__OP_SUM_CHANNELS, "", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1, r_sum_channels},
    {DUET__OP_CHANNEL_NORM, "", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1, r_channel_norm},
    {DUET__OP_GRAM_MATRIX, "", 1, {4}, {S(2, 3, 2, 2)}, {0}, 1, r_gram_matrix},
    {DUET__OP_L1_LOSS, "", 2, {2, 2}, {S(3, 4), S(3, 4)}, {0}, 3, r_l1_loss},
    {DUET__OP_MSE_LOSS, "", 2, {2, 2}, {S(3, 4), S(3, 4)}, {0}, 3, r_mse_loss},
    {DUET__OP_BCE_WITH_LOGITS, "", 2, {2, 2}, {S(3, 4), S(3, 4)}, {0, UNIT}, 1, r_bce},
    {DUET__OP_BCE_WITH_LOGITS_CONST, "", 1, {2}, {S(3, 4)}, {0}, 1, r_bce_const},
    {DUET__OP_L1_LOSS_MASKED, "", 3, {4, 4, 4}, {S(1, 2, 3, 3), S(1, 2, 3, 3), S(1, 1, 3, 3)},
     {0, 0, MASK}, 1, r_l1_loss_masked},
    {DUET__OP_ADAM, "one step, weight decay", 4, {2, 2, 2, 2},
     {S(3, 4), S(3, 4), S(3, 4), S(3, 4)}, {0, 0, 0, POSITIVE}, 0, r_adam},
    {DUET__OP_RELU_BACKWARD, "slope 0.2", 2, {2, 2}, {S(3, 4), S(3, 4)}, {0}, 3,
     r_relu_backward},
    {DUET__OP_ELU_BACKWARD, "alpha 0.7", 2, {2, 2}, {S(3, 4), S(3, 4)}, {0}, 3, r_elu_backward},
    {DUET__OP_EXPAND_SCALAR, "to (2, 3)", 1, {1}, {S(1)}, {0}, 1, r_expand_scalar},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- helpers ----------------------------------------------------------------- */

static float draw(duet_rng *rng, value_kind k) {
    const float u = duet_rng_uniform(rng);
    switch (k) {
    case POSITIVE: return 0.5f + u;
    case UNIT: return u;
    case MASK: return u < 0.5f ? 0.0f : 1.0f;
    default: {
        const float m = 0.2f + 0.8f * duet_rng_uniform(rng);
        return u < 0.5f ? -m : m;
    }
    }
}

/* The case's inputs on the CPU, drawn from a generator seeded by the case. */
static void make_inputs(const op_case *c, int index, duet_tensor **in) {
    duet_rng rng = duet_rng_make(1000 + (uint64_t)index, 0);
    for (int i = 0; i < c->nin; i++) {
        TU_OK(duet_tensor_create(c->ndim[i], c->shape[i], &in[i]));
        for (int64_t k = 0; k < in[i]->numel; k++) in[i]->data[k] = draw(&rng, c->kind[i]);
    }
}

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* L = sum(out * r) on the CPU, without recording. */
static double loss_value(const op_case *c, duet_tensor **in, const float *r, int64_t n) {
    bool prev = duet_set_grad_enabled(false);
    duet_tensor *y = NULL;
    TU_OK(c->run(in, &y));
    assert_int_equal(y->numel, n);
    const double l = dot(y->data, r, n);
    duet_tensor_release(y);
    duet_set_grad_enabled(prev);
    return l;
}

static void check_close(const char *op, const char *what, const char *which, const float *got,
                        const double *want, int64_t n, double rtol, double atol) {
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            fail_msg("%s (%s): %s[%lld] = %.6g, expected %.6g", op, what, which, (long long)i,
                     (double)got[i], want[i]);
    }
}

/* Runs the case on the CPU with gradients: the output (and its numel) and
 * the gradients of the checked inputs, into host arrays the caller frees. */
typedef struct result {
    int64_t n;
    float *out;
    float *grad[MAX_IN];
} result;

static void result_free(result *r) {
    free(r->out);
    for (int i = 0; i < MAX_IN; i++) free(r->grad[i]);
}

static float *host_copy(const duet_tensor *t) {
    float *h = malloc((size_t)t->numel * sizeof *h);
    assert_non_null(h);
    TU_OK(duet_tensor_copy_to_host(t, h));
    return h;
}

/* The case on device dev: inputs copied there, L = sum(out * r) with r
 * there, duet_backward, output and gradients back on the host. */
static void run_on(const op_case *c, duet_tensor **cpu_in, const float *r, duet_device dev,
                   result *res) {
    memset(res, 0, sizeof *res);
    duet_tensor *in[MAX_IN] = {0}, *y = NULL, *rt = NULL, *p = NULL, *l = NULL;
    for (int i = 0; i < c->nin; i++) {
        TU_OK(duet_tensor_to(cpu_in[i], dev, &in[i]));
        in[i]->requires_grad = (c->grad >> i) & 1u;
    }
    TU_OK(c->run(in, &y));
    res->n = y->numel;
    res->out = host_copy(y);
    if (c->grad != 0) {
        TU_OK(duet_tensor_to(y, dev, &rt));
        TU_OK(duet_tensor_copy_from_host(rt, r));
        TU_OK(duet_mul(y, rt, &p));
        TU_OK(duet_sum(p, &l));
        TU_OK(duet_backward(l));
        for (int i = 0; i < c->nin; i++) {
            if (!((c->grad >> i) & 1u)) continue;
            if (in[i]->grad == NULL) { /* not reached: a zero gradient */
                res->grad[i] = calloc((size_t)in[i]->numel, sizeof(float));
                continue;
            }
            res->grad[i] = malloc((size_t)in[i]->numel * sizeof(float));
            TU_OK(duet__device_copy(duet_device_cpu(), res->grad[i], dev, in[i]->grad,
                                    (size_t)in[i]->numel * sizeof(float), "test"));
        }
    }
    duet_tensor *ts[] = {y, rt, p, l};
    for (size_t i = 0; i < 4; i++) duet_tensor_release(ts[i]);
    for (int i = 0; i < c->nin; i++) duet_tensor_release(in[i]);
    duet_tape_clear();
}

/* Central differences of f over every element of in[i]. */
static double *finite_diff(const op_case *c, duet_tensor **in, int i, const float *r, int64_t n,
                           double eps) {
    double *g = calloc((size_t)in[i]->numel, sizeof *g);
    assert_non_null(g);
    for (int64_t k = 0; k < in[i]->numel; k++) {
        const float v = in[i]->data[k];
        in[i]->data[k] = v + (float)eps;
        const double lp = loss_value(c, in, r, n);
        in[i]->data[k] = v - (float)eps;
        const double lm = loss_value(c, in, r, n);
        in[i]->data[k] = v;
        g[k] = (lp - lm) / (2.0 * eps);
    }
    return g;
}

/* ---- second order ------------------------------------------------------------ */

/* g_i = d<out, r>/d in[i] by duet_autograd_grad (create_graph when
 * create): the gradients of the checked inputs, new tensors. */
static void graph_grads(const op_case *c, duet_tensor **in, const float *r, bool create,
                        duet_tensor **g) {
    duet_tensor *y = NULL, *rt = NULL, *p = NULL, *l = NULL;
    duet_tensor *want[MAX_IN];
    int nw = 0;
    for (int i = 0; i < c->nin; i++) {
        in[i]->requires_grad = (c->grad >> i) & 1u;
        if (in[i]->requires_grad) want[nw++] = in[i];
    }
    TU_OK(c->run(in, &y));
    TU_OK(duet_tensor_create(y->ndim, y->shape, &rt));
    memcpy(rt->data, r, (size_t)y->numel * sizeof(float));
    TU_OK(duet_mul(y, rt, &p));
    TU_OK(duet_sum(p, &l));
    TU_OK(duet_autograd_grad(1, &l, NULL, nw, want, create, g));
    duet_tensor *ts[] = {y, rt, p, l};
    for (size_t i = 0; i < 4; i++) duet_tensor_release(ts[i]);
}

/* M = sum_j <g_j, s_j>, g from graph_grads without history. */
static double second_value(const op_case *c, duet_tensor **in, const float *r, float *const *s) {
    duet_tensor *g[MAX_IN] = {0};
    graph_grads(c, in, r, false, g);
    double m = 0.0;
    for (int i = 0, j = 0; i < c->nin; i++)
        if ((c->grad >> i) & 1u) {
            m += dot(g[j]->data, s[i], g[j]->numel);
            duet_tensor_release(g[j++]);
        }
    duet_tape_clear();
    return m;
}

static void check_second_order(const op_case *c, duet_tensor **in, const float *r,
                               const result *first) {
    const char *op = duet__op_name(c->op);
    duet_rng rng = duet_rng_make(99, 1);
    float *s[MAX_IN] = {0};
    for (int i = 0; i < c->nin; i++)
        if ((c->grad >> i) & 1u) {
            s[i] = malloc((size_t)in[i]->numel * sizeof(float));
            for (int64_t k = 0; k < in[i]->numel; k++) s[i][k] = draw(&rng, SIGNED);
        }
    /* The recorded backward's gradient equals the kernel backward's. */
    duet_tensor *g[MAX_IN] = {0};
    graph_grads(c, in, r, true, g);
    duet_tensor *m = NULL;
    for (int i = 0, j = 0; i < c->nin; i++) {
        if (!((c->grad >> i) & 1u)) continue;
        double *want = malloc((size_t)in[i]->numel * sizeof *want);
        for (int64_t k = 0; k < in[i]->numel; k++) want[k] = first->grad[i][k];
        check_close(op, c->what, "recorded backward's gradient", g[j]->data, want,
                    in[i]->numel, 1e-4, 1e-5);
        free(want);
        /* M += <g_j, s_j> through recorded ops. */
        duet_tensor *st = NULL, *p = NULL, *q = NULL, *sum = NULL;
        TU_OK(duet_tensor_create(g[j]->ndim, g[j]->shape, &st));
        memcpy(st->data, s[i], (size_t)st->numel * sizeof(float));
        TU_OK(duet_mul(g[j], st, &p));
        TU_OK(duet_sum(p, &q));
        if (m == NULL) {
            m = q;
            q = NULL;
        } else {
            TU_OK(duet_add(m, q, &sum));
            duet_tensor_release(m);
            m = sum;
        }
        duet_tensor_release(st);
        duet_tensor_release(p);
        duet_tensor_release(q);
        duet_tensor_release(g[j++]);
    }
    /* dM/d in[i] by backward through both graphs (none when M has no
     * history: the gradient is constant, its derivative 0). */
    if (m->requires_grad) TU_OK(duet_backward(m));
    duet_tensor_release(m);
    duet_tape_clear();
    for (int i = 0; i < c->nin; i++) {
        if (!((c->grad >> i) & 1u)) continue;
        const double eps = 1e-2;
        double *fd = calloc((size_t)in[i]->numel, sizeof *fd);
        for (int64_t k = 0; k < in[i]->numel; k++) {
            const float v = in[i]->data[k];
            in[i]->data[k] = v + (float)eps;
            const double mp = second_value(c, in, r, s);
            in[i]->data[k] = v - (float)eps;
            const double mm = second_value(c, in, r, s);
            in[i]->data[k] = v;
            fd[k] = (mp - mm) / (2.0 * eps);
        }
        float *got = calloc((size_t)in[i]->numel, sizeof *got);
        if (in[i]->grad != NULL) memcpy(got, in[i]->grad, (size_t)in[i]->numel * sizeof *got);
        check_close(op, c->what, "second-order gradient", got, fd, in[i]->numel, 3e-2, 3e-2);
        free(got);
        free(fd);
    }
    for (int i = 0; i < c->nin; i++) {
        free(s[i]);
        in[i]->requires_grad = false;
    }
}

/* ---- the tests ----------------------------------------------------------------- */

static void test_every_op_has_a_row_and_cases(void **state) {
    (void)state;
    int missing = 0;
    for (int id = 0; id < DUET__OP_COUNT; id++) {
        const char *name = duet__op_name((duet__op_id)id);
        assert_non_null(name);
        int n = 0;
        for (int k = 0; k < NCASES; k++) n += cases[k].op == (duet__op_id)id;
        const duet__op_def *row = duet__op_row((duet__op_id)id);
        if (n == 0) {
            fprintf(stderr, "op %s has no cases in test_op_table.c\n", name);
            missing++;
        }
        if (row == NULL && !is_not_converted((duet__op_id)id)) {
            fprintf(stderr, "op %s has no row in op_table.c\n", name);
            missing++;
        }
        if (row != NULL && is_not_converted((duet__op_id)id)) {
            fprintf(stderr, "op %s has a row: take it off not_converted\n", name);
            missing++;
        }
        if (row != NULL) {
            assert_int_equal(row->id, id);
            assert_non_null(row->check);
            assert_non_null(row->forward[DUET_DEVICE_CPU]);
            assert_non_null(row->backward[DUET_DEVICE_CPU]);
        }
    }
    assert_int_equal(duet__op_name(DUET__OP_COUNT), NULL);
    if (missing > 0) fail_msg("%d op(s) without cases or a row (named above)", missing);
}

static void test_cases_on_the_cpu(void **state) {
    (void)state;
    int checks = 0, second = 0;
    /* The harness builds L = sum(out * r) with mul and sum: their cases run
     * first, so that a fault in them is reported under their names. */
    for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < NCASES; k++) {
        const op_case *c = &cases[k];
        const bool harness = c->op == DUET__OP_MUL || c->op == DUET__OP_SUM;
        if (harness != (pass == 0)) continue;
        const char *op = duet__op_name(c->op);
        duet_tensor *in[MAX_IN] = {0};
        make_inputs(c, k, in);
        /* The output's size, then r. */
        duet_tensor *y = NULL;
        bool prev = duet_set_grad_enabled(false);
        TU_OK(c->run(in, &y));
        duet_set_grad_enabled(prev);
        const int64_t n = y->numel;
        duet_tensor_release(y);
        float *r = malloc((size_t)n * sizeof *r);
        duet_rng rng = duet_rng_make(77, (uint64_t)k);
        for (int64_t i = 0; i < n; i++) r[i] = draw(&rng, SIGNED);
        result res;
        run_on(c, in, r, duet_device_cpu(), &res);
        for (int i = 0; i < c->nin; i++) {
            if (!((c->grad >> i) & 1u)) continue;
            double *fd = finite_diff(c, in, i, r, n, 1e-3);
            char which[32];
            snprintf(which, sizeof which, "gradient of input %d", i);
            check_close(op, c->what, which, res.grad[i], fd, in[i]->numel, 2e-2, 3e-3);
            free(fd);
            checks++;
        }
        const duet__op_def *row = duet__op_row(c->op);
        if (row != NULL && row->graph_backward != NULL && c->grad != 0) {
            check_second_order(c, in, r, &res);
            second++;
        }
        result_free(&res);
        free(r);
        for (int i = 0; i < c->nin; i++) duet_tensor_release(in[i]);
    }
    printf("op table: %d ops, %d cases, %d gradient checks, %d second-order checks\n",
           (int)DUET__OP_COUNT, NCASES, checks, second);
}

/* The devices other than the CPU this process can reach, with the reason
 * for each it cannot. */
static int other_devices(duet_device *devs) {
    int n = 0;
    devs[n++] = duet_device_sim(0); /* every build: the CPU kernels, bit for bit */
    if (!duet_cuda_built())
        printf("op table on CUDA: skipped (built without CUDA)\n");
    else if (duet_cuda_device_count() == 0)
        printf("op table on CUDA: skipped (no CUDA device is visible)\n");
    else
        devs[n++] = duet_device_cuda(0);
    return n;
}

static void test_cases_on_every_device(void **state) {
    (void)state;
    duet_device devs[4];
    const int ndev = other_devices(devs);
    for (int d = 0; d < ndev; d++) {
        char name[DUET_DEVICE_STR_MAX];
        duet_device_str(devs[d], name, sizeof name);
        int ran = 0, refused = 0;
        for (int k = 0; k < NCASES; k++) {
            const op_case *c = &cases[k];
            const duet__op_def *row = duet__op_row(c->op);
            if (row == NULL || row->forward[devs[d].type] == NULL) {
                refused++; /* the op refuses the device by name: test_ops_device */
                continue;
            }
            duet_tensor *in[MAX_IN] = {0};
            make_inputs(c, k, in);
            duet_tensor *y = NULL;
            TU_OK(c->run(in, &y));
            float *r = malloc((size_t)y->numel * sizeof *r);
            duet_rng rng = duet_rng_make(77, (uint64_t)k);
            for (int64_t i = 0; i < y->numel; i++) r[i] = draw(&rng, SIGNED);
            duet_tensor_release(y);
            duet_tape_clear();
            result cpu, dev;
            run_on(c, in, r, duet_device_cpu(), &cpu);
            run_on(c, in, r, devs[d], &dev);
            double *want = malloc((size_t)cpu.n * sizeof *want);
            for (int64_t i = 0; i < cpu.n; i++) want[i] = cpu.out[i];
            /* sim runs the CPU's kernels: bit for bit; CUDA within float32
             * rounding of other summation orders. */
            const bool exact = devs[d].type == DUET_DEVICE_SIM;
            const double rtol = exact ? 0.0 : 1e-4, atol = exact ? 0.0 : 1e-5;
            check_close(duet__op_name(c->op), c->what, name, dev.out, want, cpu.n, rtol, atol);
            free(want);
            for (int i = 0; i < c->nin; i++) {
                if (cpu.grad[i] == NULL) continue;
                want = malloc((size_t)in[i]->numel * sizeof *want);
                for (int64_t j = 0; j < in[i]->numel; j++) want[j] = cpu.grad[i][j];
                check_close(duet__op_name(c->op), c->what, name, dev.grad[i], want,
                            in[i]->numel, rtol, atol);
                free(want);
            }
            result_free(&cpu);
            result_free(&dev);
            free(r);
            for (int i = 0; i < c->nin; i++) duet_tensor_release(in[i]);
            ran++;
        }
        printf("op table on %s: %d cases against the CPU, %d refused (no kernel)\n", name, ran,
               refused);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_has_a_row_and_cases),
        cmocka_unit_test(test_cases_on_the_cpu),
        cmocka_unit_test(test_cases_on_every_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
