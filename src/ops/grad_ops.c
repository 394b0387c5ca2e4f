/* Ops that second-order autograd's backwards are built from (the backwards
 * in recorded ops of autograd.h's duet_graph_backward_fn), each with a fused
 * first-order backward, plus the gradient penalty's per-pixel norm:
 *
 *   conv2d_weight_grad  dW (O, C, KH, KW) of conv2d from x and dy
 *   transpose2d         a (R, C) matrix's transpose
 *   sum_channels        x (N, C, ...) summed to (C): a conv bias's gradient
 *   channel_norm        x (N, C, H, W) -> (N, H, W), sqrt(sum_c x^2)
 *
 * conv2d_weight_grad per sample, with K = C*KH*KW and P = OH*OW:
 *   forward   col (K, P) = im2col(x); dW (O, K) += dy (O, P) col^T
 *   backward  given G = d dW: d dy (O, P) += G (O, K) col (K, P) (conv2d's
 *             forward of x with weight G); dcol (K, P) = G^T dy, col2im'd
 *             into dx (conv2d's input gradient with weight G). */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- conv2d_weight_grad ------------------------------------------------------- */

typedef struct wgrad_geom {
    int64_t n, c, h, w, o, kh, kw, oh, ow, k, p;
    int stride, pad;
} wgrad_geom;

typedef struct wgrad_ctx {
    int kh, kw, stride, pad;
} wgrad_ctx;

static int wgrad_geometry(const duet_tensor *x, const duet_tensor *dy, int kh, int kw,
                          int stride, int pad, wgrad_geom *g) {
    char sx[DUET_SHAPE_STR_MAX], sy[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(dy, sy, sizeof sy);
    if (x->ndim != 4 || dy->ndim != 4 || x->shape[0] != dy->shape[0] || kh < 1 || kw < 1 ||
        stride < 1 || pad < 0)
        return duet__error(DUET_ESHAPE, "conv2d_weight_grad: input %s and output gradient %s "
                           "must be (N, C, H, W) and (N, O, OH, OW), kernel %dx%d, stride %d, "
                           "padding %d", sx, sy, kh, kw, stride, pad);
    *g = (wgrad_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                      .o = dy->shape[1], .kh = kh, .kw = kw, .oh = dy->shape[2],
                      .ow = dy->shape[3], .stride = stride, .pad = pad};
    if ((g->h + 2 * (int64_t)pad - kh) / stride + 1 != g->oh ||
        (g->w + 2 * (int64_t)pad - kw) / stride + 1 != g->ow || g->h + 2 * (int64_t)pad < kh ||
        g->w + 2 * (int64_t)pad < kw)
        return duet__error(DUET_ESHAPE, "conv2d_weight_grad: output gradient %s is not the "
                           "conv2d output size of input %s with kernel %dx%d, stride %d, "
                           "padding %d", sy, sx, kh, kw, stride, pad);
    g->k = g->c * kh * kw;
    g->p = g->oh * g->ow;
    if (g->k > INT_MAX || g->p > INT_MAX || g->o > INT_MAX)
        return duet__error(DUET_EINVAL, "conv2d_weight_grad: input %s is too large for 32-bit "
                           "BLAS sizes", sx);
    return DUET_OK;
}

/* col (K, P) of sample x (C, H, W); zero where the window reads padding. */
static void wg_im2col(float *col, const float *x, const wgrad_geom *g) {
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                for (int64_t oh = 0; oh < g->oh; oh++) {
                    const int64_t ih = oh * g->stride - g->pad + i;
                    for (int64_t ow = 0; ow < g->ow; ow++) {
                        const int64_t iw = ow * g->stride - g->pad + j;
                        row[oh * g->ow + ow] = ih >= 0 && ih < g->h && iw >= 0 && iw < g->w
                                                   ? x[(c * g->h + ih) * g->w + iw]
                                                   : 0.0f;
                    }
                }
            }
}

/* dx (C, H, W) += the columns scattered back: the adjoint of wg_im2col. */
static void wg_col2im(float *dx, const float *col, const wgrad_geom *g) {
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                for (int64_t oh = 0; oh < g->oh; oh++) {
                    const int64_t ih = oh * g->stride - g->pad + i;
                    if (ih < 0 || ih >= g->h) continue;
                    for (int64_t ow = 0; ow < g->ow; ow++) {
                        const int64_t iw = ow * g->stride - g->pad + j;
                        if (iw >= 0 && iw < g->w) dx[(c * g->h + ih) * g->w + iw] += row[oh * g->ow + ow];
                    }
                }
            }
}

static int wgrad_backward(duet_node *node) {
    const wgrad_ctx *wc = node->ctx;
    duet_tensor *x = node->inputs[0], *dy = node->inputs[1];
    wgrad_geom g;
    DUET_TRY(wgrad_geometry(x, dy, wc->kh, wc->kw, wc->stride, wc->pad, &g));
    const float *gw = node->output->grad; /* (O, K) */
    float *gx = duet_node_input_grad(node, 0);
    float *gdy = duet_node_input_grad(node, 1);
    if (gx == NULL && gdy == NULL) return DUET_OK;
    float *col = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (col == NULL)
        return duet__error(DUET_ENOMEM, "conv2d_weight_grad: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    const int64_t xsz = g.c * g.h * g.w, ysz = g.o * g.p;
    for (int64_t n = 0; n < g.n; n++) {
        if (gdy != NULL) {
            wg_im2col(col, x->data + n * xsz, &g);
            duet_sgemm(false, false, g.o, g.p, g.k, 1.0f, gw, g.k, col, g.p, 1.0f,
                       gdy + n * ysz, g.p);
        }
        if (gx != NULL) {
            duet_sgemm(true, false, g.k, g.p, g.o, 1.0f, gw, g.k, dy->data + n * ysz, g.p, 0.0f,
                       col, g.p);
            wg_col2im(gx + n * xsz, col, &g);
        }
    }
    duet_aligned_free(col);
    return DUET_OK;
}

int duet_conv2d_weight_grad(duet_tensor *x, duet_tensor *dy, int kh, int kw, int stride,
                            int padding, duet_tensor **out) {
    DUET_ASSERT(x != NULL && dy != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "conv2d_weight_grad", "x,dy", x, dy);
    wgrad_geom g;
    DUET_TRY(wgrad_geometry(x, dy, kh, kw, stride, padding, &g));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create(4, (int64_t[]){g.o, g.c, kh, kw}, &y));
    float *col = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (col == NULL) {
        duet_tensor_release(y);
        return duet__error(DUET_ENOMEM, "conv2d_weight_grad: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    }
    const int64_t xsz = g.c * g.h * g.w, ysz = g.o * g.p;
    for (int64_t n = 0; n < g.n; n++) {
        wg_im2col(col, x->data + n * xsz, &g);
        duet_sgemm(false, true, g.o, g.k, g.p, 1.0f, dy->data + n * ysz, g.p, col, g.p, 1.0f,
                   y->data, g.k);
    }
    duet_aligned_free(col);
    duet_tensor *ins[2] = {x, dy};
    wgrad_ctx *wc = NULL;
    if (duet_autograd_needs_record(2, ins)) {
        if ((wc = malloc(sizeof *wc)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "conv2d_weight_grad: out of memory recording");
        }
        *wc = (wgrad_ctx){.kh = kh, .kw = kw, .stride = stride, .pad = padding};
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "conv2d_weight_grad", wgrad_backward, wc, free, 2, ins, out), out);
}

/* ---- transpose2d --------------------------------------------------------------- */

static void transpose_add(float *dst, const float *src, int64_t r, int64_t c) {
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) dst[j * r + i] += src[i * c + j];
}

static int transpose2d_check(int nin, duet_tensor *const *in, void *params, bool record,
                             duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 2)
        return duet__error(DUET_ESHAPE, "transpose2d: input %s must be 2-D",
                           duet_shape_str(x, sx, sizeof sx));
    plan->ndim = 2;
    plan->shape[0] = x->shape[1];
    plan->shape[1] = x->shape[0];
    plan->zero_out = true; /* the kernel adds */
    return DUET_OK;
}

static int transpose2d_k(const duet__op_args *a) {
    transpose_add(a->out->data, a->in[0]->data, a->in[0]->shape[0], a->in[0]->shape[1]);
    return DUET_OK;
}

/* The output is (C, R): its gradient transposed back to (R, C). */
static int transpose2d_backward_k(const duet__op_args *a) {
    transpose_add(a->gin[0], a->gout, a->out->shape[0], a->out->shape[1]);
    return DUET_OK;
}

static int transpose2d_graph(duet_node *node, duet_tensor *gy, const bool *want,
                             duet_tensor **gx) {
    (void)node;
    return want[0] ? duet_transpose2d(gy, &gx[0]) : DUET_OK;
}

const duet__op_def duet__op_def_transpose2d = {
    .id = DUET__OP_TRANSPOSE2D,
    .inputs = "x",
    .check = transpose2d_check,
    DUET__OP_CPU(transpose2d_k, transpose2d_backward_k),
    .graph_backward = transpose2d_graph,
    .output_unread = true,
};

int duet_transpose2d(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_TRANSPOSE2D, NULL, out, x);
}

/* ---- sum_channels --------------------------------------------------------------- */

static int channels_check(const char *op, const duet_tensor *x) {
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 2)
        return duet__error(DUET_ESHAPE, "%s: input %s must be (N, C, ...)", op,
                           duet_shape_str(x, sx, sizeof sx));
    return DUET_OK;
}

static int sum_channels_check(int nin, duet_tensor *const *in, void *params, bool record,
                              duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    DUET_TRY(channels_check("sum_channels", in[0]));
    plan->ndim = 1;
    plan->shape[0] = in[0]->shape[1];
    return DUET_OK;
}

static int sum_channels_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], c = x->shape[1], inner = x->numel / (n * c);
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0.0;
        for (int64_t b = 0; b < n; b++) s += duet__sum_f32(x->data + (b * c + ch) * inner, inner);
        a->out->data[ch] = (float)s;
    }
    return DUET_OK;
}

static int sum_channels_backward_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], c = x->shape[1], inner = x->numel / (n * c);
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++) {
            float *d = a->gin[0] + (s * c + ch) * inner;
            for (int64_t i = 0; i < inner; i++) d[i] += a->gout[ch];
        }
    return DUET_OK;
}

const duet__op_def duet__op_def_sum_channels = {
    .id = DUET__OP_SUM_CHANNELS,
    .inputs = "x",
    .check = sum_channels_check,
    DUET__OP_CPU(sum_channels_k, sum_channels_backward_k),
    .output_unread = true,
};

int duet_sum_channels(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SUM_CHANNELS, NULL, out, x);
}

/* ---- channel_norm --------------------------------------------------------------- */

static int channel_norm_check(int nin, duet_tensor *const *in, void *params, bool record,
                              duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    const duet_tensor *x = in[0];
    DUET_TRY(channels_check("channel_norm", x));
    plan->ndim = x->ndim == 2 ? 1 : x->ndim - 1;
    for (int d = 0; d < DUET_MAX_DIMS; d++) plan->shape[d] = 1;
    plan->shape[0] = x->shape[0];
    for (int d = 2; d < x->ndim; d++) plan->shape[d - 1] = x->shape[d];
    return DUET_OK;
}

static int channel_norm_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], c = x->shape[1], inner = x->numel / (n * c);
    for (int64_t s = 0; s < n; s++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = 0.0;
            for (int64_t ch = 0; ch < c; ch++) {
                const double v = x->data[(s * c + ch) * inner + i];
                acc += v * v;
            }
            a->out->data[s * inner + i] = (float)sqrt(acc);
        }
    return DUET_OK;
}

/* gx = gy * x / norm, 0 where the norm is 0 (PyTorch's norm backward). */
static int channel_norm_backward_k(const duet__op_args *a) {
    const duet_tensor *x = a->in[0], *y = a->out;
    const int64_t n = x->shape[0], c = x->shape[1], inner = x->numel / (n * c);
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t i = 0; i < inner; i++) {
                const float nrm = y->data[s * inner + i];
                if (nrm > 0.0f)
                    a->gin[0][(s * c + ch) * inner + i] +=
                        a->gout[s * inner + i] * x->data[(s * c + ch) * inner + i] / nrm;
            }
    return DUET_OK;
}

const duet__op_def duet__op_def_channel_norm = {
    .id = DUET__OP_CHANNEL_NORM,
    .inputs = "x",
    .check = channel_norm_check,
    DUET__OP_CPU(channel_norm_k, channel_norm_backward_k),
};

int duet_channel_norm(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_CHANNEL_NORM, NULL, out, x);
}
