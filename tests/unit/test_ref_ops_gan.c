/* The image-to-image GAN ops against PyTorch (tests/ref/ref_ops_gan.py ->
 * ops_gan.safetensors): conv_transpose2d, instance_norm2d, reflection_pad2d
 * and dropout, output and gradient of sum(out * r) for every differentiable
 * input, to 1e-4 relative or tighter (exact for the pure rearrangements).
 * Dropout's reference is F.dropout's formula on the mask that duet's RNG,
 * replayed in Python, draws: the test also proves the replay and the C
 * generator agree. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>


static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("ops_gan.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}


static void run_case(const char *name, int n, tu_ref_op op, void *ctx, double rtol,
                     double atol) {
    tu_ref_run_case(ref, name, n, op, ctx, rtol, atol);
}

/* ---- conv_transpose2d --------------------------------------------------------- */

typedef struct tconv_args {
    int stride, pad, out_pad;
    bool bias;
} tconv_args;

static int op_tconv(void *c, duet_tensor *const *in, duet_tensor **out) {
    const tconv_args *a = c;
    return duet_conv_transpose2d(in[0], in[1], a->bias ? in[2] : NULL, a->stride, a->pad,
                                 a->out_pad, out);
}

static void test_conv_transpose2d(void **state) {
    (void)state;
    /* Constants as TCONV in ref_ops_gan.py. */
    static const struct {
        const char *name;
        tconv_args a;
    } cases[] = {
        {"tconv_unet", {2, 1, 0, true}},
        {"tconv_resnet", {2, 1, 1, true}},
        {"tconv_s1_nobias", {1, 0, 0, false}},
        {"tconv_s3_p2_op2", {3, 2, 2, true}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tconv_args a = cases[i].a;
        run_case(cases[i].name, a.bias ? 3 : 2, op_tconv, &a, 1e-4, 1e-5);
    }
}

/* ---- instance_norm2d ------------------------------------------------------------ */

static int op_inorm_affine(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_instance_norm2d(in[0], in[1], in[2], 1e-5f, out);
}

static int op_inorm_plain(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_instance_norm2d(in[0], NULL, NULL, *(const float *)c, out);
}

static void test_instance_norm2d(void **state) {
    (void)state;
    run_case("inorm_affine", 3, op_inorm_affine, NULL, 1e-4, 1e-5);
    float eps = 1e-5f;
    run_case("inorm_plain", 1, op_inorm_plain, &eps, 1e-4, 1e-5);
    eps = 1e-1f;
    run_case("inorm_eps", 1, op_inorm_plain, &eps, 1e-4, 1e-5);
}

/* ---- reflection_pad2d ---------------------------------------------------------- */

static int op_pad(void *c, duet_tensor *const *in, duet_tensor **out) {
    const int *p = c; /* left, right, top, bottom */
    return duet_reflection_pad2d(in[0], p[0], p[1], p[2], p[3], out);
}

static void test_reflection_pad2d(void **state) {
    (void)state;
    int p3[4] = {3, 3, 3, 3}, asym[4] = {1, 2, 0, 3};
    run_case("pad_3", 1, op_pad, p3, 0.0, 1e-6);
    run_case("pad_asym", 1, op_pad, asym, 0.0, 1e-6);
}

/* ---- dropout --------------------------------------------------------------------- */

typedef struct dropout_args {
    float p;
    duet_rng rng;
} dropout_args;

static int op_dropout(void *c, duet_tensor *const *in, duet_tensor **out) {
    dropout_args *a = c;
    return duet_dropout(in[0], a->p, true, &a->rng, out);
}

static void test_dropout(void **state) {
    (void)state;
    /* p, seed, stream, counter as DROPOUT in ref_ops_gan.py. */
    static const struct {
        const char *name;
        float p;
        uint64_t seed, stream, counter;
    } cases[] = {
        {"dropout_p05", 0.5f, 7, 0, 0},
        {"dropout_p02", 0.2f, 11, 3, 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dropout_args a = {cases[i].p, duet_rng_make(cases[i].seed, cases[i].stream)};
        a.rng.counter = cases[i].counter;
        run_case(cases[i].name, 1, op_dropout, &a, 0.0, 0.0);
        /* One draw per element. */
        char key[64];
        snprintf(key, sizeof key, "%s.factor", cases[i].name);
        duet_tensor *f = tu_ref_tensor(ref, key);
        assert_int_equal(a.rng.counter, cases[i].counter + (uint64_t)f->numel);
        duet_tensor_release(f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_transpose2d),
        cmocka_unit_test(test_instance_norm2d),
        cmocka_unit_test(test_reflection_pad2d),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
