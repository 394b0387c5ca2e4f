/* MMEditing's weight inits: default_init_weights (scaled Kaiming-normal for
 * Conv2d and Linear, constants for BatchNorm) and generation_init_weights
 * (the image-to-image GANs' normal init). */
#include "duet/nn.h"

#include <math.h>

/* kaiming_normal_(w, a=0, mode='fan_in', nonlinearity='relu' or
 * 'leaky_relu' with a=0): gain sqrt(2), std = gain / sqrt(fan_in), where
 * fan_in = in_channels * kh * kw (conv, OIHW) or in_features (linear).
 * Drawn on the host (in place on the CPU, one copy to a device). */
static int kaiming_normal_scaled(duet_tensor *w, float scale, duet_rng *rng) {
    int64_t fan_in = w->numel / w->shape[0];
    double std = sqrt(2.0) / sqrt((double)fan_in);
    float *d = NULL;
    DUET_TRY(duet_tensor_map_write(w, false, &d));
    for (int64_t i = 0; i < w->numel; i++) d[i] = (float)(std * duet_rng_normal(rng)) * scale;
    return duet_tensor_unmap_write(w, d);
}

/* A layer's weight: "weight", or "weight_orig" under spectral norm (whose
 * module.weight PyTorch's inits write through to weight_orig). */
static duet_tensor *layer_weight(const duet_module *m) {
    duet_tensor *w = duet_module_param(m, "weight");
    return w != NULL ? w : duet_module_param(m, "weight_orig");
}

/* Visits the subtree in PyTorch's module.modules() order (the module, then
 * its children depth first), which fixes the order of the random draws. */
int duet_default_init_weights(duet_module *m, float scale, duet_rng *rng) {
    DUET_ASSERT(m != NULL && rng != NULL);
    int rc = DUET_OK;
    if (duet_module_is(m, "Conv2d") || duet_module_is(m, "Linear")) {
        duet_tensor *w = layer_weight(m);
        duet_tensor *b = duet_module_param(m, "bias");
        if (w != NULL) rc = kaiming_normal_scaled(w, scale, rng);
        if (rc == DUET_OK && b != NULL) rc = duet_tensor_fill(b, 0.0f);
    } else if (duet_module_is(m, "BatchNorm2d")) {
        duet_tensor *w = duet_module_param(m, "weight");
        duet_tensor *b = duet_module_param(m, "bias");
        if (w != NULL) rc = duet_tensor_fill(w, 1.0f);
        if (rc == DUET_OK && b != NULL) rc = duet_tensor_fill(b, 0.0f);
    }
    for (size_t i = 0; rc == DUET_OK && i < duet_module_child_count(m); i++)
        rc = duet_default_init_weights(duet_module_child_at(m, i), scale, rng);
    return rc;
}

/* ---- generation_init_weights ------------------------------------------------------ */

static int fill_normal(duet_tensor *t, float mean, float std, duet_rng *rng) {
    float *d = NULL;
    DUET_TRY(duet_tensor_map_write(t, false, &d));
    for (int64_t i = 0; i < t->numel; i++) d[i] = mean + std * duet_rng_normal(rng);
    return duet_tensor_unmap_write(t, d);
}

int duet_generation_init_weights(duet_module *m, float gain, duet_rng *rng) {
    DUET_ASSERT(m != NULL && rng != NULL);
    /* module.apply visits children before the module itself. */
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        DUET_TRY(duet_generation_init_weights(duet_module_child_at(m, i), gain, rng));
    duet_tensor *w = layer_weight(m), *b = duet_module_param(m, "bias");
    float mean;
    if (duet_module_is(m, "Conv2d") || duet_module_is(m, "ConvTranspose2d") ||
        duet_module_is(m, "Linear"))
        mean = 0.0f;
    else if (duet_module_is(m, "BatchNorm2d"))
        mean = 1.0f;
    else
        return DUET_OK;
    if (w != NULL) DUET_TRY(fill_normal(w, mean, gain, rng));
    if (b != NULL) DUET_TRY(duet_tensor_fill(b, 0.0f));
    return DUET_OK;
}
