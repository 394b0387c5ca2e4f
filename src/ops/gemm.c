/* GEMM through OpenBLAS (the one place duet calls it), the BLAS thread count,
 * and the per-thread scratch memory the GEMM-based ops reuse. */
#include "ops/ops_internal.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

/* ---- BLAS threads -------------------------------------------------------- */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int blas_threads = 1;

static void blas_setup(void) {
    int n = 1;
    const char *env = getenv("DUET_BLAS_THREADS");
    if (env != NULL && env[0] != '\0') {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno == 0 && end != env && *end == '\0' && v >= 1 && v <= 1024)
            n = (int)v;
        else
            duet_log(DUET_LOG_WARN,
                     "DUET_BLAS_THREADS=%s is not a thread count in 1..1024; using 1", env);
    }
    openblas_set_num_threads(n);
    blas_threads = n;
}

int duet__blas_init(void) {
    pthread_once(&blas_once, blas_setup);
    return blas_threads;
}

void duet_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                float *c, int64_t ldc) {
    /* BLAS takes int sizes; every op's shapes are checked well below this. */
    DUET_ASSERT(m >= 0 && n >= 0 && k >= 0);
    DUET_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    DUET_ASSERT(lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX);
    if (m == 0 || n == 0) return;
    duet__blas_init();
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* ---- per-thread scratch ------------------------------------------------- */

typedef struct scratch {
    float *buf[DUET__SCRATCH_SLOTS];
    size_t cap[DUET__SCRATCH_SLOTS];
} scratch;

/* The fast path reads the thread-local pointer; the key only exists so that
 * a thread's buffers are freed when it exits. */
static _Thread_local scratch *tls_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_rc;

static void scratch_free(void *p) {
    scratch *s = p;
    if (s == NULL) return;
    for (int i = 0; i < DUET__SCRATCH_SLOTS; i++) duet_aligned_free(s->buf[i]);
    free(s);
}

static void scratch_key_make(void) { scratch_key_rc = pthread_key_create(&scratch_key, scratch_free); }

float *duet__scratch(int slot, size_t nfloats) {
    DUET_ASSERT(slot >= 0 && slot < DUET__SCRATCH_SLOTS);
    scratch *s = tls_scratch;
    if (s == NULL) {
        pthread_once(&scratch_once, scratch_key_make);
        if (scratch_key_rc != 0) {
            duet__error(DUET_ENOMEM, "ops: cannot create the thread-local scratch key");
            return NULL;
        }
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            duet__error(DUET_ENOMEM, "ops: out of memory for the scratch table");
            return NULL;
        }
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            duet__error(DUET_ENOMEM, "ops: cannot register the thread-local scratch");
            return NULL;
        }
        tls_scratch = s;
    }
    if (s->cap[slot] < nfloats) {
        /* Grow by half again so that a sequence of slightly larger layers
         * does not reallocate every time. */
        size_t want = nfloats + nfloats / 2;
        duet_aligned_free(s->buf[slot]);
        s->buf[slot] = duet_aligned_alloc(want * sizeof(float));
        s->cap[slot] = s->buf[slot] != NULL ? want : 0;
        if (s->buf[slot] == NULL) {
            duet__error(DUET_ENOMEM, "ops: out of memory for %zu floats of scratch", want);
            return NULL;
        }
    }
    return s->buf[slot];
}
