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

typedef struct factor_params {
    int factor;
} factor_params;

static int nearest_check(int nin, duet_tensor *const *in, void *params, bool record,
                         duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const int factor = ((const factor_params *)params)->factor;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (factor < 1)
        return duet__error(DUET_EINVAL, "upsample_nearest: scale factor %d; it must be at "
                           "least 1", factor);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "upsample_nearest: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = x->shape[2] * factor;
    plan->shape[3] = x->shape[3] * factor;
    return DUET_OK;
}

static int nearest_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    nearest_forward(a->out->data, x->data, x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                    ((const factor_params *)a->params)->factor);
    return DUET_OK;
}

static int nearest_backward_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    nearest_backward(a->gin[0], a->gout, x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                     ((const factor_params *)a->params)->factor);
    return DUET_OK;
}

const duet__op_def duet__op_def_upsample_nearest = {
    .id = DUET__OP_UPSAMPLE_NEAREST,
    .inputs = "x",
    .params_size = sizeof(factor_params),
    .check = nearest_check,
    DUET__OP_CPU(nearest_k, nearest_backward_k),
};

int duet_upsample_nearest(duet_tensor *x, int factor, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_UPSAMPLE_NEAREST, (&(factor_params){factor}), out, x);
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

typedef struct resize_params {
    int64_t out_h, out_w;
} resize_params;

static int resize_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const resize_params *p = params;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || x->shape[2] < 1 || x->shape[3] < 1)
        return duet__error(DUET_ESHAPE, "resize_bilinear_ac: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    if (p->out_h < 1 || p->out_w < 1)
        return duet__error(DUET_EINVAL, "resize_bilinear_ac: output size %" PRId64 "x%" PRId64
                           " must be positive", p->out_h, p->out_w);
    plan->ndim = 4;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = p->out_h;
    plan->shape[3] = p->out_w;
    return DUET_OK;
}

/* Forward (out = the output) or backward (gx += from gout), the axes' tables
 * made per call. */
static int resize_run(const duet__op_args *a, bool backward) {
    const duet_tensor *x = a->in[0], *y = a->out;
    ac_axis *ay = ac_axis_make(x->shape[2], y->shape[2]);
    ac_axis *ax = ac_axis_make(x->shape[3], y->shape[3]);
    if (ay == NULL || ax == NULL) {
        free(ay);
        free(ax);
        return duet__error(DUET_ENOMEM, "resize_bilinear_ac: out of memory");
    }
    if (backward)
        ac_apply(a->gin[0], a->gout, x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                 y->shape[2], y->shape[3], ay, ax, true);
    else
        ac_apply(y->data, x->data, x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                 y->shape[2], y->shape[3], ay, ax, false);
    free(ay);
    free(ax);
    return DUET_OK;
}

static int resize_k(const duet__op_args *a) { return resize_run(a, false); }
static int resize_backward_k(const duet__op_args *a) { return resize_run(a, true); }

const duet__op_def duet__op_def_resize_bilinear_ac = {
    .id = DUET__OP_RESIZE_BILINEAR_AC,
    .inputs = "x",
    .params_size = sizeof(resize_params),
    .check = resize_check,
    DUET__OP_CPU(resize_k, resize_backward_k),
};

int duet_resize_bilinear_ac(duet_tensor *x, int64_t out_h, int64_t out_w, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_RESIZE_BILINEAR_AC, (&(resize_params){out_h, out_w}), out, x);
}

/* ---- Gram matrix ----------------------------------------------------------------------
 * F = x viewed as (N, C, HW); G = F F^T / (C H W), one SGEMM per sample.
 * dL/dF = (dG + dG^T) F / (C H W). */

static int gram_check(int nin, duet_tensor *const *in, void *params, bool record,
                      duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "gram_matrix: input %s must be 4-D (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    plan->ndim = 3;
    plan->shape[0] = x->shape[0];
    plan->shape[1] = x->shape[1];
    plan->shape[2] = x->shape[1];
    return DUET_OK;
}

static int gram_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
    for (int64_t b = 0; b < n; b++) {
        const float *f = x->data + b * c * hw;
        float *g = a->out->data + b * c * c;
        duet_sgemm(false, true, c, c, hw, 1.0f, f, hw, f, hw, 0.0f, g, c);
        /* PyTorch divides the bmm result by c*h*w (an integer): same here,
         * as a division, not a multiplication by its rounded inverse. */
        for (int64_t i = 0; i < c * c; i++) g[i] /= (float)(c * hw);
    }
    return DUET_OK;
}

static int gram_backward_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
    const float s = 1.0f / (float)(c * hw);
    for (int64_t b = 0; b < n; b++) {
        const float *f = x->data + b * c * hw;
        const float *g = a->gout + b * c * c;
        float *gf = a->gin[0] + b * c * hw;
        /* gf += s * G^T F + s * G F (two GEMMs, accumulating) */
        duet_sgemm(false, false, c, hw, c, s, g, c, f, hw, 1.0f, gf, hw);
        duet_sgemm(true, false, c, hw, c, s, g, c, f, hw, 1.0f, gf, hw);
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_gram_matrix = {
    .id = DUET__OP_GRAM_MATRIX,
    .inputs = "x",
    .check = gram_check,
    DUET__OP_CPU(gram_k, gram_backward_k),
};

int duet_gram_matrix(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_GRAM_MATRIX, NULL, out, x);
}

/* ---- a - mean(b) per group of samples ---------------------------------------------------
 * a, b (N, ...) of the same shape; the N samples form `groups` equal
 * contiguous groups; out[n] = a[n] - mean(b[group(n)]) (the mean over every
 * element of the group's samples). groups 1: a - mean(b). */

typedef struct group_params {
    int groups;
} group_params;

static int group_check(int nin, duet_tensor *const *in, void *params, bool record,
                       duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const int groups = ((const group_params *)params)->groups;
    const duet_tensor *a = in[0], *b = in[1];
    char sa[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    DUET_TRY(duet__op_check_same_shape("sub_group_mean", a, b));
    if (groups < 1 || a->ndim < 1 || a->shape[0] % groups != 0)
        return duet__error(DUET_EINVAL, "sub_group_mean: %d groups for inputs %s and %s; the "
                           "samples (dim 0) must split into equal groups",
                           groups, duet_shape_str(a, sa, sizeof sa),
                           duet_shape_str(b, sb, sizeof sb));
    duet__op_plan_like(plan, a);
    return DUET_OK;
}

static int group_k(const duet__op_args *a) {
    const int groups = ((const group_params *)a->params)->groups;
    const float *av = a->in[0]->data, *bv = a->in[1]->data;
    float *y = a->out->data;
    const int64_t per = a->out->numel / groups;
    for (int g = 0; g < groups; g++) {
        /* As duet_mean: the sum in double, the mean rounded to float. */
        const float m = (float)(duet__sum_f32(bv + g * per, per) / (double)per);
        for (int64_t i = g * per; i < (g + 1) * per; i++) y[i] = av[i] - m;
    }
    return DUET_OK;
}

static int group_backward_k(const duet__op_args *a) {
    const int groups = ((const group_params *)a->params)->groups;
    const int64_t n = a->out->numel, per = n / groups; /* elements per group */
    float *ga = a->gin[0], *gb = a->gin[1];
    if (ga != NULL)
        for (int64_t i = 0; i < n; i++) ga[i] += a->gout[i];
    if (gb != NULL)
        for (int g = 0; g < groups; g++) {
            /* d out[i] / d b[j] = -1 / per for i, j in the same group */
            const float s = (float)(duet__sum_f32(a->gout + g * per, per) / (double)per);
            for (int64_t j = 0; j < per; j++) gb[g * per + j] -= s;
        }
    return DUET_OK;
}

const duet__op_def duet__op_def_sub_group_mean = {
    .id = DUET__OP_SUB_GROUP_MEAN,
    .inputs = "a,b",
    .params_size = sizeof(group_params),
    .check = group_check,
    DUET__OP_CPU(group_k, group_backward_k),
};

int duet_sub_group_mean(duet_tensor *a, duet_tensor *b, int groups, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SUB_GROUP_MEAN, (&(group_params){groups}), out, a, b);
}
