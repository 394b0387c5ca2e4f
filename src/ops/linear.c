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

/* The sizes linear_sizes found, for the kernels. */
typedef struct linear_params {
    int64_t rows, in, outf;
} linear_params;

static int linear_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    linear_params *p = params;
    const duet_tensor *x = in[0];
    DUET_TRY(linear_sizes(x, in[1], in[2], &p->rows, &p->in, &p->outf));
    duet__op_plan_like(plan, x);
    plan->shape[x->ndim - 1] = p->outf;
    return DUET_OK;
}

static int linear_k(const duet__op_args *a) {
    const linear_params *p = a->params;
    const duet_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
    float *y = a->out->data;
    if (b != NULL)
        for (int64_t r = 0; r < p->rows; r++)
            for (int64_t o = 0; o < p->outf; o++) y[r * p->outf + o] = b->data[o];
    /* Y (rows, OUT) = X (rows, IN) W^T (IN, OUT) (+ the bias already there) */
    duet_sgemm(false, true, p->rows, p->outf, p->in, 1.0f, x->data, p->in, w->data, p->in,
               b != NULL ? 1.0f : 0.0f, y, p->outf);
    return DUET_OK;
}

static int linear_backward_k(const duet__op_args *a) {
    const linear_params *p = a->params;
    const int64_t rows = p->rows, in = p->in, outf = p->outf;
    const duet_tensor *x = a->in[0], *w = a->in[1];
    const float *dy = a->gout; /* (rows, OUT) */
    float *dx = a->gin[0], *dw = a->gin[1], *db = a->nin > 2 ? a->gin[2] : NULL;
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
 * column sums of dY = linear(ones (1, rows), dY^T), the ones on gy's
 * device. */
static int linear_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    duet_tensor *x = node->inputs[0], *w = node->inputs[1];
    const linear_params *p = duet__op_node_params(node);
    const int64_t rows = p->rows, in = p->in, outf = p->outf;
    const duet_device dev = duet_tensor_device(gy);
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
    if (rc == DUET_OK && want[2]) rc = duet_tensor_create_on(dev, 2, (int64_t[]){1, rows}, &ones);
    if (rc == DUET_OK && want[2])
        rc = duet__device_fill_f32(dev, ones->data, (size_t)rows, 1.0f, "linear");
    if (rc == DUET_OK && want[2]) rc = duet_linear(ones, gt, NULL, &db2);
    if (rc == DUET_OK && want[2]) rc = duet_reshape(db2, 1, (int64_t[]){outf}, &gx[2]);
    duet_tensor *tmp[] = {g2, gt, wt, x2, xt, ones, dx2, db2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) duet_tensor_release(tmp[i]);
    return rc;
}

const duet__op_def duet__op_def_linear = {
    .id = DUET__OP_LINEAR,
    .inputs = "x,weight,bias",
    .params_size = sizeof(linear_params),
    .check = linear_check,
    .forward = {DUET__OP_CPU_SIM(linear_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_linear)},
    .backward = {DUET__OP_CPU_SIM(linear_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_linear_backward)},
    .graph_backward = linear_graph,
    .output_unread = true,
};

int duet_linear(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(x != NULL && w != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_LINEAR, (&(linear_params){0}), out, x, w, b);
}
