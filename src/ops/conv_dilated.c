/* Dilated 2-D convolution (PyTorch's conv2d with dilation > 1, as
 * MMEditing's GLDilationNeck uses), on im2col and one GEMM per sample:
 *   forward   col (K, P) = im2col_d(x_n), K = C*KH*KW, P = OH*OW;
 *             y_n (O, P) = W (O, K) col + b
 *   backward  dW (O, K) += dy_n (O, P) col^T; dcol (K, P) = W^T dy_n;
 *             dx_n += col2im_d(dcol); db[o] += sum dy[o]
 * where row (c, i, j), column (oh, ow) reads input pixel
 * (oh*s - p + i*d, ow*s - p + j*d), 0 outside. The columns are recomputed
 * in the backward, not kept. duet_conv2d (dilation 1) stays the fast path. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

typedef struct dconv_geom {
    int64_t n, c, h, w;  /* input */
    int64_t o, kh, kw;   /* weight (O, C, KH, KW) */
    int64_t oh, ow;
    int64_t k, p;        /* K = C*KH*KW, P = OH*OW */
    int stride, pad, dil;
} dconv_geom;

typedef struct dconv_ctx {
    int stride, pad, dil;
} dconv_ctx;

static void im2col_d(float *col, const float *x, const dconv_geom *g) {
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                for (int64_t a = 0; a < g->oh; a++) {
                    const int64_t ih = a * g->stride - g->pad + i * g->dil;
                    float *dst = row + a * g->ow;
                    if (ih < 0 || ih >= g->h) {
                        memset(dst, 0, (size_t)g->ow * sizeof(float));
                        continue;
                    }
                    const float *src = x + (c * g->h + ih) * g->w;
                    for (int64_t b = 0; b < g->ow; b++) {
                        const int64_t iw = b * g->stride - g->pad + j * g->dil;
                        dst[b] = iw >= 0 && iw < g->w ? src[iw] : 0.0f;
                    }
                }
            }
}

/* The adjoint of im2col_d: dx (C, H, W) += the columns at the pixels they read. */
static void col2im_d(float *dx, const float *col, const dconv_geom *g) {
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                for (int64_t a = 0; a < g->oh; a++) {
                    const int64_t ih = a * g->stride - g->pad + i * g->dil;
                    if (ih < 0 || ih >= g->h) continue;
                    float *dst = dx + (c * g->h + ih) * g->w;
                    for (int64_t b = 0; b < g->ow; b++) {
                        const int64_t iw = b * g->stride - g->pad + j * g->dil;
                        if (iw >= 0 && iw < g->w) dst[iw] += row[a * g->ow + b];
                    }
                }
            }
}

static int dconv_geometry(const duet_tensor *x, const duet_tensor *w, const duet_tensor *b,
                          int stride, int pad, int dil, dconv_geom *g) {
    char sx[DUET_SHAPE_STR_MAX], sw[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(w, sw, sizeof sw);
    if (x->ndim != 4 || w->ndim != 4)
        return duet__error(DUET_ESHAPE, "conv2d_dilated: input %s and weight %s must both be "
                           "4-D (N, C, H, W) and (O, C, KH, KW)", sx, sw);
    if (x->shape[1] != w->shape[1])
        return duet__error(DUET_ESHAPE, "conv2d_dilated: input %s has %" PRId64 " channels but "
                           "weight %s expects %" PRId64, sx, x->shape[1], sw, w->shape[1]);
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return duet__error(DUET_ESHAPE, "conv2d_dilated: bias %s does not match weight %s",
                           duet_shape_str(b, sb, sizeof sb), sw);
    if (stride < 1 || pad < 0 || dil < 1)
        return duet__error(DUET_EINVAL, "conv2d_dilated: stride %d and dilation %d must be >= 1, "
                           "padding %d >= 0", stride, dil, pad);
    *g = (dconv_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                      .o = w->shape[0], .kh = w->shape[2], .kw = w->shape[3], .stride = stride,
                      .pad = pad, .dil = dil};
    const int64_t eh = (int64_t)dil * (g->kh - 1) + 1, ew = (int64_t)dil * (g->kw - 1) + 1;
    const int64_t ph = g->h + 2 * (int64_t)pad - eh, pw = g->w + 2 * (int64_t)pad - ew;
    if (ph < 0 || pw < 0)
        return duet__error(DUET_ESHAPE, "conv2d_dilated: input %s with weight %s, padding %d "
                           "and dilation %d gives an empty output", sx, sw, pad, dil);
    g->oh = ph / stride + 1;
    g->ow = pw / stride + 1;
    g->k = g->c * g->kh * g->kw;
    g->p = g->oh * g->ow;
    if (g->k > INT_MAX || g->p > INT_MAX || g->o > INT_MAX)
        return duet__error(DUET_EINVAL, "conv2d_dilated: input %s with weight %s is too large "
                           "for 32-bit BLAS sizes", sx, sw);
    return DUET_OK;
}

static int conv2d_dilated_backward(duet_node *node) {
    const dconv_ctx *cc = node->ctx;
    duet_tensor *x = node->inputs[0], *w = node->inputs[1], *b = node->inputs[2];
    dconv_geom g;
    DUET_TRY(dconv_geometry(x, w, b, cc->stride, cc->pad, cc->dil, &g));
    const float *dy = node->output->grad;
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = b != NULL ? duet_node_input_grad(node, 2) : NULL;
    const int64_t ysz = g.o * g.p, xsz = g.c * g.h * g.w;
    if (db != NULL)
        for (int64_t o = 0; o < g.o; o++) {
            double s = 0.0;
            for (int64_t n = 0; n < g.n; n++) s += duet__sum_f32(dy + n * ysz + o * g.p, g.p);
            db[o] += (float)s;
        }
    if (dx == NULL && dw == NULL) return DUET_OK;
    float *col = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (col == NULL)
        return duet__error(DUET_ENOMEM, "conv2d_dilated: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    for (int64_t n = 0; n < g.n; n++) {
        if (dw != NULL) {
            im2col_d(col, x->data + n * xsz, &g);
            /* dW (O, K) += dY_n (O, P) col^T (P, K) */
            duet_sgemm(false, true, g.o, g.k, g.p, 1.0f, dy + n * ysz, g.p, col, g.p, 1.0f, dw,
                       g.k);
        }
        if (dx != NULL) {
            /* dcol (K, P) = W^T (K, O) dY_n (O, P) */
            duet_sgemm(true, false, g.k, g.p, g.o, 1.0f, w->data, g.k, dy + n * ysz, g.p, 0.0f,
                       col, g.p);
            col2im_d(dx + n * xsz, col, &g);
        }
    }
    duet_aligned_free(col);
    return DUET_OK;
}

int duet_conv2d_dilated(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride, int padding,
                        int dilation, duet_tensor **out) {
    DUET_ASSERT(x != NULL && w != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "conv2d_dilated", "x,weight,bias", x, w, b);
    dconv_geom g;
    DUET_TRY(dconv_geometry(x, w, b, stride, padding, dilation, &g));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){g.n, g.o, g.oh, g.ow}, &y));
    float *col = duet_aligned_alloc((size_t)(g.k * g.p) * sizeof(float));
    if (col == NULL) {
        duet_tensor_release(y);
        return duet__error(DUET_ENOMEM, "conv2d_dilated: out of memory for %" PRId64
                           " column floats", g.k * g.p);
    }
    const int64_t ysz = g.o * g.p, xsz = g.c * g.h * g.w;
    for (int64_t n = 0; n < g.n; n++) {
        float *yn = y->data + n * ysz;
        for (int64_t o = 0; o < g.o; o++) {
            const float bo = b != NULL ? b->data[o] : 0.0f;
            for (int64_t q = 0; q < g.p; q++) yn[o * g.p + q] = bo;
        }
        im2col_d(col, x->data + n * xsz, &g);
        duet_sgemm(false, false, g.o, g.p, g.k, 1.0f, w->data, g.k, col, g.p, 1.0f, yn, g.p);
    }
    duet_aligned_free(col);
    dconv_ctx *cc = NULL;
    duet_tensor *ins[3] = {x, w, b};
    if (duet_autograd_needs_record(3, ins)) {
        cc = malloc(sizeof *cc);
        if (cc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "conv2d_dilated: out of memory recording the op");
        }
        *cc = (dconv_ctx){stride, padding, dilation};
    }
    return duet__op_finish(y, "conv2d_dilated", conv2d_dilated_backward, cc, free, 3, ins, out);
}
