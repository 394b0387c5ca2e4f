/* Host access to tensor storage (src/tensor/host_access.c) and device
 * placement above ops: duet_tensor_item, the read and write mappings (on
 * the CPU the tensor's own storage, no copy), ranges, duet_tensor_move_to
 * and duet_module_to_device, and the loader's batch placement
 * (duet_loader_opts.device). The device cases run on every device this
 * build can make tensors on besides the CPU (none on a machine without a
 * GPU before the simulated device): each is checked against the CPU. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_item(void **state) {
    (void)state;
    duet_tensor *t = NULL, *v = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){1}, (float[]){2.5f}, &t));
    float x = 0.0f;
    TU_OK(duet_tensor_item(t, &x));
    assert_true(x == 2.5f);
    duet_tensor_release(t);
    TU_OK(duet_tensor_create(2, (int64_t[]){2, 3}, &t));
    tu_expect_error(duet_tensor_item(t, &x), DUET_ESHAPE, "[2, 3]", "6 values", NULL);
    TU_OK(duet_tensor_slice0(t, 1, 1, &v));
    tu_expect_error(duet_tensor_item(v, &x), DUET_ESHAPE, "[1, 3]", NULL);
    duet_tensor_release(v);
    duet_tensor_release(t);
}

/* On the CPU a mapping is the tensor's storage: reading is in place and a
 * write lands at once, so the hot paths above ops pay no copy. */
static void test_maps_on_the_cpu_are_in_place(void **state) {
    (void)state;
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){4}, (float[]){1, 2, 3, 4}, &t));
    const float *r = NULL;
    TU_OK(duet_tensor_map_read(t, &r));
    assert_ptr_equal(r, duet_tensor_host_data(t));
    duet_tensor_unmap_read(t, r);
    float *w = NULL;
    TU_OK(duet_tensor_map_write(t, false, &w));
    assert_ptr_equal(w, duet_tensor_host_data(t));
    w[2] = 30.0f;
    assert_true(duet_tensor_host_data(t)[2] == 30.0f); /* before the unmap */
    TU_OK(duet_tensor_unmap_write(t, w));
    TU_OK(duet_tensor_unmap_write(t, NULL)); /* a failed map's NULL */
    duet_tensor_unmap_read(t, NULL);
    /* The gradient: none yet, then the tensor's own. */
    assert_false(duet_tensor_has_grad(t));
    tu_expect_error(duet_tensor_grad_map_read(t, &r), DUET_EINVAL, "no gradient", NULL);
    assert_null(r);
    TU_OK(duet_tensor_ensure_grad(t));
    assert_true(duet_tensor_has_grad(t));
    TU_OK(duet_tensor_grad_map_read(t, &r));
    assert_ptr_equal(r, t->grad);
    duet_tensor_unmap_read(t, r);
    duet_tensor_release(t);
}

static void test_ranges(void **state) {
    (void)state;
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_from_data(2, (int64_t[]){2, 3}, (float[]){0, 1, 2, 3, 4, 5}, &t));
    float got[3] = {0};
    TU_OK(duet_tensor_read_range(t, 2, 3, got));
    assert_true(got[0] == 2.0f && got[1] == 3.0f && got[2] == 4.0f);
    TU_OK(duet_tensor_write_range(t, 5, 1, (float[]){50.0f}));
    TU_OK(duet_tensor_read_range(t, 5, 1, got));
    assert_true(got[0] == 50.0f);
    TU_OK(duet_tensor_read_range(t, 6, 0, got)); /* empty, at the end */
    tu_expect_error(duet_tensor_read_range(t, 4, 3, got), DUET_EINVAL, "[4, 7)", "[2, 3]",
                    NULL);
    tu_expect_error(duet_tensor_write_range(t, -1, 1, got), DUET_EINVAL, "tensor write", NULL);
    duet_tensor_release(t);
}

/* The devices other than the CPU that this process can make tensors on. */
static int other_devices(duet_device *out, int max) {
    int n = 0;
    const char *kinds[] = {"cuda:0", "sim:0"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && n < max; i++) {
        duet_device d;
        if (duet_device_parse(kinds[i], &d) != DUET_OK) continue; /* not in this build */
        if (duet_device_check(d) == DUET_OK) out[n++] = d;
    }
    return n;
}

/* Through a device: the maps copy, writes reach the device at the unmap,
 * item and ranges read back what was written. */
static void test_maps_on_devices(void **state) {
    (void)state;
    duet_device devs[4];
    const int n = other_devices(devs, 4);
    if (n == 0) print_message("no device besides the CPU in this build and machine: the "
                              "device cases of the maps are not run here\n");
    for (int k = 0; k < n; k++) {
        duet_tensor *t = NULL;
        const float vals[4] = {1, 2, 3, 4};
        TU_OK(duet_tensor_from_host_on(devs[k], 1, (int64_t[]){4}, vals, &t));
        assert_true(duet_device_equal(duet_tensor_device(t), devs[k]));
        assert_null(duet_tensor_host_data(t));
        const float *r = NULL;
        TU_OK(duet_tensor_map_read(t, &r));
        tu_assert_close(r, vals, 4, 0, 0, "map_read on a device");
        duet_tensor_unmap_read(t, r);
        float *w = NULL;
        TU_OK(duet_tensor_map_write(t, true, &w));
        tu_assert_close(w, vals, 4, 0, 0, "map_write(keep) on a device");
        w[1] = 20.0f;
        TU_OK(duet_tensor_unmap_write(t, w));
        TU_OK(duet_tensor_map_write(t, false, &w));
        assert_true(w[0] == 0.0f && w[3] == 0.0f); /* without keep: zeros, not t's values */
        w[0] = 7.0f, w[1] = 8.0f, w[2] = 9.0f, w[3] = 10.0f;
        TU_OK(duet_tensor_unmap_write(t, w));
        float back[4];
        TU_OK(duet_tensor_copy_to_host(t, back));
        tu_assert_close(back, (float[]){7, 8, 9, 10}, 4, 0, 0, "unmap_write on a device");
        TU_OK(duet_tensor_read_range(t, 1, 2, back));
        assert_true(back[0] == 8.0f && back[1] == 9.0f);
        duet_tensor *one = NULL;
        float x = 0.0f;
        TU_OK(duet_tensor_slice0(t, 3, 1, &one));
        TU_OK(duet_tensor_item(one, &x));
        assert_true(x == 10.0f);
        duet_tensor_release(one);
        duet_tensor_release(t);
    }
}

/* module.to(device): the tensors keep their identity (an optimizer made
 * before holds them still); a view or an op's output does not move. */
static void test_module_to_device(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_module *m = NULL;
    TU_OK(duet_conv2d_module_create(2, 3, 3, 1, 1, true, &rng, &m));
    duet_tensor *w = duet_module_param(m, "weight");
    float before[54];
    TU_OK(duet_tensor_copy_to_host(w, before));
    TU_OK(duet_module_to_device(m, duet_device_cpu())); /* nothing to do */
    assert_ptr_equal(duet_module_param(m, "weight"), w);
    assert_ptr_equal(duet_tensor_host_data(w), duet_tensor_host_data(w));
    duet_device devs[4];
    const int n = other_devices(devs, 4);
    for (int k = 0; k < n; k++) {
        TU_OK(duet_module_to_device(m, devs[k]));
        assert_ptr_equal(duet_module_param(m, "weight"), w);
        assert_true(duet_device_equal(duet_tensor_device(w), devs[k]));
        assert_true(duet_device_equal(duet_tensor_device(duet_module_param(m, "bias")), devs[k]));
        TU_OK(duet_module_to_device(m, duet_device_cpu()));
        tu_assert_close(duet_tensor_host_data(w), before, 54, 0, 0, "to a device and back");
    }
    duet_tensor *v = NULL, *y = NULL;
    TU_OK(duet_tensor_view(w, 1, (int64_t[]){54}, &v));
    TU_OK(duet_scale(w, 2.0f, &y));
    for (int k = 0; k < n; k++) {
        tu_expect_error(duet_tensor_move_to(v, devs[k]), DUET_EINVAL, "a view", NULL);
        tu_expect_error(duet_tensor_move_to(y, devs[k]), DUET_EINVAL, "an op's output", NULL);
    }
    duet_tensor_release(v);
    duet_tensor_release(y);
    duet_module_destroy(m);
}

/* Sample i: "x" (1, 2) = {i, -i}, made on the host as a decoder makes it. */
static int pairs_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    (void)impl;
    (void)rng;
    duet_tensor *x = NULL;
    DUET_TRY(duet_tensor_from_data(2, (int64_t[]){1, 2}, (float[]){(float)index, -(float)index},
                                   &x));
    int rc = duet_batch_add_tensor(out, "x", x);
    duet_tensor_release(x);
    return rc;
}

static const duet_dataset_ops pairs_ops = {"pairs", pairs_get, NULL, NULL};

/* One batch of `dev`'s loader with its values on the host. */
static void next_on(duet_dataset *ds, duet_device dev, int prefetch, float *vals) {
    duet_loader_opts lo = duet_loader_options_default();
    lo.samples_per_gpu = 2;
    lo.shuffle = false;
    lo.prefetch = prefetch;
    lo.device = dev;
    duet_loader *l = NULL;
    duet_data_batch *b = NULL;
    TU_OK(duet_loader_create(ds, &lo, &l));
    TU_OK(duet_loader_next(l, &b));
    duet_tensor *x = duet_batch_tensor_get(&b->batch, "x");
    assert_true(duet_device_equal(duet_tensor_device(x), dev));
    TU_OK(duet_tensor_copy_to_host(x, vals));
    duet_data_batch_destroy(b);
    duet_loader_destroy(l);
}

static void test_loader_places_batches(void **state) {
    (void)state;
    duet_dataset *ds = NULL;
    TU_OK(duet_dataset_create(&pairs_ops, NULL, 4, &ds));
    assert_true(duet_device_equal(duet_loader_options_default().device, duet_device_cpu()));
    float cpu[4], dev[4];
    next_on(ds, duet_device_cpu(), 0, cpu);
    tu_assert_close(cpu, (float[]){0, -0.0f, 1, -1}, 4, 0, 0, "the CPU batch");
    duet_device devs[4];
    const int n = other_devices(devs, 4);
    for (int k = 0; k < n; k++)
        for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
            next_on(ds, devs[k], prefetch, dev);
            tu_assert_close(dev, cpu, 4, 0, 0, "the device's batch against the CPU's");
        }
    /* On sim:0 the copies are counted: one host-to-device copy per tensor
     * of the batch (the decoders' host tensors, then one copy each), none
     * back. */
    duet_sim_stats before, after;
    TU_OK(duet_sim_stats_get(0, &before));
    next_on(ds, duet_device_sim(0), 0, dev);
    TU_OK(duet_sim_stats_get(0, &after));
    assert_int_equal(after.h2d_copies - before.h2d_copies, 1);
    assert_int_equal(after.h2d_bytes - before.h2d_bytes, 4 * sizeof(float));
    assert_int_equal(after.d2h_copies - before.d2h_copies, 1); /* next_on's read-back */
    /* A device that cannot hold tensors fails the batch, naming it. */
    if (duet_cuda_device_count() == 0) {
        duet_loader_opts lo = duet_loader_options_default();
        lo.prefetch = 0;
        lo.device = duet_device_cuda(0);
        duet_loader *l = NULL;
        duet_data_batch *b = NULL;
        TU_OK(duet_loader_create(ds, &lo, &l));
        tu_expect_error(duet_loader_next(l, &b), DUET_EDEVICE, "'x'", "cuda:0", NULL);
        assert_null(b);
        duet_loader_destroy(l);
    }
    duet_dataset_destroy(ds);
}

/* n floats of t (on any device) equal, bit for bit, to want's. */
static void assert_same_bits(const duet_tensor *t, const duet_tensor *want, const char *what) {
    assert_int_equal(t->numel, want->numel);
    float *a = malloc((size_t)t->numel * sizeof *a), *b = malloc((size_t)t->numel * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    TU_OK(duet_tensor_copy_to_host(t, a));
    TU_OK(duet_tensor_copy_to_host(want, b));
    if (memcmp(a, b, (size_t)t->numel * sizeof *a) != 0) fail_msg("%s: differs", what);
    free(a);
    free(b);
}

/* A module's parameters and buffers, pairwise bit for bit. */
static void assert_modules_same(duet_module *got, duet_module *want, const char *what) {
    duet_named_tensors g, w;
    TU_OK(duet_module_state(got, &g));
    TU_OK(duet_module_state(want, &w));
    assert_int_equal(g.count, w.count);
    for (size_t i = 0; i < g.count; i++) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %s", what, g.items[i].name);
        assert_same_bits(g.items[i].tensor, w.items[i].tensor, msg);
    }
    duet_named_tensors_clear(&g);
    duet_named_tensors_clear(&w);
}

/* A conv + BatchNorm stack made from seed on the CPU, then moved to dev. */
static duet_module *stack_on(uint64_t seed, duet_device dev) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *seq = NULL, *conv = NULL, *bn = NULL;
    TU_OK(duet_sequential_create(&seq));
    TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, true, &rng, &conv));
    TU_OK(duet_batch_norm2d_module_create(4, 1e-5f, 0.1f, &bn));
    TU_OK(duet_sequential_append(seq, conv));
    TU_OK(duet_sequential_append(seq, bn));
    /* Buffers that are not their init values, a count among them. */
    duet_tensor *mean = duet_module_buffer(bn, "running_mean");
    TU_OK(duet_tensor_write_range(mean, 0, 4, (float[]){0.5f, -1.0f, 0.25f, 3.0f}));
    TU_OK(duet_tensor_write_range(duet_module_buffer(bn, "num_batches_tracked"), 0, 1,
                                  (float[]){7.0f}));
    TU_OK(duet_module_to_device(seq, dev));
    return seq;
}

/* The layers above ops that need no op, on sim:0 against the CPU, bit for
 * bit: EMA (duet_ema_update's host arithmetic through mappings), SGD (its
 * update through mappings), the SR metrics, and a module's state through a
 * file (the counts written back with duet_tensor_write_range). A stray host
 * read of a sim tensor in any of them crashes this test. */
static void test_layers_on_sim(void **state) {
    (void)state;
    const duet_device sim = duet_device_sim(0), cpu = duet_device_cpu();
    /* EMA: net and its average, both ways. */
    duet_module *net_c = stack_on(1, cpu), *ema_c = stack_on(2, cpu);
    duet_module *net_s = stack_on(1, sim), *ema_s = stack_on(2, sim);
    for (int k = 0; k < 2; k++) {
        TU_OK(duet_ema_update(ema_c, net_c, 0.999f, 0.0f));
        TU_OK(duet_ema_update(ema_s, net_s, 0.999f, 0.0f));
    }
    assert_modules_same(ema_s, ema_c, "EMA on sim:0 against the CPU");
    /* SGD with momentum, weight decay and Nesterov, two steps, on gradients
     * made on the host and moved with their tensors. */
    duet_tensor *pc = NULL, *ps = NULL;
    duet_rng rng = duet_rng_make(5, 0);
    pc = tu_randn(&rng, 1, (int64_t[]){10}, 1.0f);
    TU_OK(duet_tensor_ensure_grad(pc));
    for (int i = 0; i < 10; i++) pc->grad[i] = 0.1f * (float)(i - 4);
    TU_OK(duet_tensor_clone(pc, &ps));
    TU_OK(duet_tensor_ensure_grad(ps));
    memcpy(ps->grad, pc->grad, sizeof(float) * 10);
    pc->requires_grad = ps->requires_grad = true;
    TU_OK(duet_tensor_move_to(ps, sim));
    char pname[] = "p";
    duet_named_tensor nc = {pname, pc, false}, ns = {pname, ps, false};
    duet_named_tensors lc = {1, &nc}, ls = {1, &ns};
    duet_sgd_opts so = duet_sgd_opts_default();
    so.lr = 0.1f, so.momentum = 0.9f, so.weight_decay = 0.01f, so.nesterov = true;
    duet_optimizer *oc = NULL, *os = NULL;
    TU_OK(duet_sgd_create(&lc, &so, &oc));
    TU_OK(duet_sgd_create(&ls, &so, &os));
    for (int k = 0; k < 2; k++) {
        TU_OK(duet_optimizer_step(oc));
        TU_OK(duet_optimizer_step(os));
    }
    assert_same_bits(ps, pc, "SGD on sim:0 against the CPU");
    duet_optimizer_destroy(oc);
    duet_optimizer_destroy(os);
    duet_tensor_release(pc);
    duet_tensor_release(ps);
    /* PSNR and SSIM of sim tensors: the CPU's numbers. */
    duet_tensor *out_c = tu_rand(&rng, 4, (int64_t[]){2, 3, 16, 16}, 0.0f, 1.0f);
    duet_tensor *gt_c = tu_rand(&rng, 4, (int64_t[]){2, 3, 16, 16}, 0.0f, 1.0f);
    duet_tensor *out_s = NULL, *gt_s = NULL;
    TU_OK(duet_tensor_to(out_c, sim, &out_s));
    TU_OK(duet_tensor_to(gt_c, sim, &gt_s));
    duet_test_cfg tc = duet_test_cfg_default();
    duet_log_vars mc, ms;
    TU_OK(duet_evaluate(&tc, out_c, gt_c, &mc));
    TU_OK(duet_evaluate(&tc, out_s, gt_s, &ms));
    assert_int_equal(mc.count, ms.count);
    for (int i = 0; i < mc.count; i++) assert_true(mc.values[i] == ms.values[i]);
    duet_tensor *ts[] = {out_c, gt_c, out_s, gt_s};
    for (int i = 0; i < 4; i++) duet_tensor_release(ts[i]);
    /* A module's state from sim:0 through a file into another on sim:0. */
    char path[] = "/tmp/duet_host_access_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    duet_st_writer *w = NULL;
    duet_st *st = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(ema_s, w, ""));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    TU_OK(duet_st_load(path, &st));
    TU_OK(duet_module_load_state(net_s, st, "", true, NULL, NULL));
    assert_modules_same(net_s, ema_c, "a state through a file on sim:0");
    duet_st_destroy(st);
    unlink(path);
    duet_module *ms_[] = {net_c, ema_c, net_s, ema_s};
    for (int i = 0; i < 4; i++) duet_module_destroy(ms_[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_item),
        cmocka_unit_test(test_maps_on_the_cpu_are_in_place),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_maps_on_devices),
        cmocka_unit_test(test_module_to_device),
        cmocka_unit_test(test_loader_places_batches),
        cmocka_unit_test(test_layers_on_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
