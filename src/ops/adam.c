/* Adam's update over a list of parameter tensors (duet_adam_update): the
 * per-element step is ops_math.h's duet__adam_element, which the CUDA
 * kernel (src/ops/cuda/adam.cu) runs too; on the CPU in vectorised chunks
 * over duet's threads. */
#include "ops/ops_internal.h"

#ifdef DUET_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#include <inttypes.h>
#include <math.h>

void duet__adam_consts_make(const duet_adam_hparams *hp, int64_t step, duet__adam_consts *k) {
    /* As torch computes them in Python: bias corrections in double. */
    const double bc1 = 1.0 - pow((double)hp->beta1, (double)step);
    const double bc2 = 1.0 - pow((double)hp->beta2, (double)step);
    *k = (duet__adam_consts){.b1 = hp->beta1, .b2 = hp->beta2,
                             .w1 = (float)(1.0 - (double)hp->beta1),
                             .w2 = (float)(1.0 - (double)hp->beta2), .eps = hp->eps,
                             .wd = hp->weight_decay, .step_size = (float)((double)hp->lr / bc1),
                             .bc2_sqrt = (float)sqrt(bc2)};
}

/* Every tensor of the update on one device, shapes matching, gradients
 * present; the device into *dev. */
static int check_args(size_t n, duet_tensor *const *params, duet_tensor *const *m,
                      duet_tensor *const *v, const int64_t *steps, duet_device *dev) {
    *dev = n > 0 ? params[0]->device : duet_device_cpu();
    for (size_t i = 0; i < n; i++) {
        duet_tensor *const three[3] = {params[i], m[i], v[i]};
        duet_device d;
        DUET_TRY(duet__op_device("adam_update", "param,exp_avg,exp_avg_sq", 3, three, &d));
        if (!duet_device_equal(d, *dev)) {
            char a[DUET_DEVICE_STR_MAX], b[DUET_DEVICE_STR_MAX];
            return duet__error(DUET_EDEVICE, "adam_update: parameter %zu is on %s, parameter 0 "
                               "on %s; one update runs on one device", i,
                               duet_device_str(d, a, sizeof a), duet_device_str(*dev, b, sizeof b));
        }
        if (params[i]->numel != m[i]->numel || params[i]->numel != v[i]->numel) {
            char sp[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX], sv[DUET_SHAPE_STR_MAX];
            return duet__error(DUET_ESHAPE, "adam_update: parameter %zu is %s, its moments %s "
                               "and %s", i, duet_shape_str(params[i], sp, sizeof sp),
                               duet_shape_str(m[i], sm, sizeof sm),
                               duet_shape_str(v[i], sv, sizeof sv));
        }
        if (params[i]->grad == NULL)
            return duet__error(DUET_EINVAL, "adam_update: parameter %zu has no gradient", i);
        if (steps[i] < 1)
            return duet__error(DUET_EINVAL, "adam_update: parameter %zu at step %" PRId64
                               "; steps count from 1", i, steps[i]);
    }
    return DUET_OK;
}

/* Elements per chunk a thread takes. */
#define ADAM_CHUNK 4096

/* duet__adam_element over x[0, n) and its moments, also compiled for AVX2
 * and AVX-512 (picked at load time). It ran as one scalar square root and
 * division per element on the main thread while the other threads waited
 * (1.7% of the tiny SRGAN's step); this file is compiled with
 * -fno-math-errno (CMakeLists.txt), without which sqrtf's errno check kept
 * the loop scalar (v is never negative; a NaN stays a NaN). Vector square
 * roots and divisions round as the scalar ones and nothing is contracted
 * into an FMA (C11), so every clone gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void adam_range(float *restrict x, float *restrict m, float *restrict v,
                       const float *restrict g, const duet__adam_consts *k, int64_t n) {
    const duet__adam_consts kk = *k;
    for (int64_t j = 0; j < n; j++) duet__adam_element(&x[j], &m[j], &v[j], g[j], &kk);
}

/* One parameter's update as a row: in = (param, exp_avg, exp_avg_sq), the
 * gradient param's, no output, nothing recorded; params: its constants. */
typedef struct adam_params {
    duet__adam_consts k;
} adam_params;

static int adam_check(int nin, duet_tensor *const *in, void *params, bool record,
                      duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)in, (void)params, (void)record, (void)dev, (void)plan;
    return DUET_OK; /* duet_adam_update's check_args ran; no output */
}

static int adam_k(const duet__op_args *a) {
    const duet__adam_consts *k = &((const adam_params *)a->params)->k;
    float *x = a->in[0]->data, *m = a->in[1]->data, *v = a->in[2]->data;
    const float *g = a->in[0]->grad;
    const int64_t numel = a->in[0]->numel;
    const int64_t chunks = (numel + ADAM_CHUNK - 1) / ADAM_CHUNK;
#pragma omp parallel for num_threads(duet__par_threads(numel)) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t j0 = c * ADAM_CHUNK;
        const int64_t len = numel - j0 < ADAM_CHUNK ? numel - j0 : ADAM_CHUNK;
        adam_range(x + j0, m + j0, v + j0, g + j0, k, len);
    }
    return DUET_OK;
}

/* Adam records nothing: its backward is never run. */
static int adam_no_backward(const duet__op_args *a) {
    (void)a;
    return duet__error(DUET_ESTATE, "adam: has no backward");
}

const duet__op_def duet__op_def_adam = {
    .id = DUET__OP_ADAM,
    .inputs = "param,exp_avg,exp_avg_sq",
    .params_size = sizeof(adam_params),
    .check = adam_check,
    DUET__OP_CPU(adam_k, adam_no_backward),
};

/* On CUDA one fused kernel over the whole list (adam.cu: a list of tensors
 * is not one row call); elsewhere one row call per parameter. */
int duet_adam_update(size_t n, duet_tensor *const *params, duet_tensor *const *exp_avg,
                     duet_tensor *const *exp_avg_sq, const int64_t *steps,
                     const duet_adam_hparams *hp) {
    duet_device dev;
    DUET_TRY(check_args(n, params, exp_avg, exp_avg_sq, steps, &dev));
    if (dev.type == DUET_DEVICE_CUDA) {
#ifdef DUET_HAVE_CUDA
        return duet__cuda_adam(dev.index, n, params, exp_avg, exp_avg_sq, steps, hp);
#else
        DUET_ASSERT(!"a CUDA tensor in a build without CUDA");
#endif
    }
    for (size_t i = 0; i < n; i++) {
        adam_params p;
        duet__adam_consts_make(hp, steps[i], &p.k);
        duet_tensor *in[3] = {params[i], exp_avg[i], exp_avg_sq[i]};
        duet_tensor *none = NULL;
        DUET_TRY(duet__op_run(DUET__OP_ADAM,
                              &(duet__op_call){.nin = 3, .in = in, .nrecord = 0, .params = &p},
                              &none));
    }
    return DUET_OK;
}
