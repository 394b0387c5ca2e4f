/* Where an op runs: the device of its inputs (ops_internal.h's
 * duet__op_device and duet__op_on_cpu). */
#include "ops/ops_internal.h"

#include <string.h>

/* Name i of the comma-separated list `names` ("x,weight,bias") into buf, or
 * "input i" when the list is shorter. */
static const char *input_name(const char *names, int i, char *buf, size_t size) {
    const char *p = names != NULL ? names : "";
    for (int k = 0; k < i && p != NULL; k++) {
        p = strchr(p, ',');
        if (p != NULL) p++;
    }
    if (p == NULL || *p == '\0' || *p == ',') {
        snprintf(buf, size, "input %d", i);
        return buf;
    }
    size_t len = strcspn(p, ",");
    if (len >= size) len = size - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

int duet__op_device(const char *op, const char *names, int n, duet_tensor *const *inputs,
                    duet_device *dev) {
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (inputs[i] == NULL) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        if (duet_device_equal(inputs[i]->device, inputs[first]->device)) continue;
        char na[48], nb[48], da[DUET_DEVICE_STR_MAX], db[DUET_DEVICE_STR_MAX];
        return duet__error(DUET_EDEVICE, "%s: inputs on different devices: %s on %s, %s on %s; "
                           "move them to one device first (duet_tensor_to)", op,
                           input_name(names, first, na, sizeof na),
                           duet_device_str(inputs[first]->device, da, sizeof da),
                           input_name(names, i, nb, sizeof nb),
                           duet_device_str(inputs[i]->device, db, sizeof db));
    }
    *dev = first >= 0 ? inputs[first]->device : duet_device_cpu();
    return DUET_OK;
}

int duet__op_on_cpu(const char *op, const char *names, int n, duet_tensor *const *inputs) {
    duet_device dev;
    DUET_TRY(duet__op_device(op, names, n, inputs, &dev));
    if (dev.type == DUET_DEVICE_CPU) return DUET_OK;
    return duet__op_no_kernel(op, dev);
}

int duet__op_no_kernel(const char *op, duet_device dev) {
    char d[DUET_DEVICE_STR_MAX];
    return duet__error(DUET_EUNSUPPORTED, "%s: its inputs are on %s, and duet's %s runs on the "
                       "CPU only so far; copy them to the CPU (duet_tensor_to)", op,
                       duet_device_str(dev, d, sizeof d), op);
}
