/* Element-wise binary ops (add, sub, mul), scaling and the constant
 * per-channel affine map.
 *
 * Backward kernels accumulate (+=). The two input gradients of a binary op
 * may be one buffer (add(x, x)): each is updated in its own pass, so both
 * contributions land. */
#include "ops/ops_internal.h"

#include <string.h>

/* ---- kernels ---------------------------------------------------------------- */

static void add_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void sub_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

static void mul_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

/* g += s * gout */
static void axpy_backward(float *g, const float *gout, float s, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(2 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += s * gout[i];
}

/* g += gout * other */
static void mul_backward(float *g, const float *gout, const float *other, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += gout[i] * other[i];
}

/* out (N, C, inner) = x * scale[c] + shift[c] */
static void channel_affine_forward(float *out, const float *x, const float *scale,
                                   const float *shift, int64_t n, int64_t c, int64_t inner) {
#pragma omp parallel for collapse(2) num_threads(duet__par_threads(2 * n * c * inner)) schedule(static)
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++) {
            const float a = scale[ch], b = shift[ch];
            const float *xs = x + (s * c + ch) * inner;
            float *os = out + (s * c + ch) * inner;
            for (int64_t i = 0; i < inner; i++) os[i] = xs[i] * a + b;
        }
}

/* gx (N, C, inner) += gout * scale[c] */
static void channel_affine_backward(float *gx, const float *gout, const float *scale, int64_t n,
                                    int64_t c, int64_t inner) {
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++)
            axpy_backward(gx + (s * c + ch) * inner, gout + (s * c + ch) * inner, scale[ch],
                          inner);
}

/* ---- add, sub, mul ---------------------------------------------------------- */

static int binary_check(int nin, duet_tensor *const *in, void *params, bool record,
                        duet_device dev, duet__op_plan *plan, const char *op) {
    (void)nin, (void)params, (void)record, (void)dev;
    DUET_TRY(duet__op_check_same_shape(op, in[0], in[1]));
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

static int add_check(int nin, duet_tensor *const *in, void *params, bool record, duet_device dev,
                     duet__op_plan *plan) {
    return binary_check(nin, in, params, record, dev, plan, "add");
}

static int sub_check(int nin, duet_tensor *const *in, void *params, bool record, duet_device dev,
                     duet__op_plan *plan) {
    return binary_check(nin, in, params, record, dev, plan, "sub");
}

static int mul_check(int nin, duet_tensor *const *in, void *params, bool record, duet_device dev,
                     duet__op_plan *plan) {
    return binary_check(nin, in, params, record, dev, plan, "mul");
}

static int add_k(const duet__op_args *a) {
    add_forward(a->out->data, a->in[0]->data, a->in[1]->data, a->out->numel);
    return DUET_OK;
}

static int sub_k(const duet__op_args *a) {
    sub_forward(a->out->data, a->in[0]->data, a->in[1]->data, a->out->numel);
    return DUET_OK;
}

static int mul_k(const duet__op_args *a) {
    mul_forward(a->out->data, a->in[0]->data, a->in[1]->data, a->out->numel);
    return DUET_OK;
}

/* ga += gout, gb += sign * gout */
static int add_sub_backward(const duet__op_args *a, float sign) {
    const int64_t n = a->out->numel;
    if (a->gin[0] != NULL) axpy_backward(a->gin[0], a->gout, 1.0f, n);
    if (a->gin[1] != NULL) axpy_backward(a->gin[1], a->gout, sign, n);
    return DUET_OK;
}

static int add_backward_k(const duet__op_args *a) { return add_sub_backward(a, 1.0f); }
static int sub_backward_k(const duet__op_args *a) { return add_sub_backward(a, -1.0f); }

static int mul_backward_k(const duet__op_args *a) {
    const int64_t n = a->out->numel;
    if (a->gin[0] != NULL) mul_backward(a->gin[0], a->gout, a->in[1]->data, n);
    if (a->gin[1] != NULL) mul_backward(a->gin[1], a->gout, a->in[0]->data, n);
    return DUET_OK;
}

/* ---- the backwards in recorded ops (autograd.h's duet_graph_backward_fn) ---- */

static int add_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    (void)node;
    for (int k = 0; k < 2; k++)
        if (want[k]) gx[k] = duet_tensor_retain(gy);
    return DUET_OK;
}

static int sub_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    (void)node;
    if (want[0]) gx[0] = duet_tensor_retain(gy);
    return want[1] ? duet_scale(gy, -1.0f, &gx[1]) : DUET_OK;
}

/* d(a b) = gy b, gy a: both factors are recorded tensors, so the product
 * rule's second derivative flows through them. */
static int mul_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (want[0]) DUET_TRY(duet_mul(gy, node->inputs[1], &gx[0]));
    if (want[1]) DUET_TRY(duet_mul(gy, node->inputs[0], &gx[1]));
    return DUET_OK;
}

const duet__op_def duet__op_def_add = {
    .id = DUET__OP_ADD,
    .inputs = "a,b",
    .check = add_check,
    .forward = {DUET__OP_CPU_SIM(add_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_add)},
    .backward = {DUET__OP_CPU_SIM(add_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_add_backward)},
    .graph_backward = add_graph,
    .output_unread = true,
};

const duet__op_def duet__op_def_sub = {
    .id = DUET__OP_SUB,
    .inputs = "a,b",
    .check = sub_check,
    .forward = {DUET__OP_CPU_SIM(sub_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sub)},
    .backward = {DUET__OP_CPU_SIM(sub_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sub_backward)},
    .graph_backward = sub_graph,
    .output_unread = true,
};

const duet__op_def duet__op_def_mul = {
    .id = DUET__OP_MUL,
    .inputs = "a,b",
    .check = mul_check,
    .forward = {DUET__OP_CPU_SIM(mul_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mul)},
    .backward = {DUET__OP_CPU_SIM(mul_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mul_backward)},
    .graph_backward = mul_graph,
};

int duet_add(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_ADD, NULL, out, a, b);
}

int duet_add_inplace(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    *out = NULL;
    if (a == b || b->data == a->data || !duet_can_overwrite(a)) return duet_add(a, b, out);
    return duet__op_run(DUET__OP_ADD,
                        &(duet__op_call){.nin = 2, .in = (duet_tensor *[]){a, b}, .nrecord = 2,
                                         .inplace = true},
                        out);
}

int duet_sub(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SUB, NULL, out, a, b);
}

int duet_mul(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_MUL, NULL, out, a, b);
}

/* ---- scale ------------------------------------------------------------------ */

typedef struct scale_params {
    float s;
} scale_params;

static int scale_check(int nin, duet_tensor *const *in, void *params, bool record,
                       duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

static int scale_k(const duet__op_args *a) {
    const float s = ((const scale_params *)a->params)->s;
    const float *x = a->in[0]->data;
    float *y = a->out->data;
    for (int64_t i = 0; i < a->out->numel; i++) y[i] = s * x[i];
    return DUET_OK;
}

static int scale_backward_k(const duet__op_args *a) {
    axpy_backward(a->gin[0], a->gout, ((const scale_params *)a->params)->s, a->out->numel);
    return DUET_OK;
}

static int scale_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    const scale_params *p = duet__op_node_params(node);
    return want[0] ? duet_scale(gy, p->s, &gx[0]) : DUET_OK;
}

const duet__op_def duet__op_def_scale = {
    .id = DUET__OP_SCALE,
    .inputs = "x",
    .params_size = sizeof(scale_params),
    .check = scale_check,
    .forward = {DUET__OP_CPU_SIM(scale_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_scale)},
    .backward = {DUET__OP_CPU_SIM(scale_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_scale_backward)},
    .graph_backward = scale_graph,
    .output_unread = true,
};

int duet_scale(duet_tensor *x, float s, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SCALE, &(scale_params){s}, out, x);
}

/* ---- channel_affine -------------------------------------------------------------- */

/* scale (saved buffer 0) and shift (1), C floats each, copied to the
 * device; NULL means 1 and 0. The arrays are read by the check only. */
typedef struct affine_params {
    const float *scale, *shift;
    int64_t n, c, inner;
} affine_params;

static int channel_affine_check(int nin, duet_tensor *const *in, void *params, bool record,
                                duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const duet_tensor *x = in[0];
    affine_params *p = params;
    if (x->ndim < 2) {
        char sx[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "channel_affine: input %s has no channel dimension; "
                           "expected (N, C, ...)", duet_shape_str(x, sx, sizeof sx));
    }
    p->n = x->shape[0];
    p->c = x->shape[1];
    p->inner = x->numel / (p->n * p->c);
    duet__op_plan_like(plan, x);
    for (int k = 0; k < 2; k++) {
        const float *v = k == 0 ? p->scale : p->shift;
        plan->saved_bytes[k] = (size_t)p->c * sizeof(float);
        plan->saved_from[k] = v;
        plan->saved_zero[k] = v == NULL && k == 1;
    }
    return DUET_OK;
}

/* The scale on the device: saved buffer 0 filled with 1 when no scale was
 * given (the check left it uninitialised). */
static int channel_affine_k(const duet__op_args *a) {
    const affine_params *p = a->params;
    float *scale = a->saved[0];
    if (p->scale == NULL)
        for (int64_t i = 0; i < p->c; i++) scale[i] = 1.0f;
    channel_affine_forward(a->out->data, a->in[0]->data, scale, a->saved[1], p->n, p->c,
                           p->inner);
    return DUET_OK;
}

static int channel_affine_backward_k(const duet__op_args *a) {
    const affine_params *p = a->params;
    channel_affine_backward(a->gin[0], a->gout, a->saved[0], p->n, p->c, p->inner);
    return DUET_OK;
}

const duet__op_def duet__op_def_channel_affine = {
    .id = DUET__OP_CHANNEL_AFFINE,
    .inputs = "x",
    .params_size = sizeof(affine_params),
    .check = channel_affine_check,
    DUET__OP_CPU(channel_affine_k, channel_affine_backward_k),
    .output_unread = true,
};

int duet_channel_affine(duet_tensor *x, const float *scale, const float *shift,
                        duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    const affine_params p = {.scale = scale, .shift = shift};
    return DUET__OP_RUN(DUET__OP_CHANNEL_AFFINE, &p, out, x);
}
