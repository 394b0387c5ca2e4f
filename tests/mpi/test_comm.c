/* comm layer across processes: the host program initialises MPI itself (duet
 * must neither re-initialise nor finalize it), every collective with
 * rank-dependent data against closed forms, the chunked paths, F16/BF16
 * sums through the user-defined op, nonblocking allreduce with test/wait,
 * and MPI errors coming back as statuses on every rank. */
#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "comm/comm_internal.h"

/* Under AddressSanitizer: unwind allocation stacks fully, so that Open MPI's
 * own long-lived allocations are traced into libmpi and matched by
 * tests/lsan.supp (with the fast unwinder they stop in MPI components that
 * MPI_Finalize has unloaded, which no suppression can name). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static duet_comm *world;
static int rank, size;

static void test_host_owns_mpi(void **state) {
    (void)state;
    assert_false(duet_comm_initialised_mpi());
    int r = -1, s = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    assert_int_equal(duet_comm_rank(world), r);
    assert_int_equal(duet_comm_size(world), s);
    /* A comm over the host's own communicator is a private duplicate. */
    duet_comm *c = NULL;
    TU_OK(duet_comm_create(MPI_COMM_WORLD, &c));
    int cmp = 0;
    MPI_Comm_compare(duet_comm_mpi(c), MPI_COMM_WORLD, &cmp);
    assert_int_equal(cmp, MPI_CONGRUENT);
    duet_comm_destroy(c);
    /* duet_comm_init with MPI already up is a no-op. */
    TU_OK(duet_comm_init(NULL, NULL));
    assert_false(duet_comm_initialised_mpi());
}

static void test_allreduce_ops(void **state) {
    (void)state;
    enum { N = 37 };
    float f[N];
    double d[N];
    int64_t l[N];
    for (int i = 0; i < N; i++) {
        f[i] = (float)(rank + 1) * (float)i;
        d[i] = (rank + 1) * 0.25 + i;
        l[i] = (int64_t)(rank - i) * (INT64_C(1) << 33);
    }
    TU_OK(duet_comm_allreduce(world, f, N, DUET_DTYPE_F32, DUET_REDUCE_SUM));
    TU_OK(duet_comm_allreduce(world, d, N, DUET_DTYPE_F64, DUET_REDUCE_MAX));
    TU_OK(duet_comm_allreduce(world, l, N, DUET_DTYPE_I64, DUET_REDUCE_MIN));
    float tri = (float)(size * (size + 1) / 2);
    for (int i = 0; i < N; i++) {
        assert_true(f[i] == tri * (float)i);
        assert_true(d[i] == size * 0.25 + i);
        assert_true(l[i] == (int64_t)(0 - i) * (INT64_C(1) << 33));
    }
}

static void test_chunked_collectives(void **state) {
    (void)state;
    duet_comm *c = NULL;
    TU_OK(duet_comm_dup(world, &c));
    duet__comm_set_max_chunk(c, 4); /* 4 elements per MPI call */
    enum { N = 23 };
    int32_t a[N];
    for (int i = 0; i < N; i++) a[i] = rank * 1000 + i;
    TU_OK(duet_comm_allreduce(c, a, N, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    for (int i = 0; i < N; i++) assert_int_equal(a[i], 1000 * size * (size - 1) / 2 + size * i);

    float b[N];
    for (int i = 0; i < N; i++) b[i] = rank == size - 1 ? (float)i * 3.0f : -1.0f;
    TU_OK(duet_comm_bcast(c, b, N, DUET_DTYPE_F32, size - 1));
    for (int i = 0; i < N; i++) assert_true(b[i] == (float)i * 3.0f);

    /* Allgather with a block larger than the chunk: each rank's block lands
     * at its place although it travels in pieces. */
    uint64_t send[N], *recv = calloc((size_t)size * N, sizeof *recv);
    for (int i = 0; i < N; i++) send[i] = ((uint64_t)rank << 40) | (uint64_t)i;
    TU_OK(duet_comm_allgather(c, send, recv, N, DUET_DTYPE_U64));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++) assert_true(recv[r * N + i] == (((uint64_t)r << 40) | (uint64_t)i));
    free(recv);

    float g[N];
    for (int i = 0; i < N; i++) g[i] = (float)(rank + i);
    duet_comm_request *req = NULL;
    TU_OK(duet_comm_iallreduce(c, g, N, DUET_DTYPE_F32, DUET_REDUCE_MAX, &req));
    TU_OK(duet_comm_wait(&req));
    assert_null(req);
    for (int i = 0; i < N; i++) assert_true(g[i] == (float)(size - 1 + i));
    duet_comm_destroy(c);
}

/* Half sums: values whose sum is exact in the format must come back exact;
 * general values must match float32 sums to the format's precision. */
static void test_half_sums(void **state) {
    (void)state;
    enum { N = 300 };
    float v[N], want[N], got[N];
    uint16_t h[N];
    for (int i = 0; i < N; i++) {
        v[i] = (float)(i % 17 - 8) * 0.125f * (float)(rank + 1); /* exact in both */
        want[i] = (float)(i % 17 - 8) * 0.125f * (float)(size * (size + 1) / 2);
    }
    duet_f32_to_f16(h, v, N);
    TU_OK(duet_comm_allreduce(world, h, N, DUET_DTYPE_F16, DUET_REDUCE_SUM));
    duet_f16_to_f32(got, h, N);
    tu_assert_close(got, want, N, 0, 0, "exact f16 sum");
    duet_f32_to_bf16(h, v, N);
    TU_OK(duet_comm_allreduce(world, h, N, DUET_DTYPE_BF16, DUET_REDUCE_SUM));
    duet_bf16_to_f32(got, h, N);
    tu_assert_close(got, want, N, 0, 0, "exact bf16 sum");

    /* Random values, nonblocking: compare with the float32 sum of the same
     * rounded inputs (each rank can compute every rank's input). */
    for (int i = 0; i < N; i++) {
        want[i] = 0;
        for (int r = 0; r < size; r++) {
            duet_rng g = duet_rng_make(99, (uint64_t)(r * N + i));
            float x = duet_rng_normal(&g) * 10.0f;
            uint16_t xh;
            duet_f32_to_f16(&xh, &x, 1);
            float xr;
            duet_f16_to_f32(&xr, &xh, 1);
            want[i] += xr;
            if (r == rank) v[i] = x;
        }
    }
    duet_f32_to_f16(h, v, N);
    duet_comm_request *req = NULL;
    TU_OK(duet_comm_iallreduce(world, h, N, DUET_DTYPE_F16, DUET_REDUCE_SUM, &req));
    bool done = false;
    while (!done) TU_OK(duet_comm_test(&req, &done));
    duet_f16_to_f32(got, h, N);
    /* Each of the size-1 additions rounds once (2^-11 relative). */
    tu_assert_close(got, want, N, 2e-3, 5e-2, "f16 sum of random values");

    /* Max on halves too. */
    for (int i = 0; i < N; i++) v[i] = (float)((rank * 7 + i) % 11);
    duet_f32_to_f16(h, v, N);
    TU_OK(duet_comm_allreduce(world, h, N, DUET_DTYPE_F16, DUET_REDUCE_MAX));
    duet_f16_to_f32(got, h, N);
    for (int i = 0; i < N; i++) {
        float m = 0;
        for (int r = 0; r < size; r++) m = fmaxf(m, (float)((r * 7 + i) % 11));
        assert_true(got[i] == m);
    }
}

/* The ring behind iallreduce (F32/F16/BF16): exact results on exactly
 * summable values for every op and awkward counts (fewer elements than
 * ranks, odd lengths, chunked), several operations in flight completed in
 * reverse order, bit-identical results on random values, and the same
 * answers through MPI_Iallreduce. */
static float exact_value(int r, size_t i, int salt) {
    return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)salt) % 41) - 20) * 0.125f;
}

static void check_ring_case(duet_comm *c, size_t count, duet_reduce_op op, int salt) {
    float *v = malloc((count + 1) * sizeof *v);
    for (size_t i = 0; i < count; i++) v[i] = exact_value(rank, i, salt);
    duet_comm_request *req = NULL;
    TU_OK(duet_comm_iallreduce(c, v, count, DUET_DTYPE_F32, op, &req));
    bool done = false;
    while (!done) TU_OK(duet_comm_test(&req, &done));
    for (size_t i = 0; i < count; i++) {
        float w = exact_value(0, i, salt);
        for (int r = 1; r < size; r++) {
            float x = exact_value(r, i, salt);
            w = op == DUET_REDUCE_MAX ? fmaxf(w, x) : op == DUET_REDUCE_MIN ? fminf(w, x) : w + x;
        }
        if (op == DUET_REDUCE_AVG && size > 1) w *= (float)(1.0 / size); /* exact total, one division */
        if (v[i] != w) fail_msg("count %zu op %d [%zu]: %g, want %g", count, op, i, v[i], w);
    }
    free(v);
}

static void test_ring_iallreduce(void **state) {
    (void)state;
    duet_comm *c = NULL;
    TU_OK(duet_comm_dup(world, &c));
    /* Up to 64 KiB a power-of-two group uses recursive doubling; 70000
     * floats (273 KiB) take the ring on any group. */
    const size_t counts[] = {0, 1, 2, 5, 1000, 4097, 70000};
    for (int ring = 1; ring >= 0; ring--) {
        duet__comm_set_ring(c, ring);
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int op = 0; op < 4; op++) check_ring_case(c, counts[k], op, (int)k);
        duet__comm_set_max_chunk(c, 7);
        check_ring_case(c, 100, DUET_REDUCE_SUM, 9);
        check_ring_case(c, 100, DUET_REDUCE_AVG, 10);
        duet__comm_set_max_chunk(c, (size_t)INT_MAX);
    }
    duet__comm_set_ring(c, true);

    /* Six in flight (both algorithms), finished in reverse order. */
    enum { K = 6, N = 3001, NBIG = 20001 };
    float *bufs[K];
    duet_comm_request *reqs[K];
    for (int k = 0; k < K; k++) {
        size_t n = k % 2 ? NBIG : N;
        bufs[k] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) bufs[k][i] = exact_value(rank, i, 100 + k);
        TU_OK(duet_comm_iallreduce(c, bufs[k], n, DUET_DTYPE_F32, DUET_REDUCE_SUM, &reqs[k]));
    }
    for (int k = K - 1; k >= 0; k--) TU_OK(duet_comm_wait(&reqs[k]));
    for (int k = 0; k < K; k++) {
        size_t n = k % 2 ? NBIG : N;
        for (size_t i = 0; i < n; i++) {
            float w = 0;
            for (int r = 0; r < size; r++) w += exact_value(r, i, 100 + k);
            if (bufs[k][i] != w) fail_msg("in flight %d [%zu]: %g, want %g", k, i, bufs[k][i], w);
        }
        free(bufs[k]);
    }

    /* Random values: every rank ends with the same bits, both algorithms. */
    for (int big = 0; big < 2; big++) {
        size_t n = big ? NBIG : N;
        duet_rng g = duet_rng_make(5, (uint64_t)rank);
        float *v = malloc(n * sizeof *v), *root = malloc(n * sizeof *root);
        for (size_t i = 0; i < n; i++) v[i] = duet_rng_normal(&g);
        duet_comm_request *req = NULL;
        TU_OK(duet_comm_iallreduce(c, v, n, DUET_DTYPE_F32, DUET_REDUCE_AVG, &req));
        TU_OK(duet_comm_wait(&req));
        memcpy(root, v, n * sizeof *v);
        MPI_Bcast(root, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
        assert_memory_equal(root, v, n * sizeof *v);
        free(v);
        free(root);
    }
    duet_comm_destroy(c);
}

/* Blocking AVG, on floats and halves; integers refuse it. */
static void test_average(void **state) {
    (void)state;
    enum { N = 50 };
    double d[N];
    uint16_t h[N];
    float f[N], got[N];
    for (int i = 0; i < N; i++) {
        d[i] = (rank + 1) * (double)i;
        f[i] = (float)((rank + 1) * 2 * i); /* exact in fp16 for i < 50, size <= 3 */
    }
    TU_OK(duet_comm_allreduce(world, d, N, DUET_DTYPE_F64, DUET_REDUCE_AVG));
    duet_f32_to_f16(h, f, N);
    TU_OK(duet_comm_allreduce(world, h, N, DUET_DTYPE_F16, DUET_REDUCE_AVG));
    duet_f16_to_f32(got, h, N);
    for (int i = 0; i < N; i++) {
        assert_true(fabs(d[i] - (size + 1) / 2.0 * i) <= 1e-12 * i);
        float w = (float)((size + 1) * i); /* mean of 2i(r+1) over r */
        assert_true(fabsf(got[i] - w) <= 1e-3f * w);
    }
    int32_t x = 1;
    assert_int_equal(duet_comm_allreduce(world, &x, 1, DUET_DTYPE_I32, DUET_REDUCE_AVG), DUET_EINVAL);
}

static void test_allgather_and_barrier(void **state) {
    (void)state;
    double mine[2] = {rank * 1.5, -rank};
    double *all = calloc((size_t)size * 2, sizeof *all);
    TU_OK(duet_comm_allgather(world, mine, all, 2, DUET_DTYPE_F64));
    for (int r = 0; r < size; r++) {
        assert_true(all[2 * r] == r * 1.5);
        assert_true(all[2 * r + 1] == -r);
    }
    free(all);
    TU_OK(duet_comm_barrier(world));
}

static void test_errors_on_every_rank(void **state) {
    (void)state;
    int x = 0;
    /* The same bad call on every rank: every rank gets the status back. */
    int rc = DUET__MPI_CHECK(MPI_Bcast(&x, 1, MPI_INT, size + 2, duet_comm_mpi(world)));
    assert_int_equal(rc, DUET_EMPI);
    assert_non_null(strstr(duet_last_error(), "MPI_Bcast failed"));
    assert_int_equal(duet_comm_bcast(world, &x, 1, DUET_DTYPE_I32, -1), DUET_EINVAL);
    /* The group still works afterwards. */
    x = rank;
    TU_OK(duet_comm_allreduce(world, &x, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(x, size * (size - 1) / 2);
}

static int setup(void **state) {
    (void)state;
    return duet_comm_world(&world) == DUET_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    duet_comm_destroy(world);
    return 0;
}

int main(int argc, char **argv) {
    /* The host program owns MPI here. */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_owns_mpi),
        cmocka_unit_test(test_allreduce_ops),
        cmocka_unit_test(test_chunked_collectives),
        cmocka_unit_test(test_half_sums),
        cmocka_unit_test(test_ring_iallreduce),
        cmocka_unit_test(test_average),
        cmocka_unit_test(test_allgather_and_barrier),
        cmocka_unit_test(test_errors_on_every_rank),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    /* duet must not have finalized the host's MPI. */
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (duet_comm_finalize() != DUET_OK) failed++; /* no-op: duet did not initialise MPI */
    MPI_Finalized(&finalized);
    if (finalized) failed++;
    MPI_Finalize();
    return failed;
}
