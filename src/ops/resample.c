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

typedef struct shuffle_params {
    int r;
} shuffle_params;

static int pixel_shuffle_check(int nin, duet_tensor *const *in, void *params, bool record,
                               duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const int r = ((const shuffle_params *)params)->r;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (r < 1)
        return duet__error(DUET_EINVAL, "pixel_shuffle: upscale factor %d; it must be at least 1",
                           r);
    if (x->ndim != 4 || x->shape[1] % ((int64_t)r * r) != 0)
        return duet__error(DUET_ESHAPE, "pixel_shuffle: input %s must be (N, C*r*r, H, W) with "
                           "r = %d, i.e. 4-D with channels divisible by %d",
                           duet_shape_str(x, sx, sizeof sx), r, r * r);
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1] / ((int64_t)r * r);
    plan->shape[2] = x->shape[2] * r;
    plan->shape[3] = x->shape[3] * r;
    return DUET_OK;
}

static int pixel_shuffle_k(const duet__op_args *a) {
    const int r = ((const shuffle_params *)a->params)->r;
    const duet_tensor *x = a->in[0], *y = a->out;
    pixel_shuffle_forward(y->data, x->data, y->shape[0] * y->shape[1], r, x->shape[2],
                          x->shape[3]);
    return DUET_OK;
}

static int pixel_shuffle_backward_k(const duet__op_args *a) {
    const int r = ((const shuffle_params *)a->params)->r;
    const duet_tensor *x = a->in[0], *y = a->out;
    pixel_shuffle_backward(a->gin[0], a->gout, y->shape[0] * y->shape[1], r, x->shape[2],
                           x->shape[3]);
    return DUET_OK;
}

const duet__op_def duet__op_def_pixel_shuffle = {
    .id = DUET__OP_PIXEL_SHUFFLE,
    .inputs = "x",
    .params_size = sizeof(shuffle_params),
    .check = pixel_shuffle_check,
    DUET__OP_CPU(pixel_shuffle_k, pixel_shuffle_backward_k),
    .output_unread = true,
};

int duet_pixel_shuffle(duet_tensor *x, int r, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_PIXEL_SHUFFLE, (&(shuffle_params){r}), out, x);
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

typedef struct bilinear_params {
    int factor;
} bilinear_params;

static int bilinear_check(int nin, duet_tensor *const *in, void *params, bool record,
                          duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const int factor = ((const bilinear_params *)params)->factor;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (factor < 1)
        return duet__error(DUET_EINVAL, "upsample_bilinear: scale factor %d; it must be at "
                           "least 1", factor);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "upsample_bilinear: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = x->shape[2] * factor;
    plan->shape[3] = x->shape[3] * factor;
    return DUET_OK;
}

/* The interpolation tables of both axes, made per call (kernel-side host
 * memory of the device the kernel runs for: the CPU's). */
static int bilinear_run(const duet__op_args *a, bool backward) {
    const int factor = ((const bilinear_params *)a->params)->factor;
    const duet_tensor *x = a->in[0];
    axis_lerp ay, ax;
    DUET_TRY(axis_lerp_make(&ay, x->shape[2], factor));
    int rc = axis_lerp_make(&ax, x->shape[3], factor);
    if (rc != DUET_OK) {
        axis_lerp_free(&ay);
        return rc;
    }
    if (backward)
        bilinear_backward(a->gin[0], a->gout, x->shape[0] * x->shape[1], x->shape[2],
                          x->shape[3], &ay, &ax, factor);
    else
        bilinear_forward(a->out->data, x->data, x->shape[0] * x->shape[1], x->shape[2],
                         x->shape[3], &ay, &ax, factor);
    axis_lerp_free(&ay);
    axis_lerp_free(&ax);
    return DUET_OK;
}

static int bilinear_k(const duet__op_args *a) { return bilinear_run(a, false); }
static int bilinear_backward_k(const duet__op_args *a) { return bilinear_run(a, true); }

const duet__op_def duet__op_def_upsample_bilinear = {
    .id = DUET__OP_UPSAMPLE_BILINEAR,
    .inputs = "x",
    .params_size = sizeof(bilinear_params),
    .check = bilinear_check,
    DUET__OP_CPU(bilinear_k, bilinear_backward_k),
    .output_unread = true,
};

int duet_upsample_bilinear(duet_tensor *x, int factor, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_UPSAMPLE_BILINEAR, (&(bilinear_params){factor}), out, x);
}
