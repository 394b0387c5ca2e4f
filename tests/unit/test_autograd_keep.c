/* duet_backward_keep_unreached: a backward on a loss that depends on a
 * detached copy of h frees only its own nodes; the nodes that made h stay
 * recorded, and a later duet_backward through h reaches the leaf behind it
 * (Pix2Pix's discriminator step before its generator step). */
#include "testutil.h"

static void test_keep_unreached(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    const int64_t s[1] = {5};
    duet_tensor *x = tu_randn(&rng, 1, s, 1.0f), *w1 = tu_randn(&rng, 1, s, 1.0f),
                *w2 = tu_randn(&rng, 1, s, 1.0f);
    w1->requires_grad = true;
    w2->requires_grad = true;
    duet_tensor *h = NULL, *hd = NULL, *p1 = NULL, *l1 = NULL, *p2 = NULL, *l2 = NULL;
    TU_OK(duet_mul(x, w1, &h));                 /* the "generator": 1 node */
    TU_OK(duet_detach(h, &hd));
    TU_OK(duet_mul(hd, w2, &p1));
    TU_OK(duet_sum(p1, &l1));
    assert_int_equal(duet_tape_size(), 3);
    TU_OK(duet_backward_keep_unreached(l1));
    assert_int_equal(duet_tape_size(), 1);      /* h's node survives */
    assert_null(w1->grad);
    for (int i = 0; i < 5; i++) assert_true(w2->grad[i] == h->data[i]);
    duet_tensor_zero_grad(w2);
    w2->requires_grad = false;                  /* frozen, as the generator step */
    TU_OK(duet_mul(h, w2, &p2));
    TU_OK(duet_sum(p2, &l2));
    TU_OK(duet_backward(l2));
    assert_int_equal(duet_tape_size(), 0);
    assert_non_null(w1->grad);
    for (int i = 0; i < 5; i++) assert_true(w1->grad[i] == x->data[i] * w2->data[i]);
    duet_tensor *ts[9] = {x, w1, w2, h, hd, p1, l1, p2, l2};
    for (int i = 0; i < 9; i++) duet_tensor_release(ts[i]);
}

/* The plain duet_backward still frees everything, the unreached nodes too. */
static void test_plain_backward_clears(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(2, 0);
    const int64_t s[1] = {3};
    duet_tensor *a = tu_randn(&rng, 1, s, 1.0f), *b = tu_randn(&rng, 1, s, 1.0f);
    a->requires_grad = true;
    b->requires_grad = true;
    duet_tensor *u = NULL, *v = NULL, *l = NULL;
    TU_OK(duet_scale(a, 2.0f, &u));
    TU_OK(duet_scale(b, 3.0f, &v));
    TU_OK(duet_sum(v, &l));
    TU_OK(duet_backward(l));
    assert_int_equal(duet_tape_size(), 0);
    assert_null(u->grad_fn);
    duet_tensor *ts[5] = {a, b, u, v, l};
    for (int i = 0; i < 5; i++) duet_tensor_release(ts[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_unreached),
        cmocka_unit_test(test_plain_backward_clears),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
