/* SR datasets and the loader on small image folders written here: crops,
 * LQ by bicubic downscaling or from a paired folder, flips, determinism in
 * (seed, epoch, index), repeat, validation sets, errors naming files, and
 * batches that are the same with and without the prefetch thread; LMDB data
 * (MMEditing's layout) giving the folders' samples, and its errors. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];
static char gt_dir[300], lq_dir[300], odd_dir[300];

/* GT sizes (H, W), all multiples of 4; names deliberately not in creation
 * order so that sorting matters. */
static const char *const NAMES[] = {"b.png", "a.png", "d.png", "c.png", "e.png"};
static const int64_t SIZES[][2] = {{40, 48}, {36, 36}, {52, 40}, {44, 60}, {48, 48}};
#define NIMG 5

/* Makes dir and writes n 16x16 noise images 0.png .. <n-1>.png into it. */
static void noise_pngs(const char *dir, int n, uint64_t seed) {
    assert_int_equal(mkdir(dir, 0755), 0);
    duet_rng rng = duet_rng_make(seed, 0);
    char p[500];
    for (int i = 0; i < n; i++) {
        duet_image *img = tu_random_image(&rng, 16, 16, 3);
        snprintf(p, sizeof(p), "%s/%d.png", dir, i);
        TU_OK(duet_image_save_png(img, p));
        duet_image_destroy(img);
    }
}

static int setup_folders(void **state) {
    (void)state;
    if (tu_mkdtemp(root, sizeof(root), "duet_test_data") == NULL) return -1;
    tu_path(gt_dir, sizeof(gt_dir), root, "gt");
    tu_path(lq_dir, sizeof(lq_dir), root, "lq");
    tu_path(odd_dir, sizeof(odd_dir), root, "odd");
    if (mkdir(gt_dir, 0755) || mkdir(lq_dir, 0755) || mkdir(odd_dir, 0755)) return -1;
    duet_rng rng = duet_rng_make(77, 0);
    char p[400];
    for (int i = 0; i < NIMG; i++) {
        duet_image *gt = tu_random_image(&rng, SIZES[i][0], SIZES[i][1], 3), *lq = NULL;
        tu_path(p, sizeof(p), gt_dir, NAMES[i]);
        if (duet_image_save_png(gt, p) != DUET_OK) return -1;
        if (duet_image_resize(gt, 0.25, &lq) != DUET_OK) return -1;
        tu_path(p, sizeof(p), lq_dir, NAMES[i]);
        if (duet_image_save_png(lq, p) != DUET_OK) return -1;
        duet_image_destroy(gt);
        duet_image_destroy(lq);
    }
    /* Not images: ignored. */
    tu_path(p, sizeof(p), gt_dir, "notes.txt");
    tu_write_text(p, "not an image\n");
    /* A size that is not a multiple of the scale, for validation sets. */
    duet_image *odd = tu_random_image(&rng, 23, 30, 3);
    tu_path(p, sizeof(p), odd_dir, "odd.png");
    int rc = duet_image_save_png(odd, p);
    duet_image_destroy(odd);
    return rc == DUET_OK ? 0 : -1;
}

static int teardown_folders(void **state) {
    (void)state;
    return tu_rm_tree(root);
}

static duet_sr_dataset_opts opts_x4(int64_t gt_size, bool flips) {
    duet_sr_dataset_opts o = duet_sr_dataset_options_default();
    o.gt_dir = gt_dir;
    o.scale = 4;
    o.gt_size = gt_size;
    o.use_hflip = o.use_vflip = o.use_transpose = flips;
    return o;
}

static duet_image *load_named(const char *dir, const char *name) {
    char p[400];
    tu_path(p, sizeof(p), dir, name);
    duet_image *img = NULL;
    TU_OK(duet_image_load(p, &img));
    return img;
}

/* Whether t (3, h, w) equals the rectangle of img at (top, left). */
static bool crop_equals(const duet_tensor *t, const duet_image *img, int64_t top, int64_t left) {
    int64_t h = t->shape[1], w = t->shape[2];
    for (int64_t c = 0; c < 3; c++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                float want = img->data[((top + y) * img->width + left + x) * 3 + c] / 255.0f;
                if (t->data[(c * h + y) * w + x] != want) return false;
            }
    return true;
}

/* Finds where a (3, gs, gs) GT crop came from, searching corners that are
 * multiples of `step`. Fails when nowhere. */
static void find_crop(const duet_tensor *gt, const duet_image *img, int64_t step, int64_t *top,
                      int64_t *left) {
    int64_t gs = gt->shape[1];
    for (int64_t y = 0; y + gs <= img->height; y += step)
        for (int64_t x = 0; x + gs <= img->width; x += step)
            if (crop_equals(gt, img, y, x)) {
                *top = y;
                *left = x;
                return;
            }
    fail_msg("the GT crop is not an aligned crop of its image");
}

static void assert_tensor_equal(const duet_tensor *a, const duet_tensor *b, const char *what) {
    if (!duet_tensor_same_shape(a, b)) fail_msg("%s: shapes differ", what);
    tu_assert_close(a->data, b->data, a->numel, 0.0, 0.0, what);
}

static void test_train_crops_and_bicubic_lq(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(32, false);
    duet_dataset *ds = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    assert_int_equal(duet_dataset_size(ds), NIMG);
    assert_int_equal(duet_dataset_scale(ds), 4);
    const char *sorted[] = {"a.png", "b.png", "c.png", "d.png", "e.png"};
    for (int i = 0; i < NIMG; i++) assert_string_equal(duet_dataset_name(ds, i), sorted[i]);

    int tops_seen = 0;
    for (int64_t i = 0; i < NIMG; i++)
        for (int64_t epoch = 0; epoch < 3; epoch++) {
            duet_sample s;
            TU_OK(duet_dataset_get(ds, i, 5, epoch, &s));
            assert_string_equal(s.name, sorted[i]);
            assert_int_equal(s.index, i);
            assert_int_equal(s.gt->ndim, 3);
            assert_int_equal(s.gt->shape[0], 3);
            assert_int_equal(s.gt->shape[1], 32);
            assert_int_equal(s.gt->shape[2], 32);
            assert_int_equal(s.lq->shape[1], 8);
            assert_int_equal(s.lq->shape[2], 8);
            duet_image *img = load_named(gt_dir, s.name);
            int64_t top = -1, left = -1;
            find_crop(s.gt, img, 4, &top, &left);
            tops_seen |= 1 << (top / 4);
            /* LQ: the crop downscaled by MATLAB's bicubic, in 8 bits. */
            duet_image *crop = NULL, *small = NULL;
            TU_OK(duet_image_create(32, 32, 3, &crop));
            for (int64_t y = 0; y < 32; y++)
                memcpy(crop->data + y * 32 * 3, img->data + ((top + y) * img->width + left) * 3,
                       32 * 3);
            TU_OK(duet_image_resize(crop, 0.25, &small));
            for (int64_t c = 0; c < 3; c++)
                for (int64_t p = 0; p < 64; p++) {
                    float got = s.lq->data[c * 64 + p] * 255.0f;
                    assert_true(fabsf(got - nearbyintf(got)) < 1e-3f); /* 8-bit levels */
                    assert_true(fabsf(got - small->data[p * 3 + c]) <= 1.0f);
                }
            duet_image_destroy(crop);
            duet_image_destroy(small);
            duet_image_destroy(img);
            duet_sample_clear(&s);
        }
    assert_true(__builtin_popcount(tops_seen) >= 3); /* crops move around */
    duet_dataset_destroy(ds);
}

/* The eight flip/transpose combinations of a square (C, n, n) tensor. */
static float dihedral_at(const duet_tensor *t, int k, int64_t c, int64_t y, int64_t x) {
    int64_t n = t->shape[1];
    if (k & 4) { /* transposed last: out(y, x) = in'(x, y) */
        int64_t tmp = y;
        y = x;
        x = tmp;
    }
    if (k & 2) y = n - 1 - y; /* vflip */
    if (k & 1) x = n - 1 - x; /* hflip */
    return t->data[(c * n + y) * n + x];
}

static int which_dihedral(const duet_tensor *flipped, const duet_tensor *plain) {
    int64_t n = plain->shape[1];
    for (int k = 0; k < 8; k++) {
        bool ok = true;
        for (int64_t c = 0; c < 3 && ok; c++)
            for (int64_t y = 0; y < n && ok; y++)
                for (int64_t x = 0; x < n && ok; x++)
                    ok = flipped->data[(c * n + y) * n + x] == dihedral_at(plain, k, c, y, x);
        if (ok) return k;
    }
    return -1;
}

static void test_flips_apply_to_both(void **state) {
    (void)state;
    duet_sr_dataset_opts on = opts_x4(32, true), off = opts_x4(32, false);
    duet_dataset *a = NULL, *b = NULL;
    TU_OK(duet_sr_train_dataset_create(&on, &a));
    TU_OK(duet_sr_train_dataset_create(&off, &b));
    int counts[8] = {0};
    for (int64_t epoch = 0; epoch < 40; epoch++)
        for (int64_t i = 0; i < NIMG; i++) {
            duet_sample f, p;
            TU_OK(duet_dataset_get(a, i, 1, epoch, &f));
            TU_OK(duet_dataset_get(b, i, 1, epoch, &p));
            /* Same crop draws; the flips are a dihedral map of the plain
             * sample, the same one for GT and LQ. */
            int kg = which_dihedral(f.gt, p.gt), kl = which_dihedral(f.lq, p.lq);
            assert_true(kg >= 0);
            assert_int_equal(kg, kl);
            counts[kg]++;
            duet_sample_clear(&f);
            duet_sample_clear(&p);
        }
    /* 200 draws over 8 outcomes of p = 1/8 each. */
    for (int k = 0; k < 8; k++)
        if (counts[k] < 8 || counts[k] > 45) fail_msg("flip combination %d seen %d times", k, counts[k]);
    duet_dataset_destroy(a);
    duet_dataset_destroy(b);
}

static void test_determinism(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(24, true);
    duet_dataset *ds = NULL, *other = NULL, *lazy = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    TU_OK(duet_sr_train_dataset_create(&o, &other)); /* as another rank would */
    o.lazy = true;
    TU_OK(duet_sr_train_dataset_create(&o, &lazy));
    int differ_epoch = 0, differ_seed = 0;
    for (int64_t i = 0; i < NIMG; i++) {
        duet_sample s1, s2, s3, s4, s5;
        TU_OK(duet_dataset_get(ds, i, 9, 3, &s1));
        TU_OK(duet_dataset_get(other, i, 9, 3, &s2));
        TU_OK(duet_dataset_get(lazy, i, 9, 3, &s3));
        TU_OK(duet_dataset_get(ds, i, 9, 4, &s4));
        TU_OK(duet_dataset_get(ds, i, 10, 3, &s5));
        assert_tensor_equal(s1.gt, s2.gt, "gt, other instance");
        assert_tensor_equal(s1.lq, s2.lq, "lq, other instance");
        assert_tensor_equal(s1.gt, s3.gt, "gt, lazy");
        assert_tensor_equal(s1.lq, s3.lq, "lq, lazy");
        differ_epoch += memcmp(s1.gt->data, s4.gt->data, sizeof(float) * 3 * 24 * 24) != 0;
        differ_seed += memcmp(s1.gt->data, s5.gt->data, sizeof(float) * 3 * 24 * 24) != 0;
        duet_sample_clear(&s1);
        duet_sample_clear(&s2);
        duet_sample_clear(&s3);
        duet_sample_clear(&s4);
        duet_sample_clear(&s5);
    }
    assert_true(differ_epoch >= 3);
    assert_true(differ_seed >= 3);
    /* The stream depends on (epoch, index) both. */
    duet_rng r1 = duet_dataset_sample_rng(1, 0, 1), r2 = duet_dataset_sample_rng(1, 1, 0);
    assert_true(duet_rng_u64(&r1) != duet_rng_u64(&r2));
    duet_sample s;
    assert_int_equal(duet_dataset_get(ds, NIMG, 0, 0, &s), DUET_EINVAL);
    duet_dataset_destroy(ds);
    duet_dataset_destroy(other);
    duet_dataset_destroy(lazy);
}

static void test_repeat(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(32, true);
    duet_dataset *ds = NULL, *rep = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    TU_OK(duet_repeat_dataset_create(ds, 3, &rep));
    assert_int_equal(duet_dataset_size(rep), 3 * NIMG);
    assert_int_equal(duet_dataset_scale(rep), 4);
    int differ = 0;
    for (int64_t i = 0; i < NIMG; i++) {
        assert_string_equal(duet_dataset_name(rep, i + 2 * NIMG), duet_dataset_name(ds, i));
        duet_sample a, b, c;
        TU_OK(duet_dataset_get(rep, i, 2, 0, &a));
        TU_OK(duet_dataset_get(rep, i + NIMG, 2, 0, &b));
        TU_OK(duet_dataset_get(ds, i, 2, 0, &c));
        assert_string_equal(a.name, b.name);
        assert_int_equal(b.index, i + NIMG);
        /* Index i of the repeat is index i of the inner set, randomness
         * included; its repeat i + n draws its own crop. */
        assert_tensor_equal(a.gt, c.gt, "repeat index i vs inner index i");
        differ += memcmp(a.gt->data, b.gt->data, sizeof(float) * 3 * 32 * 32) != 0;
        duet_sample_clear(&a);
        duet_sample_clear(&b);
        duet_sample_clear(&c);
    }
    assert_true(differ >= 3);
    duet_dataset_destroy(rep); /* frees ds */
    assert_int_equal(duet_repeat_dataset_create(NULL, 2, &rep), DUET_EINVAL);
}

static void test_paired_folders(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(16, false);
    o.lq_dir = lq_dir;
    duet_dataset *ds = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    for (int64_t i = 0; i < NIMG; i++) {
        duet_sample s;
        TU_OK(duet_dataset_get(ds, i, 3, 1, &s));
        duet_image *gt = load_named(gt_dir, s.name), *lq = load_named(lq_dir, s.name);
        int64_t top = -1, left = -1;
        find_crop(s.gt, gt, 4, &top, &left);
        assert_int_equal(s.lq->shape[1], 4);
        /* The LQ crop is the LQ file's rectangle at the GT corner / scale. */
        assert_true(crop_equals(s.lq, lq, top / 4, left / 4));
        duet_image_destroy(gt);
        duet_image_destroy(lq);
        duet_sample_clear(&s);
    }
    duet_dataset_destroy(ds);

    /* Validation, paired: the LQ file whole. */
    TU_OK(duet_sr_val_dataset_create(&o, &ds));
    duet_sample s;
    TU_OK(duet_dataset_get(ds, 3, 0, 0, &s)); /* d.png, 52x40 */
    assert_string_equal(s.name, "d.png");
    assert_int_equal(s.lq->shape[1], 13);
    assert_int_equal(s.lq->shape[2], 10);
    assert_int_equal(s.gt->shape[1], 52);
    duet_image *lq = load_named(lq_dir, "d.png");
    assert_true(crop_equals(s.lq, lq, 0, 0));
    duet_image_destroy(lq);
    duet_sample_clear(&s);
    duet_dataset_destroy(ds);
}

static void test_validation_whole_images(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(0, true);
    o.gt_dir = odd_dir; /* 23 x 30 */
    duet_dataset *ds = NULL;
    TU_OK(duet_sr_val_dataset_create(&o, &ds));
    assert_int_equal(duet_dataset_size(ds), 1);
    duet_sample s, s2;
    TU_OK(duet_dataset_get(ds, 0, 1, 0, &s));
    TU_OK(duet_dataset_get(ds, 0, 2, 7, &s2)); /* no randomness */
    assert_string_equal(s.name, "odd.png");
    assert_int_equal(s.gt->shape[1], 20); /* cropped to multiples of 4 */
    assert_int_equal(s.gt->shape[2], 28);
    assert_int_equal(s.lq->shape[1], 5);
    assert_int_equal(s.lq->shape[2], 7);
    duet_image *img = load_named(odd_dir, "odd.png");
    assert_true(crop_equals(s.gt, img, 0, 0));
    assert_tensor_equal(s.gt, s2.gt, "val gt");
    assert_tensor_equal(s.lq, s2.lq, "val lq");
    /* LQ = the cropped GT downscaled (8-bit rounding aside). */
    duet_tensor *small = NULL;
    TU_OK(duet_imresize_tensor(s.gt, 0.25, &small));
    tu_assert_close(s.lq->data, small->data, small->numel, 0.0, 0.5 / 255 + 1e-6, "val lq");
    duet_tensor_release(small);
    duet_image_destroy(img);
    duet_sample_clear(&s);
    duet_sample_clear(&s2);
    duet_dataset_destroy(ds);
}

static void test_dataset_errors(void **state) {
    (void)state;
    duet_dataset *ds = NULL;
    char dir[400], p[500];

    duet_sr_dataset_opts o = opts_x4(32, true);
    tu_path(dir, sizeof(dir), root, "empty");
    assert_int_equal(mkdir(dir, 0755), 0);
    o.gt_dir = dir;
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), dir));
    o.gt_dir = "/nonexistent/duet/folder";
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_ENOTFOUND);

    /* crop larger than an image: names the file */
    o = opts_x4(40, true);
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "a.png")); /* 36 x 36 */
    o.gt_size = 30; /* not a multiple of 4 */
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_EINVAL);

    /* a GT without its LQ */
    o = opts_x4(16, true);
    o.lq_dir = odd_dir;
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "a.png"));

    /* a paired LQ of the wrong size: GT as its own LQ */
    o.gt_dir = lq_dir;
    o.lq_dir = lq_dir;
    o.gt_size = 8;
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_ESHAPE);

    /* a corrupt image: at creation when eager... */
    tu_path(dir, sizeof(dir), root, "corrupt");
    noise_pngs(dir, 2, 5);
    snprintf(p, sizeof(p), "%s/1.png", dir);
    assert_int_equal(truncate(p, 60), 0);
    o = opts_x4(8, true);
    o.gt_dir = dir;
    assert_int_equal(duet_sr_train_dataset_create(&o, &ds), DUET_EFORMAT);
    assert_non_null(strstr(duet_last_error(), p));
    /* ...and when lazy, on access only. */
    o.lazy = true;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    duet_sample s;
    TU_OK(duet_dataset_get(ds, 0, 0, 0, &s));
    duet_sample_clear(&s);
    assert_int_equal(duet_dataset_get(ds, 1, 0, 0, &s), DUET_EFORMAT);
    assert_non_null(strstr(duet_last_error(), p));
    assert_null(s.gt);
    duet_dataset_destroy(ds);
}

/* ---- loader ------------------------------------------------------------------------- */

static duet_dataset *repeat_set(int64_t gt_size, bool lazy, const char *dir, int64_t times) {
    duet_sr_dataset_opts o = opts_x4(gt_size, true);
    o.lazy = lazy;
    if (dir) o.gt_dir = dir;
    duet_dataset *ds = NULL, *rep = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    TU_OK(duet_repeat_dataset_create(ds, times, &rep));
    return rep;
}

static void assert_batch_equal(const duet_data_batch *a, const duet_data_batch *b) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->epoch, b->epoch);
    assert_memory_equal(a->indices, b->indices, sizeof(int64_t) * (size_t)a->n);
    for (int64_t i = 0; i < a->n; i++) assert_string_equal(duet_batch_meta_get(&a->batch, "gt_path", i), duet_batch_meta_get(&b->batch, "gt_path", i));
    assert_tensor_equal(duet_batch_tensor_get(&a->batch, "lq"), duet_batch_tensor_get(&b->batch, "lq"), "batch lq");
    assert_tensor_equal(duet_batch_tensor_get(&a->batch, "gt"), duet_batch_tensor_get(&b->batch, "gt"), "batch gt");
}

static void test_loader_prefetch_matches_sync(void **state) {
    (void)state;
    duet_dataset *ds = repeat_set(16, false, NULL, 2); /* 10 samples */
    duet_loader_opts lo = duet_loader_options_default();
    lo.samples_per_gpu = 3;
    lo.world_size = 2;
    lo.rank = 1;
    lo.seed = 21;
    lo.prefetch = 0;
    duet_loader *sync = NULL, *pre = NULL;
    TU_OK(duet_loader_create(ds, &lo, &sync));
    lo.prefetch = 3;
    TU_OK(duet_loader_create(ds, &lo, &pre));
    /* ceil(10 / 2 / 3) = 2 batches per epoch: 7 batches cross 3 epochs. */
    assert_int_equal(duet_loader_batches_per_epoch(sync), 2);
    duet_sampler *sampler = NULL;
    TU_OK(duet_sampler_create(10, 2, 1, 3, 21, true, &sampler));
    for (int k = 0; k < 7; k++) {
        duet_data_batch *a = NULL, *b = NULL;
        TU_OK(duet_loader_next(sync, &a));
        TU_OK(duet_loader_next(pre, &b));
        assert_non_null(a);
        assert_non_null(b);
        assert_batch_equal(a, b);
        assert_int_equal(duet_batch_tensor_get(&a->batch, "lq")->ndim, 4);
        assert_int_equal(duet_batch_tensor_get(&a->batch, "lq")->shape[0], 3);
        assert_int_equal(duet_batch_tensor_get(&a->batch, "lq")->shape[1], 3);
        assert_int_equal(duet_batch_tensor_get(&a->batch, "lq")->shape[2], 4);
        assert_int_equal(duet_batch_tensor_get(&a->batch, "gt")->shape[3], 16);
        assert_true(b->data_time >= 0.0);
        /* The batch is the sampler's indices, each sample as the dataset
         * gives it for that epoch. */
        int64_t idx[3], epoch;
        duet_sampler_next_batch(sampler, idx, &epoch);
        assert_int_equal(a->epoch, epoch);
        assert_int_equal(a->epoch, k / 2);
        assert_memory_equal(a->indices, idx, sizeof(idx));
        for (int64_t i = 0; i < 3; i++) {
            duet_sample s;
            TU_OK(duet_dataset_get(ds, idx[i], 21, epoch, &s));
            tu_assert_close(duet_batch_tensor_get(&a->batch, "gt")->data + i * s.gt->numel, s.gt->data, s.gt->numel, 0, 0, "gt");
            tu_assert_close(duet_batch_tensor_get(&a->batch, "lq")->data + i * s.lq->numel, s.lq->data, s.lq->numel, 0, 0, "lq");
            assert_string_equal(duet_batch_meta_get(&a->batch, "gt_path", i), s.name);
            duet_sample_clear(&s);
        }
        duet_data_batch_destroy(a);
        duet_data_batch_destroy(b);
    }
    duet_sampler_state st = duet_loader_get_state(pre);
    assert_int_equal(st.epoch, 3);
    assert_int_equal(st.position, 3);
    duet_sampler_destroy(sampler);
    duet_loader_destroy(sync);
    duet_loader_destroy(pre); /* with batches still queued */
    duet_dataset_destroy(ds);
}

static void test_loader_resume(void **state) {
    (void)state;
    duet_dataset *ds = repeat_set(16, false, NULL, 2);
    duet_loader_opts lo = duet_loader_options_default();
    lo.samples_per_gpu = 2;
    lo.seed = 4;
    lo.prefetch = 2;
    duet_loader *l = NULL;
    TU_OK(duet_loader_create(ds, &lo, &l));
    duet_data_batch *ref[9];
    duet_sampler_state after4 = {0, 0};
    for (int k = 0; k < 9; k++) {
        TU_OK(duet_loader_next(l, &ref[k]));
        if (k == 3) after4 = duet_loader_get_state(l);
    }
    assert_int_equal(after4.epoch, 0);
    assert_int_equal(after4.position, 8);
    /* A fresh loader from the saved state continues with batch 4. */
    lo.start = after4;
    duet_loader *r = NULL;
    TU_OK(duet_loader_create(ds, &lo, &r));
    for (int k = 4; k < 9; k++) {
        duet_data_batch *b = NULL;
        TU_OK(duet_loader_next(r, &b));
        assert_batch_equal(b, ref[k]);
        duet_data_batch_destroy(b);
    }
    /* set_state rewinds a running loader (prefetched batches dropped). */
    TU_OK(duet_loader_set_state(r, (duet_sampler_state){0, 2}));
    duet_data_batch *b = NULL;
    TU_OK(duet_loader_next(r, &b));
    assert_batch_equal(b, ref[1]);
    duet_data_batch_destroy(b);
    assert_int_equal(duet_loader_set_state(r, (duet_sampler_state){0, 3}), DUET_EINVAL);
    for (int k = 0; k < 9; k++) duet_data_batch_destroy(ref[k]);
    duet_loader_destroy(r);
    duet_loader_destroy(l);
    duet_dataset_destroy(ds);
}

static void test_loader_one_epoch_validation(void **state) {
    (void)state;
    duet_sr_dataset_opts o = opts_x4(0, false);
    duet_dataset *ds = NULL;
    TU_OK(duet_sr_val_dataset_create(&o, &ds));
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        duet_loader_opts lo = duet_loader_options_default();
        lo.shuffle = false;
        lo.one_epoch = true;
        lo.prefetch = prefetch;
        duet_loader *l = NULL;
        TU_OK(duet_loader_create(ds, &lo, &l));
        const char *sorted[] = {"a.png", "b.png", "c.png", "d.png", "e.png"};
        for (int k = 0; k < NIMG; k++) {
            duet_data_batch *b = NULL;
            TU_OK(duet_loader_next(l, &b));
            assert_non_null(b);
            assert_int_equal(b->n, 1);
            assert_string_equal(duet_batch_meta_get(&b->batch, "gt_path", 0), sorted[k]);
            assert_int_equal(b->indices[0], k);
            duet_data_batch_destroy(b);
        }
        duet_data_batch *end = (duet_data_batch *)1;
        TU_OK(duet_loader_next(l, &end));
        assert_null(end);
        TU_OK(duet_loader_next(l, &end));
        assert_null(end);
        duet_loader_destroy(l);
    }
    /* Whole images of different sizes do not stack. */
    duet_loader_opts lo = duet_loader_options_default();
    lo.shuffle = false;
    lo.samples_per_gpu = 2;
    lo.prefetch = 0;
    duet_loader *l = NULL;
    TU_OK(duet_loader_create(ds, &lo, &l));
    duet_data_batch *b = NULL;
    assert_int_equal(duet_loader_next(l, &b), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "samples_per_gpu 1"));
    duet_loader_destroy(l);
    /* Too small a set for the world size. */
    lo.world_size = 3;
    assert_int_equal(duet_loader_create(ds, &lo, &l), DUET_ESHAPE);
    assert_null(l);
    duet_dataset_destroy(ds);
}

static void test_loader_thread_error(void **state) {
    (void)state;
    char dir[400], p[500];
    tu_path(dir, sizeof(dir), root, "lazy");
    noise_pngs(dir, 4, 6);
    duet_dataset *ds = repeat_set(8, true, dir, 1);
    /* Broken after the dataset was made: only the loader sees it. */
    snprintf(p, sizeof(p), "%s/2.png", dir);
    assert_int_equal(truncate(p, 50), 0);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        duet_loader_opts lo = duet_loader_options_default();
        lo.shuffle = false;
        lo.prefetch = prefetch;
        duet_loader *l = NULL;
        TU_OK(duet_loader_create(ds, &lo, &l));
        duet_data_batch *b = NULL;
        TU_OK(duet_loader_next(l, &b)); /* 0.png and 1.png are fine */
        duet_data_batch_destroy(b);
        TU_OK(duet_loader_next(l, &b));
        duet_data_batch_destroy(b);
        int rc = duet_loader_next(l, &b);
        assert_int_equal(rc, DUET_EFORMAT);
        assert_null(b);
        if (strstr(duet_last_error(), p) == NULL)
            fail_msg("error does not name %s: %s", p, duet_last_error());
        assert_int_equal(duet_loader_next(l, &b), DUET_ESTATE);
        /* Skipping past the broken file recovers. */
        TU_OK(duet_loader_set_state(l, (duet_sampler_state){0, 3}));
        TU_OK(duet_loader_next(l, &b));
        assert_string_equal(duet_batch_meta_get(&b->batch, "gt_path", 0), "3.png");
        duet_data_batch_destroy(b);
        duet_loader_destroy(l);
    }
    duet_dataset_destroy(ds);
}

/* MMEditing's LMDB layout written from the paired folders and read back:
 * meta_info.txt lines, PNG bytes that decode to the files' pixels, and the
 * same samples as the folders (lazy or not); a missing key and a damaged
 * LMDB are errors naming them. */
static void test_lmdb_matches_folders(void **state) {
    (void)state;
    char gl[300], ll[300], p[400];
    tu_path(gl, sizeof(gl), root, "gt.lmdb");
    tu_path(ll, sizeof(ll), root, "lq.lmdb");
    duet_lmdb_opts lo = {.compression_level = 1, .threads = 2};
    int64_t n = 0;
    TU_OK(duet_lmdb_write_folder(gt_dir, gl, &lo, &n));
    assert_int_equal(n, NIMG);
    TU_OK(duet_lmdb_write_folder(lq_dir, ll, &lo, &n));
    assert_int_equal(duet_lmdb_write_folder(lq_dir, ll, &lo, &n), DUET_ESTATE); /* exists */
    char bad[300];
    tu_path(bad, sizeof(bad), root, "x.db");
    assert_int_equal(duet_lmdb_write_folder(lq_dir, bad, &lo, &n), DUET_EINVAL);
    tu_path(p, sizeof(p), gl, "meta_info.txt");
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[128];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "a.png (36,36,3) 1\n"); /* sorted; notes.txt is no image */
    fclose(f);

    duet_sr_dataset_opts fo = opts_x4(16, true);
    fo.lq_dir = lq_dir;
    duet_sr_dataset_opts lmo = fo;
    lmo.gt_dir = gl;
    lmo.lq_dir = ll;
    lmo.lmdb = true;
    duet_dataset *folders = NULL;
    TU_OK(duet_sr_train_dataset_create(&fo, &folders));
    for (int lazy = 0; lazy < 2; lazy++) {
        lmo.lazy = lazy;
        duet_dataset *db = NULL;
        TU_OK(duet_sr_train_dataset_create(&lmo, &db));
        assert_int_equal(duet_dataset_size(db), NIMG);
        for (int64_t i = 0; i < NIMG; i++) {
            duet_sample a, b;
            TU_OK(duet_dataset_get(folders, i, 9, 1, &a));
            TU_OK(duet_dataset_get(db, i, 9, 1, &b));
            assert_string_equal(a.name, b.name);
            assert_memory_equal(a.gt->data, b.gt->data, sizeof(float) * (size_t)a.gt->numel);
            assert_memory_equal(a.lq->data, b.lq->data, sizeof(float) * (size_t)a.lq->numel);
            duet_sample_clear(&a);
            duet_sample_clear(&b);
        }
        duet_dataset_destroy(db);
    }
    duet_dataset_destroy(folders);

    /* A key meta_info.txt lists but the LMDB lacks. */
    f = fopen(p, "a");
    assert_non_null(f);
    fputs("zz.png (40,40,3) 1\n", f);
    fclose(f);
    duet_dataset *db = NULL;
    lmo.lazy = true;
    assert_int_equal(duet_sr_train_dataset_create(&lmo, &db), DUET_ENOTFOUND);
    if (strstr(duet_last_error(), "has no key \"zz\"") == NULL ||
        strstr(duet_last_error(), "entry 6") == NULL)
        fail_msg("missing key: %s", duet_last_error());
    /* Not an LMDB. */
    char dmg[300];
    tu_path(dmg, sizeof(dmg), root, "damaged.lmdb");
    assert_int_equal(mkdir(dmg, 0755), 0);
    tu_path(p, sizeof(p), dmg, "data.mdb");
    tu_write_text(p, "this is not an LMDB file, only some text standing where one should be\n");
    lmo.gt_dir = dmg;
    assert_int_equal(duet_sr_train_dataset_create(&lmo, &db), DUET_EFORMAT);
    if (strstr(duet_last_error(), dmg) == NULL) fail_msg("damaged: %s", duet_last_error());
    /* An LQ LMDB is required. */
    lmo.gt_dir = gl;
    lmo.lq_dir = NULL;
    assert_int_equal(duet_sr_train_dataset_create(&lmo, &db), DUET_EINVAL);
}

/* duet_image_encode_png: bytes that decode to the same pixels. */
static void test_encode_png(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_image *img = tu_random_image(&rng, 13, 17, 3), *back = NULL;
    for (int level = 0; level <= 9; level += 9) {
        uint8_t *bytes = NULL;
        size_t nb = 0;
        TU_OK(duet_image_encode_png(img, level, "x", &bytes, &nb));
        TU_OK(duet_image_decode(bytes, nb, "x", &back));
        assert_int_equal(back->width, 17);
        assert_int_equal(back->height, 13);
        assert_memory_equal(back->data, img->data, 13 * 17 * 3);
        duet_image_destroy(back);
        free(bytes);
    }
    uint8_t *bytes = NULL;
    size_t nb = 0;
    assert_int_equal(duet_image_encode_png(img, 10, "x", &bytes, &nb), DUET_EINVAL);
    duet_image_destroy(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_crops_and_bicubic_lq),
        cmocka_unit_test(test_flips_apply_to_both),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_repeat),
        cmocka_unit_test(test_paired_folders),
        cmocka_unit_test(test_validation_whole_images),
        cmocka_unit_test(test_dataset_errors),
        cmocka_unit_test(test_loader_prefetch_matches_sync),
        cmocka_unit_test(test_loader_resume),
        cmocka_unit_test(test_loader_one_epoch_validation),
        cmocka_unit_test(test_loader_thread_error),
        cmocka_unit_test(test_lmdb_matches_folders),
        cmocka_unit_test(test_encode_png),
    };
    return cmocka_run_group_tests(tests, setup_folders, teardown_folders);
}
