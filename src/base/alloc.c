/* Aligned allocation with a cache of large blocks.
 *
 * Why a cache: glibc serves blocks of a few MB and more with fresh mmap()s
 * and returns them to the system on free, so every new activation tensor of
 * a training step pays first-touch page faults (measured ~13 ms per 4 MB on
 * the development VM, more than the convolution that fills it). The pages
 * of freed large blocks are kept here and serve later requests: a training
 * step allocates the same shapes every iteration. */
#include "duet/base.h"

#include <pthread.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Each block starts with this header, placed just before the aligned
 * pointer handed out. */
typedef struct block_header {
    void *raw;   /* what malloc or mmap returned */
    size_t mapped; /* mmap length, 0 for malloc */
    size_t size; /* usable bytes after the aligned pointer */
} block_header;

#define CACHE_MIN_BYTES ((size_t)256 << 10)
/* Enough slots for every large tensor of a full-size SRGAN step (the x4
 * MSRResNet with 16 blocks alone keeps ~80 activations alive until its
 * backward, plus their gradients); scanning them costs far less than one
 * page fault. */
#define CACHE_SLOTS 512

/* The cache holds mapped ranges of pages, not blocks: a request takes the
 * front of the smallest range that holds it and leaves the rest cached, and
 * a range given back merges with the cached ranges next to it. */
typedef struct cached_range {
    char *start; /* NULL: a free slot */
    size_t len;
    uint64_t stamp; /* when it was put back */
} cached_range;

typedef struct block_cache {
    pthread_mutex_t lock;
    cached_range r[CACHE_SLOTS];
    uint64_t clock;
    size_t total, limit;
    bool limit_read;
} block_cache;

/* Process-wide; guarded by its mutex (the data loader's thread allocates
 * too). */
static block_cache cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

#if defined(__SANITIZE_ADDRESS__)
#define CACHE_ENABLED 0 /* let AddressSanitizer see every use after free */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CACHE_ENABLED 0
#endif
#endif
#ifndef CACHE_ENABLED
#define CACHE_ENABLED 1
#endif

static size_t cache_limit(void) {
    if (!cache.limit_read) {
        /* DUET_ALLOC_CACHE_MB caps the bytes kept for reuse; 0 disables. */
        const char *s = getenv("DUET_ALLOC_CACHE_MB");
        cache.limit = s != NULL ? (size_t)strtoull(s, NULL, 10) << 20 : (size_t)2048 << 20;
        cache.limit_read = true;
    }
    return cache.limit;
}

static block_header *header_of(void *p) { return (block_header *)p - 1; }

/* Live and peak bytes handed out (duet_alloc_stats), and the most ever live
 * (the cache's cap below): atomics, cheap next to an allocation. */
static _Atomic size_t live_bytes, peak_bytes, most_live_bytes;

static void raise_to(_Atomic size_t *v, size_t now) {
    size_t old = atomic_load_explicit(v, memory_order_relaxed);
    while (now > old && !atomic_compare_exchange_weak_explicit(v, &old, now, memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
}

static void count_alloc(size_t bytes) {
    size_t now = atomic_fetch_add_explicit(&live_bytes, bytes, memory_order_relaxed) + bytes;
    raise_to(&peak_bytes, now);
    raise_to(&most_live_bytes, now);
}

void duet_alloc_stats(size_t *live, size_t *peak) {
    *live = atomic_load_explicit(&live_bytes, memory_order_relaxed);
    *peak = atomic_load_explicit(&peak_bytes, memory_order_relaxed);
}

void duet_alloc_reset_peak(void) {
    atomic_store_explicit(&peak_bytes, atomic_load_explicit(&live_bytes, memory_order_relaxed),
                          memory_order_relaxed);
}

static void release_block(void *p) {
    block_header *h = header_of(p);
    if (h->mapped != 0) munmap(h->raw, h->mapped);
    else free(h->raw);
}

/* The block at the start of a mapped range of len bytes. */
static void *block_at(char *start, size_t len, size_t bytes) {
    /* mmap is page aligned: the header sits in the first DUET_ALIGNMENT. */
    _Static_assert(sizeof(block_header) <= DUET_ALIGNMENT, "header fits before the block");
    char *p = start + DUET_ALIGNMENT;
    header_of(p)->raw = start;
    header_of(p)->mapped = len;
    header_of(p)->size = bytes;
    return p;
}

static size_t page_bytes(void) {
    long v = sysconf(_SC_PAGESIZE); /* read each time: threads allocate concurrently */
    return v > 0 ? (size_t)v : 4096;
}

/* The mapped length for a block of `bytes`: header room, whole pages. */
static size_t range_len(size_t bytes) {
    size_t pg = page_bytes(), len = bytes + DUET_ALIGNMENT;
    if (len < bytes || len > SIZE_MAX - pg) return 0;
    return (len + pg - 1) / pg * pg;
}

/* Large blocks are mapped directly rather than through malloc: glibc raises
 * its mmap threshold after the first large free and then serves blocks of
 * up to 32 MB from its heap, where a freed block often stays resident (the
 * process's footprint then exceeds what is live by the fragments). A block
 * given back here is given back to the system.
 *
 * Blocks of HUGE_PAGE_BYTES and more are mapped on a huge-page boundary and
 * marked for transparent huge pages (MADV_HUGEPAGE; Debian's kernels default
 * to "madvise"), so that the first touch of a fresh activation faults once
 * per 2 MB instead of once per 4 KB. Under a hypervisor each fault is dear:
 * on the development VM the full SRGAN step spent a quarter of its time in
 * first-touch faults and the zeroing around them. Where the kernel has no
 * huge pages the advice is ignored and the block works as before. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

static void *map_block(size_t bytes) {
    size_t len = range_len(bytes);
    if (len == 0) return NULL;
    const bool huge = len >= HUGE_PAGE_BYTES;
    size_t span = len;
    if (huge) {
        /* Only whole aligned 2 MB ranges become huge pages; the tail past
         * the last one stays in small pages, so no more than the block
         * itself becomes resident. */
        span = len + HUGE_PAGE_BYTES; /* room to slide to the boundary */
        if (span < len) return NULL;
    }
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    if (huge) {
        char *start = (char *)(((uintptr_t)raw + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1));
        size_t head = (size_t)(start - raw), tail = span - head - len;
        if (head > 0) munmap(raw, head);
        if (tail > 0) munmap(start + len, tail);
        raw = start;
#ifdef MADV_HUGEPAGE
        madvise(raw, len, MADV_HUGEPAGE);
#endif
    }
    return block_at(raw, len, bytes);
}

/* A block of `bytes` from the cache, or NULL. The smallest cached range
 * that holds it serves: whole when the rest would be small (under a quarter
 * of the request, or under a huge page), else its front, and the rest stays
 * cached. So the pages one phase of a step faulted in serve the next
 * phase's differently sized tensors: with whole blocks matched by size
 * only, the full SRGAN step mapped (and the kernel zeroed) 1.4 GB of fresh
 * pages every step. */
static void *cache_take(size_t bytes) {
    size_t need = range_len(bytes);
    if (need == 0) return NULL;
    void *found = NULL;
    pthread_mutex_lock(&cache.lock);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        const cached_range *r = &cache.r[i];
        if (r->start == NULL || r->len < need) continue;
        if (best < 0 || r->len < cache.r[best].len) best = i;
    }
    if (best >= 0) {
        cached_range *r = &cache.r[best];
        size_t rest = r->len - need;
        if (rest <= need / 4 || rest < HUGE_PAGE_BYTES) {
            found = block_at(r->start, r->len, bytes);
            cache.total -= r->len;
            r->start = NULL;
        } else {
            found = block_at(r->start, need, bytes);
            cache.total -= need;
            r->start += need;
            r->len = rest;
        }
    }
    pthread_mutex_unlock(&cache.lock);
    return found;
}

/* Gives back the range that waited longest; returns its slot, now free.
 * The cache's lock is held and the cache is not empty. */
static int evict_oldest(void) {
    int old = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache.r[i].start != NULL && (old < 0 || cache.r[i].stamp < cache.r[old].stamp))
            old = i;
    munmap(cache.r[old].start, cache.r[old].len);
    cache.total -= cache.r[old].len;
    cache.r[old].start = NULL;
    return old;
}

/* How far the cache may take the footprint above the most ever live. The
 * ranges a step frees do not always line up with what its next allocations
 * ask for (the generator step's and the discriminator step's activations
 * differ), so with no headroom at all the cache gives back pages that the
 * next phase of the step maps and faults in again: before ranges were
 * split and merged, the tiny SRGAN step then spent half its time in page
 * faults and munmap (283k minor faults in 21 steps against 21k with 64 MB
 * of headroom). 64 MB is most of a small model's working set and under a
 * tenth of the full SRGAN step's (~860 MB). */
#define CACHE_HEADROOM_BYTES ((size_t)64 << 20)

/* Before a fresh block of `bytes` (a cache miss): gives back the ranges that
 * waited longest until the live bytes, the new block and the cache together
 * are no more than the most that was ever live plus the headroom above. A
 * step's freed activations wait here for the next step's allocations, but
 * pages that nothing asks for go back as soon as the memory is wanted for
 * something else (without a cap, the
 * cache held ~260 MB on top of the live peak of the full SRGAN step). */
static void cache_trim_for(size_t bytes) {
    pthread_mutex_lock(&cache.lock);
    size_t live = atomic_load_explicit(&live_bytes, memory_order_relaxed) + bytes;
    size_t cap = atomic_load_explicit(&most_live_bytes, memory_order_relaxed);
    if (cap < live) cap = live;
    cap = cap > SIZE_MAX - CACHE_HEADROOM_BYTES ? SIZE_MAX : cap + CACHE_HEADROOM_BYTES;
    while (cache.total > 0 && live + cache.total > cap) evict_oldest();
    pthread_mutex_unlock(&cache.lock);
}

/* Keeps the mapped range of p for reuse, merged with the cached ranges
 * next to it; false when it does not fit (the caller frees it). */
static bool cache_put(void *p) {
    char *start = header_of(p)->raw;
    size_t len = header_of(p)->mapped;
    bool kept = false;
    pthread_mutex_lock(&cache.lock);
    size_t limit = cache_limit();
    /* Neighbours first: a merged range takes one slot. Ranges from
     * different mmap calls that happen to touch merge too; munmap takes a
     * range across mappings. */
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cached_range *r = &cache.r[i];
        if (r->start == NULL) continue;
        if (r->start + r->len == start) {
            start = r->start;
            len += r->len;
        } else if (start + len == r->start) {
            len += r->len;
        } else {
            continue;
        }
        cache.total -= r->len;
        r->start = NULL;
    }
    int slot = -1;
    for (int i = 0; i < CACHE_SLOTS && slot < 0; i++)
        if (cache.r[i].start == NULL) slot = i;
    /* Full: give back the ranges that waited longest (the shapes the
     * program stopped using), not the largest ones, which are the most
     * expensive to fault in again. */
    while ((slot < 0 || cache.total + len > limit) && cache.total > 0 && len <= limit)
        slot = evict_oldest();
    if (slot >= 0 && cache.total + len <= limit) {
        cache.r[slot] = (cached_range){.start = start, .len = len, .stamp = ++cache.clock};
        cache.total += len;
        kept = true;
    } else if (start != header_of(p)->raw || len != header_of(p)->mapped) {
        munmap(start, len); /* merged with cached neighbours: all of it goes */
        kept = true;
    }
    pthread_mutex_unlock(&cache.lock);
    return kept;
}

void *duet_aligned_alloc(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (CACHE_ENABLED && bytes >= CACHE_MIN_BYTES) {
        void *p = cache_take(bytes);
        if (p != NULL) {
            count_alloc(header_of(p)->size);
            return p;
        }
        cache_trim_for(bytes);
    }
    if (CACHE_ENABLED && bytes >= CACHE_MIN_BYTES) { /* ASan: malloc, which it watches */
        void *p = map_block(bytes);
        if (p != NULL) count_alloc(bytes);
        return p;
    }
    if (bytes > SIZE_MAX - DUET_ALIGNMENT - sizeof(block_header)) return NULL;
    char *raw = malloc(bytes + DUET_ALIGNMENT + sizeof(block_header));
    if (raw == NULL) return NULL;
    uintptr_t start = (uintptr_t)(raw + sizeof(block_header));
    char *p = (char *)((start + DUET_ALIGNMENT - 1) & ~(uintptr_t)(DUET_ALIGNMENT - 1));
    header_of(p)->raw = raw;
    header_of(p)->mapped = 0;
    header_of(p)->size = bytes;
    count_alloc(bytes);
    return p;
}

void *duet_aligned_calloc(size_t bytes) {
    void *p = duet_aligned_alloc(bytes);
    if (p != NULL) memset(p, 0, bytes == 0 ? 1 : bytes);
    return p;
}

void duet_aligned_free(void *p) {
    if (p == NULL) return;
    size_t size = header_of(p)->size;
    atomic_fetch_sub_explicit(&live_bytes, size, memory_order_relaxed);
    if (CACHE_ENABLED && size >= CACHE_MIN_BYTES && cache_put(p)) return;
    release_block(p);
}
