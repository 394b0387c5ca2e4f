/* MultiLayerDiscriminator, GLDiscs (src/models/gl_disc.c) and
 * GLEncoderDecoder (src/models/gl_encdec.c) against MMEditing's own modules
 * (tests/ref/gen_mmedit_refs.py, GLNets -> gl_nets.safetensors): MMEditing's state dict loaded strictly by name (so
 * every duet name is MMEditing's), the parameter counts equal, and in
 * training mode the output, the input gradients, every parameter gradient
 * and the BatchNorm buffers within 1e-4 of each tensor's scale of the
 * float64 run, as test_ref_networks_gan.c compares. Runs as the `mmedit`
 * test mmedit_gl_nets. */
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

static void run_case(const char *name, duet_module *net, bool two_inputs) {
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
    duet_tensor *x = tu_ref_tensor(ref, key), *l = NULL, *y = NULL;
    x->requires_grad = true;
    if (two_inputs) {
        snprintf(key, sizeof key, "%s.l", name);
        l = tu_ref_tensor(ref, key);
        l->requires_grad = true;
        TU_OK(duet_module_forward2(net, x, l, &y));
    } else {
        TU_OK(duet_module_forward(net, x, &y));
    }
    snprintf(key, sizeof key, "%s.out", name);
    compare(key, y->data, y->numel);
    snprintf(key, sizeof key, "%s.r", name);
    duet_tensor *r = tu_ref_tensor(ref, key);
    assert_int_equal(r->numel, y->numel);
    tu_backprop_with(y, r->data);
    snprintf(key, sizeof key, "%s.grad.x", name);
    compare(key, x->grad, x->numel);
    if (two_inputs) {
        snprintf(key, sizeof key, "%s.grad.l", name);
        compare(key, l->grad, l->numel);
    }
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    snprintf(key, sizeof key, "%s.grad.", name);
    assert_int_equal(count_prefixed(key), ps.count + (two_inputs ? 2 : 1));
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", key);
        compare(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&ps);
    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(net, &bs));
    snprintf(key, sizeof key, "%s.after.", name);
    assert_int_equal(count_prefixed(key), bs.count);
    for (size_t i = 0; i < bs.count; i++) {
        snprintf(key, sizeof key, "%s.after.%s", name, bs.items[i].name);
        compare(key, bs.items[i].tensor->data, bs.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&bs);
    duet_tensor_release(r);
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_tensor_release(l);
}

static void test_gl_discs(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(1, 0);
    duet_multi_layer_disc_opts g = duet_multi_layer_disc_opts_default();
    g.max_channels = 16, g.fc_in_channels = 16 * 4 * 4, g.num_convs = 3, g.with_norm = true;
    duet_multi_layer_disc_opts l = g;
    l.num_convs = 2;
    duet_module *d = NULL;
    TU_OK(duet_gl_discs_create(&g, &l, &init, &d));
    run_case("gl_discs", d, true);
    duet_module_destroy(d);
}

static void test_multi_layer_disc(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(2, 0);
    duet_multi_layer_disc_opts o = duet_multi_layer_disc_opts_default();
    o.max_channels = 8, o.num_convs = 2, o.kernel_size = 3, o.with_out_convs = true;
    o.act = DUET_MLD_ACT_LRELU;
    duet_module *d = NULL;
    TU_OK(duet_multi_layer_disc_create(&o, &init, &d));
    run_case("mld_outconvs", d, false);
    duet_module_destroy(d);
    o = duet_multi_layer_disc_opts_default();
    o.in_channels = 4, o.max_channels = 8, o.num_convs = 2, o.kernel_size = 5;
    o.fc_in_channels = 8 * 3 * 3, o.fc_out_channels = 5, o.with_norm = true;
    o.with_input_norm = false, o.out_act = DUET_MLD_ACT_NONE;
    TU_OK(duet_multi_layer_disc_create(&o, &init, &d));
    run_case("mld_fc", d, false);
    duet_module_destroy(d);
}

static void test_gl_encdec(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(3, 0);
    duet_gl_encdec_opts o = {0};
    duet_module *g = NULL;
    TU_OK(duet_gl_encdec_create(&o, &init, &g));
    run_case("gl_encdec_clip", g, false);
    duet_module_destroy(g);
    o = (duet_gl_encdec_opts){.encoder_norm = true, .neck_norm = true, .decoder_norm = true,
                             .out_sigmoid = true};
    TU_OK(duet_gl_encdec_create(&o, &init, &g));
    /* BatchNorm everywhere: every gradient too, on either GEMM backend
     * (ctest mmedit_gl_nets_openblas runs the OpenBLAS one). It once
     * differed by 4.5e-3 of scale upstream of decoder.dec4 on oneDNN: not
     * the backend but the draw, one ReLU input 8.6e-7 from 0 in float64,
     * on the other side in duet's float32; gen_mmedit_refs.py's
     * kink_margin now keeps every ReLU input of a reference clear of it. */
    run_case("gl_encdec_bn", g, false);
    duet_module_destroy(g);
}

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("gl_nets.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gl_discs),
        cmocka_unit_test(test_multi_layer_disc),
        cmocka_unit_test(test_gl_encdec),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
