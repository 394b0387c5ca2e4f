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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_shape),
        cmocka_unit_test(test_views_share_and_outlive),
        cmocka_unit_test(test_clone_and_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
