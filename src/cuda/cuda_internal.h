/* The CUDA layer's private header (src/cuda/ and its white-box tests): the
 * caching allocator's logic on a backend of four calls, so that a CPU test
 * can drive it with host memory and fake events. Everything the layers above
 * may use is in cuda.h. */
#ifndef DUET_CUDA_INTERNAL_H
#define DUET_CUDA_INTERNAL_H

#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the allocator's logic, for tests (alloc.c) ---------------------------
 * The caching logic runs on a backend of four calls, so that a CPU test can
 * drive it with host memory and fake events; duet__cuda_alloc uses CUDA's. */
typedef struct duet__cuda_alloc_backend {
    void *ctx;
    /* Raw segment of bytes; DUET_ENOMEM when the device has no room. */
    int (*malloc_raw)(void *ctx, size_t bytes, void **out);
    void (*free_raw)(void *ctx, void *p);
    /* An event recorded on `stream` now (*event), and whether it has passed. */
    int (*record)(void *ctx, void *stream, void **event);
    bool (*passed)(void *ctx, void *event);
    void (*release_event)(void *ctx, void *event);
    /* Waits until `stream` has run what was queued on it (when no event
     * could be recorded). */
    void (*wait)(void *ctx, void *stream);
} duet__cuda_alloc_backend;

typedef struct duet__cuda_pool duet__cuda_pool;
int duet__cuda_pool_create(const duet__cuda_alloc_backend *backend, duet__cuda_pool **out);
/* Frees every segment (blocks still handed out are a bug: asserted). */
void duet__cuda_pool_destroy(duet__cuda_pool *pool);
int duet__cuda_pool_alloc(duet__cuda_pool *pool, size_t bytes, void *stream, void **out);
void duet__cuda_pool_free(duet__cuda_pool *pool, void *p);
int duet__cuda_pool_record_stream(duet__cuda_pool *pool, void *p, void *stream);
/* Releases the segments with nothing handed out. */
void duet__cuda_pool_empty(duet__cuda_pool *pool);
typedef struct duet__cuda_pool_stats {
    size_t live, peak, reserved, cached;
    uint64_t mallocs, frees;
    size_t segments, blocks;
} duet__cuda_pool_stats;
void duet__cuda_pool_stats_get(duet__cuda_pool *pool, duet__cuda_pool_stats *out);
void duet__cuda_pool_reset_peak(duet__cuda_pool *pool);
/* Rounding and segment sizes (alloc.c). */
#define DUET__CUDA_ROUND 512u
#define DUET__CUDA_SMALL ((size_t)1 << 20)        /* requests up to this share... */
#define DUET__CUDA_SMALL_SEGMENT ((size_t)2 << 20) /* ...segments of this size */
#define DUET__CUDA_LARGE_ROUND ((size_t)2 << 20)   /* larger segments round to this */

#ifdef __cplusplus
}
#endif
#endif
