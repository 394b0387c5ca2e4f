/* duet prepare div2k: MMEditing's DIV2K preparation
 * (preprocess_div2k_dataset.py) from duet's command line, on the data
 * layer's duet_extract_subimages and duet_write_annotation. */
#include "runner/runner_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(void *ctx, int64_t done, int64_t total) {
    const char *what = ctx;
    if (!isatty(STDERR_FILENO)) return;
    fprintf(stderr, "\r  %s: %lld/%lld images%s", what, (long long)done, (long long)total,
            done == total ? "\n" : "");
    fflush(stderr);
}

static void lmdb_progress(void *ctx, int64_t done, int64_t total) {
    const char *what = ctx;
    if (!isatty(STDERR_FILENO)) return;
    fprintf(stderr, "\r  %s: %lld/%lld into LMDB%s", what, (long long)done, (long long)total,
            done == total ? "\n" : "");
    fflush(stderr);
}

/* MMEditing's make_lmdb_for_div2k for one folder: ROOT/in (a _sub folder)
 * into ROOT/out (.lmdb), PNG level 1 as MMEditing's make_lmdb. */
static int one_lmdb(const char *root, const char *in, const char *out, int threads,
                    FILE *report) {
    char *src = duet__path_join(root, in), *dst = duet__path_join(root, out);
    duet_lmdb_opts o = {.compression_level = 1, .threads = threads, .progress = lmdb_progress,
                        .progress_ctx = (void *)in};
    int64_t n = 0;
    double t0 = now();
    int rc = src == NULL || dst == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                        : duet_lmdb_write_folder(src, dst, &o, &n);
    if (rc == DUET_OK)
        fprintf(report, "duet prepare: %s -> %s: %lld images (keys without .png, "
                "meta_info.txt) in %.1f s\n", src, dst, (long long)n, now() - t0);
    free(src);
    free(dst);
    return rc;
}

static int one_folder(const char *root, const char *in, const char *out, int64_t div,
                      const duet_subimage_opts *base, FILE *report) {
    char *src = duet__path_join(root, in), *dst = duet__path_join(root, out);
    duet_subimage_opts o = *base;
    o.crop_size /= div;
    o.step /= div;
    o.thresh_size /= div;
    o.progress = progress;
    o.progress_ctx = (void *)in;
    duet_subimage_stats st;
    double t0 = now();
    int rc = src == NULL || dst == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                        : duet_extract_subimages(src, dst, &o, &st);
    if (rc == DUET_OK)
        fprintf(report, "duet prepare: %s -> %s: %lld images, %lld sub-images of %lld px "
                "(step %lld, thresh %lld)%s in %.1f s\n", src, dst, (long long)st.images,
                (long long)st.subimages, (long long)o.crop_size, (long long)o.step,
                (long long)o.thresh_size, st.skipped ? ", some images smaller than a crop" : "",
                now() - t0);
    free(src);
    free(dst);
    return rc;
}

static int prepare_subimages(const char *root, const int *scales, int nscales,
                             const duet_subimage_opts *o, FILE *report);

int duet_runner_prepare_div2k(const char *root, const int *scales, int nscales,
                              const duet_subimage_opts *opts, int lmdb, FILE *report) {
    duet_subimage_opts capped = *opts;
    const duet_subimage_opts *o = &capped;
    const int cores = duet_cpu_available_cores();
    if (cores >= 1 && capped.threads > cores) {
        fprintf(report, "duet prepare: note: --threads %d is more than the %d cores this "
                "process may run on; using %d\n", capped.threads, cores, cores);
        capped.threads = cores;
    }
    for (int i = 0; i < nscales; i++)
        if (scales[i] < 1 || o->crop_size % scales[i] != 0 || o->step % scales[i] != 0)
            return duet__error(DUET_EINVAL, "prepare: scale %d must divide the crop size %lld "
                               "and the step %lld", scales[i], (long long)o->crop_size,
                               (long long)o->step);
    if (lmdb != DUET_PREPARE_LMDB_ONLY) DUET_TRY(prepare_subimages(root, scales, nscales, o, report));
    if (lmdb == DUET_PREPARE_NO_LMDB) return DUET_OK;
    DUET_TRY(one_lmdb(root, "DIV2K_train_HR_sub", "DIV2K_train_HR_sub.lmdb", o->threads, report));
    for (int i = 0; i < nscales; i++) {
        char in[64], out[64];
        snprintf(in, sizeof in, "DIV2K_train_LR_bicubic/X%d_sub", scales[i]);
        snprintf(out, sizeof out, "DIV2K_train_LR_bicubic_X%d_sub.lmdb", scales[i]);
        DUET_TRY(one_lmdb(root, in, out, o->threads, report));
    }
    return DUET_OK;
}

static int prepare_subimages(const char *root, const int *scales, int nscales,
                             const duet_subimage_opts *o, FILE *report) {
    /* Every pair is checked before anything is cut: a mismatch found after
     * the HR folder was cut would leave half a preparation behind. */
    for (int i = 0; i < nscales; i++) {
        char lr[64];
        snprintf(lr, sizeof lr, "DIV2K_train_LR_bicubic/X%d", scales[i]);
        char *h = duet__path_join(root, "DIV2K_train_HR"), *l = duet__path_join(root, lr);
        int rc = h == NULL || l == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                        : duet_div2k_check_pairs(h, l, scales[i]);
        free(h);
        free(l);
        if (rc != DUET_OK) return duet__error_context(rc, "prepare");
    }
    DUET_TRY(one_folder(root, "DIV2K_train_HR", "DIV2K_train_HR_sub", 1, o, report));
    for (int i = 0; i < nscales; i++) {
        char in[64], out[64];
        snprintf(in, sizeof in, "DIV2K_train_LR_bicubic/X%d", scales[i]);
        snprintf(out, sizeof out, "DIV2K_train_LR_bicubic/X%d_sub", scales[i]);
        DUET_TRY(one_folder(root, in, out, scales[i], o, report));
    }
    char *sub = duet__path_join(root, "DIV2K_train_HR_sub");
    char *ann = duet__path_join(root, "meta_info_DIV2K800sub_GT.txt");
    int64_t n = 0;
    int rc = sub == NULL || ann == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                                        : duet_write_annotation(sub, ann, &n);
    if (rc == DUET_OK)
        fprintf(report, "duet prepare: %s: %lld lines (the ann_file of MMEditing's "
                "SRAnnotationDataset)\n", ann, (long long)n);
    free(sub);
    free(ann);
    return rc;
}
