/* Batches are named tensors from the dataset to the model: a dataset of
 * one's own yields its own names (here paired translation data, "img_a" /
 * "img_b" and a metadata column), and the loader (with or without prefetch,
 * through RepeatDataset) stacks them unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "duet/duet.h"
#include "testutil.h"

/* Sample i: img_a (1, 2, 3, 3) filled with i + a random offset from the
 * sample's generator, img_b = -img_a (1, 1, 2, 2 of the first values),
 * metadata pair_id "pair<i>". */
static int pairs_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    (void)impl;
    duet_tensor *a = NULL, *b = NULL;
    DUET_TRY(duet_tensor_create4(1, 2, 3, 3, &a));
    int rc = duet_tensor_create4(1, 1, 2, 2, &b);
    float offset = duet_rng_uniform(rng);
    for (int64_t k = 0; rc == DUET_OK && k < a->numel; k++) a->data[k] = (float)index + offset;
    for (int64_t k = 0; rc == DUET_OK && k < b->numel; k++) b->data[k] = -a->data[k];
    char id[32];
    snprintf(id, sizeof id, "pair%lld", (long long)index);
    const char *ids[1] = {id};
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "img_a", a);
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "img_b", b);
    if (rc == DUET_OK) rc = duet_batch_add_meta(out, "pair_id", 1, ids);
    duet_tensor_release(a);
    duet_tensor_release(b);
    return rc;
}

static const char *pairs_name(const void *impl, int64_t index) {
    (void)impl;
    static const char *names[] = {"p0", "p1", "p2", "p3", "p4"};
    return names[index];
}

static const duet_dataset_ops pairs_ops = {
    .name = "Pairs", .get = pairs_get, .sample_name = pairs_name};

static void test_concat(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_batch p[2] = {{0}, {0}}, out = {0};
    TU_OK(pairs_get(NULL, 3, &rng, &p[0]));
    TU_OK(pairs_get(NULL, 1, &rng, &p[1]));
    const duet_batch *parts[2] = {&p[0], &p[1]};
    TU_OK(duet_batch_concat(&out, parts, 2));
    assert_int_equal(out.nsamples, 2);
    duet_tensor *a = duet_batch_tensor_get(&out, "img_a");
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 2);
    assert_true(a->data[0] >= 3.0f && a->data[0] < 4.0f);
    assert_true(a->data[18] >= 1.0f && a->data[18] < 2.0f);
    assert_true(duet_batch_tensor_get(&out, "img_b")->data[4] == -a->data[18]);
    assert_string_equal(duet_batch_meta_get(&out, "pair_id", 0), "pair3");
    assert_string_equal(duet_batch_meta_get(&out, "pair_id", 1), "pair1");
    duet_batch_clear(&out);

    /* Parts that differ: a shape, a name. */
    duet_batch odd = {0};
    duet_tensor *t = tu_zeros(4, (int64_t[]){1, 2, 4, 4});
    TU_OK(duet_batch_add_tensor(&odd, "img_a", t));
    duet_tensor_release(t);
    const duet_batch *bad[2] = {&p[0], &odd};
    tu_expect_error(duet_batch_concat(&out, bad, 2), DUET_EINVAL, "part 1", NULL);
    duet_tensor *b = tu_zeros(4, (int64_t[]){1, 1, 2, 2});
    TU_OK(duet_batch_add_tensor(&odd, "img_b", b));
    const char *one[1] = {"x"};
    TU_OK(duet_batch_add_meta(&odd, "pair_id", 1, one));
    duet_tensor_release(b);
    tu_expect_error(duet_batch_concat(&out, bad, 2), DUET_ESHAPE, "'img_a'", "[1, 2, 4, 4]",
                    NULL);
    assert_int_equal(out.ntensors, 0);
    duet_batch_clear(&odd);
    duet_batch_clear(&p[0]);
    duet_batch_clear(&p[1]);
}

static void test_loader_carries_names(void **state) {
    (void)state;
    duet_dataset *ds = NULL, *rep = NULL;
    TU_OK(duet_dataset_create(&pairs_ops, NULL, 5, &ds));
    TU_OK(duet_repeat_dataset_create(ds, 3, &rep));
    assert_int_equal(duet_dataset_size(rep), 15);
    assert_string_equal(duet_dataset_name(rep, 7), "p2");

    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        duet_loader_opts lo = duet_loader_options_default();
        lo.samples_per_gpu = 4;
        lo.seed = 11;
        lo.prefetch = prefetch;
        duet_loader *l = NULL;
        TU_OK(duet_loader_create(rep, &lo, &l));
        for (int it = 0; it < 5; it++) {
            duet_data_batch *b = NULL;
            TU_OK(duet_loader_next(l, &b));
            assert_int_equal(b->batch.ntensors, 2);
            duet_tensor *a = NULL, *bb = NULL;
            TU_OK(duet_batch_require(&b->batch, "img_a", &a));
            TU_OK(duet_batch_require(&b->batch, "img_b", &bb));
            assert_int_equal(a->shape[0], 4);
            assert_int_equal(bb->shape[3], 2);
            assert_null(duet_batch_tensor_get(&b->batch, "lq"));
            for (int64_t i = 0; i < 4; i++) {
                /* The sample the sampler picked, with its own randomness. */
                duet_batch one = {0};
                TU_OK(duet_dataset_get_item(rep, b->indices[i], 11, b->epoch, &one));
                assert_memory_equal(a->data + i * 18,
                                    duet_batch_tensor_get(&one, "img_a")->data,
                                    sizeof(float) * 18);
                char want[32];
                snprintf(want, sizeof want, "pair%lld", (long long)(b->indices[i] % 5));
                assert_string_equal(duet_batch_meta_get(&b->batch, "pair_id", i), want);
                duet_batch_clear(&one);
            }
            duet_data_batch_destroy(b);
        }
        duet_loader_destroy(l);
    }
    /* Repeats of one sample draw their own offsets (the outer index). */
    duet_batch x = {0}, y = {0};
    TU_OK(duet_dataset_get_item(rep, 1, 11, 0, &x));
    TU_OK(duet_dataset_get_item(rep, 6, 11, 0, &y));
    assert_true(duet_batch_tensor_get(&x, "img_a")->data[0] !=
                duet_batch_tensor_get(&y, "img_a")->data[0]);
    duet_batch_clear(&x);
    duet_batch_clear(&y);
    tu_expect_error(duet_dataset_get_item(rep, 15, 0, 0, &x), DUET_EINVAL, "out of range", NULL);
    duet_dataset_destroy(rep);
}

/* The SR sets keep MMEditing's names: "lq", "gt" and "gt_path". */
static void test_sr_names(void **state) {
    const char *dir = *state;
    duet_rng rng = duet_rng_make(2, 0);
    char path[512];
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d.png", i);
        duet_image *img = tu_random_image(&rng, 16, 16, 3);
        TU_OK(duet_image_save_png(img, tu_path(path, sizeof path, dir, name)));
        duet_image_destroy(img);
    }
    duet_sr_dataset_opts o = duet_sr_dataset_options_default();
    o.gt_dir = dir;
    o.gt_size = 8;
    duet_dataset *ds = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    duet_batch b = {0};
    TU_OK(duet_dataset_get_item(ds, 1, 3, 0, &b));
    duet_sample s;
    TU_OK(duet_dataset_get(ds, 1, 3, 0, &s));
    assert_memory_equal(duet_batch_tensor_get(&b, "lq")->data, s.lq->data, sizeof(float) * 12);
    assert_int_equal(duet_batch_tensor_get(&b, "gt")->shape[3], 8);
    assert_string_equal(duet_batch_meta_get(&b, "gt_path", 0), "1.png");
    duet_sample_clear(&s);
    duet_batch_clear(&b);
    duet_dataset_destroy(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_loader_carries_names),
        TU_TMPDIR_TEST(test_sr_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
