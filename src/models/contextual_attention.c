/* MMEditing's ContextualAttentionModule (DeepFillv1's refiner neck), built
 * from duet ops so that autograd gives its gradients. Per sample n:
 *
 *   raw   = extract_patches(context_n, 4, 2, 1)            (L, C, 4, 4)
 *   xs    = subsample(x_n, 2), cs = subsample(context_n, 2) (1, C, h, w)
 *   kern  = normalize_rows(extract_patches(cs, 3, 1, 1), 1e-4)
 *   corr  = conv2d(xs, kern, stride 1, padding 1)          (1, L, h, w)
 * then for the batch: fuse_correlation, the mask's channels excluded,
 * softmax over channels of softmax_scale * corr, and per sample
 *   out_n = conv_transpose2d(attn_n, raw, stride 2, padding 1) / overlap
 * where overlap counts the raw patches covering each pixel (1 where none). */
#include "duet/models.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RAW_K 4
#define RAW_S 2
#define RAW_P 1
#define CORR_K 3

typedef struct ca_impl {
    int fuse_k;
    float softmax_scale;
} ca_impl;

static int ca_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    if (nin != 2 && nin != 3)
        return duet__error(DUET_EINVAL, "ContextualAttentionModule takes (x, context[, mask]), "
                           "got %d inputs", nin);
    return duet_contextual_attention(self, in[0], in[1], nin == 3 ? in[2] : NULL, out, NULL);
}

static const duet_module_type ca_type = {"ContextualAttentionModule", ca_forward, free};

int duet_contextual_attention_create(int fuse_kernel_size, float softmax_scale,
                                     duet_module **out) {
    *out = NULL;
    if (fuse_kernel_size < 1 || fuse_kernel_size % 2 != 1)
        return duet__error(DUET_EINVAL, "ContextualAttentionModule: fuse_kernel_size %d must be "
                           "odd", fuse_kernel_size);
    ca_impl *c = malloc(sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "ContextualAttentionModule: out of memory");
    c->fuse_k = fuse_kernel_size;
    c->softmax_scale = softmax_scale;
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&ca_type, c, &m));
    if (fuse_kernel_size > 1) {
        duet_tensor *eye = NULL;
        int rc = duet_tensor_create(4, (int64_t[]){1, 1, fuse_kernel_size, fuse_kernel_size},
                                    &eye);
        float *d = NULL;
        if (rc == DUET_OK) rc = duet_tensor_map_write(eye, true, &d);
        if (rc == DUET_OK) {
            for (int i = 0; i < fuse_kernel_size; i++) d[i * fuse_kernel_size + i] = 1.0f;
            rc = duet_tensor_unmap_write(eye, d);
        }
        if (rc == DUET_OK) rc = duet_module_add_buffer(m, "fuse_kernel", eye, false); /* takes eye */
        else duet_tensor_release(eye);
        if (rc != DUET_OK) {
            duet_module_destroy(m);
            return rc;
        }
    }
    *out = m;
    return DUET_OK;
}

/* Which context patches (n, l) touch the hole: the mask subsampled, then
 * any 1 in its 3x3 window (zero padding). */
static int masked_channels(const duet_tensor *mask, int64_t n, int64_t h, int64_t w,
                           uint8_t **out) {
    const float *md = NULL;
    DUET_TRY(duet_tensor_map_read(mask, &md)); /* the op takes host bytes */
    *out = calloc((size_t)(n * h * w), 1);
    if (*out == NULL) {
        duet_tensor_unmap_read(mask, md);
        return duet__error(DUET_ENOMEM, "ContextualAttentionModule: out of memory");
    }
    const int64_t mh = mask->shape[2], mw = mask->shape[3];
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++) {
                bool any = false;
                for (int di = -1; di <= 1; di++)
                    for (int dj = -1; dj <= 1; dj++) {
                        const int64_t si = i + di, sj = j + dj;
                        if (si < 0 || si >= h || sj < 0 || sj >= w) continue;
                        if (md[(b * mh + si * 2) * mw + sj * 2] > 0.0f) any = true;
                    }
                (*out)[b * h * w + i * w + j] = any;
            }
    duet_tensor_unmap_read(mask, md);
    return DUET_OK;
}

/* 1 / overlap of (N, C, H, W) on dev: how many raw patches cover each
 * pixel (counted on the host, in place on the CPU). */
static int inverse_overlap(duet_device dev, const int64_t *shape, duet_tensor **out) {
    DUET_TRY(duet_tensor_create_on(dev, 4, shape, out));
    const int64_t hh = shape[2], ww = shape[3], hw = hh * ww;
    float *cnt = NULL;
    int rc = duet_tensor_map_write(*out, false, &cnt);
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
        return rc;
    }
    for (int64_t i = 0; i < hh / 2; i++)
        for (int64_t j = 0; j < ww / 2; j++)
            for (int a = 0; a < RAW_K; a++)
                for (int b = 0; b < RAW_K; b++) {
                    const int64_t y = i * RAW_S - RAW_P + a, x = j * RAW_S - RAW_P + b;
                    if (y >= 0 && y < hh && x >= 0 && x < ww) cnt[y * ww + x] += 1.0f;
                }
    for (int64_t p = 0; p < hw; p++) cnt[p] = cnt[p] > 0.0f ? 1.0f / cnt[p] : 1.0f;
    for (int64_t k = 1; k < shape[0] * shape[1]; k++)
        memcpy(cnt + k * hw, cnt, (size_t)hw * sizeof(float));
    rc = duet_tensor_unmap_write(*out, cnt);
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

int duet_contextual_attention(duet_module *m, duet_tensor *x, duet_tensor *context,
                              duet_tensor *mask, duet_tensor **out, duet_tensor **attention) {
    *out = NULL;
    if (attention != NULL) *attention = NULL;
    if (!duet_module_is(m, "ContextualAttentionModule"))
        return duet__error(DUET_EINVAL, "duet_contextual_attention: the module is a %s",
                           duet_module_type_name(m));
    const ca_impl *c = duet_module_impl(m);
    char sx[DUET_SHAPE_STR_MAX], sc[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || !duet_tensor_same_shape(x, context) || x->shape[2] % 2 != 0 ||
        x->shape[3] % 2 != 0 || x->shape[2] < 2 || x->shape[3] < 2)
        return duet__error(DUET_ESHAPE, "ContextualAttentionModule: x %s and context %s must be "
                           "(N, C, H, W) of one shape with H and W even",
                           duet_shape_str(x, sx, sizeof sx), duet_shape_str(context, sc, sizeof sc));
    const int64_t n = x->shape[0], h = x->shape[2] / 2, w = x->shape[3] / 2, l = h * w;
    if (mask != NULL && (mask->ndim != 4 || mask->shape[0] != n || mask->shape[1] != 1 ||
                         mask->shape[2] != x->shape[2] || mask->shape[3] != x->shape[3]))
        return duet__error(DUET_ESHAPE, "ContextualAttentionModule: mask %s must be (N, 1, H, W) "
                           "for x %s", duet_shape_str(mask, sm, sizeof sm),
                           duet_shape_str(x, sx, sizeof sx));
    uint8_t *masked = NULL;
    duet_tensor **corrs = calloc((size_t)n, sizeof *corrs), **outs = calloc((size_t)n, sizeof *outs);
    duet_tensor *corr_cat = NULL, *corr = NULL, *fused = NULL, *attn = NULL, *inv = NULL,
                *out_cat = NULL, *out_raw = NULL;
    int rc = corrs == NULL || outs == NULL ? duet__error(DUET_ENOMEM, "ContextualAttentionModule")
                                           : DUET_OK;
    if (rc == DUET_OK && mask != NULL) rc = masked_channels(mask, n, h, w, &masked);
    for (int64_t b = 0; b < n && rc == DUET_OK; b++) {
        duet_tensor *xb = NULL, *cb = NULL, *xs = NULL, *cs = NULL, *pt = NULL, *kern = NULL;
        rc = duet_slice0(x, b, 1, &xb);
        if (rc == DUET_OK) rc = duet_slice0(context, b, 1, &cb);
        if (rc == DUET_OK) rc = duet_subsample_nearest(xb, 2, &xs);
        if (rc == DUET_OK) rc = duet_subsample_nearest(cb, 2, &cs);
        if (rc == DUET_OK) rc = duet_extract_patches(cs, CORR_K, 1, 1, &pt);
        if (rc == DUET_OK) rc = duet_normalize_rows(pt, 1e-4f, &kern);
        if (rc == DUET_OK) rc = duet_conv2d(xs, kern, NULL, 1, 1, &corrs[b]);
        duet_tensor *ts[] = {xb, cb, xs, cs, pt, kern};
        for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    }
    /* (1, L, h, w) pieces -> (1, N*L, h, w) -> (N, L, h, w). */
    if (rc == DUET_OK) rc = duet_concat_channels((int)n, corrs, &corr_cat);
    if (rc == DUET_OK) rc = duet_reshape(corr_cat, 4, (int64_t[]){n, l, h, w}, &corr);
    if (rc == DUET_OK && c->fuse_k > 1) rc = duet_fuse_correlation(corr, c->fuse_k, &fused);
    if (rc == DUET_OK)
        rc = duet_softmax_channels(fused != NULL ? fused : corr, c->softmax_scale, masked, &attn);
    for (int64_t b = 0; b < n && rc == DUET_OK; b++) {
        duet_tensor *ab = NULL, *cb = NULL, *raw = NULL;
        rc = duet_slice0(attn, b, 1, &ab);
        if (rc == DUET_OK) rc = duet_slice0(context, b, 1, &cb);
        if (rc == DUET_OK) rc = duet_extract_patches(cb, RAW_K, RAW_S, RAW_P, &raw);
        if (rc == DUET_OK) rc = duet_conv_transpose2d(ab, raw, NULL, RAW_S, RAW_P, 0, &outs[b]);
        duet_tensor_release(ab);
        duet_tensor_release(cb);
        duet_tensor_release(raw);
    }
    if (rc == DUET_OK) rc = duet_concat_channels((int)n, outs, &out_cat);
    if (rc == DUET_OK) rc = duet_reshape(out_cat, 4, x->shape, &out_raw);
    if (rc == DUET_OK) rc = inverse_overlap(duet_tensor_device(x), x->shape, &inv);
    if (rc == DUET_OK) rc = duet_mul(out_raw, inv, out);
    if (rc == DUET_OK && attention != NULL) *attention = duet_tensor_retain(attn);
    for (int64_t b = 0; b < n && corrs != NULL && outs != NULL; b++) {
        duet_tensor_release(corrs[b]);
        duet_tensor_release(outs[b]);
    }
    free(corrs);
    free(outs);
    free(masked);
    duet_tensor *ts[] = {corr_cat, corr, fused, attn, inv, out_cat, out_raw};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    if (rc != DUET_OK) duet__error_context(rc, "ContextualAttentionModule");
    return rc;
}
