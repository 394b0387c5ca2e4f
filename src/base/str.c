/* The small helpers every layer needs once: string copies, path joining,
 * whole-file reads and a growable string (base.h). */
#include "duet/base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *duet__strdup(const char *s) {
    if (s == NULL) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

char *duet__path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p != NULL) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Aligned so that a safetensors body at an 8-aligned offset gives aligned
 * raw pointers; sized by fstat, so only regular files. */
int duet__read_file(const char *path, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO, "%s: cannot open: %s",
                           path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return duet__error(DUET_EIO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *buf = duet_aligned_alloc(n > 0 ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return duet__error(DUET_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = n > 0 ? fread(buf, 1, n, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (got != n) {
        duet_aligned_free(buf);
        return duet__error(DUET_EIO, "%s: read %zu of %zu bytes%s", path, got, n,
                           err ? " (read error)" : " (file shrank while reading)");
    }
    *out = buf;
    *len = n;
    return DUET_OK;
}

void duet__str_vaddf(duet__str *b, const char *fmt, va_list ap) {
    if (b->failed) return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    b->len += (size_t)n;
}

void duet__str_addf(duet__str *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(b, fmt, ap);
    va_end(ap);
}

void duet__str_add_item(duet__str *b, const char *sep, const char *fmt, ...) {
    if (b->len > 0) duet__str_addf(b, "%s", sep);
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(b, fmt, ap);
    va_end(ap);
}

char *duet__strf(const char *fmt, ...) {
    duet__str b = {0};
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(&b, fmt, ap);
    va_end(ap);
    if (b.failed) {
        duet__str_free(&b);
        return NULL;
    }
    return b.s != NULL ? b.s : duet__strdup("");
}

bool duet__label_set(char *buf, size_t size, const char *fmt, ...) {
    DUET_ASSERT(size >= 4);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < size) return true;
    memcpy(buf + size - 4, "...", 4);
    return false;
}

const char *duet__str_get(const duet__str *b) { return b->s != NULL ? b->s : ""; }

void duet__str_free(duet__str *b) {
    free(b->s);
    *b = (duet__str){0};
}

size_t duet__edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}
