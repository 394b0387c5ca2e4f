/* Resampling and feature statistics that ESRGAN and MMEditing's losses
 * need beside resample.c's: nearest-neighbour upsampling by an integer
 * factor (RRDBNet's F.interpolate(scale_factor=2, mode='nearest')),
 * bilinear resizing to a given size with align_corners=True (GANLoss
 * 'smgan' when the discriminator's map and the mask differ in size), and
 * the Gram matrix of PerceptualLoss's style term, and ESRGAN's
 * pred - mean(other pred). All as PyTorch. */
#include "ops/ops_internal.h"

#include <inttypes.h>

/* ---- nearest ------------------------------------------------------------------------
 * out[n, c, y, x] = x[n, c, y / f, x / f]: PyTorch's nearest source index
 * floor(dst * (1 / f)) is exactly dst / f for an integer factor. */

/* out (NC, H*f, W*f) from x (NC, H, W) */
static void nearest_forward(float *out, const float *x, int64_t nc, int64_t h, int64_t w, int f) {
    const int64_t ow = w * f;
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * h * ow * f)) schedule(static)
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < h; y++) {
            const float *xrow = x + (p * h + y) * w;
            float *orow = out + (p * h + y) * f * ow;
            for (int64_t k = 0; k < ow; k++) orow[k] = xrow[k / f];
            for (int i = 1; i < f; i++) memcpy(orow + i * ow, orow, (size_t)ow * sizeof *orow);
        }
}

/* gx (NC, H, W) += the sum of gout (NC, H*f, W*f) over each f x f block */
static void nearest_backward(float *gx, const float *gout, int64_t nc, int64_t h, int64_t w,
                             int f) {
    const int64_t ow = w * f;
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * h * ow * f)) schedule(static)
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < h; y++) {
            float *gxrow = gx + (p * h + y) * w;
            for (int i = 0; i < f; i++) {
                const float *grow = gout + ((p * h + y) * f + i) * ow;
                for (int64_t k = 0; k < ow; k++) gxrow[k / f] += grow[k];
            }
        }
}

typedef struct nearest_ctx {
    int factor;
} nearest_ctx;

static int nearest_backward_node(duet_node *node) {
    const nearest_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        nearest_backward(gx, node->output->grad, x->shape[0] * x->shape[1], x->shape[2],
                         x->shape[3], c->factor);
    return DUET_OK;
}

int duet_upsample_nearest(duet_tensor *x, int factor, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "upsample_nearest", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (factor < 1)
        return duet__error(DUET_EINVAL, "upsample_nearest: scale factor %d; it must be at "
                           "least 1", factor);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "upsample_nearest: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){n, c, h * factor, w * factor}, &y));
    nearest_forward(y->data, x->data, n * c, h, w, factor);
    nearest_ctx *nc = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        nc = malloc(sizeof *nc);
        if (nc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "upsample_nearest: out of memory");
        }
        nc->factor = factor;
    }
    return duet__op_finish(y, "upsample_nearest", nearest_backward_node, nc, free, 1, &x, out);
}

/* ---- bilinear, align_corners=True, to a size -------------------------------------
 * Output index o reads the source coordinate s = o * (in - 1) / (out - 1)
 * (0 when out is 1), between i0 = floor(s) and i1 = min(i0 + 1, in - 1),
 * weights 1 - l and l. PyTorch computes the scale and s in float
 * (area_pixel_compute_scale / area_pixel_compute_source_index with
 * align_corners), and so does this. */

typedef struct ac_axis {
    int64_t i0, i1;
    float l0, l1;
} ac_axis;

static ac_axis *ac_axis_make(int64_t in, int64_t out) {
    ac_axis *a = malloc((size_t)out * sizeof *a);
    if (a == NULL) return NULL;
    const float scale = out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
    for (int64_t o = 0; o < out; o++) {
        float s = scale * (float)o;
        int64_t i0 = (int64_t)s;
        if (i0 > in - 1) i0 = in - 1;
        float l = s - (float)i0;
        a[o].i0 = i0;
        a[o].i1 = i0 < in - 1 ? i0 + 1 : i0;
        a[o].l1 = l;
        a[o].l0 = 1.0f - l;
    }
    return a;
}

/* out (NC, OH, OW) from x (NC, H, W); gx += transpose when backward */
static void ac_apply(float *out, const float *x, int64_t nc, int64_t h, int64_t w, int64_t oh,
                     int64_t ow, const ac_axis *ay, const ac_axis *ax, bool backward) {
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < oh; y++) {
            const ac_axis Y = ay[y];
            for (int64_t k = 0; k < ow; k++) {
                const ac_axis X = ax[k];
                if (!backward) {
                    const float *xp = x + p * h * w;
                    out[(p * oh + y) * ow + k] =
                        Y.l0 * (X.l0 * xp[Y.i0 * w + X.i0] + X.l1 * xp[Y.i0 * w + X.i1]) +
                        Y.l1 * (X.l0 * xp[Y.i1 * w + X.i0] + X.l1 * xp[Y.i1 * w + X.i1]);
                } else {
                    /* here out is gx (NC, H, W) and x is gout (NC, OH, OW) */
                    float *gp = out + p * h * w;
                    const float g = x[(p * oh + y) * ow + k];
                    gp[Y.i0 * w + X.i0] += Y.l0 * X.l0 * g;
                    gp[Y.i0 * w + X.i1] += Y.l0 * X.l1 * g;
                    gp[Y.i1 * w + X.i0] += Y.l1 * X.l0 * g;
                    gp[Y.i1 * w + X.i1] += Y.l1 * X.l1 * g;
                }
            }
        }
}

static int resize_backward_node(duet_node *node) {
    const duet_tensor *x = node->inputs[0], *y = node->output;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    ac_axis *ay = ac_axis_make(x->shape[2], y->shape[2]);
    ac_axis *ax = ac_axis_make(x->shape[3], y->shape[3]);
    if (ay == NULL || ax == NULL) {
        free(ay);
        free(ax);
        return duet__error(DUET_ENOMEM, "resize_bilinear_ac backward: out of memory");
    }
    ac_apply(gx, y->grad, x->shape[0] * x->shape[1], x->shape[2], x->shape[3], y->shape[2],
             y->shape[3], ay, ax, true);
    free(ay);
    free(ax);
    return DUET_OK;
}

int duet_resize_bilinear_ac(duet_tensor *x, int64_t out_h, int64_t out_w, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "resize_bilinear_ac", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || x->shape[2] < 1 || x->shape[3] < 1)
        return duet__error(DUET_ESHAPE, "resize_bilinear_ac: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    if (out_h < 1 || out_w < 1)
        return duet__error(DUET_EINVAL, "resize_bilinear_ac: output size %" PRId64 "x%" PRId64
                           " must be positive", out_h, out_w);
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    ac_axis *ay = ac_axis_make(h, out_h), *ax = ac_axis_make(w, out_w);
    duet_tensor *y = NULL;
    int rc = ay == NULL || ax == NULL
                 ? duet__error(DUET_ENOMEM, "resize_bilinear_ac: out of memory")
                 : duet_tensor_create_uninit(4, (int64_t[]){n, c, out_h, out_w}, &y);
    if (rc == DUET_OK) ac_apply(y->data, x->data, n * c, h, w, out_h, out_w, ay, ax, false);
    free(ay);
    free(ax);
    DUET_TRY(rc);
    return duet__op_finish(y, "resize_bilinear_ac", resize_backward_node, NULL, NULL, 1, &x, out);
}

/* ---- Gram matrix ----------------------------------------------------------------------
 * F = x viewed as (N, C, HW); G = F F^T / (C H W), one SGEMM per sample.
 * dL/dF = (dG + dG^T) F / (C H W). */

static int gram_backward_node(duet_node *node) {
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const int64_t n = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
    const float s = 1.0f / (float)(c * hw);
    const float *gg = node->output->grad;
    for (int64_t b = 0; b < n; b++) {
        const float *f = x->data + b * c * hw;
        const float *g = gg + b * c * c;
        float *gf = gx + b * c * hw;
        /* gf += s * G^T F + s * G F (two GEMMs, accumulating) */
        duet_sgemm(false, false, c, hw, c, s, g, c, f, hw, 1.0f, gf, hw);
        duet_sgemm(true, false, c, hw, c, s, g, c, f, hw, 1.0f, gf, hw);
    }
    return DUET_OK;
}

int duet_gram_matrix(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "gram_matrix", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "gram_matrix: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    const int64_t n = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(3, (int64_t[]){n, c, c}, &y));
    for (int64_t b = 0; b < n; b++) {
        const float *f = x->data + b * c * hw;
        duet_sgemm(false, true, c, c, hw, 1.0f, f, hw, f, hw, 0.0f, y->data + b * c * c, c);
        /* PyTorch divides the bmm result by c*h*w (an integer): same here,
         * as a division, not a multiplication by its rounded inverse. */
        float *g = y->data + b * c * c;
        for (int64_t i = 0; i < c * c; i++) g[i] /= (float)(c * hw);
    }
    return duet__op_finish(y, "gram_matrix", gram_backward_node, NULL, NULL, 1, &x, out);
}

/* ---- a - mean(b) per group of samples ---------------------------------------------------
 * a, b (N, ...) of the same shape; the N samples form `groups` equal
 * contiguous groups; out[n] = a[n] - mean(b[group(n)]) (the mean over every
 * element of the group's samples). groups 1: a - mean(b). */

typedef struct group_ctx {
    int groups;
} group_ctx;

static int sub_group_mean_backward_node(duet_node *node) {
    const group_ctx *c = node->ctx;
    const duet_tensor *y = node->output;
    float *ga = duet_node_input_grad(node, 0), *gb = duet_node_input_grad(node, 1);
    const int64_t per = y->numel / c->groups; /* elements per group */
    if (ga != NULL)
        for (int64_t i = 0; i < y->numel; i++) ga[i] += y->grad[i];
    if (gb != NULL)
        for (int g = 0; g < c->groups; g++) {
            /* d out[i] / d b[j] = -1 / per for i, j in the same group */
            const float s = (float)(duet__sum_f32(y->grad + g * per, per) / (double)per);
            for (int64_t j = 0; j < per; j++) gb[g * per + j] -= s;
        }
    return DUET_OK;
}

int duet_sub_group_mean(duet_tensor *a, duet_tensor *b, int groups, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "sub_group_mean", "a,b", a, b);
    char sa[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    DUET_TRY(duet__op_check_same_shape("sub_group_mean", a, b));
    if (groups < 1 || a->ndim < 1 || a->shape[0] % groups != 0)
        return duet__error(DUET_EINVAL, "sub_group_mean: %d groups for inputs %s and %s; the "
                           "samples (dim 0) must split into equal groups",
                           groups, duet_shape_str(a, sa, sizeof sa),
                           duet_shape_str(b, sb, sizeof sb));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(a->ndim, a->shape, &y));
    const int64_t per = a->numel / groups;
    for (int g = 0; g < groups; g++) {
        /* As duet_mean: the sum in double, the mean rounded to float. */
        const float m = (float)(duet__sum_f32(b->data + g * per, per) / (double)per);
        for (int64_t i = g * per; i < (g + 1) * per; i++) y->data[i] = a->data[i] - m;
    }
    group_ctx *gc = NULL;
    duet_tensor *inputs[2] = {a, b};
    if (duet_autograd_needs_record(2, inputs)) {
        gc = malloc(sizeof *gc);
        if (gc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "sub_group_mean: out of memory");
        }
        gc->groups = groups;
    }
    return duet__op_finish(y, "sub_group_mean", sub_group_mean_backward_node, gc, free, 2,
                            inputs, out);
}
