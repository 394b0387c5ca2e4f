/* 2-D convolution (PyTorch's conv2d, weight OIHW) as im2col + one SGEMM per
 * sample. The columns live in per-thread scratch and are rebuilt in backward
 * rather than kept, which costs one im2col per sample but no N*K*P floats of
 * saved state. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

typedef struct conv_geom {
    int64_t n, c, h, w; /* input (N, C, H, W) */
    int64_t o, kh, kw;  /* weight (O, C, KH, KW) */
    int64_t oh, ow;     /* output spatial size */
    int64_t k, p;       /* GEMM sizes: K = C*KH*KW, P = OH*OW */
    int stride, pad;
} conv_geom;

typedef struct conv_ctx {
    int stride, pad;
} conv_ctx;

/* A 1x1 stride-1 unpadded conv needs no columns: the sample is the matrix. */
static bool is_pointwise(const conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->stride == 1 && g->pad == 0;
}

/* The output columns ow in [*lo, *hi) whose input column ow*s - p + j falls
 * inside [0, W); the others read zero padding. */
static void valid_cols(const conv_geom *g, int64_t j, int64_t *lo, int64_t *hi) {
    int64_t s = g->stride, first = g->pad - j, last = g->w - 1 + g->pad - j;
    int64_t a = first <= 0 ? 0 : (first + s - 1) / s;
    int64_t b = last < 0 ? 0 : last / s + 1;
    if (b > g->ow) b = g->ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* col (C*KH*KW, OH*OW) from one sample x (C, H, W): row (c, i, j), column
 * (oh, ow) holds x[c, oh*s - p + i, ow*s - p + j], or 0 in the padding. */
static void im2col(float *col, const float *x, const conv_geom *g) {
    const int64_t s = g->stride, pad = g->pad;
    for (int64_t c = 0; c < g->c; c++) {
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                for (int64_t oh = 0; oh < g->oh; oh++) {
                    float *dst = row + oh * g->ow;
                    int64_t ih = oh * s - pad + i;
                    if (ih < 0 || ih >= g->h) {
                        memset(dst, 0, (size_t)g->ow * sizeof(float));
                        continue;
                    }
                    /* Input column of output column ow: ow*s + off. */
                    const float *src = x + (c * g->h + ih) * g->w;
                    const int64_t off = j - pad;
                    for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
                    if (s == 1) {
                        if (hi > lo)
                            memcpy(dst + lo, src + lo + off, (size_t)(hi - lo) * sizeof(float));
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * s + off];
                    }
                    for (int64_t ow = hi; ow < g->ow; ow++) dst[ow] = 0.0f;
                }
            }
        }
    }
}

/* The adjoint of im2col: dx (C, H, W) += every column entry back at the
 * input position it was read from (padding entries are dropped). */
static void col2im(float *dx, const float *col, const conv_geom *g) {
    const int64_t s = g->stride, pad = g->pad;
    for (int64_t c = 0; c < g->c; c++) {
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                for (int64_t oh = 0; oh < g->oh; oh++) {
                    int64_t ih = oh * s - pad + i;
                    if (ih < 0 || ih >= g->h) continue;
                    const float *src = row + oh * g->ow;
                    float *dst = dx + (c * g->h + ih) * g->w;
                    const int64_t off = j - pad;
                    if (s == 1) {
                        /* Unit stride: a plain vectorisable add of rows. */
                        float *d1 = dst + off;
                        for (int64_t ow = lo; ow < hi; ow++) d1[ow] += src[ow];
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow * s + off] += src[ow];
                    }
                }
            }
        }
    }
}

static int conv_geometry(const duet_tensor *x, const duet_tensor *w, const duet_tensor *b,
                         int stride, int pad, conv_geom *g) {
    char sx[DUET_SHAPE_STR_MAX], sw[DUET_SHAPE_STR_MAX], sb[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    duet_shape_str(w, sw, sizeof sw);
    if (x->ndim != 4 || w->ndim != 4)
        return duet__error(DUET_ESHAPE,
                           "conv2d: input %s and weight %s must both be 4-D (N, C, H, W) and "
                           "(O, C, KH, KW)", sx, sw);
    if (x->shape[1] != w->shape[1])
        return duet__error(DUET_ESHAPE,
                           "conv2d: input %s has %" PRId64 " channels but weight %s expects %"
                           PRId64, sx, x->shape[1], sw, w->shape[1]);
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return duet__error(DUET_ESHAPE, "conv2d: bias %s does not match weight %s (want [%"
                           PRId64 "])", duet_shape_str(b, sb, sizeof sb), sw, w->shape[0]);
    if (stride < 1 || pad < 0)
        return duet__error(DUET_EINVAL, "conv2d: stride %d must be >= 1 and padding %d >= 0",
                           stride, pad);
    g->n = x->shape[0];
    g->c = x->shape[1];
    g->h = x->shape[2];
    g->w = x->shape[3];
    g->o = w->shape[0];
    g->kh = w->shape[2];
    g->kw = w->shape[3];
    g->stride = stride;
    g->pad = pad;
    int64_t hp = g->h + 2 * (int64_t)pad, wp = g->w + 2 * (int64_t)pad;
    if (hp < g->kh || wp < g->kw)
        return duet__error(DUET_ESHAPE,
                           "conv2d: input %s with padding %d is smaller than the kernel of "
                           "weight %s", sx, pad, sw);
    g->oh = (hp - g->kh) / stride + 1;
    g->ow = (wp - g->kw) / stride + 1;
    g->k = g->c * g->kh * g->kw;
    g->p = g->oh * g->ow;
    if (g->k > INT_MAX || g->p > INT_MAX || g->o > INT_MAX)
        return duet__error(DUET_EINVAL, "conv2d: input %s with weight %s is too large for "
                           "32-bit BLAS sizes", sx, sw);
    return DUET_OK;
}

static int conv2d_backward(duet_node *node) {
    const conv_ctx *cc = node->ctx;
    duet_tensor *x = node->inputs[0], *w = node->inputs[1], *b = node->inputs[2];
    conv_geom g;
    DUET_TRY(conv_geometry(x, w, b, cc->stride, cc->pad, &g));
    const float *dy = node->output->grad; /* (N, O, P) */
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = b != NULL ? duet_node_input_grad(node, 2) : NULL;
    const bool pointwise = is_pointwise(&g);

    if (db != NULL) {
        for (int64_t n = 0; n < g.n; n++) {
            for (int64_t o = 0; o < g.o; o++) {
                const float *r = dy + (n * g.o + o) * g.p;
                float s = 0.0f;
                for (int64_t q = 0; q < g.p; q++) s += r[q];
                db[o] += s;
            }
        }
    }
    if (dw == NULL && dx == NULL) return DUET_OK;

    float *col = NULL, *dcol = NULL;
    if (!pointwise) {
        if (dw != NULL && (col = duet__scratch(0, (size_t)(g.k * g.p))) == NULL)
            return DUET_ENOMEM;
        if (dx != NULL && (dcol = duet__scratch(1, (size_t)(g.k * g.p))) == NULL)
            return DUET_ENOMEM;
    }
    for (int64_t n = 0; n < g.n; n++) {
        const float *xn = x->data + n * g.c * g.h * g.w;
        const float *dyn = dy + n * g.o * g.p;
        if (dw != NULL) {
            /* dW (O, K) += dY_n (O, P) col^T (P, K) */
            const float *cn = xn;
            if (!pointwise) {
                im2col(col, xn, &g);
                cn = col;
            }
            duet_sgemm(false, true, g.o, g.k, g.p, 1.0f, dyn, g.p, cn, g.p, 1.0f, dw, g.k);
        }
        if (dx != NULL) {
            /* dcol (K, P) = W^T (K, O) dY_n (O, P), scattered back by col2im. */
            float *dxn = dx + n * g.c * g.h * g.w;
            if (pointwise) {
                duet_sgemm(true, false, g.k, g.p, g.o, 1.0f, w->data, g.k, dyn, g.p, 1.0f, dxn,
                           g.p);
            } else {
                duet_sgemm(true, false, g.k, g.p, g.o, 1.0f, w->data, g.k, dyn, g.p, 0.0f, dcol,
                           g.p);
                col2im(dxn, dcol, &g);
            }
        }
    }
    return DUET_OK;
}

int duet_conv2d(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride, int padding,
                duet_tensor **out) {
    *out = NULL;
    conv_geom g;
    DUET_TRY(conv_geometry(x, w, b, stride, padding, &g));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create4(&y, g.n, g.o, g.oh, g.ow));
    const bool pointwise = is_pointwise(&g);
    float *col = NULL;
    if (!pointwise && (col = duet__scratch(0, (size_t)(g.k * g.p))) == NULL) {
        duet_tensor_release(y);
        return DUET_ENOMEM;
    }
    for (int64_t n = 0; n < g.n; n++) {
        const float *xn = x->data + n * g.c * g.h * g.w;
        float *yn = y->data + n * g.o * g.p;
        /* The bias goes in first so the GEMM adds onto it (beta = 1). */
        if (b != NULL)
            for (int64_t o = 0; o < g.o; o++)
                for (int64_t q = 0; q < g.p; q++) yn[o * g.p + q] = b->data[o];
        const float *cn = xn;
        if (!pointwise) {
            im2col(col, xn, &g);
            cn = col;
        }
        /* Y_n (O, P) = W (O, K) col (K, P) */
        duet_sgemm(false, false, g.o, g.p, g.k, 1.0f, w->data, g.k, cn, g.p,
                   b != NULL ? 1.0f : 0.0f, yn, g.p);
    }
    duet_tensor *ins[3] = {x, w, b};
    if (duet_autograd_needs_record(3, ins)) {
        conv_ctx *cc = malloc(sizeof *cc);
        if (cc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "conv2d: out of memory recording the op");
        }
        cc->stride = stride;
        cc->pad = padding;
        int rc = duet_autograd_record(y, "conv2d", conv2d_backward, cc, free, 3, ins);
        if (rc != DUET_OK) {
            duet_tensor_release(y);
            return rc;
        }
    }
    *out = y;
    return DUET_OK;
}
