/* PConvEncoderDecoder (src/models/pconv.c: PartialConv2d, MaskConvModule,
 * PConvEncoder, PConvDecoder) against MMEditing's own module
 * (tests/ref/gen_mmedit_refs.py, PConvNets -> pconv_nets.safetensors):
 * MMEditing's state dict (weight_mask_updater buffers included) loaded
 * strictly by name, so every duet name is MMEditing's; in training mode the
 * output, the final mask (exactly), the input gradient, every parameter
 * gradient and the BatchNorm buffers within 1e-4 of each tensor's scale of
 * the float64 run, as test_ref_gl_nets.c compares. Three cases: 4 layers
 * with BatchNorm on 32x32, 5 layers without a norm on 32x64, 4 layers with
 * the encoder's BatchNorm under norm_eval and its affine frozen (stage
 * 2's: no gradient on either side). Runs as the
 * `mmedit` test mmedit_pconv_nets. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define RTOL 1e-4

static duet_st *ref;

static void compare(const char *key, const float *got, int64_t n) {
    tu_ref_compare_scaled(ref, key, got, n, RTOL);
}

static void run_case(const char *name, const duet_pconv_encdec_opts *o) {
    duet_rng init = duet_rng_make(7, 0);
    duet_module *net = NULL;
    TU_OK(duet_pconv_encdec_create(o, &init, &net));
    char key[256];
    snprintf(key, sizeof key, "%s.sd.", name);
    size_t nmiss = 1, nunexp = 1;
    TU_OK(duet_module_load_state(net, ref, key, true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
    duet_module_train(net, true);
    snprintf(key, sizeof key, "%s.x", name);
    duet_tensor *x = tu_ref_tensor(ref, key), *mask = NULL, *y = NULL, *fm = NULL;
    x->requires_grad = true;
    snprintf(key, sizeof key, "%s.mask", name);
    mask = tu_ref_tensor(ref, key);
    TU_OK(duet_pconv_encdec_forward(net, x, mask, &y, &fm));
    snprintf(key, sizeof key, "%s.out", name);
    compare(key, y->data, y->numel);
    snprintf(key, sizeof key, "%s.final_mask", name);
    tu_assert_ref(ref, key, fm->data, fm->numel, 0, 0);
    snprintf(key, sizeof key, "%s.r", name);
    duet_tensor *r = tu_ref_tensor(ref, key);
    assert_int_equal(r->numel, y->numel);
    tu_backprop_with(y, r->data);
    snprintf(key, sizeof key, "%s.grad.x", name);
    compare(key, x->grad, x->numel);
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, true, &ps)); /* the trainable ones */
    snprintf(key, sizeof key, "%s.grad.", name);
    assert_int_equal(tu_st_count_prefixed(ref, key), ps.count + 1);
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", key);
        compare(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&ps);
    /* The BatchNorm buffers after the forward; the partial convs' constant
     * weight_mask_updater came in sd.* (strictly loaded above). */
    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(net, &bs));
    snprintf(key, sizeof key, "%s.after.", name);
    size_t nafter = 0;
    for (size_t i = 0; i < bs.count; i++) {
        const char *bn = bs.items[i].name;
        const size_t len = strlen(bn), tail = strlen("weight_mask_updater");
        if (len >= tail && strcmp(bn + len - tail, "weight_mask_updater") == 0) continue;
        snprintf(key, sizeof key, "%s.after.%s", name, bn);
        compare(key, bs.items[i].tensor->data, bs.items[i].tensor->numel);
        nafter++;
    }
    snprintf(key, sizeof key, "%s.after.", name);
    assert_int_equal(tu_st_count_prefixed(ref, key), nafter);
    duet_named_tensors_clear(&bs);
    duet_tensor_release(r);
    duet_tensor_release(y);
    duet_tensor_release(fm);
    duet_tensor_release(x);
    duet_tensor_release(mask);
    assert_int_equal(duet_tape_size(), 0);
    duet_module_destroy(net);
}

static void test_pconv_encdec_bn(void **state) {
    (void)state;
    duet_pconv_encdec_opts o = duet_pconv_encdec_opts_default();
    o.num_layers = 4;
    run_case("pconv_bn", &o);
}

static void test_pconv_encdec_no_norm(void **state) {
    (void)state;
    duet_pconv_encdec_opts o = duet_pconv_encdec_opts_default();
    o.num_layers = 5;
    o.norm = false;
    run_case("pconv_nonorm5", &o);
}

static void test_pconv_encdec_norm_eval(void **state) {
    (void)state;
    duet_pconv_encdec_opts o = duet_pconv_encdec_opts_default();
    o.num_layers = 4;
    o.norm_eval = true;
    o.norm_frozen = true;
    run_case("pconv_normeval", &o);
}

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("pconv_nets.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pconv_encdec_bn),
        cmocka_unit_test(test_pconv_encdec_no_norm),
        cmocka_unit_test(test_pconv_encdec_norm_eval),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
