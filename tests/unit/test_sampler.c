/* The distributed sampler, with every "rank" built in this one process:
 * stripes of one shared padded permutation, complete, disjoint up to the
 * padding, seeded per epoch, resumable. */
#include "testutil.h"

#include <string.h>

/* Rebuilds the padded epoch list from every rank's stripe (entry r + k*world
 * is rank r's k-th) and checks it is a permutation of [0, size) followed by a
 * repeat of its own start. Returns the list (free it). */
static int64_t *gather_epoch(int64_t size, int world, int64_t per_gpu, uint64_t seed,
                             bool shuffle, int64_t epoch, int64_t *total_out) {
    int64_t total = 0, num = 0;
    int64_t *full = NULL;
    for (int r = 0; r < world; r++) {
        duet_sampler *s = NULL;
        TU_OK(duet_sampler_create(size, world, r, per_gpu, seed, shuffle, &s));
        if (r == 0) {
            num = duet_sampler_num_samples(s);
            total = num * world;
            full = malloc(sizeof(int64_t) * (size_t)total);
        }
        assert_int_equal(duet_sampler_num_samples(s), num);
        int64_t *mine = malloc(sizeof(int64_t) * (size_t)num);
        TU_OK(duet_sampler_epoch_indices(s, epoch, mine));
        for (int64_t k = 0; k < num; k++) full[r + k * world] = mine[k];
        free(mine);
        duet_sampler_destroy(s);
    }
    int *seen = calloc((size_t)size, sizeof(int));
    for (int64_t i = 0; i < size; i++) {
        assert_true(full[i] >= 0 && full[i] < size);
        seen[full[i]]++;
    }
    for (int64_t i = 0; i < size; i++) assert_int_equal(seen[i], 1);
    for (int64_t i = size; i < total; i++) assert_int_equal(full[i], full[i - size]);
    free(seen);
    *total_out = total;
    return full;
}

static void test_sizes_like_mmediting(void **state) {
    (void)state;
    struct {
        int64_t size;
        int world;
        int64_t per_gpu;
        int64_t num_samples;
    } cases[] = {
        {10, 3, 2, 4},   /* ceil(10 / 3 / 2) * 2 */
        {12, 3, 2, 4},   /* exact: no padding */
        {7, 1, 3, 9},    /* one process still pads to whole batches */
        {100, 2, 16, 64},
        {5, 5, 1, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        duet_sampler *s = NULL;
        TU_OK(duet_sampler_create(cases[i].size, cases[i].world, 0, cases[i].per_gpu, 0, true,
                                  &s));
        assert_int_equal(duet_sampler_num_samples(s), cases[i].num_samples);
        duet_sampler_destroy(s);
        int64_t total = 0;
        int64_t *full = gather_epoch(cases[i].size, cases[i].world, cases[i].per_gpu, 9, true, 0,
                                     &total);
        assert_int_equal(total, cases[i].num_samples * cases[i].world);
        free(full);
    }
}

static void test_disjoint_and_complete_without_padding(void **state) {
    (void)state;
    /* 24 samples over 4 ranks of batch 3: each index exactly once. */
    int seen[24] = {0};
    for (int r = 0; r < 4; r++) {
        duet_sampler *s = NULL;
        TU_OK(duet_sampler_create(24, 4, r, 3, 5, true, &s));
        int64_t idx[6];
        TU_OK(duet_sampler_epoch_indices(s, 2, idx));
        for (int k = 0; k < 6; k++) seen[idx[k]]++;
        duet_sampler_destroy(s);
    }
    for (int i = 0; i < 24; i++) assert_int_equal(seen[i], 1);
}

static void test_seeded_per_epoch(void **state) {
    (void)state;
    int64_t total = 0;
    int64_t *a = gather_epoch(50, 2, 4, 11, true, 0, &total);
    int64_t *b = gather_epoch(50, 2, 4, 11, true, 0, &total);
    int64_t *c = gather_epoch(50, 2, 4, 11, true, 1, &total);
    int64_t *d = gather_epoch(50, 2, 4, 12, true, 0, &total);
    assert_memory_equal(a, b, sizeof(int64_t) * (size_t)total);
    int same_c = 0, same_d = 0, identity = 0;
    for (int64_t i = 0; i < 50; i++) {
        same_c += a[i] == c[i];
        same_d += a[i] == d[i];
        identity += a[i] == i;
    }
    assert_true(same_c < 10); /* a new permutation every epoch */
    assert_true(same_d < 10); /* and for another seed */
    assert_true(identity < 10);
    /* The world size does not change the permutation, only the striping:
     * world 1 with batch 1 sees the same order as the gathered stripes. */
    duet_sampler *one = NULL;
    TU_OK(duet_sampler_create(50, 1, 0, 1, 11, true, &one));
    int64_t solo[50];
    TU_OK(duet_sampler_epoch_indices(one, 1, solo));
    assert_memory_equal(solo, c, sizeof(solo));
    duet_sampler_destroy(one);
    free(a);
    free(b);
    free(c);
    free(d);

    /* shuffle = false: the identity, striped and padded. */
    int64_t *e = gather_epoch(7, 3, 1, 0, false, 4, &total);
    assert_int_equal(total, 9);
    const int64_t want[9] = {0, 1, 2, 3, 4, 5, 6, 0, 1};
    assert_memory_equal(e, want, sizeof(want));
    free(e);
}

static void test_too_small_dataset(void **state) {
    (void)state;
    duet_sampler *s = NULL;
    int rc = duet_sampler_create(5, 3, 0, 2, 0, true, &s);
    assert_int_equal(rc, DUET_ESHAPE);
    assert_null(s);
    assert_non_null(strstr(duet_last_error(), "fewer processes"));
    assert_int_equal(duet_sampler_create(5, 3, 3, 1, 0, true, &s), DUET_EINVAL); /* rank */
    assert_int_equal(duet_sampler_create(0, 1, 0, 1, 0, true, &s), DUET_EINVAL);
    assert_int_equal(duet_sampler_create(5, 1, 0, 0, 0, true, &s), DUET_EINVAL);
}

static void test_batches_across_epochs_and_resume(void **state) {
    (void)state;
    /* 10 samples, 2 ranks, batch 2: 6 per rank per epoch, 3 batches. */
    duet_sampler *s = NULL;
    TU_OK(duet_sampler_create(10, 2, 1, 2, 3, true, &s));
    assert_int_equal(duet_sampler_num_samples(s), 6);
    int64_t stream[4 * 6], epochs[4 * 3];
    for (int b = 0; b < 4 * 3; b++) duet_sampler_next_batch(s, stream + 2 * b, epochs + b);
    for (int e = 0; e < 4; e++) {
        int64_t want[6];
        TU_OK(duet_sampler_epoch_indices(s, e, want));
        assert_memory_equal(stream + 6 * e, want, sizeof(want));
        for (int b = 0; b < 3; b++) assert_int_equal(epochs[3 * e + b], e);
    }
    duet_sampler_state st = duet_sampler_get_state(s);
    assert_int_equal(st.epoch, 3);
    assert_int_equal(st.position, 6);

    /* Resume in the middle of epoch 1 on a fresh sampler. */
    duet_sampler *r = NULL;
    TU_OK(duet_sampler_create(10, 2, 1, 2, 3, true, &r));
    TU_OK(duet_sampler_set_state(r, (duet_sampler_state){1, 4}));
    for (int b = 5; b < 12; b++) {
        int64_t got[2], ep;
        duet_sampler_next_batch(r, got, &ep);
        assert_memory_equal(got, stream + 2 * b, sizeof(got));
        assert_int_equal(ep, epochs[b]);
    }
    /* A state saved at the end of an epoch resumes at the next one. */
    TU_OK(duet_sampler_set_state(r, (duet_sampler_state){2, 6}));
    int64_t got[2], ep;
    duet_sampler_next_batch(r, got, &ep);
    assert_int_equal(ep, 3);
    assert_memory_equal(got, stream + 18, sizeof(got));

    assert_int_equal(duet_sampler_set_state(r, (duet_sampler_state){0, 3}), DUET_EINVAL);
    assert_int_equal(duet_sampler_set_state(r, (duet_sampler_state){0, 8}), DUET_EINVAL);
    assert_int_equal(duet_sampler_set_state(r, (duet_sampler_state){-1, 0}), DUET_EINVAL);
    duet_sampler_destroy(r);
    duet_sampler_destroy(s);
}

/* The global batch of the next step over all `world` ranks' samplers,
 * sorted (a multiset: its split over the ranks is the world size's). */
static void next_global(duet_sampler **s, int world, int64_t per_gpu, int64_t *out,
                        int64_t *epoch) {
    for (int r = 0; r < world; r++) duet_sampler_next_batch(s[r], out + r * per_gpu, epoch);
    int64_t n = world * per_gpu;
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
}

/* Resume on another world size (issue 35): 2 ranks x 3 stopped after k
 * steps continue on 3 x 2 and 1 x 6 from the global sample index (position
 * x world) with the same global batches and epochs as the uninterrupted
 * run, across epoch ends (25 samples: padded to 30), for every k; a total
 * batch that does not divide the index is refused. */
static void test_resume_on_another_world_size(void **state) {
    (void)state;
    const int64_t size = 25, group = 6;
    const int worlds[] = {3, 1, 6};
    for (int64_t k = 0; k <= 12; k++) {
        duet_sampler *a[2];
        for (int r = 0; r < 2; r++) TU_OK(duet_sampler_create(size, 2, r, 3, 9, true, &a[r]));
        int64_t want[6], got[6], ea = 0, eb = 0;
        for (int64_t i = 0; i < k; i++) next_global(a, 2, 3, want, &ea);
        duet_sampler_state st = duet_sampler_get_state(a[0]);
        int64_t global = st.position * 2;
        for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
            int world = worlds[w];
            int64_t per_gpu = group / world;
            duet_sampler_state at;
            TU_OK(duet_sampler_state_from_global(size, world, per_gpu, st.epoch, global, &at));
            duet_sampler *b[6];
            for (int r = 0; r < world; r++) {
                TU_OK(duet_sampler_create(size, world, r, per_gpu, 9, true, &b[r]));
                TU_OK(duet_sampler_set_state(b[r], at));
            }
            /* The uninterrupted run from the same point, on fresh samplers. */
            duet_sampler *c[2];
            for (int r = 0; r < 2; r++) {
                TU_OK(duet_sampler_create(size, 2, r, 3, 9, true, &c[r]));
                TU_OK(duet_sampler_set_state(c[r], st));
            }
            for (int step = 0; step < 9; step++) {
                next_global(c, 2, 3, want, &ea);
                next_global(b, world, per_gpu, got, &eb);
                assert_int_equal(eb, ea);
                assert_memory_equal(got, want, sizeof want);
            }
            for (int r = 0; r < world; r++) duet_sampler_destroy(b[r]);
            for (int r = 0; r < 2; r++) duet_sampler_destroy(c[r]);
        }
        for (int r = 0; r < 2; r++) duet_sampler_destroy(a[r]);
    }
    duet_sampler_state at;
    tu_expect_error(duet_sampler_state_from_global(size, 4, 1, 0, 18, &at), DUET_EINVAL,
                    "18", "not a multiple", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_like_mmediting),
        cmocka_unit_test(test_disjoint_and_complete_without_padding),
        cmocka_unit_test(test_seeded_per_epoch),
        cmocka_unit_test(test_too_small_dataset),
        cmocka_unit_test(test_batches_across_epochs_and_resume),
        cmocka_unit_test(test_resume_on_another_world_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
