/* The CUDA kernels and library calls of the ops layer (src/ops/cuda/),
 * called by the ops' entries when their inputs are on a CUDA device, and by
 * the gpu tests. Compiled only with the toolkit (DUET_HAVE_CUDA). Every
 * launcher takes the device ordinal, runs on that device's compute stream
 * (duet__cuda_stream) and returns a duet status naming the op and the
 * failing call (cuda/cuda.h); pointers are device memory of that
 * device. Not installed. */
#ifndef DUET_OPS_CUDA_OPS_H
#define DUET_OPS_CUDA_OPS_H

#include "duet/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ops layer's private header (C, no linkage guards of its own). */
#include "ops/ops_internal.h"

/* ---- activations and losses (pointwise.cu), ops_math.h's arithmetic ----
 * (duet__cuda_act and duet__cuda_loss are ops_internal.h's.) */

/* out (n) = act(x); slope for leaky_relu. out may be x. */
int duet__cuda_act_forward(int dev, duet__cuda_act act, float *out, const float *x, float slope,
                           int64_t n);
/* gx (n) += the gradient through act of gout: relu/leaky_relu from the
 * forward's input `saved` (x > 0), sigmoid/tanh from its output. */
int duet__cuda_act_backward(int dev, duet__cuda_act act, float *gx, const float *gout,
                            const float *saved, float slope, int64_t n);

/* *sum (one double in device memory) = the sum of the loss's terms over n
 * (p the prediction or logits, t the target; tstride 1, or 0 for one
 * constant at t[0]), summed in double in a fixed order (the same result on
 * every run). */
int duet__cuda_loss_sum(int dev, duet__cuda_loss loss, double *sum, const float *p,
                        const float *t, int64_t tstride, int64_t n);
/* g (n) += c * the loss's gradient at each element (for the target: -c). */
int duet__cuda_loss_backward(int dev, duet__cuda_loss loss, float *g, const float *p,
                             const float *t, int64_t tstride, float c, int64_t n);

/* ---- element-wise (pointwise.cu) ------------------------------------------ */

/* out (n) = a + b, a - b or a * b (duet__cuda_binary is ops_internal.h's) */
int duet__cuda_binary_forward(int dev, duet__cuda_binary op, float *out, const float *a,
                              const float *b, int64_t n);
/* g (n) += scale * gout, or g += gout * other when other is not NULL; `op`
 * names the caller. */
int duet__cuda_grad_accumulate(int dev, const char *op, float *g, const float *gout,
                               const float *other, float scale, int64_t n);
/* out (n) = scale * x */
int duet__cuda_scale_forward(int dev, float *out, const float *x, float scale, int64_t n);

/* *sum (one double on the device) = the sum of x (n), in double, in a fixed
 * order. */
int duet__cuda_sum(int dev, const char *op, double *sum, const float *x, int64_t n);
/* g (n) += s */
int duet__cuda_add_scalar(int dev, const char *op, float *g, float s, int64_t n);
/* y (rows, cols) = b (cols) on every row */
int duet__cuda_broadcast_rows(int dev, const char *op, float *y, const float *b, int64_t rows,
                              int64_t cols);
/* db (cols) += dy (rows, cols) summed over its rows, in row order */
int duet__cuda_col_sum_acc(int dev, const char *op, float *db, const float *dy, int64_t rows,
                           int64_t cols);

/* ---- Adam (adam.cu) ------------------------------------------------------- */

/* duet_adam_update on device dev: one kernel over every tensor's chunks. */
int duet__cuda_adam(int dev, size_t n, duet_tensor *const *params, duet_tensor *const *exp_avg,
                    duet_tensor *const *exp_avg_sq, const int64_t *steps,
                    const duet_adam_hparams *hp);

/* ---- GEMM (gemm.c) -------------------------------------------------------- */

/* duet_sgemm on device dev through cuBLASLt, row-major as duet_sgemm: C (m,
 * n) = alpha op(A) op(B) + beta C, float32 with float32 accumulation and no
 * TF32 (exact float32 products, as the CPU's), unless
 * duet__cuda_gemm_allow_tf32(true). The workspace comes from the caching
 * allocator. `op` names the caller for messages. */
int duet__cuda_sgemm(int dev, const char *op, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc);
/* Whether GEMMs may use TF32 tensor cores (PyTorch's allow_tf32); returns
 * the previous setting. Off by default. */
bool duet__cuda_gemm_allow_tf32(bool on);

/* ---- convolutions (conv.c) on cuDNN ------------------------------------- */

/* y = conv2d(x, w) + bias (bias may be NULL), sizes as duet__conv_dims
 * (ops_internal.h): x (n, c, h, w), w (o, c, kh, kw), y (n, o, oh, ow).
 * float32, TF32 off. Algorithms chosen once per shape and cached. */
int duet__cuda_conv2d_forward(int dev, const duet__conv_dims *d, const float *x, const float *w,
                              const float *bias, float *y);
/* dx += the input gradient (when dx), dw += the weight gradient (when dw),
 * db += dy summed over n, oh, ow (when db). */
int duet__cuda_conv2d_backward(int dev, const duet__conv_dims *d, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db);
/* Shapes whose algorithms were chosen so far (each once). */
uint64_t duet__cuda_conv_algo_searches(void);

#ifdef __cplusplus
}
#endif
#endif
