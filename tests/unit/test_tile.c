/* infer --tile's stitching (src/runner/tile.c, duet__tiled_forward) in
 * floats, against the whole-image forward of the same model: a tiny x4
 * MSRResNet and a tiny RRDBNet on a 37 x 23 input (neither side a multiple
 * of the tile), 8-pixel tiles. With the default pad (the measured receptive
 * radius) every output value is the whole-image one within float rounding
 * (1e-5 of the output's range), borders included; a tile larger than the
 * image is the whole forward bit for bit; pad 0 makes seams (differences
 * far above rounding), which is what shows the test can fail. The e2e
 * test_infer_tile checks the same through duet infer's PNGs. White-box:
 * it drives duet__tiled_forward with a bare run. */
#include "testutil.h"

#include "runner/runner_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* max |a - b| and max |b|. */
static void diff(const duet_tensor *a, const duet_tensor *b, double *d, double *range) {
    assert_int_equal(a->numel, b->numel);
    *d = 0.0;
    *range = 0.0;
    for (int64_t i = 0; i < a->numel; i++) {
        *d = fmax(*d, fabs((double)a->data[i] - (double)b->data[i]));
        *range = fmax(*range, fabs((double)b->data[i]));
    }
}

static void check_model(duet_model *m, const char *name) {
    duet_rng xr = duet_rng_make(7, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){1, 3, 23, 37}, 0.5f), *whole = NULL;
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_model_forward(m, x, &whole));
    duet__run r;
    memset(&r, 0, sizeof r);
    r.model = m;
    r.world = 1;
    r.quiet = true;
    /* Default pad (-1: the radius), tile 8; then a tile larger than the image; then pad 0. */
    const int64_t tiles[3] = {8, 64, 8}, pads[3] = {-1, -1, 0};
    double d[3], range = 0.0;
    for (int k = 0; k < 3; k++) {
        duet_tensor *y = NULL;
        TU_OK(duet__tiled_forward(&r, x, tiles[k], pads[k], name, &y));
        assert_int_equal(y->ndim, 4);
        assert_int_equal(y->shape[2], whole->shape[2]);
        assert_int_equal(y->shape[3], whole->shape[3]);
        diff(y, whole, &d[k], &range);
        duet_tensor_release(y);
    }
    duet_set_grad_enabled(prev);
    printf("test_tile: %s (receptive radius %lld): tiled against whole max |diff| %.3g, tile "
           "larger than the image %.3g, pad 0 %.3g; output range %.3g\n", name,
           (long long)r.tile_radius, d[0], d[1], d[2], range);
    assert_true(r.tile_radius > 0);
    assert_true(range > 0.0);
    assert_true(d[0] <= 1e-5 * range);
    assert_true(d[1] == 0.0);
    assert_true(d[2] > 1e-3 * range);
    duet_tensor_release(x);
    duet_tensor_release(whole);
}

static void test_tile_msrresnet(void **state) {
    (void)state;
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 2;
    duet_rng rng = duet_rng_make(3, 0);
    duet_model *m = NULL;
    TU_OK(duet_basic_restorer_create(&o, &rng, &m));
    check_model(m, "MSRResNet x4");
    duet_model_destroy(m);
}

static void test_tile_rrdbnet(void **state) {
    (void)state;
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    duet_rrdbnet_opts g = duet_rrdbnet_opts_default();
    g.mid_channels = 8;
    g.num_blocks = 1;
    g.growth_channels = 4;
    duet_rng rng = duet_rng_make(4, 0);
    duet_model *m = NULL;
    TU_OK(duet_basic_restorer_rrdbnet_create(&g, &o, &rng, &m));
    /* MMEditing's init scales every RRDBNet convolution by 0.1, which leaves
     * a fresh network's output near 1e-5; back at Kaiming's scale (weights
     * x 10) the output is of order one, and so are the differences read. */
    duet_named_tensors ps = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(m), false, &ps));
    for (size_t i = 0; i < ps.count; i++) {
        duet_tensor *t = ps.items[i].tensor;
        if (strstr(ps.items[i].name, "weight") != NULL)
            for (int64_t k = 0; k < t->numel; k++) t->data[k] *= 10.0f;
    }
    duet_named_tensors_clear(&ps);
    check_model(m, "RRDBNet x4");
    duet_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_msrresnet),
        cmocka_unit_test(test_tile_rrdbnet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
