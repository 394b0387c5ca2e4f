/* What MMEditing's inpaintors share (mmedit/models/inpaintors/, common/
 * model_utils.py): the local patch around the hole, the valid-region mask,
 * the metric names, and the integers their checkpoints carry. */
#include "models/models_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int duet__inpaint_local_boxes(const char *model, int local_h, int local_w,
                              const duet_tensor *bbox, int64_t n, int64_t **tops,
                              int64_t **lefts) {
    *tops = *lefts = NULL;
    if (bbox->ndim != 2 || bbox->shape[0] != n || bbox->shape[1] != 4)
        return duet__error(DUET_ESHAPE, "%s: 'mask_bbox' must be (N, 4) = (top, left, h, w) "
                           "for the batch's %lld samples", model, (long long)n);
    *tops = malloc((size_t)n * sizeof **tops);
    *lefts = malloc((size_t)n * sizeof **lefts);
    if (*tops == NULL || *lefts == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", model);
    const float *boxes = NULL; /* host view: the crop op takes host offsets */
    int rc = duet_tensor_map_read(bbox, &boxes);
    for (int64_t i = 0; rc == DUET_OK && i < n; i++) {
        const float *b = boxes + i * 4;
        const int64_t t = (int64_t)b[0], l = (int64_t)b[1], h = (int64_t)b[2], w = (int64_t)b[3];
        if (h > local_h || w > local_w) {
            rc = duet__error(DUET_EINVAL, "%s: sample %lld's hole box is %lldx%lld, larger "
                             "than train_cfg.local_size %dx%d", model, (long long)i,
                             (long long)h, (long long)w, local_h, local_w);
            break;
        }
        const int64_t top = t - (local_h - h) / 2, left = l - (local_w - w) / 2;
        (*tops)[i] = top > 0 ? top : 0;
        (*lefts)[i] = left > 0 ? left : 0;
    }
    duet_tensor_unmap_read(bbox, boxes);
    return rc;
}

int duet__inpaint_valid_mask(duet_tensor *mask, duet_tensor **out) {
    /* on the host, in place on the CPU; the result on the mask's device */
    const float *md = NULL;
    float *vd = NULL;
    DUET_TRY(duet_tensor_create_like(mask, out));
    int rc = duet_tensor_map_read(mask, &md);
    if (rc == DUET_OK) rc = duet_tensor_map_write(*out, false, &vd);
    for (int64_t i = 0; rc == DUET_OK && i < mask->numel; i++) vd[i] = 1.0f - md[i];
    duet_tensor_unmap_read(mask, md);
    int urc = duet_tensor_unmap_write(*out, vd);
    if (rc == DUET_OK) rc = urc;
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

int duet__inpaint_check_metrics(const char *model, const char *const *metrics, int n) {
    if (n < 0 || n > 4)
        return duet__error(DUET_EINVAL, "%s: %d metrics (at most 4)", model, n);
    for (int j = 0; j < n; j++)
        if (strcmp(metrics[j], "l1") != 0 && strcmp(metrics[j], "psnr") != 0 &&
            strcmp(metrics[j], "ssim") != 0)
            return duet__error(DUET_EINVAL, "%s: metric '%s' (an inpaintor has l1, psnr, ssim)",
                               model, metrics[j]);
    return DUET_OK;
}

int duet__inpaint_meta_int(const duet_st *ckpt, const char *model, const char *key, long long lo,
                           long long hi, long long *out) {
    const char *s = duet_st_meta(ckpt, key);
    if (s == NULL)
        return duet__error(DUET_ENOTFOUND, "the checkpoint has no metadata '%s' (a %s "
                           "checkpoint has): resume a %s run, or start from it with load_from",
                           key, model, model);
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
        return duet__error(DUET_EFORMAT, "metadata '%s' is '%s', not an integer in [%lld, %lld]",
                           key, s, lo, hi);
    *out = v;
    return DUET_OK;
}

int duet__inpaint_meta_set_int(duet_st_writer *w, const char *key, long long v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    return duet_st_writer_set_meta(w, key, s);
}
