/* The op table (op_table.h): the names with their count check, the rows,
 * and the one shared entry that checks, allocates, dispatches by device
 * type and records, with the one backward every recorded op's node runs. */
#include "ops/ops_internal.h"
#include "sim/sim.h"

#include <stdalign.h>
#include <stddef.h>
#include <string.h>

/* Tensors per kernel a simulated device queues (adam's 3 per parameter
 * go in launches of their own). */
#define DUET_SIM_LAUNCH_MAX_IN 16

/* ---- names --------------------------------------------------------------- */

/* In the order of duet__op_id. */
static const char *const op_names[] = {
    "conv2d",
    "conv2d_dilated",
    "conv_transpose2d",
    "conv2d_weight_grad",
    "linear",
    "batch_norm2d",
    "instance_norm2d",
    "spectral_norm",
    "relu",
    "leaky_relu",
    "sigmoid",
    "tanh",
    "elu",
    "clamp",
    "dropout",
    "add",
    "sub",
    "mul",
    "scale",
    "channel_affine",
    "sub_group_mean",
    "mask_composite",
    "reshape",
    "flatten",
    "concat_channels",
    "slice_channels",
    "slice0",
    "transpose2d",
    "crop_boxes",
    "max_pool2d",
    "reflection_pad2d",
    "pixel_shuffle",
    "upsample_bilinear",
    "upsample_nearest",
    "resize_bilinear_ac",
    "subsample_nearest",
    "extract_patches",
    "normalize_rows",
    "fuse_correlation",
    "softmax_channels",
    "sum",
    "mean",
    "sum_channels",
    "channel_norm",
    "gram_matrix",
    "l1_loss",
    "mse_loss",
    "bce_with_logits",
    "bce_with_logits_const",
    "l1_loss_masked",
    "adam",
    "relu_backward",
    "elu_backward",
    "expand_scalar",
};

/* Adding an op changes both numbers: the enum, the names and this line go
 * together (ggml's GGML_OP_COUNT check). */
_Static_assert(sizeof op_names / sizeof op_names[0] == DUET__OP_COUNT,
               "op_names must name every duet__op_id, in order");
_Static_assert(DUET__OP_COUNT == 54, "DUET__OP_COUNT changed: update op_names and the row table");

const char *duet__op_name(duet__op_id id) {
    return (unsigned)id < DUET__OP_COUNT ? op_names[id] : NULL;
}

/* ---- rows ------------------------------------------------------------------
 * Each row is defined next to its kernels (const duet__op_def
 * duet__op_def_<name>) and listed here; test_op_table fails naming an op
 * whose row is missing. */

#define ROWS(X)                                                                 \
    X(ADD, add) X(SUB, sub) X(MUL, mul) X(SCALE, scale) X(CHANNEL_AFFINE, channel_affine)     \
    X(RELU, relu) X(LEAKY_RELU, leaky_relu) X(RELU_BACKWARD, relu_backward) X(SIGMOID, sigmoid)  \
    X(TANH, tanh) X(ELU, elu) X(ELU_BACKWARD, elu_backward) X(CLAMP, clamp)     \
    X(L1_LOSS, l1_loss) X(MSE_LOSS, mse_loss) X(BCE_WITH_LOGITS, bce_with_logits)                \
    X(BCE_WITH_LOGITS_CONST, bce_with_logits_const) X(SUM, sum) X(MEAN, mean)                    \
    X(EXPAND_SCALAR, expand_scalar) X(LINEAR, linear) X(CONV2D, conv2d)       \
    X(RESHAPE, reshape) X(FLATTEN, flatten) X(CONCAT_CHANNELS, concat_channels)                  \
    X(SLICE_CHANNELS, slice_channels) X(MAX_POOL2D, max_pool2d) X(PIXEL_SHUFFLE, pixel_shuffle)  \
    X(UPSAMPLE_BILINEAR, upsample_bilinear) X(REFLECTION_PAD2D, reflection_pad2d)    \
    X(UPSAMPLE_NEAREST, upsample_nearest) X(RESIZE_BILINEAR_AC, resize_bilinear_ac)              \
    X(GRAM_MATRIX, gram_matrix) X(SUB_GROUP_MEAN, sub_group_mean)                                \
    X(TRANSPOSE2D, transpose2d) X(SUM_CHANNELS, sum_channels) X(CHANNEL_NORM, channel_norm) X(ADAM, adam)

#define DECLARE(ID, name) extern const duet__op_def duet__op_def_##name;
ROWS(DECLARE)
#undef DECLARE

static const duet__op_def *const op_rows[DUET__OP_COUNT] = {
#define LIST(ID, name) [DUET__OP_##ID] = &duet__op_def_##name,
    ROWS(LIST)
#undef LIST
};

const duet__op_def *duet__op_row(duet__op_id id) {
    return (unsigned)id < DUET__OP_COUNT ? op_rows[id] : NULL;
}

/* ---- the recorded node's context ---------------------------------------------- */

/* What a recorded op keeps: its row, device, saved buffers and params. */
typedef struct op_ctx {
    const duet__op_def *def;
    duet_device dev;
    void *saved[DUET__OP_MAX_SAVED];
    alignas(max_align_t) unsigned char params[];
} op_ctx;

static void saved_free(duet_device dev, void *const *saved) {
    for (int k = 0; k < DUET__OP_MAX_SAVED; k++)
        if (saved[k] != NULL) duet__device_free(dev, saved[k]);
}

static void op_ctx_free(void *p) {
    op_ctx *c = p;
    if (c == NULL) return;
    saved_free(c->dev, c->saved);
    free(c);
}

bool duet__op_node_is_table(const duet_node *node) {
    return node != NULL && node->free_ctx == op_ctx_free;
}

const void *duet__op_node_params(const duet_node *node) {
    DUET_ASSERT(duet__op_node_is_table(node));
    return ((const op_ctx *)node->ctx)->params;
}

void *duet__op_node_saved(const duet_node *node, int k) {
    DUET_ASSERT(duet__op_node_is_table(node) && k >= 0 && k < DUET__OP_MAX_SAVED);
    return ((const op_ctx *)node->ctx)->saved[k];
}

/* ---- running a kernel on a device ------------------------------------------- */

/* A kernel queued on a simulated device's compute stream: the args with
 * every tensor replaced by an alias (a value copy whose data and grad are
 * the resolved storage, on the CPU), the params copied, the saved buffers
 * and gradients resolved. Owned by the queue. */
typedef struct sim_launch {
    duet__op_kernel k;
    duet__op_args a;
    duet_tensor *in[DUET_SIM_LAUNCH_MAX_IN];
    duet_tensor alias[DUET_SIM_LAUNCH_MAX_IN];
    duet_tensor out;
    alignas(max_align_t) unsigned char params[DUET__OP_MAX_PARAMS];
} sim_launch;

static int sim_run(void *ctx) {
    sim_launch *l = ctx;
    return l->k(&l->a);
}

static void *resolve(const void *p) { return p != NULL ? duet__sim_resolve(p) : NULL; }

/* t's alias in *a (t not NULL). */
static void sim_alias(duet_tensor *a, const duet_tensor *t) {
    *a = *t;
    a->data = resolve(t->data);
    a->grad = resolve(t->grad);
    a->device = duet_device_cpu();
    a->grad_fn = NULL;
    a->base = NULL;
}

static int sim_launch_kernel(duet_device dev, duet__op_kernel k, const duet__op_args *a,
                             size_t params_size, const char *op) {
    if (a->nin > DUET_SIM_LAUNCH_MAX_IN)
        return duet__error(DUET_EUNSUPPORTED, "%s: %d tensors, at most %d on %s", op, a->nin,
                           DUET_SIM_LAUNCH_MAX_IN, "a simulated device");
    sim_launch *l = calloc(1, sizeof *l);
    if (l == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory queueing the kernel", op);
    l->k = k;
    l->a = *a;
    for (int i = 0; i < a->nin; i++) {
        if (a->in[i] == NULL) continue;
        sim_alias(&l->alias[i], a->in[i]);
        l->in[i] = &l->alias[i];
    }
    l->a.in = l->in;
    if (a->out != NULL) {
        sim_alias(&l->out, a->out);
        l->a.out = &l->out;
    }
    if (params_size > 0) memcpy(l->params, a->params, params_size);
    l->a.params = l->params;
    for (int i = 0; i < DUET__OP_MAX_SAVED; i++) l->a.saved[i] = resolve(a->saved[i]);
    l->a.gout = resolve(a->gout);
    for (int i = 0; i < DUET_NODE_MAX_INPUTS; i++) l->a.gin[i] = resolve(a->gin[i]);
    return duet__sim_launch(duet__sim_compute_stream(dev.index), op, sim_run, l, free);
}

/* Runs kernel k for device dev: a call on the CPU and on CUDA (whose kernels
 * queue on the device's stream); on a simulated device the CPU kernel
 * queued on its compute stream over resolved aliases (sim_launch). */
static int run_kernel(duet_device dev, duet__op_kernel k, const duet__op_args *a,
                      size_t params_size, const char *op) {
    if (dev.type == DUET_DEVICE_SIM) return sim_launch_kernel(dev, k, a, params_size, op);
    return k(a);
}

/* ---- the entry ------------------------------------------------------------------ */

/* Allocates the plan's saved buffers on dev into saved (NULLs first). */
static int saved_alloc(const char *op, duet_device dev, const duet__op_plan *plan, void **saved) {
    for (int k = 0; k < DUET__OP_MAX_SAVED; k++) {
        const size_t bytes = plan->saved_bytes[k];
        if (bytes == 0) continue;
        DUET_TRY(duet__device_alloc(dev, bytes, plan->saved_zero[k], op, &saved[k]));
        if (plan->saved_from[k] != NULL)
            DUET_TRY(duet__device_copy(dev, saved[k],
                                       plan->saved_on_device[k] ? dev : duet_device_cpu(),
                                       plan->saved_from[k], bytes, op));
    }
    return DUET_OK;
}

/* The output of a call: a new tensor of the plan's shape on dev, a view of
 * in[0], or in[0] itself (in place). */
static int make_output(const duet__op_call *call, const duet__op_plan *plan, bool record,
                       duet_device dev, duet_tensor **y) {
    duet_tensor *x = call->in[0];
    if (call->inplace) {
        if (!record) {
            *y = duet_tensor_retain(x);
            return DUET_OK;
        }
        return duet_tensor_view(x, x->ndim, x->shape, y);
    }
    if (plan->view) return duet_tensor_view(x, plan->ndim, plan->shape, y);
    if (plan->ndim == 0) return DUET_OK;
    if (dev.type == DUET_DEVICE_CPU && !plan->zero_out)
        return duet_tensor_create_uninit(plan->ndim, plan->shape, y);
    return duet_tensor_create_on(dev, plan->ndim, plan->shape, y);
}

/* Whether the call records: grad mode on and an input that takes a
 * gradient requires one (a BCE target alone records nothing). */
static bool needs_record(const duet__op_def *def, const duet__op_call *call) {
    if (def->no_grad_inputs == 0) return duet_autograd_needs_record(call->nrecord, call->in);
    duet_tensor *in[DUET_NODE_MAX_INPUTS] = {0};
    for (int i = 0; i < call->nrecord; i++)
        if (!((def->no_grad_inputs >> i) & 1u)) in[i] = call->in[i];
    return duet_autograd_needs_record(call->nrecord, in);
}

int duet__op_run(duet__op_id id, const duet__op_call *call, duet_tensor **out) {
    DUET_ASSERT((unsigned)id < DUET__OP_COUNT && call != NULL && out != NULL);
    *out = NULL;
    const duet__op_def *def = op_rows[id];
    const char *op = op_names[id];
    DUET_ASSERT(def != NULL && def->params_size <= DUET__OP_MAX_PARAMS);
    duet_device dev;
    DUET_TRY(duet__op_device(op, def->inputs, call->nin, call->in, &dev));
    if ((unsigned)dev.type >= DUET__OP_DEVICE_TYPES || def->forward[dev.type] == NULL)
        return duet__op_no_kernel(op, dev);
    if (dev.type != DUET_DEVICE_CPU) DUET_TRY(duet_device_check(dev));
    const bool record = needs_record(def, call);
    alignas(max_align_t) unsigned char params[DUET__OP_MAX_PARAMS];
    if (def->params_size > 0) memcpy(params, call->params, def->params_size);
    duet__op_plan plan = {0};
    DUET_TRY(def->check(call->nin, call->in, params, record, dev, &plan));

    duet__op_args a = {.nin = call->nin, .in = call->in, .params = params, .record = record};
    duet_tensor *y = NULL;
    op_ctx *c = NULL;
    int rc = make_output(call, &plan, record, dev, &y);
    if (rc == DUET_OK) rc = saved_alloc(op, dev, &plan, a.saved);
    a.out = y;
    if (rc == DUET_OK && !plan.view) rc = run_kernel(dev, def->forward[dev.type], &a, def->params_size, op);
    if (rc != DUET_OK || !record || y == NULL) goto done;
    c = malloc(offsetof(op_ctx, params) + def->params_size);
    if (c == NULL) {
        rc = duet__error(DUET_ENOMEM, "%s: out of memory recording the op", op);
        goto done;
    }
    c->def = def;
    c->dev = dev;
    memcpy(c->saved, a.saved, sizeof c->saved);
    memset(a.saved, 0, sizeof a.saved);
    if (def->params_size > 0) memcpy(c->params, params, def->params_size);
    rc = duet_autograd_record(y, op, duet__op_backward, c, op_ctx_free, call->nrecord, call->in);
    if (rc != DUET_OK) {
        rc = duet__error_context(rc, "%s", op);
        goto done;
    }
    if (def->graph_backward != NULL) duet_autograd_set_graph_backward(y, def->graph_backward);
    if (def->output_unread) duet_autograd_mark_output_unread(y);
done:
    saved_free(dev, a.saved);
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    *out = y;
    return DUET_OK;
}

int duet__op_backward(duet_node *node) {
    const op_ctx *c = node->ctx;
    const duet__op_def *def = c->def;
    duet__op_args a = {.nin = node->ninputs,
                       .in = node->inputs,
                       .out = node->output,
                       .params = c->params,
                       .gout = node->output->grad};
    memcpy(a.saved, c->saved, sizeof a.saved);
    bool any = false;
    for (int i = 0; i < node->ninputs; i++) {
        if ((def->no_grad_inputs >> i) & 1u) continue;
        a.gin[i] = duet_node_input_grad(node, i);
        any = any || a.gin[i] != NULL;
    }
    if (!any) return DUET_OK;
    const duet__op_kernel k = def->backward[c->dev.type];
    if (k == NULL) return duet__op_no_kernel(node->op, c->dev);
    return run_kernel(c->dev, k, &a, def->params_size, node->op);
}

/* ---- shared checks -------------------------------------------------------------- */

int duet__op_check_ndim(const char *op, const char *name, const duet_tensor *t, int ndim,
                        const char *what) {
    if (t->ndim == ndim) return DUET_OK;
    char st[DUET_SHAPE_STR_MAX];
    return duet__error(DUET_ESHAPE, "%s: %s %s must be %d-D%s%s%s", op, name,
                       duet_shape_str(t, st, sizeof st), ndim, what != NULL ? " (" : "",
                       what != NULL ? what : "", what != NULL ? ")" : "");
}
