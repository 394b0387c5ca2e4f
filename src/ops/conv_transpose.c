/* Transposed 2-D convolution (PyTorch's conv_transpose2d, weight laid out
 * (C_in, C_out, KH, KW)): the adjoint of conv2d, so its forward is conv2d's
 * input-gradient computation and its backward is a conv2d.
 *
 * Per sample, with P = H*W input pixels and K = O*KH*KW:
 *   forward   col (K, P) = W^T (K, C) x (C, P), then col2im into y
 *   backward  dcol (K, P) = im2col(dy); dx (C, P) += W (C, K) dcol;
 *             dW (C, K) += x (C, P) dcol^T; db[o] += sum dy[o]
 * where column (h, w) of row (o, i, j) belongs to output pixel
 * (h*s - p + i, w*s - p + j), dropped when outside the output. The columns
 * are a buffer of this call, not kept between forward and backward. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

typedef struct tconv_geom {
    int64_t n, c, h, w; /* input (N, C, H, W) */
    int64_t o, kh, kw;  /* weight (C, O, KH, KW) */
    int64_t oh, ow;     /* output spatial size */
    int64_t k, p;       /* GEMM sizes: K = O*KH*KW, P = H*W */
    int stride, pad, out_pad;
} tconv_geom;

typedef struct tconv_ctx {
    int stride, pad, out_pad;
} tconv_ctx;

/* y (O, OH, OW) += col (O*KH*KW, H*W) scattered to the pixels it feeds. */
static void col2im_add(float *y, const float *col, const tconv_geom *g) {
    for (int64_t o = 0; o < g->o; o++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = col + ((o * g->kh + i) * g->kw + j) * g->p;
                for (int64_t h = 0; h < g->h; h++) {
                    const int64_t yh = h * g->stride - g->pad + i;
                    if (yh < 0 || yh >= g->oh) continue;
                    float *dst = y + (o * g->oh + yh) * g->ow;
                    for (int64_t w = 0; w < g->w; w++) {
                        const int64_t yw = w * g->stride - g->pad + j;
                        if (yw >= 0 && yw < g->ow) dst[yw] += row[h * g->w + w];
                    }
                }
            }
}

/* col (O*KH*KW, H*W) gathered from dy (O, OH, OW), 0 where the pixel is
 * outside the output: the adjoint of col2im_add. */
static void im2col_gather(float *col, const float *dy, const tconv_geom *g) {
    for (int64_t o = 0; o < g->o; o++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *row = col + ((o * g->kh + i) * g->kw + j) * g->p;
                for (int64_t h = 0; h < g->h; h++) {
                    const int64_t yh = h * g->stride - g->pad + i;
                    float *dst = row + h * g->w;
                    if (yh < 0 || yh >= g->oh) {
                        memset(dst, 0, (size_t)g->w * sizeof(float));
                        continue;
                    }
                    const float *src = dy + (o * g->oh + yh) * g->ow;
                    for (int64_t w = 0; w < g->w; w++) {
                        const int64_t yw = w * g->stride - g->pad + j;
                        dst[w] = yw >= 0 && yw < g->ow ? src[yw] : 0.0f;
                    }
                }
            }
}

static int tconv_geometry(const duet_tensor *x, const duet_tensor *w, const duet_tensor *b,
                          int stride, int pad, int out_pad, tconv_geom *g) {
    char sx[DUET_SHAPE_STR_MAX], sw[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(w, sw, sizeof sw);
    if (x->ndim != 4 || w->ndim != 4)
        return duet__error(DUET_ESHAPE,
                           "conv_transpose2d: input %s and weight %s must both be 4-D (N, C, H, "
                           "W) and (C, O, KH, KW)", sx, sw);
    if (x->shape[1] != w->shape[0])
        return duet__error(DUET_ESHAPE,
                           "conv_transpose2d: input %s has %" PRId64 " channels but weight %s "
                           "(C, O, KH, KW) expects %" PRId64, sx, x->shape[1], sw, w->shape[0]);
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[1]))
        return duet__error(DUET_ESHAPE, "conv_transpose2d: bias %s does not match weight %s "
                           "(want [%" PRId64 "])", duet_shape_str(b, sb, sizeof sb), sw,
                           w->shape[1]);
    if (stride < 1 || pad < 0 || out_pad < 0 || out_pad >= stride)
        return duet__error(DUET_EINVAL, "conv_transpose2d: stride %d must be >= 1, padding %d "
                           ">= 0 and output_padding %d in [0, stride)", stride, pad, out_pad);
    *g = (tconv_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                      .o = w->shape[1], .kh = w->shape[2], .kw = w->shape[3],
                      .stride = stride, .pad = pad, .out_pad = out_pad};
    g->oh = (g->h - 1) * stride - 2 * (int64_t)pad + g->kh + out_pad;
    g->ow = (g->w - 1) * stride - 2 * (int64_t)pad + g->kw + out_pad;
    if (g->oh < 1 || g->ow < 1)
        return duet__error(DUET_ESHAPE, "conv_transpose2d: input %s with weight %s, stride %d "
                           "and padding %d gives an empty output (%" PRId64 " x %" PRId64 ")",
                           sx, sw, stride, pad, g->oh, g->ow);
    g->k = g->o * g->kh * g->kw;
    g->p = g->h * g->w;
    if (g->k > INT_MAX || g->p > INT_MAX || g->c > INT_MAX)
        return duet__error(DUET_EINVAL, "conv_transpose2d: input %s with weight %s is too "
                           "large for 32-bit BLAS sizes", sx, sw);
    return DUET_OK;
}

static int conv_transpose2d_backward(duet_node *node) {
    const tconv_ctx *cc = node->ctx;
    duet_tensor *x = node->inputs[0], *w = node->inputs[1], *b = node->inputs[2];
    tconv_geom g;
    DUET_TRY(tconv_geometry(x, w, b, cc->stride, cc->pad, cc->out_pad, &g));
    const float *dy = node->output->grad; /* (N, O, OH, OW) */
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = b != NULL ? duet_node_input_grad(node, 2) : NULL;
    const int64_t ysz = g.o * g.oh * g.ow, xsz = g.c * g.p;
    if (db != NULL)
        for (int64_t o = 0; o < g.o; o++) {
            double s = 0.0;
            for (int64_t n = 0; n < g.n; n++)
                s += duet__sum_f32(dy + n * ysz + o * g.oh * g.ow, g.oh * g.ow);
            db[o] += (float)s;
        }
    if (dx == NULL && dw == NULL) return DUET_OK;
    float *dcol = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (dcol == NULL)
        return duet__error(DUET_ENOMEM, "conv_transpose2d: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    for (int64_t n = 0; n < g.n; n++) {
        im2col_gather(dcol, dy + n * ysz, &g);
        /* dX_n (C, P) += W (C, K) dcol (K, P) */
        if (dx != NULL)
            duet_sgemm(false, false, g.c, g.p, g.k, 1.0f, w->data, g.k, dcol, g.p, 1.0f,
                       dx + n * xsz, g.p);
        /* dW (C, K) += X_n (C, P) dcol^T (P, K) */
        if (dw != NULL)
            duet_sgemm(false, true, g.c, g.k, g.p, 1.0f, x->data + n * xsz, g.p, dcol, g.p, 1.0f,
                       dw, g.k);
    }
    duet_aligned_free(dcol);
    return DUET_OK;
}

int duet_conv_transpose2d(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride,
                          int padding, int output_padding, duet_tensor **out) {
    DUET_ASSERT(x != NULL && w != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "conv_transpose2d", "x,weight,bias", x, w, b);
    tconv_geom g;
    DUET_TRY(tconv_geometry(x, w, b, stride, padding, output_padding, &g));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){g.n, g.o, g.oh, g.ow}, &y));
    float *col = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (col == NULL) {
        duet_tensor_release(y);
        return duet__error(DUET_ENOMEM, "conv_transpose2d: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    }
    const int64_t ysz = g.o * g.oh * g.ow, xsz = g.c * g.p;
    for (int64_t n = 0; n < g.n; n++) {
        float *yn = y->data + n * ysz;
        /* The bias first: col2im adds the taps onto it. */
        for (int64_t o = 0; o < g.o; o++) {
            const float bo = b != NULL ? b->data[o] : 0.0f;
            for (int64_t q = 0; q < g.oh * g.ow; q++) yn[o * g.oh * g.ow + q] = bo;
        }
        /* col (K, P) = W^T (K, C) X_n (C, P) */
        duet_sgemm(true, false, g.k, g.p, g.c, 1.0f, w->data, g.k, x->data + n * xsz, g.p, 0.0f,
                   col, g.p);
        col2im_add(yn, col, &g);
    }
    duet_aligned_free(col);
    tconv_ctx *cc = NULL;
    duet_tensor *ins[3] = {x, w, b};
    if (duet_autograd_needs_record(3, ins)) {
        cc = malloc(sizeof *cc);
        if (cc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "conv_transpose2d: out of memory recording the op");
        }
        *cc = (tconv_ctx){stride, padding, output_padding};
    }
    return duet__op_finish(y, "conv_transpose2d", conv_transpose2d_backward, cc, free, 3, ins,
                            out);
}
