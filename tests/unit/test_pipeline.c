/* The pipeline engine's table test (white-box: src/data/pipeline.h): every
 * transform row is in the table below, and each is read from a pipeline
 * list, applied on a small keyed sample, checked to change the sample (the
 * steps that change values), to give the same values for the same sample
 * rng and (random rows) other values for other rngs, and to refuse a bad
 * key with its line. A row missing from the table fails the count check. */
#include <string.h>

#include "data/pipeline.h"
#include "testutil.h"

enum spec_kind { UNPAIRED, PAIRED, SR, INPAINT };

typedef struct row {
    const char *name;
    enum spec_kind spec;
    const char *setup; /* entries before the row */
    const char *entry; /* the row */
    bool changes;      /* the sample differs from the setup's alone */
    const char *bad;   /* the row with a bad key or value */
    const char *bad_word; /* in the refusal */
} row;

#define LOAD_U "{ type = \"LoadImageFromFile\"; key = \"img_a\"; },\n" \
               "{ type = \"LoadImageFromFile\"; key = \"img_b\"; },\n"
#define LOAD_S "{ type = \"LoadImageFromFile\"; key = \"gt\"; channel_order = \"rgb\"; },\n" \
               "{ type = \"LoadImageFromFile\"; key = \"lq\"; channel_order = \"rgb\"; },\n"
#define LOAD_I "{ type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
#define MASK_ENTRY "{ type = \"LoadMask\"; mask_mode = \"bbox\"; mask_config = {\n" \
    "  img_shape = [16, 16]; max_bbox_shape = [8, 8]; max_bbox_delta = 2; min_margin = 1; }; }"
#define MASK MASK_ENTRY ",\n"
#define AB "keys = [\"img_a\", \"img_b\"];"

static const row rows[] = {
    {"LoadImageFromFile", UNPAIRED, "", "{ type = \"LoadImageFromFile\"; key = \"img_a\"; }",
     true, "{ type = \"LoadImageFromFile\"; key = \"img_c\"; }", "img_c"},
    {"LoadPairedImageFromFile", PAIRED, "", "{ type = \"LoadPairedImageFromFile\"; key = \"pair\"; }",
     true, "{ type = \"LoadPairedImageFromFile\"; key = \"img_a\"; }", "pair"},
    {"LoadMask", INPAINT, LOAD_I, MASK_ENTRY, true,
     "{ type = \"LoadMask\"; mask_mode = \"blob\"; }", "mask_mode"},
    {"Resize", UNPAIRED, LOAD_U,
     "{ type = \"Resize\"; " AB " scale = [12, 8]; interpolation = \"bicubic\"; }", true,
     "{ type = \"Resize\"; " AB " scale = [12, 8]; keep_ratio = true; }", "keep_ratio"},
    {"Crop", UNPAIRED, LOAD_U, "{ type = \"Crop\"; " AB " crop_size = [8, 8]; }", true,
     "{ type = \"Crop\"; " AB " crop_sise = [8, 8]; }", "crop_size"},
    {"FixedCrop", UNPAIRED, LOAD_U, "{ type = \"FixedCrop\"; " AB " crop_size = [8, 8]; }", true,
     "{ type = \"FixedCrop\"; " AB " crop_size = 8; }", "crop_size"},
    {"PairedRandomCrop", SR, LOAD_S, "{ type = \"PairedRandomCrop\"; gt_patch_size = 8; }", true,
     "{ type = \"PairedRandomCrop\"; gt_patch_size = 7; }", "gt_patch_size"},
    {"Flip", UNPAIRED, LOAD_U, "{ type = \"Flip\"; " AB " flip_ratio = 0.5; direction = \"vertical\"; }",
     true, "{ type = \"Flip\"; " AB " flip_ratio = 1.5; }", "flip_ratio"},
    {"RandomTransposeHW", UNPAIRED, LOAD_U,
     "{ type = \"RandomTransposeHW\"; " AB " transpose_ratio = 0.5; }", true,
     "{ type = \"RandomTransposeHW\"; " AB " transpose_ration = 0.5; }", "transpose_ration"},
    {"RescaleToZeroOne", UNPAIRED, LOAD_U, "{ type = \"RescaleToZeroOne\"; " AB " }", true,
     "{ type = \"RescaleToZeroOne\"; keys = [\"img_c\"]; }", "img_c"},
    {"Normalize", UNPAIRED, LOAD_U,
     "{ type = \"Normalize\"; " AB " mean = [127.5, 100.0, 90.0]; std = [127.5, 60.0, 50.0]; to_rgb = true; }",
     true, "{ type = \"Normalize\"; " AB " mean = [0.0, 0.0, 0.0]; std = [1.0, 0.0, 1.0]; }", "std"},
    {"GetMaskedImage", INPAINT, LOAD_I MASK, "{ type = \"GetMaskedImage\"; }", true,
     "{ type = \"GetMaskedImage\"; img_name = \"img\"; }", "img"},
    {"ImageToTensor", UNPAIRED, LOAD_U, "{ type = \"ImageToTensor\"; " AB " }", false,
     "{ type = \"ImageToTensor\"; " AB " to_float16 = true; }", "to_float16"},
    {"ToTensor", INPAINT, LOAD_I MASK, "{ type = \"ToTensor\"; keys = [\"mask_bbox\"]; }", false,
     "{ type = \"ToTensor\"; keys = [\"bbox\"]; }", "bbox"},
    {"Collect", UNPAIRED, LOAD_U "{ type = \"ImageToTensor\"; " AB " },\n",
     "{ type = \"Collect\"; " AB " meta_keys = [\"img_a_path\"]; }", false,
     "{ type = \"Collect\"; " AB " meta_keys = [\"img_a_name\"]; }", "meta_keys"},
};
#define NROWS (sizeof rows / sizeof rows[0])

static duet_pipeline_spec spec_of(enum spec_kind k) {
    duet_pipeline_spec s = {.dataset = "test"};
    switch (k) {
    case UNPAIRED: s.path_keys[0] = "img_a", s.path_keys[1] = "img_b"; break;
    case PAIRED: s.pair_key = "pair"; break;
    case SR: s.path_keys[0] = "gt", s.path_keys[1] = "lq", s.scale = 2; break;
    case INPAINT: s.path_keys[0] = "gt_img", s.optional_key = "mask_bbox"; break;
    }
    return s;
}

/* The images of the test: 16x16 (gt_img, img_a, img_b, gt), 8x8 (lq), a
 * 16x32 pair; fixed random pixels, lent to the sample. */
static duet_image *images[3];

static int test_load(void *ctx, const char *key, const char *path, duet_image **img,
                     bool *borrowed) {
    (void)ctx;
    *borrowed = true;
    *img = strcmp(key, "lq") == 0 ? images[1] : strcmp(path, "pair.png") == 0 ? images[2]
                                                                             : images[0];
    return DUET_OK;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Runs p on a sample of rng (seed, 1); the hash of every entry's key, size
 * and values. */
static uint64_t run(const duet_pipeline *p, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 1);
    duet__pipe_io io = {.load = test_load};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = &rng;
    s.io = &io;
    s.paths[0] = p->spec.pair_key ? "pair.png" : "a.png";
    s.paths[1] = "b.png";
    TU_OK(duet__pipeline_run(p, &s));
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < s.n; i++) {
        duet__pentry *e = &s.e[i];
        h = fnv(h, e->key, strlen(e->key));
        if (!e->is_image) {
            h = fnv(h, e->ints, sizeof(int64_t) * (size_t)e->nints);
            continue;
        }
        TU_OK(duet__pimage_to_float(&e->im, e->key));
        int64_t dims[3] = {e->im.h, e->im.w, e->im.c};
        h = fnv(h, dims, sizeof dims);
        h = fnv(h, e->im.f, sizeof(float) * (size_t)(e->im.h * e->im.w * e->im.c));
    }
    duet__psample_clear(&s);
    return h;
}

static duet_pipeline *parse(const row *r, bool with_row, const char *entry) {
    char text[4096];
    snprintf(text, sizeof text, "( %s%s )", r->setup, with_row ? entry : "");
    if (!with_row) { /* the setup alone: drop its trailing comma */
        size_t n = strlen(text);
        char *comma = strrchr(text, ',');
        if (comma != NULL && strspn(comma + 1, " \n)") == (size_t)(text + n - comma - 1))
            *comma = ' ';
    }
    duet_pipeline_spec spec = spec_of(r->spec);
    duet_pipeline *p = NULL;
    int rc = duet_pipeline_parse(text, "<row>", &spec, &p);
    if (rc != DUET_OK) fail_msg("%s: %s", r->name, duet_last_error());
    return p;
}

static void test_every_row(void **state) {
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        duet_pipeline *p = parse(r, true, r->entry);
        size_t n = duet_pipeline_length(p);
        assert_string_equal(duet_pipeline_step_type(p, n - 1), r->name);
        const duet__step *st = &p->steps[n - 1];
        /* the same sample rng, the same values */
        uint64_t h0 = run(p, 7);
        assert_true(run(p, 7) == h0);
        /* a random row draws: another rng gives another sample (of 8) */
        if (st->t->random) {
            bool other = false;
            for (uint64_t seed = 100; seed < 108; seed++) other |= run(p, seed) != h0;
            if (!other) fail_msg("%s: the same sample for 8 rngs", r->name);
        }
        /* the row does what it says to the sample */
        if (r->setup[0] != '\0') {
            duet_pipeline *q = parse(r, false, NULL);
            bool differs = false;
            for (uint64_t seed = 7; seed < 15; seed++) differs |= run(q, seed) != run(p, seed);
            if (differs != r->changes)
                fail_msg("%s: %s the sample", r->name, r->changes ? "does not change" : "changes");
            duet_pipeline_destroy(q);
        }
        duet_pipeline_destroy(p);
        /* a bad key or value: refused, naming it and its line */
        char text[4096];
        snprintf(text, sizeof text, "( %s%s )", r->setup, r->bad);
        duet_pipeline_spec spec = spec_of(r->spec);
        p = NULL;
        int rc = duet_pipeline_parse(text, "<row>", &spec, &p);
        if (rc == DUET_OK) fail_msg("%s: accepted %s", r->name, r->bad);
        assert_null(p);
        if (strstr(duet_last_error(), r->bad_word) == NULL ||
            strstr(duet_last_error(), "<row>:") == NULL)
            fail_msg("%s: the refusal \"%s\" does not name '%s' and its line", r->name,
                     duet_last_error(), r->bad_word);
    }
}

/* Every row of the engine's table is tested here, and no other name. */
static void test_count(void **state) {
    (void)state;
    const char *const *names = duet_pipeline_transform_names();
    size_t n = 0;
    for (; names[n] != NULL; n++) {
        bool found = false;
        for (size_t i = 0; i < NROWS; i++) found |= strcmp(rows[i].name, names[n]) == 0;
        if (!found) fail_msg("transform %s has no row in test_pipeline's table", names[n]);
    }
    assert_int_equal(n, NROWS);
}

/* An unknown transform is refused by name, with the closest one and the list. */
static void test_unknown(void **state) {
    (void)state;
    duet_pipeline_spec spec = spec_of(UNPAIRED);
    duet_pipeline *p = NULL;
    tu_expect_error(duet_pipeline_parse("( " LOAD_U "{ type = \"Flipp\"; " AB " } )", "<u>",
                                        &spec, &p),
                    DUET_ECONFIG, "<u>:3", "\"Flipp\"", "did you mean 'Flip'",
                    "RandomTransposeHW", NULL);
    assert_null(p);
}

int main(void) {
    duet_rng r = duet_rng_make(3, 0);
    images[0] = tu_random_image(&r, 16, 16, 3);
    images[1] = tu_random_image(&r, 8, 8, 3);
    images[2] = tu_random_image(&r, 16, 32, 3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_every_row),
        cmocka_unit_test(test_unknown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < 3; i++) duet_image_destroy(images[i]);
    return rc;
}
