/* duet under mpiexec -n N (N = 1, 2, 3) against MMEditing 0.16.1's own
 * distributed training in float64 (issue 19): the files
 * <model>_np<N>.safetensors of tests/ref/gen_mmedit_refs.py --ranks, where N
 * replicas of MMEditing's model run its train_step on their shares of a
 * global batch of 6 in lockstep, their gradients averaged at every
 * optimizer step as DDP averages them. Here each rank trains its share
 * under duet's DistributedDataParallelWrapper with its defaults (as
 * MMEditing's: no SyncBN, buffers not broadcast), 10 steps, and after each
 * step rank 0's generator and discriminator (or generators and
 * discriminators) must be no farther from the float64 run than 3 times
 * PyTorch float32's own distance, run the same way
 * (tu_compare_distance: |x32 - x64| / |x64 - init| over each part's state
 * entries, running statistics included; where it misses, the same without
 * Adam's few noise-decided elements on both sides, within caps). Every rank
 * also checks that the parameters are bit-identical to rank 0's.
 *
 * The DeepFills run 4 and 3 steps, not 10 (what their float64 and float32
 * runs cost in gen_mmedit_refs.py's ddp_steps), PConvInpaintor 4 (its
 * 4.5M parameters make a step's state 36 MB), and the DeepFills' every state
 * entry, their spectral-norm buffers included, must be bit-identical on
 * every rank.
 *
 * Usage: mpiexec -n N test_mmedit_ddp MODEL (srgan, esrgan, pix2pix,
 * cyclegan, basic_restorer, edsr, rdn, pconv_inpaintor, gl_inpaintor,
 * deepfill_v1_inpaintor, deepfillv2, realesrnet, realesrgan), with DUET_REF_DIR the
 * directory of the files. */
#include "testutil_gan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cpu[] = {"cpu"};
static const char *model_name;

typedef struct ddp_model {
    const char *name;
    duet_model *(*create)(void);
    double lr, beta1;
    const char *parts[2];
    int nparts;
    int steps;             /* the file's: 10; DeepFillv1 and PConv 4, DeepFillv2 3 (ddp_steps) */
    bool state_identical;  /* every state entry bit-identical on every rank (no BatchNorm) */
    double beta2;          /* 0: Adam's 0.999 */
} ddp_model;

/* The tiny models of test_ref_<model>.c, as gen_mmedit_refs.py's specs
 * shrink MMEditing's configs; Pix2Pix without dropout and CycleGAN without
 * pools (gen_mmedit_refs.py says why). */
static void tiny_perceptual(duet_perceptual_loss_opts *p) {
    int cfg[5] = {8, 8, 0, 16, 16};
    p->ncfg = 5;
    memcpy(p->cfg, cfg, sizeof cfg);
    p->layer_ids[0] = 7;
    p->layer_weights[0] = 1.0f;
}

static duet_model *srgan(void) {
    duet_srgan_opts o = duet_srgan_opts_default();
    o.generator.mid_channels = 16;
    o.generator.num_blocks = 2;
    o.discriminator.mid_channels = 8;
    o.discriminator.input_size = 128;
    tiny_perceptual(&o.perceptual_loss);
    o.perceptual_loss.norm_img = false;
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    return m;
}

static duet_model *esrgan(void) {
    duet_esrgan_opts o = duet_esrgan_opts_default();
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 2;
    o.generator.growth_channels = 4;
    o.discriminator.mid_channels = 8;
    o.discriminator.input_size = 128;
    tiny_perceptual(&o.perceptual_loss);
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_esrgan_create(&o, &rng, &m));
    return m;
}

static duet_model *pix2pix(void) {
    duet_pix2pix_opts o = duet_pix2pix_opts_default();
    o.generator.num_down = 6;
    o.generator.base_channels = 4;
    o.generator.use_dropout = false;
    o.discriminator.base_channels = 4;
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_pix2pix_create(&o, &rng, &m));
    return m;
}

static duet_model *cyclegan(void) {
    duet_cyclegan_opts o = duet_cyclegan_opts_default();
    o.generator.base_channels = 4;
    o.generator.num_blocks = 1;
    o.discriminator.base_channels = 4;
    o.discriminator.num_conv = 2;
    o.buffer_size = 0;
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_cyclegan_create(&o, &rng, &m));
    return m;
}

static duet_model *basic_restorer(void) {
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    o.generator.mid_channels = 16;
    o.generator.num_blocks = 2;
    duet_rng rng = duet_rng_make(3, 0);
    duet_model *m = NULL;
    TU_OK(duet_basic_restorer_create(&o, &rng, &m));
    return m;
}

/* test_ref_sr_backbones.c's models: BasicRestorer around EDSR and RDN. */
static duet_model *edsr(void) { return tu_sr_backbone_ref_model("edsr", 3); }
static duet_model *rdn(void) { return tu_sr_backbone_ref_model("rdn", 3); }

/* test_ref_pconv_inpaintor.c's model: PConvInpaintor with BatchNorm (each
 * rank's own batch statistics, as MMEditing's DDP without SyncBN). */
static duet_model *pconv_inpaintor(void) { return tu_pconv_ref_model(5); }

/* test_ref_gl_inpaintor.c's model: GLEncoderDecoder without norm, GLDiscs
 * of 16 channels with BatchNorm, the schedule iter_tc 0, iter_td 1. */
static duet_model *gl_inpaintor(void) {
    duet_gl_inpaintor_opts o = tu_tiny_gl_inpaintor_opts();
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_gl_inpaintor_create(&o, &rng, &m));
    return m;
}

/* test_ref_deepfill_v1_inpaintor.c's model: tu_tiny_deepfill_v1_opts with
 * disc_step 2; the penalty's alphas the global batch's, each rank its slice
 * (draw_alpha), and its gradients reduced as every other's (duet's
 * semantics, which gen_mmedit_refs.py's replicas follow; MMEditing's own
 * DDP leaves them unreduced, docs/architecture.md). */
static duet_model *deepfill_v1_inpaintor(void) {
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.disc_step = 2;
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_two_stage_inpaintor_create(&o, &rng, &m));
    return m;
}

/* test_ref_deepfillv2.c's model: TwoStageInpaintor with the SN-PatchGAN,
 * whose spectral-norm buffers each rank moves on its own (not broadcast). */
static duet_model *deepfillv2(void) { return tu_deepfillv2_ref_model(); }

/* test_ref_real_esrgan.c's models: both stages of RealESRGAN (the GAN
 * stage's spectral-norm u and v moved by each rank on its own). */
static duet_model *realesrnet(void) { return tu_real_esrgan_ref_model("realesrnet", 3); }
static duet_model *realesrgan(void) { return tu_real_esrgan_ref_model("realesrgan", 3); }

static const ddp_model models[] = {
    {"srgan", srgan, 1e-4, 0.9, {"generator", "discriminator"}, 2, 10, false, 0},
    {"esrgan", esrgan, 1e-4, 0.9, {"generator", "discriminator"}, 2, 10, false, 0},
    {"pix2pix", pix2pix, 2e-4, 0.5, {"generator", "discriminator"}, 2, 10, false, 0},
    {"cyclegan", cyclegan, 2e-4, 0.5, {"generators", "discriminators"}, 2, 10, false, 0},
    {"basic_restorer", basic_restorer, 2e-4, 0.9, {"generator", NULL}, 1, 10, false, 0},
    {"edsr", edsr, 1e-4, 0.9, {"generator", NULL}, 1, 10, true, 0},
    {"rdn", rdn, 1e-4, 0.9, {"generator", NULL}, 1, 10, true, 0},
    {"pconv_inpaintor", pconv_inpaintor, 2e-4, 0.9, {"generator", NULL}, 1, 4, false, 0},
    {"gl_inpaintor", gl_inpaintor, 4e-4, 0.9, {"generator", "disc"}, 2, 10, false, 0},
    {"deepfill_v1_inpaintor", deepfill_v1_inpaintor, 1e-4, 0.9, {"generator", "disc"}, 2, 4,
     true, 0},
    {"deepfillv2", deepfillv2, 1e-4, 0.9, {"generator", "disc"}, 2, 3, true, 0},
    {"realesrnet", realesrnet, 2e-4, 0.9, {"generator", NULL}, 1, 10, true, 0.99},
    {"realesrgan", realesrgan, 1e-4, 0.9, {"generator", "discriminator"}, 2, 10, true, 0.99},
};

/* The batch keys of each model's file: the SR models' lq and gt, the
 * translation models' img_a and img_b (with the meta MMEditing's
 * train_step reads, which duet's does not). */
static void add_batch(duet_batch *b, const duet_st *st) {
    if (duet_st_has(st, "gt_img")) { /* an inpaintor's (mask_bbox for box holes) */
        static const char *const keys[4] = {"gt_img", "mask", "masked_img", "mask_bbox"};
        tu_ref_batch(b, st, keys, 4);
        return;
    }
    if (duet_st_has(st, "gt_unsharp")) { /* RealESRGAN's (the sharpened GT) */
        static const char *const keys[3] = {"lq", "gt", "gt_unsharp"};
        assert_int_equal(tu_ref_batch(b, st, keys, 3), 3);
        return;
    }
    static const char *const keys[2][2] = {{"lq", "gt"}, {"img_a", "img_b"}};
    assert_int_equal(tu_ref_batch(b, st, keys[duet_st_has(st, "lq") ? 0 : 1], 2), 2);
}

/* Every state entry (DeepFillv2's spectral-norm u and v included, which
 * each rank's power iteration moves on its own from the weights, with no
 * broadcast) bit-identical to rank 0's; every rank fails together. */
static void assert_state_identical(duet_module *mod) {
    duet_named_tensors s = {0};
    TU_OK(duet_module_state(mod, &s));
    int32_t bad = 0;
    char first[128] = "";
    for (size_t i = 0; i < s.count; i++) {
        const duet_tensor *t = s.items[i].tensor;
        float *root = malloc((size_t)t->numel * sizeof *root);
        assert_non_null(root);
        memcpy(root, t->data, (size_t)t->numel * sizeof *root);
        TU_OK(duet_comm_bcast(tu_comm, root, (size_t)t->numel, DUET_DTYPE_F32, 0));
        if (memcmp(root, t->data, (size_t)t->numel * sizeof *root) != 0 && bad++ == 0)
            snprintf(first, sizeof first, "%s", s.items[i].name);
        free(root);
    }
    duet_named_tensors_clear(&s);
    int32_t all = bad;
    TU_OK(duet_comm_allreduce(tu_comm, &all, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    if (all != 0 && bad == 0)
        fail_msg("rank %d: %d state entries of other ranks differ from rank 0's", tu_rank, all);
    if (all != 0)
        fail_msg("rank %d: %d state entries differ from rank 0's, the first %s", tu_rank, bad,
                 first);
}

static void test_ddp_distance_from_mmedit_float64(void **state) {
    (void)state;
    const ddp_model *spec = NULL;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].name, model_name) == 0) spec = &models[i];
    if (spec == NULL) fail_msg("unknown model '%s'", model_name);
    char file[64];
    snprintf(file, sizeof file, "%s_np%d.safetensors", spec->name, tu_size);
    duet_st *st = tu_ref_load(file);
    char ranks[16];
    snprintf(ranks, sizeof ranks, "%d", tu_size);
    assert_non_null(duet_st_meta(st, "ranks"));
    assert_string_equal(duet_st_meta(st, "ranks"), ranks);
    duet_model *m = spec->create();
    tu_ref_load_state(duet_model_module(m), st, "init.");
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(m, tu_comm, cpu, 1, NULL, &w));
    duet_model *wm = duet_wrapper_model(w);
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)spec->lr;
    a.beta1 = (float)spec->beta1;
    if (spec->beta2 != 0.0) a.beta2 = (float)spec->beta2;
    for (int p = 0; p < spec->nparts; p++)
        TU_OK(duet_optimizer_set_add_adam(opts, wm, spec->parts[p], &a));
    duet_batch whole = {0}, local = {0};
    add_batch(&whole, st);
    const int64_t n = whole.nsamples / tu_size;
    assert_int_equal(n * tu_size, whole.nsamples);
    TU_OK(duet_batch_slice(&local, &whole, tu_rank * n, n));
    /* DUET_TEST_GATE=kinks: the fast path's yardstick (tu_distance_kink_gate). */
    const char *gate_env = getenv("DUET_TEST_GATE");
    const bool kinks = gate_env != NULL && strcmp(gate_env, "kinks") == 0;
    tu_kink_gate gate = {0};
    int step = 1;
    for (char key[32] = "f32dist1."; ; snprintf(key, sizeof key, "f32dist%d.", ++step)) {
        char k0[64];
        snprintf(k0, sizeof k0, "%s%s", key, spec->parts[0]);
        if (!duet_st_has(st, k0)) break;
        duet_log_vars log;
        TU_OK(duet_wrapper_train_step(w, &local, opts, &log));
        /* Rank 0 judges its state; every rank then fails together, so that
         * none is left waiting in the next step's allreduce. */
        char why[512] = "";
        int32_t ok = 1;
        if (tu_rank == 0 && kinks)
            ok = tu_distance_kink_gate(&gate, duet_model_module(wm), st, step, spec->parts,
                                       spec->nparts, why, sizeof why);
        else if (tu_rank == 0)
            ok = tu_distance_within(duet_model_module(wm), st, step, spec->parts, spec->nparts,
                                    why, sizeof why);
        TU_OK(duet_comm_bcast(tu_comm, &ok, 1, DUET_DTYPE_I32, 0));
        if (!ok) fail_msg("%s", tu_rank == 0 ? why : "rank 0 found its state too far");
    }
    assert_int_equal(step - 1, spec->steps);
    tu_gan_assert_params_identical(wm);
    if (spec->state_identical) assert_state_identical(duet_model_module(wm));
    duet_batch_clear(&local);
    duet_batch_clear(&whole);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
    duet_st_destroy(st);
}

static int setup(void **state) {
    if (tu_world_setup(state) != 0) return -1;
    duet_log_set_rank(tu_rank, false);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mpiexec -n N %s MODEL\n", argv[0]);
        return 2;
    }
    model_name = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_distance_from_mmedit_float64),
    };
    int failed = cmocka_run_group_tests(tests, setup, tu_world_teardown);
    duet_comm_finalize();
    return failed;
}
