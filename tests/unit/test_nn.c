/* nn layer: the module tree (names, order, counts, requires_grad, modes,
 * transparent wrappers, replace_child), state dicts through safetensors
 * files (round trip, strict and non-strict loading, shape mismatches), the
 * layers and both initialisations. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A container with no forward of its own, like an nn.Module subclass. */
static const duet_module_type box_type = {"Box", NULL, NULL};

static duet_module *make_box(void) {
    duet_module *m = NULL;
    TU_OK(duet_module_create(&box_type, NULL, &m));
    return m;
}

static duet_tensor *vec(int64_t n, float v) {
    duet_tensor *t = tu_zeros(1, (int64_t[]){n});
    duet_tensor_fill(t, v);
    return t;
}

/* root: alpha (param [2]), count (integer buffer), body = Sequential(
 * Conv2d(2, 3, 3), BatchNorm2d(3), ReLU), head = Linear(4, 2, no bias). */
static duet_module *make_tree(duet_rng *rng) {
    duet_module *root = make_box();
    TU_OK(duet_module_add_param(root, "alpha", vec(2, 0.5f)));
    TU_OK(duet_module_add_buffer(root, "count", vec(1, 7.0f), true));
    duet_module *body = NULL, *conv = NULL, *bn = NULL, *relu = NULL, *head = NULL;
    TU_OK(duet_sequential_create(&body));
    TU_OK(duet_conv2d_module_create(2, 3, 3, 1, 1, true, rng, &conv));
    TU_OK(duet_batch_norm2d_module_create(3, 1e-5f, 0.1f, &bn));
    TU_OK(duet_activation_module_create(DUET_ACT_RELU, 0.0f, &relu));
    TU_OK(duet_sequential_append(body, conv));
    TU_OK(duet_sequential_append(body, bn));
    TU_OK(duet_sequential_append(body, relu));
    TU_OK(duet_module_add_child(root, "body", body));
    TU_OK(duet_linear_module_create(4, 2, false, rng, &head));
    TU_OK(duet_module_add_child(root, "head", head));
    return root;
}

static void assert_names(const duet_named_tensors *l, const char *const *want, size_t n) {
    for (size_t i = 0; i < l->count && i < n; i++)
        if (strcmp(l->items[i].name, want[i]) != 0)
            fail_msg("entry %zu is %s, want %s", i, l->items[i].name, want[i]);
    assert_int_equal(l->count, n);
}

static void test_tree_names_order_counts(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *root = make_tree(&rng);
    duet_named_tensors l;

    static const char *params[] = {"alpha", "body.0.weight", "body.0.bias", "body.1.weight",
                                   "body.1.bias", "head.weight"};
    TU_OK(duet_module_named_parameters(root, false, &l));
    assert_names(&l, params, 6);
    for (size_t i = 0; i < l.count; i++) assert_false(l.items[i].is_integer);
    duet_named_tensors_clear(&l);

    static const char *buffers[] = {"count", "body.1.running_mean", "body.1.running_var",
                                    "body.1.num_batches_tracked"};
    TU_OK(duet_module_named_buffers(root, &l));
    assert_names(&l, buffers, 4);
    assert_true(l.items[0].is_integer);
    assert_false(l.items[1].is_integer);
    assert_true(l.items[3].is_integer);
    duet_named_tensors_clear(&l);

    /* PyTorch's state_dict order: own params, own buffers, then children. */
    static const char *st[] = {"alpha", "count", "body.0.weight", "body.0.bias",
                               "body.1.weight", "body.1.bias", "body.1.running_mean",
                               "body.1.running_var", "body.1.num_batches_tracked",
                               "head.weight"};
    TU_OK(duet_module_state(root, &l));
    assert_names(&l, st, 10);
    duet_named_tensors_clear(&l);

    /* 2 + 3*2*3*3 + 3 (conv) + 3 + 3 (bn) + 2*4 (linear). */
    assert_int_equal(duet_module_num_parameters(root, false), 73);
    assert_int_equal(duet_module_num_parameters(root, true), 73);

    duet_module *body = duet_module_child(root, "body");
    assert_non_null(body);
    assert_true(duet_module_is(body, "Sequential"));
    assert_true(duet_module_is(duet_module_child(body, "0"), "Conv2d"));
    assert_true(duet_module_is(duet_module_child(body, "1"), "BatchNorm2d"));
    assert_true(duet_module_is(duet_module_child(body, "2"), "ReLU"));
    assert_null(duet_module_child(root, "nope"));
    /* The accessors see the same tree, in registration order. */
    assert_int_equal(duet_module_child_count(root), 2);
    assert_string_equal(duet_module_child_name_at(root, 0), "body");
    assert_ptr_equal(duet_module_child_at(root, 0), body);
    assert_string_equal(duet_module_child_name_at(root, 1), "head");
    assert_null(duet_module_child_at(root, 2));
    assert_null(duet_module_child_name_at(root, 2));
    assert_string_equal(duet_module_type_name(duet_module_child(body, "0")), "Conv2d");
    assert_int_equal(duet_module_child_count(duet_module_child(body, "0")), 0);
    assert_true(duet_module_is_training(root));
    duet_module_train(root, false);
    assert_false(duet_module_is_training(duet_module_child(body, "1")));
    duet_module_train(root, true);
    assert_non_null(duet_module_param(root, "alpha"));
    assert_null(duet_module_param(root, "count"));
    assert_non_null(duet_module_buffer(root, "count"));
    duet_tensor *w = duet_module_param(duet_module_child(body, "0"), "weight");
    assert_int_equal(w->ndim, 4);
    assert_int_equal(w->shape[0], 3);
    assert_int_equal(w->shape[1], 2);
    assert_int_equal(w->shape[2], 3);
    duet_module_destroy(root);
}

static void test_requires_grad(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *root = make_tree(&rng);
    duet_named_tensors l;
    TU_OK(duet_module_named_parameters(root, false, &l));
    for (size_t i = 0; i < l.count; i++) assert_true(l.items[i].tensor->requires_grad);
    duet_named_tensors_clear(&l);

    /* Freeze the whole body: trainable lists and counts leave it out. */
    duet_module_set_requires_grad(duet_module_child(root, "body"), false);
    TU_OK(duet_module_named_parameters(root, true, &l));
    static const char *trainable[] = {"alpha", "head.weight"};
    assert_names(&l, trainable, 2);
    duet_named_tensors_clear(&l);
    assert_int_equal(duet_module_num_parameters(root, true), 2 + 8);
    assert_int_equal(duet_module_num_parameters(root, false), 73);

    /* One parameter by hand. */
    duet_module_param(root, "alpha")->requires_grad = false;
    TU_OK(duet_module_named_parameters(root, true, &l));
    static const char *only_head[] = {"head.weight"};
    assert_names(&l, only_head, 1);
    duet_named_tensors_clear(&l);

    duet_module_set_requires_grad(root, true);
    assert_int_equal(duet_module_num_parameters(root, true), 73);
    duet_module_destroy(root);
}

static void test_train_eval_and_zero_grad(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *root = make_tree(&rng);
    duet_module *bn = duet_module_child(duet_module_child(root, "body"), "1");
    assert_true(duet_module_is_training(root) && duet_module_is_training(bn));
    duet_module_train(root, false);
    assert_false(duet_module_is_training(root));
    assert_false(duet_module_is_training(duet_module_child(root, "body")));
    assert_false(duet_module_is_training(bn));
    duet_module_train(root, true);
    assert_true(duet_module_is_training(bn));

    duet_named_tensors l;
    TU_OK(duet_module_named_parameters(root, false, &l));
    for (size_t i = 0; i < l.count; i++) {
        TU_OK(duet_tensor_ensure_grad(l.items[i].tensor));
        for (int64_t j = 0; j < l.items[i].tensor->numel; j++) l.items[i].tensor->grad[j] = 3.0f;
    }
    duet_module_zero_grad(root);
    for (size_t i = 0; i < l.count; i++)
        for (int64_t j = 0; j < l.items[i].tensor->numel; j++)
            assert_true(l.items[i].tensor->grad[j] == 0.0f);
    duet_named_tensors_clear(&l);
    duet_module_destroy(root);
}

static void test_registration_errors(void **state) {
    (void)state;
    duet_module *m = make_box();
    TU_OK(duet_module_add_param(m, "w", vec(3, 1.0f)));
    /* Ownership passes also on failure: ASan would report these leaking. */
    assert_int_equal(duet_module_add_param(m, "w", vec(3, 1.0f)), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "\"w\""));
    assert_int_equal(duet_module_add_buffer(m, "w", vec(1, 0.0f), false), DUET_EINVAL);
    assert_int_equal(duet_module_add_child(m, "w", make_box()), DUET_EINVAL);
    assert_int_equal(duet_module_add_param(m, "a.b", vec(3, 1.0f)), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "'.'"));
    assert_int_equal(duet_module_add_param(m, "", vec(3, 1.0f)), DUET_EINVAL);
    assert_int_equal(duet_module_add_child(m, "x.y", make_box()), DUET_EINVAL);
    assert_int_equal(duet_module_add_param(m, "z", NULL), DUET_EINVAL);
    assert_int_equal(duet_module_param_count(m), 1);
    assert_int_equal(duet_module_buffer_count(m), 0);
    assert_int_equal(duet_module_child_count(m), 0);

    duet_module *bad = NULL;
    assert_int_equal(duet_conv2d_module_create(0, 3, 3, 1, 1, true, NULL, &bad), DUET_EINVAL);
    assert_null(bad);
    assert_int_equal(duet_linear_module_create(2, 3, true, NULL, &bad), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "rng"));
    assert_int_equal(duet_batch_norm2d_module_create(4, 0.0f, 0.1f, &bad), DUET_EINVAL);
    assert_int_equal(duet_max_pool2d_module_create(0, 1, &bad), DUET_EINVAL);
    duet_module_destroy(m);
}

/* A DDP-like wrapper: transparent, its child's name never shows in paths. */
static void test_transparent_naming(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(2, 0);
    duet_module *model = make_box();
    duet_module *ddp = make_box();
    duet_module_set_transparent(ddp, true);
    duet_module *gen = make_box();
    duet_module *conv = NULL;
    TU_OK(duet_conv2d_module_create(1, 1, 1, 1, 0, true, &rng, &conv));
    TU_OK(duet_module_add_child(gen, "conv_first", conv));
    TU_OK(duet_module_add_child(ddp, "module", gen));
    TU_OK(duet_module_add_child(model, "generator", ddp));
    duet_module *disc = make_box();
    duet_module *bn = NULL;
    TU_OK(duet_batch_norm2d_module_create(2, 1e-5f, 0.1f, &bn));
    TU_OK(duet_module_add_child(disc, "bn0_1", bn));
    TU_OK(duet_module_add_child(model, "discriminator", disc));

    duet_named_tensors l;
    TU_OK(duet_module_state(model, &l));
    static const char *want[] = {"generator.conv_first.weight", "generator.conv_first.bias",
                                 "discriminator.bn0_1.weight", "discriminator.bn0_1.bias",
                                 "discriminator.bn0_1.running_mean",
                                 "discriminator.bn0_1.running_var",
                                 "discriminator.bn0_1.num_batches_tracked"};
    assert_names(&l, want, 7);
    duet_named_tensors_clear(&l);

    /* Seen from the wrapper itself, names start at the wrapped network. */
    TU_OK(duet_module_named_parameters(ddp, false, &l));
    static const char *inner[] = {"conv_first.weight", "conv_first.bias"};
    assert_names(&l, inner, 2);
    duet_named_tensors_clear(&l);
    duet_module_destroy(model);
}

static void test_replace_child(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    duet_module *root = make_tree(&rng);
    duet_module *wrapper = make_box();
    duet_module_set_transparent(wrapper, true);
    duet_module *old = NULL;
    TU_OK(duet_module_replace_child(root, "head", wrapper, &old));
    assert_non_null(old);
    assert_true(duet_module_is(old, "Linear"));
    assert_ptr_equal(duet_module_child(root, "head"), wrapper);
    /* Put the old head inside the wrapper: names stay the same. */
    TU_OK(duet_module_add_child(wrapper, "module", old));
    duet_named_tensors l;
    TU_OK(duet_module_named_parameters(root, false, &l));
    assert_string_equal(l.items[l.count - 1].name, "head.weight");
    duet_named_tensors_clear(&l);

    duet_module *spare = make_box();
    assert_int_equal(duet_module_replace_child(root, "tail", spare, &old), DUET_ENOTFOUND);
    assert_null(old);
    assert_non_null(strstr(duet_last_error(), "tail"));
    duet_module_destroy(spare);
    duet_module_destroy(root);
}

/* ---- state dicts ------------------------------------------------------------- */

static void save_tree(duet_module *m, const char *prefix, const char *path) {
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(m, w, prefix));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
}

static void test_state_round_trip(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "rt.safetensors");
    duet_rng r1 = duet_rng_make(10, 0), r2 = duet_rng_make(11, 0);
    duet_module *a = make_tree(&r1), *b = make_tree(&r2);
    /* Non-trivial buffers. */
    duet_module *bn = duet_module_child(duet_module_child(a, "body"), "1");
    duet_module_buffer(bn, "running_mean")->data[1] = 0.25f;
    duet_module_buffer(bn, "num_batches_tracked")->data[0] = 42.0f;
    save_tree(a, "net.", path);

    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_int_equal(duet_st_count(st), 10);
    assert_true(duet_st_has(st, "net.body.1.running_var"));
    /* Counts are 0-dim int64, as in PyTorch. */
    const char *dtype;
    const void *bytes;
    size_t nbytes;
    int ndim;
    int64_t shape[DUET_ST_MAX_DIMS];
    TU_OK(duet_st_raw(st, "net.body.1.num_batches_tracked", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_string_equal(dtype, "I64");
    assert_int_equal(ndim, 0);
    int64_t count;
    memcpy(&count, bytes, sizeof count);
    assert_int_equal(count, 42);
    TU_OK(duet_st_raw(st, "net.count", &dtype, &bytes, &nbytes, &ndim, shape));
    memcpy(&count, bytes, sizeof count);
    assert_int_equal(count, 7);

    size_t nmiss = 99, nunexp = 99;
    TU_OK(duet_module_load_state(b, st, "net.", true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
    tu_assert_same_state(a, b, true);
    duet_st_destroy(st);
    duet_module_destroy(a);
    duet_module_destroy(b);
}

static void test_load_strict_and_non_strict(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "strict.safetensors");
    duet_rng r1 = duet_rng_make(20, 0), r2 = duet_rng_make(21, 0);
    /* The file lacks head.weight and has an extra "extra.w"; another prefix
     * ("other.") must be ignored entirely. */
    duet_module *a = make_tree(&r1);
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(a, w, "g."));
    TU_OK(duet_module_save_state(a, w, "other."));
    duet_tensor *extra = vec(5, 1.0f);
    TU_OK(duet_st_writer_add(w, "g.extra.w", extra));
    duet_tensor_release(extra);
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);

    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    duet_module *b = make_tree(&r2);
    /* Drop head.weight from what the file covers by loading into a tree
     * whose head is a bigger Linear under another name. */
    duet_module *head = NULL, *old = NULL;
    TU_OK(duet_linear_module_create(4, 2, true, &r2, &head));
    TU_OK(duet_module_replace_child(b, "head", head, &old));
    duet_module_destroy(old);
    duet_tensor *before = NULL;
    TU_OK(duet_tensor_clone(duet_module_param(b, "alpha"), &before));

    int rc = duet_module_load_state(b, st, "g.", true, NULL, NULL);
    assert_int_equal(rc, DUET_ENOTFOUND);
    const char *msg = duet_last_error();
    assert_non_null(strstr(msg, "g.head.bias"));   /* missing */
    assert_non_null(strstr(msg, "g.extra.w"));     /* unexpected */
    assert_null(strstr(msg, "other."));
    /* Nothing was copied. */
    assert_memory_equal(before->data, duet_module_param(b, "alpha")->data, 2 * sizeof(float));

    size_t nmiss = 0, nunexp = 0;
    duet_log_set_level(DUET_LOG_ERROR); /* keep the expected warnings quiet */
    TU_OK(duet_module_load_state(b, st, "g.", false, &nmiss, &nunexp));
    duet_log_set_level(DUET_LOG_INFO);
    assert_int_equal(nmiss, 1);
    assert_int_equal(nunexp, 1);
    assert_memory_equal(duet_module_param(a, "alpha")->data, duet_module_param(b, "alpha")->data,
                        2 * sizeof(float));
    duet_tensor *wa = duet_module_param(duet_module_child(a, "head"), "weight");
    duet_tensor *wb = duet_module_param(duet_module_child(b, "head"), "weight");
    assert_memory_equal(wa->data, wb->data, 8 * sizeof(float));
    duet_tensor_release(before);
    duet_st_destroy(st);
    duet_module_destroy(a);
    duet_module_destroy(b);
}

static void test_load_shape_mismatch(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "shape.safetensors");
    duet_rng rng = duet_rng_make(30, 0);
    duet_module *a = NULL, *b = NULL;
    TU_OK(duet_conv2d_module_create(2, 3, 3, 1, 1, true, &rng, &a));
    TU_OK(duet_conv2d_module_create(2, 4, 3, 1, 1, true, &rng, &b));
    save_tree(a, "", path);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    /* Shape mismatches fail also when not strict, naming key and shapes. */
    assert_int_equal(duet_module_load_state(b, st, "", false, NULL, NULL), DUET_ESHAPE);
    const char *msg = duet_last_error();
    assert_non_null(strstr(msg, "weight"));
    assert_non_null(strstr(msg, "[3, 2, 3, 3]"));
    assert_non_null(strstr(msg, "[4, 2, 3, 3]"));
    assert_non_null(strstr(msg, "[3]"));
    assert_non_null(strstr(msg, "[4]"));
    duet_st_destroy(st);
    duet_module_destroy(a);
    duet_module_destroy(b);
}

/* ---- layers and init ----------------------------------------------------------- */

static void test_pytorch_default_init(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(40, 0);
    duet_module *conv = NULL, *lin = NULL;
    TU_OK(duet_conv2d_module_create(8, 16, 3, 1, 1, true, &rng, &conv));
    TU_OK(duet_linear_module_create(50, 30, true, &rng, &lin));
    struct { duet_module *m; double fan_in; } cases[2] = {{conv, 8 * 9}, {lin, 50}};
    for (int c = 0; c < 2; c++) {
        double bound = 1.0 / sqrt(cases[c].fan_in);
        const char *names[2] = {"weight", "bias"};
        for (int k = 0; k < 2; k++) {
            duet_tensor *t = duet_module_param(cases[c].m, names[k]);
            double mx = 0, sum = 0, sumsq = 0;
            for (int64_t i = 0; i < t->numel; i++) {
                double v = t->data[i];
                assert_true(fabs(v) <= bound);
                mx = fmax(mx, fabs(v));
                sum += v;
                sumsq += v * v;
            }
            /* U(-b, b): values reach near the bound; variance b^2/3. */
            assert_true(mx > 0.8 * bound);
            if (k == 0) {
                double var = sumsq / t->numel - (sum / t->numel) * (sum / t->numel);
                assert_true(fabs(var / (bound * bound / 3.0) - 1.0) < 0.15);
            }
        }
    }
    duet_module_destroy(conv);
    duet_module_destroy(lin);
}

static void test_default_init_weights(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(41, 0);
    duet_module *seq = NULL, *conv = NULL, *bn = NULL, *lin = NULL;
    TU_OK(duet_sequential_create(&seq));
    TU_OK(duet_conv2d_module_create(16, 32, 3, 1, 1, true, &rng, &conv));
    TU_OK(duet_batch_norm2d_module_create(32, 1e-5f, 0.1f, &bn));
    TU_OK(duet_linear_module_create(400, 50, true, &rng, &lin));
    TU_OK(duet_sequential_append(seq, conv));
    TU_OK(duet_sequential_append(seq, bn));
    TU_OK(duet_sequential_append(seq, lin));
    duet_module_param(bn, "weight")->data[0] = 5.0f;
    duet_module_param(bn, "bias")->data[0] = 5.0f;
    duet_default_init_weights(seq, 0.1f, &rng);

    /* kaiming_normal_(fan_in, gain sqrt 2) * 0.1: std 0.1 * sqrt(2 / fan_in). */
    struct { duet_module *m; double fan_in; } cases[2] = {{conv, 16 * 9}, {lin, 400}};
    for (int c = 0; c < 2; c++) {
        duet_tensor *w = duet_module_param(cases[c].m, "weight");
        duet_tensor *b = duet_module_param(cases[c].m, "bias");
        double sum = 0, sumsq = 0;
        for (int64_t i = 0; i < w->numel; i++) {
            sum += w->data[i];
            sumsq += (double)w->data[i] * w->data[i];
        }
        double std = sqrt(sumsq / w->numel), want = 0.1 * sqrt(2.0 / cases[c].fan_in);
        assert_true(fabs(std / want - 1.0) < 0.05);
        assert_true(fabs(sum / w->numel) < 0.1 * want);
        for (int64_t i = 0; i < b->numel; i++) assert_true(b->data[i] == 0.0f);
    }
    for (int64_t i = 0; i < 32; i++) {
        assert_true(duet_module_param(bn, "weight")->data[i] == 1.0f);
        assert_true(duet_module_param(bn, "bias")->data[i] == 0.0f);
    }
    duet_module_destroy(seq);
}

/* Sequential(Conv2d, LeakyReLU(0.2), MaxPool2d(2, 2)) equals the ops
 * applied by hand to the same parameters. */
static void test_sequential_forward(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(50, 0);
    duet_module *seq = NULL, *conv = NULL, *act = NULL, *pool = NULL;
    TU_OK(duet_sequential_create(&seq));
    TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, true, &rng, &conv));
    TU_OK(duet_activation_module_create(DUET_ACT_LEAKY_RELU, 0.2f, &act));
    TU_OK(duet_max_pool2d_module_create(2, 2, &pool));
    TU_OK(duet_sequential_append(seq, conv));
    TU_OK(duet_sequential_append(seq, act));
    TU_OK(duet_sequential_append(seq, pool));
    assert_true(duet_module_is(act, "LeakyReLU"));
    assert_true(duet_module_is(pool, "MaxPool2d"));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 6, 6}, 1.0f);
    duet_tensor *y = NULL, *h = NULL, *a = NULL, *p = NULL;
    TU_OK(duet_module_forward(seq, x, &y));
    TU_OK(duet_conv2d(x, duet_module_param(conv, "weight"), duet_module_param(conv, "bias"), 1,
                      1, &h));
    TU_OK(duet_leaky_relu(h, 0.2f, &a));
    TU_OK(duet_max_pool2d(a, 2, 2, &p));
    assert_true(duet_tensor_same_shape(y, p));
    assert_int_equal(y->shape[2], 3);
    assert_memory_equal(y->data, p->data, (size_t)y->numel * sizeof(float));

    /* The other activations by kind. */
    duet_activation kinds[3] = {DUET_ACT_RELU, DUET_ACT_SIGMOID, DUET_ACT_TANH};
    for (int k = 0; k < 3; k++) {
        duet_module *m = NULL;
        duet_tensor *o = NULL;
        TU_OK(duet_activation_module_create(kinds[k], 0.0f, &m));
        TU_OK(duet_module_forward(m, x, &o));
        for (int64_t i = 0; i < x->numel; i++) {
            float v = x->data[i];
            float want = k == 0 ? (v > 0 ? v : 0) : k == 1 ? 1.0f / (1.0f + expf(-v)) : tanhf(v);
            assert_true(fabsf(o->data[i] - want) <= 1e-6f);
        }
        duet_tensor_release(o);
        duet_module_destroy(m);
    }
    duet_tape_clear();
    duet_tensor_release(x);
    duet_tensor_release(y);
    duet_tensor_release(h);
    duet_tensor_release(a);
    duet_tensor_release(p);
    duet_module_destroy(seq);
}

typedef struct reduce_count {
    int calls;
} reduce_count;

static int counting_reduce(void *ctx, float *buf, int64_t count) {
    (void)buf;
    (void)count;
    ((reduce_count *)ctx)->calls++;
    return DUET_OK;
}

/* BatchNorm2d: batch statistics and running updates in training mode,
 * running statistics in eval mode; the reduce hook runs in training only. */
static void test_batchnorm_modes(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(60, 0);
    duet_module *bn = NULL;
    TU_OK(duet_batch_norm2d_module_create(2, 1e-5f, 0.1f, &bn));
    reduce_count rc = {0};
    TU_OK(duet_batch_norm2d_set_reduce(bn, counting_reduce, &rc));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){4, 2, 3, 3}, 2.0f);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] += 1.0f;
    duet_tensor *y = NULL;
    TU_OK(duet_module_forward(bn, x, &y));
    assert_true(rc.calls > 0);
    duet_tensor *rm = duet_module_buffer(bn, "running_mean");
    duet_tensor *rv = duet_module_buffer(bn, "running_var");
    duet_tensor *nb = duet_module_buffer(bn, "num_batches_tracked");
    assert_true(nb->data[0] == 1.0f);
    for (int c = 0; c < 2; c++) {
        double mean = 0, var = 0;
        for (int n = 0; n < 4; n++)
            for (int k = 0; k < 9; k++) mean += x->data[(n * 2 + c) * 9 + k];
        mean /= 36;
        for (int n = 0; n < 4; n++)
            for (int k = 0; k < 9; k++) {
                double d = x->data[(n * 2 + c) * 9 + k] - mean;
                var += d * d;
            }
        assert_true(fabs(rm->data[c] - 0.1 * mean) < 1e-5);
        assert_true(fabs(rv->data[c] - (0.9 + 0.1 * var / 35)) < 1e-5);
        /* Normalised with the biased batch variance. */
        double y0 = y->data[(0 * 2 + c) * 9];
        double want = (x->data[(0 * 2 + c) * 9] - mean) / sqrt(var / 36 + 1e-5);
        assert_true(fabs(y0 - want) < 1e-4);
    }
    duet_tensor_release(y);

    duet_module_train(bn, false);
    int calls = rc.calls;
    float rm0 = rm->data[0], rv0 = rv->data[0];
    TU_OK(duet_module_forward(bn, x, &y));
    assert_int_equal(rc.calls, calls);
    assert_true(nb->data[0] == 1.0f);
    assert_true(rm->data[0] == rm0);
    double want = (x->data[0] - rm0) / sqrt(rv0 + 1e-5);
    assert_true(fabs(y->data[0] - want) < 1e-4);
    duet_tensor_release(y);

    /* Only BatchNorm2d takes a reduce hook. */
    duet_module *lin = NULL;
    TU_OK(duet_linear_module_create(2, 2, true, &rng, &lin));
    assert_int_equal(duet_batch_norm2d_set_reduce(lin, counting_reduce, &rc), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "Linear"));
    duet_module_destroy(lin);
    duet_tape_clear();
    duet_tensor_release(x);
    duet_module_destroy(bn);
}

/* Gradients reach the parameters through module forwards. */
static void test_linear_backward(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(70, 0);
    duet_module *lin = NULL;
    TU_OK(duet_linear_module_create(3, 2, true, &rng, &lin));
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){4, 3}, 1.0f);
    duet_tensor *y = NULL, *s = NULL;
    TU_OK(duet_module_forward(lin, x, &y));
    TU_OK(duet_sum(y, &s));
    TU_OK(duet_backward(s));
    duet_tensor *w = duet_module_param(lin, "weight"), *b = duet_module_param(lin, "bias");
    assert_non_null(w->grad);
    for (int o = 0; o < 2; o++) {
        assert_true(fabsf(b->grad[o] - 4.0f) < 1e-6f);
        for (int i = 0; i < 3; i++) {
            float want = 0;
            for (int n = 0; n < 4; n++) want += x->data[n * 3 + i];
            assert_true(fabsf(w->grad[o * 3 + i] - want) < 1e-5f);
        }
    }
    duet_tensor_release(x);
    duet_tensor_release(y);
    duet_tensor_release(s);
    duet_module_destroy(lin);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_names_order_counts),
        cmocka_unit_test(test_requires_grad),
        cmocka_unit_test(test_train_eval_and_zero_grad),
        cmocka_unit_test(test_registration_errors),
        cmocka_unit_test(test_transparent_naming),
        cmocka_unit_test(test_replace_child),
        TU_TMPDIR_TEST(test_state_round_trip),
        TU_TMPDIR_TEST(test_load_strict_and_non_strict),
        TU_TMPDIR_TEST(test_load_shape_mismatch),
        cmocka_unit_test(test_pytorch_default_init),
        cmocka_unit_test(test_default_init_weights),
        cmocka_unit_test(test_sequential_forward),
        cmocka_unit_test(test_batchnorm_modes),
        cmocka_unit_test(test_linear_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
