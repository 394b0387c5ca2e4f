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

int duet__workdir_lock(duet__run *r) {
    r->lock_fd = -1;
    char *path = duet__path_join(r->work_dir, LOCK_NAME);
    if (path == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        int rc = duet__error(DUET_EIO, "cannot open %s: %s", path, strerror(errno));
        free(path);
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
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
    if (r->lock_fd >= 0) close(r->lock_fd); /* closing releases the flock */
    r->lock_fd = -1;
}

/* duet_st_writer_save's temporary names: "<target>.tmp.<pid>.<counter>"
 * with a .safetensors target. */
static bool is_ckpt_temp(const char *name) {
    const char *t = strstr(name, ".safetensors.tmp.");
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
