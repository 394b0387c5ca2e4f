/* Shape ops: reshape and flatten (sharing the input's data, as PyTorch's
 * view), concatenation along the channel dimension and its inverse, a
 * slice of channels. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <string.h>

/* ---- reshape, flatten ------------------------------------------------------------- */

/* The output shares x's data; its gradient is its own buffer of the same
 * numel, so the backward is an element-wise copy-add. */
static int reshape_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const float *go = node->output->grad;
    for (int64_t i = 0; i < node->output->numel; i++) gx[i] += go[i];
    return DUET_OK;
}

static int reshape_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const duet_tensor *x = node->inputs[0];
    return want[0] ? duet_reshape(gy, x->ndim, x->shape, &gx[0]) : DUET_OK;
}

static int reshape_named(const char *op, duet_tensor *x, int ndim, const int64_t *shape,
                         duet_tensor **out) {
    *out = NULL;
    char sx[DUET_SHAPE_STR_MAX], want[DUET_SHAPE_STR_MAX];
    if (ndim < 1 || ndim > DUET_MAX_DIMS)
        return duet__error(DUET_ESHAPE, "%s: %d dimensions requested for input %s; duet "
                           "supports 1 to %d", op, ndim, duet_shape_str(x, sx, sizeof sx),
                           DUET_MAX_DIMS);
    int64_t numel = 1;
    size_t used = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return duet__error(DUET_ESHAPE, "%s: dimension %d of the requested shape is %" PRId64
                               "; every dimension must be at least 1", op, i, shape[i]);
        numel *= shape[i];
        if (used < sizeof want)
            used += (size_t)snprintf(want + used, sizeof want - used,
                                     i ? ", %" PRId64 : "%" PRId64, shape[i]);
    }
    if (used < sizeof want) snprintf(want + used, sizeof want - used, "]");
    if (numel != x->numel)
        return duet__error(DUET_ESHAPE, "%s: input %s has %" PRId64 " elements, shape %s has %"
                           PRId64, op, duet_shape_str(x, sx, sizeof sx), x->numel, want, numel);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_view(x, ndim, shape, &y));
    DUET_TRY(duet__op_finish_unread(
        duet__op_finish(y, op, reshape_backward, NULL, NULL, 1, &x, out), out));
    duet_autograd_set_graph_backward(*out, reshape_graph);
    return DUET_OK;
}

int duet_reshape(duet_tensor *x, int ndim, const int64_t *shape, duet_tensor **out) {
    DUET_ASSERT(x != NULL && shape != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "reshape", "x", x);
    return reshape_named("reshape", x, ndim, shape, out);
}

int duet_flatten(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "flatten", "x", x);
    int64_t shape[2] = {x->shape[0], x->numel / x->shape[0]};
    return reshape_named("flatten", x, 2, shape, out);
}

/* ---- concat_channels --------------------------------------------------------------
 * xs[i] (N, Ci, inner) -> out (N, sum Ci, inner): per sample, the inputs'
 * channel blocks one after another. */

typedef struct concat_ctx {
    int64_t n, inner;
} concat_ctx;

static int concat_backward(duet_node *node) {
    const concat_ctx *c = node->ctx;
    const int64_t ctot = node->output->shape[1];
    const float *go = node->output->grad;
    int64_t off = 0; /* channel offset of input i */
    for (int i = 0; i < node->ninputs; i++) {
        const int64_t ci = node->inputs[i]->shape[1], blk = ci * c->inner;
        float *gx = duet_node_input_grad(node, i);
        if (gx != NULL)
            for (int64_t s = 0; s < c->n; s++) {
                const float *src = go + (s * ctot + off) * c->inner;
                float *dst = gx + s * blk;
                for (int64_t k = 0; k < blk; k++) dst[k] += src[k];
            }
        off += ci;
    }
    return DUET_OK;
}

static int concat_check(int n, duet_tensor *const *xs) {
    char s0[DUET_SHAPE_STR_MAX], si[DUET_SHAPE_STR_MAX];
    const duet_tensor *a = xs[0];
    if (a->ndim < 2)
        return duet__error(DUET_ESHAPE, "concat_channels: input 0 %s has no channel "
                           "dimension; expected (N, C, ...)", duet_shape_str(a, s0, sizeof s0));
    for (int i = 1; i < n; i++) {
        const duet_tensor *b = xs[i];
        DUET_ASSERT(b != NULL);
        bool ok = b->ndim == a->ndim;
        for (int d = 0; d < a->ndim && ok; d++) ok = d == 1 || a->shape[d] == b->shape[d];
        if (!ok)
            return duet__error(DUET_ESHAPE, "concat_channels: input 0 %s and input %d %s differ "
                               "in a dimension other than 1 (channels)",
                               duet_shape_str(a, s0, sizeof s0), i,
                               duet_shape_str(b, si, sizeof si));
    }
    return DUET_OK;
}

int duet_concat_channels(int n, duet_tensor *const *xs, duet_tensor **out) {
    DUET_ASSERT(xs != NULL && out != NULL);
    *out = NULL;
    if (n < 1) return duet__error(DUET_EINVAL, "concat_channels: %d inputs; need at least 1", n);
    DUET_ASSERT(xs[0] != NULL);
    DUET_TRY(duet__op_on_cpu("concat_channels", NULL, n, xs));
    /* A node holds at most DUET_NODE_MAX_INPUTS inputs: concatenate the
     * leading ones first, then that result with the last MAX - 1. */
    if (n > DUET_NODE_MAX_INPUTS) {
        const int tail = DUET_NODE_MAX_INPUTS - 1;
        duet_tensor *head = NULL;
        DUET_TRY(duet_concat_channels(n - tail, xs, &head));
        duet_tensor *two[DUET_NODE_MAX_INPUTS];
        two[0] = head;
        for (int i = 0; i < tail; i++) two[1 + i] = xs[n - tail + i];
        int rc = duet_concat_channels(DUET_NODE_MAX_INPUTS, two, out);
        duet_tensor_release(head);
        return rc;
    }
    DUET_TRY(concat_check(n, xs));
    const duet_tensor *a = xs[0];
    int64_t shape[DUET_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[1] = 0;
    for (int i = 0; i < n; i++) shape[1] += xs[i]->shape[1];
    const int64_t nb = a->shape[0], inner = a->numel / (a->shape[0] * a->shape[1]);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(a->ndim, shape, &y));
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const int64_t blk = xs[i]->shape[1] * inner;
        for (int64_t s = 0; s < nb; s++)
            memcpy(y->data + (s * shape[1] + off) * inner, xs[i]->data + s * blk,
                   (size_t)blk * sizeof(float));
        off += xs[i]->shape[1];
    }
    concat_ctx *cc = NULL;
    if (duet_autograd_needs_record(n, xs)) {
        cc = malloc(sizeof *cc);
        if (cc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "concat_channels: out of memory");
        }
        cc->n = nb;
        cc->inner = inner;
    }
    return duet__op_finish(y, "concat_channels", concat_backward, cc, free, n, xs, out);
}

/* ---- slice_channels ----------------------------------------------------------------
 * x (N, C, inner) -> out (N, count, inner): channels [start, start + count)
 * of every sample, a copy (x[:, start:start + count]). */

typedef struct slicec_ctx {
    int64_t start;
} slicec_ctx;

static int slice_channels_backward(duet_node *node) {
    const slicec_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *x = node->inputs[0], *y = node->output;
    const int64_t n = y->shape[0], blk = y->numel / n, cx = x->shape[1];
    const int64_t inner = x->numel / (n * cx);
    for (int64_t s = 0; s < n; s++) {
        float *dst = gx + (s * cx + c->start) * inner;
        const float *src = y->grad + s * blk;
        for (int64_t k = 0; k < blk; k++) dst[k] += src[k];
    }
    return DUET_OK;
}

int duet_slice_channels(duet_tensor *x, int64_t start, int64_t count, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "slice_channels", "x", x);
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 2 || start < 0 || count < 1 || start + count > x->shape[1])
        return duet__error(DUET_ESHAPE, "slice_channels: channels [%" PRId64 ", %" PRId64
                           ") of %s", start, start + count, duet_shape_str(x, sx, sizeof sx));
    int64_t shape[DUET_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = count;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, shape, &y));
    const int64_t n = x->shape[0], inner = x->numel / (n * x->shape[1]);
    for (int64_t s = 0; s < n; s++)
        memcpy(y->data + s * count * inner, x->data + (s * x->shape[1] + start) * inner,
               (size_t)(count * inner) * sizeof(float));
    slicec_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        if ((c = malloc(sizeof *c)) == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "slice_channels: out of memory");
        }
        c->start = start;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, "slice_channels", slice_channels_backward, c, free, 1, &x, out), out);
}
