/* Runs the usage example of duet/ddp.h (extracted by the build, see
 * cmake/header-examples.awk) on a one-conv net, alone and under mpiexec:
 * each rank feeds its own batch, and the gradients the optimizer steps
 * with must be the same on every rank. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "ddp.h's usage examples: run each one here");

static duet_module *the_net; /* the example's net, to read its gradients */
static duet_optimizer *the_opt;
static int64_t syncs = -1;
static int nsteps;

/* Before the step: the gradient must be identical across ranks. */
static int spy_step(duet_optimizer *opt) {
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(the_net, true, &ps));
    for (size_t i = 0; i < ps.count; i++) {
        duet_tensor *p = ps.items[i].tensor;
        assert_non_null(p->grad);
        float *hi = malloc(sizeof(float) * (size_t)p->numel);
        assert_non_null(hi);
        assert_int_equal(MPI_Allreduce(p->grad, hi, (int)p->numel, MPI_FLOAT, MPI_MAX,
                                       MPI_COMM_WORLD), MPI_SUCCESS);
        tu_assert_close(p->grad, hi, p->numel, 0, 0, ps.items[i].name);
        free(hi);
    }
    duet_named_tensors_clear(&ps);
    nsteps++;
    return duet_optimizer_step(opt);
}

/* The optimizer borrows the net's tensors: destroy it first. */
static void spy_module_destroy(duet_module *ddp) {
    syncs = duet_ddp_get_stats(ddp).syncs;
    duet_optimizer_destroy(the_opt);
    the_opt = NULL;
    duet_module_destroy(ddp);
}

static int example(duet_module *net, duet_tensor *x, duet_tensor *target, duet_optimizer *opt) {
#define duet_optimizer_step spy_step
#define duet_module_destroy spy_module_destroy
#define DUET_EXAMPLE 1
#include "ddp_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_module_destroy
#undef duet_optimizer_step
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    TU_OK(duet_comm_init(NULL, NULL));
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* The same initial weights everywhere does not matter (the DDP
     * broadcasts rank 0's); each rank's batch differs. */
    duet_rng rng = duet_rng_make(11 + (uint64_t)rank, 0);
    duet_module *net = NULL, *conv = NULL;
    TU_OK(duet_sequential_create(&net));
    TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, true, &rng, &conv));
    TU_OK(duet_module_add_child(net, "0", conv));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 6, 6}, 1.0f);
    duet_tensor *target = tu_randn(&rng, 4, (int64_t[]){2, 4, 6, 6}, 1.0f);
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, true, &ps));
    TU_OK(duet_adam_create(&ps, NULL, &the_opt));
    duet_named_tensors_clear(&ps);
    the_net = net;
    TU_OK(example(net, x, target, the_opt));
    assert_int_equal(nsteps, 1);
    assert_int_equal(syncs, 1); /* the no_sync backward did not reduce */
    duet_tensor_release(x);
    duet_tensor_release(target);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    duet_comm_finalize();
    return rc;
}
