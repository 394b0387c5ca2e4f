/* sim:N's memory (sim.h): one arena per device, a PROT_NONE half whose
 * addresses are the handles and an RW half at a fixed offset that holds
 * the storage, carved by a best-fit allocator with coalescing and
 * stream-ordered frees. */
#include "sim/sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define GRAIN ((size_t)512)                   /* allocation granularity */
#define DEFAULT_ARENA ((size_t)8 << 30)       /* 8 GiB of address space */
#define MAX_RECORDED 8                        /* streams per block */

typedef struct block block;
struct block {
    size_t off, size;
    bool free;
    block *prev, *next;   /* address order, covering [0, top) */
    block *fprev, *fnext; /* the free list, or the deferred list */
    /* Streams besides compute that use the block (duet__sim_record_stream),
     * and after a free, the marks each must pass before reuse. */
    int nstreams;
    duet__sim_stream *streams[MAX_RECORDED];
    uint64_t marks[MAX_RECORDED];
};

typedef struct arena {
    char *base;           /* handles: [base, base + size), PROT_NONE */
    size_t size;          /* storage at base + size, RW */
    block **at;           /* block starting at offset k * GRAIN, or NULL */
    size_t top;           /* bytes carved so far */
    block *first, *last;  /* address order */
    block *free_list;     /* free blocks */
    block *deferred;      /* freed, waiting for other streams */
    size_t live, peak, cached;
    pthread_mutex_t lock;
} arena;

/* Published once made (arenas are never unmapped): resolve reads them
 * without the lock. */
static arena *_Atomic arenas[DUET_SIM_MAX_DEVICES];
static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

static int arena_bytes(size_t *out) {
    const char *env = getenv("DUET_SIM_MEMORY");
    *out = DEFAULT_ARENA;
    if (env == NULL || *env == '\0') return DUET_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(env, &end, 10);
    unsigned shift = 0;
    if (end != env && (*end == 'k' || *end == 'K')) shift = 10, end++;
    else if (end != env && (*end == 'm' || *end == 'M')) shift = 20, end++;
    else if (end != env && (*end == 'g' || *end == 'G')) shift = 30, end++;
    if (errno != 0 || end == env || *end != '\0' || env[0] == '-' || n == 0 ||
        n > (((unsigned long long)1 << 44) >> shift))
        return duet__error(DUET_EINVAL, "DUET_SIM_MEMORY=\"%s\": write the sim device's memory "
                           "in bytes, with an optional K, M or G suffix (at most 16T)", env);
    size_t bytes = (size_t)n << shift;
    size_t round = (size_t)2 << 20;
    *out = bytes < round ? round : (bytes + round - 1) / round * round;
    return DUET_OK;
}

static int arena_make(int index, arena **out) {
    *out = atomic_load(&arenas[index]);
    if (*out != NULL) return DUET_OK;
    int rc = DUET_OK;
    pthread_mutex_lock(&make_lock);
    arena *a = atomic_load(&arenas[index]);
    if (a != NULL) goto done;
    size_t size = 0;
    rc = arena_bytes(&size);
    if (rc != DUET_OK) goto done;
    a = calloc(1, sizeof *a);
    if (a == NULL) {
        rc = duet__error(DUET_ENOMEM, "sim:%d: out of memory for the arena's header", index);
        goto done;
    }
    void *base = mmap(NULL, 2 * size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    if (base == MAP_FAILED) {
        rc = duet__error(DUET_ENOMEM, "sim:%d: cannot reserve 2 x %zu bytes of address space "
                         "(mmap: %s); set DUET_SIM_MEMORY lower", index, size, strerror(errno));
        free(a);
        a = NULL;
        goto done;
    }
    size_t nslots = size / GRAIN;
    void *at = mmap(NULL, nslots * sizeof(block *), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED || mprotect((char *)base + size, size, PROT_READ | PROT_WRITE) != 0) {
        rc = duet__error(DUET_ENOMEM, "sim:%d: cannot map the arena's storage of %zu bytes: %s; "
                         "set DUET_SIM_MEMORY lower", index, size, strerror(errno));
        if (at != MAP_FAILED) munmap(at, nslots * sizeof(block *));
        munmap(base, 2 * size);
        free(a);
        a = NULL;
        goto done;
    }
    a->base = base;
    a->size = size;
    a->at = at;
    pthread_mutex_init(&a->lock, NULL);
    atomic_store(&arenas[index], a);
done:
    pthread_mutex_unlock(&make_lock);
    *out = a;
    return rc;
}

static void free_list_push(block **list, block *b) {
    b->fprev = NULL;
    b->fnext = *list;
    if (*list != NULL) (*list)->fprev = b;
    *list = b;
}

static void free_list_remove(block **list, block *b) {
    if (b->fprev != NULL) b->fprev->fnext = b->fnext;
    else *list = b->fnext;
    if (b->fnext != NULL) b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

/* Unlinks b from the address order and frees its header. */
static void block_drop(arena *a, block *b) {
    if (b->prev != NULL) b->prev->next = b->next;
    else a->first = b->next;
    if (b->next != NULL) b->next->prev = b->prev;
    else a->last = b->prev;
    a->at[b->off / GRAIN] = NULL;
    free(b);
}

/* b (already out of every list) becomes free, merged with free neighbours. */
static void block_release(arena *a, block *b) {
    b->free = true;
    b->nstreams = 0;
    a->cached += b->size;
    block *n = b->next;
    if (n != NULL && n->free) {
        free_list_remove(&a->free_list, n);
        b->size += n->size;
        block_drop(a, n);
    }
    block *p = b->prev;
    if (p != NULL && p->free) {
        free_list_remove(&a->free_list, p);
        p->size += b->size;
        block_drop(a, b);
        b = p;
    }
    free_list_push(&a->free_list, b);
}

/* Deferred blocks whose streams have passed their marks become free. */
static void sweep_deferred(arena *a) {
    block *b = a->deferred;
    while (b != NULL) {
        block *next = b->fnext;
        bool passed = true;
        for (int i = 0; i < b->nstreams && passed; i++)
            passed = duet__sim_stream_passed(b->streams[i], b->marks[i]);
        if (passed) {
            free_list_remove(&a->deferred, b);
            a->cached -= b->size; /* block_release counts it again */
            block_release(a, b);
        }
        b = next;
    }
}

/* A block of exactly `size` bytes: the best fitting free block, split; or
 * new room at the top. NULL when neither exists. */
static block *carve(arena *a, size_t size) {
    block *best = NULL;
    for (block *b = a->free_list; b != NULL; b = b->fnext)
        if (b->size >= size && (best == NULL || b->size < best->size)) {
            best = b;
            if (b->size == size) break;
        }
    if (best == NULL && a->last != NULL && a->last->free &&
        a->size - a->top >= size - a->last->size) {
        /* The free block at the top grows into the untouched room. */
        best = a->last;
        a->top += size - best->size;
        a->cached += size - best->size;
        best->size = size;
    }
    if (best != NULL) {
        free_list_remove(&a->free_list, best);
        a->cached -= best->size;
        if (best->size > size) {
            block *rest = calloc(1, sizeof *rest);
            if (rest != NULL) {
                rest->off = best->off + size;
                rest->size = best->size - size;
                rest->prev = best;
                rest->next = best->next;
                if (best->next != NULL) best->next->prev = rest;
                else a->last = rest;
                best->next = rest;
                best->size = size;
                a->at[rest->off / GRAIN] = rest;
                a->cached += rest->size;
                rest->free = true;
                free_list_push(&a->free_list, rest);
            }
        }
        best->free = false;
        return best;
    }
    if (a->size - a->top < size) return NULL;
    block *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    b->off = a->top;
    b->size = size;
    b->prev = a->last;
    if (a->last != NULL) a->last->next = b;
    else a->first = b;
    a->last = b;
    a->top += size;
    a->at[b->off / GRAIN] = b;
    return b;
}

int duet__sim_alloc(int index, size_t bytes, bool zero, const char *what, void **handle) {
    *handle = NULL;
    if (index < 0 || index >= DUET_SIM_MAX_DEVICES)
        return duet__error(DUET_EDEVICE, "%s: sim:%d asked for, sim:0 to sim:%d exist", what,
                           index, DUET_SIM_MAX_DEVICES - 1);
    arena *a = NULL;
    int rc = arena_make(index, &a);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", what);
    if (bytes > a->size)
        return duet__error(DUET_ENOMEM, "%s: %zu bytes asked for on sim:%d, whose arena holds "
                           "%zu (DUET_SIM_MEMORY)", what, bytes, index, a->size);
    size_t size = bytes == 0 ? GRAIN : (bytes + GRAIN - 1) / GRAIN * GRAIN;
    pthread_mutex_lock(&a->lock);
    sweep_deferred(a);
    block *b = carve(a, size);
    pthread_mutex_unlock(&a->lock);
    if (b == NULL) {
        /* What other streams still hold may be free once they ran. */
        rc = duet__sim_synchronize(index);
        pthread_mutex_lock(&a->lock);
        sweep_deferred(a);
        b = carve(a, size);
        pthread_mutex_unlock(&a->lock);
    }
    if (b == NULL)
        return duet__error(DUET_ENOMEM, "%s: out of sim:%d memory for %zu bytes (%zu live, %zu "
                           "cached, an arena of %zu: DUET_SIM_MEMORY)", what, index, bytes,
                           a->live, a->cached, a->size);
    pthread_mutex_lock(&a->lock);
    a->live += b->size;
    if (a->live > a->peak) a->peak = a->live;
    pthread_mutex_unlock(&a->lock);
    *handle = a->base + b->off;
    if (zero) {
        rc = duet__sim_fill_f32(index, *handle, b->size / sizeof(float), 0.0f, what);
        if (rc != DUET_OK) {
            duet__sim_free(index, *handle);
            *handle = NULL;
            return rc;
        }
    }
    return DUET_OK;
}

/* The arena and block of handle, which must start an allocation. */
static block *find(const void *handle, arena **out) {
    int index = duet__sim_index_of(handle);
    DUET_ASSERT(index >= 0);
    arena *a = atomic_load(&arenas[index]);
    size_t off = (size_t)((const char *)handle - a->base);
    DUET_ASSERT(off % GRAIN == 0);
    block *b = a->at[off / GRAIN];
    DUET_ASSERT(b != NULL && !b->free);
    *out = a;
    return b;
}

void duet__sim_free(int index, void *handle) {
    if (handle == NULL) return;
    arena *a = NULL;
    pthread_mutex_lock(&atomic_load(&arenas[index])->lock);
    block *b = find(handle, &a);
    DUET_ASSERT(a == atomic_load(&arenas[index]));
    a->live -= b->size;
    for (int i = 0; i < b->nstreams; i++) b->marks[i] = duet__sim_stream_mark(b->streams[i]);
    if (b->nstreams > 0) {
        a->cached += b->size;
        free_list_push(&a->deferred, b);
    } else {
        block_release(a, b);
    }
    pthread_mutex_unlock(&a->lock);
}

int duet__sim_record_stream(void *handle, duet__sim_stream *s) {
    arena *a = NULL;
    int index = duet__sim_index_of(handle);
    DUET_ASSERT(index >= 0);
    if (s == duet__sim_compute_stream(index)) return DUET_OK;
    pthread_mutex_lock(&atomic_load(&arenas[index])->lock);
    block *b = find(handle, &a);
    int rc = DUET_OK;
    bool known = false;
    for (int i = 0; i < b->nstreams; i++) known = known || b->streams[i] == s;
    if (!known && b->nstreams == MAX_RECORDED)
        rc = duet__error(DUET_EINVAL, "sim:%d: a block used by more than %d streams", index,
                         MAX_RECORDED);
    else if (!known)
        b->streams[b->nstreams++] = s;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int duet__sim_index_of(const void *p) {
    if (p == NULL) return -1;
    for (int i = 0; i < DUET_SIM_MAX_DEVICES; i++) {
        arena *a = atomic_load(&arenas[i]);
        if (a != NULL && (const char *)p >= a->base && (const char *)p < a->base + a->size)
            return i;
    }
    return -1;
}

void *duet__sim_resolve(const void *p) {
    if (p == NULL) return NULL;
    int index = duet__sim_index_of(p);
    DUET_ASSERT(index >= 0);
    arena *a = atomic_load(&arenas[index]);
    return (char *)p + a->size;
}

void duet__sim_alloc_stats(int index, size_t *live, size_t *peak, size_t *reserved) {
    *live = *peak = *reserved = 0;
    arena *a = index >= 0 && index < DUET_SIM_MAX_DEVICES ? atomic_load(&arenas[index]) : NULL;
    if (a == NULL) return;
    pthread_mutex_lock(&a->lock);
    *live = a->live;
    *peak = a->peak;
    *reserved = a->live + a->cached;
    pthread_mutex_unlock(&a->lock);
}

void duet__sim_alloc_reset_peak(int index) {
    arena *a = index >= 0 && index < DUET_SIM_MAX_DEVICES ? atomic_load(&arenas[index]) : NULL;
    if (a == NULL) return;
    pthread_mutex_lock(&a->lock);
    a->peak = a->live;
    pthread_mutex_unlock(&a->lock);
}
