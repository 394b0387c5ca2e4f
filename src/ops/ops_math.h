/* Per-element arithmetic written once for the CPU loops and the CUDA
 * kernels (docs/architecture.md, "Devices"): each function is `static
 * inline DUET_HD`, so gcc inlines it into the ops' loops and nvcc into
 * src/ops/cuda/'s kernels, and the CPU tests (gradient checks, PyTorch
 * references) cover the math the GPU runs. C and C++ (nvcc) both read this
 * header; it needs nothing but <math.h>. Not installed.
 *
 * On the GPU, expf/tanhf/log1pf are CUDA's (within 2 ulp of the CPU's) and
 * nvcc may fuse a multiply and an add: GPU results match the CPU's to
 * rounding, not bit for bit. */
#ifndef DUET_OPS_MATH_H
#define DUET_OPS_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DUET_HD __host__ __device__
#else
#define DUET_HD
#endif

/* c ? a : b, the chosen value's bits as they are. On the CPU without a
 * branch (GCC compiles ?: between floats into jumps that mispredict on
 * activations of random sign; a bit mask does not and vectorises); on the
 * GPU a select. */
static inline DUET_HD float duet__pick(bool c, float a, float b) {
#if defined(__CUDA_ARCH__)
    return c ? a : b;
#else
    uint32_t ua, ub, r;
    float f;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint32_t m = -(uint32_t)c;
    r = (ua & m) | (ub & ~m);
    memcpy(&f, &r, sizeof f);
    return f;
#endif
}

/* ---- activations --------------------------------------------------------- */

/* max(x, 0), NaN passing through as in PyTorch */
static inline DUET_HD float duet__relu(float x) { return duet__pick(x < 0.0f, 0.0f, x); }

/* x > 0 ? x : slope * x */
static inline DUET_HD float duet__leaky_relu(float x, float slope) {
    return duet__pick(x > 0.0f, x, slope * x);
}

/* The gradient through relu (slope 0) or leaky_relu: g where the input
 * was positive, slope * g elsewhere (relu adds +0 there). */
static inline DUET_HD float duet__leaky_relu_grad(float g, bool positive, float slope) {
    return duet__pick(positive, g, slope * g);
}

/* 1 / (1 + exp(-x)) without overflow for large |x| */
static inline DUET_HD float duet__sigmoid(float x) {
    const float e = expf(-fabsf(x)); /* in (0, 1] */
    const float p = 1.0f / (1.0f + e);
    return duet__pick(x >= 0.0f, p, e * p);
}

/* d sigmoid: g * y * (1 - y), y the forward's output */
static inline DUET_HD float duet__sigmoid_grad(float g, float y) { return g * y * (1.0f - y); }

static inline DUET_HD float duet__tanh(float x) { return tanhf(x); }

/* ELU: x where x > 0, else alpha * (exp(x) - 1) (expm1 keeps small |x| exact) */
static inline DUET_HD float duet__elu(float x, float alpha) {
    return duet__pick(x > 0.0f, x, alpha * expm1f(x));
}

/* d ELU from the output: g where y > 0 (exactly where x > 0 for alpha > 0),
 * else g * (y + alpha) = g * alpha * exp(x) */
static inline DUET_HD float duet__elu_grad(float g, float y, float alpha) {
    return duet__pick(y > 0.0f, g, g * (y + alpha));
}

/* d tanh: g * (1 - y^2), y the forward's output */
static inline DUET_HD float duet__tanh_grad(float g, float y) { return g * (1.0f - y * y); }

/* ---- losses' terms (mean reduction is the caller's) ----------------------- */

static inline DUET_HD float duet__l1_term(float p, float t) { return fabsf(p - t); }

static inline DUET_HD float duet__mse_term(float p, float t) {
    const float d = p - t;
    return d * d;
}

/* c * sign(p - t), sign(0) = 0 as torch.sign */
static inline DUET_HD float duet__l1_grad(float p, float t, float c) {
    const float d = p - t;
    return c * (float)((d > 0.0f) - (d < 0.0f));
}

/* c * (p - t) */
static inline DUET_HD float duet__mse_grad(float p, float t, float c) { return c * (p - t); }

/* Stable BCE with logits: max(x, 0) - x * t + log1p(exp(-|x|)) */
static inline DUET_HD float duet__bce_logits_term(float x, float t) {
    return duet__pick(x > 0.0f, x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
}

/* c * (sigmoid(x) - t) */
static inline DUET_HD float duet__bce_logits_grad(float x, float t, float c) {
    return c * (duet__sigmoid(x) - t);
}

/* ---- Adam (torch.optim.Adam, one element) --------------------------------- */

/* One tensor's constants for a step: the betas, 1 - beta (rounded to float
 * from double, as torch), eps, weight decay, lr / (1 - beta1^step) and
 * sqrt(1 - beta2^step) (bias corrections computed in double, then float). */
typedef struct duet__adam_consts {
    float b1, b2, w1, w2, eps, wd, step_size, bc2_sqrt;
} duet__adam_consts;

/* g += wd * x; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * x -= step_size * m / (sqrt(v) / bc2_sqrt + eps) */
static inline DUET_HD void duet__adam_element(float *x, float *m, float *v, float g,
                                             const duet__adam_consts *k) {
    const float gj = k->wd != 0.0f ? g + k->wd * *x : g;
    *m = *m * k->b1 + k->w1 * gj;
    *v = *v * k->b2 + k->w2 * gj * gj;
    const float denom = sqrtf(*v) / k->bc2_sqrt + k->eps;
    *x = *x - k->step_size * (*m / denom);
}

#endif
