/* The ops layer's private header (the .c files of src/ops, its tests, bench):
 * the op table (op_table.h: every op's row and the shared entry
 * duet__op_run), the finish helper of the ops not yet on it, shape checks,
 * branch-free selection, the GEMM's set-up and scratch buffers, and the
 * summation the ops share. Not installed. */
#ifndef DUET_OPS_INTERNAL_H
#define DUET_OPS_INTERNAL_H

#include "duet/ops.h"
#include "ops/ops_math.h"
#include "ops/op_table.h"

#include <signal.h>
#include <string.h>

/* ---- recording and checks (op.c) --------------------------------------- */

/* c ? a : b without a branch: duet__pick of ops_math.h, where the
 * arithmetic shared with the CUDA kernels lives. */
static inline float duet__op_pick(bool c, float a, float b) { return duet__pick(c, a, b); }

/* Ends an op's forward, the one way ops record on the tape: when grad mode
 * is on and one of `inputs` requires grad, records `y` on the tape (taking
 * ownership of ctx); otherwise frees ctx (free_ctx may be NULL, ctx may be
 * NULL when the op saved nothing). On success *out = y; on failure y is released, *out = NULL and the
 * status (with "op: " context) is returned. */
int duet__op_finish(duet_tensor *y, const char *op, duet_backward_fn backward, void *ctx,
                    void (*free_ctx)(void *ctx), int ninputs, duet_tensor *const *inputs,
                    duet_tensor **out);

/* For an op whose backward never reads its output's values (conv2d, linear,
 * batch_norm2d, add, relu, ...): marks y's node so that the in-place ops of
 * ops.h may overwrite y and duet_autograd_release may free it. Call after
 * recording; nothing to do when y was not recorded. This is the one place
 * that says whether an op's backward reads its output. */
static inline void duet__op_output_unread(duet_tensor *y) { duet_autograd_mark_output_unread(y); }

/* g (one element, possibly with history) times s, broadcast to `shape`
 * through recorded ops: the backward in recorded ops of sum and mean. */
int duet__graph_expand_scalar(duet_tensor *g, int ndim, const int64_t *shape, float s,
                              duet_tensor **out);

/* duet__op_finish's status, with y marked as above when it succeeded. */
static inline int duet__op_finish_unread(int rc, duet_tensor **out) {
    if (rc == DUET_OK) duet__op_output_unread(*out);
    return rc;
}

/* ---- where an op runs (dispatch.c) ----------------------------------------
 * An op runs on the device of its inputs. Every op's entry checks them
 * before it reads any storage: inputs on two devices are DUET_EDEVICE
 * naming the op, both inputs and their devices. `names` lists the inputs'
 * names for messages, comma-separated in the order of `inputs`
 * ("x,weight,bias"); NULL inputs (an absent bias) are skipped. */
/* The inputs' one device into *dev (the CPU when every input is NULL). */
int duet__op_device(const char *op, const char *names, int n, duet_tensor *const *inputs,
                    duet_device *dev);
/* duet__op_device for an op with only a CPU implementation: inputs on a
 * device are DUET_EUNSUPPORTED naming the op and the device. */
int duet__op_on_cpu(const char *op, const char *names, int n, duet_tensor *const *inputs);
/* An op entry's check: *out = NULL, then duet__op_on_cpu over the listed
 * inputs, returning its status on failure. */
#define DUET__OP_ON_CPU(out, op, names, ...)                                    \
    do {                                                                       \
        *(out) = NULL;                                                         \
        duet_tensor *duet__in[] = {__VA_ARGS__};                               \
        DUET_TRY(duet__op_on_cpu(op, names, (int)(sizeof duet__in / sizeof duet__in[0]), \
                                 duet__in));                                   \
    } while (0)

/* DUET_EUNSUPPORTED "op: its inputs are on cuda:N, and duet's op runs on the
 * CPU only so far" (duet__op_on_cpu's refusal). */
int duet__op_no_kernel(const char *op, duet_device dev);
/* ---- what the CUDA kernels of the rows select (src/ops/cuda/, CUDA builds) ----
 * The rows' CUDA kernels (op_table.h's duet__cuda_k_*, ops_cuda.c) call the
 * launchers of cuda_ops.h with these. */
typedef enum duet__cuda_act {
    DUET__ACT_RELU,
    DUET__ACT_LEAKY_RELU,
    DUET__ACT_SIGMOID,
    DUET__ACT_TANH,
    DUET__ACT_ELU /* slope carries alpha */
} duet__cuda_act;
typedef enum duet__cuda_loss {
    DUET__LOSS_L1,
    DUET__LOSS_MSE,
    DUET__LOSS_BCE_LOGITS
} duet__cuda_loss;
typedef enum duet__cuda_binary {
    DUET__BIN_ADD,
    DUET__BIN_SUB,
    DUET__BIN_MUL
} duet__cuda_binary;

/* DUET_ESHAPE "op: shapes [..] and [..] differ" unless a and b have the same
 * shape; DUET_OK otherwise. */
int duet__op_check_same_shape(const char *op, const duet_tensor *a, const duet_tensor *b);

/* ---- Adam (adam.c) ----------------------------------------------------------- */

/* One tensor's constants for step `step` (bias corrections in double, as
 * torch). */
void duet__adam_consts_make(const duet_adam_hparams *hp, int64_t step, duet__adam_consts *k);

/* ---- GEMM (gemm.c, gemm_bf16.c) ------------------------------------------- */

/* Configures the kernel path with its defaults unless the process already
 * did (duet_kernels_configure) and returns the GEMM thread count in effect.
 * duet_sgemm calls it; code that calls a GEMM library directly (the
 * benchmark) calls it first. */
int duet__blas_init(void);

/* The OpenMP threads for a loop over `work` floats of memory-bound work
 * (im2col, batch norm, pooling, elementwise): 1 below about 32K floats,
 * where waking the team costs more than it saves, else up to duet's
 * configured thread count (DUET_NUM_THREADS / num_threads, the GEMM's) at
 * about 16K floats per thread. Use it as `num_threads(duet__par_threads(n))`
 * on loops whose iterations write disjoint outputs, so that results do not
 * depend on the count. */
#define DUET__PAR_MIN_WORK ((int64_t)1 << 15)
int duet__par_threads(int64_t work);

/* gemm_bf16.c: duet_sgemm's mixed-precision path (alpha 1, beta 0 or 1);
 * DUET_EUNSUPPORTED when oneDNN cannot make the matmul, DUET_ENOMEM. Uses
 * scratch slots 3 to 5. B is b (float32, leading dimension ldb, rounded
 * here) or b_bf16 (already rounded, compact: ldb is its row length); the
 * other is NULL. held_a: A is the operand duet__sgemm_held_a names (its
 * rounded copy is kept until duet__gemm_release_a). duet__bf16_check runs a
 * small product and names the implementation oneDNN chose. */
int duet__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, const uint16_t *b_bf16, int64_t ldb, float beta,
                     float *c, int64_t ldc, bool held_a);

/* Every call into a kernel library (oneDNN, OpenBLAS) runs between these:
 * the calling thread holds the asynchronous signals (SIGTERM, SIGINT,
 * SIGUSR1, ...; not faults) and takes any that arrived when released.
 * oneDNN's JIT kernels corrupt memory when a signal handler runs on their
 * thread mid-call (see gemm.c). Nests. */
void duet__signals_hold(sigset_t *old);
void duet__signals_release(const sigset_t *old);

/* Whether duet_sgemm runs its products on bf16 inputs (mixed precision
 * "bf16" configured). */
bool duet__gemm_bf16_on(void);

/* duet_sgemm (alpha 1, beta 0 or 1) in bf16 mixed precision with B built
 * already rounded (a convolution's columns, written in bf16 by im2col: no
 * float32 copy to write, read and round), compact as stored: (k, n), or
 * (n, k) when trans_b. A is held as by duet__sgemm_held_a when held_a.
 * Only while duet__gemm_bf16_on(). DUET_ENOMEM or DUET_EUNSUPPORTED
 * (message set) when the product cannot run: there is no float32 B to fall
 * back on. */
int duet__sgemm_rounded_b(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          const float *a, int64_t lda, const uint16_t *b, float beta, float *c,
                          int64_t ldc, bool held_a);

/* duet_sgemm for an A (a weight) that stays the same until this thread
 * calls duet__gemm_release_a: in bf16 mixed precision its rounded copy is
 * made once and reused (a convolution's weight is A for every column tile
 * of every sample). The float32 path is duet_sgemm's. */
void duet__sgemm_held_a(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc);
void duet__gemm_release_a(void);
int duet__bf16_check(char *impl, size_t size);

/* ---- convolutions on oneDNN's primitives (conv_onednn.c) ---------------- */

/* A 2-D convolution's sizes: x (n, c, h, w), weight (o, c, kh, kw), y (n, o,
 * oh, ow), one stride and one zero padding for both dimensions. */
typedef struct duet__conv_dims {
    int64_t n, c, h, w, o, kh, kw, oh, ow, stride, pad;
} duet__conv_dims;

/* The sizes of a conv2d call from its row params (conv.c), for the CUDA
 * kernels (cuDNN, ops_cuda.c). */
duet__conv_dims duet__conv2d_params_dims(const void *params);

/* Whether conv2d tries oneDNN's convolution primitives (conv_onednn.c)
 * before its own im2col + SGEMM: in bf16 mixed precision unless the
 * kernels' conv path is IM2COL, and in float32 when it is ONEDNN
 * (duet_conv_path). *bf16 says which precision. */
bool duet__conv_onednn_on(bool *bf16);
/* Whether the conv path is WINOGRAD (float32 3x3 stride-1 on Winograd kernels). */
bool duet__conv_winograd_on(void);

/* y = conv2d(x, w, bias) (bias may be NULL), y float32 NCHW: in float32
 * (bf16 false), or on bf16-rounded x and w with float32 sums (bf16 true,
 * only while duet__gemm_bf16_on()). *done is false (and DUET_OK returned)
 * when oneDNN has no JIT kernel for the shape, or when im2col is measured
 * faster for it: the caller runs its own path. DUET_ENOMEM or
 * DUET_EUNSUPPORTED (message set) when it fails. Uses scratch slots 0-3 and
 * 5; runs on all of duet's threads. */
int duet__conv_onednn_forward(const duet__conv_dims *d, bool bf16, const float *x, const float *w,
                              const float *bias, float *y, bool *done);
/* Its backward: dx += conv2d's input gradient for dY (when dx is not NULL),
 * dw += its weight gradient (when dw is not NULL and the shape's kernels
 * include one: in bf16, and on the Winograd kernels in float32; oneDNN's
 * direct float32 one sums too long a chain), in bf16 from rounded operands
 * (dY and w; x and dY). The bias gradient is the caller's. *dx_done and
 * *dw_done say which were computed (both false when the shape is conv.c's);
 * the status as for the forward. */
int duet__conv_onednn_backward(const duet__conv_dims *d, bool bf16, const float *x,
                               const float *w, const float *dy, float *dx, float *dw,
                               bool *dx_done, bool *dw_done);
/* Runs a small convolution in the precision (float32 on the Winograd
 * kernels when winograd) and names the implementation oneDNN chose
 * ("jit_bf16:avx512_core_bf16", "jit:avx512_common",
 * "jit_wino_4x3:avx512_core"), or says that convolutions use im2col and the
 * GEMM. */
int duet__conv_onednn_check(bool bf16, bool winograd, char *impl, size_t size);
/* For tests and benchmarks: whether convolutions may use oneDNN's (true by
 * default; false: conv.c's im2col and the GEMM, in both precisions),
 * returning the previous setting; and how many passes (forward or
 * backward) ran on oneDNN's so far. */
bool duet__conv_onednn_enable(bool on);
uint64_t duet__conv_onednn_runs(void);
/* Of those, the passes on the Winograd kernels. */
uint64_t duet__conv_onednn_winograd_runs(void);
/* For tests: the input and output bytes per oneDNN call (the calls run on
 * chunks of samples; conv_onednn.c), returning the previous value; 0
 * restores the default (16 MB). */
int64_t duet__conv_onednn_chunk_bytes(int64_t bytes);

/* Adds n to duet_kernels_gemm_flops (GEMM-equivalent work done outside
 * duet_sgemm: the oneDNN convolutions). */
void duet__gemm_count_flops(uint64_t n);

/* Per-thread scratch buffers, reused across calls so that an op does not
 * allocate its im2col columns on every call (slots 0-2: conv; 3 and 4: the
 * bf16 GEMM's rounded inputs, 5: its oneDNN scratchpad). Slot i in
 * [0, DUET__SCRATCH_SLOTS) holds at least nfloats floats (64-byte aligned,
 * uninitialised) until the next call for the same slot on this thread, which
 * may move it. NULL when out of memory (message set). Freed at thread exit. */
#define DUET__SCRATCH_SLOTS 6
float *duet__scratch(int slot, size_t nfloats);

/* Sum of n floats in eight independent double lanes: the loop vectorises
 * (one accumulator is a long dependency chain the compiler may not
 * reorder), and double keeps the total close to exact for activations of
 * millions of values. The one summation the ops use. */
static inline double duet__sum_f32(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t q = 0;
    for (; q + 8 <= n; q += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[q + l];
    double s = 0.0;
    for (; q < n; q++) s += x[q];
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

#endif
