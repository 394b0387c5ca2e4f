/* Max pooling without padding, PyTorch's max_pool2d: the first maximum in
 * row-major window order wins, and a NaN in the window propagates. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>

/* max_pool2d's params; saved buffer 0: the argmax (N, C, OH, OW), each an
 * index in its input plane (H*W), when recorded. */
typedef struct pool_params {
    int kernel, stride;
} pool_params;

static int max_pool_backward_k(const duet__op_args *a) {
    const pool_params *p = a->params;
    (void)p;
    const duet_tensor *x = a->in[0], *y = a->out;
    const int32_t *argmax = a->saved[0];
    float *dx = a->gin[0];
    const int64_t planes = x->shape[0] * x->shape[1];
    const int64_t hw = x->shape[2] * x->shape[3], ohw = y->shape[2] * y->shape[3];
    const float *dy = a->gout;
    /* Each plane's window maxima lie in its own plane of dx. */
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t q = 0; q < ohw; q++)
            dx[pl * hw + argmax[pl * ohw + q]] += dy[pl * ohw + q];
    return DUET_OK;
}

/* One plane of a 2x2 stride-2 max pool (VGG's and the tiny models' only
 * kind), the same rule as the general loop without its branches: a window's
 * four values in row-major order, each taking over when the maximum so far
 * is not NaN and it is not <= it (greater, or NaN): the first maximum wins
 * and the first NaN sticks. Also compiled for AVX2 and AVX-512, picked at
 * load time; comparisons and selects only, so the same result from each.
 * argmax may be NULL. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void pool2x2_plane(float *restrict py, int32_t *restrict argmax, const float *restrict px,
                          int64_t w, int64_t oh, int64_t ow) {
    for (int64_t i = 0; i < oh; i++) {
        const float *r0 = px + 2 * i * w, *r1 = r0 + w;
        const int32_t base = (int32_t)(2 * i * w);
        for (int64_t j = 0; j < ow; j++) {
            const float v[4] = {r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1]};
            const int32_t at[4] = {base + (int32_t)(2 * j), base + (int32_t)(2 * j + 1),
                                   base + (int32_t)(w + 2 * j), base + (int32_t)(w + 2 * j + 1)};
            float m = v[0];
            int32_t best = at[0];
            for (int k = 1; k < 4; k++) {
                const bool take = m == m && !(v[k] <= m);
                m = take ? v[k] : m;
                best = take ? at[k] : best;
            }
            py[i * ow + j] = m;
            if (argmax != NULL) argmax[i * ow + j] = best;
        }
    }
}

static int max_pool_check(int nin, duet_tensor *const *in, void *params, bool record,
                          duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)dev;
    const pool_params *p = params;
    const int kernel = p->kernel, stride = p->stride;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    if (kernel < 1 || stride < 1)
        return duet__error(DUET_EINVAL, "max_pool2d: kernel %d and stride %d must be >= 1",
                           kernel, stride);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "max_pool2d: input %s must be 4-D (N, C, H, W)", sx);
    const int64_t h = x->shape[2], w = x->shape[3];
    if (h < kernel || w < kernel)
        return duet__error(DUET_ESHAPE, "max_pool2d: input %s is smaller than the %dx%d window",
                           sx, kernel, kernel);
    if (h * w > INT32_MAX)
        return duet__error(DUET_EINVAL, "max_pool2d: input %s has too large planes", sx);
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = (h - kernel) / stride + 1;
    plan->shape[3] = (w - kernel) / stride + 1;
    if (record)
        plan->saved_bytes[0] = (size_t)(x->shape[0] * x->shape[1] * plan->shape[2] *
                                        plan->shape[3]) * sizeof(int32_t);
    return DUET_OK;
}

static int max_pool_k(const duet__op_args *a) {
    const pool_params *p = a->params;
    const int kernel = p->kernel, stride = p->stride;
    const duet_tensor *x = a->in[0];
    duet_tensor *y = a->out;
    int32_t *argmax = a->saved[0];
    const int64_t h = x->shape[2], w = x->shape[3], oh = y->shape[2], ow = y->shape[3];
    const int64_t planes = x->shape[0] * x->shape[1];
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *px = x->data + pl * h * w;
        float *py = y->data + pl * oh * ow;
        if (kernel == 2 && stride == 2) {
            pool2x2_plane(py, argmax != NULL ? argmax + pl * oh * ow : NULL, px, w, oh, ow);
            continue;
        }
        for (int64_t i = 0; i < oh; i++) {
            for (int64_t j = 0; j < ow; j++) {
                int64_t best = i * stride * w + j * stride;
                float m = px[best];
                for (int64_t a2 = 0; a2 < kernel && !isnan(m); a2++) {
                    for (int64_t b = 0; b < kernel; b++) {
                        int64_t idx = (i * stride + a2) * w + j * stride + b;
                        float v = px[idx];
                        if (v > m || isnan(v)) {
                            m = v;
                            best = idx;
                            if (isnan(v)) break;
                        }
                    }
                }
                py[i * ow + j] = m;
                if (argmax != NULL) argmax[pl * oh * ow + i * ow + j] = (int32_t)best;
            }
        }
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_max_pool2d = {
    .id = DUET__OP_MAX_POOL2D,
    .inputs = "x",
    .params_size = sizeof(pool_params),
    .check = max_pool_check,
    DUET__OP_CPU(max_pool_k, max_pool_backward_k),
    .output_unread = true,
};

int duet_max_pool2d(duet_tensor *x, int kernel, int stride, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_MAX_POOL2D, (&(pool_params){kernel, stride}), out, x);
}
