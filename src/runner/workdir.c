/* One training run per work dir. Two runs in one folder would interleave
 * log.jsonl and overwrite each other's latest.safetensors, so rank 0 holds
 * an exclusive flock on WORK_DIR/duet.lock for the whole run; the kernel
 * drops it when the process ends, however it ends (kill -9 included), so a
 * lock is never stale. The file holds the holder's pid and host, for the
 * message a second run prints. With the lock held, temporary checkpoint
 * files in the folder can only be leftovers of a killed write: they are
 * removed at start. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runner/runner_internal.h"

#define LOCK_NAME "duet.lock"

/* The run removes duet.lock when it ends (with the lock still held), so
 * that a finished work dir holds only its results. A second run that opened
 * the file before then holds a lock on a removed file: it sees that its fd
 * and the path differ after flock, and opens the path again. (A run killed
 * with -9 leaves the file behind; its lock went with it.) */
static bool lock_is_current(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

int duet__workdir_lock(duet__run *r) {
    r->lock_fd = -1;
    char *path = duet__path_join(r->work_dir, LOCK_NAME);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int fd = -1;
    for (int attempt = 0;; attempt++) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || lock_is_current(fd, path) ||
            attempt == 100)
            break;
        close(fd); /* locked a file the previous run had just removed */
    }
    if (fd < 0) {
        int rc = duet__error(DUET_EIO, "cannot open %s: %s", path, strerror(errno));
        free(path);
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* held already when ours: a no-op */
        int e = errno;
        int rc;
        if (e == EWOULDBLOCK) {
            char holder[256] = "";
            ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
            holder[n > 0 ? n : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            rc = duet__error(DUET_ESTATE, "work dir %s is in use by another duet run (%s, "
                             "holding %s): two runs in one work dir would mix their logs and "
                             "overwrite each other's checkpoints; wait for it, stop it, or give "
                             "this run another --work-dir", r->work_dir,
                             holder[0] ? holder : "pid and host unknown", path);
        } else {
            /* A file system without locks (some network mounts): run, but say so. */
            duet_log(DUET_LOG_WARN, "cannot lock %s (%s): nothing stops a second run from "
                     "using this work dir at the same time", path, strerror(e));
            r->lock_fd = DUET__LOCK_UNSUPPORTED; /* tried: do not warn again */
            rc = DUET_OK;
        }
        close(fd);
        free(path);
        return rc;
    }
    char host[256] = "unknown";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    char stamp[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm) != NULL) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char line[512];
    int len = snprintf(line, sizeof line, "pid %ld on host %s, started %s\n", (long)getpid(),
                       host, stamp);
    /* Best effort: the lock is what protects; the text is for the message. */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len)
        duet_log(DUET_LOG_WARN, "cannot write %s: %s", path, strerror(errno));
    free(path);
    r->lock_fd = fd;
    return DUET_OK;
}

void duet__workdir_unlock(duet__run *r) {
    if (r->lock_fd >= 0) {
        /* Removed while still held (see lock_is_current), then released. */
        char *path = r->work_dir != NULL ? duet__path_join(r->work_dir, LOCK_NAME) : NULL;
        if (path != NULL && lock_is_current(r->lock_fd, path)) unlink(path);
        free(path);
        close(r->lock_fd); /* closing releases the flock */
    }
    r->lock_fd = -1;
}

/* The temporary names of duet__safe_open and of link_latest
 * (".<target>.duet-<16 hex>") with a .safetensors target, and those of
 * earlier versions ("<target>.tmp.<pid>.<counter>"). */
static bool is_ckpt_temp(const char *name) {
    const char *t = strstr(name, ".safetensors.duet-");
    if (name[0] == '.' && t != NULL && t > name + 1) {
        const char *p = t + strlen(".safetensors.duet-");
        size_t n = strspn(p, "0123456789abcdef");
        return n == 16 && p[n] == '\0';
    }
    t = strstr(name, ".safetensors.tmp.");
    if (t == NULL || t == name) return false;
    const char *p = t + strlen(".safetensors.tmp.");
    int dots = 0;
    size_t digits = 0;
    for (; *p != '\0'; p++) {
        if (*p == '.' && digits > 0) {
            dots++;
            digits = 0;
        } else if (*p >= '0' && *p <= '9') {
            digits++;
        } else {
            return false;
        }
    }
    return dots == 1 && digits > 0;
}

int duet__workdir_clean_temps(duet__run *r) {
    if (r->lock_fd < 0) return DUET_OK; /* without the lock another run may be writing */
    DIR *d = opendir(r->work_dir);
    if (d == NULL) return duet__error(DUET_EIO, "cannot list %s: %s", r->work_dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_ckpt_temp(e->d_name)) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            duet_log(DUET_LOG_INFO, "removed %s/%s, a temporary checkpoint file left by a "
                     "write that did not finish", r->work_dir, e->d_name);
        else
            duet_log(DUET_LOG_WARN, "cannot remove the stale temporary file %s/%s: %s",
                     r->work_dir, e->d_name, strerror(errno));
    }
    closedir(d);
    return DUET_OK;
}

/* ---- files the run writes, and the data it reads ---------------------------- */

int duet__workdir_write_file(const duet__run *r, const char *name, const char *text) {
    char *path = duet__path_join(r->work_dir, name);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int rc = duet__safe_write(path, text, strlen(text));
    free(path);
    return rc;
}

/* `path` made absolute with every existing component's links resolved (the
 * work dir may not exist yet: its missing tail is kept as written). NULL
 * when out of memory. */
static char *resolved(const char *path) {
    char *real = realpath(path, NULL);
    if (real != NULL) return real;
    char *copy = duet__strdup(path);
    if (copy == NULL) return NULL;
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    char *out;
    if (slash == NULL) {
        char *cwd = realpath(".", NULL);
        out = cwd != NULL ? duet__strf("%s/%s", cwd, copy) : NULL;
        free(cwd);
    } else if (slash == copy) {
        out = duet__strdup(copy);
    } else {
        *slash = '\0';
        char *dir = resolved(copy);
        out = dir != NULL ? duet__strf("%s/%s", strcmp(dir, "/") == 0 ? "" : dir, slash + 1)
                          : NULL;
        free(dir);
    }
    free(copy);
    return out;
}

/* a is b, or lies inside it. */
static bool within(const char *a, const char *b) {
    size_t n = strlen(b);
    if (n == 1 && b[0] == '/') return true;
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* Walks the config group or list at `path` for data folders (string keys
 * named dataroot or *_folder, as every dataset names them). */
static int check_data_folders(duet__run *r, const char *path, const char *wd) {
    size_t n = 0;
    DUET_TRY(duet_config_length(r->cfg, path, &n));
    bool group = duet_config_kind(r->cfg, path) == DUET_CONFIG_GROUP;
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        char *child;
        if (group) {
            DUET_TRY(duet_config_member_name(r->cfg, path, i, &name));
            child = duet__strf("%s.%s", path, name);
        } else {
            child = duet__strf("%s.[%zu]", path, i);
        }
        if (child == NULL) return duet__error(DUET_ENOMEM, "out of memory");
        int kind = duet_config_kind(r->cfg, child), rc = DUET_OK;
        if (kind == DUET_CONFIG_GROUP || kind == DUET_CONFIG_LIST) {
            rc = check_data_folders(r, child, wd);
        } else if (kind == DUET_CONFIG_STRING && name != NULL) {
            size_t len = strlen(name);
            bool folder = strcmp(name, "dataroot") == 0 ||
                          (len > 7 && strcmp(name + len - 7, "_folder") == 0);
            const char *dir = NULL;
            if (folder) rc = duet_config_peek_string(r->cfg, child, &dir);
            char *real = rc == DUET_OK && dir != NULL && dir[0] != '\0' ? resolved(dir) : NULL;
            if (real != NULL && (within(wd, real) || within(real, wd)))
                rc = duet_config_error(r->cfg, child,
                                       "the work dir %s %s the data folder %s ('%s'): the run's "
                                       "checkpoints, logs and evaluation pictures would mix "
                                       "with the data (and be read back as data); give the "
                                       "run a work dir outside it (--work-dir)",
                                       r->work_dir, strcmp(wd, real) == 0 ? "is"
                                       : within(wd, real) ? "lies inside" : "contains",
                                       dir, child);
            free(real);
        }
        free(child);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

int duet__workdir_check_data(duet__run *r) {
    if (duet_config_kind(r->cfg, "data") != DUET_CONFIG_GROUP) return DUET_OK;
    char *wd = resolved(r->work_dir);
    if (wd == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int rc = check_data_folders(r, "data", wd);
    free(wd);
    return rc;
}
