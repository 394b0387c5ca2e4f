/* Data preparation for MMEditing's SR configs (duet/data.h): DIV2K's
 * sub-images and their annotation file, as MMEditing's
 * preprocess_div2k_dataset.py makes them. */
#include "data/data_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

int duet__worker_threads(int requested) {
    int cores = duet_cpu_available_cores();
    if (cores < 1) cores = 1;
    return requested <= 0 || requested > cores ? cores : requested;
}

void duet__remove_build_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* name with bytes a terminal or a line-based file would act on shown as
 * \xNN, into buf (cut to size). */
static const char *shown(const char *name, char *buf, size_t size) {
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0' && j + 5 < size; p++) {
        if (*p < 0x20 || *p == 0x7f) j += (size_t)snprintf(buf + j, size - j, "\\x%02x", *p);
        else buf[j++] = (char)*p;
    }
    buf[j] = '\0';
    return buf;
}

/* The sub-image stem of an image name: MMEditing's name without its
 * extension and "x2", "x3", "x4", "x8". */
static void sub_stem(const char *name, char *out, size_t size) {
    const char *dot = strrchr(name, '.');
    char stem[512];
    snprintf(stem, sizeof stem, "%.*s", dot != NULL ? (int)(dot - name) : (int)strlen(name), name);
    strip_scale(stem, out, size);
}

typedef struct stem_entry {
    char stem[512];
    const char *name;
} stem_entry;

static int cmp_stem(const void *a, const void *b) {
    return strcmp(((const stem_entry *)a)->stem, ((const stem_entry *)b)->stem);
}

/* names[0..n) as (stem, name) sorted by stem (malloc'd); DUET_EINVAL when a
 * name holds whitespace or control bytes or two names share a stem. */
static int stems_of(const char *dir, char **names, int64_t n, stem_entry **out) {
    *out = NULL;
    stem_entry *e = calloc(n > 0 ? (size_t)n : 1, sizeof *e);
    if (e == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    char a[600], b[600];
    for (int64_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)names[i]; *p != '\0'; p++)
            if (*p <= 0x20 || *p == 0x7f) {
                free(e);
                return duet__error(DUET_EINVAL, "%s/%s: the name holds a space or a control "
                                   "byte, which an annotation file (one \"name (h,w,c)\" a "
                                   "line) cannot hold: rename it", dir,
                                   shown(names[i], a, sizeof a));
            }
        sub_stem(names[i], e[i].stem, sizeof e[i].stem);
        e[i].name = names[i];
    }
    qsort(e, (size_t)n, sizeof *e, cmp_stem);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(e[i - 1].stem, e[i].stem) == 0) {
            int rc = duet__error(DUET_EINVAL, "%s: %s and %s would both give %s_s001.png, ...: "
                                 "their sub-images would overwrite each other; keep one of them",
                                 dir, shown(e[i - 1].name, a, sizeof a),
                                 shown(e[i].name, b, sizeof b), e[i].stem);
            free(e);
            return rc;
        }
    *out = e;
    return DUET_OK;
}

int duet_div2k_check_pairs(const char *hr_dir, const char *lr_dir, int scale) {
    char **hn = NULL, **ln = NULL;
    int64_t nh = 0, nl = 0;
    stem_entry *he = NULL, *le = NULL;
    int rc = duet__list_images(hr_dir, &hn, &nh);
    if (rc == DUET_OK) rc = duet__list_images(lr_dir, &ln, &nl);
    if (rc == DUET_OK) rc = stems_of(hr_dir, hn, nh, &he);
    if (rc == DUET_OK) rc = stems_of(lr_dir, ln, nl, &le);
    char a[600];
    for (int64_t i = 0, j = 0; rc == DUET_OK && (i < nh || j < nl);) {
        int c = i == nh ? 1 : j == nl ? -1 : strcmp(he[i].stem, le[j].stem);
        if (c != 0) {
            const bool hr_only = c < 0;
            rc = duet__error(DUET_EINVAL, "%s/%s has no image of the same name in %s: every "
                             "HR image needs its LR image at x%d and the other way round",
                             hr_only ? hr_dir : lr_dir,
                             shown(hr_only ? he[i].name : le[j].name, a, sizeof a),
                             hr_only ? lr_dir : hr_dir, scale);
            break;
        }
        char *hp = duet__path_join(hr_dir, he[i].name), *lp = duet__path_join(lr_dir, le[j].name);
        int64_t hw = 0, hh = 0, lw = 0, lh = 0;
        rc = hp == NULL || lp == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                      : duet__png_size(hp, &hw, &hh);
        if (rc == DUET_OK) rc = duet__png_size(lp, &lw, &lh);
        if (rc == DUET_OK && (lw != hw / scale || lh != hh / scale))
            rc = duet__error(DUET_EINVAL, "%s is %lldx%lld, but its HR image %s is %lldx%lld: at "
                             "x%d it must be %lldx%lld (its sub-images would not line up with "
                             "the HR ones)", lp, (long long)lw, (long long)lh, hp, (long long)hw,
                             (long long)hh, scale, (long long)(hw / scale),
                             (long long)(hh / scale));
        free(hp);
        free(lp);
        i++, j++;
    }
    free(he);
    free(le);
    duet__free_names(hn, nh);
    duet__free_names(ln, nl);
    return rc;
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
    stem_entry *stems = NULL;
    if (rc == DUET_OK) rc = stems_of(input_dir, names, n, &stems);
    free(stems);
    /* Built in a folder of our own beside save_dir and renamed to it at the
     * end: a failed run leaves no half folder under the name the annotation
     * file and the datasets read. */
    struct stat sb;
    if (rc == DUET_OK && lstat(save_dir, &sb) == 0)
        rc = duet__error(DUET_ESTATE, "sub-images: cannot make %s: %s (it exists already: remove "
                         "it to make it anew, as MMEditing's script asks)", save_dir,
                         strerror(EEXIST));
    char *build = rc == DUET_OK ? duet__safe_temp_name(save_dir) : NULL;
    if (rc == DUET_OK && build == NULL) rc = duet__error(DUET_ENOMEM, "out of memory");
    if (rc == DUET_OK && mkdir(build, 0755) != 0)
        rc = duet__error(DUET_EIO, "sub-images: cannot make %s (to become %s): %s", build,
                         save_dir, strerror(errno));
    if (rc != DUET_OK) {
        free(build);
        duet__free_names(names, n);
        return rc;
    }
    int64_t done = 0, subimages = 0, skipped = 0;
    char *worker_msg = NULL; /* the failing worker's message: duet_last_error is per thread */
    const int threads = duet__worker_threads(o->threads);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(+ : subimages, skipped)
    for (int64_t i = 0; i < n; i++) {
        int irc;
#pragma omp atomic read
        irc = rc;
        if (irc != DUET_OK) continue;
        int64_t k = 0;
        irc = crop_one(input_dir, names[i], build, o, &k);
        subimages += k;
        skipped += irc == DUET_OK && k == 0;
#pragma omp critical(duet_subimages)
        {
            if (irc != DUET_OK && rc == DUET_OK) {
                rc = irc;
                worker_msg = duet__strdup(duet_last_error());
            }
            done++;
            if (o->progress != NULL) o->progress(o->progress_ctx, done, n);
        }
    }
    duet__free_names(names, n);
    if (rc != DUET_OK)
        duet__error(rc, "%s", worker_msg != NULL && worker_msg[0] != '\0'
                                  ? worker_msg : "sub-images: an image failed (out of memory)");
    free(worker_msg);
    if (rc == DUET_OK && rename(build, save_dir) != 0)
        rc = duet__error(DUET_EIO, "sub-images: cannot rename %s to %s: %s", build, save_dir,
                         strerror(errno));
    if (rc != DUET_OK) duet__remove_build_dir(build);
    free(build);
    if (rc == DUET_OK) *stats = (duet_subimage_stats){n, subimages, skipped};
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
    duet__safe_file sf;
    int rc = duet__safe_open(path, &sf);
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        char *p = duet__path_join(dir, names[i]);
        int64_t w = 0, h = 0;
        rc = p == NULL ? duet__error(DUET_ENOMEM, "out of memory") : duet__png_size(p, &w, &h);
        free(p);
        if (rc == DUET_OK && fprintf(sf.f, "%s (%lld,%lld,3)\n", names[i], (long long)h,
                                     (long long)w) < 0)
            rc = duet__error(DUET_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    if (rc == DUET_OK)
        rc = duet__safe_commit(&sf);
    else
        duet__safe_abort(&sf);
    duet__free_names(names, n);
    if (rc == DUET_OK) *count = n;
    return rc;
}
