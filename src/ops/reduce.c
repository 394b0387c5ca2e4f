/* Reductions to a scalar of shape [1]: sum and mean over every element. */
#include "ops/ops_internal.h"

/* gx += g (the output's gradient times 1 or 1/numel) */
static void fill_add_backward(float *gx, float g, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += g;
}

static int sum_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL) fill_add_backward(gx, node->output->grad[0], node->inputs[0]->numel);
    return DUET_OK;
}

static int mean_backward(duet_node *node) {
    const int64_t n = node->inputs[0]->numel;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL) fill_add_backward(gx, (float)(node->output->grad[0] / (double)n), n);
    return DUET_OK;
}

/* In recorded ops: gy broadcast to x's shape (times 1/numel for mean). */
static int sum_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const duet_tensor *x = node->inputs[0];
    return want[0] ? duet__graph_expand_scalar(gy, x->ndim, x->shape, 1.0f, &gx[0]) : DUET_OK;
}

static int mean_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const duet_tensor *x = node->inputs[0];
    return want[0] ? duet__graph_expand_scalar(gy, x->ndim, x->shape,
                                               (float)(1.0 / (double)x->numel), &gx[0])
                   : DUET_OK;
}

static int reduce_op(const char *op, duet_backward_fn backward, bool mean, duet_tensor *x,
                     duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create(1, (int64_t[]){1}, &y));
    double s = duet__sum_f32(x->data, x->numel);
    y->data[0] = (float)(mean ? s / (double)x->numel : s);
    DUET_TRY(duet__op_finish(y, op, backward, NULL, NULL, 1, &x, out));
    duet_autograd_set_graph_backward(*out, mean ? mean_graph : sum_graph);
    return DUET_OK;
}

int duet_sum(duet_tensor *x, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "sum", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA) return DUET__ON_CUDA("sum", dev, duet__cuda_reduce_op(false, x, out));
    return reduce_op("sum", sum_backward, false, x, out);
}

int duet_mean(duet_tensor *x, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "mean", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA) return DUET__ON_CUDA("mean", dev, duet__cuda_reduce_op(true, x, out));
    return reduce_op("mean", mean_backward, true, x, out);
}
