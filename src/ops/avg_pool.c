/* Average pooling without padding, PyTorch's avg_pool2d with padding 0 and
 * ceil_mode False (count_include_pad then changes nothing): SPyNet's
 * pyramid (kernel 2, stride 2). */
#include "ops/ops_internal.h"

#include <inttypes.h>

typedef struct avg_pool_params {
    int kernel, stride;
} avg_pool_params;

static int avg_pool_check(int nin, duet_tensor *const *in, void *params, bool record,
                          duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const avg_pool_params *p = params;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    if (p->kernel < 1 || p->stride < 1)
        return duet__error(DUET_EINVAL, "avg_pool2d: kernel %d and stride %d must be >= 1",
                           p->kernel, p->stride);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "avg_pool2d: input %s must be 4-D (N, C, H, W)", sx);
    if (x->shape[2] < p->kernel || x->shape[3] < p->kernel)
        return duet__error(DUET_ESHAPE, "avg_pool2d: input %s is smaller than the %dx%d window",
                           sx, p->kernel, p->kernel);
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = (x->shape[2] - p->kernel) / p->stride + 1;
    plan->shape[3] = (x->shape[3] - p->kernel) / p->stride + 1;
    return DUET_OK;
}

/* The window's sum in row-major order, then divided by its size, as
 * PyTorch's CPU kernel. */
static int avg_pool_k(const duet__op_args *a) {
    const avg_pool_params *p = a->params;
    const int64_t k = p->kernel, s = p->stride;
    const duet_tensor *x = a->in[0], *y = a->out;
    const int64_t h = x->shape[2], w = x->shape[3], oh = y->shape[2], ow = y->shape[3];
    const int64_t planes = x->shape[0] * x->shape[1];
    const float div = (float)(k * k);
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *px = x->data + pl * h * w;
        float *py = y->data + pl * oh * ow;
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                float sum = 0.0f;
                for (int64_t u = 0; u < k; u++)
                    for (int64_t v = 0; v < k; v++) sum += px[(i * s + u) * w + j * s + v];
                py[i * ow + j] = sum / div;
            }
    }
    return DUET_OK;
}

static int avg_pool_backward_k(const duet__op_args *a) {
    const avg_pool_params *p = a->params;
    const int64_t k = p->kernel, s = p->stride;
    const duet_tensor *x = a->in[0], *y = a->out;
    const int64_t h = x->shape[2], w = x->shape[3], oh = y->shape[2], ow = y->shape[3];
    const int64_t planes = x->shape[0] * x->shape[1];
    const float div = (float)(k * k);
    float *gx = a->gin[0];
    /* Windows of one plane scatter into that plane of gx only. */
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *g = a->gout + pl * oh * ow;
        float *gp = gx + pl * h * w;
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                const float gv = g[i * ow + j] / div;
                for (int64_t u = 0; u < k; u++)
                    for (int64_t v = 0; v < k; v++) gp[(i * s + u) * w + j * s + v] += gv;
            }
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_avg_pool2d = {
    .id = DUET__OP_AVG_POOL2D,
    .inputs = "x",
    .params_size = sizeof(avg_pool_params),
    .check = avg_pool_check,
    DUET__OP_CPU(avg_pool_k, avg_pool_backward_k),
    .output_unread = true,
};

int duet_avg_pool2d(duet_tensor *x, int kernel, int stride, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_AVG_POOL2D, (&(avg_pool_params){kernel, stride}), out, x);
}
