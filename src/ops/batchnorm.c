/* Batch normalisation over (N, H, W) per channel, PyTorch's batch_norm /
 * SyncBatchNorm. In training mode the statistics may span several processes:
 * the options' reduce callback sums per-channel partial sums across them, so
 * a batch split over processes normalises exactly like the whole batch in
 * one. Sums are taken in double locally and exchanged as float. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

duet_batch_norm_opts duet_batch_norm_opts_default(void) {
    duet_batch_norm_opts o;
    memset(&o, 0, sizeof o);
    o.training = true;
    o.momentum = 0.1f;
    o.eps = 1e-5f;
    o.reduce = NULL;
    o.reduce_ctx = NULL;
    return o;
}

typedef struct bn_ctx {
    int64_t c;
    bool training;
    float count;  /* values per channel over the whole (reduced) batch */
    duet_reduce_fn reduce;
    void *reduce_ctx;
    float *mean;  /* (C) the statistics used to normalise */
    float *invstd; /* (C) 1/sqrt(var + eps) */
} bn_ctx;

static void bn_ctx_free(void *p) {
    bn_ctx *c = p;
    if (c == NULL) return;
    free(c->mean);
    free(c->invstd);
    free(c);
}

static int check_vec(const char *what, const duet_tensor *v, const duet_tensor *x, int64_t c) {
    if (v == NULL || (v->ndim == 1 && v->shape[0] == c)) return DUET_OK;
    char sv[DUET_SHAPE_STR_MAX], sx[DUET_SHAPE_STR_MAX];
    return duet__error(DUET_ESHAPE, "batch_norm2d: %s %s does not match input %s (want [%" PRId64
                       "])", what, duet_shape_str(v, sv, sizeof sv),
                       duet_shape_str(x, sx, sizeof sx), c);
}

static int do_reduce(const bn_ctx *c, float *buf, int64_t count, const char *what) {
    if (c->reduce == NULL) return DUET_OK;
    int rc = c->reduce(c->reduce_ctx, buf, count);
    if (rc != DUET_OK)
        return duet__error_context(rc, "batch_norm2d: reducing %s across processes", what);
    return DUET_OK;
}

/* sum (x - m)^2 */
static double sqdev_lanes(const float *x, int64_t n, double m) {
    double acc[8] = {0};
    int64_t q = 0;
    for (; q + 8 <= n; q += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[q + l] - m;
            acc[l] += d * d;
        }
    double s = 0.0;
    for (; q < n; q++) {
        double d = x[q] - m;
        s += d * d;
    }
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* *sdy += sum dy, *sdyx += sum dy (x - m) is */
static void grad_sums_lanes(const float *dy, const float *x, int64_t n, double m, double is,
                            double *sdy, double *sdyx) {
    double a[8] = {0}, b[8] = {0};
    int64_t q = 0;
    for (; q + 8 <= n; q += 8)
        for (int l = 0; l < 8; l++) {
            a[l] += dy[q + l];
            b[l] += dy[q + l] * ((x[q + l] - m) * is);
        }
    double sa = 0.0, sb = 0.0;
    for (; q < n; q++) {
        sa += dy[q];
        sb += dy[q] * ((x[q] - m) * is);
    }
    for (int l = 0; l < 8; l++) {
        sa += a[l];
        sb += b[l];
    }
    *sdy += sa;
    *sdyx += sb;
}

/* Batch statistics into c->mean / c->invstd (and c->count), reduced across
 * processes; updates the running statistics. x (N, C, S). */
static int batch_stats(bn_ctx *c, const duet_tensor *x, int64_t n, int64_t s, float eps,
                       float momentum, duet_tensor *running_mean, duet_tensor *running_var,
                       duet_tensor *num_batches, float *buf) {
    const int64_t ch = c->c;
    const int nt = duet__par_threads(x->numel);
    /* Pass 1: [sum (C), count (C)]. Channels are independent: threads split
     * them, and each channel's sum keeps its order. */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < ch; k++) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += duet__sum_f32(x->data + (i * ch + k) * s, s);
        buf[k] = (float)sum;
        buf[ch + k] = (float)(n * s);
    }
    DUET_TRY(do_reduce(c, buf, 2 * ch, "the per-channel sums and counts"));
    c->count = buf[ch];
    if (!(c->count > 1.0f)) {
        char sx[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_EINVAL,
                           "batch_norm2d: training needs more than one value per channel, got "
                           "%g in total (local input %s)", (double)c->count,
                           duet_shape_str(x, sx, sizeof sx));
    }
    for (int64_t k = 0; k < ch; k++) c->mean[k] = buf[k] / buf[ch + k];
    /* Pass 2: sum of squared deviations from the global mean (two passes
     * rather than E[x^2] - E[x]^2, which cancels badly). */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < ch; k++) {
        double sq = 0.0, m = c->mean[k];
        for (int64_t i = 0; i < n; i++) sq += sqdev_lanes(x->data + (i * ch + k) * s, s, m);
        buf[k] = (float)sq;
    }
    DUET_TRY(do_reduce(c, buf, ch, "the per-channel squared deviations"));
    for (int64_t k = 0; k < ch; k++) {
        float var = buf[k] / c->count;
        c->invstd[k] = 1.0f / sqrtf(var + eps);
        /* The running variance is unbiased, like PyTorch's. */
        if (running_mean != NULL)
            running_mean->data[k] = (1.0f - momentum) * running_mean->data[k] +
                                    momentum * c->mean[k];
        if (running_var != NULL)
            running_var->data[k] = (1.0f - momentum) * running_var->data[k] +
                                   momentum * (buf[k] / (c->count - 1.0f));
    }
    if (num_batches != NULL) num_batches->data[0] += 1.0f;
    return DUET_OK;
}

static int bn_backward(duet_node *node) {
    const bn_ctx *c = node->ctx;
    duet_tensor *x = node->inputs[0], *weight = node->inputs[1], *bias = node->inputs[2];
    const int64_t ch = c->c, n = x->shape[0], s = x->numel / (n * ch);
    const float *dy = node->output->grad;
    float *dx = duet_node_input_grad(node, 0);
    float *dw = weight != NULL ? duet_node_input_grad(node, 1) : NULL;
    float *db = bias != NULL ? duet_node_input_grad(node, 2) : NULL;
    float *buf = malloc((size_t)(2 * ch) * sizeof(float));
    if (buf == NULL) return duet__error(DUET_ENOMEM, "batch_norm2d: out of memory in backward");
    const int nt = duet__par_threads(2 * x->numel);
    /* Local [sum dy (C), sum dy*xhat (C)], channels split among threads. */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < ch; k++) {
        double sdy = 0.0, sdyx = 0.0, m = c->mean[k], is = c->invstd[k];
        for (int64_t i = 0; i < n; i++)
            grad_sums_lanes(dy + (i * ch + k) * s, x->data + (i * ch + k) * s, s, m, is, &sdy,
                            &sdyx);
        buf[k] = (float)sdy;
        buf[ch + k] = (float)sdyx;
    }
    /* The affine parameters' gradients are local: DDP averages them. */
    for (int64_t k = 0; k < ch; k++) {
        if (dw != NULL) dw[k] += buf[ch + k];
        if (db != NULL) db[k] += buf[k];
    }
    if (dx != NULL) {
        int rc = DUET_OK;
        if (c->training) rc = do_reduce(c, buf, 2 * ch, "the gradient sums");
        if (rc != DUET_OK) {
            free(buf);
            return rc;
        }
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t k = 0; k < ch; k++) {
            const float m = c->mean[k], is = c->invstd[k];
            const float g = (weight != NULL ? weight->data[k] : 1.0f) * is;
            /* Training: dx = g (dy - mean(dy) - xhat mean(dy xhat)) over the
             * whole batch; eval: the statistics are constants, dx = g dy. */
            const float mdy = c->training ? buf[k] / c->count : 0.0f;
            const float mdyx = c->training ? buf[ch + k] / c->count : 0.0f;
            for (int64_t i = 0; i < n; i++) {
                const float *px = x->data + (i * ch + k) * s, *pd = dy + (i * ch + k) * s;
                float *pdx = dx + (i * ch + k) * s;
                for (int64_t q = 0; q < s; q++)
                    pdx[q] += g * (pd[q] - mdy - (px[q] - m) * is * mdyx);
            }
        }
    }
    free(buf);
    return DUET_OK;
}

int duet_batch_norm2d(duet_tensor *x, duet_tensor *weight, duet_tensor *bias,
                      duet_tensor *running_mean, duet_tensor *running_var,
                      duet_tensor *num_batches, const duet_batch_norm_opts *opts,
                      duet_tensor **out) {
    DUET__OP_ON_CPU(out, "batch_norm2d", "x,weight,bias,running_mean,running_var,num_batches", x, weight, bias, running_mean, running_var, num_batches);
    duet_batch_norm_opts def = duet_batch_norm_opts_default();
    if (opts == NULL) opts = &def;
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 2)
        return duet__error(DUET_ESHAPE, "batch_norm2d: input %s must be (N, C, H, W)",
                           duet_shape_str(x, sx, sizeof sx));
    const int64_t n = x->shape[0], ch = x->shape[1], s = x->numel / (n * ch);
    DUET_TRY(check_vec("weight", weight, x, ch));
    DUET_TRY(check_vec("bias", bias, x, ch));
    DUET_TRY(check_vec("running_mean", running_mean, x, ch));
    DUET_TRY(check_vec("running_var", running_var, x, ch));
    if (num_batches != NULL && num_batches->numel != 1)
        return duet__error(DUET_ESHAPE, "batch_norm2d: num_batches %s must have one element",
                           duet_shape_str(num_batches, sx, sizeof sx));
    if (!opts->training && (running_mean == NULL || running_var == NULL))
        return duet__error(DUET_EINVAL, "batch_norm2d: eval mode needs running_mean and "
                           "running_var");

    bn_ctx *c = calloc(1, sizeof *c);
    float *buf = malloc((size_t)(2 * ch) * sizeof(float));
    if (c != NULL) {
        c->mean = malloc((size_t)ch * sizeof(float));
        c->invstd = malloc((size_t)ch * sizeof(float));
    }
    if (c == NULL || buf == NULL || c->mean == NULL || c->invstd == NULL) {
        bn_ctx_free(c);
        free(buf);
        return duet__error(DUET_ENOMEM, "batch_norm2d: out of memory for %" PRId64
                           " channels", ch);
    }
    c->c = ch;
    c->training = opts->training;
    c->reduce = opts->reduce;
    c->reduce_ctx = opts->reduce_ctx;
    int rc = DUET_OK;
    if (opts->training) {
        rc = batch_stats(c, x, n, s, opts->eps, opts->momentum, running_mean, running_var,
                         num_batches, buf);
    } else {
        for (int64_t k = 0; k < ch; k++) {
            c->mean[k] = running_mean->data[k];
            c->invstd[k] = 1.0f / sqrtf(running_var->data[k] + opts->eps);
        }
    }
    free(buf);
    duet_tensor *y = NULL;
    if (rc == DUET_OK) rc = duet_tensor_create_uninit(x->ndim, x->shape, &y);
    if (rc != DUET_OK) {
        bn_ctx_free(c);
        return rc;
    }
#pragma omp parallel for num_threads(duet__par_threads(2 * x->numel)) schedule(static)
    for (int64_t k = 0; k < ch; k++) {
        /* y = (x - mean) invstd w + b = x a + shift */
        const float a = c->invstd[k] * (weight != NULL ? weight->data[k] : 1.0f);
        const float shift = (bias != NULL ? bias->data[k] : 0.0f) - c->mean[k] * a;
        for (int64_t i = 0; i < n; i++) {
            const float *px = x->data + (i * ch + k) * s;
            float *py = y->data + (i * ch + k) * s;
            for (int64_t q = 0; q < s; q++) py[q] = px[q] * a + shift;
        }
    }
    duet_tensor *ins[3] = {x, weight, bias};
    DUET_TRY(duet__op_finish(y, "batch_norm2d", bn_backward, c, bn_ctx_free, 3, ins, out));
    duet__op_output_unread(*out);
    return DUET_OK;
}
