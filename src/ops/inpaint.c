/* The inpaintors' own arithmetic (mmedit/models/inpaintors, losses/utils.py,
 * common/model_utils.py): the composite of an output with the known pixels
 * under a mask, the L1 loss weighted by a mask, and patches cut out at a
 * box per sample. A mask has one channel that stands for all of an image's
 * (N, 1, H, W), or the image's channels; it is a constant (the data's),
 * never differentiated. CPU. */
#include "ops/ops_internal.h"

#include <math.h>

/* Whether mask (N, 1 or C, H, W) fits x (N, C, H, W); its channel count in
 * *mc. */
static int check_mask(const char *op, const duet_tensor *x, const duet_tensor *mask, int64_t *mc) {
    if (x->ndim != 4 || mask->ndim != 4 || mask->shape[0] != x->shape[0] ||
        mask->shape[2] != x->shape[2] || mask->shape[3] != x->shape[3] ||
        (mask->shape[1] != 1 && mask->shape[1] != x->shape[1]))
        return duet__error(DUET_ESHAPE, "%s: the mask (%lld, %lld, %lld, %lld) does not fit the "
                           "image (%lld, %lld, %lld, %lld): it needs the image's N, H, W and 1 "
                           "or the image's channels", op, (long long)mask->shape[0],
                           (long long)mask->shape[1], (long long)mask->shape[2],
                           (long long)mask->shape[3], (long long)x->shape[0],
                           (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3]);
    *mc = mask->shape[1];
    return DUET_OK;
}

/* The mask's value for element i of x (N, C, HW plane size hw). */
static inline float mask_at(const float *m, int64_t mc, int64_t c_count, int64_t hw, int64_t i) {
    if (mc == c_count) return m[i];
    const int64_t n = i / (c_count * hw), p = i % hw;
    return m[n * hw + p];
}

/* ---- composite: keep * (1 - mask) + fill * mask ------------------------------ */

typedef struct composite_ctx {
    duet_tensor *mask;
} composite_ctx;

static void composite_free(void *p) {
    composite_ctx *c = p;
    if (c == NULL) return;
    duet_tensor_release(c->mask);
    free(c);
}

static int composite_backward(duet_node *node) {
    const composite_ctx *c = node->ctx;
    const duet_tensor *y = node->output;
    const int64_t C = y->shape[1], hw = y->shape[2] * y->shape[3], mc = c->mask->shape[1];
    float *gk = duet_node_input_grad(node, 0), *gf = duet_node_input_grad(node, 1);
    for (int64_t i = 0; i < y->numel; i++) {
        const float m = mask_at(c->mask->data, mc, C, hw, i), g = y->grad[i];
        if (gk != NULL) gk[i] += g * (1.0f - m);
        if (gf != NULL) gf[i] += g * m;
    }
    return DUET_OK;
}

int duet_mask_composite(duet_tensor *keep, duet_tensor *fill, duet_tensor *mask,
                        duet_tensor **out) {
    DUET_ASSERT(keep != NULL && fill != NULL && mask != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "mask_composite", "keep,fill,mask", keep, fill, mask);
    if (!duet_tensor_same_shape(keep, fill))
        return duet__error(DUET_ESHAPE, "mask_composite: keep and fill differ in shape");
    int64_t mc = 0;
    DUET_TRY(check_mask("mask_composite", keep, mask, &mc));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(keep->ndim, keep->shape, &y));
    const int64_t C = keep->shape[1], hw = keep->shape[2] * keep->shape[3];
    for (int64_t i = 0; i < y->numel; i++) {
        const float m = mask_at(mask->data, mc, C, hw, i);
        /* MMEditing's order: keep * (1. - mask) + fill * mask. */
        y->data[i] = keep->data[i] * (1.0f - m) + fill->data[i] * m;
    }
    duet_tensor *ins[2] = {keep, fill};
    composite_ctx *c = NULL;
    if (duet_autograd_needs_record(2, ins)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "mask_composite: out of memory recording the op");
        }
        c->mask = duet_tensor_retain(mask);
    }
    return duet__op_finish(y, "mask_composite", composite_backward, c, composite_free, 2, ins,
                           out);
}

/* ---- L1 weighted by a mask --------------------------------------------------- */

typedef struct masked_l1_ctx {
    duet_tensor *target, *mask;
    float scale; /* weight / (sum of the expanded mask + eps) */
} masked_l1_ctx;

static void masked_l1_free(void *p) {
    masked_l1_ctx *c = p;
    if (c == NULL) return;
    duet_tensor_release(c->target);
    duet_tensor_release(c->mask);
    free(c);
}

static int masked_l1_backward(duet_node *node) {
    float *gp = duet_node_input_grad(node, 0);
    if (gp == NULL) return DUET_OK;
    const masked_l1_ctx *c = node->ctx;
    const duet_tensor *p = node->inputs[0];
    const int64_t C = p->shape[1], hw = p->shape[2] * p->shape[3], mc = c->mask->shape[1];
    const float g = node->output->grad[0] * c->scale;
    for (int64_t i = 0; i < p->numel; i++) {
        const float d = p->data[i] - c->target->data[i];
        const float s = d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f;
        gp[i] += g * s * mask_at(c->mask->data, mc, C, hw, i);
    }
    return DUET_OK;
}

int duet_l1_loss_masked(duet_tensor *pred, duet_tensor *target, duet_tensor *mask, float weight,
                        duet_tensor **out) {
    DUET_ASSERT(pred != NULL && target != NULL && mask != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "l1_loss_masked", "pred,target,mask", pred, target, mask);
    if (!duet_tensor_same_shape(pred, target))
        return duet__error(DUET_ESHAPE, "l1_loss_masked: pred and target differ in shape");
    int64_t mc = 0;
    DUET_TRY(check_mask("l1_loss_masked", pred, mask, &mc));
    const int64_t C = pred->shape[1], hw = pred->shape[2] * pred->shape[3];
    /* Sums in double, as the mean losses do; MMEditing's eps 1e-12 keeps an
     * empty mask at 0. */
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < pred->numel; i++) {
        const double m = mask_at(mask->data, mc, C, hw, i);
        num += fabs((double)pred->data[i] - (double)target->data[i]) * m;
        den += m;
    }
    const double inv = 1.0 / (den + 1e-12);
    duet_tensor *y = NULL;
    const int64_t one = 1;
    DUET_TRY(duet_tensor_create_uninit(1, &one, &y));
    y->data[0] = (float)((double)weight * num * inv);
    masked_l1_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &pred)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "l1_loss_masked: out of memory recording the op");
        }
        *c = (masked_l1_ctx){duet_tensor_retain(target), duet_tensor_retain(mask),
                             (float)((double)weight * inv)};
    }
    return duet__op_finish(y, "l1_loss_masked", masked_l1_backward, c, masked_l1_free, 1, &pred,
                           out);
}

/* ---- patches at a box per sample --------------------------------------------- */

typedef struct crop_ctx {
    int64_t *tops, *lefts;
} crop_ctx;

static void crop_free(void *p) {
    crop_ctx *c = p;
    if (c == NULL) return;
    free(c->tops);
    free(c->lefts);
    free(c);
}

static int crop_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const crop_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0], *y = node->output;
    const int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3], h = y->shape[2],
                  w = y->shape[3];
    for (int64_t n = 0; n < x->shape[0]; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < h; i++) {
                float *dst = gx + ((n * C + ch) * H + c->tops[n] + i) * W + c->lefts[n];
                const float *src = y->grad + ((n * C + ch) * h + i) * w;
                for (int64_t j = 0; j < w; j++) dst[j] += src[j];
            }
    return DUET_OK;
}

int duet_crop_boxes(duet_tensor *x, const int64_t *tops, const int64_t *lefts, int64_t h,
                    int64_t w, duet_tensor **out) {
    DUET_ASSERT(x != NULL && tops != NULL && lefts != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "crop_boxes", "x", x);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "crop_boxes: x has %d dims, not (N, C, H, W)", x->ndim);
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    if (h < 1 || w < 1)
        return duet__error(DUET_EINVAL, "crop_boxes: patch size %lldx%lld", (long long)h,
                           (long long)w);
    for (int64_t n = 0; n < N; n++)
        if (tops[n] < 0 || lefts[n] < 0 || tops[n] + h > H || lefts[n] + w > W)
            return duet__error(DUET_EINVAL, "crop_boxes: sample %lld's patch (top %lld, left "
                               "%lld, %lldx%lld) leaves its %lldx%lld image", (long long)n,
                               (long long)tops[n], (long long)lefts[n], (long long)h,
                               (long long)w, (long long)H, (long long)W);
    duet_tensor *y = NULL;
    const int64_t shape[4] = {N, C, h, w};
    DUET_TRY(duet_tensor_create_uninit(4, shape, &y));
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < h; i++)
                memcpy(y->data + ((n * C + ch) * h + i) * w,
                       x->data + ((n * C + ch) * H + tops[n] + i) * W + lefts[n],
                       (size_t)w * sizeof(float));
    crop_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        c = calloc(1, sizeof *c);
        if (c != NULL) {
            c->tops = malloc((size_t)N * sizeof *c->tops);
            c->lefts = malloc((size_t)N * sizeof *c->lefts);
        }
        if (c == NULL || c->tops == NULL || c->lefts == NULL) {
            if (c != NULL) crop_free(c);
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "crop_boxes: out of memory recording the op");
        }
        memcpy(c->tops, tops, (size_t)N * sizeof *tops);
        memcpy(c->lefts, lefts, (size_t)N * sizeof *lefts);
    }
    return duet__op_finish(y, "crop_boxes", crop_backward, c, crop_free, 1, &x, out);
}
