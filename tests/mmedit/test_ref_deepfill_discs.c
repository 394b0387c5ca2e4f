/* DeepFill's discriminators against MMEditing's own modules
 * (tests/ref/gen_mmedit_refs.py, DeepFillDiscs -> deepfill_discs.safetensors):
 * DeepFillv1Discriminators as DeepFillv1's config writes it, DeepFillv2's
 * SN-PatchGAN (MultiLayerDiscriminator with_spectral_norm, in_channels 4)
 * and a MultiLayerDiscriminator under spectral norm with BatchNorm, out
 * convs and an fc, the first two built from config text through the
 * registry. Each: MMEditing's state dict loaded strictly by name, the
 * parameter counts, in training mode the outputs, the input gradients and
 * every parameter gradient; under spectral norm the power iteration's
 * buffers after each of two training forwards, and an eval forward that
 * moves none. Then GANLoss 'hinge' (discriminator real/fake, generator) and
 * MMEditing's GradientPenaltyLoss through each DeepFillv1 discriminator
 * (autograd.grad with create_graph, then backward: every parameter
 * gradient). Everything within 1e-4 of each tensor's scale of the float64
 * run. Runs as the `mmedit` test mmedit_deepfill_discs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duet/train.h"
#include "testutil.h"

#define RTOL 1e-4

static duet_st *ref;

static void compare(const char *key, const float *got, int64_t n) {
    tu_ref_compare_scaled(ref, key, got, n, RTOL);
}

static size_t count_prefixed(const char *prefix) { return tu_st_count_prefixed(ref, prefix); }

static duet_tensor *ref_input(const char *name, const char *what) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", name, what);
    return tu_ref_tensor(ref, key);
}

/* MMEditing's state dict NAME.sd.*, strictly by name, and its parameter count. */
static void load(const char *name, duet_module *net) {
    char key[256];
    snprintf(key, sizeof key, "%s.sd.", name);
    size_t nmiss = 1, nunexp = 1;
    TU_OK(duet_module_load_state(net, ref, key, true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
    duet_tensor *np = ref_input(name, "nparams");
    assert_int_equal(duet_module_num_parameters(net, false), (int64_t)np->data[0]);
    duet_tensor_release(np);
}

/* Every parameter's gradient against PREFIX<name>; PREFIX names nothing else
 * but the nextra input gradients. (The penalty's gradient of the fc bias
 * before the LeakyReLU is PyTorch's exact zeros, reached through the
 * activation's recorded backward.) */
static void compare_param_grads(const char *prefix, duet_module *net, size_t nextra) {
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    assert_int_equal(count_prefixed(prefix), ps.count + nextra);
    for (size_t i = 0; i < ps.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s%s", prefix, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", key);
        compare(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&ps);
}

static void compare_buffers(const char *prefix, duet_module *net) {
    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(net, &bs));
    assert_int_equal(count_prefixed(prefix), bs.count);
    for (size_t i = 0; i < bs.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s%s", prefix, bs.items[i].name);
        compare(key, bs.items[i].tensor->data, bs.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&bs);
}

/* sum(y * r) on the tape. */
static duet_tensor *dot(duet_tensor *y, duet_tensor *r) {
    duet_tensor *m = NULL, *s = NULL;
    TU_OK(duet_mul(y, r, &m));
    TU_OK(duet_sum(m, &s));
    duet_tensor_release(m);
    return s;
}

static duet_module *build(const char *text) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<cfg>", &cfg));
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *m = NULL;
    TU_OK(duet_build_module(cfg, "disc", &rng, &m));
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    return m;
}

/* deepfillv1_256x256_8x2_places.py's disc, with its channels and fc inputs
 * shrunk as gen_mmedit_refs.py shrinks them. */
static const char dfv1_cfg[] =
    "disc = { type = \"DeepFillv1Discriminators\";\n"
    "  global_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3;\n"
    "    max_channels = 16; fc_in_channels = 64; fc_out_channels = 1; num_convs = 4;\n"
    "    norm_cfg = \"None\"; act_cfg = { type = \"ELU\"; };\n"
    "    out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; };\n"
    "  local_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3;\n"
    "    max_channels = 32; fc_in_channels = 32; fc_out_channels = 1; num_convs = 4;\n"
    "    norm_cfg = \"None\"; act_cfg = { type = \"ELU\"; };\n"
    "    out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; }; };";

static void test_deepfill_v1_discs(void **state) {
    (void)state;
    duet_module *d = build(dfv1_cfg);
    load("dfv1_discs", d);
    duet_module_train(d, true);
    duet_tensor *x = ref_input("dfv1_discs", "x"), *l = ref_input("dfv1_discs", "l");
    x->requires_grad = l->requires_grad = true;
    duet_tensor *g = NULL, *lp = NULL;
    TU_OK(duet_deepfill_v1_discs_forward(d, x, l, &g, &lp));
    compare("dfv1_discs.out.global", g->data, g->numel);
    compare("dfv1_discs.out.local", lp->data, lp->numel);
    duet_tensor *rg = ref_input("dfv1_discs", "r.global"), *rl = ref_input("dfv1_discs", "r.local");
    duet_tensor *a = dot(g, rg), *b = dot(lp, rl), *loss = NULL;
    TU_OK(duet_add(a, b, &loss));
    TU_OK(duet_backward(loss));
    compare("dfv1_discs.grad.x", x->grad, x->numel);
    compare("dfv1_discs.grad.l", l->grad, l->numel);
    compare_param_grads("dfv1_discs.grad.", d, 2);
    /* forward2: the two predictions joined, global first */
    bool prev = duet_set_grad_enabled(false);
    duet_tensor *joined = NULL;
    TU_OK(duet_module_forward2(d, x, l, &joined));
    duet_set_grad_enabled(prev);
    assert_int_equal(joined->ndim, 2);
    assert_int_equal(joined->shape[1], 2);
    for (int64_t i = 0; i < joined->shape[0]; i++) {
        assert_true(joined->data[2 * i] == g->data[i]);
        assert_true(joined->data[2 * i + 1] == lp->data[i]);
    }
    duet_tensor *ts[] = {x, l, g, lp, rg, rl, a, b, loss, joined};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(d);
}

/* Two training forwards (x, then x2 whose gradient is taken), the
 * buffers after each, the backward of sum(out2 * r), then an eval forward
 * of x that leaves every buffer as it was. */
static void run_sn_case(const char *name, duet_module *net) {
    char key[256];
    load(name, net);
    duet_module_train(net, true);
    duet_tensor *x = ref_input(name, "x"), *x2 = ref_input(name, "x2"), *r = ref_input(name, "r");
    duet_tensor *y1 = NULL, *y2 = NULL, *ye = NULL;
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_module_forward(net, x, &y1));
    duet_set_grad_enabled(prev);
    snprintf(key, sizeof key, "%s.out1", name);
    compare(key, y1->data, y1->numel);
    snprintf(key, sizeof key, "%s.after1.", name);
    compare_buffers(key, net);
    x2->requires_grad = true;
    TU_OK(duet_module_forward(net, x2, &y2));
    snprintf(key, sizeof key, "%s.out2", name);
    compare(key, y2->data, y2->numel);
    snprintf(key, sizeof key, "%s.after2.", name);
    compare_buffers(key, net);
    duet_tensor *loss = dot(y2, r);
    TU_OK(duet_backward(loss));
    snprintf(key, sizeof key, "%s.grad.x2", name);
    compare(key, x2->grad, x2->numel);
    snprintf(key, sizeof key, "%s.grad.", name);
    compare_param_grads(key, net, 1);
    duet_module_train(net, false);
    TU_OK(duet_module_forward(net, x, &ye));
    snprintf(key, sizeof key, "%s.out_eval", name);
    compare(key, ye->data, ye->numel);
    snprintf(key, sizeof key, "%s.after2.", name);
    compare_buffers(key, net);
    duet_tensor *ts[] = {x, x2, r, y1, y2, ye, loss};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static void test_sn_patchgan(void **state) {
    (void)state;
    /* deepfillv2_256x256_8x2_places.py's disc, max_channels shrunk */
    duet_module *d = build(
        "disc = { type = \"MultiLayerDiscriminator\"; in_channels = 4; max_channels = 16;\n"
        "  fc_in_channels = \"None\"; num_convs = 6; norm_cfg = \"None\";\n"
        "  act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
        "  out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
        "  with_spectral_norm = true; };");
    run_sn_case("dfv2_disc", d);
    duet_module_destroy(d);
}

static void test_sn_fc_out_convs(void **state) {
    (void)state;
    duet_multi_layer_disc_opts o = duet_multi_layer_disc_opts_default();
    o.max_channels = 8, o.num_convs = 2, o.kernel_size = 3, o.fc_in_channels = 4;
    o.fc_out_channels = 3, o.with_norm = true, o.with_out_convs = true;
    o.out_act = DUET_MLD_ACT_LRELU, o.with_spectral_norm = true;
    duet_rng init = duet_rng_make(2, 0);
    duet_module *d = NULL;
    TU_OK(duet_multi_layer_disc_create(&o, &init, &d));
    run_sn_case("mld_sn_fc", d);
    duet_module_destroy(d);
}

static void test_hinge(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "loss = { type = \"GANLoss\"; gan_type = \"hinge\"; loss_weight = 0.1; };", "<cfg>",
        &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *hinge = NULL;
    TU_OK(duet_build_module(cfg, "loss", &rng, &hinge));
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    static const struct {
        const char *name;
        bool real, is_disc;
    } cases[] = {{"real_d", true, true}, {"fake_d", false, true}, {"real_g", true, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        duet_tensor *pred = ref_input("dfv2_disc", "out2"), *v = NULL;
        pred->requires_grad = true;
        TU_OK(duet_gan_loss(hinge, pred, cases[i].real, cases[i].is_disc, &v));
        char key[64];
        snprintf(key, sizeof key, "hinge.%s.value", cases[i].name);
        compare(key, v->data, 1);
        TU_OK(duet_backward(v));
        snprintf(key, sizeof key, "hinge.%s.grad", cases[i].name);
        compare(key, pred->grad, pred->numel);
        duet_tensor_release(pred);
        duet_tensor_release(v);
    }
    duet_module_destroy(hinge);
}

/* MMEditing's loss_gp(disc, real, fake, mask) of DeepFillv1's train_step
 * through one of the two discriminators, then its backward. */
static void run_gp(duet_module *discs, const char *child, bool masked) {
    char name[64], key[128];
    snprintf(name, sizeof name, "gp.%s", child);
    duet_module *disc = duet_module_child(discs, child);
    duet_tensor *real = ref_input(name, "real"), *fake = ref_input(name, "fake");
    duet_tensor *alpha = ref_input(name, "alpha"), *mask = masked ? ref_input(name, "mask") : NULL;
    duet_tensor *pen = NULL;
    TU_OK(duet_gradient_penalty_loss_alpha(disc, real, fake, mask, 10.0f, alpha->data, NULL, &pen));
    snprintf(key, sizeof key, "%s.penalty", name);
    compare(key, pen->data, 1);
    TU_OK(duet_backward(pen));
    assert_int_equal(duet_tape_size(), 0);
    snprintf(key, sizeof key, "%s.grad.", name);
    compare_param_grads(key, disc, 0);
    duet_tensor *ts[] = {real, fake, alpha, mask, pen};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static void test_gradient_penalty(void **state) {
    (void)state;
    duet_module *d = build(dfv1_cfg);
    load("dfv1_discs", d);
    duet_module_train(d, true);
    run_gp(d, "global_disc", true);
    run_gp(d, "local_disc", false);
    duet_module_destroy(d);
}

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("deepfill_discs.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepfill_v1_discs),
        cmocka_unit_test(test_sn_patchgan),
        cmocka_unit_test(test_sn_fc_out_convs),
        cmocka_unit_test(test_hinge),
        cmocka_unit_test(test_gradient_penalty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
