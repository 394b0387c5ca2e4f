/* base layer: status codes and messages, RNG determinism and ranges,
 * aligned allocation. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(duet_err_name(DUET_OK), "DUET_OK");
    assert_string_equal(duet_err_name(DUET_ESHAPE), "DUET_ESHAPE");
    assert_string_equal(duet_strerror(DUET_ENOMEM), "out of memory");
    assert_string_equal(duet_err_name(-999), "DUET_UNKNOWN");
}

static void test_error_message_and_context(void **state) {
    (void)state;
    duet_clear_error();
    assert_string_equal(duet_last_error(), "");
    int rc = duet__error(DUET_EIO, "cannot open %s", "x.png");
    assert_int_equal(rc, DUET_EIO);
    assert_string_equal(duet_last_error(), "cannot open x.png");
    rc = duet__error_context(rc, "dataset %d", 3);
    assert_int_equal(rc, DUET_EIO);
    assert_string_equal(duet_last_error(), "dataset 3: cannot open x.png");
    /* Control bytes from a file name never reach a terminal raw (issue 35):
     * an escape sequence, a carriage return, DEL; newlines and tabs stay. */
    duet__error(DUET_EIO, "cannot open %s\n\tsee above", "a\x1b[31mb\rc\x7f.png");
    assert_string_equal(duet_last_error(), "cannot open a\\x1b[31mb\\x0dc\\x7f.png\n\tsee above");
    duet__error_context(DUET_EIO, "in %s", "d\x1b]0;x\x07");
    assert_string_equal(duet_last_error(),
                        "in d\\x1b]0;x\\x07: cannot open a\\x1b[31mb\\x0dc\\x7f.png\n\tsee above");
}

static void test_rng_deterministic_and_streams(void **state) {
    (void)state;
    duet_rng a = duet_rng_make(7, 0), b = duet_rng_make(7, 0), c = duet_rng_make(7, 1);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = duet_rng_u64(&a), y = duet_rng_u64(&b), z = duet_rng_u64(&c);
        assert_true(x == y);
        same_c += x == z;
    }
    assert_int_equal(same_c, 0);
    /* Saving the state is copying the struct. */
    duet_rng saved = a;
    uint64_t next = duet_rng_u64(&a);
    assert_true(duet_rng_u64(&saved) == next);
}

static void test_rng_ranges_and_moments(void **state) {
    (void)state;
    duet_rng r = duet_rng_make(1, 2);
    double sum = 0, sumsq = 0, usum = 0;
    const int n = 200000;
    int hist[5] = {0};
    for (int i = 0; i < n; i++) {
        float u = duet_rng_uniform(&r);
        assert_true(u >= 0.0f && u < 1.0f);
        usum += u;
        float g = duet_rng_normal(&r);
        sum += g;
        sumsq += (double)g * g;
        int64_t k = duet_rng_int(&r, -2, 2);
        assert_true(k >= -2 && k <= 2);
        hist[k + 2]++;
    }
    assert_true(fabs(usum / n - 0.5) < 0.01);
    assert_true(fabs(sum / n) < 0.01);
    assert_true(fabs(sumsq / n - 1.0) < 0.02);
    for (int k = 0; k < 5; k++) assert_true(fabs(hist[k] / (double)n - 0.2) < 0.01);
}

static void test_rng_permutation(void **state) {
    (void)state;
    duet_rng r = duet_rng_make(3, 0);
    int64_t perm[50];
    duet_rng_permutation(&r, perm, 50);
    int seen[50] = {0};
    int fixed = 0;
    for (int i = 0; i < 50; i++) {
        seen[perm[i]]++;
        fixed += perm[i] == i;
    }
    for (int i = 0; i < 50; i++) assert_int_equal(seen[i], 1);
    assert_true(fixed < 10);
}

static void test_aligned_alloc(void **state) {
    (void)state;
    float *p = duet_aligned_calloc(1000 * sizeof(float));
    assert_non_null(p);
    assert_true(((uintptr_t)p % DUET_ALIGNMENT) == 0);
    for (int i = 0; i < 1000; i++) assert_true(p[i] == 0.0f);
    duet_aligned_free(p);
    duet_aligned_free(NULL);
}

static void test_large_blocks_reused_and_zeroed(void **state) {
    (void)state;
    /* Large blocks come back from the cache (the point of it: no fresh page
     * faults per step); calloc must still hand out zeros. */
    size_t bytes = (size_t)4 << 20;
    unsigned char *a = duet_aligned_alloc(bytes);
    assert_non_null(a);
    memset(a, 0xff, bytes);
    duet_aligned_free(a);
    unsigned char *b = duet_aligned_calloc(bytes - 4096);
    assert_non_null(b);
    assert_true(((uintptr_t)b % DUET_ALIGNMENT) == 0);
    for (size_t i = 0; i < bytes - 4096; i += 997) assert_int_equal(b[i], 0);
#if !defined(__SANITIZE_ADDRESS__)
    assert_ptr_equal(a, b);
#endif
    /* A smaller request takes the front of the cached range and leaves the
     * rest cached for the next one; freed neighbours merge again, so the
     * whole range serves a request of the first size. */
    duet_aligned_free(b);
    unsigned char *c = duet_aligned_alloc(bytes / 2);
    unsigned char *d = duet_aligned_alloc(bytes / 2 - 8192);
    assert_non_null(c);
    assert_non_null(d);
    memset(c, 1, bytes / 2);
    memset(d, 2, bytes / 2 - 8192);
#if !defined(__SANITIZE_ADDRESS__)
    assert_ptr_equal(c, b);
    assert_true(d >= c + bytes / 2 && d < c + bytes);
#endif
    duet_aligned_free(d);
    duet_aligned_free(c);
    unsigned char *e = duet_aligned_alloc(bytes);
    assert_non_null(e);
#if !defined(__SANITIZE_ADDRESS__)
    assert_ptr_equal(e, a);
#endif
    duet_aligned_free(e);
}

/* The kind of transparent huge pages the kernel gives on request, from
 * /sys: false when it gives none ("never", or no THP at all). */
static bool thp_on_request(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL) return false;
    char line[128] = {0};
    bool on = fgets(line, sizeof line, f) != NULL && strstr(line, "[never]") == NULL;
    fclose(f);
    return on;
}

/* AnonHugePages (kB) of the mapping that holds p, from /proc/self/smaps. */
static long huge_kb_of(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL) return -1;
    char line[512];
    bool inside = false;
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

static void test_large_blocks_on_huge_pages(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    tu_skip("huge pages: blocks come from malloc under AddressSanitizer");
#endif
    if (!thp_on_request()) tu_skip("huge pages: the kernel gives none on request (madvise)");
    /* A fresh 16 MB block, touched: its aligned 2 MB ranges should be huge
     * pages (one fault each instead of 512). Without the advice, under the
     * kernel's default "madvise" mode, it has none. */
    size_t bytes = (size_t)16 << 20;
    unsigned char *big[3];
    for (int i = 0; i < 3; i++) { /* distinct, so none comes from the cache */
        big[i] = duet_aligned_alloc(bytes + (size_t)i * (5u << 20));
        assert_non_null(big[i]);
        memset(big[i], 1, bytes);
    }
    long kb = huge_kb_of(big[2]);
    for (int i = 0; i < 3; i++) duet_aligned_free(big[i]);
    assert_true(kb >= 2048);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_error_message_and_context),
        cmocka_unit_test(test_rng_deterministic_and_streams),
        cmocka_unit_test(test_rng_ranges_and_moments),
        cmocka_unit_test(test_rng_permutation),
        cmocka_unit_test(test_aligned_alloc),
        cmocka_unit_test(test_large_blocks_reused_and_zeroed),
        cmocka_unit_test(test_large_blocks_on_huge_pages),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
