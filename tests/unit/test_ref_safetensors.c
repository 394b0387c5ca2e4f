/* safetensors files written by Python (tests/ref/ref_safetensors.py): every
 * dtype duet converts must give exactly torch's float32 conversion; JSON key
 * order differs from data order; metadata (UTF-8) and raw I64 survive; a
 * PyTorch state dict with MMEditing names (0-d I64 num_batches_tracked)
 * loads. */
#include "testutil.h"

#include <string.h>

#include "duet/train.h"

static void test_dtypes_match_torch(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("safetensors_dtypes.safetensors");
    duet_st *ex = tu_ref_load("safetensors_expect.safetensors");
    /* Data order, although the JSON lists the keys in reverse. */
    const char *order[8] = {"f32", "f16", "bf16", "f64", "i64", "i32", "u8", "scalar"};
    assert_int_equal(duet_st_count(st), 8);
    for (size_t i = 0; i < 8; i++) {
        assert_string_equal(duet_st_name(st, i), order[i]);
        duet_tensor *got = tu_ref_tensor(st, order[i]);
        duet_tensor *want = tu_ref_tensor(ex, order[i]);
        if (!duet_tensor_same_shape(got, want)) {
            char a[DUET_SHAPE_STR_MAX], b[DUET_SHAPE_STR_MAX];
            fail_msg("%s: shape %s, torch says %s", order[i], duet_shape_str(got, a, sizeof a),
                     duet_shape_str(want, b, sizeof b));
        }
        /* Conversions are exact (or correctly rounded, like torch's). */
        tu_assert_close(got->data, want->data, got->numel, 0.0, 0.0, order[i]);
        duet_tensor_release(got);
        duet_tensor_release(want);
    }
    const char *dtype;
    const void *bytes;
    size_t nbytes;
    int ndim;
    int64_t shape[DUET_ST_MAX_DIMS];
    TU_OK(duet_st_raw(st, "f16", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_string_equal(dtype, "F16");
    assert_int_equal(nbytes, 34 * 2);
    TU_OK(duet_st_raw(st, "bf16", &dtype, NULL, NULL, &ndim, shape));
    assert_string_equal(dtype, "BF16");
    assert_int_equal(ndim, 3);
    assert_int_equal(shape[2], 5);
    /* Raw I64 bytes are torch's int64 values, including ones that float32
     * cannot hold exactly. */
    TU_OK(duet_st_raw(st, "i64", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_string_equal(dtype, "I64");
    assert_int_equal(nbytes, 6 * 8);
    const void *want_bytes;
    size_t want_n;
    TU_OK(duet_st_raw(ex, "i64_raw", &dtype, &want_bytes, &want_n, NULL, NULL));
    assert_string_equal(dtype, "I64");
    assert_int_equal(want_n, nbytes);
    assert_memory_equal(bytes, want_bytes, nbytes);
    int64_t v[6];
    memcpy(v, bytes, sizeof v);
    assert_true(v[2] == (INT64_C(1) << 40) && v[5] == 123456789);
    TU_OK(duet_st_raw(st, "scalar", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_int_equal(ndim, 0);
    memcpy(v, bytes, 8);
    assert_true(v[0] == 42);

    assert_string_equal(duet_st_meta(st, "format"), "pt");
    assert_string_equal(duet_st_meta(st, "note"), "written by ref_safetensors.py \xc3\xa9");
    duet_st_destroy(st);
    duet_st_destroy(ex);
}

static void test_pytorch_state_dict(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("safetensors_state.safetensors");
    assert_int_equal(duet_st_count(st), 12);
    assert_string_equal(duet_st_name(st, 0), "generator.conv_first.weight");
    assert_true(duet_st_has(st, "generator.upsample.0.bias"));
    assert_true(duet_st_has(st, "discriminator.bn0_0.running_var"));
    assert_string_equal(duet_st_meta(st, "iteration"), "300");
    assert_string_equal(duet_st_meta(st, "framework"), "pytorch");

    duet_tensor *w = tu_zeros(4, (int64_t[]){4, 3, 3, 3});
    TU_OK(duet_st_copy_into(st, "generator.conv_first.weight", w));
    float sumsq = 0;
    for (int64_t i = 0; i < w->numel; i++) sumsq += w->data[i] * w->data[i];
    assert_true(sumsq > 0.0f); /* real weights, not zeros */
    duet_tensor *again = tu_ref_tensor(st, "generator.conv_first.weight");
    tu_assert_close(w->data, again->data, w->numel, 0, 0, "conv_first.weight");
    duet_tensor_release(again);
    /* Linear weights are [out, in] as in PyTorch. */
    duet_tensor *lin = tu_zeros(2, (int64_t[]){8, 2});
    assert_int_equal(duet_st_copy_into(st, "discriminator.linear1.weight", lin), DUET_ESHAPE);
    duet_tensor_release(lin);
    duet_tensor_release(w);

    duet_tensor *nbt = tu_ref_tensor(st, "discriminator.bn0_0.num_batches_tracked");
    assert_int_equal(nbt->numel, 1);
    assert_true(nbt->data[0] == 17.0f);
    duet_tensor_release(nbt);
    const char *dtype;
    int ndim = -1;
    TU_OK(duet_st_raw(st, "discriminator.bn0_0.num_batches_tracked", &dtype, NULL, NULL, &ndim,
                      NULL));
    assert_string_equal(dtype, "I64");
    assert_int_equal(ndim, 0);
    duet_st_destroy(st);
}

/* The tree of ref_safetensors.py's _Model from nn.h layers: generator
 * { conv_first: Conv2d(3, 4, 3), upsample: Sequential(Conv2d(4, 16, 3)) },
 * discriminator { conv0_0: Conv2d(3, 4, 3, no bias), bn0_0: BatchNorm2d(4),
 * linear1: Linear(8, 2) }. */
static duet_module *build_mirror(void) {
    duet_rng rng = duet_rng_make(9, 0);
    duet_module *model, *gen, *up, *disc, *m;
    TU_OK(duet_sequential_create(&model));
    TU_OK(duet_sequential_create(&gen));
    TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, true, &rng, &m));
    TU_OK(duet_module_add_child(gen, "conv_first", m));
    TU_OK(duet_sequential_create(&up));
    TU_OK(duet_conv2d_module_create(4, 16, 3, 1, 1, true, &rng, &m));
    TU_OK(duet_sequential_append(up, m));
    TU_OK(duet_module_add_child(gen, "upsample", up));
    TU_OK(duet_module_add_child(model, "generator", gen));
    TU_OK(duet_sequential_create(&disc));
    TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, false, &rng, &m));
    TU_OK(duet_module_add_child(disc, "conv0_0", m));
    TU_OK(duet_batch_norm2d_module_create(4, 1e-5f, 0.1f, &m));
    TU_OK(duet_module_add_child(disc, "bn0_0", m));
    TU_OK(duet_linear_module_create(8, 2, true, &rng, &m));
    TU_OK(duet_module_add_child(disc, "linear1", m));
    TU_OK(duet_module_add_child(model, "discriminator", disc));
    return model;
}

/* A PyTorch state dict loads as a checkpoint's weights, strictly. */
static void test_pytorch_file_as_checkpoint(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/safetensors_state.safetensors", tu_ref_dir());
    duet_module *model = build_mirror();
    size_t nmissing = 9, nunexpected = 9;
    TU_OK(duet_checkpoint_load_weights(path, model, true, NULL, &nmissing, &nunexpected));
    duet_st *st = tu_ref_load("safetensors_state.safetensors");
    duet_named_tensors sd;
    TU_OK(duet_module_state(model, &sd));
    assert_int_equal(sd.count, duet_st_count(st));
    for (size_t i = 0; i < sd.count; i++)
        tu_assert_ref(st, sd.items[i].name, sd.items[i].tensor->data, sd.items[i].tensor->numel,
                      0, 0);
    duet_named_tensors_clear(&sd);
    duet_module *bn = duet_module_child(duet_module_child(model, "discriminator"), "bn0_0");
    assert_true(duet_module_buffer(bn, "num_batches_tracked")->data[0] == 17.0f);
    int64_t iter;
    TU_OK(duet_checkpoint_meta_int(st, "iteration", &iter));
    assert_int_equal(iter, 300);
    /* Not resumable: PyTorch wrote no optimizer state for it. */
    duet_optimizer *opt = NULL;
    duet_named_tensors p;
    TU_OK(duet_module_named_parameters(model, true, &p));
    TU_OK(duet_adam_create(&p, NULL, &opt));
    duet_named_tensors_clear(&p);
    duet_named_optimizer opts[] = {{"generator", opt}};
    assert_int_equal(duet_checkpoint_resume(path, model, opts, 1, NULL), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), "optimizer 'generator'"));
    duet_optimizer_destroy(opt);
    duet_st_destroy(st);
    duet_module_destroy(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes_match_torch),
        cmocka_unit_test(test_pytorch_state_dict),
        cmocka_unit_test(test_pytorch_file_as_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
