/* Data preparation for MMEditing's SR configs (duet/data.h): DIV2K's
 * sub-images and their annotation file, as MMEditing's
 * preprocess_div2k_dataset.py makes them. */
#include "data/data_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* MMEditing's crop origins along a side of n pixels: 0, step, 2 step, ...
 * while a crop fits, then n - crop when more than thresh pixels are left.
 * Returns their count (0 when n < crop); pos has room for n / step + 2. */
static int64_t origins(int64_t n, int64_t crop, int64_t step, int64_t thresh, int64_t *pos) {
    if (n < crop) return 0;
    int64_t k = 0;
    for (int64_t p = 0; p <= n - crop; p += step) pos[k++] = p;
    if (n - (pos[k - 1] + crop) > thresh) pos[k++] = n - crop;
    return k;
}

/* "0001x4" -> "0001": re.sub('x[2348]', '', name) on the name without its
 * extension. */
static void strip_scale(const char *in, char *out, size_t size) {
    size_t j = 0;
    for (size_t i = 0; in[i] != '\0' && j + 1 < size; i++) {
        if (in[i] == 'x' && in[i + 1] != '\0' && strchr("2348", in[i + 1]) != NULL) {
            i++;
            continue;
        }
        out[j++] = in[i];
    }
    out[j] = '\0';
}

static int crop_one(const char *dir, const char *name, const char *save_dir,
                    const duet_subimage_opts *o, int64_t *nsub) {
    *nsub = 0;
    char *path = duet__path_join(dir, name);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    duet_image *img = NULL;
    int rc = duet_image_load(path, &img);
    free(path);
    DUET_TRY(rc);
    const char *dot = strrchr(name, '.');
    char stem[512];
    snprintf(stem, sizeof stem, "%.*s", (int)(dot - name), name);
    char base[512];
    strip_scale(stem, base, sizeof base);
    int64_t *ys = malloc((size_t)(img->height / o->step + 2) * sizeof *ys);
    int64_t *xs = malloc((size_t)(img->width / o->step + 2) * sizeof *xs);
    duet_image *sub = NULL;
    rc = ys == NULL || xs == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                  : duet_image_create(o->crop_size, o->crop_size, 3, &sub);
    int64_t ny = 0, nx = 0, index = 0;
    if (rc == DUET_OK) {
        ny = origins(img->height, o->crop_size, o->step, o->thresh_size, ys);
        nx = origins(img->width, o->crop_size, o->step, o->thresh_size, xs);
    }
    const size_t row = (size_t)o->crop_size * 3;
    for (int64_t a = 0; rc == DUET_OK && a < ny; a++)
        for (int64_t b = 0; rc == DUET_OK && b < nx; b++) {
            for (int64_t r = 0; r < o->crop_size; r++)
                memcpy(sub->data + (size_t)r * row,
                       img->data + ((size_t)(ys[a] + r) * (size_t)img->width + (size_t)xs[b]) * 3,
                       row);
            char out_name[600];
            snprintf(out_name, sizeof out_name, "%s_s%03lld%s", base, (long long)++index, dot);
            char *out = duet__path_join(save_dir, out_name);
            rc = out == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                             : duet_image_save_png_level(sub, out, o->compression_level);
            free(out);
        }
    *nsub = index;
    free(ys);
    free(xs);
    duet_image_destroy(sub);
    duet_image_destroy(img);
    return rc;
}

int duet_extract_subimages(const char *input_dir, const char *save_dir,
                           const duet_subimage_opts *o, duet_subimage_stats *stats) {
    *stats = (duet_subimage_stats){0, 0, 0};
    if (o->crop_size < 1 || o->step < 1 || o->thresh_size < 0 || o->compression_level < 0 ||
        o->compression_level > 9)
        return duet__error(DUET_EINVAL, "sub-images: crop size %lld and step %lld must be "
                           "positive, thresh size %lld non-negative, compression level %d in "
                           "[0, 9]", (long long)o->crop_size, (long long)o->step,
                           (long long)o->thresh_size, o->compression_level);
    char **names = NULL;
    int64_t n = 0;
    DUET_TRY(duet__list_images(input_dir, &names, &n));
    int rc = DUET_OK;
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        const char *dot = strrchr(names[i], '.');
        if (dot == NULL || strcasecmp(dot, ".png") != 0)
            rc = duet__error(DUET_EUNSUPPORTED, "sub-images: %s/%s is not a PNG (DIV2K's images "
                             "are; convert others first)", input_dir, names[i]);
    }
    if (rc == DUET_OK && mkdir(save_dir, 0755) != 0)
        rc = duet__error(errno == EEXIST ? DUET_ESTATE : DUET_EIO, "sub-images: cannot make %s: "
                         "%s%s", save_dir, strerror(errno),
                         errno == EEXIST ? " (it exists already: remove it to make it anew, as "
                                           "MMEditing's script asks)" : "");
    if (rc != DUET_OK) {
        duet__free_names(names, n);
        return rc;
    }
    int64_t done = 0, subimages = 0, skipped = 0;
    const int threads = o->threads > 0 ? o->threads : duet_cpu_available_cores();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(+ : subimages, skipped)
    for (int64_t i = 0; i < n; i++) {
        int irc;
#pragma omp atomic read
        irc = rc;
        if (irc != DUET_OK) continue;
        int64_t k = 0;
        irc = crop_one(input_dir, names[i], save_dir, o, &k);
        subimages += k;
        skipped += irc == DUET_OK && k == 0;
#pragma omp critical(duet_subimages)
        {
            if (irc != DUET_OK && rc == DUET_OK) rc = irc;
            done++;
            if (o->progress != NULL) o->progress(o->progress_ctx, done, n);
        }
    }
    duet__free_names(names, n);
    *stats = (duet_subimage_stats){n, subimages, skipped};
    return rc;
}

/* A PNG's width and height from its IHDR, without decoding it. */
int duet__png_size(const char *path, int64_t *w, int64_t *h) {
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    if (f == NULL) return duet__error(DUET_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (got < 24 || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0)
        return duet__error(DUET_EFORMAT, "%s: not a PNG", path);
    *w = (int64_t)b[16] << 24 | (int64_t)b[17] << 16 | (int64_t)b[18] << 8 | b[19];
    *h = (int64_t)b[20] << 24 | (int64_t)b[21] << 16 | (int64_t)b[22] << 8 | b[23];
    return DUET_OK;
}

int duet_write_annotation(const char *dir, const char *path, int64_t *count) {
    *count = 0;
    char **names = NULL;
    int64_t n = 0;
    DUET_TRY(duet__list_images(dir, &names, &n));
    char *tmp = duet__strf("%s.duet-tmp", path);
    FILE *f = tmp != NULL ? fopen(tmp, "w") : NULL;
    int rc = f == NULL ? duet__error(DUET_EIO, "cannot write %s: %s", tmp ? tmp : path,
                                     strerror(errno))
                       : DUET_OK;
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        char *p = duet__path_join(dir, names[i]);
        int64_t w = 0, h = 0;
        rc = p == NULL ? duet__error(DUET_ENOMEM, "out of memory") : duet__png_size(p, &w, &h);
        free(p);
        if (rc == DUET_OK && fprintf(f, "%s (%lld,%lld,3)\n", names[i], (long long)h,
                                     (long long)w) < 0)
            rc = duet__error(DUET_EIO, "cannot write %s", tmp);
    }
    if (f != NULL && fclose(f) != 0 && rc == DUET_OK)
        rc = duet__error(DUET_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (rc == DUET_OK && rename(tmp, path) != 0)
        rc = duet__error(DUET_EIO, "cannot write %s: %s", path, strerror(errno));
    if (rc != DUET_OK && tmp != NULL) remove(tmp);
    free(tmp);
    duet__free_names(names, n);
    if (rc == DUET_OK) *count = n;
    return rc;
}
