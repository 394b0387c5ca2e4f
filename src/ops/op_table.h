/* The op table: every op of duet is one enum value (duet__op_id), one name
 * (duet__op_name, the table in op_table.c with a compile-time count check,
 * as ggml's GGML_OP_NAME) and one descriptor row (duet__op_def): its
 * inputs' names, its checks and output-shape inference, the device buffers
 * it saves for backward, its forward and backward kernels per device type,
 * and its backward written in recorded ops (for duet_autograd_grad's
 * create_graph). One shared entry, duet__op_run, does for every op what
 * each op's public function used to do itself: checks that the inputs sit
 * on one device, runs the row's check, allocates the output and the saved
 * buffers on that device, runs the device's kernel and records the node
 * whose backward (duet__op_backward) runs the device's backward kernel.
 *
 * Adding an op: a value in duet__op_id (before DUET__OP_COUNT), its name in
 * op_table.c's name table at the same place (the count check fails the
 * build otherwise), a row (const duet__op_def duet__op_def_<name>, defined
 * next to its kernels) listed in op_table.c's row table, the public function
 * that fills the op's params and calls duet__op_run, and its cases in
 * tests/unit/test_op_table.c (the test fails naming any op without cases).
 *
 * Adding a device's kernels: set the row's forward[type] and backward[type]
 * (and nothing else). A kernel is a plain function over the tensors in its
 * duet__op_args: it reads in[i]->data, writes out->data, saved[k] and
 * gin[i] (+=), all storage of the one device. The entry never looks inside
 * a kernel, and an op whose row has no kernel for a device refuses that
 * device by name (duet__op_no_kernel).
 *
 * Not installed; the ops layer's .c files, its white-box tests and bench
 * include it (through ops_internal.h). */
#ifndef DUET_OPS_OP_TABLE_H
#define DUET_OPS_OP_TABLE_H

#include "duet/ops.h"

#include <stddef.h>

/* ---- the ops ------------------------------------------------------------- */

/* Every op, in the order of op_table.c's names. Public ops first by layer,
 * then the ops that exist only as the recorded backward of another. */
typedef enum duet__op_id {
    /* convolution and linear */
    DUET__OP_CONV2D,
    DUET__OP_CONV2D_DILATED,
    DUET__OP_CONV_TRANSPOSE2D,
    DUET__OP_CONV2D_WEIGHT_GRAD,
    DUET__OP_LINEAR,
    /* normalisation */
    DUET__OP_BATCH_NORM2D,
    DUET__OP_INSTANCE_NORM2D,
    DUET__OP_SPECTRAL_NORM,
    /* activations */
    DUET__OP_RELU,
    DUET__OP_LEAKY_RELU,
    DUET__OP_SIGMOID,
    DUET__OP_TANH,
    DUET__OP_ELU,
    DUET__OP_CLAMP,
    DUET__OP_DROPOUT,
    /* element-wise */
    DUET__OP_ADD,
    DUET__OP_SUB,
    DUET__OP_MUL,
    DUET__OP_SCALE,
    DUET__OP_CHANNEL_AFFINE,
    DUET__OP_SUB_GROUP_MEAN,
    DUET__OP_MASK_COMPOSITE,
    /* shape */
    DUET__OP_RESHAPE,
    DUET__OP_FLATTEN,
    DUET__OP_CONCAT_CHANNELS,
    DUET__OP_SLICE_CHANNELS,
    DUET__OP_SLICE0,
    DUET__OP_TRANSPOSE2D,
    DUET__OP_CROP_BOXES,
    /* pooling, padding, resampling */
    DUET__OP_MAX_POOL2D,
    DUET__OP_REFLECTION_PAD2D,
    DUET__OP_PIXEL_SHUFFLE,
    DUET__OP_UPSAMPLE_BILINEAR,
    DUET__OP_UPSAMPLE_NEAREST,
    DUET__OP_RESIZE_BILINEAR_AC,
    DUET__OP_SUBSAMPLE_NEAREST,
    /* contextual attention */
    DUET__OP_EXTRACT_PATCHES,
    DUET__OP_NORMALIZE_ROWS,
    DUET__OP_FUSE_CORRELATION,
    DUET__OP_SOFTMAX_CHANNELS,
    /* reductions */
    DUET__OP_SUM,
    DUET__OP_MEAN,
    DUET__OP_SUM_CHANNELS,
    DUET__OP_CHANNEL_NORM,
    DUET__OP_GRAM_MATRIX,
    /* losses */
    DUET__OP_L1_LOSS,
    DUET__OP_MSE_LOSS,
    DUET__OP_BCE_WITH_LOGITS,
    DUET__OP_BCE_WITH_LOGITS_CONST,
    DUET__OP_L1_LOSS_MASKED,
    /* optimizer */
    DUET__OP_ADAM,
    /* recorded backwards of other ops (their graph_backward) */
    DUET__OP_RELU_BACKWARD,
    DUET__OP_ELU_BACKWARD,
    DUET__OP_EXPAND_SCALAR,
    DUET__OP_COUNT
} duet__op_id;

/* The op's name ("conv2d"), static: the tape's node name and every message's
 * prefix. NULL outside [0, DUET__OP_COUNT). */
const char *duet__op_name(duet__op_id id);

/* ---- a row ------------------------------------------------------------------ */

/* Saved device buffers per op (batch norm's mean and inverse deviation, a
 * rectifier's bit mask, a pool's argmax, ...). */
#define DUET__OP_MAX_SAVED 4
/* Bytes of an op's parameter struct (plain values: an op's arrays go in
 * saved buffers, see saved_from). */
#define DUET__OP_MAX_PARAMS 192
/* Device types a row has kernels for: indexed by duet_device_type. */
#define DUET__OP_DEVICE_TYPES 3

/* What a kernel runs on. Forward: in[0..nin) are the call's tensors (NULL
 * for an absent optional one), out the output (NULL for an op without
 * one), saved[k] the saved buffers (record says whether the op is being
 * recorded: a buffer only backward reads may then be NULL). Backward: in
 * are the node's inputs, out its output, gout out's gradient and gin[i]
 * input i's gradient to accumulate into (+=), NULL when input i needs none.
 * Every pointer is storage of the one device the kernel runs for. */
typedef struct duet__op_args {
    int nin;
    duet_tensor *const *in;
    duet_tensor *out;
    const void *params;
    void *saved[DUET__OP_MAX_SAVED];
    bool record;
    const float *gout;
    float *gin[DUET_NODE_MAX_INPUTS];
} duet__op_args;

/* A kernel: DUET_OK, or a status with its message set (naming the op). */
typedef int (*duet__op_kernel)(const duet__op_args *a);

/* What a row's check says about one call. */
typedef struct duet__op_plan {
    /* The output's shape; ndim 0: the op makes no output (adam). */
    int ndim;
    int64_t shape[DUET_MAX_DIMS];
    /* The output is a view of in[0] with that shape (reshape): nothing is
     * allocated and no forward kernel runs. */
    bool view;
    /* The output starts zero-filled (a kernel that accumulates into it). */
    bool zero_out;
    /* Saved buffer k: its bytes (0: none), zero-filled when saved_zero[k],
     * else filled from the host bytes saved_from[k] when not NULL (an op's
     * host arrays: channel_affine's scale and shift, crop_boxes' corners),
     * else uninitialised. */
    size_t saved_bytes[DUET__OP_MAX_SAVED];
    bool saved_zero[DUET__OP_MAX_SAVED];
    const void *saved_from[DUET__OP_MAX_SAVED];
    /* saved_from[k] is storage on the op's device (another node's saved
     * buffer), not host memory. */
    bool saved_on_device[DUET__OP_MAX_SAVED];
} duet__op_plan;

/* A row's check: shapes and parameters, before anything is allocated. It
 * reads no storage (the inputs may be on any device), may complete the
 * params (derived sizes the kernels read) and fills the plan. `dev` is the
 * inputs' device (for an op that refuses a device for a reason of its
 * parameters). Errors name the op and the shapes. */
typedef int (*duet__op_check_fn)(int nin, duet_tensor *const *in, void *params, bool record,
                                 duet_device dev, duet__op_plan *plan);

typedef struct duet__op_def {
    duet__op_id id;
    /* The tensors' names for messages, comma-separated ("x,weight,bias"). */
    const char *inputs;
    /* sizeof the op's parameter struct (<= DUET__OP_MAX_PARAMS), 0: none. */
    size_t params_size;
    duet__op_check_fn check;
    /* Kernels by duet_device_type; NULL: the op refuses that device. */
    duet__op_kernel forward[DUET__OP_DEVICE_TYPES];
    duet__op_kernel backward[DUET__OP_DEVICE_TYPES];
    /* The backward in recorded ops; NULL: the op cannot take part in
     * duet_autograd_grad. */
    duet_graph_backward_fn graph_backward;
    /* The backward never reads the output's values (in-place ops may
     * overwrite it; duet_autograd_release may free it). */
    bool output_unread;
    /* Bit i set: recorded input i gets no gradient (a loss's mask, BCE's
     * target). */
    unsigned no_grad_inputs;
} duet__op_def;

/* A CPU kernel in a row, which is also the simulated device's (the shared
 * entry queues it on sim:N's compute stream over resolved aliases). */
#define DUET__OP_CPU_SIM(k) [DUET_DEVICE_CPU] = (k), [DUET_DEVICE_SIM] = (k)
/* A row's kernels on the CPU and the simulated device. */
#define DUET__OP_CPU(fwd, bwd) .forward = {DUET__OP_CPU_SIM(fwd)}, \
                               .backward = {DUET__OP_CPU_SIM(bwd)}

/* A CUDA kernel in a row: the function in a CUDA build, NULL (the op
 * refuses CUDA devices) without the toolkit. The kernels are
 * src/ops/cuda/ops_cuda.c's, declared here so that rows can name them. */
#ifdef DUET_HAVE_CUDA
#define DUET__OP_CUDA(k) (k)
#else
#define DUET__OP_CUDA(k) NULL
#endif
int duet__cuda_k_add(const duet__op_args *a);
int duet__cuda_k_sub(const duet__op_args *a);
int duet__cuda_k_mul(const duet__op_args *a);
int duet__cuda_k_add_backward(const duet__op_args *a);
int duet__cuda_k_sub_backward(const duet__op_args *a);
int duet__cuda_k_mul_backward(const duet__op_args *a);
int duet__cuda_k_scale(const duet__op_args *a);
int duet__cuda_k_scale_backward(const duet__op_args *a);
int duet__cuda_k_relu(const duet__op_args *a);
int duet__cuda_k_relu_backward(const duet__op_args *a);
int duet__cuda_k_leaky_relu(const duet__op_args *a);
int duet__cuda_k_leaky_relu_backward(const duet__op_args *a);
int duet__cuda_k_sigmoid(const duet__op_args *a);
int duet__cuda_k_sigmoid_backward(const duet__op_args *a);
int duet__cuda_k_tanh(const duet__op_args *a);
int duet__cuda_k_tanh_backward(const duet__op_args *a);
int duet__cuda_k_elu(const duet__op_args *a);
int duet__cuda_k_elu_backward(const duet__op_args *a);
int duet__cuda_k_l1_loss(const duet__op_args *a);
int duet__cuda_k_l1_loss_backward(const duet__op_args *a);
int duet__cuda_k_mse_loss(const duet__op_args *a);
int duet__cuda_k_mse_loss_backward(const duet__op_args *a);
int duet__cuda_k_bce(const duet__op_args *a);
int duet__cuda_k_bce_backward(const duet__op_args *a);
int duet__cuda_k_sum(const duet__op_args *a);
int duet__cuda_k_sum_backward(const duet__op_args *a);
int duet__cuda_k_mean(const duet__op_args *a);
int duet__cuda_k_mean_backward(const duet__op_args *a);
int duet__cuda_k_linear(const duet__op_args *a);
int duet__cuda_k_linear_backward(const duet__op_args *a);
int duet__cuda_k_conv2d(const duet__op_args *a);
int duet__cuda_k_conv2d_backward(const duet__op_args *a);

/* The row of op id (never NULL for a built op: test_op_table checks). */
const duet__op_def *duet__op_row(duet__op_id id);

/* ---- the shared entry ---------------------------------------------------- */

/* One call of an op. in[0..nin): its tensors (borrowed; NULL for an absent
 * optional one); the first nrecord are the recorded node's inputs (the rest
 * are updated in place without a gradient: running statistics, power
 * iteration vectors, optimizer state). params: the op's parameter struct,
 * copied. inplace: overwrite in[0] (an in-place op, after
 * duet_can_overwrite): the output is in[0] itself when nothing is
 * recorded, else a recorded view of it. */
typedef struct duet__op_call {
    int nin;
    duet_tensor *const *in;
    int nrecord;
    const void *params;
    bool inplace;
} duet__op_call;

/* Runs op id: checks the tensors' device and the row's check, allocates the
 * output and saved buffers on that device, runs the device's forward kernel
 * and, when grad mode is on and a recorded input requires grad, records the
 * node (backward duet__op_backward, the row's graph_backward). *out: the
 * output (one reference), NULL for an op without one and on failure. */
int duet__op_run(duet__op_id id, const duet__op_call *call, duet_tensor **out);

/* duet__op_run for an op whose tensors are all recorded inputs:
 * DUET__OP_RUN(DUET__OP_ADD, NULL, out, a, b). */
#define DUET__OP_RUN(id_, params_, out_, ...)                                   \
    duet__op_run((id_),                                                       \
                 &(duet__op_call){                                             \
                     .nin = (int)(sizeof((duet_tensor *[]){__VA_ARGS__}) /      \
                                  sizeof(duet_tensor *)),                      \
                     .in = (duet_tensor *[]){__VA_ARGS__},                     \
                     .nrecord = (int)(sizeof((duet_tensor *[]){__VA_ARGS__}) /  \
                                      sizeof(duet_tensor *)),                  \
                     .params = (params_)},                                     \
                 (out_))

/* The backward of every node duet__op_run records: the row's backward
 * kernel for the node's device, with the gradients of the inputs that need
 * one. */
int duet__op_backward(duet_node *node);

/* A recorded op's node: its params and saved buffer k (for graph
 * backwards). */
const void *duet__op_node_params(const duet_node *node);
void *duet__op_node_saved(const duet_node *node, int k);
/* Whether node was recorded by duet__op_run. */
bool duet__op_node_is_table(const duet_node *node);

/* ---- checks the rows share (op_table.c) ----------------------------------- */

/* DUET_ESHAPE "op: input x is [..], expected ndim dims (what)" unless t has
 * ndim dims. */
int duet__op_check_ndim(const char *op, const char *name, const duet_tensor *t, int ndim,
                        const char *what);
/* The plan of an op whose output has t's shape. */
static inline void duet__op_plan_like(duet__op_plan *p, const duet_tensor *t) {
    p->ndim = t->ndim;
    for (int i = 0; i < DUET_MAX_DIMS; i++) p->shape[i] = t->shape[i];
}

#endif
