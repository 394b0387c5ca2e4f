/* Optimizers and LR schedules against PyTorch (tests/ref/ref_nn.py ->
 * nn.safetensors): torch.optim.Adam and SGD over six steps with the same
 * starting values and gradients (including steps where a parameter has no
 * gradient), compared after every step; Step and CosineRestart lr values
 * by iteration. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

enum { STEPS = 6, NPARAM = 2 };

static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("nn.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

static void run_case(const char *name, bool adam) {
    char key[128];
    snprintf(key, sizeof key, "%s.hparams", name);
    duet_tensor *hp = tu_ref_tensor(ref, key);
    duet_tensor *p[NPARAM];
    duet_named_tensor items[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        snprintf(key, sizeof key, "%s.p%d.init", name, i);
        p[i] = tu_ref_tensor(ref, key);
        p[i]->requires_grad = true;
        items[i] = (duet_named_tensor){.name = i ? "p1" : "p0", .tensor = p[i]};
    }
    duet_named_tensors list = {NPARAM, items};
    duet_optimizer *opt = NULL;
    if (adam) {
        duet_adam_opts o = {.lr = hp->data[0], .beta1 = hp->data[1], .beta2 = hp->data[2],
                            .eps = hp->data[3], .weight_decay = hp->data[4]};
        TU_OK(duet_adam_create(&list, &o, &opt));
    } else {
        duet_sgd_opts o = {.lr = hp->data[0], .momentum = hp->data[1], .dampening = hp->data[2],
                           .weight_decay = hp->data[3], .nesterov = hp->data[4] != 0.0f};
        TU_OK(duet_sgd_create(&list, &o, &opt));
    }
    for (int k = 1; k <= STEPS; k++) {
        for (int i = 0; i < NPARAM; i++) {
            snprintf(key, sizeof key, "%s.p%d.grad.s%d", name, i, k);
            if (duet_st_has(ref, key)) {
                p[i]->requires_grad = true;
                TU_OK(duet_tensor_ensure_grad(p[i]));
                duet_tensor *g = tu_ref_tensor(ref, key);
                memcpy(p[i]->grad, g->data, (size_t)g->numel * sizeof(float));
                duet_tensor_release(g);
            } else if (p[i]->grad != NULL) {
                /* PyTorch's grad None after an earlier step: duet skips a
                 * parameter that is frozen for this step. */
                p[i]->requires_grad = false;
            }
        }
        TU_OK(duet_optimizer_step(opt));
        for (int i = 0; i < NPARAM; i++) {
            snprintf(key, sizeof key, "%s.p%d.after.s%d", name, i, k);
            tu_assert_ref(ref, key, p[i]->data, p[i]->numel, 1e-5, 1e-7);
        }
    }
    duet_optimizer_destroy(opt);
    for (int i = 0; i < NPARAM; i++) duet_tensor_release(p[i]);
    duet_tensor_release(hp);
}

static void test_adam_default(void **state) {
    (void)state;
    run_case("adam_a", true);
}

static void test_adam_betas_eps_weight_decay_missing_grads(void **state) {
    (void)state;
    run_case("adam_b", true);
}

static void test_sgd_momentum_dampening_weight_decay(void **state) {
    (void)state;
    run_case("sgd_a", false);
}

static void test_sgd_nesterov(void **state) {
    (void)state;
    run_case("sgd_b", false);
}

static void test_sgd_plain(void **state) {
    (void)state;
    run_case("sgd_c", false);
}

static void check_schedule(const duet_lr_schedule *s, const char *key) {
    duet_tensor *want = tu_ref_tensor(ref, key);
    float *got = malloc((size_t)want->numel * sizeof(float));
    assert_non_null(got);
    for (int64_t it = 0; it < want->numel; it++) got[it] = duet_lr_at(s, 1.0f, it);
    tu_assert_close(got, want->data, want->numel, 1e-6, 1e-7, key);
    free(got);
    duet_tensor_release(want);
}

static void test_step_schedule(void **state) {
    (void)state;
    duet_tensor *ms = tu_ref_tensor(ref, "sched_step.milestones");
    duet_tensor *gamma = tu_ref_tensor(ref, "sched_step.gamma");
    duet_lr_schedule s = duet_lr_schedule_default();
    s.policy = DUET_LR_STEP;
    s.nsteps = (int)ms->numel;
    for (int i = 0; i < s.nsteps; i++) s.steps[i] = (int64_t)ms->data[i];
    s.gamma = gamma->data[0];
    TU_OK(duet_lr_schedule_check(&s));
    check_schedule(&s, "sched_step.lr");
    duet_tensor_release(ms);
    duet_tensor_release(gamma);
}

static void test_cosine_restart_schedule(void **state) {
    (void)state;
    duet_tensor *periods = tu_ref_tensor(ref, "sched_cos.periods");
    duet_tensor *weights = tu_ref_tensor(ref, "sched_cos.weights");
    duet_tensor *min_lr = tu_ref_tensor(ref, "sched_cos.min_lr");
    duet_lr_schedule s = duet_lr_schedule_default();
    s.policy = DUET_LR_COSINE_RESTART;
    s.nsteps = (int)periods->numel;
    for (int i = 0; i < s.nsteps; i++) {
        s.steps[i] = (int64_t)periods->data[i];
        s.restart_weights[i] = weights->data[i];
    }
    s.min_lr = min_lr->data[0];
    TU_OK(duet_lr_schedule_check(&s));
    check_schedule(&s, "sched_cos.lr");
    duet_tensor_release(periods);
    duet_tensor_release(weights);
    duet_tensor_release(min_lr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_default),
        cmocka_unit_test(test_adam_betas_eps_weight_decay_missing_grads),
        cmocka_unit_test(test_sgd_momentum_dampening_weight_decay),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_step_schedule),
        cmocka_unit_test(test_cosine_restart_schedule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
