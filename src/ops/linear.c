/* Fully connected layer, PyTorch's F.linear: out = x w^T + b with w
 * (OUT, IN). Leading dimensions of x are batch dimensions. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>

/* rows: product of x's leading dims; in/outf: the feature sizes. */
static int linear_sizes(const duet_tensor *x, const duet_tensor *w, const duet_tensor *b,
                        int64_t *rows, int64_t *in, int64_t *outf) {
    char sx[DUET_SHAPE_STR_MAX], sw[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(w, sw, sizeof sw);
    if (w->ndim != 2)
        return duet__error(DUET_ESHAPE, "linear: weight %s must be 2-D (OUT, IN); input %s", sw,
                           sx);
    if (x->shape[x->ndim - 1] != w->shape[1])
        return duet__error(DUET_ESHAPE,
                           "linear: input %s has %" PRId64 " features but weight %s expects %"
                           PRId64, sx, x->shape[x->ndim - 1], sw, w->shape[1]);
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return duet__error(DUET_ESHAPE, "linear: bias %s does not match weight %s (want [%"
                           PRId64 "])", duet_shape_str(b, sb, sizeof sb), sw, w->shape[0]);
    *in = w->shape[1];
    *outf = w->shape[0];
    *rows = x->numel / *in;
    if (*rows > INT_MAX || *in > INT_MAX || *outf > INT_MAX)
        return duet__error(DUET_EINVAL, "linear: input %s with weight %s is too large for "
                           "32-bit BLAS sizes", sx, sw);
    return DUET_OK;
}

static int linear_backward(duet_node *node) {
    duet_tensor *x = node->inputs[0], *w = node->inputs[1], *b = node->inputs[2];
    int64_t rows, in, outf;
    DUET_TRY(linear_sizes(x, w, b, &rows, &in, &outf));
    const float *dy = node->output->grad; /* (rows, OUT) */
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = b != NULL ? duet_node_input_grad(node, 2) : NULL;
    /* dX (rows, IN) += dY (rows, OUT) W (OUT, IN) */
    if (dx != NULL)
        duet_sgemm(false, false, rows, in, outf, 1.0f, dy, outf, w->data, in, 1.0f, dx, in);
    /* dW (OUT, IN) += dY^T (OUT, rows) X (rows, IN) */
    if (dw != NULL)
        duet_sgemm(true, false, outf, in, rows, 1.0f, dy, outf, x->data, in, 1.0f, dw, in);
    if (db != NULL)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < outf; o++) db[o] += dy[r * outf + o];
    return DUET_OK;
}

/* In recorded ops, with X (rows, IN) and dY (rows, OUT) the 2-D views:
 * dX = dY W = linear(dY, W^T), dW = dY^T X = linear(dY^T, X^T), db = the
 * column sums of dY = linear(ones (1, rows), dY^T). */
static int linear_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    duet_tensor *x = node->inputs[0], *w = node->inputs[1];
    int64_t rows, in, outf;
    DUET_TRY(linear_sizes(x, w, node->inputs[2], &rows, &in, &outf));
    duet_tensor *g2 = NULL, *gt = NULL, *wt = NULL, *x2 = NULL, *xt = NULL, *ones = NULL,
                *dx2 = NULL, *db2 = NULL;
    int rc = duet_reshape(gy, 2, (int64_t[]){rows, outf}, &g2);
    if (rc == DUET_OK && (want[1] || want[2])) rc = duet_transpose2d(g2, &gt);
    if (rc == DUET_OK && want[0]) rc = duet_transpose2d(w, &wt);
    if (rc == DUET_OK && want[0]) rc = duet_linear(g2, wt, NULL, &dx2);
    if (rc == DUET_OK && want[0]) rc = duet_reshape(dx2, x->ndim, x->shape, &gx[0]);
    if (rc == DUET_OK && want[1]) rc = duet_reshape(x, 2, (int64_t[]){rows, in}, &x2);
    if (rc == DUET_OK && want[1]) rc = duet_transpose2d(x2, &xt);
    if (rc == DUET_OK && want[1]) rc = duet_linear(gt, xt, NULL, &gx[1]);
    if (rc == DUET_OK && want[2]) rc = duet_tensor_create(2, (int64_t[]){1, rows}, &ones);
    if (rc == DUET_OK && want[2]) rc = duet_tensor_fill(ones, 1.0f);
    if (rc == DUET_OK && want[2]) rc = duet_linear(ones, gt, NULL, &db2);
    if (rc == DUET_OK && want[2]) rc = duet_reshape(db2, 1, (int64_t[]){outf}, &gx[2]);
    duet_tensor *tmp[] = {g2, gt, wt, x2, xt, ones, dx2, db2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) duet_tensor_release(tmp[i]);
    return rc;
}

int duet_linear(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "linear", "x,weight,bias", &dev, x, w, b);
    int64_t rows, in, outf;
    DUET_TRY(linear_sizes(x, w, b, &rows, &in, &outf));
    int64_t shape[DUET_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) shape[d] = x->shape[d];
    shape[x->ndim - 1] = outf;
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("linear", dev, duet__cuda_linear_op(x, w, b, rows, in, outf, x->ndim,
                                                                 shape, out));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, shape, &y));
    if (b != NULL)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < outf; o++) y->data[r * outf + o] = b->data[o];
    /* Y (rows, OUT) = X (rows, IN) W^T (IN, OUT) (+ the bias already there) */
    duet_sgemm(false, true, rows, outf, in, 1.0f, x->data, in, w->data, in,
               b != NULL ? 1.0f : 0.0f, y->data, outf);
    duet_tensor *ins[3] = {x, w, b};
    DUET_TRY(duet__op_finish(y, "linear", linear_backward, NULL, NULL, 3, ins, out));
    duet_autograd_set_graph_backward(*out, linear_graph);
    duet__op_output_unread(*out);
    return DUET_OK;
}
