/* The ops of MMEditing's ContextualAttentionModule (DeepFillv1's refiner,
 * src/models/contextual_attention.c) beyond convolutions: a batch slice,
 * patch extraction (F.unfold's patches as a filter bank), nearest
 * subsampling, row normalisation, the correlation fusion with an identity
 * kernel, and a masked channel softmax. Each has a fused first-order
 * backward; all are linear maps (gather / scatter) except normalize_rows and
 * softmax_channels. CPU. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- slice0 --------------------------------------------------------------------- */

typedef struct slice_ctx {
    int64_t start;
} slice_ctx;

static int slice0_backward(duet_node *node) {
    const slice_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *y = node->output;
    const int64_t per = y->numel / y->shape[0];
    float *dst = gx + c->start * per;
    for (int64_t i = 0; i < y->numel; i++) dst[i] += y->grad[i];
    return DUET_OK;
}

int duet_slice0(duet_tensor *x, int64_t start, int64_t count, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "slice0", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 1 || start < 0 || count < 1 || start + count > x->shape[0])
        return duet__error(DUET_ESHAPE, "slice0: rows [%" PRId64 ", %" PRId64 ") of %s",
                           start, start + count, duet_shape_str(x, sx, sizeof sx));
    int64_t shape[DUET_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[0] = count;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, shape, &y));
    const int64_t per = x->numel / x->shape[0];
    memcpy(y->data, x->data + start * per, (size_t)(count * per) * sizeof(float));
    slice_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "slice0: out of memory");
        }
        c->start = start;
    }
    return duet__op_finish_unread(duet__op_finish(y, "slice0", slice0_backward, c, free, 1, &x,
                                                  out), out);
}

/* ---- extract_patches -------------------------------------------------------------- */

typedef struct patch_ctx {
    int k, stride, pad;
    int64_t oh, ow;
} patch_ctx;

/* Patch (n, oh, ow) is row (n*OH + oh)*OW + ow; element (c, i, j) reads
 * x[n, c, oh*s - p + i, ow*s - p + j] (0 outside). fwd: y = gather(x);
 * else gx += scatter(gy). */
static void patches_map(bool fwd, float *y, float *x, const int64_t *xs, const patch_ctx *pc) {
    const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3], k = pc->k;
    for (int64_t b = 0; b < n; b++)
        for (int64_t oh = 0; oh < pc->oh; oh++)
            for (int64_t ow = 0; ow < pc->ow; ow++) {
                float *row = y + ((b * pc->oh + oh) * pc->ow + ow) * c * k * k;
                for (int64_t ch = 0; ch < c; ch++)
                    for (int64_t i = 0; i < k; i++)
                        for (int64_t j = 0; j < k; j++) {
                            const int64_t ih = oh * pc->stride - pc->pad + i;
                            const int64_t iw = ow * pc->stride - pc->pad + j;
                            float *e = row + (ch * k + i) * k + j;
                            const bool in = ih >= 0 && ih < h && iw >= 0 && iw < w;
                            float *src = in ? x + ((b * c + ch) * h + ih) * w + iw : NULL;
                            if (fwd) *e = in ? *src : 0.0f;
                            else if (in) *src += *e;
                        }
            }
}

static int patches_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        patches_map(false, node->output->grad, gx, node->inputs[0]->shape, node->ctx);
    return DUET_OK;
}

int duet_extract_patches(duet_tensor *x, int kernel, int stride, int padding,
                         duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "extract_patches", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || kernel < 1 || stride < 1 || padding < 0 ||
        x->shape[2] + 2 * (int64_t)padding < kernel || x->shape[3] + 2 * (int64_t)padding < kernel)
        return duet__error(DUET_ESHAPE, "extract_patches: input %s with kernel %d, stride %d, "
                           "padding %d", duet_shape_str(x, sx, sizeof sx), kernel, stride,
                           padding);
    patch_ctx pc = {.k = kernel, .stride = stride, .pad = padding,
                    .oh = (x->shape[2] + 2 * padding - kernel) / stride + 1,
                    .ow = (x->shape[3] + 2 * padding - kernel) / stride + 1};
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(
        4, (int64_t[]){x->shape[0] * pc.oh * pc.ow, x->shape[1], kernel, kernel}, &y));
    patches_map(true, y->data, x->data, x->shape, &pc);
    patch_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "extract_patches: out of memory");
        }
        *c = pc;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "extract_patches", patches_backward, c, free, 1, &x, out), out);
}

/* ---- subsample (nearest, integer factor) ----------------------------------------- */

typedef struct sub_ctx {
    int f;
} sub_ctx;

static void sub_map(bool fwd, float *y, float *x, const int64_t *xs, const int64_t *ys, int f) {
    for (int64_t nc = 0; nc < ys[0] * ys[1]; nc++)
        for (int64_t i = 0; i < ys[2]; i++)
            for (int64_t j = 0; j < ys[3]; j++) {
                float *e = y + (nc * ys[2] + i) * ys[3] + j;
                float *s = x + (nc * xs[2] + i * f) * xs[3] + j * f;
                if (fwd) *e = *s;
                else *s += *e;
            }
}

static int sub_backward(duet_node *node) {
    const sub_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        sub_map(false, node->output->grad, gx, node->inputs[0]->shape, node->output->shape, c->f);
    return DUET_OK;
}

int duet_subsample_nearest(duet_tensor *x, int factor, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "subsample_nearest", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || factor < 1 || x->shape[2] < factor || x->shape[3] < factor)
        return duet__error(DUET_ESHAPE, "subsample_nearest: input %s with factor %d",
                           duet_shape_str(x, sx, sizeof sx), factor);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(
        4, (int64_t[]){x->shape[0], x->shape[1], x->shape[2] / factor, x->shape[3] / factor},
        &y));
    sub_map(true, y->data, x->data, x->shape, y->shape, factor);
    sub_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "subsample_nearest: out of memory");
        }
        c->f = factor;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "subsample_nearest", sub_backward, c, free, 1, &x, out), out);
}

/* ---- normalize_rows --------------------------------------------------------------- */

typedef struct norm_ctx {
    float eps;
} norm_ctx;

/* y = x / max(|x|, eps) per row (dim 0): where |x| > eps, gx = (g - y (y.g))
 * / |x|; else gx = g / eps (torch.max's gradient goes to the larger). */
static int normalize_rows_backward(duet_node *node) {
    const norm_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *x = node->inputs[0], *y = node->output;
    const int64_t rows = x->shape[0], k = x->numel / rows;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x->data + r * k, *yr = y->data + r * k, *g = y->grad + r * k;
        double ss = 0.0, yg = 0.0;
        for (int64_t i = 0; i < k; i++) {
            ss += (double)xr[i] * xr[i];
            yg += (double)yr[i] * g[i];
        }
        const double nrm = sqrt(ss);
        for (int64_t i = 0; i < k; i++)
            gx[r * k + i] += nrm > c->eps ? (float)((g[i] - yr[i] * yg) / nrm) : g[i] / c->eps;
    }
    return DUET_OK;
}

int duet_normalize_rows(duet_tensor *x, float eps, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "normalize_rows", "x", x);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    const int64_t rows = x->shape[0], k = x->numel / rows;
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < k; i++) ss += (double)x->data[r * k + i] * x->data[r * k + i];
        const float d = fmaxf((float)sqrt(ss), eps);
        for (int64_t i = 0; i < k; i++) y->data[r * k + i] = x->data[r * k + i] / d;
    }
    norm_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "normalize_rows: out of memory");
        }
        c->eps = eps;
    }
    return duet__op_finish(y, "normalize_rows", normalize_rows_backward, c, free, 1, &x, out);
}

/* ---- fuse_correlation -------------------------------------------------------------
 * corr (N, L, H, W) with L = H*W: per sample the matrix M[p][l] = corr[l][p]
 * (p a map position, l a patch). A = D(M) with D the sum over the 2r+1
 * diagonal shifts (M[p+d][l+d], d in [-r, r]: the identity kernel's
 * convolution); B = D(A) with both indices in column-major order (T(a*W +
 * b) = b*H + a); out[l][p] = B[p][l]. D is self-adjoint and T a
 * permutation, so the backward is the same steps with T's inverse. */

static void diag_sum(float *dst, const float *src, int64_t n, int r, const int64_t *perm,
                     const int64_t *inv) {
    /* dst[p][l] = sum_d src[perm^-1(perm(p)+d)][perm^-1(perm(l)+d)] */
    for (int64_t p = 0; p < n; p++)
        for (int64_t l = 0; l < n; l++) {
            double s = 0.0;
            for (int d = -r; d <= r; d++) {
                const int64_t pp = perm[p] + d, ll = perm[l] + d;
                if (pp < 0 || pp >= n || ll < 0 || ll >= n) continue;
                s += src[inv[pp] * n + inv[ll]];
            }
            dst[p * n + l] = (float)s;
        }
}

typedef struct fuse_ctx {
    int r;
} fuse_ctx;

static int fuse_apply(float *out, const float *in, int64_t nb, int64_t h, int64_t w, int r,
                      bool forward) {
    const int64_t n = h * w;
    int64_t *ident = malloc((size_t)n * sizeof *ident), *t = malloc((size_t)n * sizeof *t),
            *tinv = malloc((size_t)n * sizeof *tinv);
    float *m = malloc((size_t)(n * n) * sizeof *m), *a = malloc((size_t)(n * n) * sizeof *a);
    if (ident == NULL || t == NULL || tinv == NULL || m == NULL || a == NULL) {
        free(ident), free(t), free(tinv), free(m), free(a);
        return duet__error(DUET_ENOMEM, "fuse_correlation: out of memory");
    }
    for (int64_t p = 0; p < n; p++) {
        ident[p] = p;
        t[p] = (p % w) * h + p / w;
        tinv[t[p]] = p;
    }
    for (int64_t b = 0; b < nb; b++) {
        const float *src = in + b * n * n;
        float *dst = out + b * n * n;
        /* The matrix [p][l] is the transpose of the channel-major layout. */
        for (int64_t l = 0; l < n; l++)
            for (int64_t p = 0; p < n; p++) m[p * n + l] = src[l * n + p];
        /* forward: D in natural order then in T's; backward: the reverse. */
        diag_sum(a, m, n, r, forward ? ident : t, forward ? ident : tinv);
        diag_sum(m, a, n, r, forward ? t : ident, forward ? tinv : ident);
        for (int64_t l = 0; l < n; l++)
            for (int64_t p = 0; p < n; p++) dst[l * n + p] += m[p * n + l];
    }
    free(ident), free(t), free(tinv), free(m), free(a);
    return DUET_OK;
}

static int fuse_backward(duet_node *node) {
    const fuse_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *y = node->output;
    return fuse_apply(gx, y->grad, y->shape[0], y->shape[2], y->shape[3], c->r, false);
}

int duet_fuse_correlation(duet_tensor *corr, int kernel, duet_tensor **out) {
    DUET_ASSERT(corr != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "fuse_correlation", "corr", corr);
    char sx[DUET_SHAPE_STR_MAX];
    if (corr->ndim != 4 || corr->shape[1] != corr->shape[2] * corr->shape[3] || kernel < 1 ||
        kernel % 2 != 1)
        return duet__error(DUET_ESHAPE, "fuse_correlation: correlation %s must be (N, H*W, H, "
                           "W) and the kernel (%d) odd", duet_shape_str(corr, sx, sizeof sx),
                           kernel);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create(4, corr->shape, &y));
    int rc = fuse_apply(y->data, corr->data, corr->shape[0], corr->shape[2], corr->shape[3],
                        kernel / 2, true);
    fuse_ctx *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(1, &corr)) {
        if ((c = malloc(sizeof *c)) == NULL) rc = duet__error(DUET_ENOMEM, "fuse_correlation");
        else c->r = kernel / 2;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "fuse_correlation", fuse_backward, c, free, 1, &corr, out), out);
}

/* ---- softmax_channels -------------------------------------------------------------- */

typedef struct softmax_ctx {
    float scale;
} softmax_ctx;

static int softmax_backward(duet_node *node) {
    const softmax_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *y = node->output;
    const int64_t n = y->shape[0], ch = y->shape[1], inner = y->numel / (n * ch);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < inner; i++) {
            const float *yy = y->data + b * ch * inner + i, *g = y->grad + b * ch * inner + i;
            double dot = 0.0;
            for (int64_t l = 0; l < ch; l++) dot += (double)yy[l * inner] * g[l * inner];
            for (int64_t l = 0; l < ch; l++)
                gx[b * ch * inner + i + l * inner] +=
                    (float)(c->scale * yy[l * inner] * (g[l * inner] - dot));
        }
    return DUET_OK;
}

int duet_softmax_channels(duet_tensor *x, float scale, const uint8_t *masked,
                          duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "softmax_channels", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 2)
        return duet__error(DUET_ESHAPE, "softmax_channels: input %s must be (N, C, ...)",
                           duet_shape_str(x, sx, sizeof sx));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    const int64_t n = x->shape[0], ch = x->shape[1], inner = x->numel / (n * ch);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xx = x->data + b * ch * inner + i;
            float *yy = y->data + b * ch * inner + i;
            const uint8_t *mk = masked != NULL ? masked + b * ch : NULL;
            float mx = -INFINITY;
            for (int64_t l = 0; l < ch; l++)
                if (mk == NULL || !mk[l]) mx = fmaxf(mx, scale * xx[l * inner]);
            double s = 0.0;
            for (int64_t l = 0; l < ch; l++) {
                const float e = mk != NULL && mk[l] ? 0.0f : expf(scale * xx[l * inner] - mx);
                yy[l * inner] = e;
                s += e;
            }
            /* Every channel masked (each context patch touches the hole):
             * zeros, as the original DeepFill's mask product gives; the
             * -inf logits of MMEditing's module make PyTorch's softmax NaN
             * here, which would reach every weight a step later. */
            if (s == 0.0) continue; /* yy is all 0 already */
            for (int64_t l = 0; l < ch; l++) yy[l * inner] = (float)(yy[l * inner] / s);
        }
    softmax_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "softmax_channels: out of memory");
        }
        c->scale = scale;
    }
    return duet__op_finish(y, "softmax_channels", softmax_backward, c, free, 1, &x, out);
}
