/* duet/nn.h — modules (a tree of named children with parameters and buffers
 * under dotted PyTorch names), layers, initialisation, optimizers and LR
 * schedules.
 *
 * Usage:
 *
 *   duet_rng rng = duet_rng_make(0, 0);
 *   duet_module *net = NULL, *conv = NULL;
 *   DUET_TRY(duet_sequential_create(&net));
 *   DUET_TRY(duet_conv2d_module_create(3, 64, 3, 1, 1, true, &rng, &conv));
 *   DUET_TRY(duet_module_add_child(net, "0", conv));   // net owns conv now
 *                                                      // names: 0.weight, 0.bias
 *   duet_named_tensors ps;                             // optimise what trains
 *   DUET_TRY(duet_module_named_parameters(net, true, &ps));
 *   duet_optimizer *opt = NULL;
 *   DUET_TRY(duet_adam_create(&ps, NULL, &opt));
 *   duet_lr_schedule sched = duet_lr_schedule_default();
 *   for (int64_t iter = 0; iter < iters; iter++) {
 *       duet_optimizer_set_lr(opt, duet_lr_at(&sched, duet_optimizer_base_lr(opt), iter));
 *       duet_optimizer_zero_grad(opt);
 *       duet_tensor *y = NULL, *loss = NULL;
 *       DUET_TRY(duet_module_forward(net, x, &y));
 *       DUET_TRY(duet_mse_loss(y, target, 1.0f, &loss));
 *       DUET_TRY(duet_backward(loss));
 *       duet_tensor_release(y); duet_tensor_release(loss);
 *       DUET_TRY(duet_optimizer_step(opt));
 *   }
 *   duet_optimizer_destroy(opt);
 *   duet_named_tensors_clear(&ps);
 *   duet_module_destroy(net);
 */
#ifndef DUET_NN_H
#define DUET_NN_H

#include "duet/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- modules -------------------------------------------------------------- */

typedef struct duet_module duet_module;

/* What a module type provides. forward takes n borrowed inputs and returns
 * one new tensor (most layers take one input; losses take (pred, target)). */
typedef struct duet_module_type {
    const char *name; /* "Conv2d", "MSRResNet", ... */
    int (*forward)(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out);
    /* Frees `impl` (not the parameters, buffers or children). May be NULL. */
    void (*destroy)(void *impl);
} duet_module_type;


/* New empty module in training mode. impl is owned from now on (freed with
 * type->destroy, also when this fails). Free with duet_module_destroy. */
int duet_module_create(const duet_module_type *type, void *impl, duet_module **out);
/* Destroys children recursively and releases parameters and buffers. NULL ok. */
void duet_module_destroy(duet_module *m);

/* Registration, in order. The module takes over one reference of t (also on
 * failure). Names must be unique within the module (across parameters,
 * buffers and children) and contain no '.'. add_param sets
 * t->requires_grad = true, as nn.Parameter does. */
int duet_module_add_param(duet_module *m, const char *name, duet_tensor *t);
int duet_module_add_buffer(duet_module *m, const char *name, duet_tensor *t, bool is_integer);
/* The module takes ownership of child (destroyed on failure). */
int duet_module_add_child(duet_module *m, const char *name, duet_module *child);
/* Borrowed, or NULL. */
duet_module *duet_module_child(const duet_module *m, const char *name);
duet_tensor *duet_module_param(const duet_module *m, const char *name);
duet_tensor *duet_module_buffer(const duet_module *m, const char *name);
/* Puts `replacement` in place of child `name` and hands the old child back
 * to the caller in *old (ownership moves both ways). On failure
 * (DUET_ENOTFOUND) nothing moves: the caller keeps `replacement`. */
int duet_module_replace_child(duet_module *m, const char *name, duet_module *replacement,
                              duet_module **old);

/* Accessors: code outside src/nn/module.c reads a module only through
 * these (the struct's layout is not part of the API). */
/* The state the module's type gave duet_module_create. */
void *duet_module_impl(const duet_module *m);
/* "Conv2d", "MSRResNet", ... */
const char *duet_module_type_name(const duet_module *m);
bool duet_module_is_training(const duet_module *m);
/* Direct children, in registration order; i < duet_module_child_count(m).
 * Borrowed. */
size_t duet_module_child_count(const duet_module *m);
duet_module *duet_module_child_at(const duet_module *m, size_t i);
const char *duet_module_child_name_at(const duet_module *m, size_t i);
/* Exchanges the modules of children i and j, each keeping its name (a model
 * putting a network's moving average in its place). */
void duet_module_swap_children(duet_module *m, size_t i, size_t j);
/* The type the module was created with (borrowed, static). */
const duet_module_type *duet_module_get_type(const duet_module *m);
/* The module's own parameters and buffers (not its children's), in
 * registration order; i below the count. Borrowed. */
size_t duet_module_param_count(const duet_module *m);
duet_tensor *duet_module_param_at(const duet_module *m, size_t i);
const char *duet_module_param_name_at(const duet_module *m, size_t i);
size_t duet_module_buffer_count(const duet_module *m);
duet_tensor *duet_module_buffer_at(const duet_module *m, size_t i);
const char *duet_module_buffer_name_at(const duet_module *m, size_t i);
/* A count (num_batches_tracked), stored as I64 in files. */
bool duet_module_buffer_is_integer_at(const duet_module *m, size_t i);
/* A transparent module (a DDP around a child) adds no component to the
 * dotted names below it: "generator.module.conv.weight" reads
 * "generator.conv.weight". */
void duet_module_set_transparent(duet_module *m, bool transparent);

int duet_module_forward(duet_module *m, duet_tensor *x, duet_tensor **out);
int duet_module_forward2(duet_module *m, duet_tensor *a, duet_tensor *b, duet_tensor **out);
int duet_module_forwardn(duet_module *m, int nin, duet_tensor *const *in, duet_tensor **out);

/* A flat list of (dotted name, tensor): parameters or buffers of a subtree in
 * PyTorch order (a module's own entries, then each child's, depth first). */
typedef struct duet_named_tensor {
    char *name;          /* owned by the list */
    duet_tensor *tensor; /* borrowed from the module */
    bool is_integer;
} duet_named_tensor;
typedef struct duet_named_tensors {
    size_t count;
    duet_named_tensor *items;
} duet_named_tensors;

/* trainable_only: only parameters with requires_grad. Free with
 * duet_named_tensors_clear. */
int duet_module_named_parameters(duet_module *m, bool trainable_only, duet_named_tensors *out);
int duet_module_named_buffers(duet_module *m, duet_named_tensors *out);
/* The state dict, in PyTorch's order: each module's own parameters, then
 * its own buffers, then its children's entries depth first. */
int duet_module_state(duet_module *m, duet_named_tensors *out);
/* module.to(device): every parameter and buffer of the subtree moves to dev
 * in place (duet_tensor_move_to: the tensors keep their identity, so
 * optimizers made before still hold them). Before training and before a
 * DDP wraps the module. Errors name the entry; entries moved before a
 * failure stay moved. */
int duet_module_to_device(duet_module *m, duet_device dev);
void duet_named_tensors_clear(duet_named_tensors *l);
int64_t duet_module_num_parameters(duet_module *m, bool trainable_only);

/* MMEditing's set_requires_grad: every parameter of the subtree. */
void duet_module_set_requires_grad(duet_module *m, bool requires_grad);
/* Recursive train/eval mode. */
void duet_module_train(duet_module *m, bool training);
/* Zeroes the gradients of every parameter of the subtree. */
void duet_module_zero_grad(duet_module *m);

/* Adds the state dict under `prefix` ("generator." or "") to a writer.
 * Float entries are F32; integer buffers (num_batches_tracked) are 0-dim
 * I64, as in PyTorch state dicts. */
int duet_module_save_state(duet_module *m, duet_st_writer *w, const char *prefix);
/* Loads entries "prefix<name>" into the module. strict: missing or
 * unexpected keys (under prefix) and shape mismatches fail and are listed;
 * non-strict: shape mismatches still fail, missing and unexpected keys are
 * reported through duet_log at WARN level and counted in *nmissing and
 * *nunexpected (either may be NULL). Everything is checked before anything
 * is copied: a failing load leaves the module unchanged. Integer buffers
 * accept a one-value entry of any shape ([] or [1]) and dtype. */
int duet_module_load_state(duet_module *m, const duet_st *st, const char *prefix, bool strict,
                           size_t *nmissing, size_t *nunexpected);

/* ---- layers ---------------------------------------------------------------- */

/* PyTorch default init: kaiming_uniform(a=sqrt(5)) weights, bias uniform in
 * +-1/sqrt(fan_in). Params: weight (O, C, K, K), bias (O). */
int duet_conv2d_module_create(int in_channels, int out_channels, int kernel, int stride,
                              int padding, bool bias, duet_rng *rng, duet_module **out);
/* The settings an exporter needs beyond a layer's tensors, for the layer
 * types that have any: Conv2d (stride, padding), ConvTranspose2d (stride,
 * padding, output_padding),
 * ReflectionPad2d (padding), BatchNorm2d and InstanceNorm2d (eps; affine
 * for InstanceNorm2d), LeakyReLU (negative_slope), Dropout (p). Fields a
 * type lacks are 0. DUET_EINVAL naming the type for any other module. */
typedef struct duet_layer_settings {
    int stride, padding, output_padding;
    float eps, negative_slope, p;
    bool affine;
} duet_layer_settings;
int duet_layer_settings_of(const duet_module *m, duet_layer_settings *s);
/* Conv2d under torch.nn.utils.spectral_norm (mmcv's ConvModule with
 * with_spectral_norm=True), PyTorch's names: params bias (O) and
 * weight_orig (O, C, K, K) with Conv2d's init, buffers weight_u (O) and
 * weight_v (C*K*K) drawn N(0, 1) and normalised. Each forward convolves
 * with duet_spectral_norm(weight_orig), one power iteration updating
 * weight_u/weight_v in training mode only. */
int duet_sn_conv2d_module_create(int in_channels, int out_channels, int kernel, int stride,
                                 int padding, bool bias, float eps, duet_rng *rng,
                                 duet_module **out);
/* Linear under spectral_norm (MMEditing's LinearModule with
 * with_spectral_norm=True), the same way: params bias (OUT) and weight_orig
 * (OUT, IN) with Linear's init, buffers weight_u (OUT) and weight_v (IN). */
int duet_sn_linear_module_create(int in_features, int out_features, bool bias, float eps,
                                 duet_rng *rng, duet_module **out);
/* Params: weight (OUT, IN), bias (OUT). */
int duet_linear_module_create(int in_features, int out_features, bool bias, duet_rng *rng,
                              duet_module **out);
/* Params weight = 1, bias = 0 (C); buffers running_mean, running_var,
 * num_batches_tracked (integer). */
int duet_batch_norm2d_module_create(int channels, float eps, float momentum, duet_module **out);
/* Plugs a cross-process sum of the batch statistics into a BatchNorm2d
 * (SyncBatchNorm); fn NULL goes back to local statistics. ctx is borrowed
 * and must outlive its use. DUET_EINVAL when bn is not a BatchNorm2d. */
int duet_batch_norm2d_set_reduce(duet_module *bn, duet_reduce_fn fn, void *ctx);
/* Children are added with duet_module_add_child, named "0", "1", ...; forward
 * runs them in order. */
int duet_sequential_create(duet_module **out);
/* Appends a child named by its index. */
int duet_sequential_append(duet_module *seq, duet_module *child);

typedef enum duet_activation {
    DUET_ACT_RELU,
    DUET_ACT_LEAKY_RELU,
    DUET_ACT_SIGMOID,
    DUET_ACT_TANH,
    DUET_ACT_ELU /* nn.ELU(alpha=1), mmcv's act_cfg=dict(type='ELU') */
} duet_activation;
/* negative_slope is LeakyReLU's; the others ignore it. */
int duet_activation_module_create(duet_activation kind, float negative_slope, duet_module **out);
/* MaxPool2d(kernel, stride); no parameters. */
int duet_max_pool2d_module_create(int kernel, int stride, duet_module **out);

/* Type checks ("Conv2d", "Linear", "BatchNorm2d", "Sequential", "ReLU",
 * "LeakyReLU", "Sigmoid", "Tanh", "ELU", "MaxPool2d", ...). */
bool duet_module_is(const duet_module *m, const char *type_name);

/* MMEditing's default_init_weights(module, scale): for every Conv2d and
 * Linear in the subtree, kaiming_normal (a=0, fan_in, leaky_relu gain
 * sqrt(2)) times scale, bias 0; BatchNorm weight 1, bias 0. The draws are
 * made on the host and copied to a device tensor; DUET_EDEVICE when that
 * copy fails (never on the CPU). */
int duet_default_init_weights(duet_module *m, float scale, duet_rng *rng);

/* ---- image-to-image GAN layers (Pix2Pix, CycleGAN) ------------------------ */

/* nn.ConvTranspose2d: params weight (IN, OUT, K, K), bias (OUT); PyTorch's
 * default init (bound 1/sqrt(OUT*K*K) for both). output_padding < stride. */
int duet_conv_transpose2d_module_create(int in_channels, int out_channels, int kernel,
                                        int stride, int padding, int output_padding, bool bias,
                                        duet_rng *rng, duet_module **out);
/* nn.InstanceNorm2d(channels, eps, affine) with track_running_stats=False
 * (MMEditing's 'IN'): no buffers; affine adds weight = 1, bias = 0 (C). */
int duet_instance_norm2d_module_create(int channels, float eps, bool affine, duet_module **out);
/* nn.ReflectionPad2d(padding) on all four sides; no parameters. */
int duet_reflection_pad2d_module_create(int padding, duet_module **out);
/* nn.Dropout(p): active in training mode. rng is borrowed (it must outlive
 * the module) and advanced by each training forward; its owner saves and
 * restores it to make resumed runs drop the same elements. */
int duet_dropout_module_create(float p, duet_rng *rng, duet_module **out);
/* MMEditing's generation_init_weights(init_type='normal', init_gain=gain):
 * Conv2d, ConvTranspose2d and Linear weights N(0, gain), biases 0;
 * BatchNorm2d weight N(1, gain), bias 0; others untouched. Status as
 * duet_default_init_weights'. */
int duet_generation_init_weights(duet_module *m, float gain, duet_rng *rng);

/* ---- optimizers ---------------------------------------------------------- */

typedef struct duet_optimizer duet_optimizer;

typedef struct duet_adam_opts {
    float lr, beta1, beta2, eps, weight_decay;
} duet_adam_opts;
duet_adam_opts duet_adam_opts_default(void); /* 1e-3, 0.9, 0.999, 1e-8, 0 */

typedef struct duet_sgd_opts {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
} duet_sgd_opts;
duet_sgd_opts duet_sgd_opts_default(void);

/* The optimizer keeps borrowed pointers to the tensors in params (copying the
 * list); the tensors must outlive it. Free with duet_optimizer_destroy. */
/* opts NULL: the defaults above. */
int duet_adam_create(const duet_named_tensors *params, const duet_adam_opts *opts,
                     duet_optimizer **out);
int duet_sgd_create(const duet_named_tensors *params, const duet_sgd_opts *opts,
                    duet_optimizer **out);
void duet_optimizer_destroy(duet_optimizer *opt);
/* One update from the current gradients. Parameters with no gradient
 * (grad NULL) or with requires_grad false are skipped and keep their state,
 * as PyTorch skips parameters whose .grad is None. Adam follows
 * torch.optim.Adam (L2 weight_decay added to the gradient, bias correction
 * per parameter step, eps added after sqrt(v_hat)); SGD follows
 * torch.optim.SGD (the momentum buffer starts as the first gradient). */
int duet_optimizer_step(duet_optimizer *opt);
void duet_optimizer_zero_grad(duet_optimizer *opt);
float duet_optimizer_lr(const duet_optimizer *opt);
void duet_optimizer_set_lr(duet_optimizer *opt, float lr);
/* The lr given at creation (schedules scale it). */
float duet_optimizer_base_lr(const duet_optimizer *opt);
int64_t duet_optimizer_steps(const duet_optimizer *opt);
/* State as tensors: prefix + "step" (0-dim I64, the number of step calls),
 * prefix + "lr" (F32 [1], the current lr); Adam: prefix + "<param>.step"
 * (0-dim I64, that parameter's own count), "<param>.exp_avg",
 * "<param>.exp_avg_sq" for every parameter; SGD: "<param>.momentum_buffer"
 * for each parameter that has one. Loading needs the same parameter names
 * and shapes; it fails without changing the optimizer when an entry is
 * missing or misshapen. A restored optimizer continues bit-identically. */
int duet_optimizer_save_state(const duet_optimizer *opt, duet_st_writer *w, const char *prefix);
int duet_optimizer_load_state(duet_optimizer *opt, const duet_st *st, const char *prefix);

/* ---- LR schedules (MMEditing's lr_config, by iteration) ----------------- */

typedef enum duet_lr_policy {
    DUET_LR_FIXED,
    DUET_LR_STEP,           /* lr = base * gamma^(number of milestones <= iter), >= min_lr */
    DUET_LR_COSINE_RESTART, /* periods, restart_weights, min_lr or min_lr_ratio */
    DUET_LR_LINEAR          /* MMEditing's LinearLrUpdaterHook: target_lr, start, interval */
} duet_lr_policy;

/* mmcv's warmup (LrUpdaterHook's warmup, warmup_iters, warmup_ratio):
 * for iter < warmup_iters the regular lr times a factor. */
typedef enum duet_lr_warmup {
    DUET_LR_WARMUP_NONE,
    DUET_LR_WARMUP_CONSTANT, /* ratio */
    DUET_LR_WARMUP_LINEAR,   /* 1 - (1 - iter / warmup_iters) * (1 - ratio) */
    DUET_LR_WARMUP_EXP       /* ratio^(1 - iter / warmup_iters) */
} duet_lr_warmup;

#define DUET_LR_MAX_STEPS 16
typedef struct duet_lr_schedule {
    duet_lr_policy policy;
    int nsteps;
    int64_t steps[DUET_LR_MAX_STEPS]; /* STEP: milestones; COSINE: periods */
    float gamma;                       /* STEP */
    int64_t step_every; /* STEP: > 0 for mmcv's `step = N` (an int): lr drops every N */
    float restart_weights[DUET_LR_MAX_STEPS]; /* COSINE */
    float min_lr;       /* COSINE: the end of each period; STEP: the floor (0: none) */
    float min_lr_ratio; /* COSINE: when >= 0, the end is base * min_lr_ratio (mmcv's
                           min_lr_ratio, which wins over min_lr); < 0: unset */
    float target_lr;    /* LINEAR: the lr at max_iters */
    int64_t start;      /* LINEAR: the lr stays at base up to here */
    int64_t interval;   /* LINEAR: the lr changes every interval iterations (>= 1) */
    int64_t max_iters;  /* LINEAR: the run's total_iters (mmcv's runner.max_iters) */
    duet_lr_warmup warmup;
    int64_t warmup_iters;
    float warmup_ratio;
} duet_lr_schedule;
duet_lr_schedule duet_lr_schedule_default(void); /* FIXED, no warmup */
/* DUET_ECONFIG with a message unless the schedule is usable: nsteps in
 * 0..DUET_LR_MAX_STEPS, STEP milestones ascending and >= 0, COSINE_RESTART
 * with at least one period, all positive, LINEAR with interval >= 1 and
 * 0 <= start <= max_iters, a warmup with warmup_iters >= 1. */
int duet_lr_schedule_check(const duet_lr_schedule *s);
/* The lr for iteration `iter` (0-based, as MMEditing's runner.iter).
 * COSINE_RESTART (mmcv's CosineRestartLrUpdaterHook): in period i (the
 * first whose cumulative end is > iter), alpha = (iter - start_i) / period_i
 * and lr = end + 0.5 * restart_weights[i] * (base - end) *
 * (1 + cos(pi * alpha)), end = min_lr (or base * min_lr_ratio); past the
 * last period it stays at end (mmcv raises there). LINEAR (MMEditing's
 * LinearLrUpdaterHook): factor = (max(0, iter - start) / interval) /
 * ((max_iters - start) / interval), integer divisions, and lr = base +
 * (target_lr - base) * factor. A warmup then scales the result for iter <
 * warmup_iters. A schedule failing duet_lr_schedule_check gives base_lr. */
float duet_lr_at(const duet_lr_schedule *s, float base_lr, int64_t iter);

#ifdef __cplusplus
}
#endif
#endif
