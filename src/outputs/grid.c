/* Evaluation pictures: input | output | ground truth grids. */
#include "outputs/grid.h"

#include <string.h>

#include "outputs/font.h"

/* Copies sample n of t (N, 3, th, tw), each pixel repeated f times in both
 * directions, into img at column x0. uint8 through duet_image_from_tensor so
 * that the rounding is MMEditing's. */
static int blit(duet_image *img, const duet_tensor *t, int64_t n, int64_t x0, int64_t f) {
    duet_image *src = NULL;
    DUET_TRY(duet_image_from_tensor(t, n, &src));
    for (int64_t y = 0; y < src->height * f; y++)
        for (int64_t x = 0; x < src->width * f; x++)
            memcpy(img->data + ((y * img->width) + x0 + x) * 3,
                   src->data + ((y / f) * src->width + x / f) * 3, 3);
    duet_image_destroy(src);
    return DUET_OK;
}

int duet__grid_row(const duet_tensor *lq, const duet_tensor *output, const duet_tensor *gt,
                   int64_t n, int gap, duet_image **out) {
    *out = NULL;
    int64_t h = lq->shape[2], w = lq->shape[3], H = gt->shape[2], W = gt->shape[3];
    if (lq->ndim != 4 || gt->ndim != 4 || output->ndim != 4 || lq->shape[1] != 3 ||
        gt->shape[1] != 3 || output->shape[1] != 3 || H % h != 0 || W % w != 0 ||
        H / h != W / w || output->shape[2] != H || output->shape[3] != W) {
        char a[DUET_SHAPE_STR_MAX], b[DUET_SHAPE_STR_MAX], c[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE,
                           "evaluation grid: input %s, output %s and ground truth %s do not "
                           "fit (want 3 channels and output = ground truth = input * scale)",
                           duet_shape_str(lq, a, sizeof a), duet_shape_str(output, b, sizeof b),
                           duet_shape_str(gt, c, sizeof c));
    }
    duet_image *img = NULL;
    DUET_TRY(duet_image_create(H, 3 * W + 2 * gap, 3, &img));
    int rc = blit(img, lq, n, 0, H / h);
    if (rc == DUET_OK) rc = blit(img, output, n, W + gap, 1);
    if (rc == DUET_OK) rc = blit(img, gt, n, 2 * (W + gap), 1);
    if (rc != DUET_OK) {
        duet_image_destroy(img);
        return rc;
    }
    *out = img;
    return DUET_OK;
}

int duet__grid_stack(duet_image *const *rows, int nrows, int gap, duet_image **out) {
    *out = NULL;
    if (nrows <= 0) return duet__error(DUET_EINVAL, "evaluation grid: no rows");
    int64_t width = 0, height = (int64_t)gap * (nrows - 1);
    for (int i = 0; i < nrows; i++) {
        if (rows[i]->width > width) width = rows[i]->width;
        height += rows[i]->height;
    }
    duet_image *img = NULL;
    DUET_TRY(duet_image_create(height, width, 3, &img));
    int64_t y0 = 0;
    for (int i = 0; i < nrows; i++) {
        for (int64_t y = 0; y < rows[i]->height; y++)
            memcpy(img->data + (y0 + y) * width * 3, rows[i]->data + y * rows[i]->width * 3,
                   (size_t)rows[i]->width * 3);
        y0 += rows[i]->height + gap;
    }
    *out = img;
    return DUET_OK;
}

int duet__grid_stack_labelled(duet_image *const *rows, int nrows, int gap,
                              const char *const labels[3], duet_image **out) {
    *out = NULL;
    duet_image *body = NULL;
    DUET_TRY(duet__grid_stack(rows, nrows, gap, &body));
    /* Text 7 px high (twice that on panels of 128 px and wider). */
    const int64_t panel = (rows[0]->width - 2 * gap) / 3;
    const int scale = panel >= 128 ? 2 : 1, strip = 7 * scale + 6;
    duet_image *img = NULL;
    int rc = duet_image_create(body->height + strip, body->width, 3, &img);
    if (rc != DUET_OK) {
        duet_image_destroy(body);
        return rc;
    }
    memset(img->data, 255, (size_t)(strip * img->width * 3));
    memcpy(img->data + strip * img->width * 3, body->data,
           (size_t)(body->height * body->width * 3));
    const uint8_t black[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++)
        duet__draw_text(img, k * (panel + gap) + 2, 3, labels[k], black, scale);
    duet_image_destroy(body);
    *out = img;
    return DUET_OK;
}
