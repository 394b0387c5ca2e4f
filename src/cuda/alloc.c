/* The caching allocator of device memory, one pool per device
 * (docs/architecture.md, "Devices"), in the manner of PyTorch's
 * CUDACachingAllocator, written for duet.
 *
 * Segments come from the backend (cudaMalloc); each belongs to the stream
 * whose request made it and is cut into blocks in address order. A request
 * rounds up to DUET__CUDA_ROUND bytes and takes the best-fitting free block
 * of its stream and size class (up to DUET__CUDA_SMALL: blocks of shared
 * DUET__CUDA_SMALL_SEGMENT segments; larger: own segments rounded to
 * DUET__CUDA_LARGE_ROUND), split when the rest is worth keeping. A freed
 * block merges with free neighbours and serves the next request of its
 * stream at once: work queued on one stream runs in order, so a later
 * kernel on it cannot overtake the last reader. A block also used on other
 * streams (duet__cuda_pool_record_stream) waits for an event on each of
 * them first. The backend is called only on a miss; when it has no room
 * the pool gives the cached segments back and tries once more. */
#include "cuda/cuda_internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#define MAX_USES 4
#define HASH_SIZE 1024

typedef struct segment segment;

typedef struct block {
    char *ptr;
    size_t size;
    void *stream;
    segment *seg;
    struct block *prev, *next;   /* neighbours in the segment, by address */
    struct block *fprev, *fnext; /* the free list, while free */
    struct block *hnext;         /* the handed-out table, while handed out */
    struct block *pnext;         /* the pending list, while waiting for events */
    bool allocated, pending;
    int nuses;
    void *uses[MAX_USES];        /* other streams it was used on */
    void *events[MAX_USES];
} block;

struct segment {
    char *base;
    size_t size;
    bool small;
    void *stream;
    block *first;
    segment *next;
};

struct duet__cuda_pool {
    duet__cuda_alloc_backend be;
    pthread_mutex_t lock;
    segment *segments;
    block *free_head;
    block *pending;
    block *table[HASH_SIZE];
    size_t live, peak, reserved;
    uint64_t mallocs, frees;
    size_t nsegments, nblocks;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t hash_ptr(const void *p) {
    return (size_t)(((uintptr_t)p / DUET__CUDA_ROUND) * 2654435761u) % HASH_SIZE;
}

static void free_list_insert(duet__cuda_pool *pool, block *b) {
    b->fprev = NULL;
    b->fnext = pool->free_head;
    if (pool->free_head != NULL) pool->free_head->fprev = b;
    pool->free_head = b;
}

static void free_list_remove(duet__cuda_pool *pool, block *b) {
    if (b->fprev != NULL)
        b->fprev->fnext = b->fnext;
    else
        pool->free_head = b->fnext;
    if (b->fnext != NULL) b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

static bool is_free(const block *b) { return b != NULL && !b->allocated && !b->pending; }

/* b (not handed out, not pending) back on the free list, merged with its
 * free neighbours. */
static void release_block(duet__cuda_pool *pool, block *b) {
    b->nuses = 0;
    if (is_free(b->next)) {
        block *n = b->next;
        free_list_remove(pool, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next != NULL) n->next->prev = b;
        free(n);
        pool->nblocks--;
    }
    if (is_free(b->prev)) {
        block *p = b->prev;
        free_list_remove(pool, p);
        p->size += b->size;
        p->next = b->next;
        if (b->next != NULL) b->next->prev = p;
        free(b);
        pool->nblocks--;
        b = p;
    }
    free_list_insert(pool, b);
}

/* Pending blocks whose events have all passed become free. */
static void drain_pending(duet__cuda_pool *pool) {
    block **link = &pool->pending;
    while (*link != NULL) {
        block *b = *link;
        bool done = true;
        for (int i = 0; i < b->nuses && done; i++) done = pool->be.passed(pool->be.ctx, b->events[i]);
        if (!done) {
            link = &b->pnext;
            continue;
        }
        *link = b->pnext;
        for (int i = 0; i < b->nuses; i++) pool->be.release_event(pool->be.ctx, b->events[i]);
        b->pending = false;
        b->pnext = NULL;
        release_block(pool, b);
    }
}

static block *best_fit(duet__cuda_pool *pool, size_t size, bool small, void *stream) {
    block *best = NULL;
    for (block *b = pool->free_head; b != NULL; b = b->fnext)
        if (b->stream == stream && b->seg->small == small && b->size >= size &&
            (best == NULL || b->size < best->size || (b->size == best->size && b->ptr < best->ptr)))
            best = b;
    return best;
}

static void empty_locked(duet__cuda_pool *pool) {
    segment **link = &pool->segments;
    while (*link != NULL) {
        segment *s = *link;
        block *b = s->first;
        if (!(is_free(b) && b->size == s->size)) {
            link = &s->next;
            continue;
        }
        *link = s->next;
        free_list_remove(pool, b);
        free(b);
        pool->nblocks--;
        pool->be.free_raw(pool->be.ctx, s->base);
        pool->frees++;
        pool->reserved -= s->size;
        pool->nsegments--;
        free(s);
    }
}

/* A new segment for a request of `size` on `stream`, as one free block. */
static int new_segment(duet__cuda_pool *pool, size_t size, bool small, void *stream, block **out) {
    size_t seg_size = small ? DUET__CUDA_SMALL_SEGMENT : round_up(size, DUET__CUDA_LARGE_ROUND);
    segment *s = calloc(1, sizeof *s);
    block *b = calloc(1, sizeof *b);
    if (s == NULL || b == NULL) {
        free(s);
        free(b);
        return duet__error(DUET_ENOMEM, "cuda allocator: out of host memory for its bookkeeping");
    }
    void *p = NULL;
    int rc = pool->be.malloc_raw(pool->be.ctx, seg_size, &p);
    if (rc == DUET_ENOMEM) {
        empty_locked(pool);
        rc = pool->be.malloc_raw(pool->be.ctx, seg_size, &p);
    }
    if (rc != DUET_OK) {
        free(s);
        free(b);
        if (rc == DUET_ENOMEM)
            return duet__error_context(rc, "cuda allocator: %zu bytes asked for (a segment of %zu) "
                                       "with %zu handed out and %zu cached, after giving the "
                                       "cache back", size, seg_size, pool->live,
                                       pool->reserved - pool->live);
        return rc;
    }
    pool->mallocs++;
    s->base = p;
    s->size = seg_size;
    s->small = small;
    s->stream = stream;
    s->first = b;
    s->next = pool->segments;
    pool->segments = s;
    pool->reserved += seg_size;
    pool->nsegments++;
    b->ptr = p;
    b->size = seg_size;
    b->stream = stream;
    b->seg = s;
    pool->nblocks++;
    *out = b;
    return DUET_OK;
}

int duet__cuda_pool_create(const duet__cuda_alloc_backend *backend, duet__cuda_pool **out) {
    *out = NULL;
    duet__cuda_pool *pool = calloc(1, sizeof *pool);
    if (pool == NULL) return duet__error(DUET_ENOMEM, "cuda allocator: out of host memory");
    pool->be = *backend;
    pthread_mutex_init(&pool->lock, NULL);
    *out = pool;
    return DUET_OK;
}

void duet__cuda_pool_destroy(duet__cuda_pool *pool) {
    if (pool == NULL) return;
    pthread_mutex_lock(&pool->lock);
    DUET_ASSERT(pool->live == 0);
    while (pool->pending != NULL) {
        block *b = pool->pending;
        pool->pending = b->pnext;
        for (int i = 0; i < b->nuses; i++) pool->be.release_event(pool->be.ctx, b->events[i]);
        b->pending = false;
        release_block(pool, b);
    }
    empty_locked(pool);
    DUET_ASSERT(pool->segments == NULL);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

int duet__cuda_pool_alloc(duet__cuda_pool *pool, size_t bytes, void *stream, void **out) {
    *out = NULL;
    if (bytes > SIZE_MAX - DUET__CUDA_LARGE_ROUND)
        return duet__error(DUET_ENOMEM, "cuda allocator: %zu bytes asked for", bytes);
    const size_t size = round_up(bytes > 0 ? bytes : 1, DUET__CUDA_ROUND);
    const bool small = size <= DUET__CUDA_SMALL;
    pthread_mutex_lock(&pool->lock);
    drain_pending(pool);
    block *b = best_fit(pool, size, small, stream);
    if (b != NULL) {
        free_list_remove(pool, b);
    } else {
        int rc = new_segment(pool, size, small, stream, &b);
        if (rc != DUET_OK) {
            pthread_mutex_unlock(&pool->lock);
            return rc;
        }
    }
    /* Split off the rest when it is worth keeping: any rest in a small
     * segment, more than a small request's worth in a large one. */
    const size_t rest = b->size - size;
    if (small ? rest >= DUET__CUDA_ROUND : rest > DUET__CUDA_SMALL) {
        block *r = calloc(1, sizeof *r);
        if (r != NULL) {
            r->ptr = b->ptr + size;
            r->size = rest;
            r->stream = b->stream;
            r->seg = b->seg;
            r->prev = b;
            r->next = b->next;
            if (b->next != NULL) b->next->prev = r;
            b->next = r;
            b->size = size;
            pool->nblocks++;
            free_list_insert(pool, r);
        }
    }
    b->allocated = true;
    b->nuses = 0;
    size_t h = hash_ptr(b->ptr);
    b->hnext = pool->table[h];
    pool->table[h] = b;
    pool->live += b->size;
    if (pool->live > pool->peak) pool->peak = pool->live;
    *out = b->ptr;
    pthread_mutex_unlock(&pool->lock);
    return DUET_OK;
}

/* The handed-out block at p, unlinked from the table when unlink. */
static block *find_allocated(duet__cuda_pool *pool, const void *p, bool unlink) {
    block **link = &pool->table[hash_ptr(p)];
    while (*link != NULL && (*link)->ptr != p) link = &(*link)->hnext;
    block *b = *link;
    if (b != NULL && unlink) {
        *link = b->hnext;
        b->hnext = NULL;
    }
    return b;
}

void duet__cuda_pool_free(duet__cuda_pool *pool, void *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&pool->lock);
    block *b = find_allocated(pool, p, true);
    DUET_ASSERT(b != NULL); /* freeing what this pool did not hand out */
    b->allocated = false;
    pool->live -= b->size;
    /* An event on each other stream it was used on; where none can be
     * recorded, wait for that stream now rather than hand out memory it
     * may still read. */
    int recorded = 0;
    for (int i = 0; i < b->nuses; i++) {
        if (pool->be.record(pool->be.ctx, b->uses[i], &b->events[recorded]) == DUET_OK)
            recorded++;
        else
            pool->be.wait(pool->be.ctx, b->uses[i]);
    }
    b->nuses = recorded;
    if (recorded > 0) {
        b->pending = true;
        b->pnext = pool->pending;
        pool->pending = b;
    } else {
        release_block(pool, b);
    }
    pthread_mutex_unlock(&pool->lock);
}

int duet__cuda_pool_record_stream(duet__cuda_pool *pool, void *p, void *stream) {
    pthread_mutex_lock(&pool->lock);
    block *b = find_allocated(pool, p, false);
    DUET_ASSERT(b != NULL);
    int rc = DUET_OK;
    bool known = stream == b->stream;
    for (int i = 0; i < b->nuses && !known; i++) known = b->uses[i] == stream;
    if (!known) {
        if (b->nuses == MAX_USES)
            rc = duet__error(DUET_EUNSUPPORTED, "cuda allocator: a block used on more than %d "
                             "streams besides its own", MAX_USES);
        else
            b->uses[b->nuses++] = stream;
    }
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

void duet__cuda_pool_empty(duet__cuda_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    drain_pending(pool);
    empty_locked(pool);
    pthread_mutex_unlock(&pool->lock);
}

void duet__cuda_pool_stats_get(duet__cuda_pool *pool, duet__cuda_pool_stats *out) {
    pthread_mutex_lock(&pool->lock);
    *out = (duet__cuda_pool_stats){.live = pool->live, .peak = pool->peak,
                                   .reserved = pool->reserved,
                                   .cached = pool->reserved - pool->live,
                                   .mallocs = pool->mallocs, .frees = pool->frees,
                                   .segments = pool->nsegments, .blocks = pool->nblocks};
    pthread_mutex_unlock(&pool->lock);
}

void duet__cuda_pool_reset_peak(duet__cuda_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    pool->peak = pool->live;
    pthread_mutex_unlock(&pool->lock);
}
