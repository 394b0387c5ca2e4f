/* The caching allocator's logic (src/cuda/alloc.c) on a host backend: host
 * memory for segments and fake events that pass when the test says so.
 * Needs the CUDA build, not a GPU. */
#include "testutil.h"

#include "cuda/cuda_internal.h"

#include <string.h>

/* The fake device: counts, a room limit, and events as counters. */
typedef struct fake {
    size_t room;        /* bytes the "device" can still hand out */
    size_t in_use;      /* bytes of segments out */
    int mallocs, frees, records, waits;
    int events_live;
    bool event_passed[64];
    int next_event;
    bool fail_record;
    void *seg[256]; /* segments out and their sizes */
    size_t seg_size[256];
} fake;

static int f_malloc(void *ctx, size_t bytes, void **out) {
    fake *f = ctx;
    if (bytes > f->room - f->in_use) return duet__error(DUET_ENOMEM, "fake cudaMalloc: no room");
    *out = duet_aligned_alloc(bytes);
    assert_non_null(*out);
    int i = 0;
    while (i < 256 && f->seg[i] != NULL) i++;
    assert_true(i < 256);
    f->seg[i] = *out;
    f->seg_size[i] = bytes;
    f->in_use += bytes;
    f->mallocs++;
    return DUET_OK;
}

static void f_free(void *ctx, void *p) {
    fake *f = ctx;
    int i = 0;
    while (i < 256 && f->seg[i] != p) i++;
    assert_true(i < 256); /* only segments it handed out, once each */
    f->seg[i] = NULL;
    f->in_use -= f->seg_size[i];
    duet_aligned_free(p);
    f->frees++;
}

static int f_record(void *ctx, void *stream, void **event) {
    fake *f = ctx;
    (void)stream;
    if (f->fail_record) return duet__error(DUET_EDEVICE, "fake cudaEventRecord failed");
    assert_true(f->next_event < 64);
    f->event_passed[f->next_event] = false;
    *event = (void *)(intptr_t)(f->next_event++ + 1);
    f->records++;
    f->events_live++;
    return DUET_OK;
}

static bool f_passed(void *ctx, void *event) {
    fake *f = ctx;
    return f->event_passed[(intptr_t)event - 1];
}

static void f_release_event(void *ctx, void *event) {
    fake *f = ctx;
    (void)event;
    f->events_live--;
}

static void f_wait(void *ctx, void *stream) {
    fake *f = ctx;
    (void)stream;
    f->waits++;
}

static duet__cuda_pool *make_pool(fake *f, size_t room) {
    memset(f, 0, sizeof *f);
    f->room = room;
    duet__cuda_alloc_backend be = {.ctx = f, .malloc_raw = f_malloc, .free_raw = f_free,
                                   .record = f_record, .passed = f_passed,
                                   .release_event = f_release_event, .wait = f_wait};
    duet__cuda_pool *pool = NULL;
    TU_OK(duet__cuda_pool_create(&be, &pool));
    return pool;
}

#define S1 ((void *)0x1)
#define S2 ((void *)0x2)

/* A training loop allocates the same sizes every step: after the first
 * step, no new segment. */
static void test_steps_after_the_first_reuse(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)1 << 30);
    const size_t sizes[] = {100, 4096, 3 << 20, 700000, 12, 9 << 20, 513, 1 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    int mallocs_after_first = -1;
    size_t live_all = 0;
    for (int step = 0; step < 5; step++) {
        void *p[N];
        for (int i = 0; i < N; i++) {
            TU_OK(duet__cuda_pool_alloc(pool, sizes[i], S1, &p[i]));
            memset(p[i], 0xab, sizes[i]); /* the memory is really there */
        }
        /* Distinct, non-overlapping blocks. */
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                if (i != j)
                    assert_true((char *)p[i] + sizes[i] <= (char *)p[j] ||
                                (char *)p[j] + sizes[j] <= (char *)p[i]);
        duet__cuda_pool_stats st;
        duet__cuda_pool_stats_get(pool, &st);
        if (step == 0) live_all = st.live;
        assert_int_equal(st.live, live_all); /* the same blocks every step */
        for (int i = N - 1; i >= 0; i--) duet__cuda_pool_free(pool, p[i]);
        if (step == 0) mallocs_after_first = f.mallocs;
    }
    assert_int_equal(f.mallocs, mallocs_after_first);
    duet__cuda_pool_stats st;
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.live, 0);
    /* Peak: one step's blocks at once: each request rounded to 512 bytes,
     * a large one's block up to 1 MiB more (a rest that small is not split
     * off); three requests here are large. */
    size_t want = 0;
    for (int i = 0; i < N; i++) want += (sizes[i] + 511) / 512 * 512;
    assert_int_equal(st.peak, live_all);
    assert_true(live_all >= want && live_all <= want + 3 * DUET__CUDA_SMALL);
    assert_int_equal(st.mallocs, (uint64_t)f.mallocs);
    duet__cuda_pool_destroy(pool);
    assert_int_equal(f.frees, f.mallocs);
}

/* Small requests share 2 MiB segments; large ones get their own, rounded
 * to 2 MiB; a freed block merges with its free neighbours. */
static void test_segments_split_and_merge(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)1 << 30);
    void *a, *b, *c, *big;
    TU_OK(duet__cuda_pool_alloc(pool, 1000, S1, &a));
    TU_OK(duet__cuda_pool_alloc(pool, 1000, S1, &b));
    TU_OK(duet__cuda_pool_alloc(pool, 1000, S1, &c));
    assert_int_equal(f.mallocs, 1);
    assert_int_equal(f.in_use, DUET__CUDA_SMALL_SEGMENT);
    /* Best fit from the front of the one segment, 1024 bytes apart. */
    assert_int_equal((char *)b - (char *)a, 1024);
    assert_int_equal((char *)c - (char *)b, 1024);
    TU_OK(duet__cuda_pool_alloc(pool, (3 << 20) + 1, S1, &big));
    assert_int_equal(f.mallocs, 2);
    assert_int_equal(f.in_use, DUET__CUDA_SMALL_SEGMENT + ((size_t)4 << 20));
    duet__cuda_pool_stats st;
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.segments, 2);
    /* a, b, c, the small segment's rest; big and the large segment's rest
     * (under 1 MiB: not split off). */
    assert_int_equal(st.blocks, 5);
    duet__cuda_pool_free(pool, b);
    duet__cuda_pool_free(pool, a);
    duet__cuda_pool_free(pool, c);
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.blocks, 2); /* the small segment is one free block again */
    /* A 2 KiB request now fits at the segment's front. */
    void *d;
    TU_OK(duet__cuda_pool_alloc(pool, 2048, S1, &d));
    assert_ptr_equal(d, a);
    duet__cuda_pool_free(pool, d);
    /* Emptying gives back the segments with nothing handed out. */
    duet__cuda_pool_empty(pool);
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.segments, 1);
    assert_int_equal(f.frees, 1);
    duet__cuda_pool_free(pool, big);
    duet__cuda_pool_destroy(pool);
    assert_int_equal(f.frees, 2);
}

/* Free lists are per stream: a block freed on S1 never serves S2. */
static void test_streams_do_not_share_blocks(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)1 << 30);
    void *a, *b;
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &a));
    duet__cuda_pool_free(pool, a);
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S2, &b));
    assert_ptr_not_equal(a, b);
    assert_int_equal(f.mallocs, 2);
    duet__cuda_pool_free(pool, b);
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &b));
    assert_ptr_equal(a, b);
    duet__cuda_pool_free(pool, b);
    duet__cuda_pool_destroy(pool);
}

/* A block used on another stream waits for that stream's event. */
static void test_record_stream_defers_reuse(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)1 << 30);
    void *a, *b, *c;
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &a));
    TU_OK(duet__cuda_pool_record_stream(pool, a, S2));
    TU_OK(duet__cuda_pool_record_stream(pool, a, S2)); /* once per stream */
    TU_OK(duet__cuda_pool_record_stream(pool, a, S1)); /* its own: nothing to record */
    duet__cuda_pool_free(pool, a);
    assert_int_equal(f.records, 1);
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &b));
    assert_ptr_not_equal(a, b); /* the event has not passed */
    f.event_passed[0] = true;
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &c));
    assert_ptr_equal(a, c);
    assert_int_equal(f.events_live, 0);
    duet__cuda_pool_free(pool, b);
    duet__cuda_pool_free(pool, c);
    /* When no event can be recorded, the pool waits for the stream. */
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &a));
    TU_OK(duet__cuda_pool_record_stream(pool, a, S2));
    f.fail_record = true;
    duet__cuda_pool_free(pool, a);
    assert_int_equal(f.waits, 1);
    TU_OK(duet__cuda_pool_alloc(pool, 5 << 20, S1, &b));
    assert_ptr_equal(a, b);
    duet__cuda_pool_free(pool, b);
    duet__cuda_pool_destroy(pool);
}

/* Out of room: the cache is given back and the request retried; then
 * DUET_ENOMEM saying what was asked, live and cached. */
static void test_out_of_memory_releases_cache_then_fails(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)10 << 20);
    void *a, *b;
    TU_OK(duet__cuda_pool_alloc(pool, 6 << 20, S1, &a));
    duet__cuda_pool_free(pool, a); /* cached: 6 MiB */
    TU_OK(duet__cuda_pool_alloc(pool, 8 << 20, S1, &b)); /* needs the cache back */
    assert_int_equal(f.frees, 1);
    assert_int_equal(f.mallocs, 2);
    assert_int_equal(duet__cuda_pool_alloc(pool, 4 << 20, S1, &a), DUET_ENOMEM);
    assert_null(a);
    const char *m = duet_last_error();
    assert_non_null(strstr(m, "4194304 bytes asked for"));
    assert_non_null(strstr(m, "8388608 handed out"));
    assert_non_null(strstr(m, "fake cudaMalloc: no room"));
    duet__cuda_pool_free(pool, b);
    duet__cuda_pool_destroy(pool);
}

/* Many random requests and frees: no overlap among live blocks, live bytes
 * add up, and everything goes back. */
static void test_random_workload(void **state) {
    (void)state;
    fake f;
    duet__cuda_pool *pool = make_pool(&f, (size_t)1 << 31);
    enum { SLOTS = 64 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    duet_rng rng = duet_rng_make(18, 0);
    for (int it = 0; it < 4000; it++) {
        int i = (int)duet_rng_int(&rng, 0, SLOTS - 1);
        if (p[i] != NULL) {
            duet__cuda_pool_free(pool, p[i]);
            p[i] = NULL;
            continue;
        }
        sz[i] = duet_rng_uniform(&rng) < 0.8f ? (size_t)duet_rng_int(&rng, 1, 1 << 20)
                                             : (size_t)duet_rng_int(&rng, 1 << 20, 24 << 20);
        TU_OK(duet__cuda_pool_alloc(pool, sz[i], duet_rng_uniform(&rng) < 0.5f ? S1 : S2, &p[i]));
        memset(p[i], i, sz[i] < 64 ? sz[i] : 64);
        memset((char *)p[i] + sz[i] - 1, i, 1);
    }
    size_t live = 0;
    for (int i = 0; i < SLOTS; i++) {
        if (p[i] == NULL) continue;
        live += (sz[i] + 511) / 512 * 512;
        for (int j = 0; j < SLOTS; j++)
            if (j != i && p[j] != NULL)
                assert_true((char *)p[i] + sz[i] <= (char *)p[j] ||
                            (char *)p[j] + sz[j] <= (char *)p[i]);
    }
    duet__cuda_pool_stats st;
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.live, live);
    for (int i = 0; i < SLOTS; i++) duet__cuda_pool_free(pool, p[i]);
    duet__cuda_pool_stats_get(pool, &st);
    assert_int_equal(st.live, 0);
    /* Every segment is one free block again. */
    assert_int_equal(st.blocks, st.segments);
    duet__cuda_pool_destroy(pool);
    assert_int_equal(f.frees, f.mallocs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_after_the_first_reuse),
        cmocka_unit_test(test_segments_split_and_merge),
        cmocka_unit_test(test_streams_do_not_share_blocks),
        cmocka_unit_test(test_record_stream_defers_reuse),
        cmocka_unit_test(test_out_of_memory_releases_cache_then_fails),
        cmocka_unit_test(test_random_workload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
