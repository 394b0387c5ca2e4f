/* WGAN-GP's gradient penalty and a DeepFillv1-style discriminator step
 * against PyTorch (tests/ref/ref_gradient_penalty.py): autograd.grad with
 * create_graph through conv5x5/s2 + ELU twice, linear and LeakyReLU, the
 * penalty with and without a mask, the WGAN and DiscShiftLoss terms, and
 * one backward through all of it: the values and the gradients of every
 * parameter and of the inputs real, fake and interp. The reference is
 * MMEditing's own GradientPenaltyLoss and DiscShiftLoss where the mmedit
 * venv exists (the file's "mmedit" entry says which). */
#include "testutil.h"
#include "testutil_gan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("gradient_penalty.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

#define RTOL 1e-4
#define ATOL 1e-5

static void load_params(duet_module *disc) {
    duet_named_tensors ps = {0};
    TU_OK(duet_module_named_parameters(disc, true, &ps));
    assert_int_equal(ps.count, 6);
    for (size_t i = 0; i < ps.count; i++) {
        char key[128];
        snprintf(key, sizeof key, "init.%s", ps.items[i].name);
        duet_tensor *t = tu_ref_tensor(ref, key);
        assert_int_equal(t->numel, ps.items[i].tensor->numel);
        memcpy(ps.items[i].tensor->data, t->data, (size_t)t->numel * sizeof(float));
        duet_tensor_zero_grad(ps.items[i].tensor);
        duet_tensor_release(t);
    }
    duet_named_tensors_clear(&ps);
}

static void run_case(const char *name, bool masked) {
    duet_rng rng = duet_rng_make(3, 0);
    duet_module *disc = NULL, *shift = NULL;
    tu_tiny_deepfill_disc(&rng, &disc);
    load_params(disc);
    TU_OK(duet_disc_shift_loss_module_create(0.001f, &shift));
    duet_tensor *real = tu_ref_tensor(ref, "real"), *fake = tu_ref_tensor(ref, "fake");
    char key[128];
    snprintf(key, sizeof key, "%s.alpha", name);
    duet_tensor *mask = tu_ref_tensor(ref, "mask"), *alpha = tu_ref_tensor(ref, key);
    real->requires_grad = true;
    fake->requires_grad = true;
    duet_tensor *pen = NULL, *interp = NULL, *pr = NULL, *pf = NULL, *lr = NULL, *lf = NULL,
                *ls = NULL, *t1 = NULL, *t2 = NULL, *total = NULL;
    TU_OK(duet_gradient_penalty_loss_alpha(disc, real, fake, masked ? mask : NULL, 10.0f,
                                           alpha->data, &interp, &pen));
    /* MMEditing's order in DeepFillv1's train_step: the WGAN terms, the
     * penalty, the shift loss on the real prediction. */
    TU_OK(duet_module_forward(disc, real, &pr));
    TU_OK(duet_module_forward(disc, fake, &pf));
    TU_OK(duet_mean(pr, &lr));
    TU_OK(duet_scale(lr, -1.0f, &t1));
    TU_OK(duet_mean(pf, &lf));
    TU_OK(duet_add(t1, lf, &t2));
    duet_tensor_release(t1);
    TU_OK(duet_add(t2, pen, &t1));
    TU_OK(duet_module_forward(shift, pr, &ls));
    TU_OK(duet_add(t1, ls, &total));
    snprintf(key, sizeof key, "%s.penalty", name);
    tu_assert_ref(ref, key, pen->data, 1, RTOL, ATOL);
    snprintf(key, sizeof key, "%s.total", name);
    tu_assert_ref(ref, key, total->data, 1, RTOL, ATOL);
    TU_OK(duet_backward(total));
    duet_named_tensors ps = {0};
    TU_OK(duet_module_named_parameters(disc, true, &ps));
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        assert_non_null(ps.items[i].tensor->grad);
        tu_assert_ref(ref, key, ps.items[i].tensor->grad, ps.items[i].tensor->numel, 1e-3,
                      1e-4);
    }
    duet_named_tensors_clear(&ps);
    duet_tensor *ins[] = {real, fake, interp};
    const char *const in_names[] = {"real", "fake", "interp"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s.grad_input.%s", name, in_names[i]);
        assert_non_null(ins[i]->grad);
        tu_assert_ref(ref, key, ins[i]->grad, ins[i]->numel, 1e-3, 1e-4);
    }
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *ts[] = {real, fake, mask, alpha, pen, interp, pr, pf, lr, lf, ls, t1, t2, total};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(shift);
    duet_module_destroy(disc);
}

static void test_penalty_nomask(void **state) {
    (void)state;
    run_case("nomask", false);
}

static void test_penalty_mask(void **state) {
    (void)state;
    run_case("mask", true);
}

/* The registry's rows: MMEditing's keys and defaults (DiscShiftLoss 0.1),
 * the penalty applied with the configured weight. */
static void test_loss_rows(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "gp = { type = \"GradientPenaltyLoss\"; loss_weight = 10.0; };\n"
        "shift = { type = \"DiscShiftLoss\"; };\n"
        "shift2 = { type = \"DiscShiftLoss\"; loss_weight = 0.001; };\n",
        "<test>", &cfg));
    duet_rng rng = duet_rng_make(6, 0);
    duet_module *gp = NULL, *shift = NULL, *shift2 = NULL, *disc = NULL;
    TU_OK(duet_build_module(cfg, "gp", &rng, &gp));
    TU_OK(duet_build_module(cfg, "shift", &rng, &shift));
    TU_OK(duet_build_module(cfg, "shift2", &rng, &shift2));
    TU_OK(duet_config_check_unused(cfg));
    tu_tiny_deepfill_disc(&rng, &disc);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 8, 8}, 1.0f);
    duet_tensor *y = tu_randn(&rng, 4, (int64_t[]){2, 3, 8, 8}, 1.0f);
    duet_tensor *s1 = NULL, *s2 = NULL, *p1 = NULL, *p2 = NULL;
    TU_OK(duet_module_forward(shift, x, &s1));
    TU_OK(duet_module_forward(shift2, x, &s2));
    double sq = 0.0;
    for (int64_t i = 0; i < x->numel; i++) sq += (double)x->data[i] * x->data[i];
    sq /= (double)x->numel;
    assert_true(fabs(s1->data[0] - 0.1 * sq) < 1e-5 * sq);
    assert_true(fabs(s2->data[0] - 0.001 * sq) < 1e-7 * sq);
    duet_rng a = duet_rng_make(9, 0), b = duet_rng_make(9, 0);
    TU_OK(duet_gradient_penalty_apply(gp, disc, x, y, NULL, &a, &p1));
    TU_OK(duet_gradient_penalty_loss(disc, x, y, NULL, 10.0f, &b, &p2));
    assert_float_equal(p1->data[0], p2->data[0], 0.0f);
    assert_true(p1->data[0] > 0.0f);
    duet_tensor *junk = NULL;
    tu_expect_error(duet_module_forward(gp, x, &junk), DUET_EINVAL, "duet_gradient_penalty_apply",
                    NULL);
    tu_expect_error(duet_gradient_penalty_apply(shift, disc, x, y, NULL, &a, &junk), DUET_EINVAL,
                    "DiscShiftLoss, not a GradientPenaltyLoss", NULL);
    duet_tape_clear();
    duet_tensor *ts[] = {x, y, s1, s2, p1, p2};
    for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    duet_module *ms[] = {gp, shift, shift2, disc};
    for (int i = 0; i < 4; i++) duet_module_destroy(ms[i]);
    duet_config_destroy(cfg);
}

/* Bad inputs name what is wrong. */
static void test_penalty_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    duet_module *disc = NULL;
    tu_tiny_deepfill_disc(&rng, &disc);
    duet_tensor *real = tu_randn(&rng, 4, (int64_t[]){2, 3, 8, 8}, 1.0f);
    duet_tensor *fake = tu_randn(&rng, 4, (int64_t[]){2, 3, 8, 7}, 1.0f);
    duet_tensor *mask = tu_zeros(4, (int64_t[]){2, 2, 8, 8}), *out = NULL;
    tu_expect_error(duet_gradient_penalty_loss(disc, real, fake, NULL, 1.0f, &rng, &out),
                    DUET_ESHAPE, "GradientPenaltyLoss", "[2, 3, 8, 7]", NULL);
    tu_expect_error(duet_gradient_penalty_loss(disc, real, real, mask, 1.0f, &rng, &out),
                    DUET_ESHAPE, "mask [2, 2, 8, 8]", NULL);
    assert_null(out);
    duet_tape_clear();
    duet_tensor *ts[] = {real, fake, mask};
    for (int i = 0; i < 3; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(disc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalty_nomask),
        cmocka_unit_test(test_penalty_mask),
        cmocka_unit_test(test_penalty_errors),
        cmocka_unit_test(test_loss_rows),
    };
    return tu_exit(cmocka_run_group_tests(tests, setup, teardown));
}
