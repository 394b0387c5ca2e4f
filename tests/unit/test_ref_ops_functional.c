/* The functional ops (element-wise, activations, resampling, avg_pool2d
 * and MMEditing's flow_warp, shape, reductions, losses) against PyTorch
 * (tests/ref/ref_ops_functional.py -> ops_functional.safetensors):
 * for every case, the output and the gradient of sum(out * r) with respect
 * to each differentiable input, to 1e-4 relative (1e-5 relative for the
 * exact rearrangements). */
#include "testutil.h"

#include <stdio.h>
#include <string.h>


static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("ops_functional.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

/* The op under test; ctx carries the case's constants. */

static void run_case(const char *name, int n, tu_ref_op op, void *ctx, double rtol) {
    tu_ref_run_case(ref, name, n, op, ctx, rtol, 1e-6);
}

/* ---- op adapters ------------------------------------------------------------ */

static int op_relu(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_relu(in[0], out);
}
static int op_leaky_relu(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_leaky_relu(in[0], 0.2f, out);
}
static int op_sigmoid(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sigmoid(in[0], out);
}
static int op_tanh(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_tanh(in[0], out);
}
static int op_elu(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_elu(in[0], *(const float *)c, out);
}
static int op_add(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_add(in[0], in[1], out);
}
static int op_sub(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sub(in[0], in[1], out);
}
static int op_mul(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_mul(in[0], in[1], out);
}
static int op_scale(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_scale(in[0], -1.7f, out);
}
static int op_channel_affine(void *c, duet_tensor *const *in, duet_tensor **out) {
    const duet_tensor *const *ss = c; /* scale, shift */
    return duet_channel_affine(in[0], ss[0]->data, ss[1]->data, out);
}
static int op_pixel_shuffle(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_pixel_shuffle(in[0], *(const int *)c, out);
}
static int op_bilinear(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_upsample_bilinear(in[0], *(const int *)c, out);
}
static int op_flatten(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_flatten(in[0], out);
}
static int op_reshape(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_reshape(in[0], 2, (int64_t[]){6, 20}, out);
}
static int op_concat(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_concat_channels(3, in, out);
}
static int op_sum(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sum(in[0], out);
}
static int op_mean(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_mean(in[0], out);
}
static int op_l1(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_l1_loss(in[0], in[1], *(const float *)c, out);
}
static int op_mse(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_mse_loss(in[0], in[1], *(const float *)c, out);
}
static int op_bce(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_bce_with_logits(in[0], in[1], *(const float *)c, out);
}
typedef struct bce_const_args {
    float target, weight;
} bce_const_args;
static int op_bce_const(void *c, duet_tensor *const *in, duet_tensor **out) {
    const bce_const_args *a = c;
    return duet_bce_with_logits_const(in[0], a->target, a->weight, out);
}

static int op_avg_pool(void *c, duet_tensor *const *in, duet_tensor **out) {
    const int *ks = c;
    return duet_avg_pool2d(in[0], ks[0], ks[1], out);
}
static int op_flow_warp(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_flow_warp(in[0], in[1], *(const duet_flow_padding *)c, out);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_activations(void **state) {
    (void)state;
    run_case("relu", 1, op_relu, NULL, 1e-6);
    run_case("leaky_relu", 1, op_leaky_relu, NULL, 1e-6);
    run_case("sigmoid", 1, op_sigmoid, NULL, 1e-5);
    run_case("tanh", 1, op_tanh, NULL, 1e-5);
    float alpha = 1.0f, alpha3 = 0.3f;
    run_case("elu", 1, op_elu, &alpha, 1e-5);
    run_case("elu_a03", 1, op_elu, &alpha3, 1e-5);
}

static void test_elementwise(void **state) {
    (void)state;
    run_case("add", 2, op_add, NULL, 1e-6);
    run_case("sub", 2, op_sub, NULL, 1e-6);
    run_case("mul", 2, op_mul, NULL, 1e-6);
    run_case("scale", 1, op_scale, NULL, 1e-6);
    const duet_tensor *ss[2] = {tu_ref_tensor(ref, "channel_affine.scale"),
                                tu_ref_tensor(ref, "channel_affine.shift")};
    run_case("channel_affine", 1, op_channel_affine, ss, 1e-5);
    duet_tensor_release((duet_tensor *)ss[0]);
    duet_tensor_release((duet_tensor *)ss[1]);
}

static void test_pixel_shuffle(void **state) {
    (void)state;
    int r = 2;
    run_case("pixel_shuffle_r2", 1, op_pixel_shuffle, &r, 0.0);
    r = 3;
    run_case("pixel_shuffle_r3", 1, op_pixel_shuffle, &r, 0.0);
}

static void test_bilinear(void **state) {
    (void)state;
    int f = 2;
    run_case("bilinear_x2_5x7", 1, op_bilinear, &f, 1e-5);
    f = 3;
    run_case("bilinear_x3_3x5", 1, op_bilinear, &f, 1e-5);
    f = 4;
    run_case("bilinear_x4_5x3", 1, op_bilinear, &f, 1e-5);
    f = 3;
    run_case("bilinear_x3_1x4", 1, op_bilinear, &f, 1e-5);
    run_case("bilinear_x3_33x47", 1, op_bilinear, &f, 1e-5);
}

/* MMEditing's flow_warp normalises the coordinate into [-1, 1] and
 * grid_sample unnormalises it, in float32: a few ulps of the coordinate
 * apart from duet's direct j + flow, hence 1e-4. */
static void test_video(void **state) {
    (void)state;
    int k2[2] = {2, 2}, k3[2] = {3, 2};
    run_case("avg_pool_k2s2", 1, op_avg_pool, k2, 1e-5);
    run_case("avg_pool_k3s2", 1, op_avg_pool, k3, 1e-5);
    duet_flow_padding zeros = DUET_FLOW_PAD_ZEROS, border = DUET_FLOW_PAD_BORDER;
    run_case("flow_warp_zeros", 2, op_flow_warp, &zeros, 1e-4);
    run_case("flow_warp_border", 2, op_flow_warp, &border, 1e-4);
}

static void test_shape(void **state) {
    (void)state;
    run_case("flatten", 1, op_flatten, NULL, 0.0);
    run_case("reshape", 1, op_reshape, NULL, 0.0);
    run_case("concat", 3, op_concat, NULL, 0.0);
}

static void test_reductions(void **state) {
    (void)state;
    run_case("sum", 1, op_sum, NULL, 1e-5);
    run_case("mean", 1, op_mean, NULL, 1e-5);
}

static void test_losses(void **state) {
    (void)state;
    float w = 0.5f;
    run_case("l1", 2, op_l1, &w, 1e-5);
    w = 2.0f;
    run_case("mse", 2, op_mse, &w, 1e-5);
    w = 0.7f;
    run_case("bce", 2, op_bce, &w, 1e-5);
    w = 1.0f;
    run_case("bce_big", 2, op_bce, &w, 1e-5);
    bce_const_args a1 = {1.0f, 1.3f}, a0 = {0.0f, 1.3f};
    run_case("bce_const_1", 1, op_bce_const, &a1, 1e-5);
    run_case("bce_const_0", 1, op_bce_const, &a0, 1e-5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations),   cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_pixel_shuffle), cmocka_unit_test(test_bilinear),
        cmocka_unit_test(test_shape),         cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_losses),        cmocka_unit_test(test_video),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
