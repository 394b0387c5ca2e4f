/* Max pooling without padding, PyTorch's max_pool2d: the first maximum in
 * row-major window order wins, and a NaN in the window propagates. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>

typedef struct pool_ctx {
    int32_t *argmax; /* (N, C, OH, OW): index in the input plane (H*W) */
} pool_ctx;

static void pool_ctx_free(void *p) {
    pool_ctx *c = p;
    if (c == NULL) return;
    free(c->argmax);
    free(c);
}

static int max_pool_backward(duet_node *node) {
    const pool_ctx *c = node->ctx;
    duet_tensor *x = node->inputs[0], *y = node->output;
    float *dx = duet_node_input_grad(node, 0);
    if (dx == NULL) return DUET_OK;
    const int64_t planes = x->shape[0] * x->shape[1];
    const int64_t hw = x->shape[2] * x->shape[3], ohw = y->shape[2] * y->shape[3];
    const float *dy = y->grad;
    /* Each plane's window maxima lie in its own plane of dx. */
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t q = 0; q < ohw; q++)
            dx[pl * hw + c->argmax[pl * ohw + q]] += dy[pl * ohw + q];
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

int duet_max_pool2d(duet_tensor *x, int kernel, int stride, duet_tensor **out) {
    DUET__OP_ON_CPU(out, "max_pool2d", "x", x);
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
    const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
    const int64_t planes = x->shape[0] * x->shape[1];
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){x->shape[0], x->shape[1], oh, ow}, &y));
    bool record = duet_autograd_needs_record(1, &x);
    pool_ctx *c = NULL;
    if (record) {
        c = calloc(1, sizeof *c);
        if (c != NULL) c->argmax = malloc((size_t)y->numel * sizeof(int32_t));
        if (c == NULL || c->argmax == NULL) {
            pool_ctx_free(c);
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "max_pool2d: out of memory for the argmax of %s",
                               sx);
        }
    }
#pragma omp parallel for num_threads(duet__par_threads(x->numel)) schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *px = x->data + pl * h * w;
        float *py = y->data + pl * oh * ow;
        if (kernel == 2 && stride == 2) {
            pool2x2_plane(py, c != NULL ? c->argmax + pl * oh * ow : NULL, px, w, oh, ow);
            continue;
        }
        for (int64_t i = 0; i < oh; i++) {
            for (int64_t j = 0; j < ow; j++) {
                int64_t best = i * stride * w + j * stride;
                float m = px[best];
                for (int64_t a = 0; a < kernel && !isnan(m); a++) {
                    for (int64_t b = 0; b < kernel; b++) {
                        int64_t idx = (i * stride + a) * w + j * stride + b;
                        float v = px[idx];
                        if (v > m || isnan(v)) {
                            m = v;
                            best = idx;
                            if (isnan(v)) break;
                        }
                    }
                }
                py[i * ow + j] = m;
                if (c != NULL) c->argmax[pl * oh * ow + i * ow + j] = (int32_t)best;
            }
        }
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "max_pool2d", max_pool_backward, c, pool_ctx_free, 1, &x, out), out);
}
