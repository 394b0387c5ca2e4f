/* DUET_BLAS_THREADS overrides duet's single-threaded BLAS default. Its own
 * program, because the thread count is set once per process, at the first
 * GEMM. */
#include "testutil.h"

#include <cblas.h>

#include "ops/ops_internal.h"

static void test_env_sets_blas_threads(void **state) {
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    duet_sgemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    float want[4] = {19, 22, 43, 50};
    tu_assert_close(c, want, 4, 0, 0, "2x2 sgemm");
    assert_int_equal(duet__blas_init(), 2);
    assert_int_equal(openblas_get_num_threads(), 2);
}

int main(void) {
    /* Before any GEMM of this process. */
    setenv("DUET_BLAS_THREADS", "2", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_sets_blas_threads),
    };
    return cmocka_run_group_tests_name("ops_blas_threads_env", tests, NULL, NULL);
}
