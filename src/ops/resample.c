/* Resampling: pixel_shuffle (sub-pixel convolution's rearrangement) and
 * bilinear upsampling by an integer factor with align_corners=False, both
 * exactly as PyTorch. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>

/* ---- pixel_shuffle ------------------------------------------------------------
 * out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]. The kernels walk
 * the input contiguously and the output with stride r. */

/* out (N, C, H*r, W*r) from x (N, C*r*r, H, W); nc = N*C */
static void pixel_shuffle_forward(float *out, const float *x, int64_t nc, int r, int64_t h,
                                  int64_t w) {
    const int64_t ow = w * r;
    /* Output planes are disjoint: threads split them. */
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * h * w * r * r)) schedule(static)
    for (int64_t p = 0; p < nc; p++) {
        float *op = out + p * h * w * r * r;
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                const float *xp = x + (p * r * r + (int64_t)i * r + j) * h * w;
                for (int64_t y = 0; y < h; y++) {
                    float *orow = op + (y * r + i) * ow + j;
                    const float *xrow = xp + y * w;
                    for (int64_t k = 0; k < w; k++) orow[k * r] = xrow[k];
                }
            }
    }
}

/* gx (N, C*r*r, H, W) += the inverse rearrangement of gout (N, C, H*r, W*r) */
static void pixel_shuffle_backward(float *gx, const float *gout, int64_t nc, int r, int64_t h,
                                   int64_t w) {
    const int64_t ow = w * r;
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * h * w * r * r)) schedule(static)
    for (int64_t p = 0; p < nc; p++) {
        const float *gp = gout + p * h * w * r * r;
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                float *gxp = gx + (p * r * r + (int64_t)i * r + j) * h * w;
                for (int64_t y = 0; y < h; y++) {
                    const float *grow = gp + (y * r + i) * ow + j;
                    float *gxrow = gxp + y * w;
                    for (int64_t k = 0; k < w; k++) gxrow[k] += grow[k * r];
                }
            }
    }
}

typedef struct shuffle_ctx {
    int r;
} shuffle_ctx;

static int pixel_shuffle_backward_node(duet_node *node) {
    const shuffle_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        pixel_shuffle_backward(gx, node->output->grad, node->output->shape[0] *
                               node->output->shape[1], c->r, x->shape[2], x->shape[3]);
    return DUET_OK;
}

int duet_pixel_shuffle(duet_tensor *x, int r, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "pixel_shuffle", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (r < 1)
        return duet__error(DUET_EINVAL, "pixel_shuffle: upscale factor %d; it must be at least 1",
                           r);
    if (x->ndim != 4 || x->shape[1] % ((int64_t)r * r) != 0)
        return duet__error(DUET_ESHAPE, "pixel_shuffle: input %s must be (N, C*r*r, H, W) with "
                           "r = %d, i.e. 4-D with channels divisible by %d",
                           duet_shape_str(x, sx, sizeof sx), r, r * r);
    int64_t n = x->shape[0], c = x->shape[1] / ((int64_t)r * r), h = x->shape[2],
            w = x->shape[3];
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){n, c, h * r, w * r}, &y));
    pixel_shuffle_forward(y->data, x->data, n * c, r, h, w);
    shuffle_ctx *sc = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        sc = malloc(sizeof *sc);
        if (sc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "pixel_shuffle: out of memory");
        }
        sc->r = r;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "pixel_shuffle", pixel_shuffle_backward_node, sc, free, 1, &x, out),
        out);
}

/* ---- bilinear ----------------------------------------------------------------------
 * align_corners=False with a given scale factor f: output index o reads the
 * source coordinate s = max((o + 0.5) / f - 0.5, 0), between i0 = floor(s) and
 * i1 = min(i0 + 1, in - 1) with weights 1 - l and l, l = s - i0. The clamp at
 * 0 and the repeat of the last row/column at the far edge are PyTorch's
 * (upsample_bilinear2d, area_pixel_compute_source_index). Indices and
 * weights depend on one axis only, so they are computed once per axis. */

typedef struct axis_lerp {
    int64_t *i0, *i1; /* out_size source indices */
    float *l0, *l1;   /* out_size weights */
} axis_lerp;

static void axis_lerp_free(axis_lerp *a) {
    free(a->i0);
    free(a->i1);
    free(a->l0);
    free(a->l1);
}

static int axis_lerp_make(axis_lerp *a, int64_t in_size, int factor) {
    int64_t out_size = in_size * factor;
    a->i0 = malloc((size_t)out_size * sizeof *a->i0);
    a->i1 = malloc((size_t)out_size * sizeof *a->i1);
    a->l0 = malloc((size_t)out_size * sizeof *a->l0);
    a->l1 = malloc((size_t)out_size * sizeof *a->l1);
    if (a->i0 == NULL || a->i1 == NULL || a->l0 == NULL || a->l1 == NULL) {
        axis_lerp_free(a);
        return duet__error(DUET_ENOMEM, "upsample_bilinear: out of memory for %" PRId64
                           " interpolation weights", out_size);
    }
    /* As PyTorch: the scale is rounded to float, (float)(1.0 / factor), but
     * the source coordinate is computed in double, so that a weight such as
     * 33.000001 - 33 keeps the digits a float coordinate would round away
     * (matched against torch 1.13 to the last bit or one). */
    const double scale = (float)(1.0 / factor);
    for (int64_t o = 0; o < out_size; o++) {
        double s = scale * ((double)o + 0.5) - 0.5;
        if (s < 0.0) s = 0.0;
        int64_t i0 = (int64_t)s;
        if (i0 > in_size - 1) i0 = in_size - 1;
        double l = s - (double)i0;
        if (l > 1.0) l = 1.0;
        a->i0[o] = i0;
        a->i1[o] = i0 < in_size - 1 ? i0 + 1 : i0;
        a->l1[o] = (float)l;
        a->l0[o] = 1.0f - (float)l;
    }
    return DUET_OK;
}

/* out (NC, OH, OW) from x (NC, H, W) */
static void bilinear_forward(float *out, const float *x, int64_t nc, int64_t h, int64_t w,
                             const axis_lerp *ay, const axis_lerp *ax, int factor) {
    const int64_t oh = h * factor, ow = w * factor;
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * oh * ow)) schedule(static)
    for (int64_t p = 0; p < nc; p++) {
        const float *xp = x + p * h * w;
        for (int64_t y = 0; y < oh; y++) {
            const float *r0 = xp + ay->i0[y] * w, *r1 = xp + ay->i1[y] * w;
            const float wy0 = ay->l0[y], wy1 = ay->l1[y];
            float *orow = out + (p * oh + y) * ow;
            for (int64_t k = 0; k < ow; k++) {
                const int64_t c0 = ax->i0[k], c1 = ax->i1[k];
                orow[k] = wy0 * (ax->l0[k] * r0[c0] + ax->l1[k] * r0[c1]) +
                          wy1 * (ax->l0[k] * r1[c0] + ax->l1[k] * r1[c1]);
            }
        }
    }
}

/* gx (NC, H, W) += the transpose of the interpolation applied to gout */
static void bilinear_backward(float *gx, const float *gout, int64_t nc, int64_t h, int64_t w,
                              const axis_lerp *ay, const axis_lerp *ax, int factor) {
    const int64_t oh = h * factor, ow = w * factor;
#pragma omp parallel for num_threads(duet__par_threads(2 * nc * oh * ow)) schedule(static)
    for (int64_t p = 0; p < nc; p++) {
        float *gp = gx + p * h * w;
        for (int64_t y = 0; y < oh; y++) {
            float *r0 = gp + ay->i0[y] * w, *r1 = gp + ay->i1[y] * w;
            const float wy0 = ay->l0[y], wy1 = ay->l1[y];
            const float *grow = gout + (p * oh + y) * ow;
            for (int64_t k = 0; k < ow; k++) {
                const int64_t c0 = ax->i0[k], c1 = ax->i1[k];
                const float g = grow[k];
                r0[c0] += wy0 * ax->l0[k] * g;
                r0[c1] += wy0 * ax->l1[k] * g;
                r1[c0] += wy1 * ax->l0[k] * g;
                r1[c1] += wy1 * ax->l1[k] * g;
            }
        }
    }
}

typedef struct bilinear_ctx {
    int factor;
} bilinear_ctx;

static int bilinear_backward_node(duet_node *node) {
    const bilinear_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    axis_lerp ay, ax;
    DUET_TRY(axis_lerp_make(&ay, x->shape[2], c->factor));
    int rc = axis_lerp_make(&ax, x->shape[3], c->factor);
    if (rc != DUET_OK) {
        axis_lerp_free(&ay);
        return rc;
    }
    bilinear_backward(gx, node->output->grad, x->shape[0] * x->shape[1], x->shape[2],
                      x->shape[3], &ay, &ax, c->factor);
    axis_lerp_free(&ay);
    axis_lerp_free(&ax);
    return DUET_OK;
}

int duet_upsample_bilinear(duet_tensor *x, int factor, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "upsample_bilinear", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (factor < 1)
        return duet__error(DUET_EINVAL, "upsample_bilinear: scale factor %d; it must be at "
                           "least 1", factor);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "upsample_bilinear: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    axis_lerp ay, ax;
    DUET_TRY(axis_lerp_make(&ay, h, factor));
    int rc = axis_lerp_make(&ax, w, factor);
    if (rc != DUET_OK) {
        axis_lerp_free(&ay);
        return rc;
    }
    duet_tensor *y = NULL;
    rc = duet_tensor_create_uninit(4, (int64_t[]){n, c, h * factor, w * factor}, &y);
    if (rc == DUET_OK) bilinear_forward(y->data, x->data, n * c, h, w, &ay, &ax, factor);
    axis_lerp_free(&ay);
    axis_lerp_free(&ax);
    if (rc != DUET_OK) return rc;
    bilinear_ctx *bc = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        bc = malloc(sizeof *bc);
        if (bc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "upsample_bilinear: out of memory");
        }
        bc->factor = factor;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "upsample_bilinear", bilinear_backward_node, bc, free, 1, &x, out), out);
}
