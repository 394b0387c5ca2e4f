/* Files written whole: a temporary of our own beside the output, renamed
 * over it once complete (base.h, "files written whole"). The temporary's
 * name is random and it is created with O_CREAT|O_EXCL|O_NOFOLLOW, so a link
 * or file someone planted at a name we would use is never written through;
 * the rename replaces what was at the output's name (a link itself, not its
 * target). */
#include "duet/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* 64 random bits: the kernel's, or (where getrandom cannot answer) a mix of
 * the clock, the process and a counter; O_EXCL is what makes the file ours,
 * the randomness only makes a planted name unlikely to be hit. */
static uint64_t random_bits(void) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 16 ^ counter++;
    r ^= r >> 33;
    r *= 0xff51afd7ed558ccdULL;
    r ^= r >> 33;
    return r;
}

char *duet__safe_temp_name(const char *path) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash != NULL ? (int)(slash - path) + 1 : 0;
    const char *base = slash != NULL ? slash + 1 : path;
    /* ".<name>.duet-<16 hex>" stays within NAME_MAX (255) when the name does. */
    int baselen = (int)strnlen(base, 200);
    return duet__strf("%.*s.%.*s.duet-%016llx", dirlen, path, baselen, base,
                      (unsigned long long)random_bits());
}

void duet__safe_abort(duet__safe_file *sf) {
    if (sf == NULL) return;
    if (sf->f != NULL) fclose(sf->f);
    if (sf->tmp != NULL) unlink(sf->tmp);
    free(sf->tmp);
    free(sf->path);
    *sf = (duet__safe_file){0};
}

int duet__safe_open(const char *path, duet__safe_file *sf) {
    *sf = (duet__safe_file){0};
    struct stat sb;
    if (path == NULL || path[0] == '\0')
        return duet__error(DUET_EINVAL, "no output file named");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return duet__error(DUET_EINVAL, "%s: is a folder; name a file to write", path);
    sf->path = duet__strdup(path);
    if (sf->path == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    for (int attempt = 0; attempt < 16; attempt++) {
        free(sf->tmp);
        sf->tmp = duet__safe_temp_name(path);
        if (sf->tmp == NULL) {
            duet__safe_abort(sf);
            return duet__error(DUET_ENOMEM, "%s: out of memory", path);
        }
        int fd = open(sf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            int e = errno;
            free(sf->tmp);
            sf->tmp = NULL; /* not ours: nothing to remove */
            duet__safe_abort(sf);
            return duet__error(DUET_EIO, "cannot write %s: cannot create a file in its folder: %s",
                               path, strerror(e));
        }
        sf->f = fdopen(fd, "wb");
        if (sf->f == NULL) {
            int e = errno;
            close(fd);
            duet__safe_abort(sf);
            return duet__error(DUET_EIO, "cannot write %s: %s", path, strerror(e));
        }
        return DUET_OK;
    }
    free(sf->tmp);
    sf->tmp = NULL;
    duet__safe_abort(sf);
    return duet__error(DUET_EIO, "cannot write %s: no free temporary name in its folder", path);
}

int duet__sync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash == NULL ? duet__strdup(".")
                : slash == path ? duet__strdup("/")
                                : duet__strf("%.*s", (int)(slash - path), path);
    if (dir == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = DUET_OK;
    /* Some file systems cannot sync a folder (EINVAL): the file itself is
     * synced and renamed, which is all they offer. */
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        rc = duet__error(DUET_EIO, "%s: cannot sync folder %s: %s", path, dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

int duet__safe_commit(duet__safe_file *sf) {
    if (sf->f == NULL) {
        duet__safe_abort(sf);
        return duet__error(DUET_EINVAL, "safe_commit: no file open");
    }
    int e = 0;
    if (fflush(sf->f) != 0 || ferror(sf->f)) e = errno != 0 ? errno : EIO;
    if (e == 0 && fsync(fileno(sf->f)) != 0 && errno != EINVAL) e = errno;
    if (fclose(sf->f) != 0 && e == 0) e = errno;
    sf->f = NULL;
    if (e == 0 && rename(sf->tmp, sf->path) != 0) e = errno;
    if (e != 0) {
        int rc = duet__error(DUET_EIO, "cannot write %s: %s%s", sf->path, strerror(e),
                             e == ENOSPC ? " (disk full)" : "");
        duet__safe_abort(sf);
        return rc;
    }
    free(sf->tmp);
    sf->tmp = NULL; /* renamed: no longer ours to remove */
    int rc = duet__sync_parent(sf->path);
    duet__safe_abort(sf);
    return rc;
}

int duet__safe_write(const char *path, const void *data, size_t n) {
    duet__safe_file sf;
    DUET_TRY(duet__safe_open(path, &sf));
    if (n > 0 && fwrite(data, 1, n, sf.f) != n) {
        int e = errno;
        duet__safe_abort(&sf);
        return duet__error(DUET_EIO, "cannot write %s: %s%s", path, strerror(e),
                           e == ENOSPC ? " (disk full)" : "");
    }
    return duet__safe_commit(&sf);
}

int duet__safe_check_inputs(const char *out, const char *const *inputs, size_t n) {
    struct stat so;
    if (out == NULL || stat(out, &so) != 0) return DUET_OK; /* nothing there to lose */
    for (size_t i = 0; i < n; i++) {
        struct stat si;
        if (inputs[i] == NULL || stat(inputs[i], &si) != 0) continue;
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return duet__error(DUET_EINVAL, "the output %s is the input %s (the same file); "
                               "writing it would replace the input: name another output",
                               out, inputs[i]);
    }
    return DUET_OK;
}

int duet__mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return duet__error(DUET_EINVAL, "bad folder name '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return duet__error(DUET_EIO, "cannot create folder %s: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return duet__error(DUET_EIO, "%s exists and is not a folder", path);
    return DUET_OK;
}
