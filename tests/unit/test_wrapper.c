/* The DistributedDataParallelWrapper in one process (a world of one): the
 * wrapping rule, devices, scatter and delegation, SRGAN through the wrapper,
 * the whole-model DDP that cannot train a GAN, and the per-part DDP traces.
 * The multi-process behaviour is in tests/mpi/test_wrapper*.c and
 * test_srgan*.c. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duet/train.h"


static const char *cpu[] = {"cpu"};

/* ---- a toy model whose parts cover the wrapping rule ----------------------------- */

typedef struct toy {
    const duet_batch *seen;
    const duet_tensor *seen_lq; /* compared, never read: the view is gone after the call */
    const float *seen_data;
    const char *seen_meta;
} toy;

static int toy_forward(duet_model *m, duet_tensor *lq, duet_tensor **out) {
    toy *t = duet_model_impl(m);
    t->seen_lq = lq;
    t->seen_data = lq->data;
    return duet_module_forward(duet_model_part(m, "trainable"), lq, out);
}

static int toy_train_step(duet_model *m, const duet_batch *b, duet_optimizer_set *o,
                          duet_log_vars *log) {
    (void)o;
    toy *t = duet_model_impl(m);
    t->seen = b;
    t->seen_lq = duet_batch_tensor_get(b, "lq");
    t->seen_data = t->seen_lq->data;
    t->seen_meta = duet_batch_meta_get(b, "lq_path", 0);
    return duet_log_vars_set(log, "n", (double)b->nsamples);
}

static int toy_val_step(duet_model *m, const duet_batch *b, duet_val_output *out) {
    out->nsamples = b->nsamples;
    return toy_forward(m, duet_batch_tensor_get(b, "lq"), &out->output);
}

static const duet_model_ops toy_ops = {
    .name = "Toy",
    .forward = toy_forward,
    .train_step = toy_train_step,
    .val_step = toy_val_step,
    .destroy = free,
};
static const duet_module_type toy_root = {"Toy", NULL, NULL};

static duet_model *toy_model(void) {
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *root = NULL, *m = NULL, *a = NULL, *b = NULL;
    TU_OK(duet_module_create(&toy_root, NULL, &root));
    TU_OK(duet_l1_loss_module_create(1.0f, &m)); /* no parameters */
    TU_OK(duet_module_add_child(root, "noparams", m));
    TU_OK(duet_linear_module_create(4, 4, true, &rng, &m)); /* all frozen */
    duet_module_set_requires_grad(m, false);
    TU_OK(duet_module_add_child(root, "frozen", m));
    TU_OK(duet_sequential_create(&m)); /* some frozen, some trainable */
    TU_OK(duet_linear_module_create(4, 4, true, &rng, &a));
    duet_module_set_requires_grad(a, false);
    TU_OK(duet_linear_module_create(4, 4, false, &rng, &b));
    TU_OK(duet_sequential_append(m, a));
    TU_OK(duet_sequential_append(m, b));
    TU_OK(duet_module_add_child(root, "mixed", m));
    TU_OK(duet_linear_module_create(4, 2, true, &rng, &m)); /* all trainable */
    TU_OK(duet_module_add_child(root, "trainable", m));
    duet_model *model = NULL;
    TU_OK(duet_model_create(&toy_ops, calloc(1, sizeof(toy)), root, &model));
    return model;
}

static void test_wrapping_rule(void **state) {
    (void)state;
    duet_model *model = toy_model();
    duet_named_tensors before = {0}, after = {0};
    TU_OK(duet_module_state(duet_model_module(model), &before));
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(model, tu_comm, cpu, 1, NULL, &w));
    assert_ptr_equal(duet_wrapper_model(w), model);
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    assert_string_equal(duet_wrapper_ddp_name(w, 0), "mixed");
    assert_string_equal(duet_wrapper_ddp_name(w, 1), "trainable");
    assert_false(duet_is_ddp(duet_model_part(model, "noparams")));
    assert_false(duet_is_ddp(duet_model_part(model, "frozen")));
    assert_true(duet_is_ddp(duet_model_part(model, "mixed")));
    assert_true(duet_is_ddp(duet_model_part(model, "trainable")));
    assert_ptr_equal(duet_wrapper_ddp(w, 1), duet_model_part(model, "trainable"));
    /* The mixed part's DDP tracks only its trainable parameter. */
    assert_int_equal(duet_ddp_num_tracked(duet_model_part(model, "mixed")), 1);
    assert_string_equal(duet_ddp_tracked_name(duet_model_part(model, "mixed"), 0), "1.weight");
    /* The state dict keeps its names and tensors: DDPs are transparent. */
    TU_OK(duet_module_state(duet_model_module(model), &after));
    assert_int_equal(before.count, after.count);
    for (size_t i = 0; i < before.count; i++) {
        assert_string_equal(before.items[i].name, after.items[i].name);
        assert_ptr_equal(before.items[i].tensor, after.items[i].tensor);
    }
    duet_named_tensors_clear(&before);
    duet_named_tensors_clear(&after);
    assert_ptr_equal(duet_model_comm(model), tu_comm);
    TU_OK(duet_wrapper_check_replicas(w));
    duet_wrapper_destroy(w);
}

static void test_devices(void **state) {
    (void)state;
    duet_wrapper *w = NULL;
    const char *two[] = {"0", "1"};
    assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, two, 2, NULL, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "exactly one device"));
    assert_non_null(strstr(duet_last_error(), "got 2 ['0', '1']"));
    const char *bogus[] = {"tpu:0"};
    assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, bogus, 1, NULL, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "tpu:0"));
    const char *cuda[] = {"cuda:0"};
    if (duet_cuda_device_count() == 0) {
        assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, cuda, 1, NULL, &w),
                         DUET_EDEVICE);
        assert_non_null(strstr(duet_last_error(), "cuda:0"));
        assert_null(w);
    }
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.dim = 1;
    assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, cpu, 1, &o, &w), DUET_EUNSUPPORTED);
    const char *zero[] = {"0"};
    TU_OK(duet_wrapper_create(toy_model(), tu_comm, zero, 1, NULL, &w));
    assert_true(duet_device_equal(duet_wrapper_device(w), duet_device_cpu()));
    duet_wrapper_destroy(w);
    /* device_ids sim:0: the model's parameters and buffers move there. The
     * parts are frozen, so that no DDP wraps them: DDP's gradient buckets
     * are host memory until they become device tensors (issue 31 item 4). */
    const char *sim[] = {"sim:0"};
    duet_model *frozen = toy_model();
    duet_module_set_requires_grad(duet_model_module(frozen), false);
    TU_OK(duet_wrapper_create(frozen, tu_comm, sim, 1, NULL, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 0);
    assert_true(duet_device_equal(duet_wrapper_device(w), duet_device_sim(0)));
    duet_named_tensors st;
    TU_OK(duet_module_state(duet_model_module(duet_wrapper_model(w)), &st));
    assert_true(st.count > 0);
    for (size_t i = 0; i < st.count; i++)
        assert_true(duet_device_equal(duet_tensor_device(st.items[i].tensor), duet_device_sim(0)));
    duet_named_tensors_clear(&st);
    duet_wrapper_destroy(w);
    /* No device_ids: the device kind at the local rank; a kind takes no index. */
    o = duet_wrapper_opts_default();
    o.device = "cpu";
    TU_OK(duet_wrapper_create(toy_model(), tu_comm, NULL, 0, &o, &w));
    assert_true(duet_device_equal(duet_wrapper_device(w), duet_device_cpu()));
    duet_wrapper_destroy(w);
    w = NULL;
    o.device = "cuda:1";
    assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, NULL, 0, &o, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "device kind 'cuda:1'"));
    o.device = "gpu";
    assert_int_equal(duet_wrapper_create(toy_model(), tu_comm, NULL, 0, &o, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "'gpu'"));
    /* The kind's default is the environment's DUET_DEVICE. */
    const char *saved = getenv("DUET_DEVICE");
    char *keep = saved != NULL ? strdup(saved) : NULL;
    setenv("DUET_DEVICE", "sim", 1);
    assert_string_equal(duet_wrapper_opts_default().device, "sim");
    unsetenv("DUET_DEVICE");
    assert_null(duet_wrapper_opts_default().device);
    if (keep != NULL) setenv("DUET_DEVICE", keep, 1);
    free(keep);
}

static void test_scatter_and_delegation(void **state) {
    (void)state;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(toy_model(), tu_comm, cpu, 1, NULL, &w));
    toy *t = duet_model_impl(duet_wrapper_model(w));
    duet_rng rng = duet_rng_make(2, 0);
    duet_tensor *lq = tu_randn(&rng, 2, (int64_t[]){3, 4}, 1);
    duet_batch b = {0};
    TU_OK(duet_batch_add_tensor(&b, "lq", lq));
    const char *paths[3] = {"x.png", "y.png", "z.png"};
    TU_OK(duet_batch_add_meta(&b, "lq_path", 3, paths));
    duet_log_vars log;
    TU_OK(duet_wrapper_train_step(w, &b, NULL, &log));
    /* On the CPU the scattered tensor is a view of the same floats; the
     * metadata is the caller's own. */
    assert_ptr_not_equal(t->seen, &b);
    assert_ptr_not_equal(t->seen_lq, lq);
    assert_ptr_equal(t->seen_data, lq->data);
    assert_ptr_equal(t->seen_meta, b.meta[0].values[0]);
    double n;
    assert_true(duet_log_vars_get(&log, "n", &n) && n == 3);
    duet_tensor *y = NULL, *z = NULL;
    TU_OK(duet_wrapper_forward(w, lq, &y));
    assert_ptr_equal(t->seen_data, lq->data);
    TU_OK(duet_module_forward(duet_ddp_inner(duet_model_part(duet_wrapper_model(w), "trainable")),
                              lq, &z));
    tu_assert_close(y->data, z->data, y->numel, 0, 0, "wrapper forward");
    duet_tensor_release(y);
    duet_tensor_release(z);
    duet_tape_clear();
    duet_val_output out = {0};
    TU_OK(duet_wrapper_val_step(w, &b, &out));
    assert_int_equal(out.nsamples, 3);
    assert_int_equal(out.output->shape[1], 2);
    duet_val_output_clear(&out);
    duet_batch_clear(&b);
    duet_tensor_release(lq);
    duet_wrapper_destroy(w);
}

/* ---- SRGAN through the wrapper --------------------------------------------------- */

static void test_srgan_wrapped_matches_plain(void **state) {
    (void)state;
    duet_model *plain = tu_tiny_srgan(3), *model = tu_tiny_srgan(3);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(model, tu_comm, cpu, 1, &o, &w));
    /* generator and discriminator wrapped; the losses and the frozen VGG not. */
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    assert_string_equal(duet_wrapper_ddp_name(w, 0), "generator");
    assert_string_equal(duet_wrapper_ddp_name(w, 1), "discriminator");
    assert_false(duet_is_ddp(duet_model_part(model, "perceptual_loss")));
    assert_false(duet_is_ddp(duet_model_part(model, "gan_loss")));
    duet_optimizer_set *op = tu_adam_pair(plain, 1e-3f), *ow = tu_adam_pair(model, 1e-3f);
    duet_batch b;
    tu_sr_batch(&b, 4, 2);
    duet_log_vars lp, lw;
    for (int it = 0; it < 3; it++) {
        TU_OK(duet_model_train_step(plain, &b, op, &lp));
        TU_OK(duet_wrapper_train_step(w, &b, ow, &lw));
        assert_int_equal(lp.count, lw.count);
        for (int i = 0; i < lp.count; i++) {
            assert_string_equal(lp.names[i], lw.names[i]);
            assert_true(lp.values[i] == lw.values[i]);
        }
    }
    duet_named_tensors sp = {0}, sw = {0};
    TU_OK(duet_module_state(duet_model_module(plain), &sp));
    TU_OK(duet_module_state(duet_model_module(model), &sw));
    assert_int_equal(sp.count, sw.count);
    for (size_t i = 0; i < sp.count; i++) {
        assert_string_equal(sp.items[i].name, sw.items[i].name);
        tu_assert_close(sw.items[i].tensor->data, sp.items[i].tensor->data,
                        sp.items[i].tensor->numel, 0, 0, sp.items[i].name);
    }
    duet_named_tensors_clear(&sp);
    duet_named_tensors_clear(&sw);
    duet_val_output out = {0};
    TU_OK(duet_wrapper_val_step(w, &b, &out));
    assert_int_equal(out.metrics.count, 2);
    duet_val_output_clear(&out);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(op);
    duet_optimizer_set_destroy(ow);
    duet_model_destroy(plain);
    duet_wrapper_destroy(w);
}

static void test_whole_model_ddp_fails(void **state) {
    (void)state;
    duet_model *model = tu_tiny_srgan(5);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.kind = DUET_WRAPPER_WHOLE_MODEL;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(model, tu_comm, cpu, 1, &o, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 1);
    /* The parts are still found, and the names do not change. */
    assert_non_null(duet_model_part(model, "generator"));
    assert_false(duet_is_ddp(duet_model_part(model, "generator")));
    duet_optimizer_set *s = tu_adam_pair(model, 1e-3f);
    duet_batch b;
    tu_sr_batch(&b, 6, 2);
    duet_log_vars log;
    int rc = DUET_OK;
    for (int it = 0; it < 3 && rc == DUET_OK; it++) rc = duet_wrapper_train_step(w, &b, s, &log);
    assert_int_equal(rc, DUET_EUNUSED);
    /* The generator step left the discriminator's gradients missing. */
    assert_non_null(strstr(duet_last_error(), "discriminator.conv0_0.weight"));
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(s);
    duet_wrapper_destroy(w);
}

static void test_build_wrapper(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "wrapper = { type = \"DistributedDataParallelWrapper\"; broadcast_buffers = false;\n"
        "            find_unused_parameters = false; bucket_cap_mb = 1.0; sync_bn = true;\n"
        "            device_ids = [\"cpu\"]; comm_hook = \"allreduce\"; };\n"
        "whole = { type = \"DistributedDataParallel\"; };\n"
        "two = { type = \"DistributedDataParallelWrapper\"; device_ids = [\"0\", \"1\"]; };\n"
        "bad = { type = \"DataParallel\"; };\n"
        "kind = { type = \"DistributedDataParallelWrapper\"; device = \"cpu\"; };\n"
        "kindbad = { type = \"DistributedDataParallelWrapper\"; device = \"gpu\"; };\n"
        "nogpu = { type = \"DistributedDataParallelWrapper\"; device_ids = [\"cuda:0\"]; };\n",
        "<test>", &cfg));
    duet_wrapper *w = NULL;
    TU_OK(duet_build_wrapper(cfg, "wrapper", toy_model(), tu_comm, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    duet_wrapper_destroy(w);
    TU_OK(duet_build_wrapper(cfg, "whole", toy_model(), tu_comm, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 1);
    assert_string_equal(duet_wrapper_ddp_name(w, 0), "");
    duet_wrapper_destroy(w);
    assert_int_equal(duet_build_wrapper(cfg, "two", toy_model(), tu_comm, &w), DUET_EINVAL);
    assert_int_equal(duet_build_wrapper(cfg, "bad", toy_model(), tu_comm, &w), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), "DistributedDataParallelWrapper"));
    /* No device_ids: the device key's kind at the local rank. */
    TU_OK(duet_build_wrapper(cfg, "kind", toy_model(), tu_comm, &w));
    assert_true(duet_device_equal(duet_wrapper_device(w), duet_device_cpu()));
    duet_wrapper_destroy(w);
    w = NULL;
    assert_int_equal(duet_build_wrapper(cfg, "kindbad", toy_model(), tu_comm, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "'gpu'"));
    if (duet_cuda_device_count() == 0) {
        assert_int_equal(duet_build_wrapper(cfg, "nogpu", toy_model(), tu_comm, &w),
                         DUET_EDEVICE);
        assert_non_null(strstr(duet_last_error(), "cuda:0"));
    } else {
        duet_config_mark_used(cfg, "nogpu");
    }
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
}

/* opts.trace_path gives each wrapped part's DDP its Chrome trace ("%s" the
 * part's name), written when the wrapper is destroyed. */
static void test_trace_per_part(void **state) {
    (void)state;
    char dir[] = "/tmp/duet_wrapper_traceXXXXXX", pattern[96], path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(pattern, sizeof pattern, "%s/%%s.json", dir);
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    wo.trace_path = pattern;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(toy_model(), tu_comm, cpu, 1, &wo, &w));
    duet_wrapper_destroy(w);
    const char *parts[2] = {"mixed", "trainable"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.json.rank0", dir, parts[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL) fail_msg("no trace file %s", path);
        char head[32] = {0};
        assert_true(fread(head, 1, sizeof head - 1, f) > 0);
        fclose(f);
        assert_non_null(strstr(head, "traceEvents"));
        assert_int_equal(remove(path), 0);
    }
    assert_int_equal(rmdir(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapping_rule),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_scatter_and_delegation),
        cmocka_unit_test(test_srgan_wrapped_matches_plain),
        cmocka_unit_test(test_whole_model_ddp_fails),
        cmocka_unit_test(test_build_wrapper),
        cmocka_unit_test(test_trace_per_part),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    return duet_comm_finalize() == DUET_OK ? failed : 1;
}
