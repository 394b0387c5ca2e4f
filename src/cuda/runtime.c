/* Devices, the compute stream of each, the caching allocator's CUDA
 * backend and pools, and copies (cuda/cuda.h). */
#include "cuda/cuda_internal.h"

#include <pthread.h>
#include <string.h>

#define MAX_DEVICES 64

/* Per device, made on first use under `lock`: the compute stream and the
 * allocator's pool. */
static struct {
    cudaStream_t stream;
    duet__cuda_pool *pool;
} devices[MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int visible;

static void count_devices(void) {
    int n = 0;
    /* No driver, no device or a driver older than the runtime: none visible. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    visible = n < MAX_DEVICES ? n : MAX_DEVICES;
}

int duet__cuda_device_count(void) {
    pthread_once(&count_once, count_devices);
    return visible;
}

int duet__cuda_use(int dev, const char *op) {
    int cur = -1;
    DUET_CUDA_TRY(op, cudaGetDevice(&cur));
    if (cur != dev) DUET_CUDA_TRY(op, cudaSetDevice(dev));
    return DUET_OK;
}

int duet__cuda_stream(int dev, const char *op, cudaStream_t *out) {
    DUET_ASSERT(dev >= 0 && dev < MAX_DEVICES);
    DUET_TRY(duet__cuda_use(dev, op));
    pthread_mutex_lock(&lock);
    int rc = DUET_OK;
    if (devices[dev].stream == NULL)
        rc = duet__cuda_status(cudaStreamCreateWithFlags(&devices[dev].stream,
                                                         cudaStreamNonBlocking),
                               op, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    *out = devices[dev].stream;
    pthread_mutex_unlock(&lock);
    return rc;
}

int duet__cuda_sync(int dev, const char *op) {
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    DUET_CUDA_TRY(op, cudaStreamSynchronize(s));
    return DUET_OK;
}

/* ---- the allocator's CUDA backend (ctx: the device ordinal) ------------- */

static int be_malloc(void *ctx, size_t bytes, void **out) {
    (void)ctx;
    cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess) return DUET_OK;
    (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    return duet__cuda_status(e, "cuda allocator", "cudaMalloc", __FILE__, __LINE__);
}

static void be_free(void *ctx, void *p) {
    (void)ctx;
    /* Synchronises with the device; only when the cache is given back. */
    if (cudaFree(p) != cudaSuccess)
        duet_log(DUET_LOG_WARN, "cuda allocator: cudaFree failed: %s",
                 cudaGetErrorString(cudaGetLastError()));
}

static int be_record(void *ctx, void *stream, void **event) {
    (void)ctx;
    cudaEvent_t ev = NULL;
    DUET_CUDA_TRY("cuda allocator", cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        (void)cudaEventDestroy(ev);
        return duet__cuda_status(e, "cuda allocator", "cudaEventRecord", __FILE__, __LINE__);
    }
    *event = ev;
    return DUET_OK;
}

static bool be_passed(void *ctx, void *event) {
    (void)ctx;
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
    }
    /* An error here is the stream's (sticky) error: the next checked call
     * reports it; the block must not stay pending for ever. */
    return true;
}

static void be_release_event(void *ctx, void *event) {
    (void)ctx;
    (void)cudaEventDestroy((cudaEvent_t)event);
}

static void be_wait(void *ctx, void *stream) {
    (void)ctx;
    (void)cudaStreamSynchronize((cudaStream_t)stream);
}

/* Device dev's pool (made on first use), with the device current. */
static int pool_of(int dev, const char *op, duet__cuda_pool **out) {
    DUET_ASSERT(dev >= 0 && dev < MAX_DEVICES);
    DUET_TRY(duet__cuda_use(dev, op));
    pthread_mutex_lock(&lock);
    int rc = DUET_OK;
    if (devices[dev].pool == NULL) {
        duet__cuda_alloc_backend be = {.ctx = (void *)(intptr_t)dev, .malloc_raw = be_malloc,
                                       .free_raw = be_free, .record = be_record,
                                       .passed = be_passed, .release_event = be_release_event,
                                       .wait = be_wait};
        rc = duet__cuda_pool_create(&be, &devices[dev].pool);
    }
    *out = devices[dev].pool;
    pthread_mutex_unlock(&lock);
    return rc;
}

int duet__cuda_alloc(int dev, size_t bytes, bool zero, const char *op, void **out) {
    *out = NULL;
    duet__cuda_pool *pool;
    cudaStream_t s;
    DUET_TRY(pool_of(dev, op, &pool));
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    int rc = duet__cuda_pool_alloc(pool, bytes, s, out);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", op);
    if (zero) {
        rc = duet__cuda_status(cudaMemsetAsync(*out, 0, bytes, s), op, "cudaMemsetAsync",
                               __FILE__, __LINE__);
        if (rc != DUET_OK) {
            duet__cuda_pool_free(pool, *out);
            *out = NULL;
        }
    }
    return rc;
}

void duet__cuda_free(int dev, void *p) {
    if (p == NULL) return;
    DUET_ASSERT(dev >= 0 && dev < MAX_DEVICES && devices[dev].pool != NULL);
    duet__cuda_pool_free(devices[dev].pool, p);
}

int duet__cuda_record_stream(int dev, void *p, cudaStream_t stream) {
    DUET_ASSERT(dev >= 0 && dev < MAX_DEVICES && devices[dev].pool != NULL);
    return duet__cuda_pool_record_stream(devices[dev].pool, p, stream);
}

void duet__cuda_alloc_stats(int dev, size_t *live, size_t *peak, size_t *reserved) {
    duet__cuda_pool_stats st = {0};
    if (dev >= 0 && dev < MAX_DEVICES && devices[dev].pool != NULL)
        duet__cuda_pool_stats_get(devices[dev].pool, &st);
    *live = st.live;
    *peak = st.peak;
    *reserved = st.reserved;
}

void duet__cuda_alloc_reset_peak(int dev) {
    if (dev >= 0 && dev < MAX_DEVICES && devices[dev].pool != NULL)
        duet__cuda_pool_reset_peak(devices[dev].pool);
}

void duet__cuda_alloc_counts(int dev, uint64_t *mallocs, uint64_t *frees) {
    duet__cuda_pool_stats st = {0};
    if (dev >= 0 && dev < MAX_DEVICES && devices[dev].pool != NULL)
        duet__cuda_pool_stats_get(devices[dev].pool, &st);
    *mallocs = st.mallocs;
    *frees = st.frees;
}

int duet__cuda_empty_cache(int dev) {
    duet__cuda_pool *pool;
    DUET_TRY(pool_of(dev, "empty_cache", &pool));
    DUET_TRY(duet__cuda_sync(dev, "empty_cache"));
    duet__cuda_pool_empty(pool);
    return DUET_OK;
}

/* ---- copies ---------------------------------------------------------------- */

int duet__cuda_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                    size_t bytes, const char *op) {
    const bool dst_gpu = dst_dev.type == DUET_DEVICE_CUDA, src_gpu = src_dev.type == DUET_DEVICE_CUDA;
    DUET_ASSERT(dst_gpu || src_gpu);
    if (dst_gpu && src_gpu && dst_dev.index != src_dev.index) {
        /* Between two GPUs: ordered after the source's work, on the
         * destination's stream; the host waits for both. */
        DUET_TRY(duet__cuda_sync(src_dev.index, op));
        cudaStream_t s;
        DUET_TRY(duet__cuda_stream(dst_dev.index, op, &s));
        DUET_CUDA_TRY(op, cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, bytes, s));
        DUET_CUDA_TRY(op, cudaStreamSynchronize(s));
        return DUET_OK;
    }
    const int dev = dst_gpu ? dst_dev.index : src_dev.index;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    DUET_CUDA_TRY(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    /* Device to device stays ordered on the stream; a copy that touches
     * host memory returns when the host may use it. */
    if (!(dst_gpu && src_gpu)) DUET_CUDA_TRY(op, cudaStreamSynchronize(s));
    return DUET_OK;
}
