/* Optimizers and LR schedules against hand-computed values: Adam (bias
 * correction, eps, L2 weight decay, skipped parameters), SGD (momentum,
 * dampening, Nesterov, weight decay), state save/load with bit-identical
 * continuation, and the Step / CosineRestart schedules at their edges. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One parameter "p" of n values with a gradient of n values. */
typedef struct one_param {
    duet_tensor *t;
    duet_named_tensors list;
    duet_named_tensor item;
} one_param;

static void one_param_init(one_param *o, int64_t n, const float *values, const float *grad) {
    TU_OK(duet_tensor_from_data(1, (int64_t[]){n}, values, &o->t));
    o->t->requires_grad = true;
    if (grad != NULL) {
        TU_OK(duet_tensor_ensure_grad(o->t));
        memcpy(o->t->grad, grad, (size_t)n * sizeof(float));
    }
    o->item = (duet_named_tensor){.name = "p", .tensor = o->t, .is_integer = false};
    o->list = (duet_named_tensors){.count = 1, .items = &o->item};
}

static void assert_values(const duet_tensor *t, const float *want, double tol, const char *what) {
    tu_assert_close(t->data, want, t->numel, 0.0, tol, what);
}

static void test_adam_constant_gradient(void **state) {
    (void)state;
    /* With a constant gradient the bias-corrected moments are exactly g and
     * g^2, so each step moves lr * g / (|g| + eps): lr * sign(g). */
    one_param o;
    one_param_init(&o, 3, (float[]){1.0f, -2.0f, 0.5f}, (float[]){0.5f, -1.0f, 0.0f});
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 0.1f;
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&o.list, &a, &opt));
    assert_true(duet_optimizer_lr(opt) == 0.1f);
    TU_OK(duet_optimizer_step(opt));
    assert_values(o.t, (float[]){0.9f, -1.9f, 0.5f}, 1e-6, "adam step 1");
    TU_OK(duet_optimizer_step(opt));
    assert_values(o.t, (float[]){0.8f, -1.8f, 0.5f}, 1e-6, "adam step 2");
    TU_OK(duet_optimizer_step(opt));
    assert_values(o.t, (float[]){0.7f, -1.7f, 0.5f}, 1e-6, "adam step 3");
    assert_int_equal(duet_optimizer_steps(opt), 3);
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);
}

static void test_adam_eps_and_weight_decay(void **state) {
    (void)state;
    /* eps is added after sqrt(v_hat): a gradient of 1e-8 moves lr * 1e-8 /
     * (1e-8 + 1e-8) = lr / 2 (with eps inside the sqrt it would be ~lr). */
    one_param o;
    one_param_init(&o, 1, (float[]){0.0f}, (float[]){1e-8f});
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 0.1f;
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&o.list, &a, &opt));
    TU_OK(duet_optimizer_step(opt));
    assert_values(o.t, (float[]){-0.05f}, 1e-6, "adam eps");
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);

    /* L2 weight decay is added to the gradient (Adam, not AdamW): with a
     * zero gradient, p = 1 and wd 0.5 the effective gradient is 0.5 and the
     * first step moves by lr. AdamW would give 1 - lr * wd = 0.95. */
    one_param_init(&o, 1, (float[]){1.0f}, (float[]){0.0f});
    a.weight_decay = 0.5f;
    TU_OK(duet_adam_create(&o.list, &a, &opt));
    TU_OK(duet_optimizer_step(opt));
    assert_values(o.t, (float[]){0.9f}, 1e-6, "adam weight decay");
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);
}

/* Double-precision Adam, written from the formulas, for varying gradients. */
static void adam_ref(double *p, double *m, double *v, const double *g, int n, int step, double lr,
                     double b1, double b2, double eps, double wd) {
    double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
    for (int j = 0; j < n; j++) {
        double gj = g[j] + wd * p[j];
        m[j] = b1 * m[j] + (1 - b1) * gj;
        v[j] = b2 * v[j] + (1 - b2) * gj * gj;
        p[j] -= lr * (m[j] / bc1) / (sqrt(v[j] / bc2) + eps);
    }
}

static void test_adam_varying_gradients(void **state) {
    (void)state;
    enum { N = 6, STEPS = 7 };
    duet_rng rng = duet_rng_make(5, 0);
    float p0[N];
    double p[N], m[N] = {0}, v[N] = {0}, g[N];
    for (int j = 0; j < N; j++) p[j] = p0[j] = duet_rng_normal(&rng);
    one_param o;
    one_param_init(&o, N, p0, p0);
    duet_adam_opts a = {.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f,
                        .weight_decay = 0.01f};
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&o.list, &a, &opt));
    for (int s = 1; s <= STEPS; s++) {
        for (int j = 0; j < N; j++) {
            o.t->grad[j] = duet_rng_normal(&rng) * (float)s;
            g[j] = o.t->grad[j];
        }
        TU_OK(duet_optimizer_step(opt));
        adam_ref(p, m, v, g, N, s, 0.01f, 0.8f, 0.99f, 1e-6f, 0.01f);
        for (int j = 0; j < N; j++)
            if (fabs(o.t->data[j] - p[j]) > 1e-6)
                fail_msg("step %d element %d: got %.9g, want %.9g", s, j, o.t->data[j], p[j]);
    }
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);
}

static void test_skipped_parameters(void **state) {
    tu_tmpdir *fx = *state;
    duet_tensor *a = NULL, *b = NULL, *c = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){2}, (float[]){1.0f, 1.0f}, &a));
    TU_OK(duet_tensor_from_data(1, (int64_t[]){2}, (float[]){1.0f, 1.0f}, &b));
    TU_OK(duet_tensor_from_data(1, (int64_t[]){2}, (float[]){1.0f, 1.0f}, &c));
    a->requires_grad = b->requires_grad = true;
    TU_OK(duet_tensor_ensure_grad(a));
    TU_OK(duet_tensor_ensure_grad(c)); /* c is frozen but holds an old gradient */
    a->grad[0] = a->grad[1] = 1.0f;
    c->grad[0] = c->grad[1] = 1.0f;
    duet_named_tensor items[3] = {{"a", a, false}, {"b", b, false}, {"c", c, false}};
    duet_named_tensors list = {3, items};
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&list, NULL, &opt));
    TU_OK(duet_optimizer_step(opt));
    assert_true(fabsf(a->data[0] - 0.999f) < 1e-6f);
    assert_true(b->data[0] == 1.0f && c->data[0] == 1.0f);

    /* Their state stays untouched: b's first real step is a first step. */
    TU_OK(duet_tensor_ensure_grad(b));
    b->grad[0] = b->grad[1] = -1.0f;
    TU_OK(duet_optimizer_step(opt));
    assert_true(fabsf(b->data[0] - 1.001f) < 1e-6f);
    assert_true(fabsf(a->data[0] - 0.998f) < 1e-6f);

    char path[512];
    tu_path(path, sizeof path, fx->dir, "skip.safetensors");
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_optimizer_save_state(opt, w, "opt."));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    const char *names[4] = {"opt.step", "opt.a.step", "opt.b.step", "opt.c.step"};
    const int64_t want[4] = {2, 2, 1, 0};
    for (int i = 0; i < 4; i++) {
        const char *dtype;
        const void *bytes;
        size_t nbytes;
        int ndim;
        int64_t shape[DUET_MAX_DIMS], v;
        TU_OK(duet_st_raw(st, names[i], &dtype, &bytes, &nbytes, &ndim, shape));
        assert_string_equal(dtype, "I64");
        memcpy(&v, bytes, sizeof v);
        if (v != want[i]) fail_msg("%s is %lld, want %lld", names[i], (long long)v, (long long)want[i]);
    }
    assert_true(duet_st_has(st, "opt.a.exp_avg"));
    assert_true(duet_st_has(st, "opt.c.exp_avg_sq"));
    duet_st_destroy(st);
    duet_optimizer_destroy(opt);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);
}

static void sgd_case(duet_sgd_opts s, const float *want, int steps, const char *what) {
    one_param o;
    one_param_init(&o, 1, (float[]){1.0f}, (float[]){1.0f});
    duet_optimizer *opt = NULL;
    TU_OK(duet_sgd_create(&o.list, &s, &opt));
    for (int i = 0; i < steps; i++) {
        TU_OK(duet_optimizer_step(opt));
        char label[64];
        snprintf(label, sizeof label, "%s step %d", what, i + 1);
        assert_values(o.t, &want[i], 1e-6, label);
    }
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);
}

static void test_sgd_variants(void **state) {
    (void)state;
    /* p = 1, g = 1 every step, lr 0.1. */
    duet_sgd_opts s = duet_sgd_opts_default();
    s.lr = 0.1f;
    sgd_case(s, (float[]){0.9f, 0.8f}, 2, "plain");
    /* Momentum 0.9: buf 1, 1.9, 2.71 (the first buffer is the gradient). */
    s.momentum = 0.9f;
    sgd_case(s, (float[]){0.9f, 0.71f, 0.439f}, 3, "momentum");
    /* Dampening 0.5 leaves the first buffer alone: buf 1, 0.9 + 0.5 = 1.4. */
    s.dampening = 0.5f;
    sgd_case(s, (float[]){0.9f, 0.76f}, 2, "dampening");
    /* Nesterov: d = g + 0.9 buf = 1.9, then 1 + 0.9 * 1.9 = 2.71. */
    s.dampening = 0.0f;
    s.nesterov = true;
    sgd_case(s, (float[]){0.81f, 0.539f}, 2, "nesterov");
    /* Weight decay 0.1 without momentum: d = 1 + 0.1 p. */
    s = duet_sgd_opts_default();
    s.lr = 0.1f;
    s.weight_decay = 0.1f;
    sgd_case(s, (float[]){0.89f, 0.7811f}, 2, "weight decay");

    one_param o;
    one_param_init(&o, 1, (float[]){1.0f}, NULL);
    duet_optimizer *opt = NULL;
    s = duet_sgd_opts_default();
    s.nesterov = true;
    assert_int_equal(duet_sgd_create(&o.list, &s, &opt), DUET_EINVAL);
    assert_null(opt);
    assert_non_null(strstr(duet_last_error(), "Nesterov"));
    duet_adam_opts a = duet_adam_opts_default();
    a.beta2 = 1.0f;
    assert_int_equal(duet_adam_create(&o.list, &a, &opt), DUET_EINVAL);
    duet_tensor_release(o.t);
}

/* Runs `steps` steps with gradients drawn from rng. */
static void run_steps(duet_optimizer *opt, duet_tensor *const *ps, int np, duet_rng *rng,
                      int steps) {
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < np; i++) {
            TU_OK(duet_tensor_ensure_grad(ps[i]));
            for (int64_t j = 0; j < ps[i]->numel; j++) ps[i]->grad[j] = duet_rng_normal(rng);
        }
        TU_OK(duet_optimizer_step(opt));
    }
}

static void check_resume(bool adam, const char *dir) {
    duet_rng init = duet_rng_make(8, 0);
    duet_tensor *pa[2], *pb[2];
    pa[0] = tu_randn(&init, 2, (int64_t[]){3, 4}, 1.0f);
    pa[1] = tu_randn(&init, 1, (int64_t[]){5}, 1.0f);
    pa[0]->requires_grad = pa[1]->requires_grad = true;
    float first = pa[0]->data[0];
    duet_named_tensor ia[2] = {{"w", pa[0], false}, {"b", pa[1], false}};
    duet_named_tensors la = {2, ia};
    duet_adam_opts ao = duet_adam_opts_default();
    ao.weight_decay = 0.01f;
    duet_sgd_opts so = duet_sgd_opts_default();
    so.lr = 0.05f;
    so.momentum = 0.9f;
    so.dampening = 0.1f;
    duet_optimizer *a = NULL, *b = NULL;
    TU_OK(adam ? duet_adam_create(&la, &ao, &a) : duet_sgd_create(&la, &so, &a));
    duet_rng grads = duet_rng_make(9, 0);
    run_steps(a, pa, 2, &grads, 3);
    assert_true(pa[0]->data[0] != first);
    duet_optimizer_set_lr(a, 3e-4f);

    char path[512];
    tu_path(path, sizeof path, dir, "resume.safetensors");
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_optimizer_save_state(a, w, "optimizers.generator."));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);

    /* A fresh optimizer over copies of the parameters, restored. */
    TU_OK(duet_tensor_clone(pa[0], &pb[0]));
    TU_OK(duet_tensor_clone(pa[1], &pb[1]));
    pb[0]->requires_grad = pb[1]->requires_grad = true;
    duet_named_tensor ib[2] = {{"w", pb[0], false}, {"b", pb[1], false}};
    duet_named_tensors lb = {2, ib};
    TU_OK(adam ? duet_adam_create(&lb, &ao, &b) : duet_sgd_create(&lb, &so, &b));
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    TU_OK(duet_optimizer_load_state(b, st, "optimizers.generator."));
    assert_int_equal(duet_optimizer_steps(b), 3);
    assert_true(duet_optimizer_lr(b) == 3e-4f);
    assert_true(duet_optimizer_base_lr(b) == (adam ? ao.lr : so.lr));

    duet_rng ga = grads, gb = grads;
    run_steps(a, pa, 2, &ga, 4);
    run_steps(b, pb, 2, &gb, 4);
    for (int i = 0; i < 2; i++)
        assert_memory_equal(pa[i]->data, pb[i]->data, (size_t)pa[i]->numel * sizeof(float));

    /* A wrong prefix or another parameter set fails and changes nothing. */
    assert_int_equal(duet_optimizer_load_state(b, st, "optimizers.discriminator."),
                     DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "optimizers.discriminator."));
    if (adam) {
        duet_tensor *wrong = tu_zeros(1, (int64_t[]){7});
        duet_named_tensor iw[2] = {{"w", pb[0], false}, {"b", wrong, false}};
        duet_named_tensors lw = {2, iw};
        duet_optimizer *c = NULL;
        TU_OK(duet_adam_create(&lw, &ao, &c));
        assert_int_equal(duet_optimizer_load_state(c, st, "optimizers.generator."), DUET_ESHAPE);
        assert_int_equal(duet_optimizer_steps(c), 0);
        duet_optimizer_destroy(c);
        duet_tensor_release(wrong);
    }
    duet_st_destroy(st);
    duet_optimizer_destroy(a);
    duet_optimizer_destroy(b);
    for (int i = 0; i < 2; i++) {
        duet_tensor_release(pa[i]);
        duet_tensor_release(pb[i]);
    }
}

static void test_adam_resume_bit_identical(void **state) {
    tu_tmpdir *fx = *state;
    check_resume(true, fx->dir);
}

static void test_sgd_resume_bit_identical(void **state) {
    tu_tmpdir *fx = *state;
    check_resume(false, fx->dir);
}

static void test_zero_grad(void **state) {
    (void)state;
    one_param o;
    one_param_init(&o, 2, (float[]){1.0f, 2.0f}, (float[]){3.0f, 4.0f});
    duet_optimizer *opt = NULL;
    TU_OK(duet_sgd_create(&o.list, NULL, &opt));
    duet_optimizer_zero_grad(opt);
    assert_true(o.t->grad[0] == 0.0f && o.t->grad[1] == 0.0f);
    duet_optimizer_destroy(opt);
    duet_tensor_release(o.t);
}

/* ---- schedules -------------------------------------------------------------- */

static void assert_lr(const duet_lr_schedule *s, int64_t iter, double want) {
    float got = duet_lr_at(s, 1.0f, iter);
    if (fabs(got - want) > 1e-6)
        fail_msg("iteration %lld: lr %.8g, want %.8g", (long long)iter, got, want);
}

static void test_schedule_fixed_and_step(void **state) {
    (void)state;
    duet_lr_schedule s = duet_lr_schedule_default();
    assert_int_equal(s.policy, DUET_LR_FIXED);
    assert_lr(&s, 0, 1.0);
    assert_lr(&s, 1000000, 1.0);

    s.policy = DUET_LR_STEP;
    s.nsteps = 2;
    s.steps[0] = 2;
    s.steps[1] = 5;
    s.gamma = 0.5f;
    TU_OK(duet_lr_schedule_check(&s));
    /* gamma^(number of milestones <= iter). */
    const double want[8] = {1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25};
    for (int i = 0; i < 8; i++) assert_lr(&s, i, want[i]);
    assert_true(duet_lr_at(&s, 2e-4f, 5) == (float)(2e-4f * 0.25));

    s.steps[1] = 1;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "ascending"));
    assert_lr(&s, 7, 1.0); /* an invalid schedule keeps the base lr */
}

static void test_schedule_cosine_restart(void **state) {
    (void)state;
    duet_lr_schedule s = duet_lr_schedule_default();
    s.policy = DUET_LR_COSINE_RESTART;
    s.nsteps = 2;
    s.steps[0] = 4;
    s.steps[1] = 6;
    s.restart_weights[0] = 1.0f;
    s.restart_weights[1] = 0.5f;
    s.min_lr = 0.1f;
    TU_OK(duet_lr_schedule_check(&s));
    /* min + 0.5 * w * (base - min) * (1 + cos(pi * alpha)). */
    assert_lr(&s, 0, 1.0);
    assert_lr(&s, 2, 0.55);
    assert_lr(&s, 3, 0.1 + 0.45 * (1 - sqrt(0.5)));
    /* The restart at 4 starts the second period at w * base + (1-w) * min. */
    assert_lr(&s, 4, 0.55);
    assert_lr(&s, 7, 0.325);
    assert_lr(&s, 9, 0.1 + 0.225 * (1 + cos(M_PI * 5.0 / 6.0)));
    /* Past the last period: min_lr. */
    assert_lr(&s, 10, 0.1);
    assert_lr(&s, 1000, 0.1);

    s.steps[1] = 0;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
    s.nsteps = 0;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
}

/* MMEditing's LinearLrUpdaterHook as CycleGAN's facades config sets it
 * (start 40000, interval 400, total 80000), scaled down by 100: the lr
 * stays at base up to start, then falls in steps of interval. */
static void test_schedule_linear(void **state) {
    (void)state;
    duet_lr_schedule s = duet_lr_schedule_default();
    s.policy = DUET_LR_LINEAR;
    s.target_lr = 0.0f;
    s.start = 400;
    s.interval = 4;
    s.max_iters = 800;
    TU_OK(duet_lr_schedule_check(&s));
    assert_lr(&s, 0, 1.0);
    assert_lr(&s, 400, 1.0);
    assert_lr(&s, 403, 1.0);            /* 3 // 4 = 0 */
    assert_lr(&s, 404, 1.0 - 1.0 / 100); /* (4 // 4) / (400 // 4) */
    assert_lr(&s, 599, 1.0 - 49.0 / 100);
    assert_lr(&s, 799, 1.0 - 99.0 / 100);
    s.target_lr = 0.5f;
    assert_lr(&s, 600, 1.0 - 0.5 * 50.0 / 100);
    /* start == max_iters: the base lr throughout (mmcv's early return). */
    s.start = 800;
    TU_OK(duet_lr_schedule_check(&s));
    assert_lr(&s, 799, 1.0);
    /* An interval longer than the decay is MMEditing's ZeroDivisionError. */
    s.start = 700;
    s.interval = 101;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
    s.interval = 0;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
}

/* mmcv's Step min_lr (a floor) and an int step (every N), CosineRestart's
 * min_lr_ratio, and the three warmups on top of a policy. */
static void test_schedule_floor_ratio_warmup(void **state) {
    (void)state;
    duet_lr_schedule s = duet_lr_schedule_default();
    s.policy = DUET_LR_STEP;
    s.step_every = 3;
    s.gamma = 0.5f;
    s.min_lr = 0.2f;
    TU_OK(duet_lr_schedule_check(&s));
    assert_lr(&s, 2, 1.0);
    assert_lr(&s, 3, 0.5);
    assert_lr(&s, 6, 0.25);
    assert_lr(&s, 9, 0.2); /* 0.125, floored */

    s = duet_lr_schedule_default();
    s.policy = DUET_LR_COSINE_RESTART;
    s.nsteps = 1;
    s.steps[0] = 4;
    s.restart_weights[0] = 1.0f;
    s.min_lr = 0.9f;        /* ignored: the ratio wins */
    s.min_lr_ratio = 0.1f;  /* end = 0.1 * base */
    assert_true(duet_lr_at(&s, 2.0f, 2) == (float)(0.2 + 0.5 * 1.8));
    assert_true(fabsf(duet_lr_at(&s, 2.0f, 4) - 0.2f) < 1e-7f);

    s = duet_lr_schedule_default();
    s.warmup_iters = 4;
    s.warmup_ratio = 0.25f;
    s.warmup = DUET_LR_WARMUP_CONSTANT;
    assert_lr(&s, 0, 0.25);
    assert_lr(&s, 3, 0.25);
    assert_lr(&s, 4, 1.0);
    s.warmup = DUET_LR_WARMUP_LINEAR; /* 1 - (1 - t) * (1 - ratio) */
    assert_lr(&s, 0, 0.25);
    assert_lr(&s, 2, 1.0 - 0.5 * 0.75);
    assert_lr(&s, 4, 1.0);
    s.warmup = DUET_LR_WARMUP_EXP; /* ratio^(1 - t) */
    assert_lr(&s, 0, 0.25);
    assert_lr(&s, 2, 0.5);
    assert_lr(&s, 5, 1.0);
    s.warmup_iters = 0;
    assert_int_equal(duet_lr_schedule_check(&s), DUET_ECONFIG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_constant_gradient),
        cmocka_unit_test(test_adam_eps_and_weight_decay),
        cmocka_unit_test(test_adam_varying_gradients),
        TU_TMPDIR_TEST(test_skipped_parameters),
        cmocka_unit_test(test_sgd_variants),
        TU_TMPDIR_TEST(test_adam_resume_bit_identical),
        TU_TMPDIR_TEST(test_sgd_resume_bit_identical),
        cmocka_unit_test(test_zero_grad),
        cmocka_unit_test(test_schedule_fixed_and_step),
        cmocka_unit_test(test_schedule_cosine_restart),
        cmocka_unit_test(test_schedule_linear),
        cmocka_unit_test(test_schedule_floor_ratio_warmup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
