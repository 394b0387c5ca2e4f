/* Internal tensor helpers for the ops layer. */
#ifndef DUET_TENSOR_INTERNAL_H
#define DUET_TENSOR_INTERNAL_H

#include "duet/tensor.h"

/* As duet_tensor_create, but the data is left uninitialised: for op outputs
 * that the op overwrites whole, so that a large activation is not zeroed
 * just before being written. */
int duet__tensor_create_uninit(duet_tensor **out, int ndim, const int64_t *shape);

#endif
