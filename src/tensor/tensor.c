/* Tensor creation, views, reference counting, gradient storage, and where
 * the data is (devices and the copies between them). CPU storage is
 * duet_aligned_alloc's; device storage is the device's caching allocator's
 * (duet__device_alloc: CUDA's, or sim:N's arena, whose addresses the host
 * cannot dereference). */
#include "duet/tensor.h"

#include <inttypes.h>
#include <string.h>

static int check_shape(int ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 1 || ndim > DUET_MAX_DIMS)
        return duet__error(DUET_EINVAL, "tensor: %d dimensions requested; duet supports 1 to %d",
                           ndim, DUET_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return duet__error(DUET_EINVAL, "tensor: dimension %d has size %" PRId64
                               "; every dimension must be at least 1", i, shape[i]);
        if (n > INT64_MAX / shape[i])
            return duet__error(DUET_EINVAL, "tensor: shape overflows 64-bit element count");
        n *= shape[i];
    }
    *numel = n;
    return DUET_OK;
}

static duet_tensor *alloc_header(int ndim, const int64_t *shape, int64_t numel) {
    duet_tensor *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->ndim = ndim;
    for (int i = 0; i < DUET_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    t->numel = numel;
    t->refcount = 1;
    return t;
}

/* numel floats for t on t->device: on the CPU duet_aligned_alloc/calloc (the
 * messages name the floats), elsewhere the device's allocator. */
static int alloc_storage(const duet_tensor *t, bool zero, const char *what, float **out) {
    if (t->device.type == DUET_DEVICE_CPU) {
        *out = zero ? duet_aligned_calloc((size_t)t->numel * sizeof(float))
                    : duet_aligned_alloc((size_t)t->numel * sizeof(float));
        if (*out == NULL)
            return duet__error(DUET_ENOMEM, "tensor: out of memory for %s%" PRId64 " floats",
                               what, t->numel);
        return DUET_OK;
    }
    void *p = NULL;
    DUET_TRY(duet__device_alloc(t->device, (size_t)t->numel * sizeof(float), zero, "tensor", &p));
    *out = p;
    return DUET_OK;
}

static int create_on(duet_device dev, int ndim, const int64_t *shape, bool zero,
                     duet_tensor **out) {
    *out = NULL;
    int64_t numel = 0;
    DUET_TRY(check_shape(ndim, shape, &numel));
    if (dev.type != DUET_DEVICE_CPU) DUET_TRY(duet_device_check(dev));
    duet_tensor *t = alloc_header(ndim, shape, numel);
    if (t == NULL) return duet__error(DUET_ENOMEM, "tensor: out of memory for the header");
    t->device = dev;
    int rc = alloc_storage(t, zero, "", &t->data);
    if (rc != DUET_OK) {
        free(t);
        return rc;
    }
    t->owns_data = true;
    *out = t;
    return DUET_OK;
}

int duet_tensor_create(int ndim, const int64_t *shape, duet_tensor **out) {
    return create_on(duet_device_cpu(), ndim, shape, true, out);
}

int duet_tensor_create_uninit(int ndim, const int64_t *shape, duet_tensor **out) {
    return create_on(duet_device_cpu(), ndim, shape, false, out);
}

int duet_tensor_create_on(duet_device dev, int ndim, const int64_t *shape, duet_tensor **out) {
    return create_on(dev, ndim, shape, true, out);
}

int duet_tensor_create4(int64_t n, int64_t c, int64_t h, int64_t w, duet_tensor **out) {
    return duet_tensor_create(4, (int64_t[]){n, c, h, w}, out);
}

int duet_tensor_create_like(const duet_tensor *like, duet_tensor **out) {
    return create_on(like->device, like->ndim, like->shape, true, out);
}

int duet_tensor_from_data(int ndim, const int64_t *shape, const float *data, duet_tensor **out) {
    DUET_TRY(duet_tensor_create(ndim, shape, out));
    memcpy((*out)->data, data, (size_t)(*out)->numel * sizeof(float));
    return DUET_OK;
}

int duet_tensor_clone(const duet_tensor *t, duet_tensor **out) {
    if (t->device.type == DUET_DEVICE_CPU)
        return duet_tensor_from_data(t->ndim, t->shape, t->data, out);
    return duet_tensor_to(t, t->device, out);
}

duet_device duet_tensor_device(const duet_tensor *t) { return t->device; }

float *duet_tensor_data_on(duet_tensor *t, duet_device dev) {
    return duet_device_equal(t->device, dev) ? t->data : NULL;
}

float *duet_tensor_host_data(duet_tensor *t) {
    return duet_tensor_data_on(t, duet_device_cpu());
}

int duet_tensor_to(const duet_tensor *t, duet_device dev, duet_tensor **out) {
    duet_tensor *c = NULL;
    DUET_TRY(create_on(dev, t->ndim, t->shape, false, &c));
    int rc = duet__device_copy(dev, c->data, t->device, t->data,
                               (size_t)t->numel * sizeof(float), "tensor copy");
    if (rc != DUET_OK) {
        duet_tensor_release(c);
        *out = NULL;
        return rc;
    }
    *out = c;
    return DUET_OK;
}

int duet_tensor_copy_to_host(const duet_tensor *t, float *dst) {
    return duet__device_copy(duet_device_cpu(), dst, t->device, t->data,
                             (size_t)t->numel * sizeof(float), "tensor copy to the host");
}

int duet_tensor_copy_from_host(duet_tensor *t, const float *src) {
    return duet__device_copy(t->device, t->data, duet_device_cpu(), src,
                             (size_t)t->numel * sizeof(float), "tensor copy from the host");
}

int duet_tensor_copy(duet_tensor *dst, const duet_tensor *src) {
    if (dst->numel != src->numel) {
        char a[DUET_SHAPE_STR_MAX], b[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "tensor copy: source %s and destination %s differ in "
                           "size", duet_shape_str(src, a, sizeof a),
                           duet_shape_str(dst, b, sizeof b));
    }
    return duet__device_copy(dst->device, dst->data, src->device, src->data,
                             (size_t)src->numel * sizeof(float), "tensor copy");
}

static int make_view(duet_tensor **out, duet_tensor *t, int ndim, const int64_t *shape,
                     float *data) {
    int64_t numel = 0;
    *out = NULL;
    DUET_TRY(check_shape(ndim, shape, &numel));
    duet_tensor *v = alloc_header(ndim, shape, numel);
    if (v == NULL) return duet__error(DUET_ENOMEM, "tensor: out of memory for a view");
    v->data = data;
    v->device = t->device;
    v->owns_data = false;
    v->base = duet_tensor_retain(t->base != NULL ? t->base : t);
    *out = v;
    return DUET_OK;
}

int duet_tensor_view(duet_tensor *t, int ndim, const int64_t *shape, duet_tensor **out) {
    int64_t numel = 1;
    for (int i = 0; i < ndim && i < DUET_MAX_DIMS; i++) numel *= shape[i];
    if (ndim >= 1 && ndim <= DUET_MAX_DIMS && numel != t->numel) {
        char a[DUET_SHAPE_STR_MAX];
        *out = NULL;
        return duet__error(DUET_ESHAPE, "tensor view: %s has %" PRId64
                           " elements, the requested shape has %" PRId64,
                           duet_shape_str(t, a, sizeof a), t->numel, numel);
    }
    return make_view(out, t, ndim, shape, t->data);
}

int duet_tensor_slice0(duet_tensor *t, int64_t start, int64_t count, duet_tensor **out) {
    if (start < 0 || count < 1 || start + count > t->shape[0]) {
        *out = NULL;
        return duet__error(DUET_EINVAL, "tensor slice: samples [%" PRId64 ", %" PRId64
                           ") outside a batch of %" PRId64, start, start + count, t->shape[0]);
    }
    int64_t shape[DUET_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = count;
    int64_t per = t->numel / t->shape[0];
    return make_view(out, t, t->ndim, shape, t->data + start * per);
}

duet_tensor *duet_tensor_retain(duet_tensor *t) {
    if (t != NULL) t->refcount++;
    return t;
}

void duet_tensor_release(duet_tensor *t) {
    if (t == NULL) return;
    DUET_ASSERT(t->refcount > 0);
    if (--t->refcount > 0) return;
    if (t->owns_data) duet__device_free(t->device, t->data);
    if (t->owns_grad) duet__device_free(t->device, t->grad);
    duet_tensor_release(t->base);
    free(t);
}

int duet_tensor_ensure_grad(duet_tensor *t) {
    if (t->grad != NULL) return DUET_OK;
    DUET_TRY(alloc_storage(t, true, "a gradient of ", &t->grad));
    t->owns_grad = true;
    return DUET_OK;
}

int duet_tensor_set_grad_storage(duet_tensor *t, float *storage) {
    if (t->grad != NULL) {
        /* On a device the copy is queued before the old storage's free. */
        DUET_TRY(duet__device_copy(t->device, storage, t->device, t->grad,
                                   (size_t)t->numel * sizeof(float), "gradient storage"));
        if (t->owns_grad) duet__device_free(t->device, t->grad);
    }
    t->grad = storage;
    t->owns_grad = false;
    return DUET_OK;
}

int duet_tensor_own_grad(duet_tensor *t) {
    if (t->grad == NULL || t->owns_grad) return DUET_OK;
    float *g = NULL;
    DUET_TRY(alloc_storage(t, false, "a gradient of ", &g));
    int rc = duet__device_copy(t->device, g, t->device, t->grad, (size_t)t->numel * sizeof(float),
                               "gradient storage");
    if (rc != DUET_OK) {
        duet__device_free(t->device, g);
        return rc;
    }
    t->grad = g;
    t->owns_grad = true;
    return DUET_OK;
}

int duet_tensor_refcount(const duet_tensor *t) { return t->refcount; }
bool duet_tensor_owns_data(const duet_tensor *t) { return t->owns_data && t->base == NULL; }

int duet_tensor_zero_grad(duet_tensor *t) {
    if (t->grad == NULL) return DUET_OK;
    if (t->device.type == DUET_DEVICE_CPU) {
        memset(t->grad, 0, (size_t)t->numel * sizeof(float));
        return DUET_OK;
    }
    return duet__device_fill_f32(t->device, t->grad, (size_t)t->numel, 0.0f, "zero_grad");
}

int duet_tensor_fill(duet_tensor *t, float v) {
    if (t->device.type == DUET_DEVICE_CPU) {
        for (int64_t i = 0; i < t->numel; i++) t->data[i] = v;
        return DUET_OK;
    }
    return duet__device_fill_f32(t->device, t->data, (size_t)t->numel, v, "fill");
}

bool duet_tensor_same_shape(const duet_tensor *a, const duet_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *duet_shape_str(const duet_tensor *t, char *buf, size_t size) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %" PRId64 : "%" PRId64,
                                 t->shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}
