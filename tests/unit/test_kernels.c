/* The kernel path: CPU feature detection against what the kernel reports in
 * /proc/cpuinfo, duet_sgemm on both GEMM libraries (every transpose, leading
 * dimensions, alpha/beta, k = 0), the backend choice (auto, DUET_GEMM,
 * explicit) and the thread count (explicit, DUET_NUM_THREADS, the default
 * rule); GEMMs and bf16 convolutions under a storm of signals. */
#include "testutil.h"

#include <dlfcn.h>
#include <sched.h>
#include <ucontext.h>

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "ops/ops_internal.h"

int openblas_get_num_threads(void);

static void configure(duet_gemm_backend b, int threads) {
    duet_kernel_opts o = duet_kernel_opts_default();
    o.gemm = b;
    o.num_threads = threads;
    assert_int_equal(duet_kernels_configure(&o), DUET_OK);
}

/* ---- CPU features ---------------------------------------------------------- */

/* The flags line of /proc/cpuinfo's first processor, padded with spaces so
 * that " avx2 " matches a whole word. */
static bool cpuinfo_flags(char *buf, size_t size) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return false;
    char line[8192];
    bool found = false;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "flags", 5) != 0) continue;
        const char *colon = strchr(line, ':');
        if (colon == NULL) break;
        line[strcspn(line, "\n")] = '\0';
        snprintf(buf, size, "%s ", colon + 1);
        found = true;
        break;
    }
    fclose(f);
    return found;
}

static void test_cpu_features_match_the_kernel(void **state) {
    (void)state;
    duet_cpu_info ci = duet_cpu_info_get();
    char flags[8192];
    if (!cpuinfo_flags(flags, sizeof flags)) tu_skip("no flags line in /proc/cpuinfo");
    /* The kernel lists a feature only when it is usable (it knows XSAVE
     * state), which is what duet_cpu_info promises. */
    struct { const char *name; bool have; } f[] = {
        {" avx ", ci.avx},           {" fma ", ci.fma},
        {" avx2 ", ci.avx2},         {" avx512f ", ci.avx512f},
        {" avx512dq ", ci.avx512dq}, {" avx512bw ", ci.avx512bw},
        {" avx512vl ", ci.avx512vl}, {" avx512_vnni ", ci.avx512_vnni},
        {" avx512_bf16 ", ci.avx512_bf16}, {" amx_tile ", ci.amx_tile},
        {" amx_bf16 ", ci.amx_bf16},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        bool listed = strstr(flags, f[i].name) != NULL;
        if (listed != f[i].have)
            fail_msg("cpu feature%s: /proc/cpuinfo %s it, duet_cpu_info says %d", f[i].name,
                     listed ? "lists" : "does not list", f[i].have);
    }
    assert_true(ci.vendor[0] != '\0');
    assert_true(ci.family > 0);
    char s[256];
    int n = duet_cpu_features_string(&ci, s, sizeof s);
    assert_int_equal(n, (int)strlen(s));
    if (ci.avx2) assert_non_null(strstr(s, "avx2"));
    /* Truncation reports the length it needed, as snprintf. */
    char tiny[4];
    assert_int_equal(duet_cpu_features_string(&ci, tiny, sizeof tiny), n);
}

/* ---- sgemm on each library --------------------------------------------------- */

static void check_sgemm_transposes(duet_gemm_backend backend) {
    configure(backend, 1);
    duet_rng rng = duet_rng_make(5, 0);
    const int64_t m = 7, n = 5, k = 9, pad = 3;
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            /* Row-major storage of op(A) (m, k) is A (m, k) or A^T stored
             * (k, m), with leading dimensions wider than the rows. */
            int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
            float *a = malloc((size_t)(ar * lda) * sizeof(float));
            float *b = malloc((size_t)(br * ldb) * sizeof(float));
            float *c = malloc((size_t)(m * ldc) * sizeof(float));
            float *want = malloc((size_t)(m * ldc) * sizeof(float));
            for (int64_t i = 0; i < ar * lda; i++) a[i] = duet_rng_normal(&rng);
            for (int64_t i = 0; i < br * ldb; i++) b[i] = duet_rng_normal(&rng);
            for (int64_t i = 0; i < m * ldc; i++) c[i] = want[i] = duet_rng_normal(&rng);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++) {
                        double av = ta ? a[p * lda + i] : a[i * lda + p];
                        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                        s += av * bv;
                    }
                    want[i * ldc + j] = (float)(0.5 * s + 2.0 * want[i * ldc + j]);
                }
            duet_sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 2.0f, c, ldc);
            char what[64];
            snprintf(what, sizeof what, "%s sgemm ta=%d tb=%d",
                     duet_gemm_backend_name(backend), ta, tb);
            /* The padding columns of C must be left alone too. */
            tu_assert_close(c, want, m * ldc, 1e-5, 1e-5, what);
            free(a);
            free(b);
            free(c);
            free(want);
        }
    }
    /* k = 0: C = beta C, and beta 0 clears even NaN (BLAS semantics). */
    float c[6] = {1, 2, 3, 4, 5, NAN};
    duet_sgemm(false, false, 2, 3, 0, 1.0f, c, 1, c, 3, 3.0f, c, 3);
    tu_assert_close(c, (float[]){3, 6, 9, 12, 15, NAN}, 5, 0, 0, "k=0, beta 3");
    duet_sgemm(false, false, 2, 3, 0, 1.0f, c, 1, c, 3, 0.0f, c, 3);
    tu_assert_close(c, (float[]){0, 0, 0, 0, 0, 0}, 6, 0, 0, "k=0, beta 0");
}

static void test_sgemm_onednn(void **state) {
    (void)state;
    check_sgemm_transposes(DUET_GEMM_ONEDNN);
    duet_kernels_info ki;
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    assert_int_equal(ki.gemm, DUET_GEMM_ONEDNN);
    assert_non_null(strstr(ki.summary, "oneDNN"));
}

static void test_sgemm_openblas(void **state) {
    (void)state;
    check_sgemm_transposes(DUET_GEMM_OPENBLAS);
    duet_kernels_info ki;
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    assert_int_equal(ki.gemm, DUET_GEMM_OPENBLAS);
    assert_non_null(strstr(ki.summary, "OpenBLAS"));
}

/* A multi-threaded GEMM gives the single-threaded result up to summation
 * order. */
static void test_sgemm_threads_agree(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(9, 0);
    const int64_t m = 96, n = 200, k = 300;
    float *a = malloc(sizeof(float) * (size_t)(m * k));
    float *b = malloc(sizeof(float) * (size_t)(k * n));
    float *c1 = calloc((size_t)(m * n), sizeof(float));
    float *c2 = calloc((size_t)(m * n), sizeof(float));
    for (int64_t i = 0; i < m * k; i++) a[i] = duet_rng_normal(&rng);
    for (int64_t i = 0; i < k * n; i++) b[i] = duet_rng_normal(&rng);
    duet_gemm_backend all[] = {DUET_GEMM_ONEDNN, DUET_GEMM_OPENBLAS};
    for (int i = 0; i < 2; i++) {
        configure(all[i], 1);
        duet_sgemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c1, n);
        configure(all[i], 2);
        duet_sgemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c2, n);
        tu_assert_close(c2, c1, m * n, 1e-5, 1e-4, duet_gemm_backend_name(all[i]));
    }
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* ---- signals during kernels ----------------------------------------------------- */

/* Where the handler found the thread: the instruction it interrupted, for
 * the first STORM_IPS signals. */
#define STORM_IPS 4096
#define STORM_MIN_HITS 200
#define STORM_MAX_PRODUCTS 2000000
static volatile sig_atomic_t storm_hits;
static void *storm_ips[STORM_IPS];

static void count_signal(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
#if defined(__x86_64__)
    const ucontext_t *uc = context;
    if (storm_hits < STORM_IPS) storm_ips[storm_hits] = (void *)uc->uc_mcontext.gregs[REG_RIP];
#else
    (void)context;
#endif
    storm_hits++;
}

/* How many of the recorded signals interrupted oneDNN: its library, or
 * code outside every loaded object (its JIT kernels). */
static int signals_inside_onednn(void) {
    int inside = 0;
    const int n = storm_hits < STORM_IPS ? (int)storm_hits : STORM_IPS;
    for (int i = 0; i < n; i++) {
        Dl_info d;
        if (storm_ips[i] == NULL) continue;
        if (dladdr(storm_ips[i], &d) == 0 || d.dli_fname == NULL ||
            strstr(d.dli_fname, "libdnnl") != NULL)
            inside++;
    }
    return inside;
}

typedef struct storm {
    pthread_t target;
    atomic_bool stop;
} storm;

/* Sends SIGUSR1 to the target thread every 20 us until told to stop. */
static void *storm_main(void *arg) {
    storm *s = arg;
    while (!atomic_load(&s->stop)) {
        pthread_kill(s->target, SIGUSR1);
        usleep(20);
    }
    return NULL;
}

/* A small conv's forward and dX GEMMs, over and over while
 * another thread sends this one SIGUSR1 every 20 us (a handler that counts
 * them): every product equals the same product made in quiet, the signals
 * were taken, and none of them interrupted oneDNN's code (the handler
 * records the interrupted instruction; x86-64). Without duet holding
 * signals during the library's call, most land inside oneDNN, and its
 * sgemm corrupted the heap within a few thousand products (glibc aborts:
 * "corrupted size vs. prev_size"), though whether it aborts depends on the
 * heap's layout. On 1 and 2 threads; in bf16 too where the CPU has it. */
static void test_kernels_under_signals(void **state) {
    (void)state;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = count_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old_sa), 0);
    /* The first (a 32-channel 3x3 conv's forward on 48x48) is the one that
     * broke: 2 of 2 standalone runs of 3000 products; the others did not. */
    const int64_t shapes[][5] = {{32, 2304, 288, 0, 0}, {288, 2304, 32, 1, 0}};
    const int nshapes = 2;
    duet_rng rng = duet_rng_make(17, 0);
    const size_t most = 2304 * 288;
    float *a = malloc(most * sizeof(float)), *b = malloc(most * sizeof(float));
    float *c = malloc(most * sizeof(float)), *want[2];
    for (size_t i = 0; i < most; i++) {
        a[i] = duet_rng_normal(&rng);
        b[i] = duet_rng_normal(&rng);
    }
    const bool have_bf16 = duet_cpu_info_get().avx512_bf16 || duet_cpu_info_get().amx_bf16;
    for (int mode = 0; mode < 3; mode++) { /* 1 thread, 2 threads, bf16 on 2 */
        if (mode == 2 && !have_bf16) break;
        duet_kernel_opts o = duet_kernel_opts_default();
        o.gemm = DUET_GEMM_ONEDNN;
        o.num_threads = mode == 0 ? 1 : 2;
        o.bf16 = mode == 2;
        assert_int_equal(duet_kernels_configure(&o), DUET_OK);
        for (int s = 0; s < nshapes; s++) {
            const int64_t *g = shapes[s];
            want[s] = malloc((size_t)(g[0] * g[1]) * sizeof(float));
            duet_sgemm(g[3], g[4], g[0], g[1], g[2], 1.0f, a, g[3] ? g[0] : g[2], b,
                       g[4] ? g[2] : g[1], 0.0f, want[s], g[1]);
        }
        storm st = {.target = pthread_self()};
        atomic_init(&st.stop, false);
        storm_hits = 0;
        memset(storm_ips, 0, sizeof storm_ips);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, storm_main, &st), 0);
        /* At least 5000 products and at least STORM_MIN_HITS signals taken,
         * however slowly a loaded machine runs either thread: the test counts
         * events, not time. STORM_MAX_PRODUCTS only ends a storm thread that
         * never signals (then the hits check fails). */
        int bad = -1;
        for (int it = 0; (it < 5000 || storm_hits < STORM_MIN_HITS) && it < STORM_MAX_PRODUCTS &&
                         bad < 0;
             it++) {
            const int64_t *g = shapes[it % nshapes];
            duet_sgemm(g[3], g[4], g[0], g[1], g[2], 1.0f, a, g[3] ? g[0] : g[2], b,
                       g[4] ? g[2] : g[1], 0.0f, c, g[1]);
            if (memcmp(c, want[it % nshapes], (size_t)(g[0] * g[1]) * sizeof(float)) != 0)
                bad = it;
        }
        atomic_store(&st.stop, true);
        pthread_join(th, NULL);
        assert_int_equal(bad, -1);
        assert_true(storm_hits >= STORM_MIN_HITS);
        assert_int_equal(signals_inside_onednn(), 0);
        for (int s = 0; s < nshapes; s++) free(want[s]);
    }
    assert_int_equal(sigaction(SIGUSR1, &old_sa, NULL), 0);
    configure(DUET_GEMM_AUTO, 0);
    free(a);
    free(b);
    free(c);
}

/* ---- bf16 mixed precision ------------------------------------------------------ */

/* With bf16 on, a GEMM equals the float64 product of the bf16-rounded inputs
 * (float32 sums: to 1e-5), and so differs from the float32 GEMM; on a CPU
 * without bf16 switching it on is refused. */
static void test_bf16_gemm(void **state) {
    (void)state;
    duet_cpu_info ci = duet_cpu_info_get();
    duet_kernel_opts o = duet_kernel_opts_default();
    o.bf16 = true;
    o.num_threads = 1;
    if (!ci.avx512_bf16 && !ci.amx_bf16) {
        assert_int_equal(duet_kernels_configure(&o), DUET_EUNSUPPORTED);
        assert_non_null(strstr(duet_last_error(), "AVX512_BF16"));
        return;
    }
    TU_OK(duet_kernels_configure(&o));
    duet_kernels_info ki;
    TU_OK(duet_kernels_info_get(&ki));
    assert_true(ki.bf16);
    assert_non_null(strstr(ki.summary, "bf16"));
    duet_rng rng = duet_rng_make(11, 0);
    const int64_t m = 37, n = 53, k = 300;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *a = malloc(sizeof(float) * (size_t)(m * k));
            float *b = malloc(sizeof(float) * (size_t)(k * n));
            float *c = malloc(sizeof(float) * (size_t)(m * n));
            float *want = malloc(sizeof(float) * (size_t)(m * n));
            uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(k * (m > n ? m : n)));
            float *ar = malloc(sizeof(float) * (size_t)(m * k));
            float *br = malloc(sizeof(float) * (size_t)(k * n));
            for (int64_t i = 0; i < m * k; i++) a[i] = duet_rng_normal(&rng);
            for (int64_t i = 0; i < k * n; i++) b[i] = duet_rng_normal(&rng);
            for (int64_t i = 0; i < m * n; i++) c[i] = want[i] = duet_rng_normal(&rng);
            duet_f32_to_bf16(h, a, (size_t)(m * k));
            duet_bf16_to_f32(ar, h, (size_t)(m * k));
            duet_f32_to_bf16(h, b, (size_t)(k * n));
            duet_bf16_to_f32(br, h, (size_t)(k * n));
            double worst_f32 = 0; /* how far the float32 product is: bf16 must show */
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0, s32 = 0;
                    for (int64_t p = 0; p < k; p++) {
                        int64_t ai = ta ? p * m + i : i * k + p, bi = tb ? j * k + p : p * n + j;
                        s += (double)ar[ai] * br[bi];
                        s32 += (double)a[ai] * b[bi];
                    }
                    worst_f32 = fmax(worst_f32, fabs(s - s32));
                    want[i * n + j] += (float)s; /* beta 1 */
                }
            duet_sgemm(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 1.0f, c, n);
            tu_assert_close(c, want, m * n, 1e-5, 1e-4, "bf16 gemm");
            assert_true(worst_f32 > 1e-2); /* the rounding is visible at this size */
            free(a), free(b), free(c), free(want), free(h), free(ar), free(br);
        }
    o.bf16 = false;
    TU_OK(duet_kernels_configure(&o));
}

/* A held A (duet__sgemm_held_a: a conv's weight) is rounded once and
 * reused until duet__gemm_release_a: a changed A under the same pointer is
 * not seen before the release and is seen after it. A convolution releases
 * its weight itself: after an in-place weight update (what the optimizer
 * does) the next conv uses the new weight. */
static void test_bf16_held_weight(void **state) {
    (void)state;
    tu_bf16_or_skip(1);
    duet_rng rng = duet_rng_make(12, 0);
    const int64_t m = 16, n = 24, k = 40;
    float a[16 * 40], b[40 * 24], c0[16 * 24], c1[16 * 24], c2[16 * 24];
    for (int64_t i = 0; i < m * k; i++)
        a[i] = duet_rng_normal(&rng);
    for (int64_t i = 0; i < k * n; i++)
        b[i] = duet_rng_normal(&rng);
    duet__gemm_release_a();
    duet__sgemm_held_a(false, false, m, n, k, a, k, b, n, 0.0f, c0, n);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = -2.0f * a[i];
    duet__sgemm_held_a(false, false, m, n, k, a, k, b, n, 0.0f, c1, n);
    assert_memory_equal(c1, c0, sizeof c0); /* held: the old rounding */
    duet__gemm_release_a();
    duet__sgemm_held_a(false, false, m, n, k, a, k, b, n, 0.0f, c2, n);
    duet__gemm_release_a();
    for (int64_t i = 0; i < m * n; i++)
        assert_true(c2[i] == -2.0f * c0[i]); /* exact: x(-2) */

    /* A convolution after an in-place weight update (what the optimizer
     * does between steps): forward and dX use the new weight. (Backward
     * runs the whole tape, so two backward passes always have a forward
     * between them.) */
    tu_bf16_or_skip(2);
    /* 16x16: one sample per GEMM (the held path; smaller images batch samples). */
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){3, 8, 16, 16}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){6, 8, 3, 3}, 0.5f);
    duet_tensor *y0 = NULL, *y1 = NULL;
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y0)); /* forward after forward */
    for (int64_t i = 0; i < w->numel; i++)
        w->data[i] = -2.0f * w->data[i];
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y1));
    for (int64_t i = 0; i < y0->numel; i++)
        assert_true(y1->data[i] == -2.0f * y0->data[i]);
    duet_tensor_release(y0);
    duet_tensor_release(y1);
    x->requires_grad = true; /* forward and backward, update, forward and backward */
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y0));
    tu_backprop_with(y0, y0->data);
    float *dx0 = malloc(sizeof(float) * (size_t)x->numel);
    memcpy(dx0, x->grad, sizeof(float) * (size_t)x->numel);
    for (int64_t i = 0; i < w->numel; i++)
        w->data[i] = -2.0f * w->data[i];
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y1));
    for (int64_t i = 0; i < y0->numel; i++)
        assert_true(y1->data[i] == -2.0f * y0->data[i]);
    memset(x->grad, 0, sizeof(float) * (size_t)x->numel);
    tu_backprop_with(y1, y0->data);
    for (int64_t i = 0; i < x->numel; i++)
        assert_true(x->grad[i] == -2.0f * dx0[i]);
    free(dx0);
    duet_tensor_release(y0);
    duet_tensor_release(y1);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_kernel_opts o = duet_kernel_opts_default();
    o.num_threads = 1;
    TU_OK(duet_kernels_configure(&o));
}

/* Threads run bf16 GEMMs at the same time (a convolution gives each thread
 * whole samples): every product made inside a parallel region, on shapes
 * each thread meets for the first time and on shapes all share, equals the
 * same product made alone (each runs on one thread either way, so equal to
 * the bit). A shared memory object, stream or scratchpad between threads
 * shows as wrong results here. */
static void test_bf16_gemm_from_threads(void **state) {
    (void)state;
    tu_bf16_or_skip(1);
    enum { THREADS = 4, CALLS = 12 };
    const int64_t m = 48, k = 160, nmax = 96 + THREADS * CALLS;
    duet_rng rng = duet_rng_make(13, 0);
    float *a = malloc(sizeof(float) * (size_t)(m * k));
    float *b = malloc(sizeof(float) * (size_t)(k * nmax));
    float *want = malloc(sizeof(float) * (size_t)(THREADS * CALLS * m * nmax));
    float *got = malloc(sizeof(float) * (size_t)(THREADS * CALLS * m * nmax));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = duet_rng_normal(&rng);
    for (int64_t i = 0; i < k * nmax; i++)
        b[i] = duet_rng_normal(&rng);
    /* Call (t, j): odd j share one shape between threads, even j are the
     * thread's own. */
#define CALL_N(t, j) ((j) % 2 ? (int64_t)96 : (int64_t)(97 + (t) * CALLS + (j)))
#define CALL_C(buf, t, j) ((buf) + ((int64_t)(t) * CALLS + (j)) * m * nmax)
    for (int t = 0; t < THREADS; t++)
        for (int j = 0; j < CALLS; j++)
            duet_sgemm(false, false, m, CALL_N(t, j), k, 1.0f, a, k, b, nmax, 0.0f,
                       CALL_C(want, t, j), CALL_N(t, j));
    for (int round = 0; round < 3; round++) {
        memset(got, 0, sizeof(float) * (size_t)(THREADS * CALLS * m * nmax));
#pragma omp parallel num_threads(THREADS)
        {
            const int t = omp_get_thread_num();
            for (int j = 0; j < CALLS; j++)
                duet_sgemm(false, false, m, CALL_N(t, j), k, 1.0f, a, k, b, nmax, 0.0f,
                           CALL_C(got, t, j), CALL_N(t, j));
        }
        for (int t = 0; t < THREADS; t++)
            for (int j = 0; j < CALLS; j++)
                assert_memory_equal(CALL_C(got, t, j), CALL_C(want, t, j),
                                    sizeof(float) * (size_t)(m * CALL_N(t, j)));
    }
#undef CALL_N
#undef CALL_C
    free(a), free(b), free(want), free(got);
    duet_kernel_opts o = duet_kernel_opts_default();
    o.num_threads = 1;
    TU_OK(duet_kernels_configure(&o));
}

/* ---- the choice and the threads ------------------------------------------------ */

static void test_backend_choice(void **state) {
    (void)state;
    duet_gemm_backend b = DUET_GEMM_AUTO;
    assert_int_equal(duet_gemm_backend_parse("openblas", &b), DUET_OK);
    assert_int_equal(b, DUET_GEMM_OPENBLAS);
    assert_int_equal(duet_gemm_backend_parse("mkl", &b), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "'mkl'"));

    duet_kernels_info ki;
    setenv("DUET_GEMM", "openblas", 1);
    configure(DUET_GEMM_AUTO, 1);
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    assert_int_equal(ki.gemm, DUET_GEMM_OPENBLAS);
    /* An explicit choice beats the environment. */
    configure(DUET_GEMM_ONEDNN, 1);
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    assert_int_equal(ki.gemm, DUET_GEMM_ONEDNN);
    setenv("DUET_GEMM", "cublas", 1);
    duet_kernel_opts o = duet_kernel_opts_default();
    assert_int_equal(duet_kernels_configure(&o), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "DUET_GEMM"));
    unsetenv("DUET_GEMM");
    /* Auto: oneDNN wherever its JIT covers the CPU (AVX2 and up). */
    configure(DUET_GEMM_AUTO, 1);
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    duet_cpu_info ci = duet_cpu_info_get();
    if (ci.avx2 && getenv("ONEDNN_MAX_CPU_ISA") == NULL && getenv("DNNL_MAX_CPU_ISA") == NULL)
        assert_int_equal(ki.gemm, DUET_GEMM_ONEDNN);
    /* OPENBLAS_CORETYPE is OpenBLAS's own: the info names it, duet leaves
     * it as the user set it. */
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (ct != NULL && ct[0] != '\0') assert_non_null(strstr(ki.openblas, ct));
}

static void test_thread_count(void **state) {
    (void)state;
    duet_kernels_info ki;
    configure(DUET_GEMM_AUTO, 3);
    assert_int_equal(duet_kernels_info_get(&ki), DUET_OK);
    assert_int_equal(ki.num_threads, 3);
    assert_int_equal(omp_get_max_threads(), 3);
    assert_int_equal(openblas_get_num_threads(), 3);
    assert_non_null(strstr(ki.summary, "3 threads"));

    setenv("DUET_NUM_THREADS", "2", 1);
    configure(DUET_GEMM_AUTO, 0);
    assert_int_equal(duet__blas_init(), 2);
    setenv("DUET_NUM_THREADS", "two", 1);
    duet_kernel_opts o = duet_kernel_opts_default();
    assert_int_equal(duet_kernels_configure(&o), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "DUET_NUM_THREADS=two"));
    unsetenv("DUET_NUM_THREADS");
    o.num_threads = -1;
    assert_int_equal(duet_kernels_configure(&o), DUET_EINVAL);

    /* The default: this process's cores shared among the node's ranks. */
    int avail = duet_cpu_available_cores(), online = duet_cpu_online_cores();
    assert_true(avail >= 1 && avail <= online);
    /* min(affinity mask, online / ranks on the node), at least 1. */
    for (int ranks = 1; ranks <= 4 * online; ranks++) {
        int want = online / ranks < avail ? online / ranks : avail;
        assert_int_equal(duet_default_num_threads(ranks), want >= 1 ? want : 1);
    }
    if (avail == online) assert_int_equal(duet_default_num_threads(1), online);
    /* Bound to one core, as Open MPI binds 1 or 2 ranks: 1 thread, however
     * few ranks share the node. */
    cpu_set_t saved, one;
    if (online >= 2 && sched_getaffinity(0, sizeof saved, &saved) == 0) {
        int first = 0;
        while (!CPU_ISSET(first, &saved)) first++;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0) {
            assert_int_equal(duet_default_num_threads(1), 1);
            assert_int_equal(duet_default_num_threads(2), 1);
            assert_int_equal(sched_setaffinity(0, sizeof saved, &saved), 0);
        }
    }
    configure(DUET_GEMM_AUTO, 0);
    assert_int_equal(duet__blas_init(), duet_default_num_threads(1));
}

int main(void) {
    unsetenv("DUET_GEMM");
    unsetenv("DUET_NUM_THREADS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_features_match_the_kernel),
        cmocka_unit_test(test_sgemm_onednn),
        cmocka_unit_test(test_sgemm_openblas),
        cmocka_unit_test(test_sgemm_threads_agree),
        cmocka_unit_test(test_bf16_gemm),
        cmocka_unit_test(test_bf16_held_weight),
        cmocka_unit_test(test_bf16_gemm_from_threads),
        cmocka_unit_test(test_kernels_under_signals),
        cmocka_unit_test(test_backend_choice),
        cmocka_unit_test(test_thread_count),
    };
    return tu_exit(cmocka_run_group_tests_name("kernels", tests, NULL, NULL));
}
