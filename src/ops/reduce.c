/* Reductions to a scalar of shape [1]: sum and mean over every element,
 * and expand_scalar, their backward in recorded ops. */
#include "ops/ops_internal.h"

/* gx += g (the output's gradient times 1 or 1/numel) */
static void fill_add_backward(float *gx, float g, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += g;
}

static int reduce_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)in, (void)params, (void)record, (void)dev;
    plan->ndim = 1;
    plan->shape[0] = 1;
    return DUET_OK;
}

static int sum_k(const duet__op_args *a) {
    a->out->data[0] = (float)duet__sum_f32(a->in[0]->data, a->in[0]->numel);
    return DUET_OK;
}

static int mean_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    a->out->data[0] = (float)(duet__sum_f32(x->data, x->numel) / (double)x->numel);
    return DUET_OK;
}

static int sum_backward_k(const duet__op_args *a) {
    fill_add_backward(a->gin[0], a->gout[0], a->in[0]->numel);
    return DUET_OK;
}

static int mean_backward_k(const duet__op_args *a) {
    const int64_t n = a->in[0]->numel;
    fill_add_backward(a->gin[0], (float)(a->gout[0] / (double)n), n);
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

const duet__op_def duet__op_def_sum = {
    .id = DUET__OP_SUM,
    .inputs = "x",
    .check = reduce_check,
    .forward = {DUET__OP_CPU_SIM(sum_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sum)},
    .backward = {DUET__OP_CPU_SIM(sum_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sum_backward)},
    .graph_backward = sum_graph,
};

const duet__op_def duet__op_def_mean = {
    .id = DUET__OP_MEAN,
    .inputs = "x",
    .check = reduce_check,
    .forward = {DUET__OP_CPU_SIM(mean_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mean)},
    .backward = {DUET__OP_CPU_SIM(mean_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mean_backward)},
    .graph_backward = mean_graph,
};

int duet_sum(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SUM, NULL, out, x);
}

int duet_mean(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_MEAN, NULL, out, x);
}

/* ---- expand_scalar: s * g (one element) broadcast to a shape ------------------- */

typedef struct expand_params {
    int ndim;
    int64_t shape[DUET_MAX_DIMS];
    float s;
} expand_params;

static int expand_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const expand_params *p = params;
    if (in[0]->numel != 1) {
        char sg[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "expand_scalar: g %s must hold one element",
                           duet_shape_str(in[0], sg, sizeof sg));
    }
    plan->ndim = p->ndim;
    for (int d = 0; d < DUET_MAX_DIMS; d++) plan->shape[d] = d < p->ndim ? p->shape[d] : 1;
    return DUET_OK;
}

static int expand_k(const duet__op_args *a) {
    const float v = ((const expand_params *)a->params)->s * a->in[0]->data[0];
    for (int64_t i = 0; i < a->out->numel; i++) a->out->data[i] = v;
    return DUET_OK;
}

/* gg += s * sum(gout), summed as sum's forward */
static int expand_backward_k(const duet__op_args *a) {
    const float s = ((const expand_params *)a->params)->s;
    a->gin[0][0] += s * (float)duet__sum_f32(a->gout, a->out->numel);
    return DUET_OK;
}

/* In recorded ops: s * sum(gy). */
static int expand_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (!want[0]) return DUET_OK;
    const expand_params *p = duet__op_node_params(node);
    duet_tensor *s = NULL, *r = NULL;
    int rc = duet_sum(gy, &s);
    if (rc == DUET_OK) rc = duet_scale(s, p->s, &r);
    if (rc == DUET_OK) rc = duet_reshape(r, node->inputs[0]->ndim, node->inputs[0]->shape, &gx[0]);
    duet_tensor_release(s);
    duet_tensor_release(r);
    return rc;
}

const duet__op_def duet__op_def_expand_scalar = {
    .id = DUET__OP_EXPAND_SCALAR,
    .inputs = "g",
    .params_size = sizeof(expand_params),
    .check = expand_check,
    DUET__OP_CPU(expand_k, expand_backward_k),
    .graph_backward = expand_graph,
    .output_unread = true,
};

int duet__graph_expand_scalar(duet_tensor *g, int ndim, const int64_t *shape, float s,
                              duet_tensor **out) {
    DUET_ASSERT(g != NULL && ndim >= 1 && ndim <= DUET_MAX_DIMS && out != NULL);
    expand_params p = {.ndim = ndim, .s = s};
    for (int d = 0; d < ndim; d++) p.shape[d] = shape[d];
    return DUET__OP_RUN(DUET__OP_EXPAND_SCALAR, &p, out, g);
}
