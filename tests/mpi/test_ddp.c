/* DDP training semantics under mpiexec -n 1, 2, 3: N ranks with batch B/N
 * each match one process with batch B after 5 Adam steps (to 1e-5 relative)
 * and hold bit-identical parameters; with one bucket or many; two backwards
 * per step (a discriminator's real and fake); no_sync accumulation; the
 * fp16/bf16 hooks within their precision; find_unused_parameters with an
 * unused branch; a frozen module's backward and a backward no armed forward
 * asked for; SyncBatchNorm. Each rank computes the full-batch reference
 * itself from the same seeds. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Under AddressSanitizer: unwind allocation stacks fully, so that Open MPI's
 * own long-lived allocations are traced into libmpi and matched by
 * tests/lsan.supp (with the fast unwinder they stop in MPI components that
 * MPI_Finalize has unloaded, which no suppression can name). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

enum { B = 12, STEPS = 5 };
static const float LR = 1e-2f;

/* Runs STEPS Adam steps of the reference (full batch) and of a DDP (its
 * rank's share), returns the DDP for further checks. Replicas start from
 * different seeds on each rank: the DDP's broadcast makes them rank 0's. */
static duet_module *train_pair(const duet_ddp_opts *o, tu_tiny_cfg cfg, duet_module **ref_out) {
    duet_module *ref = tu_tiny_create(1, cfg);
    duet_module *ddp = tu_ddp_of(tu_tiny_create(1 + 1000 * (uint64_t)tu_rank, cfg), o);
    duet_optimizer *oref = tu_adam_for(ref, LR), *oddp = tu_adam_for(ddp, LR);
    int64_t n = B / tu_size;
    for (int s = 0; s < STEPS; s++) {
        duet_tensor *x = NULL, *t = NULL;
        tu_tiny_batch(100 + (uint64_t)s, B, &x, &t);
        duet_tensor *xs = tu_slice0(x, tu_rank * n, n), *ts = tu_slice0(t, tu_rank * n, n);
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        tu_fwd_bwd(ref, x, t, 1.0f);
        tu_fwd_bwd(ddp, xs, ts, 1.0f);
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
        duet_tensor_release(x);
        duet_tensor_release(t);
        duet_tensor_release(xs);
        duet_tensor_release(ts);
    }
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    *ref_out = ref;
    return ddp;
}

static void test_matches_full_batch(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    duet_module *ref = NULL, *ddp = train_pair(&o, TU_TINY_PLAIN, &ref);
    assert_int_equal(duet_ddp_num_buckets(ddp), 1); /* the whole net fits the first bucket */
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    TU_OK(duet_ddp_check_replicas(ddp));
    duet_ddp_stats st = duet_ddp_get_stats(ddp);
    assert_int_equal(st.syncs, STEPS);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* A tiny cap: every parameter gets its own bucket, laid out in reverse
 * registration order, started one by one as backward reaches them. */
static void test_many_buckets(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.bucket_cap_mb = 1e-4; /* ~105 bytes: below every parameter but conv1.bias/fc.bias */
    o.first_bucket_cap_mb = 1e-5;
    duet_module *ref = NULL, *ddp = train_pair(&o, TU_TINY_PLAIN, &ref);
    size_t nt = duet_ddp_num_tracked(ddp), count = 0;
    assert_int_equal(nt, 6);
    float *buf = duet_ddp_grad_buffer(ddp, &count);
    assert_int_equal(count, (size_t)duet_module_num_parameters(ddp, true));
    /* fc.bias (last registered) opens the buffer; conv1.weight closes it. */
    assert_string_equal(duet_ddp_tracked_name(ddp, nt - 1), "fc.bias");
    assert_ptr_equal(duet_ddp_tracked_param(ddp, nt - 1)->grad, buf);
    size_t expect = 0;
    for (size_t j = 0; j < nt; j++) {
        duet_tensor *p = duet_ddp_tracked_param(ddp, nt - 1 - j);
        assert_ptr_equal(p->grad, buf + expect);
        expect += (size_t)p->numel;
    }
    /* Buckets tile the buffer in order; each holds whole parameters. */
    size_t nb = duet_ddp_num_buckets(ddp), off_next = 0, first_next = 0;
    assert_true(nb >= 4);
    for (size_t k = 0; k < nb; k++) {
        size_t off, cnt, first, np;
        TU_OK(duet_ddp_bucket(ddp, k, &off, &cnt, &first, &np));
        assert_int_equal(off, off_next);
        assert_int_equal(first, first_next);
        assert_true(np >= 1);
        off_next = off + cnt;
        first_next = first + np;
    }
    assert_int_equal(off_next, count);
    assert_int_equal(first_next, nt);
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* The discriminator's step: real and fake batches, one backward each, one
 * optimizer step. Each backward averages its own contribution and adds it. */
static void test_two_backwards_per_step(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.bucket_cap_mb = 1e-3;
    o.first_bucket_cap_mb = 1e-3;
    duet_module *ref = tu_tiny_create(3, TU_TINY_PLAIN);
    duet_module *ddp = tu_ddp_of(tu_tiny_create(3, TU_TINY_PLAIN), &o);
    duet_optimizer *oref = tu_adam_for(ref, LR), *oddp = tu_adam_for(ddp, LR);
    int64_t n = B / tu_size;
    for (int s = 0; s < STEPS; s++) {
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        for (int half = 0; half < 2; half++) {
            duet_tensor *x = NULL, *t = NULL;
            tu_tiny_batch(200 + (uint64_t)(2 * s + half), B, &x, &t);
            duet_tensor *xs = tu_slice0(x, tu_rank * n, n), *ts = tu_slice0(t, tu_rank * n, n);
            tu_fwd_bwd(ref, x, t, 0.5f);
            tu_fwd_bwd(ddp, xs, ts, 0.5f);
            duet_tensor_release(x);
            duet_tensor_release(t);
            duet_tensor_release(xs);
            duet_tensor_release(ts);
        }
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
    }
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    assert_int_equal(duet_ddp_get_stats(ddp).syncs, 2 * STEPS);
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* Gradient accumulation: two micro-batches per rank, the first under
 * no_sync, match one full-batch backward. */
static void test_no_sync_accumulation(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.bucket_cap_mb = 2e-3;
    duet_module *ref = tu_tiny_create(4, TU_TINY_PLAIN);
    duet_module *ddp = tu_ddp_of(tu_tiny_create(4, TU_TINY_PLAIN), &o);
    duet_optimizer *oref = tu_adam_for(ref, LR), *oddp = tu_adam_for(ddp, LR);
    int64_t n = B / tu_size, h = n / 2;
    for (int s = 0; s < STEPS; s++) {
        duet_tensor *x = NULL, *t = NULL;
        tu_tiny_batch(300 + (uint64_t)s, B, &x, &t);
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        tu_fwd_bwd(ref, x, t, 1.0f);
        for (int micro = 0; micro < 2; micro++) {
            duet_tensor *xs = tu_slice0(x, tu_rank * n + micro * h, h);
            duet_tensor *ts = tu_slice0(t, tu_rank * n + micro * h, h);
            bool prev = duet_ddp_set_no_sync(ddp, micro == 0);
            assert_false(prev && micro == 0);
            tu_fwd_bwd(ddp, xs, ts, 0.5f);
            duet_ddp_set_no_sync(ddp, false);
            if (micro == 0 && tu_size > 1 && s == 0) {
                /* Not synchronised yet: ranks hold different local sums. */
                size_t cnt = 0;
                float *g = duet_ddp_grad_buffer(ddp, &cnt);
                float *root = malloc(cnt * sizeof *root);
                memcpy(root, g, cnt * sizeof *root);
                MPI_Bcast(root, (int)cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
                int same = memcmp(root, g, cnt * sizeof *root) == 0;
                free(root);
                if (tu_rank > 0) assert_false(same);
            }
            duet_tensor_release(xs);
            duet_tensor_release(ts);
        }
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
        duet_tensor_release(x);
        duet_tensor_release(t);
    }
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    assert_int_equal(duet_ddp_get_stats(ddp).syncs, STEPS);
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* Compressed hooks: gradients equal the float32 ones to the format's
 * precision, are exactly representable in it (the hook really ran), and are
 * identical on every rank. */
static void check_hook(duet_ddp_hook hook, double tol) {
    duet_ddp_opts o = duet_ddp_opts_default();
    o.comm_hook = hook;
    o.bucket_cap_mb = 1e-3; /* several buckets */
    o.first_bucket_cap_mb = 1e-3;
    duet_module *ref = tu_tiny_create(5, TU_TINY_PLAIN);
    duet_module *ddp = tu_ddp_of(tu_tiny_create(5, TU_TINY_PLAIN), &o);
    int64_t n = B / tu_size;
    duet_tensor *x = NULL, *t = NULL;
    tu_tiny_batch(400, B, &x, &t);
    duet_tensor *xs = tu_slice0(x, tu_rank * n, n), *ts = tu_slice0(t, tu_rank * n, n);
    tu_fwd_bwd(ref, x, t, 1.0f);
    tu_fwd_bwd(ddp, xs, ts, 1.0f);
    duet_named_tensors a = {0, NULL}, b = {0, NULL};
    TU_OK(duet_module_named_parameters(ddp, true, &a));
    TU_OK(duet_module_named_parameters(ref, true, &b));
    for (size_t i = 0; i < a.count; i++) {
        const duet_tensor *p = a.items[i].tensor, *q = b.items[i].tensor;
        float gmax = 0;
        for (int64_t k = 0; k < q->numel; k++) gmax = fmaxf(gmax, fabsf(q->grad[k]));
        char what[128];
        snprintf(what, sizeof what, "rank %d: %s grad with hook %d", tu_rank, a.items[i].name, hook);
        tu_assert_close(p->grad, q->grad, p->numel, tol, tol * gmax, what);
        for (int64_t k = 0; k < p->numel; k++) {
            uint16_t h;
            float back;
            if (hook == DUET_DDP_HOOK_FP16) {
                duet_f32_to_f16(&h, &p->grad[k], 1);
                duet_f16_to_f32(&back, &h, 1);
            } else {
                duet_f32_to_bf16(&h, &p->grad[k], 1);
                duet_bf16_to_f32(&back, &h, 1);
            }
            if (back != p->grad[k]) fail_msg("%s[%lld] = %a is not a hook value", what, (long long)k,
                                             (double)p->grad[k]);
        }
    }
    tu_assert_bit_identical(ddp, true);
    duet_named_tensors_clear(&a);
    duet_named_tensors_clear(&b);
    duet_tensor_release(x);
    duet_tensor_release(t);
    duet_tensor_release(xs);
    duet_tensor_release(ts);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

static void test_fp16_hook(void **state) {
    (void)state;
    /* 2^-11 per rounding: cast, divide, and up to size-1 additions. */
    check_hook(DUET_DDP_HOOK_FP16, 4.0 * 4.9e-4 * (tu_size + 2));
}

static void test_bf16_hook(void **state) {
    (void)state;
    check_hook(DUET_DDP_HOOK_BF16, 4.0 * 3.9e-3 * (tu_size + 2));
}

/* An unused branch (aux) trains with find_unused_parameters, matching the
 * reference, and aux stays as initialised. */
static void test_find_unused_parameters(void **state) {
    (void)state;
    tu_tiny_cfg cfg = {false, true, 4};
    duet_ddp_opts o = duet_ddp_opts_default();
    o.find_unused_parameters = true;
    o.bucket_cap_mb = 1e-3;
    o.first_bucket_cap_mb = 1e-4; /* aux.bias alone in bucket 0: unused, must be marked */
    duet_module *init = tu_tiny_create(1, cfg);
    duet_module *ref = NULL, *ddp = train_pair(&o, cfg, &ref);
    tu_assert_state_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    duet_module *aux_now = duet_module_child(duet_ddp_inner(ddp), "aux");
    duet_module *aux_init = duet_module_child(init, "aux");
    tu_assert_state_close(aux_now, aux_init, 0, 0);
    assert_int_equal(duet_ddp_get_stats(ddp).syncs, STEPS);
    duet_module_destroy(init);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* A frozen module's backward (the discriminator during the generator step)
 * synchronises nothing and leaves no error behind; a no_sync backward
 * accumulates locally, and the next synchronised backward averages the sum
 * (a backward through the wrapped module itself, around the DDP, is an
 * error: test_cyclegan_mpi's get_module trap). */
static void test_frozen_and_unarmed_backwards(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    duet_module *ref = tu_tiny_create(6, TU_TINY_PLAIN);
    duet_module *ddp = tu_ddp_of(tu_tiny_create(6, TU_TINY_PLAIN), &o);
    int64_t n = B / tu_size;
    duet_tensor *x = NULL, *t = NULL, *x2 = NULL, *t2 = NULL;
    tu_tiny_batch(500, B, &x, &t);
    tu_tiny_batch(501, B, &x2, &t2);
    duet_tensor *xs = tu_slice0(x, tu_rank * n, n), *ts = tu_slice0(t, tu_rank * n, n);
    duet_tensor *xs2 = tu_slice0(x2, tu_rank * n, n), *ts2 = tu_slice0(t2, tu_rank * n, n);

    /* Frozen: the input (the generator's output) gets a gradient, the DDP's
     * parameters none. */
    duet_module_set_requires_grad(ddp, false);
    xs->requires_grad = true;
    tu_fwd_bwd(ddp, xs, ts, 1.0f);
    assert_non_null(xs->grad);
    size_t cnt = 0;
    float *g = duet_ddp_grad_buffer(ddp, &cnt);
    for (size_t i = 0; i < cnt; i++) assert_true(g[i] == 0.0f);
    xs->requires_grad = false;
    duet_module_set_requires_grad(ddp, true);

    /* Unarmed: no_sync. */
    duet_ddp_set_no_sync(ddp, true);
    tu_fwd_bwd(ddp, xs, ts, 1.0f);
    duet_ddp_set_no_sync(ddp, false);
    /* Armed: reduces what the unarmed pass left plus its own. */
    tu_fwd_bwd(ddp, xs2, ts2, 1.0f);
    tu_fwd_bwd(ref, x, t, 1.0f);
    tu_fwd_bwd(ref, x2, t2, 1.0f);
    tu_assert_grads_close(ddp, ref, 1e-5, 1e-7);
    tu_assert_bit_identical(ddp, true);
    assert_int_equal(duet_ddp_get_stats(ddp).syncs, 1);
    duet_tensor *xs3[4] = {xs, ts, xs2, ts2};
    for (int i = 0; i < 4; i++) duet_tensor_release(xs3[i]);
    duet_tensor_release(x);
    duet_tensor_release(t);
    duet_tensor_release(x2);
    duet_tensor_release(t2);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

/* SyncBatchNorm: batch statistics over all ranks make N ranks with B/N
 * match one process with B, running statistics included. */
static void test_sync_batchnorm(void **state) {
    (void)state;
    tu_tiny_cfg cfg = {true, false, 4};
    duet_ddp_opts o = duet_ddp_opts_default();
    duet_module *net = tu_tiny_create(1, cfg);
    TU_OK(duet_convert_sync_batchnorm(net, tu_comm));
    duet_module *ddp = tu_ddp_of(net, &o);
    duet_module *ref = tu_tiny_create(1, cfg);
    duet_optimizer *oref = tu_adam_for(ref, LR), *oddp = tu_adam_for(ddp, LR);
    int64_t n = B / tu_size;
    for (int s = 0; s < 3; s++) {
        duet_tensor *x = NULL, *t = NULL;
        tu_tiny_batch(600 + (uint64_t)s, B, &x, &t);
        duet_tensor *xs = tu_slice0(x, tu_rank * n, n), *ts = tu_slice0(t, tu_rank * n, n);
        duet_optimizer_zero_grad(oref);
        duet_optimizer_zero_grad(oddp);
        tu_fwd_bwd(ref, x, t, 1.0f);
        tu_fwd_bwd(ddp, xs, ts, 1.0f);
        TU_OK(duet_optimizer_step(oref));
        TU_OK(duet_optimizer_step(oddp));
        duet_tensor_release(x);
        duet_tensor_release(t);
        duet_tensor_release(xs);
        duet_tensor_release(ts);
    }
    tu_assert_state_close(ddp, ref, 1e-4, 1e-6);
    tu_assert_bit_identical(ddp, false);
    duet_optimizer_destroy(oref);
    duet_optimizer_destroy(oddp);
    duet_module_destroy(ddp);
    duet_module_destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_full_batch),
        cmocka_unit_test(test_many_buckets),
        cmocka_unit_test(test_two_backwards_per_step),
        cmocka_unit_test(test_no_sync_accumulation),
        cmocka_unit_test(test_fp16_hook),
        cmocka_unit_test(test_bf16_hook),
        cmocka_unit_test(test_find_unused_parameters),
        cmocka_unit_test(test_frozen_and_unarmed_backwards),
        cmocka_unit_test(test_sync_batchnorm),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    duet_comm_finalize();
    return failed;
}
