/* A DDP-wrapped discriminator taking WGAN-GP discriminator steps under
 * mpiexec -n 1, 2, 3: three forwards through the DDP (interp, real, fake),
 * duet_autograd_grad with create_graph (every other step on the wrapped
 * module itself, as DeepFillv1 calls its sub-discriminator), one backward through the penalty's
 * second-order graph and the WGAN terms. Each backward reduces once (the
 * DDP's sync count), the gradients match one process with the full batch,
 * and after 4 Adam steps the parameters match too and stay identical
 * across ranks. Each rank computes the full-batch reference itself. */
#include "testutil.h"
#include "testutil_gan.h"

#include <string.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

enum { B = 6, STEPS = 4 };

/* d total for the batch rows [start, start+n) of the step's data:
 * total = -mean(D(real)) + mean(D(fake)) + 10 * penalty. */
static void disc_step(duet_module *disc, duet_module *gp_disc, uint64_t seed, int64_t start,
                      int64_t n) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_tensor *real_all = tu_randn(&rng, 4, (int64_t[]){B, 3, 8, 8}, 1.0f);
    duet_tensor *fake_all = tu_randn(&rng, 4, (int64_t[]){B, 3, 8, 8}, 1.0f);
    float alpha[B];
    for (int i = 0; i < B; i++) alpha[i] = duet_rng_uniform(&rng);
    duet_tensor *real = tu_slice0(real_all, start, n), *fake = tu_slice0(fake_all, start, n);
    duet_tensor *pen = NULL, *pr = NULL, *pf = NULL, *lr = NULL, *lf = NULL, *a = NULL,
                *b = NULL, *total = NULL;
    TU_OK(duet_gradient_penalty_loss_alpha(gp_disc, real, fake, NULL, 10.0f, alpha + start,
                                           NULL, &pen));
    TU_OK(duet_module_forward(disc, real, &pr));
    TU_OK(duet_module_forward(disc, fake, &pf));
    TU_OK(duet_mean(pr, &lr));
    TU_OK(duet_mean(pf, &lf));
    TU_OK(duet_sub(lf, lr, &a));
    TU_OK(duet_add(a, pen, &b));
    total = b;
    TU_OK(duet_backward(total));
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *ts[] = {real_all, fake_all, real, fake, pen, pr, pf, lr, lf, a, b};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

/* MMEditing's own order in DeepFillv1's train_step: three backwards, the
 * fake term, the real term, then the penalty alone (its own
 * loss_disc.backward()). The penalty's backward reaches the fc bias before
 * the LeakyReLU only through the activation's recorded backward (a zero
 * gradient); without that edge the bias was never ready and the DDP failed
 * the next forward with DUET_EUNUSED naming fc.bias. */
static void disc_step_separate(duet_module *disc, duet_module *gp_disc, uint64_t seed,
                               int64_t start, int64_t n) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_tensor *real_all = tu_randn(&rng, 4, (int64_t[]){B, 3, 8, 8}, 1.0f);
    duet_tensor *fake_all = tu_randn(&rng, 4, (int64_t[]){B, 3, 8, 8}, 1.0f);
    float alpha[B];
    for (int i = 0; i < B; i++) alpha[i] = duet_rng_uniform(&rng);
    duet_tensor *real = tu_slice0(real_all, start, n), *fake = tu_slice0(fake_all, start, n);
    duet_tensor *pf = NULL, *lf = NULL, *pr = NULL, *mr = NULL, *lr = NULL, *pen = NULL;
    TU_OK(duet_module_forward(disc, fake, &pf));
    TU_OK(duet_mean(pf, &lf));
    TU_OK(duet_backward(lf));
    TU_OK(duet_module_forward(disc, real, &pr));
    TU_OK(duet_mean(pr, &mr));
    TU_OK(duet_scale(mr, -1.0f, &lr));
    TU_OK(duet_backward(lr));
    TU_OK(duet_gradient_penalty_loss_alpha(gp_disc, real, fake, NULL, 10.0f, alpha + start,
                                           NULL, &pen));
    TU_OK(duet_backward(pen));
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *ts[] = {real_all, fake_all, real, fake, pf, lf, pr, mr, lr, pen};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static void assert_grads_close(duet_module *got, duet_module *want) {
    duet_named_tensors g = {0}, w = {0};
    TU_OK(duet_module_named_parameters(got, true, &g));
    TU_OK(duet_module_named_parameters(want, true, &w));
    assert_int_equal(g.count, w.count);
    for (size_t i = 0; i < g.count; i++) {
        assert_string_equal(g.items[i].name, w.items[i].name);
        assert_non_null(g.items[i].tensor->grad);
        tu_assert_close(g.items[i].tensor->grad, w.items[i].tensor->grad,
                        g.items[i].tensor->numel, 1e-4, 1e-6, g.items[i].name);
    }
    duet_named_tensors_clear(&g);
    duet_named_tensors_clear(&w);
}

static void test_penalty_step_matches_full_batch(void **state) {
    (void)state;
    if (B % tu_size != 0) tu_skip("batch %d does not split over %d ranks", B, tu_size);
    duet_rng r1 = duet_rng_make(5, 0), r2 = duet_rng_make(5 + 1000 * (uint64_t)tu_rank, 0);
    duet_module *ref = NULL, *net = NULL;
    tu_tiny_deepfill_disc(&r1, &ref);
    tu_tiny_deepfill_disc(&r2, &net); /* rank 0's replica reaches all through the DDP */
    duet_module *ddp = tu_ddp_of(net, NULL);
    duet_optimizer *oref = tu_adam_for(ref, 1e-2f), *oddp = tu_adam_for(ddp, 1e-2f);
    const int64_t n = B / tu_size;
    for (int s = 0; s < STEPS; s++) {
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        /* Odd steps: the penalty runs the wrapped module itself, as
         * DeepFillv1's train_step calls disc.module.global_disc, while the
         * WGAN terms go through the DDP (which arms it). */
        duet_module *inner = duet_module_child(ddp, "module");
        assert_non_null(inner);
        disc_step(ref, ref, 100 + (uint64_t)s, 0, B);
        disc_step(ddp, s % 2 ? inner : ddp, 100 + (uint64_t)s, tu_rank * n, n);
        /* One reduction per backward, however many forwards and graphs. */
        assert_int_equal(duet_ddp_get_stats(ddp).syncs, s + 1);
        assert_grads_close(ddp, ref);
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
    }
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    TU_OK(duet_ddp_check_replicas(ddp));
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* Three synchronised backwards per step, the last the penalty's alone. */
static void test_penalty_backward_alone(void **state) {
    (void)state;
    if (B % tu_size != 0) tu_skip("batch %d does not split over %d ranks", B, tu_size);
    duet_rng r1 = duet_rng_make(5, 0), r2 = duet_rng_make(5 + 1000 * (uint64_t)tu_rank, 0);
    duet_module *ref = NULL, *net = NULL;
    tu_tiny_deepfill_disc(&r1, &ref);
    tu_tiny_deepfill_disc(&r2, &net);
    duet_module *ddp = tu_ddp_of(net, NULL);
    duet_optimizer *oref = tu_adam_for(ref, 1e-2f), *oddp = tu_adam_for(ddp, 1e-2f);
    const int64_t n = B / tu_size;
    for (int s = 0; s < STEPS; s++) {
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        disc_step_separate(ref, ref, 100 + (uint64_t)s, 0, B);
        disc_step_separate(ddp, ddp, 100 + (uint64_t)s, tu_rank * n, n);
        assert_int_equal(duet_ddp_get_stats(ddp).syncs, 3 * (s + 1));
        assert_grads_close(ddp, ref);
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
    }
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalty_step_matches_full_batch),
        cmocka_unit_test(test_penalty_backward_alone),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    duet_comm_finalize();
    return tu_exit(failed);
}
