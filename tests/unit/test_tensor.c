/* tensor layer: creation, shape checks, views, slices, reference counts. */
#include "testutil.h"

#include <string.h>

static void test_create_and_shape(void **state) {
    (void)state;
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_create4(2, 3, 4, 5, &t));
    assert_int_equal(t->ndim, 4);
    assert_int_equal(t->numel, 120);
    for (int64_t i = 0; i < t->numel; i++) assert_true(t->data[i] == 0.0f);
    char buf[DUET_SHAPE_STR_MAX];
    assert_string_equal(duet_shape_str(t, buf, sizeof buf), "[2, 3, 4, 5]");
    duet_tensor_release(t);
    assert_int_equal(duet_tensor_create(5, (int64_t[]){1, 1, 1, 1, 1}, &t), DUET_EINVAL);
    assert_null(t);
    assert_int_equal(duet_tensor_create(2, (int64_t[]){3, 0}, &t), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "dimension 1"));
}

static void test_views_share_and_outlive(void **state) {
    (void)state;
    duet_tensor *t = NULL, *v = NULL, *s = NULL;
    float data[12];
    for (int i = 0; i < 12; i++) data[i] = (float)i;
    TU_OK(duet_tensor_from_data(2, (int64_t[]){4, 3}, data, &t));
    TU_OK(duet_tensor_view(t, 1, (int64_t[]){12}, &v));
    TU_OK(duet_tensor_slice0(t, 1, 2, &s));
    assert_int_equal(s->shape[0], 2);
    assert_true(s->data[0] == 3.0f);
    duet_tensor_release(t); /* the views keep the data alive */
    v->data[4] = 42.0f;
    assert_true(s->data[1] == 42.0f);
    duet_tensor_release(v);
    duet_tensor_release(s);
    TU_OK(duet_tensor_create(1, (int64_t[]){6}, &t));
    assert_int_equal(duet_tensor_view(t, 2, (int64_t[]){4, 2}, &v), DUET_ESHAPE);
    assert_int_equal(duet_tensor_slice0(t, 5, 2, &s), DUET_EINVAL);
    duet_tensor_release(t);
}

static void test_clone_and_grad(void **state) {
    (void)state;
    duet_tensor *t = NULL, *c = NULL;
    TU_OK(duet_tensor_create(1, (int64_t[]){3}, &t));
    duet_tensor_fill(t, 2.5f);
    TU_OK(duet_tensor_clone(t, &c));
    assert_true(c->data != t->data && c->data[2] == 2.5f);
    assert_null(t->grad);
    TU_OK(duet_tensor_ensure_grad(t));
    t->grad[1] = 4.0f;
    duet_tensor_zero_grad(t);
    assert_true(t->grad[1] == 0.0f);
    assert_true(duet_tensor_same_shape(t, c));
    duet_tensor_release(t);
    duet_tensor_release(c);
}

static void test_device_names(void **state) {
    (void)state;
    duet_device d;
    char buf[DUET_DEVICE_STR_MAX];
    TU_OK(duet_device_parse("cpu", &d));
    assert_int_equal(d.type, DUET_DEVICE_CPU);
    assert_string_equal(duet_device_str(d, buf, sizeof buf), "cpu");
    TU_OK(duet_device_parse("cuda", &d));
    assert_true(d.type == DUET_DEVICE_CUDA && d.index == 0);
    TU_OK(duet_device_parse("cuda:12", &d));
    assert_true(d.type == DUET_DEVICE_CUDA && d.index == 12);
    assert_string_equal(duet_device_str(d, buf, sizeof buf), "cuda:12");
    const char *bad[] = {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "cuda:99999999999", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(duet_device_parse(bad[i], &d), DUET_EINVAL);
        assert_non_null(strstr(duet_last_error(), "cuda:N"));
    }
    assert_true(duet_device_equal(duet_device_cpu(), (duet_device){0}));
    assert_false(duet_device_equal(duet_device_cuda(0), duet_device_cuda(1)));
    assert_false(duet_device_equal(duet_device_cuda(0), duet_device_cpu()));
    TU_OK(duet_device_check(duet_device_cpu()));
    /* A device past the visible ones is refused, whatever this machine has. */
    int n = duet_cuda_device_count();
    assert_true(n >= 0);
    assert_true(n == 0 || duet_cuda_built());
    assert_int_equal(duet_device_check(duet_device_cuda(n)), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), duet_device_str(duet_device_cuda(n), buf, sizeof buf)));
    if (!duet_cuda_built())
        assert_non_null(strstr(duet_last_error(), "built without CUDA"));
    else if (n == 0)
        assert_non_null(strstr(duet_last_error(), "no CUDA device is visible"));
}

/* Every tensor is on the CPU unless made elsewhere; host access says where
 * it reads; the copies work between host memory and CPU tensors. */
static void test_device_cpu_tensors(void **state) {
    (void)state;
    duet_tensor *t = NULL, *v = NULL, *c = NULL, *w = NULL;
    TU_OK(duet_tensor_from_data(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6}, &t));
    assert_int_equal(duet_tensor_device(t).type, DUET_DEVICE_CPU);
    assert_ptr_equal(duet_tensor_host_data(t), t->data);
    assert_ptr_equal(duet_tensor_data_on(t, duet_device_cpu()), t->data);
    assert_null(duet_tensor_data_on(t, duet_device_cuda(0)));
    TU_OK(duet_tensor_slice0(t, 1, 1, &v));
    assert_int_equal(duet_tensor_device(v).type, DUET_DEVICE_CPU);
    TU_OK(duet_tensor_to(t, duet_device_cpu(), &c));
    assert_true(c->data != t->data && c->data[5] == 6.0f && c->ndim == 2 && c->shape[1] == 3);
    float host[6] = {0};
    TU_OK(duet_tensor_copy_to_host(v, host));
    assert_true(host[0] == 4.0f && host[2] == 6.0f && host[3] == 0.0f);
    TU_OK(duet_tensor_copy_from_host(v, (float[]){7, 8, 9}));
    assert_true(t->data[3] == 7.0f && t->data[5] == 9.0f && c->data[3] == 4.0f);
    TU_OK(duet_tensor_copy(c, t));
    assert_true(c->data[4] == 8.0f);
    TU_OK(duet_tensor_create(1, (int64_t[]){5}, &w));
    assert_int_equal(duet_tensor_copy(w, t), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "[2, 3]"));
    TU_OK(duet_tensor_fill(w, 1.5f));
    assert_true(w->data[4] == 1.5f);
    TU_OK(duet_tensor_ensure_grad(w));
    w->grad[0] = 3.0f;
    TU_OK(duet_tensor_zero_grad(w));
    assert_true(w->grad[0] == 0.0f);
    duet_tensor *l = NULL;
    TU_OK(duet_tensor_create_like(t, &l));
    assert_int_equal(duet_tensor_device(l).type, DUET_DEVICE_CPU);
    duet_tensor_release(l);
    duet_tensor_release(w);
    duet_tensor_release(c);
    duet_tensor_release(v);
    duet_tensor_release(t);
}

/* Without a visible GPU a CUDA tensor is refused with the reason; with one
 * (the gpu-labelled tests cover more) it round-trips. */
static void test_device_cuda_tensor_or_refusal(void **state) {
    (void)state;
    duet_tensor *t = NULL;
    int rc = duet_tensor_create_on(duet_device_cuda(0), 1, (int64_t[]){4}, &t);
    if (duet_device_check(duet_device_cuda(0)) != DUET_OK) {
        assert_int_equal(rc, DUET_EDEVICE);
        assert_null(t);
        assert_non_null(strstr(duet_last_error(), "cuda:0 asked for"));
        return;
    }
    TU_OK(rc);
    assert_null(duet_tensor_host_data(t));
    float v[4] = {9, 9, 9, 9};
    TU_OK(duet_tensor_copy_to_host(t, v));
    assert_true(v[0] == 0.0f && v[3] == 0.0f);
    duet_tensor_release(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_shape),
        cmocka_unit_test(test_views_share_and_outlive),
        cmocka_unit_test(test_clone_and_grad),
        cmocka_unit_test(test_device_names),
        cmocka_unit_test(test_device_cpu_tensors),
        cmocka_unit_test(test_device_cuda_tensor_or_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
