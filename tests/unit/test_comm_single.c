/* comm layer without a launcher: half-precision conversions against the
 * compiler's _Float16 and an independent bfloat16 rounding, a world of one
 * (every collective, chunked paths, MPI errors as status codes), and the
 * abort helper ending a 2-process job whose other rank would otherwise hang. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"

/* Under AddressSanitizer: unwind allocation stacks fully, so that Open MPI's
 * own long-lived allocations are traced into libmpi and matched by
 * tests/lsan.supp (with the fast unwinder they stop in MPI components that
 * MPI_Finalize has unloaded, which no suppression can name). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static const char *self_path;
static duet_comm *world;

/* ---- conversions ----------------------------------------------------------- */

static uint16_t f16_bits(_Float16 h) {
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static void test_f16_all_halves(void **state) {
    (void)state;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u, back;
        _Float16 ref;
        memcpy(&ref, &h, 2);
        float f;
        duet_f16_to_f32(&f, &h, 1);
        if (isnan((float)ref)) {
            assert_true(isnan(f));
            continue;
        }
        if (f != (float)ref) fail_msg("f16 0x%04x -> %g, want %g", u, f, (double)(float)ref);
        duet_f32_to_f16(&back, &f, 1);
        if (back != h) fail_msg("f16 0x%04x roundtrip gave 0x%04x", u, back);
    }
}

static void test_f16_rounding_matches_compiler(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(11, 0);
    for (int i = 0; i < 400000; i++) {
        float f;
        if (i % 4 == 0) {
            /* Exact ties and neighbours: a half value plus half an ulp. */
            uint16_t h = (uint16_t)(duet_rng_u64(&rng) & 0x7bff);
            float a;
            duet_f16_to_f32(&a, &h, 1);
            uint16_t h1 = (uint16_t)(h + 1);
            float b;
            duet_f16_to_f32(&b, &h1, 1);
            f = a + (b - a) * 0.5f;
            if (i % 8 == 0) f = nextafterf(f, INFINITY);
        } else {
            /* Random bits over the whole range incl. subnormals and overflow. */
            uint32_t u = (uint32_t)duet_rng_u64(&rng);
            memcpy(&f, &u, 4);
            if (isnan(f)) continue;
        }
        uint16_t got;
        duet_f32_to_f16(&got, &f, 1);
        uint16_t want = f16_bits((_Float16)f);
        if (got != want) fail_msg("f32 %a -> f16 0x%04x, want 0x%04x", (double)f, got, want);
    }
    float nan = NAN;
    uint16_t h;
    duet_f32_to_f16(&h, &nan, 1);
    float back;
    duet_f16_to_f32(&back, &h, 1);
    assert_true(isnan(back));
}

/* bfloat16 reference: of the two neighbours around |f| (truncation and one
 * ulp away, where one past the largest finite value counts as 2^128, the
 * overflow threshold), the nearer one, the even one on a tie; in double. */
static double bf16_magnitude(uint16_t b) {
    b &= 0x7fff;
    if (b == 0x7f80) return ldexp(1.0, 128);
    uint32_t u = (uint32_t)b << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static uint16_t bf16_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double a = fabs((double)f);
    double dlo = a - bf16_magnitude(lo), dhi = bf16_magnitude(hi) - a;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_bf16_rounding(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)duet_rng_u64(&rng);
        if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact tie */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f) || isinf(f)) continue;
        uint16_t got;
        duet_f32_to_bf16(&got, &f, 1);
        uint16_t want = bf16_ref(f);
        if (got != want) fail_msg("f32 %a -> bf16 0x%04x, want 0x%04x", (double)f, got, want);
    }
    float one = 1.0f, back;
    uint16_t b;
    duet_f32_to_bf16(&b, &one, 1);
    assert_int_equal(b, 0x3f80);
    duet_bf16_to_f32(&back, &b, 1);
    assert_true(back == 1.0f);
}

/* ---- a world of one ------------------------------------------------------- */

static void test_world_of_one(void **state) {
    (void)state;
    assert_int_equal(duet_comm_size(world), 1);
    assert_int_equal(duet_comm_rank(world), 0);
    /* We started without a launcher and nobody else initialised MPI. */
    assert_true(duet_comm_initialised_mpi());
    assert_true(duet_comm_mpi(world) != MPI_COMM_WORLD);

    float f[5] = {1, -2, 3.5f, 0, 7};
    TU_OK(duet_comm_allreduce(world, f, 5, DUET_DTYPE_F32, DUET_REDUCE_SUM));
    assert_true(f[2] == 3.5f && f[1] == -2.0f);
    int64_t i64[2] = {INT64_C(1) << 40, -3};
    TU_OK(duet_comm_allreduce(world, i64, 2, DUET_DTYPE_I64, DUET_REDUCE_MAX));
    assert_true(i64[0] == INT64_C(1) << 40 && i64[1] == -3);
    uint16_t h[3];
    float hv[3] = {0.1f, 1000.0f, -2.5f}, back[3];
    duet_f32_to_f16(h, hv, 3);
    TU_OK(duet_comm_allreduce(world, h, 3, DUET_DTYPE_F16, DUET_REDUCE_SUM));
    duet_f16_to_f32(back, h, 3);
    tu_assert_close(back, hv, 3, 1e-3, 0, "f16 allreduce of one");
    double d = 2.25;
    TU_OK(duet_comm_bcast(world, &d, 1, DUET_DTYPE_F64, 0));
    assert_true(d == 2.25);
    uint64_t send = 77, recv = 0;
    TU_OK(duet_comm_allgather(world, &send, &recv, 1, DUET_DTYPE_U64));
    assert_true(recv == 77);
    TU_OK(duet_comm_barrier(world));

    duet_comm_request *req = NULL;
    TU_OK(duet_comm_iallreduce(world, f, 5, DUET_DTYPE_F32, DUET_REDUCE_SUM, &req));
    bool done = false;
    for (int k = 0; k < 1000 && !done; k++) TU_OK(duet_comm_test(&req, &done));
    assert_true(done);
    assert_null(req);
    TU_OK(duet_comm_wait(&req)); /* NULL request: returns at once */
}

static void test_chunked_paths_of_one(void **state) {
    (void)state;
    duet_comm *c = NULL;
    TU_OK(duet_comm_dup(world, &c));
    duet__comm_set_max_chunk(c, 3);
    float buf[10], want[10];
    for (int i = 0; i < 10; i++) buf[i] = want[i] = (float)i * 0.5f;
    TU_OK(duet_comm_allreduce(c, buf, 10, DUET_DTYPE_F32, DUET_REDUCE_MIN));
    tu_assert_close(buf, want, 10, 0, 0, "chunked allreduce");
    float got[10] = {0};
    TU_OK(duet_comm_allgather(c, buf, got, 10, DUET_DTYPE_F32));
    tu_assert_close(got, want, 10, 0, 0, "chunked allgather");
    duet_comm_request *req = NULL;
    TU_OK(duet_comm_iallreduce(c, buf, 10, DUET_DTYPE_F32, DUET_REDUCE_SUM, &req));
    TU_OK(duet_comm_wait(&req));
    assert_null(req);
    tu_assert_close(buf, want, 10, 0, 0, "chunked iallreduce");
    duet_comm_destroy(c);
}

static void test_mpi_errors_are_statuses(void **state) {
    (void)state;
    /* A root outside the group is refused before MPI sees it ... */
    int x = 1;
    assert_int_equal(duet_comm_bcast(world, &x, 1, DUET_DTYPE_I32, 3), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "root 3"));
    /* ... and an MPI call that fails on our communicator returns a code with
     * MPI's message and the call site instead of aborting. */
    int rc = DUET__MPI_CHECK(MPI_Bcast(&x, 1, MPI_INT, 5, duet_comm_mpi(world)));
    assert_int_equal(rc, DUET_EMPI);
    assert_non_null(strstr(duet_last_error(), "MPI_Bcast failed at test_comm_single.c:"));
    assert_int_equal(duet_comm_allreduce(world, &x, 1, (duet_dtype)99, DUET_REDUCE_SUM),
                     DUET_EINVAL);
    assert_int_equal(duet_comm_create(MPI_COMM_NULL, &(duet_comm *){NULL}), DUET_EINVAL);
}

/* The abort helper, in a child job: rank 1 aborts while rank 0 waits in a
 * barrier that can only end by the abort. */
static int abort_child(void) {
    duet_comm *c = NULL;
    if (duet_comm_world(&c) != DUET_OK) return 3;
    if (duet_comm_rank(c) == 1) duet_comm_abort(c, 5, "planned abort %d", 42);
    duet_comm_barrier(c);
    return 0; /* rank 0 with a world of one: the barrier returns */
}

static void test_abort_ends_the_job(void **state) {
    (void)state;
    char out[] = "/tmp/duet_abort_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 mpiexec --allow-run-as-root --oversubscribe -n 2 %s --abort-child "
             ">%s 2>&1",
             self_path, out);
    double t0 = duet_time_now();
    int status = system(cmd);
    double dt = duet_time_now() - t0;
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char text[8192] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    remove(out);
    assert_true(status != 0);
    /* timeout(1) exits 124 when it had to kill the job: that is a hang. */
    if (WIFEXITED(status) && WEXITSTATUS(status) == 124)
        fail_msg("the aborted job hung (%.1f s): %s", dt, text);
    if (strstr(text, "duet: rank 1: planned abort 42") == NULL)
        fail_msg("abort message missing from the job's output: %s", text);
}

static int setup(void **state) {
    (void)state;
    return duet_comm_world(&world) == DUET_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    duet_comm_destroy(world);
    return duet_comm_finalize() == DUET_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "--abort-child") == 0) {
        int rc = abort_child();
        duet_comm_finalize();
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_chunked_paths_of_one),
        cmocka_unit_test(test_mpi_errors_are_statuses),
    };
    /* The abort test starts its own job, so it runs before this process
     * becomes an MPI singleton. */
    const struct CMUnitTest before_mpi[] = {
        cmocka_unit_test(test_f16_all_halves),
        cmocka_unit_test(test_f16_rounding_matches_compiler),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_abort_ends_the_job),
    };
    int failed = cmocka_run_group_tests_name("comm_no_mpi", before_mpi, NULL, NULL);
    return failed + cmocka_run_group_tests_name("comm_world_of_one", tests, setup, teardown);
}
