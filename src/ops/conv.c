/* 2-D convolution (PyTorch's conv2d, weight OIHW) as im2col + SGEMM.
 *
 * Samples go through in chunks: the chunk's columns sit side by side in one
 * (K, nb*P) matrix, so that one GEMM serves the whole chunk. Late layers
 * have few output pixels (P = 16 at 4x4) and a large weight; a GEMM per
 * sample would repack the whole weight for 16 columns, and the weight
 * gradient's GEMM would read and write all of dW for an inner dimension of
 * 16. Chunks stop growing at about CONV_COLS_TARGET columns, and at
 * CONV_COL_MAX_FLOATS of columns: from about 256 columns on, one sample per
 * GEMM is as fast, and larger chunks only push the columns out of L2
 * (measured with bench_networks, tiny and full, targets 1 to 2048).
 *
 * The columns live in per-thread scratch and are rebuilt in backward rather
 * than kept, which costs one im2col per sample but no N*K*P floats of saved
 * state.
 *
 * In bf16 mixed precision, and in float32 with the conv paths "onednn" and
 * "winograd" (duet_conv_path), convolutions go to oneDNN's convolution
 * primitives (conv_onednn.c) where it has JIT kernels for the shape and
 * they are the faster path (in float32 on the direct kernels the forward
 * and dX, dW staying here; on the Winograd kernels all three); the others
 * run here, in bf16 on bf16 columns for the bf16 matmul. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <omp.h>
#include <string.h>

#define CONV_COLS_TARGET 256
#define CONV_COL_MAX_FLOATS ((int64_t)4 << 20)

typedef struct conv_geom {
    int64_t n, c, h, w; /* input (N, C, H, W) */
    int64_t o, kh, kw;  /* weight (O, C, KH, KW) */
    int64_t oh, ow;     /* output spatial size */
    int64_t k, p;       /* GEMM sizes: K = C*KH*KW, P = OH*OW */
    int64_t nb;         /* samples per GEMM chunk */
    int stride, pad;
} conv_geom;

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

/* The same for output rows and kernel row i. */
static void valid_rows(const conv_geom *g, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t s = g->stride, first = g->pad - i, last = g->h - 1 + g->pad - i;
    int64_t a = first <= 0 ? 0 : (first + s - 1) / s;
    int64_t b = last < 0 ? 0 : last / s + 1;
    if (b > g->oh) b = g->oh;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* [*lo, *hi) cut to the tile [r0, r1), possibly empty (then *lo == *hi). */
static void clamp_rows(int64_t *lo, int64_t *hi, int64_t r0, int64_t r1) {
    if (*lo < r0) *lo = r0;
    if (*hi > r1) *hi = r1;
    if (*hi < *lo) *hi = *lo;
}

/* The helpers of im2col_channel and col2im_channel below are inlined into
 * each of their clones: called, they ran in the baseline build (SSE), the
 * stride-2 gather among them. */
#if defined(__GNUC__)
#define COL_INLINE static inline __attribute__((always_inline))
#else
#define COL_INLINE static inline
#endif

/* Where im2col writes: float32 columns (f), or bf16 ones (h) rounded as
 * they are written, which the bf16 GEMM reads as they are (mixed
 * precision: no float32 copy to write, read back and round). One of the
 * two is set. */
typedef struct col_dst {
    float *f;
    uint16_t *h;
} col_dst;

static col_dst col_dst_of(float *buf, bool bf16) {
    return bf16 ? (col_dst){NULL, (uint16_t *)buf} : (col_dst){buf, NULL};
}

/* d moved on by i entries. */
COL_INLINE col_dst col_at(col_dst d, int64_t i) {
    return d.h != NULL ? (col_dst){NULL, d.h + i} : (col_dst){d.f + i, NULL};
}

COL_INLINE void col_zero(col_dst d, int64_t n) {
    if (d.h != NULL) {
        for (int64_t i = 0; i < n; i++) d.h[i] = 0;
    } else {
        for (int64_t i = 0; i < n; i++) d.f[i] = 0.0f;
    }
}

/* d[i] = src[i * s] for i in [0, n) */
COL_INLINE void col_gather(col_dst d, const float *src, int64_t s, int64_t n) {
    if (n <= 0) return;
    if (s == 1) {
        if (d.h != NULL) duet_f32_to_bf16(d.h, src, (size_t)n);
        else memcpy(d.f, src, (size_t)n * sizeof(float));
    } else if (d.h != NULL) {
        float buf[256]; /* gathered, then rounded in runs */
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            const int64_t len = n - i0 < 256 ? n - i0 : 256;
            for (int64_t i = 0; i < len; i++) buf[i] = src[(i0 + i) * s];
            duet_f32_to_bf16(d.h + i0, buf, (size_t)len);
        }
    } else if (s == 2) {
        /* The discriminator's stride: a constant stride lets the compiler
         * vectorise the gather with shuffles. */
        for (int64_t i = 0; i < n; i++) d.f[i] = src[2 * i];
    } else {
        for (int64_t i = 0; i < n; i++) d.f[i] = src[i * s];
    }
}

/* In rows [0, nrows) of a tap's columns (OW entries each), the entries
 * outside [lo, hi) read padding: zero them. */
COL_INLINE void zero_outside_cols(col_dst rows, int64_t nrows, int64_t ow_n, int64_t lo,
                                  int64_t hi) {
    for (int64_t oh = 0; oh < nrows; oh++) {
        const col_dst d = col_at(rows, oh * ow_n);
        col_zero(d, lo);
        col_zero(col_at(d, hi), ow_n - hi);
    }
}

/* Floats of strided bf16 columns that im2col gathers before rounding them
 * (16 KB of stack per thread). */
#define IM2COL_STAGE 4096

/* Compiled for AVX2 and AVX-512 as well as the baseline, picked at load
 * time, for im2col's and col2im's work on one channel: the discriminator's
 * stride-2 gather and scatter and the short rows of small planes were SSE
 * loops (a quarter of im2col's time in the tiny SRGAN was the stride-2
 * gather). The work is copies and single additions, so every clone gives
 * the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONV_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CONV_CLONES
#endif

/* im2col's rows (c, i, j) of channel c for output rows [r0, r1). */
CONV_CLONES static void im2col_channel(col_dst col, int64_t ld, const float *x,
                                       const conv_geom *g, int64_t r0, int64_t r1, int64_t c) {
    const int64_t s = g->stride, pad = g->pad, ow_n = g->ow;
    /* Stride 1 with "same" width: output row oh of kernel tap (i, j) is input
     * row oh - p + i shifted by j - p, so the valid rows are one shifted copy
     * of the plane, after which the few columns that wrapped around from the
     * neighbouring row are zeroed. */
    const bool shifted_plane = s == 1 && g->ow == g->w;
    const float *plane = x + c * g->h * g->w;
    float stage[IM2COL_STAGE];
    for (int64_t i = 0; i < g->kh; i++) {
        int64_t rlo, rhi;
        valid_rows(g, i, &rlo, &rhi);
        clamp_rows(&rlo, &rhi, r0, r1);
        for (int64_t j = 0; j < g->kw; j++) {
            const col_dst row = col_at(col, ((c * g->kh + i) * g->kw + j) * ld);
            int64_t lo, hi;
            valid_cols(g, j, &lo, &hi);
            col_zero(row, (rlo - r0) * ow_n);
            col_zero(col_at(row, (rhi - r0) * ow_n), (r1 - rhi) * ow_n);
            const int64_t off = j - pad;
            if (shifted_plane && rhi > rlo) {
                /* Elements [lo, n - (OW - hi)) of the block read inside
                 * the plane; the rest are zeroed below. */
                const col_dst dst = col_at(row, (rlo - r0) * ow_n);
                const float *src = plane + (rlo - pad + i) * g->w + off;
                const int64_t n = (rhi - rlo) * ow_n, end = n - (ow_n - hi);
                col_gather(col_at(dst, lo), src + lo, 1, end - lo);
                zero_outside_cols(dst, rhi - rlo, ow_n, lo, hi);
                continue;
            }
            /* bf16 at a stride: whole rows gathered in float32 on the
             * stack, then rounded in one run (a rounding call per
             * gathered row made the discriminator's convs slower than
             * rounding the float32 columns afterwards). */
            const int64_t staged =
                row.h != NULL && s != 1 && ow_n <= IM2COL_STAGE ? IM2COL_STAGE / ow_n : 0;
            for (int64_t oh = rlo; oh < rhi;) {
                const int64_t nrows = staged == 0 ? 1 : staged < rhi - oh ? staged : rhi - oh;
                const col_dst out = col_at(row, (oh - r0) * ow_n);
                const col_dst put = staged == 0 ? out : col_dst_of(stage, false);
                for (int64_t q = 0; q < nrows; q++) {
                    const col_dst dst = col_at(put, q * ow_n);
                    /* Input column of output column ow: ow*s + off. */
                    const float *src = plane + ((oh + q) * s - pad + i) * g->w + off;
                    col_zero(dst, lo);
                    col_gather(col_at(dst, lo), src + lo * s, s, hi - lo);
                    col_zero(col_at(dst, hi), ow_n - hi);
                }
                if (staged != 0) duet_f32_to_bf16(out.h, stage, (size_t)(nrows * ow_n));
                oh += nrows;
            }
        }
    }
}

/* Output rows [r0, r1) of the columns of one sample x (C, H, W): col has
 * C*KH*KW rows with leading dimension ld, and row (c, i, j), column
 * (oh - r0)*OW + ow holds x[c, oh*s - p + i, ow*s - p + j], or 0 in the
 * padding. */
static void im2col(col_dst col, int64_t ld, const float *x, const conv_geom *g, int64_t r0,
                   int64_t r1) {
    /* Channels fill disjoint rows: threads split them. */
#pragma omp parallel for num_threads(duet__par_threads(g->k * (r1 - r0) * g->ow)) \
    schedule(static)
    for (int64_t c = 0; c < g->c; c++) im2col_channel(col, ld, x, g, r0, r1, c);
}

/* col2im's additions of channel c's rows into its plane of dx. */
CONV_CLONES static void col2im_channel(float *dx, float *col, int64_t ld, const conv_geom *g,
                                       int64_t r0, int64_t r1, int64_t c) {
    const int64_t s = g->stride, pad = g->pad, ow_n = g->ow;
    /* As in im2col: at stride 1 with "same" width, the valid rows of a tap
     * add into one contiguous run of the plane, once the entries that read
     * padding (and would land on the neighbouring row) are zeroed. One long
     * add instead of a short one per row: the small planes of the tiny
     * SRGAN spent a tenth of their step here. */
    const bool shifted_plane = s == 1 && g->ow == g->w;
    for (int64_t i = 0; i < g->kh; i++) {
        int64_t rlo, rhi;
        valid_rows(g, i, &rlo, &rhi);
        clamp_rows(&rlo, &rhi, r0, r1);
        for (int64_t j = 0; j < g->kw; j++) {
            float *row = col + ((c * g->kh + i) * g->kw + j) * ld;
            int64_t lo, hi;
            valid_cols(g, j, &lo, &hi);
            const int64_t off = j - pad;
            if (shifted_plane && rhi > rlo) {
                float *src = row + (rlo - r0) * ow_n;
                const int64_t n = (rhi - rlo) * ow_n, end = n - (ow_n - hi);
                zero_outside_cols(col_dst_of(src, false), rhi - rlo, ow_n, lo, hi);
                /* Entry e of the run lands at plane index base + e. */
                float *dst = dx + (c * g->h + rlo - pad + i) * g->w;
                if (off >= 0) {
                    dst += off;
                    for (int64_t e = lo; e < end; e++) dst[e] += src[e];
                } else {
                    for (int64_t e = lo; e < end; e++) dst[e + off] += src[e];
                }
                continue;
            }
            for (int64_t oh = rlo; oh < rhi; oh++) {
                const float *src = row + (oh - r0) * g->ow;
                float *dst = dx + (c * g->h + oh * s - pad + i) * g->w;
                if (s == 1) {
                    /* Unit stride: a plain vectorisable add of rows. */
                    float *d1 = dst + off;
                    for (int64_t ow = lo; ow < hi; ow++) d1[ow] += src[ow];
                } else if (s == 2) {
                    for (int64_t ow = lo; ow < hi; ow++) dst[2 * ow + off] += src[ow];
                } else {
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow * s + off] += src[ow];
                }
            }
        }
    }
}

/* The adjoint of im2col for output rows [r0, r1): dx (C, H, W) += every
 * column entry back at the input position it was read from (padding entries
 * are dropped). col is scratch: entries that read padding may be zeroed. */
static void col2im(float *dx, float *col, int64_t ld, const conv_geom *g, int64_t r0,
                   int64_t r1) {
    /* A channel's rows add only into its own plane of dx: threads split
     * channels, and each sum keeps its order whatever their number. */
#pragma omp parallel for num_threads(duet__par_threads(g->k * (r1 - r0) * g->ow)) \
    schedule(static)
    for (int64_t c = 0; c < g->c; c++) col2im_channel(dx, col, ld, g, r0, r1, c);
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
    int64_t nb = (CONV_COLS_TARGET + g->p - 1) / g->p;
    int64_t cap = CONV_COL_MAX_FLOATS / (g->k * g->p > 0 ? g->k * g->p : 1);
    if (nb > cap) nb = cap;
    if (nb > INT_MAX / g->p) nb = INT_MAX / g->p;
    if (nb > g->n) nb = g->n;
    g->nb = nb < 1 ? 1 : nb;
    return DUET_OK;
}

/* The chunk's columns (K, cnt*P) into col (leading dimension cnt*P; bf16
 * when bf16), or the sample itself when a 1x1 conv has a chunk of one (never
 * with bf16). */
static const float *chunk_columns(float *col, bool bf16, const float *x0, int64_t cnt,
                                  const conv_geom *g) {
    if (is_pointwise(g) && cnt == 1) return x0;
    for (int64_t j = 0; j < cnt; j++)
        im2col(col_at(col_dst_of(col, bf16), j * g->p), cnt * g->p, x0 + j * g->c * g->h * g->w,
               g, 0, g->oh);
    return col;
}

/* Whether the columns are built in bf16 for the GEMM: in bf16 mixed
 * precision, except for a 1x1 conv, whose GEMM reads the sample itself. */
static bool bf16_columns(const conv_geom *g) {
    return !is_pointwise(g) && duet__gemm_bf16_on();
}

/* Scratch slot `slot` for `entries` column entries (half as many floats in
 * bf16). */
static float *col_scratch(int slot, int64_t entries, bool bf16) {
    return duet__scratch(slot, bf16 ? (size_t)(entries + 1) / 2 : (size_t)entries);
}

/* C (m, n) = A op(cols) + beta C, cols as im2col built them (K rows of
 * ldcols entries, bf16 when bf16; compact then): forward is A = W,
 * cols (K, n); the weight gradient is A = dY, cols^T (trans_cols). held_a
 * as for duet__sgemm_held_a. DUET_OK, or the bf16 product's error. */
static int gemm_cols(bool trans_cols, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *cols, int64_t ldcols, bool bf16, float beta,
                     float *c, int64_t ldc, bool held_a) {
    if (bf16)
        return duet__sgemm_rounded_b(false, trans_cols, m, n, k, a, lda, (const uint16_t *)cols,
                                     beta, c, ldc, held_a);
    if (held_a) duet__sgemm_held_a(false, trans_cols, m, n, k, a, lda, cols, ldcols, beta, c, ldc);
    else duet_sgemm(false, trans_cols, m, n, k, 1.0f, a, lda, cols, ldcols, beta, c, ldc);
    return DUET_OK;
}

/* ---- one sample per GEMM: column tiles, samples over threads ------------
 *
 * Where a sample is a GEMM of its own (nb == 1), its columns are built a
 * tile of output rows at a time, at most CONV_TILE_MAX_FLOATS of them: the
 * scratch no longer grows with the image (a 64-channel 3x3 conv at 128x128
 * needed 38 MB of columns per thread), and a tile of 2M floats still gives
 * the GEMM thousands of columns. Threads take whole samples, each running
 * its products on one thread (a GEMM inside the team's region runs
 * single-threaded): splitting one GEMM across threads cost more in
 * hand-offs than it gained (the tiny SRGAN ran slower on 2 threads than on
 * 1, the full generator's backward gained 1.2x), while whole samples per
 * thread scale like processes. Outputs and dX are then the same
 * single-threaded sums for any thread count; the weight gradient is summed
 * per thread and the threads' sums added in thread order, so it depends on
 * the thread count only through that order. */
#define CONV_TILE_MAX_FLOATS ((int64_t)2 << 20)

/* Output rows per column tile. */
static int64_t tile_rows(const conv_geom *g) {
    if (is_pointwise(g)) return g->oh; /* no columns to build */
    int64_t tiles = (g->k * g->p + CONV_TILE_MAX_FLOATS - 1) / CONV_TILE_MAX_FLOATS;
    if (tiles > g->oh) tiles = g->oh;
    if (tiles < 1) tiles = 1;
    return (g->oh + tiles - 1) / tiles;
}

/* Threads that take whole samples: up to duet's count, at most one per
 * sample; 1 runs the samples in turn, each GEMM on all threads. */
static int sample_team(const conv_geom *g) {
    int t = duet__par_threads(g->n * DUET__PAR_MIN_WORK);
    return t <= g->n ? t : (int)g->n;
}

/* The first sample of thread t's share when `team` threads split n. */
static int64_t share_start(int64_t n, int team, int t) { return n * t / team; }

/* Y (O, P) of samples [n0, n1) = W (O, K) col (K, P) + bias, a tile at a
 * time. The bias goes in first so that the GEMM adds onto it (beta = 1). */
static int forward_samples(float *y, const float *x, const float *w, const float *bias,
                           const conv_geom *g, int64_t n0, int64_t n1) {
    duet__gemm_release_a(); /* w is held only within this call */
    const bool pointwise = is_pointwise(g), bf16 = bf16_columns(g);
    const int64_t chw = g->c * g->h * g->w, rows = tile_rows(g);
    float *col = pointwise ? NULL : col_scratch(0, g->k * rows * g->ow, bf16);
    if (!pointwise && col == NULL) return DUET_ENOMEM;
    int rc = DUET_OK;
    for (int64_t n = n0; n < n1 && rc == DUET_OK; n++) {
        float *yn = y + n * g->o * g->p;
        const float *xn = x + n * chw;
        if (bias != NULL)
#pragma omp parallel for num_threads(duet__par_threads(g->o * g->p)) schedule(static)
            for (int64_t o = 0; o < g->o; o++)
                for (int64_t q = 0; q < g->p; q++)
                    yn[o * g->p + q] = bias[o];
        const float beta = bias != NULL ? 1.0f : 0.0f;
        for (int64_t r0 = 0; r0 < g->oh && rc == DUET_OK; r0 += rows) {
            const int64_t r1 = r0 + rows < g->oh ? r0 + rows : g->oh, t = (r1 - r0) * g->ow;
            if (!pointwise) im2col(col_dst_of(col, bf16), t, xn, g, r0, r1);
            rc = gemm_cols(false, g->o, t, g->k, w, g->k, pointwise ? xn : col,
                           pointwise ? g->p : t, bf16, beta, yn + r0 * g->ow, g->p, true);
        }
    }
    duet__gemm_release_a();
    return rc;
}

/* For samples [n0, n1): dw (O, K) += dY col^T when dw is not NULL, and
 * dx += col2im(W^T dY) when dx is not NULL, a tile at a time. */
static int backward_samples(float *dx, float *dw, const float *x, const float *w, const float *dy,
                            const conv_geom *g, int64_t n0, int64_t n1) {
    duet__gemm_release_a(); /* w is held only within this call */
    const bool pointwise = is_pointwise(g), bf16 = bf16_columns(g);
    const int64_t chw = g->c * g->h * g->w, rows = tile_rows(g), tmax = rows * g->ow;
    float *col = NULL, *dcol = NULL;
    if (!pointwise && dw != NULL && (col = col_scratch(0, g->k * tmax, bf16)) == NULL)
        return DUET_ENOMEM;
    if (!pointwise && dx != NULL && (dcol = duet__scratch(1, (size_t)(g->k * tmax))) == NULL)
        return DUET_ENOMEM;
    int rc = DUET_OK;
    for (int64_t n = n0; n < n1 && rc == DUET_OK; n++) {
        const float *xn = x + n * chw;
        float *dxn = dx != NULL ? dx + n * chw : NULL;
        for (int64_t r0 = 0; r0 < g->oh && rc == DUET_OK; r0 += rows) {
            const int64_t r1 = r0 + rows < g->oh ? r0 + rows : g->oh, t = (r1 - r0) * g->ow;
            const float *dyt = dy + n * g->o * g->p + r0 * g->ow; /* (O, t), ld P */
            if (dw != NULL) {
                if (!pointwise) im2col(col_dst_of(col, bf16), t, xn, g, r0, r1);
                /* dW (O, K) += dY (O, t) col^T (t, K) */
                rc = gemm_cols(true, g->o, g->k, t, dyt, g->p, pointwise ? xn : col,
                               pointwise ? g->p : t, bf16, 1.0f, dw, g->k, false);
            }
            if (dxn == NULL || rc != DUET_OK) continue;
            if (pointwise) {
                /* dX_n (C, P) += W^T (C, O) dY_n (O, P) */
                duet__sgemm_held_a(true, false, g->k, g->p, g->o, w, g->k, dyt, g->p, 1.0f, dxn,
                                   g->p);
                continue;
            }
            /* dcol (K, t) = W^T (K, O) dY (O, t), scattered back into dX_n. */
            duet__sgemm_held_a(true, false, g->k, t, g->o, w, g->k, dyt, g->p, 0.0f, dcol, t);
            col2im(dxn, dcol, t, g, r0, r1);
        }
    }
    duet__gemm_release_a();
    return rc;
}

/* Y for every sample, samples spread over the team. */
static int conv_forward_by_sample(float *y, const float *x, const float *w, const float *bias,
                                  const conv_geom *g) {
    const int team = sample_team(g);
    if (team == 1) return forward_samples(y, x, w, bias, g, 0, g->n);
    int failed = 0;
#pragma omp parallel num_threads(team) reduction(| : failed)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        failed = forward_samples(y, x, w, bias, g, share_start(g->n, nt, t),
                                 share_start(g->n, nt, t + 1)) != DUET_OK;
    }
    return failed ? DUET_ENOMEM : DUET_OK;
}

/* dX and dW for every sample, samples spread over the team. Thread 0 adds
 * into dw itself, the others into zeroed partial sums that are added to dw
 * afterwards in thread order. */
static int conv_backward_by_sample(float *dx, float *dw, const float *x, const float *w,
                                   const float *dy, const conv_geom *g) {
    const int team = sample_team(g);
    if (team == 1) return backward_samples(dx, dw, x, w, dy, g, 0, g->n);
    const int64_t wn = g->o * g->k;
    float *parts = NULL;
    if (dw != NULL &&
        (parts = duet_aligned_calloc((size_t)((team - 1) * wn) * sizeof(float))) == NULL)
        return DUET_ENOMEM;
    int failed = 0, used = team;
#pragma omp parallel num_threads(team) reduction(| : failed)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (t == 0) used = nt; /* the runtime may give fewer threads */
        float *dwt = dw == NULL ? NULL : t == 0 ? dw : parts + (t - 1) * wn;
        failed = backward_samples(dx, dwt, x, w, dy, g, share_start(g->n, nt, t),
                                  share_start(g->n, nt, t + 1)) != DUET_OK;
    }
    if (dw != NULL && !failed) {
#pragma omp parallel for num_threads(duet__par_threads(wn * used)) schedule(static)
        for (int64_t i = 0; i < wn; i++) {
            float s = dw[i];
            for (int t = 1; t < used; t++) s += parts[(t - 1) * wn + i];
            dw[i] = s;
        }
    }
    duet_aligned_free(parts);
    return failed ? DUET_ENOMEM : DUET_OK;
}

static duet__conv_dims conv_dims(const conv_geom *g) {
    return (duet__conv_dims){.n = g->n, .c = g->c, .h = g->h, .w = g->w, .o = g->o, .kh = g->kh,
                             .kw = g->kw, .oh = g->oh, .ow = g->ow, .stride = g->stride,
                             .pad = g->pad};
}

/* conv2d's params: stride and padding, and the geometry the check found. */
typedef struct conv_params {
    int stride, pad;
    conv_geom g;
} conv_params;

static int conv2d_backward_k(const duet__op_args *a) {
    const conv_params *cp = a->params;
    const conv_geom g = cp->g;
    const duet_tensor *x = a->in[0], *w = a->in[1];
    const float *dy = a->gout; /* (N, O, P) */
    float *dx = a->gin[0], *dw = a->gin[1], *db = a->nin > 2 ? a->gin[2] : NULL;
    const bool pointwise = is_pointwise(&g);
    const int64_t chw = g.c * g.h * g.w;

    if (db != NULL) {
#pragma omp parallel for num_threads(duet__par_threads(g.n * g.o * g.p)) schedule(static)
        for (int64_t o = 0; o < g.o; o++) {
            double s = 0.0;
            for (int64_t n = 0; n < g.n; n++)
                s += duet__sum_f32(dy + (n * g.o + o) * g.p, g.p);
            db[o] += (float)s;
        }
    }
    if (dw == NULL && dx == NULL) return DUET_OK;
    bool bf16_on;
    if (duet__conv_onednn_on(&bf16_on)) {
        /* On float32's direct kernels oneDNN computes dx only; dw is the
         * GEMM's below (see conv_onednn.c: its weight gradient sums in one
         * long chain). */
        const duet__conv_dims d = conv_dims(&g);
        bool dx_done, dw_done;
        DUET_TRY(duet__conv_onednn_backward(&d, bf16_on, x->data, w->data, dy, dx, dw, &dx_done,
                                            &dw_done));
        if (dx_done) dx = NULL;
        if (dw_done) dw = NULL;
        if (dx == NULL && dw == NULL) return DUET_OK;
    }
    if (g.nb == 1) {
        int rc = conv_backward_by_sample(dx, dw, x->data, w->data, dy, &g);
        return rc == DUET_OK ? DUET_OK : duet__error(rc, "conv2d: out of memory for the columns");
    }

    /* Chunks of several samples per GEMM (few output pixels per sample). */
    const int64_t ldmax = g.nb * g.p;
    const bool bf16 = bf16_columns(&g);
    float *col = NULL, *dcol = NULL, *dyt = NULL;
    if (dw != NULL && (col = col_scratch(0, g.k * ldmax, bf16)) == NULL) return DUET_ENOMEM;
    if (dx != NULL && (dcol = duet__scratch(1, (size_t)(g.k * ldmax))) == NULL) return DUET_ENOMEM;
    if ((dyt = duet__scratch(2, (size_t)(g.o * ldmax))) == NULL) return DUET_ENOMEM;
    for (int64_t n0 = 0; n0 < g.n; n0 += g.nb) {
        const int64_t cnt = g.n - n0 < g.nb ? g.n - n0 : g.nb, ld = cnt * g.p;
        const float *x0 = x->data + n0 * chw;
        /* dY of the chunk as one (O, cnt*P) matrix. */
        const float *dyc = dy + n0 * g.o * g.p;
        if (cnt > 1) {
#pragma omp parallel for num_threads(duet__par_threads(g.o * ld)) schedule(static)
            for (int64_t o = 0; o < g.o; o++)
                for (int64_t j = 0; j < cnt; j++)
                    memcpy(dyt + o * ld + j * g.p, dyc + (j * g.o + o) * g.p,
                           (size_t)g.p * sizeof(float));
            dyc = dyt;
        }
        if (dw != NULL) {
            /* dW (O, K) += dY (O, cnt*P) col^T (cnt*P, K) */
            const float *cols = chunk_columns(col, bf16, x0, cnt, &g);
            DUET_TRY(gemm_cols(true, g.o, g.k, ld, dyc, ld, cols, ld, bf16, 1.0f, dw, g.k, false));
        }
        if (dx != NULL) {
            float *dx0 = dx + n0 * chw;
            if (pointwise && cnt == 1) {
                /* dX_n (C, P) += W^T (C, O) dY_n (O, P) */
                duet_sgemm(true, false, g.k, g.p, g.o, 1.0f, w->data, g.k, dyc, g.p, 1.0f, dx0,
                           g.p);
            } else {
                /* dcol (K, cnt*P) = W^T (K, O) dY (O, cnt*P), scattered back by
                 * col2im sample by sample. */
                duet_sgemm(true, false, g.k, ld, g.o, 1.0f, w->data, g.k, dyc, ld, 0.0f, dcol,
                           ld);
                for (int64_t j = 0; j < cnt; j++)
                    col2im(dx0 + j * chw, dcol + j * g.p, ld, &g, 0, g.oh);
            }
        }
    }
    return DUET_OK;
}

/* In recorded ops: dx = conv_transpose2d(dy, w) with the output padding
 * that gives back x's size, dw = conv2d_weight_grad(x, dy), db = dy summed
 * over all but its channels. Each is differentiable once more. */
static int conv2d_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const conv_params *cc = duet__op_node_params(node);
    duet_tensor *x = node->inputs[0], *w = node->inputs[1];
    const int64_t kh = w->shape[2], kw = w->shape[3];
    if (want[0]) {
        const int64_t oph = x->shape[2] - ((gy->shape[2] - 1) * cc->stride - 2 * cc->pad + kh);
        const int64_t opw = x->shape[3] - ((gy->shape[3] - 1) * cc->stride - 2 * cc->pad + kw);
        if (oph != opw)
            return duet__error(DUET_EUNSUPPORTED,
                               "conv2d: the input gradient in recorded ops needs one output "
                               "padding for both dimensions; input %" PRId64 "x%" PRId64
                               " with stride %d gives %" PRId64 " and %" PRId64,
                               x->shape[2], x->shape[3], cc->stride, oph, opw);
        DUET_TRY(duet_conv_transpose2d(gy, w, NULL, cc->stride, cc->pad, (int)oph, &gx[0]));
    }
    if (want[1])
        DUET_TRY(duet_conv2d_weight_grad(x, gy, (int)kh, (int)kw, cc->stride, cc->pad, &gx[1]));
    if (want[2]) DUET_TRY(duet_sum_channels(gy, &gx[2]));
    return DUET_OK;
}

static int conv2d_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    conv_params *p = params;
    DUET_TRY(conv_geometry(in[0], in[1], in[2], p->stride, p->pad, &p->g));
    plan->ndim = 4;
    plan->shape[0] = p->g.n;
    plan->shape[1] = p->g.o;
    plan->shape[2] = p->g.oh;
    plan->shape[3] = p->g.ow;
    return DUET_OK;
}

static int conv2d_k(const duet__op_args *a) {
    const conv_geom g = ((const conv_params *)a->params)->g;
    const duet_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
    duet_tensor *y = a->out;
    bool bf16_on;
    if (duet__conv_onednn_on(&bf16_on)) {
        const duet__conv_dims d = conv_dims(&g);
        bool done;
        int rc = duet__conv_onednn_forward(&d, bf16_on, x->data, w->data,
                                           b != NULL ? b->data : NULL, y->data, &done);
        if (rc != DUET_OK) return rc;
        if (done) return DUET_OK;
    }
    if (g.nb == 1) {
        int rc = conv_forward_by_sample(y->data, x->data, w->data, b != NULL ? b->data : NULL,
                                        &g);
        return rc == DUET_OK ? DUET_OK : duet__error(rc, "conv2d: out of memory for the columns");
    }
    /* Chunks of several samples per GEMM (few output pixels per sample). */
    const int64_t ldmax = g.nb * g.p, chw = g.c * g.h * g.w;
    const bool bf16 = bf16_columns(&g);
    float *col = NULL, *tmp = NULL;
    if ((col = col_scratch(0, g.k * ldmax, bf16)) == NULL ||
        (tmp = duet__scratch(2, (size_t)(g.o * ldmax))) == NULL)
        return DUET_ENOMEM;
    for (int64_t n0 = 0; n0 < g.n; n0 += g.nb) {
        const int64_t cnt = g.n - n0 < g.nb ? g.n - n0 : g.nb, ld = cnt * g.p;
        const float *cols = chunk_columns(col, bf16, x->data + n0 * chw, cnt, &g);
        float *y0 = y->data + n0 * g.o * g.p;
        /* tmp (O, cnt*P) = W (O, K) col (K, cnt*P), then each sample's
         * (O, P) block out to y with the bias. */
        int rc = gemm_cols(false, g.o, ld, g.k, w->data, g.k, cols, ld, bf16, 0.0f, tmp, ld,
                           false);
        if (rc != DUET_OK) return rc;
#pragma omp parallel for collapse(2) num_threads(duet__par_threads(g.o * ld)) schedule(static)
        for (int64_t j = 0; j < cnt; j++) {
            for (int64_t o = 0; o < g.o; o++) {
                float *dst = y0 + (j * g.o + o) * g.p;
                const float *src = tmp + o * ld + j * g.p;
                if (b == NULL) {
                    memcpy(dst, src, (size_t)g.p * sizeof(float));
                    continue;
                }
                const float bo = b->data[o];
                for (int64_t q = 0; q < g.p; q++) dst[q] = src[q] + bo;
            }
        }
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_conv2d = {
    .id = DUET__OP_CONV2D,
    .inputs = "x,weight,bias",
    .params_size = sizeof(conv_params),
    .check = conv2d_check,
    .forward = {DUET__OP_CPU_SIM(conv2d_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_conv2d)},
    .backward = {DUET__OP_CPU_SIM(conv2d_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_conv2d_backward)},
    .graph_backward = conv2d_graph,
    .output_unread = true,
};

int duet_conv2d(duet_tensor *x, duet_tensor *w, duet_tensor *b, int stride, int padding,
                duet_tensor **out) {
    DUET_ASSERT(x != NULL && w != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_CONV2D, (&(conv_params){.stride = stride, .pad = padding}), out,
                        x, w, b);
}

/* The conv2d geometry of a CUDA kernel's params (cuda/ops_cuda.c). */
duet__conv_dims duet__conv2d_params_dims(const void *params) {
    return conv_dims(&((const conv_params *)params)->g);
}
