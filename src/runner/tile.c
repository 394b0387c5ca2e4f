/* duet infer --tile N --tile-pad P: a super-resolution forward tile by tile,
 * so that memory is bounded by one tile rather than by the image. The input
 * is cut into N x N tiles (the last row and column smaller); each goes
 * through the generator with P more input pixels of context on every side
 * where the image has them, and only the tile's own part of the output
 * (scale * N square) is kept. A pixel's output depends on the input within
 * the network's receptive radius R of it; with P >= R every kept pixel sees
 * exactly the input it sees in the whole-image forward, so the stitched
 * output equals the whole-image one (within float rounding: the GEMMs block
 * differently on another width) away from the image borders, where the
 * network's zero padding is the same in both; at a border the tile's
 * padding is the image's, so there too. With P < R the tiles disagree at
 * their seams; R is measured once (an impulse's reach through the network)
 * and a smaller P is warned about. The memory check is on the largest
 * forward, an inner tile with context on all sides. Networks with statistics over the image
 * (instance norm, batch norm in training mode: the translation generators)
 * are not tiled: their output depends on the whole image by design. */
#include "runner/runner_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* x's rows [y0, y1) and columns [x0, x1) as a new (1, C, h, w) tensor on
 * the host (x is the host's image). */
static int crop(const duet_tensor *x, int64_t y0, int64_t y1, int64_t x0, int64_t x1,
                duet_tensor **out) {
    const int64_t c = x->shape[1], h = x->shape[2], w = x->shape[3];
    const int64_t th = y1 - y0, tw = x1 - x0;
    const float *xd = NULL;
    float *od = NULL;
    DUET_TRY(duet_tensor_create_uninit(4, (int64_t[]){1, c, th, tw}, out));
    int rc = duet_tensor_map_read(x, &xd);
    if (rc == DUET_OK) rc = duet_tensor_map_write(*out, false, &od);
    for (int64_t k = 0; rc == DUET_OK && k < c; k++)
        for (int64_t i = 0; i < th; i++)
            memcpy(od + (k * th + i) * tw, xd + (k * h + y0 + i) * w + x0,
                   (size_t)tw * sizeof(float));
    duet_tensor_unmap_read(x, xd);
    int urc = duet_tensor_unmap_write(*out, od);
    if (rc == DUET_OK) rc = urc;
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

/* The generator's receptive radius in input pixels, measured: the output of
 * a (2L+1)^2 zero image against the same with one impulse at its centre;
 * the farthest input pixel whose output block changes. L caps it (then the
 * radius is "at least L"). */
static int receptive_radius(duet__run *r, int64_t c, int64_t limit, int64_t *radius) {
    const int64_t side = 2 * limit + 1;
    duet_tensor *a = NULL, *b = NULL, *ya = NULL, *yb = NULL;
    const float *ad = NULL, *bd = NULL; /* the outputs, on the host */
    float *impulse = NULL;
    int rc = duet_tensor_create(4, (int64_t[]){1, c, side, side}, &a);
    if (rc == DUET_OK) rc = duet_tensor_create(4, (int64_t[]){1, c, side, side}, &b);
    if (rc == DUET_OK) rc = duet_tensor_map_write(b, true, &impulse);
    if (rc == DUET_OK) {
        for (int64_t k = 0; k < c; k++) impulse[(k * side + limit) * side + limit] = 1.0f;
        rc = duet_tensor_unmap_write(b, impulse);
    }
    if (rc == DUET_OK) rc = duet__run_forward(r, a, &ya);
    if (rc == DUET_OK) rc = duet__run_forward(r, b, &yb);
    if (rc == DUET_OK) rc = duet_tensor_map_read(ya, &ad);
    if (rc == DUET_OK) rc = duet_tensor_map_read(yb, &bd);
    int64_t far = 0;
    if (rc == DUET_OK) {
        const int64_t oh = ya->shape[2], ow = ya->shape[3], s = oh / side;
        for (int64_t k = 0; k < ya->shape[1]; k++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    int64_t n = (k * oh + i) * ow + j;
                    if (ad[n] == bd[n]) continue;
                    int64_t di = llabs(i / (s > 0 ? s : 1) - limit);
                    int64_t dj = llabs(j / (s > 0 ? s : 1) - limit);
                    int64_t d = di > dj ? di : dj;
                    if (d > far) far = d;
                }
    }
    *radius = far;
    if (ya != NULL) duet_tensor_unmap_read(ya, ad);
    if (yb != NULL) duet_tensor_unmap_read(yb, bd);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(ya);
    duet_tensor_release(yb);
    return rc;
}

int duet__tiled_forward(duet__run *r, duet_tensor *x, int64_t tile, int64_t pad,
                        const char *path, duet_tensor **out) {
    *out = NULL;
    const int64_t c = x->shape[1], h = x->shape[2], w = x->shape[3];
    const int64_t rows = (h + tile - 1) / tile, cols = (w + tile - 1) / tile;
    enum { LIMIT = 48 };
    if (!r->tile_radius_known) {
        DUET_TRY(receptive_radius(r, c, LIMIT, &r->tile_radius));
        r->tile_radius_known = true;
        const int64_t eff = pad >= 0 ? pad : r->tile_radius;
        const bool capped = r->tile_radius >= LIMIT; /* the radius is "at least LIMIT" */
        if (r->rank == 0 && (capped ? eff <= LIMIT : eff < r->tile_radius))
            duet_log(DUET_LOG_WARN, "--tile-pad %" PRId64 " is below the generator's receptive "
                     "radius (%s%" PRId64 " input pixels, measured): tiles will differ from the "
                     "whole-image output near their seams (slightly: the far context weighs "
                     "little); a larger --tile-pad narrows that", eff, capped ? "at least " : "",
                     r->tile_radius);
    }
    if (pad < 0) pad = r->tile_radius;
    /* The memory check on the largest forward: an inner tile with context on
     * all four sides (the first tile has it on two only). */
    {
        const int64_t bh = tile + 2 * pad < h ? tile + 2 * pad : h;
        const int64_t bw = tile + 2 * pad < w ? tile + 2 * pad : w;
        duet_tensor *t = NULL;
        char *what = duet__strf("%s (a %" PRId64 " x %" PRId64 " tile with its context)", path,
                                bw, bh);
        int rc = what == NULL ? duet__error(DUET_ENOMEM, "--tile: out of memory")
                              : crop(x, 0, bh, 0, bw, &t);
        if (rc == DUET_OK) rc = duet__check_forward_memory(r, t, what);
        duet_tensor_release(t);
        free(what);
        DUET_TRY(rc);
    }
    const bool bar = isatty(STDERR_FILENO) && rows * cols > 1 && r->world == 1;
    duet_tensor *y = NULL;
    int64_t scale = 0;
    int rc = DUET_OK;
    for (int64_t ti = 0; rc == DUET_OK && ti < rows; ti++)
        for (int64_t tj = 0; rc == DUET_OK && tj < cols; tj++) {
            const int64_t y0 = ti * tile, y1 = y0 + tile < h ? y0 + tile : h;
            const int64_t x0 = tj * tile, x1 = x0 + tile < w ? x0 + tile : w;
            const int64_t py0 = y0 - pad > 0 ? y0 - pad : 0, py1 = y1 + pad < h ? y1 + pad : h;
            const int64_t px0 = x0 - pad > 0 ? x0 - pad : 0, px1 = x1 + pad < w ? x1 + pad : w;
            duet_tensor *t = NULL, *ty = NULL;
            rc = crop(x, py0, py1, px0, px1, &t);
            if (rc == DUET_OK) rc = duet__run_forward(r, t, &ty);
            if (rc == DUET_OK) {
                const int64_t th = py1 - py0, tw = px1 - px0;
                const int64_t s = ty->shape[2] / th;
                if (ty->ndim != 4 || s < 1 || ty->shape[2] != s * th || ty->shape[3] != s * tw ||
                    (scale != 0 && s != scale))
                    rc = duet__error(DUET_ESHAPE, "--tile: the generator's output of a %" PRId64
                                     " x %" PRId64 " tile is not an integer multiple of it: "
                                     "this model cannot be tiled", tw, th);
                if (rc == DUET_OK && y == NULL) {
                    scale = s;
                    rc = duet_tensor_create_uninit(4, (int64_t[]){1, ty->shape[1], h * s, w * s},
                                                   &y);
                }
                if (rc == DUET_OK) { /* the tile's own block of the output, on the host */
                    const int64_t oc = ty->shape[1], oh = ty->shape[2], ow = ty->shape[3];
                    const int64_t H = h * s, W = w * s, bh = (y1 - y0) * s, bw = (x1 - x0) * s;
                    const int64_t oy = (y0 - py0) * s, ox = (x0 - px0) * s;
                    const float *td = NULL;
                    float *yd = NULL;
                    rc = duet_tensor_map_read(ty, &td);
                    if (rc == DUET_OK) rc = duet_tensor_map_write(y, true, &yd);
                    for (int64_t k = 0; rc == DUET_OK && k < oc; k++)
                        for (int64_t i = 0; i < bh; i++)
                            memcpy(yd + (k * H + y0 * s + i) * W + x0 * s,
                                   td + (k * oh + oy + i) * ow + ox, (size_t)bw * sizeof(float));
                    duet_tensor_unmap_read(ty, td);
                    int urc = duet_tensor_unmap_write(y, yd);
                    if (rc == DUET_OK) rc = urc;
                }
            }
            duet_tensor_release(t);
            duet_tensor_release(ty);
            if (bar) {
                int64_t done = ti * cols + tj + 1, all = rows * cols;
                fprintf(stderr, "\r%s: tile %" PRId64 "/%" PRId64 " [%-30.*s]%s", path, done, all,
                        (int)(30 * done / all), "==============================",
                        done == all ? "\n" : "");
                fflush(stderr);
            }
        }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    *out = y;
    return DUET_OK;
}
