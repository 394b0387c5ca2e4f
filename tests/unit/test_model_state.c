/* Model-specific state in checkpoints through the save_state / load_state
 * hooks of duet_model_ops: metadata and "state." tensors are written,
 * restored on resume, and never taken for weights; SRGAN keeps its step
 * counter this way. test / infer require the weights of the parts the
 * model evaluates with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "duet/duet.h"
#include "testutil.h"

/* A model with one linear part and a state of its own: a counter
 * (metadata) and a small pool of tensors (a "state." tensor). */
typedef struct pooled {
    int64_t counter;
    duet_tensor *pool; /* (4, 2) */
} pooled;

static void pooled_destroy(void *p) {
    pooled *s = p;
    duet_tensor_release(s->pool);
    free(s);
}

static int pooled_save(duet_model *m, duet_st_writer *w) {
    pooled *s = duet_model_impl(m);
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)s->counter);
    DUET_TRY(duet_st_writer_set_meta(w, "pooled_counter", v));
    return duet_st_writer_add(w, DUET_MODEL_STATE_PREFIX "pool", s->pool);
}

static int pooled_load(duet_model *m, const duet_st *ck) {
    pooled *s = duet_model_impl(m);
    const char *v = duet_st_meta(ck, "pooled_counter");
    if (v == NULL) return duet__error(DUET_ENOTFOUND, "no 'pooled_counter'");
    s->counter = atoll(v);
    return duet_st_copy_into(ck, DUET_MODEL_STATE_PREFIX "pool", s->pool);
}

static const duet_model_ops pooled_ops = {
    .name = "Pooled",
    .destroy = pooled_destroy,
    .save_state = pooled_save,
    .load_state = pooled_load,
};
static const duet_module_type pooled_root = {"Pooled", NULL, NULL};

static duet_model *pooled_model_named(const char *part, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    pooled *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->pool = tu_rand(&rng, 2, (int64_t[]){4, 2}, -1, 1);
    duet_module *root = NULL, *lin = NULL;
    TU_OK(duet_module_create(&pooled_root, NULL, &root));
    TU_OK(duet_linear_module_create(2, 3, true, &rng, &lin));
    TU_OK(duet_module_add_child(root, part, lin));
    duet_model *m = NULL;
    TU_OK(duet_model_create(&pooled_ops, s, root, &m));
    return m;
}

static duet_model *pooled_model(uint64_t seed) { return pooled_model_named("generator", seed); }

static void test_hooks_round_trip(void **state) {
    const char *dir = *state;
    char path[512];
    tu_path(path, sizeof path, dir, "ck.safetensors");
    duet_model *a = pooled_model(1), *b = pooled_model(2);
    ((pooled *)duet_model_impl(a))->counter = 41;
    duet_meta_item meta[] = {{"iter", "5"}};
    TU_OK(duet_checkpoint_save_model(path, a, NULL, 0, meta, 1));

    /* Resume (strict weights): the "state." tensor is not an unexpected
     * weight, and the hook restores counter and pool. */
    duet_st *ck = NULL;
    TU_OK(duet_checkpoint_resume_model(path, b, NULL, 0, &ck));
    assert_string_equal(duet_st_meta(ck, "iter"), "5");
    duet_st_destroy(ck);
    pooled *sa = duet_model_impl(a), *sb = duet_model_impl(b);
    assert_int_equal(sb->counter, 41);
    assert_memory_equal(sb->pool->data, sa->pool->data, sizeof(float) * 8);
    tu_assert_same_state(duet_model_module(a), duet_model_module(b), true);

    /* load_from (non-strict) sees no unexpected key either. */
    size_t nmissing = 9, nunexpected = 9;
    TU_OK(duet_checkpoint_load_weights(path, duet_model_module(b), false, NULL, &nmissing,
                                       &nunexpected));
    assert_int_equal(nmissing, 0);
    assert_int_equal(nunexpected, 0);

    /* A checkpoint without the model's state cannot be resumed into it. */
    tu_path(path, sizeof path, dir, "plain.safetensors");
    TU_OK(duet_checkpoint_save(path, duet_model_module(a), NULL, 0, meta, 1));
    tu_expect_error(duet_checkpoint_resume_model(path, b, NULL, 0, NULL), DUET_ENOTFOUND,
                    "Pooled.load_state", "pooled_counter", NULL);
    duet_model_destroy(a);
    duet_model_destroy(b);
}

/* SRGAN's step counter travels in the checkpoint through its hooks. */
static void test_srgan_step_counter(void **state) {
    const char *dir = *state;
    char path[512];
    tu_path(path, sizeof path, dir, "srgan.safetensors");
    duet_srgan_opts o = tu_tiny_srgan_opts();
    duet_rng rng = duet_rng_make(3, 0);
    duet_model *a = NULL, *b = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &a));
    TU_OK(duet_srgan_create(&o, &rng, &b));
    duet_optimizer_set *oa = tu_adam_pair(a, 1e-3f), *ob = tu_adam_pair(b, 1e-3f);
    duet_batch batch = {0};
    tu_sr_batch(&batch, 5, 2);
    duet_log_vars log;
    for (int i = 0; i < 3; i++) TU_OK(duet_model_train_step(a, &batch, oa, &log));
    assert_int_equal(duet_srgan_step_counter(a), 3);
    duet_named_optimizer named[2] = {{"generator", duet_optimizer_set_get(oa, "generator")},
                                     {"discriminator",
                                      duet_optimizer_set_get(oa, "discriminator")}};
    TU_OK(duet_checkpoint_save_model(path, a, named, 2, NULL, 0));
    named[0].opt = duet_optimizer_set_get(ob, "generator");
    named[1].opt = duet_optimizer_set_get(ob, "discriminator");
    TU_OK(duet_checkpoint_resume_model(path, b, named, 2, NULL));
    assert_int_equal(duet_srgan_step_counter(b), 3);
    tu_assert_same_state(duet_model_module(a), duet_model_module(b), true);
    duet_batch_clear(&batch);
    duet_optimizer_set_destroy(oa);
    duet_optimizer_set_destroy(ob);
    duet_model_destroy(a);
    duet_model_destroy(b);
}

/* test / infer load the parts evaluation uses, which the model names (its
 * ops' eval_parts, or every part with a trainable parameter): a
 * checkpoint without them fails, naming the file and the part, for any
 * part name (CycleGAN's "generators", a user model's "net"). */
static void test_eval_weights_required(void **state) {
    const char *dir = *state;
    char mine[512], other[512], p2p[512];
    tu_path(mine, sizeof mine, dir, "net.safetensors");
    tu_path(other, sizeof other, dir, "other.safetensors");
    tu_path(p2p, sizeof p2p, dir, "pix2pix.safetensors");

    /* A user model without eval_parts: its trainable part. */
    duet_model *a = pooled_model_named("net", 1), *b = pooled_model_named("net", 2);
    duet_model *c = pooled_model_named("other", 3);
    assert_int_equal(duet_model_eval_part_count(a), 1);
    assert_string_equal(duet_model_eval_part_at(a, 0), "net");
    assert_null(duet_model_eval_part_at(a, 1));
    TU_OK(duet_checkpoint_save_model(mine, a, NULL, 0, NULL, 0));
    TU_OK(duet_checkpoint_save_model(other, c, NULL, 0, NULL, 0));
    TU_OK(duet_checkpoint_load_eval(mine, b));
    tu_assert_same_state(duet_model_module(a), duet_model_module(b), true);
    tu_expect_error(duet_checkpoint_load_eval(other, b), DUET_ENOTFOUND, other, "(net.*)",
                    "net.weight", NULL);
    /* A frozen part is not evaluation's. */
    duet_module_set_requires_grad(duet_model_part(a, "net"), false);
    assert_int_equal(duet_model_eval_part_count(a), 0);

    /* CycleGAN names "generators"; a Pix2Pix checkpoint ("generator.*")
     * is not one of it, and the other way round. */
    duet_cyclegan_opts co = duet_cyclegan_opts_default();
    co.generator.base_channels = 4;
    co.generator.num_blocks = 1;
    co.discriminator.base_channels = 4;
    co.discriminator.num_conv = 2;
    duet_pix2pix_opts po = duet_pix2pix_opts_default();
    po.generator.num_down = 5;
    po.generator.base_channels = 4;
    po.discriminator.base_channels = 4;
    po.discriminator.num_conv = 2;
    duet_rng rng = duet_rng_make(4, 0);
    duet_model *cg = NULL, *pp = NULL;
    TU_OK(duet_cyclegan_create(&co, &rng, &cg));
    TU_OK(duet_pix2pix_create(&po, &rng, &pp));
    assert_int_equal(duet_model_eval_part_count(cg), 1);
    assert_string_equal(duet_model_eval_part_at(cg, 0), "generators");
    TU_OK(duet_checkpoint_save_model(p2p, pp, NULL, 0, NULL, 0));
    tu_expect_error(duet_checkpoint_load_eval(p2p, cg), DUET_ENOTFOUND, p2p, "(generators.*)",
                    "is it a checkpoint of this model?", NULL);
    TU_OK(duet_checkpoint_load_eval(p2p, pp));
    TU_OK(duet_checkpoint_save_model(p2p, cg, NULL, 0, NULL, 0));
    tu_expect_error(duet_checkpoint_load_eval(p2p, pp), DUET_ENOTFOUND, p2p, "(generator.*)",
                    NULL);
    duet_model_destroy(cg);
    duet_model_destroy(pp);
    duet_model_destroy(a);
    duet_model_destroy(b);
    duet_model_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_eval_weights_required),
        TU_TMPDIR_TEST(test_hooks_round_trip),
        TU_TMPDIR_TEST(test_srgan_step_counter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
