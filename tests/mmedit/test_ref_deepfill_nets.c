/* DeepFillEncoderDecoder (src/models/deepfill.c) against MMEditing's own
 * module (tests/ref/gen_mmedit_refs.py, DeepFillNets ->
 * deepfill_nets.safetensors), for the generator of DeepFillv1's config
 * (conv, reflect, clip) and of DeepFillv2's (gated_conv, reflect, Tanh,
 * channel_factor 0.75) with channels shrunk: MMEditing's state dict loaded
 * strictly by name (so every duet name is MMEditing's), the parameter
 * counts equal, and in training mode both stages' outputs, the attention
 * offsets, the input gradient and every parameter gradient of sum(stage1 *
 * r1) + sum(stage2 * r2) within 1e-4 of each tensor's scale of the float64
 * run, as test_ref_gl_nets.c compares. Runs as the `mmedit` test
 * mmedit_deepfill_nets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define RTOL 1e-4

static duet_st *ref;

static void compare(const char *key, const float *got, int64_t n) {
    tu_ref_compare_scaled(ref, key, got, n, RTOL);
}

static size_t count_prefixed(const char *prefix) { return tu_st_count_prefixed(ref, prefix); }

static void run_case(const char *name, const duet_deepfill_encdec_opts *o) {
    duet_rng init = duet_rng_make(7, 0);
    duet_module *net = NULL;
    TU_OK(duet_deepfill_encdec_create(o, &init, &net));
    char key[256];
    snprintf(key, sizeof key, "%s.sd.", name);
    size_t nmiss = 1, nunexp = 1;
    TU_OK(duet_module_load_state(net, ref, key, true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
    snprintf(key, sizeof key, "%s.nparams", name);
    duet_tensor *np = tu_ref_tensor(ref, key);
    assert_int_equal(duet_module_num_parameters(net, false), (int64_t)np->data[0]);
    duet_tensor_release(np);
    duet_module_train(net, true);

    snprintf(key, sizeof key, "%s.x", name);
    duet_tensor *x = tu_ref_tensor(ref, key), *s1 = NULL, *s2 = NULL, *off = NULL, *y = NULL;
    x->requires_grad = true;
    TU_OK(duet_deepfill_encdec_forward(net, x, &s1, &s2, &off));
    snprintf(key, sizeof key, "%s.stage1", name);
    compare(key, s1->data, s1->numel);
    snprintf(key, sizeof key, "%s.stage2", name);
    compare(key, s2->data, s2->numel);
    snprintf(key, sizeof key, "%s.offset", name);
    compare(key, off->data, off->numel);
    /* the backward through the module's own forward: (stage1, stage2) along
     * the channels, so the cotangent is r1 and r2 side by side per sample */
    TU_OK(duet_concat_channels(2, (duet_tensor *[]){s1, s2}, &y));
    snprintf(key, sizeof key, "%s.r1", name);
    duet_tensor *r1 = tu_ref_tensor(ref, key);
    snprintf(key, sizeof key, "%s.r2", name);
    duet_tensor *r2 = tu_ref_tensor(ref, key), *r = NULL;
    TU_OK(duet_concat_channels(2, (duet_tensor *[]){r1, r2}, &r));
    assert_int_equal(r->numel, y->numel);
    tu_backprop_with(y, r->data);

    snprintf(key, sizeof key, "%s.grad.x", name);
    compare(key, x->grad, x->numel);
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    snprintf(key, sizeof key, "%s.grad.", name);
    assert_int_equal(count_prefixed(key), ps.count + 1);
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", key);
        compare(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&ps);

    /* The module's forward (what a DDP runs) is the two outputs side by side. */
    bool prev = duet_set_grad_enabled(false);
    duet_tensor *both = NULL;
    TU_OK(duet_module_forward(net, x, &both));
    duet_set_grad_enabled(prev);
    assert_int_equal(both->numel, y->numel);
    assert_memory_equal(both->data, y->data, (size_t)y->numel * sizeof(float));
    duet_tensor *ts[] = {x, s1, s2, off, y, r1, r2, r, both};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(net);
}

/* deepfillv1_256x256_8x2_places.py's encdec, channels x 0.25. */
static void test_deepfillv1(void **state) {
    (void)state;
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    duet_deepfill_encoder_opts *encs[3] = {&o.encoder, &o.stage2.encoder_attention,
                                           &o.stage2.encoder_conv};
    for (int i = 0; i < 3; i++) encs[i]->channel_factor = 0.25, encs[i]->reflect = true;
    o.decoder.channel_factor = o.stage2.decoder.channel_factor = 0.25;
    o.decoder.in_channels = 32, o.stage2.decoder.in_channels = 64;
    o.dilation_neck.in_channels = o.stage2.dilation_neck.in_channels = 32;
    o.stage2.contextual_attention.in_channels = 32;
    o.decoder.reflect = o.stage2.decoder.reflect = true;
    o.dilation_neck.reflect = o.stage2.dilation_neck.reflect = true;
    o.stage2.contextual_attention.reflect = true;
    run_case("deepfillv1", &o);
}

/* deepfillv2_256x256_8x2_places.py's encdec, channels x 1/3: the encoders'
 * and stage 1 decoder's channel_factor 0.75 / 3, the refiner's decoder's
 * 1 / 3 (int() truncates: 42, 42, 21, 21, 10, 5). */
static void test_deepfillv2(void **state) {
    (void)state;
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    duet_deepfill_encoder_opts *encs[3] = {&o.encoder, &o.stage2.encoder_attention,
                                           &o.stage2.encoder_conv};
    for (int i = 0; i < 3; i++)
        encs[i]->channel_factor = 0.75 * (1.0 / 3), encs[i]->reflect = encs[i]->gated = true;
    o.decoder.channel_factor = 0.75 * (1.0 / 3);
    o.stage2.decoder.channel_factor = 1.0 / 3;
    o.decoder.in_channels = 32, o.stage2.decoder.in_channels = 64;
    o.decoder.out_act = o.stage2.decoder.out_act = DUET_DEEPFILL_OUT_TANH;
    o.dilation_neck.in_channels = o.stage2.dilation_neck.in_channels = 32;
    o.stage2.contextual_attention.in_channels = 32;
    o.decoder.reflect = o.stage2.decoder.reflect = true;
    o.decoder.gated = o.stage2.decoder.gated = true;
    o.dilation_neck.reflect = o.stage2.dilation_neck.reflect = true;
    o.dilation_neck.gated = o.stage2.dilation_neck.gated = true;
    o.stage2.contextual_attention.reflect = o.stage2.contextual_attention.gated = true;
    run_case("deepfillv2", &o);
}

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("deepfill_nets.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepfillv1),
        cmocka_unit_test(test_deepfillv2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
