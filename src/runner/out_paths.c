/* Where `duet infer` and `duet test --out` write, checked before anything is
 * written: an output never replaces an input or another output of the same
 * run, and never goes through a symlink. (The write itself is a temporary
 * file renamed into place: duet_image_save_png.)
 *
 * Two inputs with one stem (a.png and a.jpg) would both become a.png. We
 * refuse rather than invent a second name: the documented contract is
 * DIR/<stem>.png, which scripts downstream rely on, and a silently renamed
 * output ("a_1.png") would be looked for under the wrong name; the message
 * names both inputs so the user can split the run or rename one. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "runner/runner_internal.h"

char *duet__output_path(const char *dir, const char *name) {
    const char *base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot != NULL && dot != base) n = (size_t)(dot - base);
    char *stem = malloc(n + 5);
    if (stem == NULL) return NULL;
    snprintf(stem, n + 5, "%.*s.png", (int)n, base);
    char *path = duet__path_join(dir, stem);
    free(stem);
    return path;
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* One output path against the file system: not a symlink, not something
 * other than a regular file, and not one of the inputs. */
static int check_one(const char *out, const char *input, const char *const *inputs, size_t n,
                     const char *const *others, size_t nothers) {
    struct stat ost;
    if (lstat(out, &ost) != 0) {
        if (errno == ENOENT) return DUET_OK;
        return duet__error(DUET_EIO, "cannot check output %s (for %s): %s", out, input,
                           strerror(errno));
    }
    if (S_ISLNK(ost.st_mode))
        return duet__error(DUET_EINVAL, "output %s (for %s) is a symbolic link; duet does not "
                           "write through links: remove it or choose another --out folder",
                           out, input);
    if (!S_ISREG(ost.st_mode))
        return duet__error(DUET_EINVAL, "output %s (for %s) exists and is not a regular file",
                           out, input);
    for (size_t j = 0; j < n; j++) {
        struct stat ist;
        if (stat(inputs[j], &ist) == 0 && same_file(&ist, &ost))
            return duet__error(DUET_EINVAL, "output %s would replace the input %s; choose "
                               "another --out folder", out, inputs[j]);
    }
    DUET_TRY(duet__safe_check_inputs(out, others, nothers));
    return DUET_OK;
}

int duet__check_outputs(const char *out_dir, const char *const *inputs, size_t n,
                        const char *const *input_dirs, size_t ndirs,
                        const char *const *others, size_t nothers) {
    struct stat dst;
    if (stat(out_dir, &dst) == 0) {
        for (size_t d = 0; d < ndirs; d++) {
            struct stat ist;
            if (input_dirs[d] != NULL && stat(input_dirs[d], &ist) == 0 && same_file(&ist, &dst))
                return duet__error(DUET_EINVAL, "--out %s is the input folder %s: the outputs "
                                   "would replace or join its images (and change what the "
                                   "next run reads); choose another --out folder", out_dir,
                                   input_dirs[d]);
        }
    }
    char **outs = calloc(n ? n : 1, sizeof *outs);
    if (outs == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int rc = DUET_OK;
    for (size_t i = 0; i < n && rc == DUET_OK; i++) {
        outs[i] = duet__output_path(out_dir, inputs[i]);
        if (outs[i] == NULL) {
            rc = duet__error(DUET_ENOMEM, "out of memory");
            break;
        }
        for (size_t j = 0; j < i && rc == DUET_OK; j++)
            if (strcmp(outs[i], outs[j]) == 0)
                rc = duet__error(DUET_EINVAL, "%s and %s would both be written to %s; outputs "
                                 "are named <stem>.png, so give inputs distinct names (or "
                                 "upscale them in separate runs)", inputs[j], inputs[i],
                                 outs[i]);
        if (rc == DUET_OK) rc = check_one(outs[i], inputs[i], inputs, n, others, nothers);
    }
    for (size_t i = 0; i < n; i++) free(outs[i]);
    free(outs);
    return rc;
}
