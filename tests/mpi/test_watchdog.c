/* The comm watchdog across processes: the last rank stalls (sleeps past a
 * 1-second timeout) while the others wait in a blocking collective and in a
 * ring allreduce. The waiting ranks must get DUET_ETIMEOUT in bounded time,
 * with a message naming the operation, its label and the stalled rank (and
 * no other), must not spin a core while they wait, and every later
 * operation on the comm or its duplicates must fail at once. Run under
 * mpiexec -n 1, 2 and 3 (with one process there is nobody to wait for). */
#include "testutil.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static int rank, size;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static duet_comm *comm_with_timeout(double seconds) {
    duet_comm *c = NULL;
    TU_OK(duet_comm_create(MPI_COMM_WORLD, &c));
    duet_comm_opts o = duet_comm_opts_default();
    o.timeout_s = seconds;
    TU_OK(duet_comm_set_opts(c, &o));
    assert_true(duet_comm_get_opts(c).timeout_s == seconds);
    return c;
}

static void expect_absent(const char *msg, int stalled) {
    char want[64];
    snprintf(want, sizeof want, "did not take part: %d (no answer", stalled);
    if (strstr(msg, want) == NULL) fail_msg("rank %d: no '%s' in: %s", rank, want, msg);
    /* Only the stalled rank is named: no ", <other>" after it. */
    for (int p = 0; p < size; p++) {
        if (p == stalled || p == rank) continue;
        snprintf(want, sizeof want, "did not take part: %d", p);
        if (strstr(msg, want) != NULL) fail_msg("rank %d: rank %d named in: %s", rank, p, msg);
        snprintf(want, sizeof want, ", %d (", p);
        if (strstr(msg, want) != NULL) fail_msg("rank %d: rank %d named in: %s", rank, p, msg);
    }
}

static void test_options(void **state) {
    (void)state;
    duet_comm *c = comm_with_timeout(3.5);
    duet_comm_opts bad = duet_comm_get_opts(c);
    bad.timeout_s = 0;
    assert_int_equal(duet_comm_set_opts(c, &bad), DUET_EINVAL);
    bad.timeout_s = -1;
    assert_int_equal(duet_comm_set_opts(c, &bad), DUET_EINVAL);
    /* A duplicate inherits the timeout (a DDP dups its comm). */
    duet_comm *d = NULL;
    TU_OK(duet_comm_dup(c, &d));
    assert_true(duet_comm_get_opts(d).timeout_s == 3.5);
    duet_comm_destroy(d);
    duet_comm_destroy(c);
}

/* The stalled rank sleeps, then joins the barrier late (so that the job can
 * finish cleanly); the others must have given up long before. */
static void test_stalled_barrier(void **state) {
    (void)state;
    if (size == 1) skip();
    int stalled = size - 1;
    duet_comm *c = comm_with_timeout(rank == stalled ? 600 : 1.0);
    duet_comm_set_name(c, "test barrier");
    duet_comm *dup = NULL;
    TU_OK(duet_comm_dup(c, &dup));
    if (rank == stalled) {
        sleep(6);
        TU_OK(duet_comm_barrier(c)); /* the others' abandoned barrier completes */
    } else {
        double t0 = duet_time_now(), cpu0 = cpu_now();
        int rc = duet_comm_barrier(c);
        double wall = duet_time_now() - t0, cpu = cpu_now() - cpu0;
        assert_int_equal(rc, DUET_ETIMEOUT);
        const char *msg = duet_last_error();
        if (strstr(msg, "watchdog: barrier #0 on 'test barrier' made no progress") == NULL)
            fail_msg("rank %d: %s", rank, msg);
        expect_absent(msg, stalled);
        if (rank == 0) printf("rank 0 (%.2f s, %.3f s CPU): %s\n", wall, cpu, msg);
        /* Not before the 1 s timeout (load only makes the wait longer). That
         * it gave up at all, before the stalled rank joined at 6 s, is the
         * DUET_ETIMEOUT above; a wait that never gives up is CTest's
         * timeout. */
        if (wall < 1.0) fail_msg("rank %d: gave up after %.2f s", rank, wall);
        /* Backing off: a spinning wait burns ~100% of a core; load lowers
         * this process's CPU share, so it cannot make a backing-off wait
         * look like a spinning one. */
        if (cpu > 0.2 * wall)
            fail_msg("rank %d: used %.2f s of CPU while waiting %.2f s", rank, cpu, wall);
        /* Broken: later operations, also on a duplicate, fail at once. */
        float x = 1;
        t0 = duet_time_now();
        assert_int_equal(duet_comm_allreduce(c, &x, 1, DUET_DTYPE_F32, DUET_REDUCE_SUM),
                         DUET_ETIMEOUT);
        assert_int_equal(duet_comm_allreduce(dup, &x, 1, DUET_DTYPE_F32, DUET_REDUCE_SUM),
                         DUET_ETIMEOUT);
        assert_non_null(strstr(duet_last_error(), "test barrier"));
        /* At once: a call that waited would take the whole 1 s timeout.
         * A generous bound (a check of a flag takes microseconds). */
        assert_true(duet_time_now() - t0 < 1.0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    duet_comm_destroy(dup);
    duet_comm_destroy(c);
}

/* A ring allreduce (the DDP's bucket path) that the stalled rank never
 * joins: the message names the request's label and the peer whose message
 * has not arrived; the roll call names the stalled rank. */
static void test_stalled_ring(void **state) {
    (void)state;
    if (size == 1) skip();
    int stalled = size - 1;
    duet_comm *c = comm_with_timeout(1.0);
    float buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (float)i;
    if (rank == stalled) {
        sleep(4); /* never takes part */
    } else {
        duet_comm_request *req = NULL;
        TU_OK(duet_comm_iallreduce(c, buf, 1000, DUET_DTYPE_F32, DUET_REDUCE_SUM, &req));
        duet_comm_request_set_label(req, "DDP 'test' gradient bucket 0 of 1");
        double t0 = duet_time_now();
        assert_int_equal(duet_comm_wait(&req), DUET_ETIMEOUT);
        assert_null(req);
        double wall = duet_time_now() - t0;
        const char *msg = duet_last_error();
        if (strstr(msg, "allreduce #0 on 'DDP 'test' gradient bucket 0 of 1' made no progress") ==
            NULL)
            fail_msg("rank %d: %s", rank, msg);
        /* Rank 0's left neighbour (or partner) is the stalled rank. */
        if (rank == 0) {
            char want[64];
            snprintf(want, sizeof want, "waiting for rank %d's message", stalled);
            if (strstr(msg, want) == NULL) fail_msg("rank 0: no '%s' in: %s", want, msg);
        }
        expect_absent(msg, stalled);
        printf("rank %d (%.2f s): %s\n", rank, wall, msg);
        /* Not before the 1 s timeout; one that never gives up is CTest's
         * timeout, not a clock reading here. */
        if (wall < 1.0) fail_msg("rank %d: gave up after %.2f s", rank, wall);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    duet_comm_destroy(c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_stalled_barrier),
        cmocka_unit_test(test_stalled_ring),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
