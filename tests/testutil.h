/* Shared helpers for duet's cmocka tests: tensors from seeds, closeness
 * checks that print the index and both values, the finite-difference
 * gradient check, and access to the PyTorch reference files. */
#ifndef DUET_TESTUTIL_H
#define DUET_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "duet/duet.h"

/* Fails the test (with duet_last_error()) unless expr returns DUET_OK. */
#define TU_OK(expr)                                                             \
    do {                                                                        \
        int tu__rc = (expr);                                                    \
        if (tu__rc != DUET_OK)                                                  \
            fail_msg("%s returned %s: %s", #expr, duet_err_name(tu__rc),       \
                     duet_last_error());                                        \
    } while (0)

/* New tensor of the shape with N(0,1)*scale values; never NULL. */
duet_tensor *tu_randn(duet_rng *rng, int ndim, const int64_t *shape, float scale);
/* Uniform in [lo, hi). */
duet_tensor *tu_rand(duet_rng *rng, int ndim, const int64_t *shape, float lo, float hi);
duet_tensor *tu_zeros(int ndim, const int64_t *shape);

/* |got - want| <= atol + rtol*|want| elementwise; on failure prints `what`,
 * the first bad index, both values and the largest error. */
void tu_assert_close(const float *got, const float *want, int64_t n, double rtol, double atol,
                     const char *what);

/* An op under test: builds its output from the inputs (recorded on the tape
 * when inputs require grad). */
typedef int (*tu_op_fn)(void *ctx, duet_tensor *const *inputs, duet_tensor **out);

/* Central finite differences of L = sum(out * R) for a fixed random R,
 * against the gradients autograd gives, for every input with requires_grad
 * (up to max_per_input elements each, chosen at random). Fails the test on
 * |num - ana| > atol + rtol*|num|. eps is the perturbation (1e-2 suits
 * float32 for smooth ops). */
void tu_gradcheck(tu_op_fn fn, void *ctx, int n, duet_tensor *const *inputs, double eps,
                  double rtol, double atol, int max_per_input);

/* The reference directory (env DUET_REF_DIR); fails the test when unset. */
const char *tu_ref_dir(void);
/* Loads DUET_REF_DIR/<name>; fails the test loudly when missing. */
duet_st *tu_ref_load(const char *name);
/* A tensor from a reference file; fails when absent. */
duet_tensor *tu_ref_tensor(const duet_st *st, const char *name);
/* Compares t's data with the reference entry `name` (shapes must agree). */
void tu_assert_ref(const duet_st *st, const char *name, const float *got, int64_t n,
                   double rtol, double atol);

#endif
