/* Reflection padding (nn.ReflectionPad2d): output pixel (oh, ow) reads
 * input pixel (reflect(oh - top, H), reflect(ow - left, W)), where
 * reflect(i, n) mirrors i about the edges without repeating them
 * (-1 -> 1, n -> n-2). The backward adds each output gradient back to the
 * pixel it was read from, so edge-near pixels collect several. */
#include "ops/ops_internal.h"

#include <inttypes.h>

typedef struct pad_ctx {
    int left, top;
} pad_ctx;

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

static int reflection_pad2d_backward(duet_node *node) {
    const pad_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *x = node->inputs[0], *y = node->output;
    reflection_pad_backward(gx, y->grad, x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                            y->shape[2], y->shape[3], c->top, c->left);
    return DUET_OK;
}

int duet_reflection_pad2d(duet_tensor *x, int left, int right, int top, int bottom,
                          duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "reflection_pad2d", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "reflection_pad2d: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    const int64_t h = x->shape[2], w = x->shape[3];
    if (left < 0 || right < 0 || top < 0 || bottom < 0 || left >= w || right >= w ||
        top >= h || bottom >= h)
        return duet__error(DUET_ESHAPE, "reflection_pad2d: padding (left %d, right %d, top %d, "
                           "bottom %d) does not fit input %s: each must be >= 0 and smaller "
                           "than the dimension it pads", left, right, top, bottom,
                           duet_shape_str(x, sx, sizeof sx));
    const int64_t oh = h + top + bottom, ow = w + left + right;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){x->shape[0], x->shape[1], oh, ow}, &y));
    reflection_pad_forward(y->data, x->data, x->shape[0] * x->shape[1], h, w, oh, ow, top, left);
    pad_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "reflection_pad2d: out of memory recording the op");
        }
        *c = (pad_ctx){left, top};
    }
    return duet__op_finish(y, "reflection_pad2d", reflection_pad2d_backward, c, free, 1, &x,
                            out);
}
