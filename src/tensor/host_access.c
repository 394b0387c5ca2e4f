/* Host access to tensor storage for the layers above ops (models, nn, the
 * wrapper, the runner, the loader): every read or write of a tensor's
 * values from host code goes through these calls, which say where the data
 * is. On the CPU a mapping is the tensor's own storage (no copy, so the
 * CPU's hot paths read in place as before); on any other device it is a
 * host buffer filled by a copy (read) or copied back when unmapped (write).
 * scripts/check-host-access.sh keeps direct `->data`/`->grad` out of those
 * layers. */
#include "duet/tensor.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bool on_cpu(const duet_tensor *t) { return t->device.type == DUET_DEVICE_CPU; }

/* A host buffer of t's numel floats, zero-filled. */
static int host_buffer(const duet_tensor *t, const char *what, float **out) {
    *out = duet_aligned_calloc((size_t)t->numel * sizeof(float));
    if (*out == NULL)
        return duet__error(DUET_ENOMEM, "%s: out of memory for a host copy of %" PRId64 " floats",
                           what, t->numel);
    return DUET_OK;
}

int duet_tensor_item(const duet_tensor *t, float *out) {
    if (t->numel != 1) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "tensor item: %s holds %" PRId64 " values, not one",
                           duet_shape_str(t, s, sizeof s), t->numel);
    }
    if (on_cpu(t)) {
        *out = t->data[0];
        return DUET_OK;
    }
    return duet_tensor_copy_to_host(t, out);
}

bool duet_tensor_has_grad(const duet_tensor *t) { return t->grad != NULL; }

/* [offset, offset + count) inside t's numel, else DUET_EINVAL naming what. */
static int check_range(const duet_tensor *t, int64_t offset, int64_t count, const char *what) {
    if (offset < 0 || count < 0 || offset > t->numel || count > t->numel - offset) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_EINVAL, "%s: values [%" PRId64 ", %" PRId64 ") outside %s",
                           what, offset, offset + count, duet_shape_str(t, s, sizeof s));
    }
    return DUET_OK;
}

int duet_tensor_read_range(const duet_tensor *t, int64_t offset, int64_t count, float *dst) {
    DUET_TRY(check_range(t, offset, count, "tensor read"));
    if (count == 0) return DUET_OK;
    return duet__device_copy(duet_device_cpu(), dst, t->device, t->data + offset,
                             (size_t)count * sizeof(float), "tensor read to the host");
}

int duet_tensor_write_range(duet_tensor *t, int64_t offset, int64_t count, const float *src) {
    DUET_TRY(check_range(t, offset, count, "tensor write"));
    if (count == 0) return DUET_OK;
    return duet__device_copy(t->device, t->data + offset, duet_device_cpu(), src,
                             (size_t)count * sizeof(float), "tensor write from the host");
}

int duet_tensor_from_host_on(duet_device dev, int ndim, const int64_t *shape, const float *src,
                             duet_tensor **out) {
    if (dev.type == DUET_DEVICE_CPU) return duet_tensor_from_data(ndim, shape, src, out);
    DUET_TRY(duet_tensor_create_on(dev, ndim, shape, out));
    int rc = duet_tensor_copy_from_host(*out, src);
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

int duet_tensor_map_read(const duet_tensor *t, const float **out) {
    *out = NULL;
    if (on_cpu(t)) {
        *out = t->data;
        return DUET_OK;
    }
    float *h = NULL;
    DUET_TRY(host_buffer(t, "tensor map", &h));
    int rc = duet_tensor_copy_to_host(t, h);
    if (rc != DUET_OK) {
        duet_aligned_free(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

int duet_tensor_grad_map_read(const duet_tensor *t, const float **out) {
    *out = NULL;
    if (t->grad == NULL) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_EINVAL, "tensor gradient map: the tensor %s has no gradient",
                           duet_shape_str(t, s, sizeof s));
    }
    if (on_cpu(t)) {
        *out = t->grad;
        return DUET_OK;
    }
    float *h = NULL;
    DUET_TRY(host_buffer(t, "tensor gradient map", &h));
    int rc = duet__device_copy(duet_device_cpu(), h, t->device, t->grad,
                               (size_t)t->numel * sizeof(float), "gradient copy to the host");
    if (rc != DUET_OK) {
        duet_aligned_free(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

void duet_tensor_unmap_read(const duet_tensor *t, const float *p) {
    if (p != NULL && !on_cpu(t)) duet_aligned_free((void *)p);
}

int duet_tensor_map_write(duet_tensor *t, bool keep, float **out) {
    *out = NULL;
    if (on_cpu(t)) {
        *out = t->data;
        return DUET_OK;
    }
    float *h = NULL;
    DUET_TRY(host_buffer(t, "tensor map", &h));
    int rc = keep ? duet_tensor_copy_to_host(t, h) : DUET_OK;
    if (rc != DUET_OK) {
        duet_aligned_free(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

int duet_tensor_unmap_write(duet_tensor *t, float *p) {
    if (p == NULL || on_cpu(t)) return DUET_OK;
    int rc = duet_tensor_copy_from_host(t, p);
    duet_aligned_free(p);
    return rc;
}

int duet_tensor_move_to(duet_tensor *t, duet_device dev) {
    if (duet_device_equal(t->device, dev)) return DUET_OK;
    char s[DUET_SHAPE_STR_MAX], d[DUET_DEVICE_STR_MAX];
    if (t->base != NULL || !t->owns_data || t->grad_fn != NULL)
        return duet__error(DUET_EINVAL, "tensor move to %s: %s is %s; only a tensor that owns "
                           "its data and has no autograd history moves",
                           duet_device_str(dev, d, sizeof d), duet_shape_str(t, s, sizeof s),
                           t->base != NULL || !t->owns_data ? "a view" : "an op's output");
    if (t->grad != NULL && !t->owns_grad)
        return duet__error(DUET_EINVAL, "tensor move to %s: %s has external gradient storage "
                           "(a DDP's): unwrap it first", duet_device_str(dev, d, sizeof d),
                           duet_shape_str(t, s, sizeof s));
    if (dev.type != DUET_DEVICE_CPU) DUET_TRY(duet_device_check(dev));
    const size_t bytes = (size_t)t->numel * sizeof(float);
    void *data = NULL, *grad = NULL;
    int rc = duet__device_alloc(dev, bytes, false, "tensor move", &data);
    if (rc == DUET_OK)
        rc = duet__device_copy(dev, data, t->device, t->data, bytes, "tensor move");
    if (rc == DUET_OK && t->grad != NULL)
        rc = duet__device_alloc(dev, bytes, false, "tensor move (gradient)", &grad);
    if (rc == DUET_OK && t->grad != NULL)
        rc = duet__device_copy(dev, grad, t->device, t->grad, bytes, "tensor move (gradient)");
    if (rc != DUET_OK) {
        duet__device_free(dev, data);
        duet__device_free(dev, grad);
        return rc;
    }
    duet__device_free(t->device, t->data);
    if (t->grad != NULL) duet__device_free(t->device, t->grad);
    t->data = data;
    t->grad = grad;
    t->device = dev;
    return DUET_OK;
}
