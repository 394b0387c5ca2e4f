/* Shape ops: reshape and flatten (sharing the input's data, as PyTorch's
 * view), concatenation along the channel dimension and its inverse, a
 * slice of channels. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <string.h>

/* ---- reshape, flatten ------------------------------------------------------------- */

/* The requested shape (flatten's is made by its entry). */
typedef struct reshape_params {
    int ndim;
    int64_t shape[DUET_MAX_DIMS];
} reshape_params;

static int reshape_check_named(const char *op, const duet_tensor *x, const reshape_params *p,
                               duet__op_plan *plan) {
    char sx[DUET_SHAPE_STR_MAX], want[DUET_SHAPE_STR_MAX];
    if (p->ndim < 1 || p->ndim > DUET_MAX_DIMS)
        return duet__error(DUET_ESHAPE, "%s: %d dimensions requested for input %s; duet "
                           "supports 1 to %d", op, p->ndim, duet_shape_str(x, sx, sizeof sx),
                           DUET_MAX_DIMS);
    int64_t numel = 1;
    size_t used = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < p->ndim; i++) {
        if (p->shape[i] < 1)
            return duet__error(DUET_ESHAPE, "%s: dimension %d of the requested shape is %" PRId64
                               "; every dimension must be at least 1", op, i, p->shape[i]);
        numel *= p->shape[i];
        if (used < sizeof want)
            used += (size_t)snprintf(want + used, sizeof want - used,
                                     i ? ", %" PRId64 : "%" PRId64, p->shape[i]);
    }
    if (used < sizeof want) snprintf(want + used, sizeof want - used, "]");
    if (numel != x->numel)
        return duet__error(DUET_ESHAPE, "%s: input %s has %" PRId64 " elements, shape %s has %"
                           PRId64, op, duet_shape_str(x, sx, sizeof sx), x->numel, want, numel);
    plan->view = true;
    plan->ndim = p->ndim;
    for (int d = 0; d < DUET_MAX_DIMS; d++) plan->shape[d] = d < p->ndim ? p->shape[d] : 1;
    return DUET_OK;
}

static int reshape_check(int nin, duet_tensor *const *in, void *params, bool record,
                         duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    return reshape_check_named("reshape", in[0], params, plan);
}

static int flatten_check(int nin, duet_tensor *const *in, void *params, bool record,
                         duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    return reshape_check_named("flatten", in[0], params, plan);
}

/* The output is a view of x (plan.view): nothing to compute. */
static int view_k(const duet__op_args *a) {
    (void)a;
    return DUET_OK;
}

/* The output shares x's data; its gradient is its own buffer of the same
 * numel, so the backward is an element-wise copy-add. */
static int reshape_backward_k(const duet__op_args *a) {
    for (int64_t i = 0; i < a->out->numel; i++) a->gin[0][i] += a->gout[i];
    return DUET_OK;
}

static int reshape_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const duet_tensor *x = node->inputs[0];
    return want[0] ? duet_reshape(gy, x->ndim, x->shape, &gx[0]) : DUET_OK;
}

const duet__op_def duet__op_def_reshape = {
    .id = DUET__OP_RESHAPE,
    .inputs = "x",
    .params_size = sizeof(reshape_params),
    .check = reshape_check,
    DUET__OP_CPU(view_k, reshape_backward_k),
    .graph_backward = reshape_graph,
    .output_unread = true,
};

const duet__op_def duet__op_def_flatten = {
    .id = DUET__OP_FLATTEN,
    .inputs = "x",
    .params_size = sizeof(reshape_params),
    .check = flatten_check,
    DUET__OP_CPU(view_k, reshape_backward_k),
    .graph_backward = reshape_graph,
    .output_unread = true,
};

int duet_reshape(duet_tensor *x, int ndim, const int64_t *shape, duet_tensor **out) {
    DUET_ASSERT(x != NULL && shape != NULL && out != NULL);
    reshape_params p = {.ndim = ndim};
    for (int d = 0; d < ndim && d < DUET_MAX_DIMS; d++) p.shape[d] = shape[d];
    return DUET__OP_RUN(DUET__OP_RESHAPE, &p, out, x);
}

int duet_flatten(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    const reshape_params p = {.ndim = 2, .shape = {x->shape[0], x->numel / x->shape[0]}};
    return DUET__OP_RUN(DUET__OP_FLATTEN, &p, out, x);
}

/* ---- concat_channels --------------------------------------------------------------
 * xs[i] (N, Ci, inner) -> out (N, sum Ci, inner): per sample, the inputs'
 * channel blocks one after another. */

typedef struct concat_params {
    int64_t n, inner;
} concat_params;

static int concat_check(int n, duet_tensor *const *xs, void *params, bool record,
                        duet_device dev, duet__op_plan *plan) {
    (void)record, (void)dev;
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
    concat_params *p = params;
    duet__op_plan_like(plan, a);
    plan->shape[1] = 0;
    for (int i = 0; i < n; i++) plan->shape[1] += xs[i]->shape[1];
    p->n = a->shape[0];
    p->inner = a->numel / (a->shape[0] * a->shape[1]);
    return DUET_OK;
}

static int concat_k(const duet__op_args *a) {
    const concat_params *p = a->params;
    const int64_t ctot = a->out->shape[1];
    int64_t off = 0;
    for (int i = 0; i < a->nin; i++) {
        const int64_t blk = a->in[i]->shape[1] * p->inner;
        for (int64_t s = 0; s < p->n; s++)
            memcpy(a->out->data + (s * ctot + off) * p->inner, a->in[i]->data + s * blk,
                   (size_t)blk * sizeof(float));
        off += a->in[i]->shape[1];
    }
    return DUET_OK;
}

static int concat_backward_k(const duet__op_args *a) {
    const concat_params *c = a->params;
    const int64_t ctot = a->out->shape[1];
    int64_t off = 0; /* channel offset of input i */
    for (int i = 0; i < a->nin; i++) {
        const int64_t ci = a->in[i]->shape[1], blk = ci * c->inner;
        float *gx = a->gin[i];
        if (gx != NULL)
            for (int64_t s = 0; s < c->n; s++) {
                const float *src = a->gout + (s * ctot + off) * c->inner;
                float *dst = gx + s * blk;
                for (int64_t k = 0; k < blk; k++) dst[k] += src[k];
            }
        off += ci;
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_concat_channels = {
    .id = DUET__OP_CONCAT_CHANNELS,
    .inputs = NULL, /* "input i" */
    .params_size = sizeof(concat_params),
    .check = concat_check,
    DUET__OP_CPU(concat_k, concat_backward_k),
};

int duet_concat_channels(int n, duet_tensor *const *xs, duet_tensor **out) {
    DUET_ASSERT(xs != NULL && out != NULL);
    *out = NULL;
    if (n < 1) return duet__error(DUET_EINVAL, "concat_channels: %d inputs; need at least 1", n);
    DUET_ASSERT(xs[0] != NULL);
    /* A node holds at most DUET_NODE_MAX_INPUTS inputs: concatenate the
     * leading ones first, then that result with the last MAX - 1. */
    if (n > DUET_NODE_MAX_INPUTS) {
        duet_device dev;
        DUET_TRY(duet__op_device("concat_channels", NULL, n, xs, &dev));
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
    return duet__op_run(DUET__OP_CONCAT_CHANNELS,
                        &(duet__op_call){.nin = n, .in = xs, .nrecord = n,
                                         .params = &(concat_params){0}},
                        out);
}

/* ---- slice_channels ----------------------------------------------------------------
 * x (N, C, inner) -> out (N, count, inner): channels [start, start + count)
 * of every sample, a copy (x[:, start:start + count]). */

typedef struct slicec_params {
    int64_t start, count;
} slicec_params;

static int slice_channels_check(int nin, duet_tensor *const *in, void *params, bool record,
                                duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const slicec_params *p = params;
    const duet_tensor *x = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim < 2 || p->start < 0 || p->count < 1 || p->start + p->count > x->shape[1])
        return duet__error(DUET_ESHAPE, "slice_channels: channels [%" PRId64 ", %" PRId64
                           ") of %s", p->start, p->start + p->count,
                           duet_shape_str(x, sx, sizeof sx));
    duet__op_plan_like(plan, x);
    plan->shape[1] = p->count;
    return DUET_OK;
}

static int slice_channels_k(const duet__op_args *a) {
    const slicec_params *p = a->params;
    const duet_tensor *x = a->in[0];
    const int64_t n = x->shape[0], inner = x->numel / (n * x->shape[1]);
    for (int64_t s = 0; s < n; s++)
        memcpy(a->out->data + s * p->count * inner, x->data + (s * x->shape[1] + p->start) * inner,
               (size_t)(p->count * inner) * sizeof(float));
    return DUET_OK;
}

static int slice_channels_backward_k(const duet__op_args *a) {
    const slicec_params *c = a->params;
    const duet_tensor *x = a->in[0], *y = a->out;
    const int64_t n = y->shape[0], blk = y->numel / n, cx = x->shape[1];
    const int64_t inner = x->numel / (n * cx);
    for (int64_t s = 0; s < n; s++) {
        float *dst = a->gin[0] + (s * cx + c->start) * inner;
        const float *src = a->gout + s * blk;
        for (int64_t k = 0; k < blk; k++) dst[k] += src[k];
    }
    return DUET_OK;
}

const duet__op_def duet__op_def_slice_channels = {
    .id = DUET__OP_SLICE_CHANNELS,
    .inputs = "x",
    .params_size = sizeof(slicec_params),
    .check = slice_channels_check,
    DUET__OP_CPU(slice_channels_k, slice_channels_backward_k),
    .output_unread = true,
};

int duet_slice_channels(duet_tensor *x, int64_t start, int64_t count, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SLICE_CHANNELS, (&(slicec_params){start, count}), out, x);
}
