/* Reflection padding (nn.ReflectionPad2d): output pixel (oh, ow) reads
 * input pixel (reflect(oh - top, H), reflect(ow - left, W)), where
 * reflect(i, n) mirrors i about the edges without repeating them
 * (-1 -> 1, n -> n-2). The backward adds each output gradient back to the
 * pixel it was read from, so edge-near pixels collect several. */
#include "ops/ops_internal.h"


typedef struct pad_params {
    int left, right, top, bottom;
} pad_params;

/* Valid for -n < i < 2n - 1, which the padding check guarantees. */
static int64_t reflect(int64_t i, int64_t n) {
    if (i < 0) return -i;
    if (i >= n) return 2 * (n - 1) - i;
    return i;
}

/* out (N*C, OH, OW) from x (N*C, H, W) */
static void reflection_pad_forward(float *out, const float *x, int64_t planes, int64_t h,
                                   int64_t w, int64_t oh, int64_t ow, int top, int left) {
    for (int64_t q = 0; q < planes; q++)
        for (int64_t i = 0; i < oh; i++) {
            const float *src = x + (q * h + reflect(i - top, h)) * w;
            float *dst = out + (q * oh + i) * ow;
            for (int64_t j = 0; j < ow; j++) dst[j] = src[reflect(j - left, w)];
        }
}

/* gx (N*C, H, W) += each gout (N*C, OH, OW) at the pixel it came from */
static void reflection_pad_backward(float *gx, const float *gout, int64_t planes, int64_t h,
                                    int64_t w, int64_t oh, int64_t ow, int top, int left) {
    for (int64_t q = 0; q < planes; q++)
        for (int64_t i = 0; i < oh; i++) {
            float *dst = gx + (q * h + reflect(i - top, h)) * w;
            const float *src = gout + (q * oh + i) * ow;
            for (int64_t j = 0; j < ow; j++) dst[reflect(j - left, w)] += src[j];
        }
}

static int pad_check(int nin, duet_tensor *const *in, void *params, bool record,
                     duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const pad_params *p = params;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "reflection_pad2d: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    const int64_t h = x->shape[2], w = x->shape[3];
    if (p->left < 0 || p->right < 0 || p->top < 0 || p->bottom < 0 || p->left >= w ||
        p->right >= w || p->top >= h || p->bottom >= h)
        return duet__error(DUET_ESHAPE, "reflection_pad2d: padding (left %d, right %d, top %d, "
                           "bottom %d) does not fit input %s: each must be >= 0 and smaller "
                           "than the dimension it pads", p->left, p->right, p->top, p->bottom,
                           duet_shape_str(x, sx, sizeof sx));
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = h + p->top + p->bottom;
    plan->shape[3] = w + p->left + p->right;
    return DUET_OK;
}

static int pad_k(const duet__op_args *a) {
    const pad_params *p = a->params;
    const duet_tensor *x = a->in[0], *y = a->out;
    reflection_pad_forward(y->data, x->data, x->shape[0] * x->shape[1], x->shape[2],
                           x->shape[3], y->shape[2], y->shape[3], p->top, p->left);
    return DUET_OK;
}

static int pad_backward_k(const duet__op_args *a) {
    const pad_params *p = a->params;
    const duet_tensor *x = a->in[0], *y = a->out;
    reflection_pad_backward(a->gin[0], a->gout, x->shape[0] * x->shape[1], x->shape[2],
                            x->shape[3], y->shape[2], y->shape[3], p->top, p->left);
    return DUET_OK;
}

const duet__op_def duet__op_def_reflection_pad2d = {
    .id = DUET__OP_REFLECTION_PAD2D,
    .inputs = "x",
    .params_size = sizeof(pad_params),
    .check = pad_check,
    DUET__OP_CPU(pad_k, pad_backward_k),
};

int duet_reflection_pad2d(duet_tensor *x, int left, int right, int top, int bottom,
                          duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_REFLECTION_PAD2D, (&(pad_params){left, right, top, bottom}), out,
                        x);
}
