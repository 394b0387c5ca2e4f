/* CycleGAN under the DistributedDataParallelWrapper, run under mpiexec -n
 * 1, 2 and 3 with a global batch of 6:
 * - N ranks with 6/N samples each match one process with the whole batch
 *   after 3 iterations (instance norm couples no samples, so no SyncBN is
 *   needed; every state entry to 1e-4 but the biases before an
 *   InstanceNorm, whose gradient is float noise; the pools' images and
 *   draws too), with bit-identical parameters and pools on every rank. One
 *   DDP holds both generators and one both discriminators, in small
 *   buckets that straddle the two networks: each reduces once per step.
 *   MMEditing's order (discriminators first) means the generators' DDP is
 *   armed by the forward, sees the discriminators' backward reach none of
 *   its parameters, and reduces in the generators' backward; with
 *   disc_steps 2 a step's armed forward is followed by no generator
 *   backward at all.
 * - one DDP around the whole model fails with the clear error on every
 *   rank, without a hang.
 * - the get_module trap: a training forward of generators.a that reaches
 *   around its DDP (MMEditing's get_module(self.generators)['a'](x)) makes
 *   the backward fail on every rank instead of leaving its gradients
 *   unreduced. Each rank computes the single-process reference itself. */
#include "testutil_gan.h"

#include <math.h>
#include <string.h>

enum { B = 6, ITERS = 3 };
static const char *cpu[] = {"cpu"};

/* The models' disc_steps and identity loss weight (changed by
 * test_gated_generator_step and test_no_identity_loss). */
static int disc_steps = 1;
static float id_weight = 0.5f;

static duet_model *tiny_cyclegan(void) {
    duet_cyclegan_opts o = duet_cyclegan_opts_default();
    o.generator.base_channels = 4;
    o.generator.num_blocks = 1;
    o.discriminator.base_channels = 4;
    o.discriminator.num_conv = 2;
    o.buffer_size = 4; /* full after 4 of step 1's 6 images: every step draws */
    o.pool_seed = 99;
    o.disc_steps = disc_steps;
    o.id_loss_weight = id_weight;
    duet_rng rng = duet_rng_make(2027, 0);
    duet_model *m = NULL;
    TU_OK(duet_cyclegan_create(&o, &rng, &m));
    return m;
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 2e-4f;
    a.beta1 = 0.5f;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generators", &a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "discriminators", &a));
    return s;
}

static void global_batch(duet_batch *b, uint64_t seed) {
    duet_rng r = duet_rng_make(seed, 0);
    duet_tensor *a = tu_rand(&r, 4, (int64_t[]){B, 3, 32, 32}, -1, 1);
    duet_tensor *c = tu_rand(&r, 4, (int64_t[]){B, 3, 32, 32}, -0.5f, 0.5f);
    TU_OK(duet_batch_add_tensor(b, "img_a", a));
    TU_OK(duet_batch_add_tensor(b, "img_b", c));
    duet_tensor_release(a);
    duet_tensor_release(c);
}

/* See test_pix2pix_mpi.c: a conv bias that an InstanceNorm follows. */
static bool is_bias_before_in(duet_module *m, const duet_tensor *t) {
    duet_module *conv = duet_module_child(m, "conv");
    if (conv != NULL && duet_module_child(m, "in") != NULL && duet_module_param(conv, "bias") == t)
        return true;
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        if (is_bias_before_in(duet_module_child_at(m, i), t)) return true;
    return false;
}

/* The gradients of the first step (the averaged ones on each rank, the
 * whole batch's in the reference), before Adam amplifies float noise:
 * 1e-3 relative plus 1e-4 of each tensor's largest; biases before an
 * InstanceNorm (gradient zero but for noise) to 1e-6. */
static void compare_grads(duet_model *m, duet_model *ref) {
    duet_named_tensors a = {0}, b = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(m), false, &a));
    TU_OK(duet_module_named_parameters(duet_model_module(ref), false, &b));
    assert_int_equal(a.count, b.count);
    for (size_t i = 0; i < a.count; i++) {
        const duet_tensor *g = a.items[i].tensor, *r = b.items[i].tensor;
        double mx = 0;
        for (int64_t k = 0; k < r->numel; k++) mx = fmax(mx, fabs(r->grad[k]));
        const bool noise = is_bias_before_in(duet_model_module(m), g);
        char what[160];
        snprintf(what, sizeof what, "rank %d: grad of %s", tu_rank, a.items[i].name);
        tu_assert_close(g->grad, r->grad, g->numel, noise ? 0 : 1e-3, noise ? 1e-6 : 1e-4 * mx,
                        what);
    }
    duet_named_tensors_clear(&a);
    duet_named_tensors_clear(&b);
}

/* The model's save_state (the pools' images) as a loaded file. */
static duet_st *model_state(duet_model *m, const char *dir, const char *name) {
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_model_save_state(m, w));
    char path[300];
    tu_path(path, sizeof path, dir, name);
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    return st;
}

/* True when one of ddp's buckets holds parameters of both networks "a."
 * and "b." (buffer order j is tracked parameter count - 1 - j). */
static bool bucket_straddles(duet_module *ddp) {
    const size_t nt = duet_ddp_num_tracked(ddp);
    for (size_t k = 0; k < duet_ddp_num_buckets(ddp); k++) {
        size_t first = 0, np = 0;
        TU_OK(duet_ddp_bucket(ddp, k, NULL, NULL, &first, &np));
        bool a = false, b = false;
        for (size_t j = first; j < first + np; j++) {
            const char *name = duet_ddp_tracked_name(ddp, nt - 1 - j);
            a |= name[0] == 'a';
            b |= name[0] == 'b';
        }
        if (a && b) return true;
    }
    return false;
}

/* small_buckets: the parts wrapped as the wrapper does, by hand, with
 * buckets of ~1000 floats (the wrapper has no first-bucket setting), so
 * that buckets cross from network b to network a. */
static void ranks_match_one_process(bool small_buckets) {
    const int64_t n = B / tu_size;
    duet_log_vars log;
    duet_model *ref = tiny_cyclegan();
    duet_optimizer_set *ro = adam_pair(ref);
    duet_model *m = tiny_cyclegan();
    duet_wrapper *w = NULL;
    duet_module *gd = NULL, *dd = NULL;
    if (small_buckets) {
        duet_ddp_opts d = duet_ddp_opts_default();
        d.broadcast_buffers = false;
        d.bucket_cap_mb = 0.004;
        d.first_bucket_cap_mb = 0.001;
        TU_OK(duet_ddp_wrap_child(duet_model_module(m), "generators", tu_comm, &d, &gd));
        TU_OK(duet_ddp_wrap_child(duet_model_module(m), "discriminators", tu_comm, &d, &dd));
        duet_model_set_comm(m, tu_comm);
        assert_true(duet_ddp_num_buckets(gd) > 4 && duet_ddp_num_buckets(dd) > 2);
        assert_true(bucket_straddles(gd) && bucket_straddles(dd));
    } else {
        TU_OK(duet_wrapper_create(m, tu_comm, cpu, 1, NULL, &w));
        assert_int_equal(duet_wrapper_num_ddps(w), 2);
        assert_string_equal(duet_wrapper_ddp_name(w, 0), "generators");
        assert_string_equal(duet_wrapper_ddp_name(w, 1), "discriminators");
        gd = duet_wrapper_ddp(w, 0);
        dd = duet_wrapper_ddp(w, 1);
    }
    duet_optimizer_set *o = adam_pair(m);
    for (int i = 0; i < ITERS; i++) {
        duet_batch b = {0}, local = {0};
        global_batch(&b, 300 + (uint64_t)i);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        TU_OK(duet_model_train_step(ref, &b, ro, &log));
        if (w != NULL) TU_OK(duet_wrapper_train_step(w, &local, o, &log));
        else TU_OK(duet_model_train_step(m, &local, o, &log));
        if (i == 0) compare_grads(m, ref);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    /* Each DDP (two networks each) reduced once per step, everything;
     * the generators only in the steps where they stepped (step_counter
     * 0, 2 with disc_steps 2). */
    assert_int_equal(duet_ddp_get_stats(gd).syncs, (ITERS + disc_steps - 1) / disc_steps);
    assert_int_equal(duet_ddp_get_stats(dd).syncs, ITERS);
    TU_OK(duet_ddp_check_replicas(gd));
    TU_OK(duet_ddp_check_replicas(dd));
    tu_assert_bit_identical(duet_model_module(m), false);

    duet_named_tensors got = {0}, want = {0};
    TU_OK(duet_module_state(duet_model_module(m), &got));
    TU_OK(duet_module_state(duet_model_module(ref), &want));
    assert_int_equal(got.count, want.count);
    /* 1e-4 relative, 1e-6 absolute; but Adam turns a gradient's float
     * noise (a split batch sums in another order) into up to lr per step
     * where that gradient is tiny: such elements may be 2.1 lr per step
     * off, and must stay under 3% (measured: none at np 2, where the
     * averaging divides exactly, 1.2% at np 3). (All of a bias before
     * instance norm.) The gradients of step 1 are compared tightly above. */
    int64_t total = 0, loose = 0;
    for (size_t i = 0; i < got.count; i++) {
        assert_string_equal(got.items[i].name, want.items[i].name);
        const duet_tensor *g = got.items[i].tensor, *r = want.items[i].tensor;
        const bool noise = is_bias_before_in(duet_model_module(m), g);
        for (int64_t k = 0; k < g->numel; k++) {
            const double d = fabs((double)g->data[k] - r->data[k]);
            total++;
            if (noise || d <= 1e-6 + 1e-4 * fabs((double)r->data[k])) continue;
            loose++;
            if (d > 2.1 * 2e-4 * ITERS)
                fail_msg("rank %d: %s[%lld]: got %.8g, want %.8g", tu_rank, got.items[i].name,
                         (long long)k, g->data[k], r->data[k]);
        }
    }
    if (tu_rank == 0) printf("    %lld of %lld elements within Adam's noise only\n",
                             (long long)loose, (long long)total);
    assert_true(loose * 100 < 3 * total);
    duet_named_tensors_clear(&got);
    duet_named_tensors_clear(&want);

    /* The pools: the same draws as one process, the same images (to the
     * generators' float noise), and bit-identical on every rank. */
    assert_true(duet_cyclegan_pool_rng(m)->counter == duet_cyclegan_pool_rng(ref)->counter);
    assert_true(duet_cyclegan_pool_rng(m)->counter > 0);
    char dir[256];
    assert_non_null(tu_mkdtemp(dir, sizeof dir, "duet_cyclegan_mpi"));
    duet_st *sm = model_state(m, dir, "m.safetensors"), *sr = model_state(ref, dir, "r.safetensors");
    for (int p = 0; p < 2; p++) {
        const char *key = p == 0 ? "state.cyclegan.pool_a" : "state.cyclegan.pool_b";
        duet_tensor *a = NULL, *r = NULL;
        TU_OK(duet_st_get(sm, key, &a));
        TU_OK(duet_st_get(sr, key, &r));
        assert_int_equal(a->shape[0], 4);
        tu_assert_close(a->data, r->data, a->numel, 1e-3, 1e-4, key);
        duet_tensor *mine = NULL;
        TU_OK(duet_tensor_clone(a, &mine));
        TU_OK(duet_comm_bcast(tu_comm, a->data, (size_t)a->numel, DUET_DTYPE_F32, 0));
        if (memcmp(a->data, mine->data, (size_t)a->numel * sizeof(float)) != 0)
            fail_msg("rank %d: %s differs from rank 0's", tu_rank, key);
        duet_tensor_release(mine);
        duet_tensor_release(a);
        duet_tensor_release(r);
    }
    duet_st_destroy(sm);
    duet_st_destroy(sr);
    tu_rm_tree(dir);
    duet_optimizer_set_destroy(o);
    duet_optimizer_set_destroy(ro);
    if (w != NULL) duet_wrapper_destroy(w);
    else duet_model_destroy(m);
    duet_model_destroy(ref);
}

static void test_ranks_match_one_process(void **state) {
    (void)state;
    ranks_match_one_process(false);
}

static void test_ranks_match_one_process_small_buckets(void **state) {
    (void)state;
    ranks_match_one_process(true);
}

/* disc_steps 2: in step 2 the generators' DDP is armed by the forward, the
 * discriminators' backward does not reach it, and no generator backward
 * follows; step 3's forward arms it again and its backward reduces. The
 * result still equals one process, and the DDP reduced twice. */
static void test_gated_generator_step(void **state) {
    (void)state;
    disc_steps = 2;
    ranks_match_one_process(false);
    disc_steps = 1;
}

/* Without the identity loss the generator step forwards no generator: the
 * generators' DDP was armed only by forward_train, before the
 * discriminators' backward, and must still be armed for the generators'
 * backward (a DDP that disarmed at the end of every backward would see
 * stray gradients here). */
static void test_no_identity_loss(void **state) {
    (void)state;
    id_weight = 0.0f;
    ranks_match_one_process(false);
    ranks_match_one_process(true);
    id_weight = 0.5f;
}

/* Every rank returns rc; returns how many failed with want. */
static int count_failed(int rc, int want) {
    int failed = rc == want;
    TU_OK(duet_comm_allreduce(tu_comm, &failed, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    return failed;
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    wo.kind = DUET_WRAPPER_WHOLE_MODEL;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_cyclegan(), tu_comm, cpu, 1, &wo, &w));
    duet_optimizer_set *o = adam_pair(duet_wrapper_model(w));
    const int64_t n = B / tu_size;
    double t0 = duet_time_now();
    int rc = DUET_OK, it = 0;
    for (; it < ITERS && rc == DUET_OK; it++) {
        duet_batch b = {0}, local = {0};
        global_batch(&b, 400 + (uint64_t)it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars log;
        rc = duet_wrapper_train_step(w, &local, o, &log);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    assert_int_equal(rc, DUET_EUNUSED);
    /* The discriminators step of iteration 1 (MMEditing's first) left it
     * unfinished: the generators got no gradient in that backward. */
    assert_int_equal(it, 2);
    const char *msg = duet_last_error();
    if (tu_rank == 0) printf("    rank 0, after %.2f s: %s\n", duet_time_now() - t0, msg);
    assert_non_null(strstr(msg, "generators.a.model.0.conv.weight"));
    assert_null(strstr(msg, "discriminators."));
    /* No time bound: a rank left hanging is CTest's timeout (and the
     * watchdog's error), not a clock reading on a shared machine. */
    assert_int_equal(count_failed(rc, DUET_EUNUSED), tu_size);
    duet_optimizer_set_destroy(o);
    duet_wrapper_destroy(w);
}

/* MMEditing's forward_train does generators = get_module(self.generators);
 * generators['a'](real_a): the network inside the DDP, called directly. In
 * duet that backward fails with DUET_ESTATE on every rank, naming the DDP
 * and a parameter, and the DDP stays failed; before, it returned OK and
 * each rank kept its own gradients. */
static void test_get_module_trap(void **state) {
    (void)state;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_cyclegan(), tu_comm, cpu, 1, NULL, &w));
    duet_model *m = duet_wrapper_model(w);
    duet_optimizer_set *o = adam_pair(m);
    duet_batch b = {0}, local = {0};
    global_batch(&b, 500);
    const int64_t n = B / tu_size;
    TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
    duet_log_vars log;
    TU_OK(duet_wrapper_train_step(w, &local, o, &log)); /* through the DDPs: fine */

    duet_module *gens = duet_model_part(m, "generators");
    assert_true(duet_is_ddp(gens));
    duet_module *g_a = duet_module_child(duet_ddp_inner(gens), "a"); /* get_module(...)['a'] */
    assert_true(duet_module_is_training(g_a) && duet_grad_enabled());
    duet_tensor *fake = NULL, *loss = NULL;
    TU_OK(duet_module_forward(g_a, duet_batch_tensor_get(&local, "img_a"), &fake));
    TU_OK(duet_mean(fake, &loss));
    int rc = duet_backward(loss);
    assert_int_equal(rc, DUET_ESTATE);
    assert_non_null(strstr(duet_last_error(), "DDP 'generators': parameter 'a."));
    assert_non_null(strstr(duet_last_error(), "get_module"));
    assert_int_equal(count_failed(rc, DUET_ESTATE), tu_size);
    duet_tensor_release(fake);
    duet_tensor_release(loss);
    duet_tape_clear();
    /* The DDP stays failed: the next step says why, on every rank. */
    rc = duet_wrapper_train_step(w, &local, o, &log);
    assert_int_equal(rc, DUET_ESTATE);
    assert_int_equal(count_failed(rc, DUET_ESTATE), tu_size);
    duet_tape_clear();

    /* Without grad mode (evaluation), calling the network directly is fine. */
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_module_forward(g_a, duet_batch_tensor_get(&local, "img_a"), &fake));
    duet_set_grad_enabled(prev);
    duet_tensor_release(fake);
    duet_batch_clear(&local);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(o);
    duet_wrapper_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one_process),
        cmocka_unit_test(test_ranks_match_one_process_small_buckets),
        cmocka_unit_test(test_gated_generator_step),
        cmocka_unit_test(test_no_identity_loss),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
        cmocka_unit_test(test_get_module_trap),
    };
    return TU_GAN_RUN_GROUP(tests);
}
