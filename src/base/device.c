/* Devices: names, checks, and the storage calls that dispatch on the device
 * (the CPU here; the simulated device through src/sim/; CUDA devices through
 * src/cuda/ when duet is built with the toolkit). */
#include "duet/base.h"

#include <errno.h>
#include <string.h>

#include "sim/sim.h"

#ifdef DUET_HAVE_CUDA
#include "cuda/cuda.h"
#endif

int duet_device_parse(const char *s, duet_device *out) {
    *out = duet_device_cpu();
    if (s != NULL && strcmp(s, "cpu") == 0) return DUET_OK;
    if (s != NULL && strcmp(s, "cuda") == 0) {
        *out = duet_device_cuda(0);
        return DUET_OK;
    }
    if (s != NULL && strcmp(s, "sim") == 0) {
        *out = duet_device_sim(0);
        return DUET_OK;
    }
    size_t prefix = 0;
    if (s != NULL && strncmp(s, "cuda:", 5) == 0) prefix = 5;
    if (s != NULL && strncmp(s, "sim:", 4) == 0) prefix = 4;
    if (prefix > 0 && s[prefix] >= '0' && s[prefix] <= '9') {
        char *end = NULL;
        errno = 0;
        long n = strtol(s + prefix, &end, 10);
        if (errno == 0 && *end == '\0' && n >= 0 && n < 1 << 16) {
            *out = prefix == 5 ? duet_device_cuda((int)n) : duet_device_sim((int)n);
            return DUET_OK;
        }
    }
    return duet__error(DUET_EINVAL, "device \"%s\" is not known: write \"cpu\", \"cuda\", "
                       "\"cuda:N\" (N the device's ordinal, 0, 1, ...), \"sim\" or \"sim:N\" (the "
                       "simulated device)", s != NULL ? s : "(null)");
}

char *duet_device_str(duet_device d, char *buf, size_t size) {
    if (d.type == DUET_DEVICE_CPU)
        snprintf(buf, size, "cpu");
    else if (d.type == DUET_DEVICE_SIM)
        snprintf(buf, size, "sim:%d", d.index);
    else
        snprintf(buf, size, "cuda:%d", d.index);
    return buf;
}

bool duet_cuda_built(void) {
#ifdef DUET_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int duet_cuda_device_count(void) {
#ifdef DUET_HAVE_CUDA
    return duet__cuda_device_count();
#else
    return 0;
#endif
}

int duet_cuda_info_print(FILE *f) {
#ifdef DUET_HAVE_CUDA
    DUET_TRY(duet__cuda_info_print(f));
#else
    fprintf(f, "  CUDA:       not built (configured with DUET_CUDA=OFF, or no CUDA toolkit was "
               "found)\n");
    fprintf(f, "  GPUs:       none usable (built without CUDA)\n");
#endif
    return ferror(f) ? duet__error(DUET_EIO, "info: cannot write the report") : DUET_OK;
}

int duet_device_check(duet_device d) {
    if (d.type == DUET_DEVICE_CPU) return DUET_OK;
    char name[DUET_DEVICE_STR_MAX];
    duet_device_str(d, name, sizeof name);
    if (d.type == DUET_DEVICE_SIM && (d.index < 0 || d.index >= DUET_SIM_MAX_DEVICES))
        return duet__error(DUET_EDEVICE, "%s asked for, sim:0 to sim:%d exist", name,
                           DUET_SIM_MAX_DEVICES - 1);
    if (d.type == DUET_DEVICE_SIM) return DUET_OK;
    if (d.type != DUET_DEVICE_CUDA || d.index < 0)
        return duet__error(DUET_EINVAL, "device %s is not a device duet knows", name);
    if (!duet_cuda_built())
        return duet__error(DUET_EDEVICE, "%s asked for, but duet was built without CUDA "
                           "(configure with -DDUET_CUDA=ON on a machine with the CUDA toolkit)",
                           name);
    int n = duet_cuda_device_count();
    if (n == 0)
        return duet__error(DUET_EDEVICE, "%s asked for, but no CUDA device is visible to this "
                           "process (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)",
                           name);
    if (d.index >= n)
        return duet__error(DUET_EDEVICE, "%s asked for, but %d CUDA device%s visible (cuda:0%s)",
                           name, n, n == 1 ? " is" : "s are", n == 1 ? "" : " to cuda:N-1");
    return DUET_OK;
}

void duet_device_alloc_stats(duet_device d, size_t *live_bytes, size_t *peak_bytes,
                             size_t *reserved_bytes) {
    size_t live = 0, peak = 0, reserved = 0;
    if (d.type == DUET_DEVICE_CPU) {
        duet_alloc_stats(&live, &peak);
        reserved = live;
    } else if (d.type == DUET_DEVICE_SIM) {
        duet__sim_alloc_stats(d.index, &live, &peak, &reserved);
    }
#ifdef DUET_HAVE_CUDA
    else if (d.type == DUET_DEVICE_CUDA) {
        duet__cuda_alloc_stats(d.index, &live, &peak, &reserved);
    }
#endif
    if (live_bytes != NULL) *live_bytes = live;
    if (peak_bytes != NULL) *peak_bytes = peak;
    if (reserved_bytes != NULL) *reserved_bytes = reserved;
}

void duet_device_alloc_reset_peak(duet_device d) {
    if (d.type == DUET_DEVICE_CPU) duet_alloc_reset_peak();
    else if (d.type == DUET_DEVICE_SIM) duet__sim_alloc_reset_peak(d.index);
#ifdef DUET_HAVE_CUDA
    else if (d.type == DUET_DEVICE_CUDA) duet__cuda_alloc_reset_peak(d.index);
#endif
}

int duet__device_alloc(duet_device d, size_t bytes, bool zero, const char *op, void **out) {
    *out = NULL;
    if (d.type == DUET_DEVICE_CPU) {
        *out = zero ? duet_aligned_calloc(bytes) : duet_aligned_alloc(bytes);
        if (*out == NULL)
            return duet__error(DUET_ENOMEM, "%s: out of memory for %zu bytes", op, bytes);
        return DUET_OK;
    }
    int rc = duet_device_check(d);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", op);
    if (d.type == DUET_DEVICE_SIM) return duet__sim_alloc(d.index, bytes, zero, op, out);
#ifdef DUET_HAVE_CUDA
    return duet__cuda_alloc(d.index, bytes, zero, op, out);
#else
    return DUET_EDEVICE; /* unreachable: duet_device_check refused it */
#endif
}

void duet__device_free(duet_device d, void *p) {
    if (p == NULL) return;
    if (d.type == DUET_DEVICE_CPU) {
        duet_aligned_free(p);
        return;
    }
    if (d.type == DUET_DEVICE_SIM) {
        duet__sim_free(d.index, p);
        return;
    }
#ifdef DUET_HAVE_CUDA
    duet__cuda_free(d.index, p);
#else
    DUET_ASSERT(!"device memory freed in a build without CUDA");
#endif
}

int duet__device_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                      size_t bytes, const char *op) {
    if (bytes == 0) return DUET_OK;
    if (dst_dev.type == DUET_DEVICE_CPU && src_dev.type == DUET_DEVICE_CPU) {
        memcpy(dst, src, bytes);
        return DUET_OK;
    }
    if (dst_dev.type != DUET_DEVICE_CUDA && src_dev.type != DUET_DEVICE_CUDA)
        return duet__sim_copy(dst_dev, dst, src_dev, src, bytes, op);
    if (dst_dev.type == DUET_DEVICE_SIM || src_dev.type == DUET_DEVICE_SIM)
        return duet__error(DUET_EDEVICE, "%s: a copy between a CUDA device and a sim device (go "
                           "through the host)", op);
#ifdef DUET_HAVE_CUDA
    return duet__cuda_copy(dst_dev, dst, src_dev, src, bytes, op);
#else
    return duet__error(DUET_EDEVICE, "%s: a copy to or from a CUDA device in a build without "
                       "CUDA", op);
#endif
}

int duet__device_fill_f32(duet_device d, float *p, size_t n, float v, const char *op) {
    if (d.type == DUET_DEVICE_CPU) {
        for (size_t i = 0; i < n; i++) p[i] = v;
        return DUET_OK;
    }
    if (d.type == DUET_DEVICE_SIM) return duet__sim_fill_f32(d.index, p, n, v, op);
#ifdef DUET_HAVE_CUDA
    return duet__cuda_fill_f32(d.index, p, n, v, op);
#else
    return duet__error(DUET_EDEVICE, "%s: a fill on a CUDA device in a build without CUDA", op);
#endif
}

int duet__device_add_f32(duet_device d, float *dst, const float *a, const float *b, size_t n,
                         const char *op) {
    if (d.type == DUET_DEVICE_CPU) {
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
        return DUET_OK;
    }
    if (d.type == DUET_DEVICE_SIM) return duet__sim_add_f32(d.index, dst, a, b, n, op);
    char name[DUET_DEVICE_STR_MAX];
    return duet__error(DUET_EUNSUPPORTED, "%s: a sum of gradients on %s (no kernel there yet)",
                       op, duet_device_str(d, name, sizeof name));
}

int duet_device_synchronize(duet_device d) {
    if (d.type == DUET_DEVICE_CPU) return DUET_OK;
    DUET_TRY(duet_device_check(d));
    if (d.type == DUET_DEVICE_SIM) return duet__sim_synchronize(d.index);
#ifdef DUET_HAVE_CUDA
    return duet__cuda_sync(d.index, "synchronize");
#else
    return DUET_EDEVICE; /* unreachable: duet_device_check refused it */
#endif
}
