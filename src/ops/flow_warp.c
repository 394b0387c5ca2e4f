/* flow_warp: MMEditing's flow_warp (mmedit/models/common/flow_warp.py), the
 * warp of BasicVSR's propagation and SPyNet's pyramid: each output pixel
 * (i, j) samples x bilinearly at (j + flow_x, i + flow_y), as
 * F.grid_sample(x, grid, mode='bilinear', align_corners=True) of the grid
 * MMEditing makes from the flow, with padding 'zeros' (corners outside the
 * image count 0) or 'border' (the coordinate clamped into the image, as
 * PyTorch's clip_coordinates, whose gradient is 0 where it clamps).
 * Differentiable in the image and in the flow. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>

typedef struct flow_warp_params {
    duet_flow_padding padding;
} flow_warp_params;

/* The source coordinate of output index j displaced by f on an axis of
 * `size` pixels, and d(coordinate)/df. align_corners=True makes MMEditing's
 * normalisation 2 (j + f) / max(size - 1, 1) - 1 and grid_sample's
 * unnormalisation ((g + 1) / 2) (size - 1) cancel, except for a single
 * pixel, where every coordinate is 0. Border padding clamps into
 * [0, size - 1] with a zero gradient at and beyond the ends (PyTorch's
 * clip_coordinates_set_grad). */
static inline float source_coord(int64_t j, float f, int64_t size, bool border, float *dcdf) {
    if (size == 1) {
        *dcdf = 0.0f;
        return 0.0f;
    }
    float c = (float)j + f;
    *dcdf = 1.0f;
    if (border) {
        if (c <= 0.0f) {
            *dcdf = 0.0f;
            c = 0.0f;
        } else if (c >= (float)(size - 1)) {
            *dcdf = 0.0f;
            c = (float)(size - 1);
        }
    }
    return c;
}

/* The four corners of a bilinear sample: their offsets in a plane (-1:
 * outside, value 0) and weights, and the coordinate's fractions. */
typedef struct corners {
    int64_t at[4]; /* nw, ne, sw, se */
    float w[4];
    float fx, fy; /* c - floor(c) per axis */
} corners;

static inline void corners_of(float cx, float cy, int64_t h, int64_t w, corners *k) {
    const float x0 = floorf(cx), y0 = floorf(cy);
    const int64_t ix = (int64_t)x0, iy = (int64_t)y0;
    k->fx = cx - x0;
    k->fy = cy - y0;
    k->w[0] = (1.0f - k->fx) * (1.0f - k->fy);
    k->w[1] = k->fx * (1.0f - k->fy);
    k->w[2] = (1.0f - k->fx) * k->fy;
    k->w[3] = k->fx * k->fy;
    const int64_t xs[4] = {ix, ix + 1, ix, ix + 1}, ys[4] = {iy, iy, iy + 1, iy + 1};
    for (int q = 0; q < 4; q++)
        k->at[q] = xs[q] >= 0 && xs[q] < w && ys[q] >= 0 && ys[q] < h ? ys[q] * w + xs[q] : -1;
}

static int flow_warp_check(int nin, duet_tensor *const *in, void *params, bool record,
                           duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const flow_warp_params *p = params;
    const duet_tensor *x = in[0], *flow = in[1];
    char sx[DUET_SHAPE_STR_MAX], sf[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(flow, sf, sizeof sf);
    if (p->padding != DUET_FLOW_PAD_ZEROS && p->padding != DUET_FLOW_PAD_BORDER)
        return duet__error(DUET_EINVAL, "flow_warp: padding mode %d; expected zeros (%d) or "
                           "border (%d)", (int)p->padding, DUET_FLOW_PAD_ZEROS,
                           DUET_FLOW_PAD_BORDER);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "flow_warp: input x %s must be 4-D (N, C, H, W)", sx);
    if (flow->ndim != 4 || flow->shape[0] != x->shape[0] || flow->shape[1] != 2 ||
        flow->shape[2] != x->shape[2] || flow->shape[3] != x->shape[3])
        return duet__error(DUET_ESHAPE, "flow_warp: flow %s must be (N, 2, H, W) with x's N, H "
                           "and W; x is %s", sf, sx);
    duet__op_plan_like(plan, x);
    return DUET_OK;
}

static int flow_warp_k(const duet__op_args *a) {
    const bool border = ((const flow_warp_params *)a->params)->padding == DUET_FLOW_PAD_BORDER;
    const duet_tensor *x = a->in[0], *flow = a->in[1];
    float *out = a->out->data;
    const int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    const int64_t hw = h * w;
    /* Output rows are disjoint: threads split (sample, row). */
#pragma omp parallel for num_threads(duet__par_threads(4 * x->numel)) schedule(static)
    for (int64_t r = 0; r < n * h; r++) {
        const int64_t s = r / h, i = r % h;
        const float *fx = flow->data + s * 2 * hw, *fy = fx + hw;
        for (int64_t j = 0; j < w; j++) {
            float d;
            const float cx = source_coord(j, fx[i * w + j], w, border, &d);
            const float cy = source_coord(i, fy[i * w + j], h, border, &d);
            corners k;
            corners_of(cx, cy, h, w, &k);
            for (int64_t ch = 0; ch < c; ch++) {
                const float *xp = x->data + (s * c + ch) * hw;
                float v = 0.0f;
                for (int q = 0; q < 4; q++)
                    if (k.at[q] >= 0) v += xp[k.at[q]] * k.w[q];
                out[(s * c + ch) * hw + i * w + j] = v;
            }
        }
    }
    return DUET_OK;
}

static int flow_warp_backward_k(const duet__op_args *a) {
    const bool border = ((const flow_warp_params *)a->params)->padding == DUET_FLOW_PAD_BORDER;
    const duet_tensor *x = a->in[0], *flow = a->in[1];
    const float *gout = a->gout;
    float *gx = a->gin[0], *gflow = a->gin[1];
    const int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    const int64_t hw = h * w;
    /* The image's gradient: each (sample, channel) plane scatters into its
     * own plane of gx only, so threads split the planes. */
    if (gx != NULL) {
#pragma omp parallel for num_threads(duet__par_threads(4 * x->numel)) schedule(static)
        for (int64_t pl = 0; pl < n * c; pl++) {
            const int64_t s = pl / c;
            const float *fx = flow->data + s * 2 * hw, *fy = fx + hw;
            const float *g = gout + pl * hw;
            float *gp = gx + pl * hw;
            for (int64_t i = 0; i < h; i++)
                for (int64_t j = 0; j < w; j++) {
                    float d;
                    const float cx = source_coord(j, fx[i * w + j], w, border, &d);
                    const float cy = source_coord(i, fy[i * w + j], h, border, &d);
                    corners k;
                    corners_of(cx, cy, h, w, &k);
                    const float gv = g[i * w + j];
                    for (int q = 0; q < 4; q++)
                        if (k.at[q] >= 0) gp[k.at[q]] += k.w[q] * gv;
                }
        }
    }
    /* The flow's gradient: per output pixel, summed over the channels. */
    if (gflow != NULL) {
#pragma omp parallel for num_threads(duet__par_threads(4 * x->numel)) schedule(static)
        for (int64_t r = 0; r < n * h; r++) {
            const int64_t s = r / h, i = r % h;
            const float *fx = flow->data + s * 2 * hw, *fy = fx + hw;
            float *gfx = gflow + s * 2 * hw, *gfy = gfx + hw;
            for (int64_t j = 0; j < w; j++) {
                float dx, dy;
                const float cx = source_coord(j, fx[i * w + j], w, border, &dx);
                const float cy = source_coord(i, fy[i * w + j], h, border, &dy);
                corners k;
                corners_of(cx, cy, h, w, &k);
                float gcx = 0.0f, gcy = 0.0f;
                for (int64_t ch = 0; ch < c; ch++) {
                    const float *xp = x->data + (s * c + ch) * hw;
                    float v[4];
                    for (int q = 0; q < 4; q++) v[q] = k.at[q] >= 0 ? xp[k.at[q]] : 0.0f;
                    const float gv = gout[(s * c + ch) * hw + i * w + j];
                    /* d/dcx and d/dcy of the bilinear weights */
                    gcx += gv * ((v[1] - v[0]) * (1.0f - k.fy) + (v[3] - v[2]) * k.fy);
                    gcy += gv * ((v[2] - v[0]) * (1.0f - k.fx) + (v[3] - v[1]) * k.fx);
                }
                gfx[i * w + j] += gcx * dx;
                gfy[i * w + j] += gcy * dy;
            }
        }
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_flow_warp = {
    .id = DUET__OP_FLOW_WARP,
    .inputs = "x,flow",
    .params_size = sizeof(flow_warp_params),
    .check = flow_warp_check,
    DUET__OP_CPU(flow_warp_k, flow_warp_backward_k),
    .output_unread = true,
};

int duet_flow_warp(duet_tensor *x, duet_tensor *flow, duet_flow_padding padding,
                   duet_tensor **out) {
    DUET_ASSERT(x != NULL && flow != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_FLOW_WARP, (&(flow_warp_params){padding}), out, x, flow);
}
