/* The moving average of a network (MMEditing's ExponentialMovingAverageHook
 * lerp) against a hand computation, and generator_ema standing in for the
 * generator in forward and val_step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "duet/duet.h"
#include "testutil.h"

/* conv (trainable), a frozen linear, a BatchNorm's buffers. */
static duet_module *net(uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *seq = NULL, *c = NULL, *l = NULL, *bn = NULL;
    TU_OK(duet_sequential_create(&seq));
    TU_OK(duet_conv2d_module_create(2, 3, 3, 1, 1, true, &rng, &c));
    TU_OK(duet_sequential_append(seq, c));
    TU_OK(duet_batch_norm2d_module_create(3, 1e-5f, 0.1f, &bn));
    TU_OK(duet_sequential_append(seq, bn));
    TU_OK(duet_linear_module_create(4, 2, true, &rng, &l));
    duet_module_set_requires_grad(l, false);
    TU_OK(duet_sequential_append(seq, l));
    /* Buffers away from their init, so that a copy shows. */
    duet_tensor *rm = duet_module_buffer(bn, "running_mean");
    for (int64_t i = 0; i < rm->numel; i++) rm->data[i] = duet_rng_uniform(&rng);
    return seq;
}

static void test_lerp_by_hand(void **state) {
    (void)state;
    duet_module *g = net(1), *ema = net(2);
    duet_named_tensors gs = {0}, es = {0}, before = {0};
    TU_OK(duet_module_state(g, &gs));
    TU_OK(duet_module_state(ema, &es));
    /* The EMA's values before the update, copied. */
    float *old[16];
    assert_true(es.count <= 16);
    for (size_t i = 0; i < es.count; i++) {
        old[i] = malloc(sizeof(float) * (size_t)es.items[i].tensor->numel);
        memcpy(old[i], es.items[i].tensor->data, sizeof(float) * (size_t)es.items[i].tensor->numel);
    }
    TU_OK(duet_ema_update(ema, g, 0.999f, 0.25f));
    int checked_trainable = 0, checked_other = 0;
    for (size_t i = 0; i < gs.count; i++) {
        const duet_tensor *a = gs.items[i].tensor, *b = es.items[i].tensor;
        /* a + (b - a) * m: m = 0.999 for conv (trainable), 0.25 for the
         * frozen linear and the BatchNorm buffers. */
        float m = a->requires_grad ? 0.999f : 0.25f;
        for (int64_t k = 0; k < a->numel; k++) {
            float want = a->data[k] + (old[i][k] - a->data[k]) * m;
            if (b->data[k] != want)
                fail_msg("%s[%lld]: %.9g, want %.9g", gs.items[i].name, (long long)k,
                         b->data[k], want);
        }
        if (a->requires_grad) checked_trainable++;
        else checked_other++;
    }
    assert_int_equal(checked_trainable, 4);  /* conv and BN weight, bias */
    assert_true(checked_other >= 4);         /* frozen linear, BN buffers */
    /* momentum_nontrainable 0 copies (MMEditing's default). */
    TU_OK(duet_ema_update(ema, g, 0.5f, 0.0f));
    TU_OK(duet_module_state(ema, &before));
    for (size_t i = 0; i < gs.count; i++)
        if (!gs.items[i].tensor->requires_grad)
            assert_memory_equal(before.items[i].tensor->data, gs.items[i].tensor->data,
                                sizeof(float) * (size_t)gs.items[i].tensor->numel);
    for (size_t i = 0; i < es.count; i++) free(old[i]);
    duet_named_tensors_clear(&gs);
    duet_named_tensors_clear(&es);
    duet_named_tensors_clear(&before);
    /* Different networks: an error naming the entry. */
    duet_module *other = NULL;
    duet_rng rng = duet_rng_make(3, 0);
    TU_OK(duet_conv2d_module_create(2, 3, 3, 1, 1, true, &rng, &other));
    tu_expect_error(duet_ema_update(other, g, 0.9f, 0.0f), DUET_ESHAPE, "EMA", NULL);
    duet_module_destroy(other);
    duet_module_destroy(g);
    duet_module_destroy(ema);
}

/* ---- generator_ema in forward and val_step -------------------------------------------- */

static int scale_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    (void)nin;
    return duet_scale(in[0], *(float *)duet_module_impl(self), out);
}
static const duet_module_type scale_type = {"Scale", scale_forward, free};

static duet_module *scaler(float f) {
    float *impl = malloc(sizeof *impl);
    *impl = f;
    duet_module *m = NULL;
    TU_OK(duet_module_create(&scale_type, impl, &m));
    return m;
}

static int gen_forward(duet_model *m, duet_tensor *x, duet_tensor **out) {
    return duet_module_forward(duet_model_part(m, "generator"), x, out);
}

/* val_step reaches the generator through the nested forward dispatcher. */
static int gen_val_step(duet_model *m, const duet_batch *b, duet_val_output *out) {
    duet_tensor *x = NULL;
    DUET_TRY(duet_batch_require(b, "lq", &x));
    out->nsamples = x->shape[0];
    return duet_model_forward(m, x, &out->output);
}

static const duet_model_ops gen_ops = {
    .name = "Gen", .forward = gen_forward, .val_step = gen_val_step};
static const duet_module_type gen_root = {"Gen", NULL, NULL};

static void test_ema_part_used_for_test(void **state) {
    (void)state;
    duet_module *root = NULL;
    TU_OK(duet_module_create(&gen_root, NULL, &root));
    duet_module *g = scaler(1.0f), *ge = scaler(2.0f);
    TU_OK(duet_module_add_child(root, "generator", g));
    TU_OK(duet_module_add_child(root, "generator_ema", ge));
    duet_model *m = NULL;
    TU_OK(duet_model_create(&gen_ops, NULL, root, &m));
    duet_tensor *x = tu_zeros(2, (int64_t[]){1, 3}), *y = NULL;
    x->data[0] = 1.5f;
    TU_OK(duet_model_forward(m, x, &y));
    assert_true(y->data[0] == 3.0f); /* the EMA's output */
    duet_tensor_release(y);
    duet_batch b = {0};
    TU_OK(duet_batch_add_tensor(&b, "lq", x));
    duet_val_output vo = {0};
    TU_OK(duet_model_val_step(m, &b, &vo));
    assert_true(vo.output->data[0] == 3.0f);
    duet_val_output_clear(&vo);
    /* The parts are back in their places after each call. */
    assert_ptr_equal(duet_model_part(m, "generator"), g);
    assert_ptr_equal(duet_model_part(m, "generator_ema"), ge);
    duet_batch_clear(&b);
    duet_tensor_release(x);
    duet_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lerp_by_hand),
        cmocka_unit_test(test_ema_part_used_for_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
