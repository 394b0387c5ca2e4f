/* Private helpers shared by the element-wise, activation, resampling, shape,
 * reduction and loss ops (src/ops/{elementwise,activation,resample,shape,
 * reduce,loss}.c). */
#ifndef DUET_OPS_COMMON_H
#define DUET_OPS_COMMON_H

#include "duet/ops.h"

#include <string.h>

/* c ? a : b without a branch. GCC at -O2 compiles ?: between floats into
 * jumps, which mispredict half the time on activations of random sign (10 ns
 * instead of 0.6 ns per element); a bit mask does not, and the loop still
 * vectorises at -O3. Exact: the chosen value's bits are returned as is. */
static inline float duet__opb_pick(bool c, float a, float b) {
    uint32_t ua, ub, r;
    float f;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint32_t m = -(uint32_t)c;
    r = (ua & m) | (ub & ~m);
    memcpy(&f, &r, sizeof f);
    return f;
}

/* Ends an op's forward: when grad mode is on and one of `inputs` requires
 * grad, records `y` on the tape (taking ownership of ctx); otherwise frees
 * ctx. On success *out = y; on failure y is released, *out = NULL and the
 * status (with "op: " context) is returned. */
int duet__opb_finish(duet_tensor *y, const char *op, duet_backward_fn backward, void *ctx,
                     void (*free_ctx)(void *ctx), int ninputs, duet_tensor *const *inputs,
                     duet_tensor **out);

/* DUET_ESHAPE "op: shapes [..] and [..] differ" unless a and b have the same
 * shape; DUET_OK otherwise. */
int duet__opb_check_same_shape(const char *op, const duet_tensor *a, const duet_tensor *b);

#endif
