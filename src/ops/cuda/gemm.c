/* duet_sgemm on the GPU through cuBLASLt (cuda_ops.h). Row-major C = op(A)
 * op(B) is column-major C^T = op(B)^T op(A)^T, so cuBLASLt gets B as its
 * first operand and A as its second, with m and n swapped. One handle and
 * one workspace (from the caching allocator) per device, made on first use;
 * the algorithm of a product's shape is asked of cuBLASLt's heuristics once
 * and cached. */
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define MAX_DEVICES 64
#define WORKSPACE_BYTES ((size_t)32 << 20)

static struct {
    cublasLtHandle_t handle;
    void *workspace;
} lt[MAX_DEVICES];
static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool allow_tf32;

/* The algorithm cuBLASLt's heuristics gave for a shape. */
#define ALGO_CACHE 256
typedef struct algo_key {
    int dev;
    bool ta, tb, tf32;
    int64_t m, n, k, lda, ldb, ldc;
} algo_key;
static struct {
    algo_key key;
    cublasLtMatmulAlgo_t algo;
} algos[ALGO_CACHE];
static int nalgos, next_victim;

static bool algo_find(const algo_key *k, cublasLtMatmulAlgo_t *out) {
    pthread_mutex_lock(&lt_lock);
    bool found = false;
    for (int i = 0; i < nalgos && !found; i++)
        if (memcmp(&algos[i].key, k, sizeof *k) == 0) {
            *out = algos[i].algo;
            found = true;
        }
    pthread_mutex_unlock(&lt_lock);
    return found;
}

static void algo_store(const algo_key *k, const cublasLtMatmulAlgo_t *algo) {
    pthread_mutex_lock(&lt_lock);
    int i = nalgos < ALGO_CACHE ? nalgos++ : next_victim;
    if (i == next_victim && nalgos == ALGO_CACHE) next_victim = (next_victim + 1) % ALGO_CACHE;
    algos[i].key = *k;
    algos[i].algo = *algo;
    pthread_mutex_unlock(&lt_lock);
}

bool duet__cuda_gemm_allow_tf32(bool on) { return atomic_exchange(&allow_tf32, on); }

static int handle_of(int dev, const char *op, cublasLtHandle_t *h, void **workspace) {
    DUET_ASSERT(dev >= 0 && dev < MAX_DEVICES);
    pthread_mutex_lock(&lt_lock);
    int rc = DUET_OK;
    if (lt[dev].handle == NULL) {
        rc = duet__cublas_status(cublasLtCreate(&lt[dev].handle), op, "cublasLtCreate", __FILE__,
                                 __LINE__);
        if (rc == DUET_OK)
            rc = duet__cuda_alloc(dev, WORKSPACE_BYTES, false, op, &lt[dev].workspace);
        if (rc != DUET_OK && lt[dev].handle != NULL) {
            cublasLtDestroy(lt[dev].handle);
            lt[dev].handle = NULL;
        }
    }
    *h = lt[dev].handle;
    *workspace = lt[dev].workspace;
    pthread_mutex_unlock(&lt_lock);
    return rc;
}

/* The descriptors of one product; destroyed by gemm_release. */
typedef struct gemm_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} gemm_descs;

static void gemm_release(gemm_descs *d) {
    if (d->pref != NULL) cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->c != NULL) cublasLtMatrixLayoutDestroy(d->c);
    if (d->b != NULL) cublasLtMatrixLayoutDestroy(d->b);
    if (d->a != NULL) cublasLtMatrixLayoutDestroy(d->a);
    if (d->op != NULL) cublasLtMatmulDescDestroy(d->op);
}

/* The column-major product C' (n, m) = op'(B') op'(A') described, with
 * B' = b and A' = a as stored. */
static int gemm_describe(gemm_descs *d, const char *op, bool trans_a, bool trans_b, int64_t m,
                         int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, bool tf32) {
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    DUET_CUBLAS_TRY(op, cublasLtMatmulDescCreate(&d->op, compute, CUDA_R_32F));
    /* First operand b: stored (k, n) row-major = (n, k) column-major, or
     * (n, k) row-major = (k, n) column-major when trans_b. */
    const cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    DUET_CUBLAS_TRY(op, cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                       sizeof ta));
    DUET_CUBLAS_TRY(op, cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                       sizeof tb));
    DUET_CUBLAS_TRY(op, cublasLtMatrixLayoutCreate(&d->a, CUDA_R_32F, trans_b ? (uint64_t)k
                                                   : (uint64_t)n, trans_b ? (uint64_t)n
                                                   : (uint64_t)k, ldb));
    DUET_CUBLAS_TRY(op, cublasLtMatrixLayoutCreate(&d->b, CUDA_R_32F, trans_a ? (uint64_t)m
                                                   : (uint64_t)k, trans_a ? (uint64_t)k
                                                   : (uint64_t)m, lda));
    DUET_CUBLAS_TRY(op, cublasLtMatrixLayoutCreate(&d->c, CUDA_R_32F, (uint64_t)n, (uint64_t)m,
                                                   ldc));
    DUET_CUBLAS_TRY(op, cublasLtMatmulPreferenceCreate(&d->pref));
    const size_t ws = WORKSPACE_BYTES;
    DUET_CUBLAS_TRY(op, cublasLtMatmulPreferenceSetAttribute(
                            d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    return DUET_OK;
}

int duet__cuda_sgemm(int dev, const char *op, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return DUET_OK;
    cudaStream_t s;
    cublasLtHandle_t h;
    void *workspace;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    DUET_TRY(handle_of(dev, op, &h, &workspace));
    if (k <= 0) {
        /* cuBLASLt needs k >= 1; C = beta C is then the whole product. */
        if (beta == 0.0f) {
            for (int64_t i = 0; i < m; i++)
                DUET_CUDA_TRY(op, cudaMemsetAsync(c + i * ldc, 0, (size_t)n * sizeof(float), s));
            return DUET_OK;
        }
        k = 1;
        alpha = 0.0f;
    }
    const bool tf32 = atomic_load(&allow_tf32);
    gemm_descs d = {0};
    int rc = gemm_describe(&d, op, trans_a, trans_b, m, n, k, lda, ldb, ldc, tf32);
    algo_key key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared as bytes */
    key.dev = dev;
    key.ta = trans_a;
    key.tb = trans_b;
    key.tf32 = tf32;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    cublasLtMatmulAlgo_t algo;
    if (rc == DUET_OK && !algo_find(&key, &algo)) {
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        rc = duet__cublas_status(cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.c, d.c,
                                                                d.pref, 1, &heur, &found),
                                 op, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
        if (rc == DUET_OK && found == 0)
            rc = duet__error(DUET_EUNSUPPORTED, "%s: cuBLASLt has no algorithm for a (%lld x "
                             "%lld) by (%lld x %lld) float32 product", op, (long long)m,
                             (long long)k, (long long)k, (long long)n);
        if (rc == DUET_OK) {
            algo = heur.algo;
            algo_store(&key, &algo);
        }
    }
    if (rc == DUET_OK)
        rc = duet__cublas_status(cublasLtMatmul(h, d.op, &alpha, b, d.a, a, d.b, &beta, c, d.c, c,
                                                d.c, &algo, workspace, WORKSPACE_BYTES, s),
                                 op, "cublasLtMatmul", __FILE__, __LINE__);
    gemm_release(&d);
    return rc;
}
