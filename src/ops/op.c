/* What every op shares (ops_internal.h): the one way an op ends its forward
 * and records on the tape, and the same-shape check of the binary ops. */
#include "ops/ops_internal.h"

int duet__op_finish(duet_tensor *y, const char *op, duet_backward_fn backward, void *ctx,
                    void (*free_ctx)(void *ctx), int ninputs, duet_tensor *const *inputs,
                    duet_tensor **out) {
    if (duet_autograd_needs_record(ninputs, inputs)) {
        int rc = duet_autograd_record(y, op, backward, ctx, free_ctx, ninputs, inputs);
        if (rc != DUET_OK) {
            duet_tensor_release(y);
            *out = NULL;
            return duet__error_context(rc, "%s", op);
        }
    } else if (free_ctx != NULL) {
        free_ctx(ctx);
    }
    *out = y;
    return DUET_OK;
}

int duet__op_check_same_shape(const char *op, const duet_tensor *a, const duet_tensor *b) {
    if (duet_tensor_same_shape(a, b)) return DUET_OK;
    char sa[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    return duet__error(DUET_ESHAPE, "%s: shapes %s and %s differ; both inputs must have the "
                       "same shape", op, duet_shape_str(a, sa, sizeof sa),
                       duet_shape_str(b, sb, sizeof sb));
}
