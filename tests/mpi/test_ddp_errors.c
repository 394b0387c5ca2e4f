/* DDP misuse and failure paths under mpiexec -n 1, 2, 3; every error must
 * come back on every rank with a clear message, and nobody may hang (CTest's
 * time limit bounds the run): mismatched models, an unfinished reduction
 * (unused parameters without find_unused_parameters), ranks disagreeing on
 * what was ready, a parameter marked twice; plus hand driving with
 * rank-specific ready orders over many buckets, buffer broadcast, the
 * replica check, wrapping a child in place, the Chrome trace and bad
 * options. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <unistd.h>

/* Under AddressSanitizer: unwind allocation stacks fully, so that Open MPI's
 * own long-lived allocations are traced into libmpi and matched by
 * tests/lsan.supp (with the fast unwinder they stop in MPI components that
 * MPI_Finalize has unloaded, which no suppression can name). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static bool has(const char *hay, const char *needle) {
    if (strstr(hay, needle) != NULL) return true;
    print_error("missing \"%s\" in: %s\n", needle, hay);
    return false;
}

/* After an error every rank can still talk: a collective completes. */
static void assert_group_alive(void) {
    int x = 1;
    TU_OK(duet_comm_allreduce(tu_comm, &x, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(x, tu_size);
}

static void test_mismatched_models(void **state) {
    (void)state;
    bool last = tu_rank == tu_size - 1 && tu_size > 1;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.name = "generator";
    duet_module *ddp = NULL;

    /* A shape. */
    tu_tiny_cfg cfg = TU_TINY_PLAIN;
    if (last) cfg.c2 = 5;
    int rc = duet_ddp_create(tu_tiny_create(1, cfg), tu_comm, &o, &ddp);
    if (tu_size == 1) {
        TU_OK(rc);
        duet_module_destroy(ddp);
        return;
    }
    assert_int_equal(rc, DUET_EMISMATCH);
    assert_null(ddp);
    const char *m = duet_last_error();
    char other[32];
    snprintf(other, sizeof other, "rank %d", tu_size - 1);
    assert_true(has(m, "DDP 'generator'"));
    assert_true(has(m, "'conv2.weight' is [4, 4, 3, 3] (requires grad) on rank 0 but [5, 4, 3, 3] "
                       "(requires grad) on"));
    assert_true(has(m, other));
    assert_group_alive();

    /* requires_grad. */
    duet_module *net = tu_tiny_create(1, TU_TINY_PLAIN);
    if (last) duet_module_set_requires_grad(duet_module_child(net, "fc"), false);
    assert_int_equal(duet_ddp_create(net, tu_comm, &o, &ddp), DUET_EMISMATCH);
    assert_true(has(duet_last_error(), "'fc.weight' is [3, 64] (requires grad) on rank 0 but "
                                       "[3, 64] (frozen)"));
    /* A parameter only some ranks have. */
    cfg = TU_TINY_PLAIN;
    cfg.aux = last;
    assert_int_equal(duet_ddp_create(tu_tiny_create(1, cfg), tu_comm, &o, &ddp), DUET_EMISMATCH);
    assert_true(has(duet_last_error(), "has parameter 'aux.weight' [3, 64] (requires grad), which "
                                       "rank 0 lacks"));
    assert_group_alive();
}

/* Without find_unused_parameters, a parameter with no gradient leaves the
 * reduction unfinished: the backward succeeds, the next armed forward fails
 * with the names, on every rank, and keeps failing. */
static void test_unused_without_find_unused(void **state) {
    (void)state;
    tu_tiny_cfg cfg = {false, true, 4};
    duet_ddp_opts o = duet_ddp_opts_default();
    o.name = "discriminator";
    o.bucket_cap_mb = 1e-3;
    duet_module *ddp = tu_ddp_of(tu_tiny_create(1, cfg), &o);
    duet_tensor *x = NULL, *t = NULL;
    tu_tiny_batch(1, 4, &x, &t);
    tu_fwd_bwd(ddp, x, t, 1.0f);
    duet_tensor *y = NULL;
    assert_int_equal(duet_module_forward(ddp, x, &y), DUET_EUNUSED);
    assert_null(y);
    const char *m = duet_last_error();
    assert_true(has(m, "DDP 'discriminator': 2 of 8 parameters got no gradient"));
    assert_true(has(m, "aux.weight, aux.bias"));
    assert_true(has(m, "find_unused_parameters"));
    assert_true(has(m, "DistributedDataParallelWrapper"));
    assert_int_equal(duet_module_forward(ddp, x, &y), DUET_EUNUSED);
    /* Evaluation (no grad) does not arm and still works. */
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_module_forward(ddp, x, &y));
    duet_set_grad_enabled(prev);
    duet_tensor_release(y);
    assert_group_alive();
    duet_tensor_release(x);
    duet_tensor_release(t);
    duet_module_destroy(ddp);
}

/* Hand driving: rank-dependent buffers, every rank marking in its own random
 * order over one bucket per parameter; buckets still start in the same order
 * everywhere and the buffer becomes the average. */
static void test_hand_driven_any_order(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.bucket_cap_mb = 1e-6;
    o.first_bucket_cap_mb = 1e-6;
    duet_module *ddp = tu_ddp_of(tu_tiny_create(2, TU_TINY_PLAIN), &o);
    size_t nt = duet_ddp_num_tracked(ddp), cnt = 0;
    assert_int_equal(duet_ddp_num_buckets(ddp), nt);
    float *g = duet_ddp_grad_buffer(ddp, &cnt);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < cnt; i++) g[i] = (float)(tu_rank + 1) * 0.5f + (float)i * 1e-3f;
        TU_OK(duet_ddp_prepare(ddp, NULL, 0));
        int64_t perm[16];
        duet_rng rng = duet_rng_make(77, (uint64_t)(tu_rank * 10 + round));
        duet_rng_permutation(&rng, perm, (int64_t)nt);
        for (size_t k = 0; k < nt; k++) TU_OK(duet_ddp_mark_ready(ddp, (size_t)perm[k]));
        TU_OK(duet_ddp_finalize(ddp));
        for (size_t i = 0; i < cnt; i++) {
            float want = (float)(tu_size + 1) * 0.25f + (float)i * 1e-3f;
            if (fabsf(g[i] - want) > 1e-6f * fabsf(want) + 1e-7f)
                fail_msg("rank %d round %d: g[%zu] = %g, want %g", tu_rank, round, i, g[i], want);
        }
        tu_assert_bit_identical(ddp, true);
    }
    assert_int_equal(duet_ddp_get_stats(ddp).syncs, 3);
    /* Marks outside an armed pass are ignored. */
    TU_OK(duet_ddp_mark_ready(ddp, 0));
    TU_OK(duet_ddp_finalize(ddp));
    assert_int_equal(duet_ddp_mark_ready(ddp, nt), DUET_EINVAL);
    duet_module_destroy(ddp);
}

/* Ranks that disagree on what was ready: every rank fails the backward with
 * DUET_EMISMATCH (nobody waits on a bucket a peer skipped), and the DDP
 * stays failed. */
static void test_disagreeing_ranks(void **state) {
    (void)state;
    if (tu_size == 1) skip();
    for (int variant = 0; variant < 2; variant++) {
        duet_ddp_opts o = duet_ddp_opts_default();
        o.bucket_cap_mb = 1e-6;
        o.first_bucket_cap_mb = 1e-6;
        duet_module *ddp = tu_ddp_of(tu_tiny_create(2, TU_TINY_PLAIN), &o);
        size_t nt = duet_ddp_num_tracked(ddp);
        TU_OK(duet_ddp_prepare(ddp, NULL, 0));
        /* variant 0: rank 0 marks all, others all but the first registered
         * (last bucket); variant 1: rank 0 marks none, others all. */
        size_t nmark = variant == 0 ? (tu_rank == 0 ? nt : nt - 1) : (tu_rank == 0 ? 0 : nt);
        for (size_t k = 0; k < nmark; k++) TU_OK(duet_ddp_mark_ready(ddp, nt - 1 - k));
        assert_int_equal(duet_ddp_finalize(ddp), DUET_EMISMATCH);
        assert_true(has(duet_last_error(), "the ranks disagree on which parameters got a gradient"));
        assert_int_equal(duet_ddp_prepare(ddp, NULL, 0), DUET_EMISMATCH);
        assert_group_alive();
        duet_module_destroy(ddp);
    }
}

static void test_marked_twice(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.name = "D";
    duet_module *ddp = tu_ddp_of(tu_tiny_create(2, TU_TINY_PLAIN), &o);
    size_t nt = duet_ddp_num_tracked(ddp);
    TU_OK(duet_ddp_prepare(ddp, NULL, 0));
    for (size_t k = 0; k < nt; k++) TU_OK(duet_ddp_mark_ready(ddp, k));
    if (tu_rank == 0) {
        assert_int_equal(duet_ddp_mark_ready(ddp, 2), DUET_ESTATE);
        assert_true(has(duet_last_error(), "parameter 'conv2.weight' was marked ready twice"));
    }
    assert_int_equal(duet_ddp_finalize(ddp), DUET_ESTATE);
    if (tu_rank == 0) assert_true(has(duet_last_error(), "marked ready twice"));
    else assert_true(has(duet_last_error(), "another rank failed"));
    assert_group_alive();
    duet_module_destroy(ddp);
}

/* Creation broadcasts parameters and buffers from rank 0; an armed forward
 * broadcasts buffers again when asked (and not when not). */
static void test_broadcasts(void **state) {
    (void)state;
    tu_tiny_cfg cfg = {true, false, 4};
    for (int bcast = 0; bcast < 2; bcast++) {
        duet_module *net = tu_tiny_create(10 + (uint64_t)tu_rank, cfg);
        duet_tensor *rv = duet_module_buffer(duet_module_child(net, "bn"), "running_var");
        duet_tensor_fill(rv, (float)(tu_rank + 2));
        duet_ddp_opts o = duet_ddp_opts_default();
        o.broadcast_buffers = bcast == 1;
        duet_module *ddp = tu_ddp_of(net, &o);
        tu_assert_bit_identical(ddp, false);
        assert_true(rv->data[0] == 2.0f);
        TU_OK(duet_ddp_check_replicas(ddp));

        duet_tensor *rm = duet_module_buffer(duet_module_child(net, "bn"), "running_mean");
        duet_tensor_fill(rm, (float)(tu_rank + 1));
        duet_module_train(ddp, false); /* running stats used, not updated */
        duet_tensor *x = NULL, *t = NULL, *y = NULL;
        tu_tiny_batch(3, 2, &x, &t);
        TU_OK(duet_module_forward(ddp, x, &y)); /* grad mode on: armed */
        float want = bcast ? 1.0f : (float)(tu_rank + 1);
        for (int64_t i = 0; i < rm->numel; i++) assert_true(rm->data[i] == want);
        duet_tensor_release(y);
        duet_tape_clear();
        duet_tensor_release(x);
        duet_tensor_release(t);
        duet_module_destroy(ddp);
    }
}

static void test_check_replicas(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.name = "G";
    duet_module *ddp = tu_ddp_of(tu_tiny_create(2, TU_TINY_PLAIN), &o);
    TU_OK(duet_ddp_check_replicas(ddp));
    if (tu_size > 1) {
        duet_module *conv2 = duet_module_child(duet_ddp_inner(ddp), "conv2");
        if (tu_rank == tu_size - 1) duet_module_param(conv2, "bias")->data[1] += 1e-7f;
        assert_int_equal(duet_ddp_check_replicas(ddp), DUET_EMISMATCH);
        char who[64];
        snprintf(who, sizeof who, "(rank %d differs from rank 0)", tu_size - 1);
        assert_true(has(duet_last_error(), "DDP 'G': the replicas differ: 'conv2.bias' is not "
                                           "bit-identical on every rank"));
        assert_true(has(duet_last_error(), who));
        assert_true(has(duet_last_error(), "1 of 6 tensors differ"));
    }
    assert_group_alive();
    duet_module_destroy(ddp);
}

static const duet_module_type pair_type = {"Pair", NULL, NULL};

static void test_wrap_child(void **state) {
    (void)state;
    duet_module *parent = NULL;
    TU_OK(duet_module_create(&pair_type, NULL, &parent));
    TU_OK(duet_module_add_child(parent, "g", tu_tiny_create(1, TU_TINY_PLAIN)));
    /* A mismatch keeps the child in place, unwrapped, on every rank. */
    tu_tiny_cfg cfg = TU_TINY_PLAIN;
    if (tu_size > 1 && tu_rank == 1) cfg.c2 = 6;
    TU_OK(duet_module_add_child(parent, "d", tu_tiny_create(1, cfg)));
    duet_module *ddp = NULL;
    int rc = duet_ddp_wrap_child(parent, "d", tu_comm, NULL, &ddp);
    if (tu_size > 1) {
        assert_int_equal(rc, DUET_EMISMATCH);
        assert_true(has(duet_last_error(), "DDP 'd'"));
        assert_false(duet_is_ddp(duet_module_child(parent, "d")));
        TU_OK(duet_module_replace_child(parent, "d", tu_tiny_create(1, TU_TINY_PLAIN), &ddp));
        duet_module_destroy(ddp);
    } else {
        TU_OK(rc);
        duet_module *inner = duet_ddp_inner(ddp);
        duet_module *fresh = NULL;
        TU_OK(duet_module_replace_child(parent, "d", tu_tiny_create(1, TU_TINY_PLAIN), &fresh));
        assert_ptr_equal(fresh, ddp);
        assert_ptr_equal(duet_ddp_inner(fresh), inner);
        duet_module_destroy(fresh);
    }
    TU_OK(duet_ddp_wrap_child(parent, "d", tu_comm, NULL, &ddp));
    assert_true(duet_is_ddp(ddp));
    assert_ptr_equal(duet_module_child(parent, "d"), ddp);
    assert_ptr_equal(duet_ddp_comm(ddp), tu_comm);
    duet_named_tensors p = {0, NULL};
    TU_OK(duet_module_named_parameters(parent, true, &p));
    assert_int_equal(p.count, 12);
    assert_string_equal(p.items[6].name, "d.conv1.weight"); /* no ".module." */
    duet_named_tensors_clear(&p);
    assert_int_equal(duet_ddp_wrap_child(parent, "nope", tu_comm, NULL, NULL), DUET_ENOTFOUND);
    duet_module_destroy(parent);
}

/* Unwrapping gives the parameters their own gradients back, values kept. */
static void test_destroy_restores_grads(void **state) {
    (void)state;
    duet_module *parent = NULL;
    TU_OK(duet_module_create(&pair_type, NULL, &parent));
    TU_OK(duet_module_add_child(parent, "d", tu_tiny_create(1, TU_TINY_PLAIN)));
    duet_module *ddp = NULL;
    TU_OK(duet_ddp_wrap_child(parent, "d", tu_comm, NULL, &ddp));
    duet_tensor *x = NULL, *t = NULL;
    tu_tiny_batch(9, 3, &x, &t);
    tu_fwd_bwd(ddp, x, t, 1.0f);
    duet_tensor *w = duet_ddp_tracked_param(ddp, 0);
    float g0 = w->grad[0];
    /* Take the DDP out and keep the inner module: swap the inner out of the
     * DDP first, so that destroying the DDP leaves it alone. */
    duet_module *inner = NULL, *old = NULL;
    TU_OK(duet_module_replace_child(ddp, "module", tu_tiny_create(1, TU_TINY_PLAIN), &inner));
    TU_OK(duet_module_replace_child(parent, "d", inner, &old));
    assert_ptr_equal(old, ddp);
    duet_module_destroy(old);
    assert_non_null(w->grad);
    assert_true(w->grad[0] == g0);
    assert_false(duet_autograd_has_grad_hook(w));
    tu_fwd_bwd(inner, x, t, 1.0f); /* works without the DDP */
    duet_tensor_release(x);
    duet_tensor_release(t);
    duet_module_destroy(parent);
}

static void test_trace_file(void **state) {
    (void)state;
    long id = (long)getpid();
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    char pattern[256], mine[256];
    snprintf(pattern, sizeof pattern, "/tmp/duet_test_trace_%ld_%%d.json", id);
    snprintf(mine, sizeof mine, "/tmp/duet_test_trace_%ld_%d.json", id, tu_rank);
    duet_ddp_opts o = duet_ddp_opts_default();
    o.trace_path = pattern;
    o.bucket_cap_mb = 1e-3;
    duet_module *ddp = tu_ddp_of(tu_tiny_create(1, TU_TINY_PLAIN), &o);
    duet_tensor *x = NULL, *t = NULL;
    tu_tiny_batch(2, 4, &x, &t);
    tu_fwd_bwd(ddp, x, t, 1.0f);
    TU_OK(duet_ddp_trace_write(ddp));
    json_error_t err;
    json_t *root = json_load_file(mine, 0, &err);
    if (root == NULL) fail_msg("rank %d: %s: %s", tu_rank, mine, err.text);
    json_t *events = json_object_get(root, "traceEvents");
    assert_true(json_is_array(events));
    bool fwd = false, bwd = false, ar0 = false, fin = false;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *name = json_string_value(json_object_get(ev, "name"));
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        assert_non_null(name);
        if (strcmp(ph, "X") != 0) continue;
        assert_int_equal(json_integer_value(json_object_get(ev, "pid")), tu_rank);
        assert_true(json_number_value(json_object_get(ev, "dur")) >= 0);
        fwd |= strcmp(name, "forward") == 0;
        bwd |= strcmp(name, "backward") == 0;
        ar0 |= strcmp(name, "allreduce bucket 0") == 0;
        fin |= strcmp(name, "finalize") == 0;
    }
    assert_true(fwd && bwd && ar0 && fin);
    json_decref(root);
    duet_tensor_release(x);
    duet_tensor_release(t);
    duet_module_destroy(ddp); /* writes again */
    assert_int_equal(remove(mine), 0);
}

static void test_bad_arguments(void **state) {
    (void)state;
    duet_ddp_opts o = duet_ddp_opts_default();
    o.bucket_cap_mb = 0;
    duet_module *ddp = NULL;
    assert_int_equal(duet_ddp_create(tu_tiny_create(1, TU_TINY_PLAIN), tu_comm, &o, &ddp),
                     DUET_EINVAL);
    assert_true(has(duet_last_error(), "bucket_cap_mb"));
    assert_int_equal(duet_ddp_create(tu_tiny_create(1, TU_TINY_PLAIN), NULL, NULL, &ddp),
                     DUET_EINVAL);
    duet_module *plain = tu_tiny_create(1, TU_TINY_PLAIN);
    assert_int_equal(duet_ddp_prepare(plain, NULL, 0), DUET_EINVAL);
    assert_int_equal(duet_ddp_check_replicas(plain), DUET_EINVAL);
    assert_false(duet_is_ddp(plain));
    assert_null(duet_ddp_inner(plain));
    assert_false(duet_ddp_set_no_sync(plain, true));
    /* A parameter already tracked by another DDP. */
    duet_module *first = tu_ddp_of(tu_tiny_create(1, TU_TINY_PLAIN), NULL);
    duet_module *shared = NULL;
    TU_OK(duet_module_create(&pair_type, NULL, &shared));
    duet_tensor *w = duet_ddp_tracked_param(first, 0);
    TU_OK(duet_module_add_param(shared, "w", duet_tensor_retain(w)));
    assert_int_equal(duet_ddp_create(shared, tu_comm, NULL, &ddp), DUET_EINVAL);
    assert_true(has(duet_last_error(), "already has a gradient-ready hook"));
    duet_module_destroy(first);
    duet_module_destroy(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mismatched_models),
        cmocka_unit_test(test_unused_without_find_unused),
        cmocka_unit_test(test_hand_driven_any_order),
        cmocka_unit_test(test_disagreeing_ranks),
        cmocka_unit_test(test_marked_twice),
        cmocka_unit_test(test_broadcasts),
        cmocka_unit_test(test_check_replicas),
        cmocka_unit_test(test_wrap_child),
        cmocka_unit_test(test_destroy_restores_grads),
        cmocka_unit_test(test_trace_file),
        cmocka_unit_test(test_bad_arguments),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    duet_comm_finalize();
    return failed;
}
