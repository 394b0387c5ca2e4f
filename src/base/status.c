/* Status codes, the per-thread last-error message and the assert handler. */
#include "duet/base.h"

#include <stdarg.h>
#include <string.h>

#define DUET_ERRMSG_MAX 4096
static _Thread_local char last_error[DUET_ERRMSG_MAX];

const char *duet_strerror(int status) {
    switch (status) {
#define DUET__STATUS_DESC(name, value, desc) case value: return desc;
        DUET_STATUS_LIST(DUET__STATUS_DESC)
#undef DUET__STATUS_DESC
    }
    return "unknown status";
}

const char *duet_err_name(int status) {
    switch (status) {
#define DUET__STATUS_NAME(name, value, desc) case value: return "DUET_" #name;
        DUET_STATUS_LIST(DUET__STATUS_NAME)
#undef DUET__STATUS_NAME
    }
    return "DUET_UNKNOWN";
}

const char *duet_last_error(void) { return last_error; }

void duet_clear_error(void) { last_error[0] = '\0'; }

/* Control bytes in a message (a file name holding an escape sequence, a
 * carriage return) shown as \xNN: a message goes to a terminal, and one
 * that can move the cursor or recolour it could hide or fake what it says.
 * Newlines and tabs stay; a byte that no longer fits becomes '?'. */
static void neutralize(char *s, size_t cap) {
    char out[DUET_ERRMSG_MAX];
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && j + 1 < cap; p++) {
        if ((*p >= 0x20 && *p != 0x7f) || *p == '\n' || *p == '\t') {
            out[j++] = (char)*p;
        } else if (j + 5 < cap) {
            j += (size_t)snprintf(out + j, cap - j, "\\x%02x", *p);
        } else {
            out[j++] = '?';
        }
    }
    out[j] = '\0';
    memcpy(s, out, j + 1);
}

int duet__error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    neutralize(last_error, sizeof last_error);
    return status;
}

int duet__error_context(int status, const char *fmt, ...) {
    char prefix[1024];
    char old[DUET_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    const char *rest = old[0] != '\0' ? old : duet_strerror(status);
    size_t np = strlen(prefix);
    if (np > sizeof last_error - 3) np = sizeof last_error - 3;
    memcpy(last_error, prefix, np);
    memcpy(last_error + np, ": ", 2);
    size_t room = sizeof last_error - np - 3;
    size_t nr = strlen(rest);
    if (nr > room) nr = room;
    memcpy(last_error + np + 2, rest, nr);
    last_error[np + 2 + nr] = '\0';
    neutralize(last_error, sizeof last_error);
    return status;
}

void duet__assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "duet: internal error at %s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}
