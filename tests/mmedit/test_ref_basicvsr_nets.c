/* SPyNet and BasicVSRNet (src/models/basicvsr_net.c) against MMEditing's own
 * modules (tests/ref/gen_mmedit_refs.py, BasicVSRNets ->
 * basicvsr_nets.safetensors): MMEditing's state dict loaded strictly by name
 * (so every duet name is MMEditing's, buffers included), the parameter
 * counts equal, the output within RTOL of its scale of the float64 run,
 * the input gradients and every parameter gradient of sum(out * r) as far
 * from it as report() below allows, measured against PyTorch float32's
 * own distances. Cases: SPyNet on two 32x64 pairs, BasicVSRNet (8
 * channels, one block) on two 2-frame 64x64 sequences and on a
 * mirror-extended 4-frame one. Prints the distances. Runs as the
 * `mmedit` test mmedit_basicvsr_nets. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define RTOL 1e-4

static duet_st *ref;

/* Distances: an entry's largest |got - want| over its largest |want|.
 * The gradients are ill-conditioned in float32: each ReLU or LeakyReLU
 * input within float32's rounding of 0 (millions of them in BasicVSRNet's
 * x4 layers) or each flow_warp sample that rounding moves across a pixel
 * edge changes a term of a sum of millions of random-signed terms, about
 * 1e-3 of the sum's size, so that PyTorch float32's own distance is 1e-4 to
 * 2e-2 per entry and varies from entry to entry with the few such flips.
 * Hence two bounds: each entry at most ENTRY_FACTOR times PyTorch
 * float32's distance (NAME.f32err.<entry>) or ENTRY_FLOOR, and the sum of
 * the gradients' distances at most SUM_FACTOR times PyTorch float32's sum.
 * The output (no kink flips there) is held to RTOL. */
#define ENTRY_FACTOR 10.0
#define ENTRY_FLOOR 5e-3
#define SUM_FACTOR 2.0

typedef struct distances {
    double out, in, param; /* the largest per kind */
    double sum, f32_sum;   /* over the gradients */
    double ratio;          /* the largest distance / PyTorch float32's */
} distances;

static void report(const char *name, const char *entry, const float *got, int64_t n,
                   double *worst, distances *d) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", name, entry);
    duet_tensor *want = tu_ref_tensor(ref, key);
    assert_int_equal(want->numel, n);
    snprintf(key, sizeof key, "%s.f32err.%s", name, entry);
    duet_tensor *f32 = tu_ref_tensor(ref, key);
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)got[i] - want->data[i]));
        scale = fmax(scale, fabs((double)want->data[i]));
    }
    const double rel = scale > 0.0 ? diff / scale : diff, pt = f32->data[0];
    const bool is_out = strcmp(entry, "out") == 0;
    const double bound = is_out ? RTOL : fmax(ENTRY_FACTOR * pt, ENTRY_FLOOR);
    if (!(rel <= bound))
        fail_msg("%s.%s: distance %.3g from MMEditing's float64 (largest difference %.3g of "
                 "largest magnitude %.3g), above %.3g (PyTorch float32's: %.3g)", name, entry,
                 rel, diff, scale, bound, pt);
    if (rel > *worst) *worst = rel;
    if (!is_out) {
        d->sum += rel;
        d->f32_sum += pt;
    }
    if (pt > 0.0 && rel / pt > d->ratio) d->ratio = rel / pt;
    duet_tensor_release(f32);
    duet_tensor_release(want);
}

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
    distances d = {0};
    report(name, "out", y->data, y->numel, &d.out, &d);
    snprintf(key, sizeof key, "%s.r", name);
    duet_tensor *r = tu_ref_tensor(ref, key);
    assert_int_equal(r->numel, y->numel);
    tu_backprop_with(y, r->data);
    report(name, "grad.x", x->grad, x->numel, &d.in, &d);
    if (two_inputs) report(name, "grad.l", l->grad, l->numel, &d.in, &d);
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    snprintf(key, sizeof key, "%s.grad.", name);
    assert_int_equal(tu_st_count_prefixed(ref, key), ps.count + (two_inputs ? 2 : 1));
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "grad.%s", ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s.%s: no gradient", name, key);
        report(name, key, ps.items[i].tensor->grad, ps.items[i].tensor->numel, &d.param, &d);
    }
    printf("%s: distance from MMEditing's float64 (largest difference / largest magnitude): "
           "output %.3g; largest of the input gradients %.3g, of the %zu parameter gradients "
           "%.3g; their sum %.3g, PyTorch float32's %.3g (%.2f times); largest entry %.2f "
           "times PyTorch float32's\n", name, d.out, d.in, ps.count, d.param, d.sum,
           d.f32_sum, d.sum / d.f32_sum, d.ratio);
    if (!(d.sum <= SUM_FACTOR * d.f32_sum))
        fail_msg("%s: the gradients' distances sum to %.3g, above %.0f times PyTorch "
                 "float32's %.3g", name, d.sum, SUM_FACTOR, d.f32_sum);
    duet_named_tensors_clear(&ps);
    duet_tensor_release(r);
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_tensor_release(l);
    assert_int_equal(duet_tape_size(), 0);
}

static void test_spynet(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(1, 0);
    duet_module *net = NULL;
    TU_OK(duet_spynet_create(&init, &net));
    run_case("spynet", net, true);
    duet_module_destroy(net);
}

static void test_basicvsr_net(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(2, 0);
    duet_basicvsr_net_opts o = duet_basicvsr_net_opts_default();
    o.mid_channels = 8, o.num_blocks = 1;
    duet_module *net = NULL;
    TU_OK(duet_basicvsr_net_create(&o, &init, &net));
    run_case("basicvsr", net, false);
    duet_module_destroy(net);
    TU_OK(duet_basicvsr_net_create(&o, &init, &net));
    run_case("basicvsr_mirror", net, false);
    duet_module_destroy(net);
}

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("basicvsr_nets.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spynet),
        cmocka_unit_test(test_basicvsr_net),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
