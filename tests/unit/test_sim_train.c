/* A model trained on the simulated device sim:0 against the same model on
 * the CPU (issue 31 item 5): BasicRestorer around MSRResNet (conv2d,
 * leaky_relu, pixel_shuffle, upsample_bilinear, add, l1_loss, adam: ops
 * that are rows of the op table with sim kernels), built by the registry
 * from one config and one seed on both, three train_steps on one batch,
 * no DDP (the wrapper's DDP keeps host buckets until device buckets land).
 * On sim every kernel runs on the device's stream worker over resolved
 * storage, asynchronously from this thread, and the parameters, the Adam
 * moments' effect and the logged loss must equal the CPU run's bit for bit:
 * the same kernels in the same order. The host reaches sim storage only
 * through copies, which are counted. */
#include "testutil.h"

#include <string.h>

static const char *cfg_text =
    "model = { type = \"BasicRestorer\";\n"
    "  generator = { type = \"MSRResNet\"; mid_channels = 8; num_blocks = 2; "
    "upscale_factor = 4; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1.0; }; };\n";

static duet_model *make_model(void) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(cfg_text, "sim_train.cfg", &cfg));
    duet_rng rng = duet_rng_make(11, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    duet_config_destroy(cfg);
    return m;
}

/* lq (2, 3, 8, 8) and gt (2, 3, 32, 32) from a fixed rng, on dev. */
static void make_batch(duet_device dev, duet_batch *b) {
    duet_rng rng = duet_rng_make(5, 1);
    static float lq[2 * 3 * 8 * 8], gt[2 * 3 * 32 * 32];
    for (size_t i = 0; i < sizeof lq / sizeof lq[0]; i++) lq[i] = duet_rng_uniform(&rng);
    for (size_t i = 0; i < sizeof gt / sizeof gt[0]; i++) gt[i] = duet_rng_uniform(&rng);
    duet_tensor *tl = NULL, *tg = NULL;
    TU_OK(duet_tensor_from_host_on(dev, 4, (int64_t[]){2, 3, 8, 8}, lq, &tl));
    TU_OK(duet_tensor_from_host_on(dev, 4, (int64_t[]){2, 3, 32, 32}, gt, &tg));
    TU_OK(duet_batch_add_tensor(b, "lq", tl));
    TU_OK(duet_batch_add_tensor(b, "gt", tg));
    duet_tensor_release(tl);
    duet_tensor_release(tg);
}

typedef struct run {
    duet_model *model;
    duet_optimizer_set *opts;
    duet_batch batch;
    double loss[3];
} run;

static void train(run *r, duet_device dev) {
    r->model = make_model();
    TU_OK(duet_module_to_device(duet_model_module(r->model), dev));
    TU_OK(duet_optimizer_set_create(&r->opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 1e-3f;
    TU_OK(duet_optimizer_set_add_adam(r->opts, r->model, "generator", &a));
    make_batch(dev, &r->batch);
    for (int s = 0; s < 3; s++) {
        duet_log_vars log;
        TU_OK(duet_model_train_step(r->model, &r->batch, r->opts, &log));
        assert_true(duet_log_vars_get(&log, "loss_pix", &r->loss[s]));
    }
    TU_OK(duet_device_synchronize(dev));
}

static void release(run *r) {
    duet_batch_clear(&r->batch);
    duet_optimizer_set_destroy(r->opts);
    duet_model_destroy(r->model);
}

static void test_basic_restorer_on_sim_equals_cpu(void **state) {
    (void)state;
    run cpu = {0}, sim = {0};
    train(&cpu, duet_device_cpu());
    duet_sim_stats_reset(0);
    train(&sim, duet_device_sim(0));
    duet_sim_stats st;
    TU_OK(duet_sim_stats_get(0, &st));
    assert_true(st.launches > 100); /* the step's kernels ran on the device's stream */
    for (int s = 0; s < 3; s++) assert_true(sim.loss[s] == cpu.loss[s]);
    assert_true(cpu.loss[2] < cpu.loss[0]); /* it trains */
    duet_named_tensors pc = {0}, ps = {0};
    TU_OK(duet_module_state(duet_model_module(cpu.model), &pc));
    TU_OK(duet_module_state(duet_model_module(sim.model), &ps));
    assert_int_equal(pc.count, ps.count);
    for (size_t i = 0; i < pc.count; i++) {
        duet_tensor *a = pc.items[i].tensor, *b = ps.items[i].tensor;
        assert_string_equal(pc.items[i].name, ps.items[i].name);
        assert_true(duet_tensor_device(b).type == DUET_DEVICE_SIM);
        float *ha = malloc(sizeof(float) * (size_t)a->numel), *hb = malloc(sizeof(float) * (size_t)b->numel);
        assert_non_null(ha);
        assert_non_null(hb);
        TU_OK(duet_tensor_copy_to_host(a, ha));
        TU_OK(duet_tensor_copy_to_host(b, hb));
        if (memcmp(ha, hb, sizeof(float) * (size_t)a->numel) != 0)
            fail_msg("%s differs between sim:0 and the CPU after 3 steps", pc.items[i].name);
        free(ha);
        free(hb);
    }
    duet_named_tensors_clear(&pc);
    duet_named_tensors_clear(&ps);
    release(&cpu);
    release(&sim);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_restorer_on_sim_equals_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
