/* Runs the usage example of duet/comm.h (extracted by the build, see
 * cmake/header-examples.awk), alone and under mpiexec. The example ends by
 * finalizing MPI, so it is the only test of this program. */
#include "testutil.h"

#include <string.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "comm.h's usage examples: run each one here");

static int work_done, world_size;
static void do_some_work(void) { work_done++; }
/* The size of the example's comm, read as it goes. */
static void spy_comm_destroy(duet_comm *c) {
    world_size = duet_comm_size(c);
    duet_comm_destroy(c);
}

static int example(float *g_out) {
#define duet_comm_destroy spy_comm_destroy
#define DUET_EXAMPLE 1
#include "comm_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_comm_destroy
    memcpy(g_out, g, sizeof g);
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    float g[1000];
    TU_OK(example(g));
    assert_true(work_done >= 1);
    assert_true(world_size >= 1);
    /* Two sums over the ranks of i: i * size^2. */
    float n2 = (float)(world_size * world_size);
    for (int i = 0; i < 1000; i++)
        if (g[i] != (float)i * n2) fail_msg("g[%d] = %g, want %g", i, g[i], (float)i * n2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
