/* DeepFillv2's TwoStageInpaintor under the DistributedDataParallelWrapper
 * with broadcast_buffers = false (MMEditing's, and the tiny config's), run
 * under mpiexec -n 1, 2 and 3 with a global batch of 6 72x72 images:
 * - N ranks with 6/N samples each match one process with the whole batch
 *   over 4 iterations: every log value, every parameter to the GAN tests'
 *   tolerances (the discriminator's last bias, whose gradient counts signs,
 *   to the noise-level bound: mark_sign_count_bias says why),
 *   bit-identical parameters on every rank.
 * - The spectral norm's power-iteration vectors (disc.convK.conv.weight_u,
 *   weight_v) are buffers that each rank updates in each of its own
 *   training forwards (three per iteration: fake, real, the generator's
 *   adversarial term) and that no one broadcasts. What keeps them
 *   world-size invariant is that the power iteration reads the weights and
 *   the vectors alone, never the batch: every rank runs the same number of
 *   forwards on bit-identical weights from the same start (the DDP's
 *   initial broadcast), so the buffers stay bit-identical on every rank
 *   with no communication, and equal to one process's to the buffer
 *   tolerance (1e-4 / 1e-6). Both are checked after every iteration.
 * - one DDP around the whole model fails on every rank with the error
 *   naming a parameter that got no gradient.
 * Every hole is a 24x24 box: the L1 losses are normalised by each rank's
 * own hole (valid) area, as MMEditing's mask-weighted L1 under DDP is, so
 * with holes of different areas N ranks would weigh the samples differently
 * than one process (test_gl_inpaintor_mpi.c says the same of GL). */
#include "testutil_gan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 6, S = 72, HOLE = 24, ITERS = 4 };
static const char *cpu[] = {"cpu"};

/* deepfillv2_256x256_8x2_places.py's model with every part narrowed
 * (channel_factor 0.125: encoders of 4 to 16 channels) and an 8-channel
 * SN-PatchGAN. */
static const char model_cfg[] =
    "model = {\n"
    "  type = \"TwoStageInpaintor\";\n"
    "  disc_input_with_mask = true;\n"
    "  encdec = {\n"
    "    type = \"DeepFillEncoderDecoder\";\n"
    "    stage1 = {\n"
    "      type = \"GLEncoderDecoder\";\n"
    "      encoder = { type = \"DeepFillEncoder\"; conv_type = \"gated_conv\";\n"
    "                  channel_factor = 0.125; padding_mode = \"reflect\"; };\n"
    "      decoder = { type = \"DeepFillDecoder\"; conv_type = \"gated_conv\"; in_channels = 16;\n"
    "                  channel_factor = 0.125; out_act_cfg = { type = \"Tanh\"; };\n"
    "                  padding_mode = \"reflect\"; };\n"
    "      dilation_neck = { type = \"GLDilationNeck\"; in_channels = 16;\n"
    "                        conv_type = \"gated_conv\"; act_cfg = { type = \"ELU\"; };\n"
    "                        padding_mode = \"reflect\"; };\n"
    "    };\n"
    "    stage2 = {\n"
    "      type = \"DeepFillRefiner\";\n"
    "      encoder_attention = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_attention\";\n"
    "                            conv_type = \"gated_conv\"; channel_factor = 0.125;\n"
    "                            padding_mode = \"reflect\"; };\n"
    "      encoder_conv = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_conv\";\n"
    "                       conv_type = \"gated_conv\"; channel_factor = 0.125;\n"
    "                       padding_mode = \"reflect\"; };\n"
    "      dilation_neck = { type = \"GLDilationNeck\"; in_channels = 16;\n"
    "                        conv_type = \"gated_conv\"; act_cfg = { type = \"ELU\"; };\n"
    "                        padding_mode = \"reflect\"; };\n"
    "      contextual_attention = { type = \"ContextualAttentionNeck\"; in_channels = 16;\n"
    "                               conv_type = \"gated_conv\"; padding_mode = \"reflect\"; };\n"
    "      decoder = { type = \"DeepFillDecoder\"; in_channels = 32; conv_type = \"gated_conv\";\n"
    "                  channel_factor = 0.125; out_act_cfg = { type = \"Tanh\"; };\n"
    "                  padding_mode = \"reflect\"; };\n"
    "    };\n"
    "  };\n"
    "  disc = { type = \"MultiLayerDiscriminator\"; in_channels = 4; max_channels = 8;\n"
    "    fc_in_channels = \"None\"; num_convs = 6; norm_cfg = \"None\";\n"
    "    act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
    "    out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
    "    with_spectral_norm = true; };\n"
    "  stage1_loss_type = [\"loss_l1_hole\", \"loss_l1_valid\"];\n"
    "  stage2_loss_type = [\"loss_l1_hole\", \"loss_l1_valid\", \"loss_gan\"];\n"
    "  loss_gan = { type = \"GANLoss\"; gan_type = \"hinge\"; loss_weight = 0.1; };\n"
    "  loss_l1_hole = { type = \"L1Loss\"; loss_weight = 1.0; };\n"
    "  loss_l1_valid = { type = \"L1Loss\"; loss_weight = 1.0; };\n"
    "  train_cfg = { disc_step = 1; };\n"
    "};\n";

/* The generator's weights as gen_mmedit_refs.py's DeepFillv2 reference
 * draws them (mmcv's kaiming normal, fan_out, times 2; biases uniform in
 * +-0.1), not DeepFillEncoderDecoder's N(0, 0.02): under that the gated
 * features vanish layer by layer and 46% of the generator's gradient
 * elements sit below 3e-4 of their tensor's largest, where float32
 * rounding decides Adam's first moves (the noise-level elements that
 * tu_gan_assert_model_close bounds). */
static void spread_generator_weights(duet_model *m) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(duet_model_part(m, "generator"), false, &l));
    duet_rng r = duet_rng_make(2030, 0);
    for (size_t i = 0; i < l.count; i++) {
        duet_tensor *t = l.items[i].tensor;
        if (t->ndim == 4) { /* (out, in, kh, kw): fan_out = out * kh * kw */
            const double fan_out = (double)(t->shape[0] * t->shape[2] * t->shape[3]);
            const float std = (float)(2.0 * sqrt(2.0 / fan_out));
            for (int64_t k = 0; k < t->numel; k++) t->data[k] = std * duet_rng_normal(&r);
        } else {
            for (int64_t k = 0; k < t->numel; k++)
                t->data[k] = 0.2f * duet_rng_uniform(&r) - 0.1f;
        }
    }
    duet_named_tensors_clear(&l);
}

static duet_model *tiny_dfv2(void) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(model_cfg, "<two_stage_mpi>", &cfg));
    duet_rng rng = duet_rng_make(2029, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    spread_generator_weights(m);
    return m;
}

/* Iteration it's global batch: images in [-0.8, 0.8], one HOLE x HOLE box
 * per sample. */
static void batch_of(duet_batch *b, int it) {
    duet_rng r = duet_rng_make(400 + (uint64_t)it, 0);
    duet_tensor *gt = tu_rand(&r, 4, (int64_t[]){B, 3, S, S}, -0.8f, 0.8f);
    int boxes[B][4];
    for (int n = 0; n < B; n++) {
        boxes[n][0] = 4 + (int)(duet_rng_uniform(&r) * (S - HOLE - 8));
        boxes[n][1] = 4 + (int)(duet_rng_uniform(&r) * (S - HOLE - 8));
        boxes[n][2] = boxes[n][3] = HOLE;
    }
    tu_inpainting_batch(b, gt, boxes, false);
}

/* The spectral norm's buffers of m: equal bit for bit to rank 0's on every
 * rank, and to the one-process model's within 1e-4 / 1e-6. The ranks agree
 * on the outcome before any fails, so that none is left waiting in the
 * next collective. Returns how many (two per conv). */
static int check_sn_buffers(duet_model *m, duet_model *one, int it) {
    duet_named_tensors l = {0}, lo = {0};
    TU_OK(duet_module_named_buffers(duet_model_part(m, "disc"), &l));
    TU_OK(duet_module_named_buffers(duet_model_part(one, "disc"), &lo));
    assert_int_equal(l.count, lo.count);
    int n = 0;
    int32_t same = 1;
    char first[128] = "";
    for (size_t i = 0; i < l.count; i++) {
        const char *name = l.items[i].name;
        const size_t len = strlen(name);
        if (len < 8 || (strcmp(name + len - 8, "weight_u") != 0 &&
                        strcmp(name + len - 8, "weight_v") != 0))
            continue;
        n++;
        duet_tensor *t = l.items[i].tensor;
        assert_string_equal(name, lo.items[i].name);
        float *root = malloc((size_t)t->numel * sizeof(float));
        assert_non_null(root);
        memcpy(root, t->data, (size_t)t->numel * sizeof(float));
        TU_OK(duet_comm_bcast(tu_comm, root, (size_t)t->numel, DUET_DTYPE_F32, 0));
        if (same && memcmp(root, t->data, (size_t)t->numel * sizeof(float)) != 0) {
            same = 0;
            snprintf(first, sizeof first, "%s", name);
        }
        free(root);
    }
    int32_t all = same;
    TU_OK(duet_comm_allreduce(tu_comm, &all, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    if (all != tu_size)
        fail_msg("rank %d of %d, iteration %d: %s%s", tu_rank, tu_size, it,
                 same ? "another rank's spectral-norm buffers differ from rank 0's" : first,
                 same ? "" : " differs from rank 0's (buffers are not broadcast)");
    for (size_t i = 0; i < l.count; i++) {
        const char *name = l.items[i].name;
        if (strstr(name, "weight_u") != NULL || strstr(name, "weight_v") != NULL)
            tu_assert_close(l.items[i].tensor->data, lo.items[i].tensor->data,
                            l.items[i].tensor->numel, 1e-4, 1e-6, name);
    }
    duet_named_tensors_clear(&l);
    duet_named_tensors_clear(&lo);
    return n;
}

/* The last conv's bias in the discriminator step: every prediction is
 * inside the hinge's active side (|pred| << 1), so the loss's gradient in
 * each is +-1/n and the bias gradient of channel c is (the fake positions'
 * out-LeakyReLU slopes, 1 or 0.2 by the sign of the conv's output, minus
 * the real ones') / n: a count of signs, not a magnitude. Once the first
 * update has moved the noise-level elements by Adam's +-lr either way, a
 * prediction near 0 may land on the other side in N ranks than in one
 * process, moving that gradient by 0.8 / n, about its own size, and the
 * bias by up to lr per later step (0.63 lr at 3 ranks after 4 iterations,
 * 2 of its 8 elements; every other parameter is within 0.015 lr). Its
 * elements are held to the noise-level bound. */
static void mark_sign_count_bias(tu_noise_masks *nm, duet_model *ref) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(ref), false, &l));
    assert_int_equal(l.count, nm->count);
    bool found = false;
    for (size_t i = 0; i < l.count; i++) {
        if (strcmp(l.items[i].name, "disc.conv6.conv.bias") != 0) continue;
        for (int64_t k = 0; k < l.items[i].tensor->numel; k++) nm->mask[i][k] = true;
        found = true;
    }
    assert_true(found);
    duet_named_tensors_clear(&l);
}

static void test_ranks_match_one_process(void **state) {
    (void)state;
    duet_model *ref = tiny_dfv2();
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    assert_false(wo.broadcast_buffers);
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_dfv2(), tu_comm, cpu, 1, &wo, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    duet_model *m = duet_wrapper_model(w);
    tu_noise_masks nm = {0};
    const tu_gan_run run = {batch_of, 1e-4f, ITERS, B, 1e-6, 1.0 / 12};
    duet_optimizer_set *oref = tu_adam_pair(ref, run.lr), *ow = tu_adam_pair(m, run.lr);
    const int64_t n = B / tu_size;
    for (int it = 0; it < ITERS; it++) {
        duet_batch b = {0}, local = {0};
        batch_of(&b, it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars lr, lw;
        TU_OK(duet_model_train_step(ref, &b, oref, &lr));
        tu_noise_masks_update(&nm, duet_model_module(ref));
        TU_OK(duet_wrapper_train_step(w, &local, ow, &lw));
        assert_int_equal(lr.count, 8); /* and MMEditing's total "loss" */
        assert_int_equal(lw.count, lr.count);
        for (int i = 0; i < lw.count; i++) {
            /* Averaged over the ranks, each mean is the whole batch's. The
             * adversarial term, 0.1 times the mean of the discriminator's
             * predictions (which cancel to about 1/50 of their own size),
             * comes after the discriminator's update, in which elements
             * with a gradient at float32 noise move by Adam's +-lr either
             * way: it is 2.7e-7 (2 ranks) and 5.9e-7 (3 ranks) from one
             * process's already in the first iteration, when every other
             * value is within 1e-8; atol 2e-6 for it. */
            const double atol = strcmp(lw.names[i], "stage2_loss_g_fake") == 0 ? 2e-6 : 1e-7;
            assert_string_equal(lw.names[i], lr.names[i]);
            if (!(fabs(lw.values[i] - lr.values[i]) <= 1e-4 * fabs(lr.values[i]) + atol))
                fail_msg("rank %d, iteration %d: %s: %.8g, one process %.8g", tu_rank, it,
                         lw.names[i], lw.values[i], lr.values[i]);
        }
        assert_int_equal(check_sn_buffers(m, ref, it), 12);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    duet_optimizer_set_destroy(oref);
    duet_optimizer_set_destroy(ow);
    mark_sign_count_bias(&nm, ref);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 1e-4f, 3, B, 1e-6, 0};
    tu_gan_whole_model_fails_everywhere(tiny_dfv2(), &run, 2, "generator.");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one_process),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
