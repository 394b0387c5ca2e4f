/* The comm watchdog across processes: the last rank stalls (sleeps past a
 * 1-second timeout) while the others wait in a blocking collective and in a
 * ring allreduce. The waiting ranks must get DUET_ETIMEOUT in bounded time,
 * with a message naming the operation, its label and the stalled rank (and
 * no other), must not spin a core while they wait, and every later
 * operation on the comm or its duplicates must fail at once. No verdict
 * reads a clock: backing off and failing at once are judged by the poll
 * loop's own counters (duet__wait_counts), "not before the timeout" by the
 * time the watchdog's message reports. Run under mpiexec -n 1, 2 and 3
 * (with one process there is nobody to wait for). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static int rank, size;

/* The seconds without progress the watchdog's message reports ("made no
 * progress for 1.0 s"); fails the test when the message has none. */
static double reported_wait(const char *msg) {
    const char *p = strstr(msg, "made no progress for ");
    if (p == NULL) fail_msg("rank %d: no 'made no progress for' in: %s", rank, msg);
    return strtod(p + strlen("made no progress for "), NULL);
}

/* The waits between two counts backed off: they slept, and no poll after a
 * sleep went back to spinning without progress. */
static void expect_backed_off(duet__wait_counts a, duet__wait_counts b) {
    if (b.sleeps == a.sleeps)
        fail_msg("rank %d: %llu idle polls and not one sleep: the wait spun", rank,
                 (unsigned long long)(b.idle_polls - a.idle_polls));
    if (b.spins_after_sleep != a.spins_after_sleep)
        fail_msg("rank %d: %llu polls spun after the wait had backed off", rank,
                 (unsigned long long)(b.spins_after_sleep - a.spins_after_sleep));
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
        duet__wait_counts n0 = duet__wait_counts_get();
        int rc = duet_comm_barrier(c);
        duet__wait_counts n1 = duet__wait_counts_get();
        assert_int_equal(rc, DUET_ETIMEOUT);
        const char *msg = duet_last_error();
        if (strstr(msg, "watchdog: barrier #0 on 'test barrier' made no progress") == NULL)
            fail_msg("rank %d: %s", rank, msg);
        expect_absent(msg, stalled);
        if (rank == 0)
            printf("rank 0 (%llu idle polls, %llu sleeps): %s\n",
                   (unsigned long long)(n1.idle_polls - n0.idle_polls),
                   (unsigned long long)(n1.sleeps - n0.sleeps), msg);
        /* Not before the 1 s timeout, as the watchdog itself measured it.
         * That it gave up at all, before the stalled rank joined at 6 s, is
         * the DUET_ETIMEOUT above; a wait that never gives up is CTest's
         * timeout. */
        if (reported_wait(msg) < 1.0) fail_msg("rank %d: gave up early: %s", rank, msg);
        /* Backing off, not holding a core: counted, so that load can make
         * neither a spinning wait look right nor a right one look wrong. */
        expect_backed_off(n0, n1);
        /* Broken: later operations, also on a duplicate, fail at once, that
         * is without polling even once. */
        float x = 1;
        assert_int_equal(duet_comm_allreduce(c, &x, 1, DUET_DTYPE_F32, DUET_REDUCE_SUM),
                         DUET_ETIMEOUT);
        assert_int_equal(duet_comm_allreduce(dup, &x, 1, DUET_DTYPE_F32, DUET_REDUCE_SUM),
                         DUET_ETIMEOUT);
        assert_non_null(strstr(duet_last_error(), "test barrier"));
        duet__wait_counts n2 = duet__wait_counts_get();
        if (n2.idle_polls != n1.idle_polls)
            fail_msg("rank %d: a broken comm's allreduce polled %llu times", rank,
                     (unsigned long long)(n2.idle_polls - n1.idle_polls));
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
        duet__wait_counts n0 = duet__wait_counts_get();
        assert_int_equal(duet_comm_wait(&req), DUET_ETIMEOUT);
        duet__wait_counts n1 = duet__wait_counts_get();
        assert_null(req);
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
        printf("rank %d: %s\n", rank, msg);
        /* Not before the 1 s timeout; one that never gives up is CTest's
         * timeout. */
        if (reported_wait(msg) < 1.0) fail_msg("rank %d: gave up early: %s", rank, msg);
        expect_backed_off(n0, n1);
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
