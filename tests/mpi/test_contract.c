/* The model contract across ranks, under mpiexec -n 1, 2, 3: the dispatcher
 * (duet_model_train_step) averages the log values itself, exactly once,
 * whether the model forgets to or averages too; ranks that log different
 * names fail together.
 *
 * MPI's profiling interface counts the collectives: this program's
 * MPI_Allreduce / MPI_Allgather (and their nonblocking forms, which the
 * watchdog's waits use) are found before the library's, and pass on to
 * PMPI_*. */
#include "testutil.h"

#include <math.h>
#include <mpi.h>
#include <string.h>

static duet_comm *world;
static int g_rank, g_size;
static int n_allreduce, n_allgather;

int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
    n_allreduce++;
    return PMPI_Allreduce(send, recv, count, type, op, comm);
}

int MPI_Allgather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount,
                  MPI_Datatype rtype, MPI_Comm comm) {
    n_allgather++;
    return PMPI_Allgather(send, scount, stype, recv, rcount, rtype, comm);
}

int MPI_Iallreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request *req) {
    n_allreduce++;
    return PMPI_Iallreduce(send, recv, count, type, op, comm, req);
}

int MPI_Iallgather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount,
                   MPI_Datatype rtype, MPI_Comm comm, MPI_Request *req) {
    n_allgather++;
    return PMPI_Iallgather(send, scount, stype, recv, rcount, rtype, comm, req);
}

/* What the test model does in its train_step. */
enum behaviour { FORGETS, AVERAGES_TOO, EXTRA_NAME_ON_LAST, FAILS };

/* Logs v = rank + 1 and w = rank^2 / 3 (not exact in binary). */
static int log_train_step(duet_model *m, const duet_batch *b, duet_optimizer_set *opts,
                          duet_log_vars *log) {
    (void)b, (void)opts;
    enum behaviour how = *(enum behaviour *)duet_model_impl(m);
    if (how == FAILS) return duet__error(DUET_EINVAL, "this model always fails");
    DUET_TRY(duet_log_vars_set(log, "v", g_rank + 1.0));
    DUET_TRY(duet_log_vars_set(log, "w", g_rank * g_rank / 3.0));
    if (how == EXTRA_NAME_ON_LAST && g_rank == g_size - 1)
        DUET_TRY(duet_log_vars_set(log, "extra", 1.0));
    if (how == AVERAGES_TOO) DUET_TRY(duet_log_vars_average(log, duet_model_comm(m)));
    return DUET_OK;
}

static const duet_model_ops log_ops = {.name = "LogOnly", .train_step = log_train_step};
static const duet_module_type log_root = {"LogOnly", NULL, NULL};

static duet_model *log_model(enum behaviour *how) {
    duet_module *root = NULL;
    TU_OK(duet_module_create(&log_root, NULL, &root));
    duet_model *m = NULL;
    TU_OK(duet_model_create(&log_ops, how, root, &m));
    duet_model_set_comm(m, world);
    return m;
}

/* One step; returns its status and the collectives it made. */
static int step(enum behaviour how, duet_log_vars *log, int *ncoll) {
    duet_model *m = log_model(&how);
    duet_batch b = {0};
    n_allreduce = n_allgather = 0;
    int rc = duet_model_train_step(m, &b, NULL, log);
    *ncoll = n_allreduce + n_allgather;
    duet_model_destroy(m);
    return rc;
}

static void check_means(const duet_log_vars *log) {
    double v = 0, w = 0, want_w = 0;
    for (int r = 0; r < g_size; r++) want_w += (r * r / 3.0) / g_size;
    assert_true(duet_log_vars_get(log, "v", &v));
    assert_true(duet_log_vars_get(log, "w", &w));
    assert_true(fabs(v - (g_size + 1) / 2.0) < 1e-12);
    assert_true(fabs(w - want_w) < 1e-12);
}

static void test_dispatcher_averages(void **state) {
    (void)state;
    duet_log_vars log;
    int ncoll = -1;
    /* The model forgets: the dispatcher averages (one allgather of the
     * names, one allreduce of the values). */
    TU_OK(step(FORGETS, &log, &ncoll));
    check_means(&log);
    assert_int_equal(ncoll, g_size > 1 ? 2 : 0);
    /* The model averages too: its call is a no-op; still one round. */
    TU_OK(step(AVERAGES_TOO, &log, &ncoll));
    check_means(&log);
    assert_int_equal(ncoll, g_size > 1 ? 2 : 0);
    /* The comm is back after the step. */
    enum behaviour how = FORGETS;
    duet_model *m = log_model(&how);
    assert_ptr_equal(duet_model_comm(m), world);
    duet_model_destroy(m);
}

static void test_dispatcher_errors(void **state) {
    (void)state;
    duet_log_vars log;
    int ncoll = -1;
    /* Different names: every rank fails, none hangs. */
    int rc = step(EXTRA_NAME_ON_LAST, &log, &ncoll);
    assert_int_equal(rc, g_size > 1 ? DUET_EMISMATCH : DUET_OK);
    if (g_size > 1) assert_non_null(strstr(duet_last_error(), "same names"));
    /* A failed step reports the model's error and averages nothing. */
    tu_expect_error(step(FAILS, &log, &ncoll), DUET_EINVAL, "LogOnly.train_step",
                    "always fails", NULL);
    assert_int_equal(ncoll, 0);
}

static int setup(void **state) {
    (void)state;
    if (duet_comm_world(&world) != DUET_OK) return -1;
    g_rank = duet_comm_rank(world);
    g_size = duet_comm_size(world);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_comm_destroy(world);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatcher_averages),
        cmocka_unit_test(test_dispatcher_errors),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    duet_comm_finalize();
    return failed;
}
