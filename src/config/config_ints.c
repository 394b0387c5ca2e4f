/* libconfig 1.5 reads an integer literal without an L suffix as a 32-bit int
 * and wraps it silently: `scale = 4294967300;` comes back as 4, and
 * 99999999999999999999 as -1; with L, 9223372036854775808L saturates to
 * 2^63 - 1 and a 65-bit hex literal reads as -1. Nothing in the parsed tree shows that it
 * happened, so this scans the text (and its @include files) for such
 * literals before libconfig sees it and refuses them with file, line and
 * key. Strings and comments (#, //, block comments) are skipped as
 * libconfig's scanner does. */
#include "config/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_INCLUDE_DEPTH 10

static bool name_start(int c) { return isalpha(c) || c == '*'; }
static bool name_char(int c) { return isalnum(c) || c == '_' || c == '-' || c == '*'; }

/* The file's text; a NUL byte in it is refused with its line: the scan
 * below (and libconfig's) would stop there, and a literal after it would
 * go unchecked. */
static int read_text(const char *path, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return DUET_OK; /* libconfig reports unreadable files itself */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *bigger = realloc(buf, cap * 2);
        if (bigger == NULL) free(buf);
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory reading the config", path);
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (nul != NULL) {
        unsigned line = 1;
        for (const char *q = buf; q < nul; q++) line += *q == '\n';
        free(buf);
        return duet__error(DUET_ECONFIG, "%s:%u: a NUL byte (a config is text: whatever follows "
                           "it would not be read as written)", path, line);
    }
    *out = buf;
    return DUET_OK;
}

static int scan(const char *text, const char *name, const char *include_dir, int depth);

/* `@include "file"` at the start of a line: scan that file too. */
static int scan_include(const char *p, const char *name, unsigned line, const char *include_dir,
                        int depth) {
    const char *q = strchr(p, '"');
    const char *e = q != NULL ? strchr(q + 1, '"') : NULL;
    if (e == NULL) return DUET_OK; /* malformed: libconfig's parser reports it */
    if (depth >= MAX_INCLUDE_DEPTH)
        return duet__error(DUET_ECONFIG, "%s:%u: @include nested more than %d deep", name, line,
                           MAX_INCLUDE_DEPTH);
    int len = (int)(e - q - 1);
    char *path = q[1] != '/' && include_dir != NULL && include_dir[0] != '\0'
                     ? duet__strf("%s/%.*s", include_dir, len, q + 1)
                     : duet__strf("%.*s", len, q + 1);
    if (path == NULL) return duet__error(DUET_ENOMEM, "%s:%u: out of memory", name, line);
    /* libconfig's scanner exits the process on a file it cannot read as
     * text (a folder, a device): refused here with the line. A missing
     * file is libconfig's to report. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        int rc = duet__error(DUET_ECONFIG, "%s:%u: @include \"%.*s\": %s is not a regular file",
                             name, line, len, q + 1, path);
        free(path);
        return rc;
    }
    char *sub = NULL;
    int rc = read_text(path, &sub);
    if (rc == DUET_OK && sub != NULL) rc = scan(sub, path, include_dir, depth + 1);
    free(sub);
    free(path);
    return rc;
}

/* A number token at *pp: checks a plain decimal or hex integer, skips
 * floats and L-suffixed integers. */
static int check_number(const char **pp, const char *name, unsigned line, const char *key,
                        int keylen) {
    const char *start = *pp, *p = start;
    if (*p == '+' || *p == '-') p++;
    bool hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    if (hex) p += 2;
    const char *digits = p;
    while (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p)) p++;
    bool is_float = !hex && (*p == '.' || *p == 'e' || *p == 'E');
    bool is_long = *p == 'L' || *p == 'l';
    /* The rest of the token (exponent, fraction, suffix). */
    const char *end = p;
    while (isalnum((unsigned char)*end) || *end == '.' ||
           ((*end == '+' || *end == '-') && (end[-1] == 'e' || end[-1] == 'E')))
        end++;
    *pp = end;
    if (is_float || p == digits) return DUET_OK;
    /* The whole literal: leading zeros may make it any length. */
    char *lit = duet__strf("%.*s", (int)(p - start), start);
    if (lit == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", name);
    /* libconfig reads an L literal with strtoll (decimal: saturating at
     * 2^63 - 1) or strtoull (hex: 0x10000000000000000L is -1 and
     * 0x8000000000000000L negative); one without L as a 32-bit int. Each
     * literal must be the number its text says in the type it gets. */
    errno = 0;
    long long v = strtoll(lit, NULL, hex ? 16 : 10);
    bool fits = errno != ERANGE && (is_long || (v >= INT_MIN && v <= INT_MAX));
    if (fits) {
        free(lit);
        return DUET_OK;
    }
    int rc = is_long
        ? duet__error(DUET_ECONFIG, "%s:%u: '%.*s' = %sL does not fit in a 64-bit integer "
                      "(-2^63 .. 2^63-1), which libconfig would silently read as another "
                      "number", name, line, keylen > 0 ? keylen : 1, keylen > 0 ? key : "?", lit)
        : duet__error(DUET_ECONFIG, "%s:%u: '%.*s' = %s does not fit in a 32-bit integer, which "
                      "libconfig would silently read as another number; write %sL for a "
                      "64-bit integer", name, line, keylen > 0 ? keylen : 1,
                      keylen > 0 ? key : "?", lit, lit);
    free(lit);
    return rc;
}

static int scan(const char *text, const char *name, const char *include_dir, int depth) {
    unsigned line = 1;
    /* The last key name seen, for messages: a pointer into text and its
     * length, so no name is cut. */
    const char *key = "";
    int keylen = 0;
    bool line_start = true;
    for (const char *p = text; *p != '\0';) {
        int c = (unsigned char)*p;
        if (c == '\n') {
            line++;
            line_start = true;
            p++;
            continue;
        }
        if (line_start && c == '@' && strncmp(p, "@include", 8) == 0) {
            DUET_TRY(scan_include(p, name, line, include_dir, depth));
            while (*p != '\0' && *p != '\n') p++;
            continue;
        }
        if (!isspace(c)) line_start = false;
        if (c == '#' || (c == '/' && p[1] == '/')) {
            while (*p != '\0' && *p != '\n') p++;
        } else if (c == '/' && p[1] == '*') {
            for (p += 2; *p != '\0' && !(p[0] == '*' && p[1] == '/'); p++)
                if (*p == '\n') line++;
            if (*p != '\0') p += 2;
        } else if (c == '"') {
            for (p++; *p != '\0' && *p != '"'; p++) {
                if (*p == '\\' && p[1] != '\0') p++;
                else if (*p == '\n') line++;
            }
            if (*p != '\0') p++;
        } else if (name_start(c)) {
            const char *s = p;
            while (name_char((unsigned char)*p)) p++;
            key = s;
            keylen = (int)(p - s);
        } else if (isdigit(c) || c == '.' ||
                   ((c == '+' || c == '-') && (isdigit((unsigned char)p[1]) || p[1] == '.'))) {
            DUET_TRY(check_number(&p, name, line, key, keylen));
        } else {
            p++;
        }
    }
    return DUET_OK;
}

int duet__config_check_int_literals(const char *text, const char *name,
                                    const char *include_dir) {
    return scan(text, name, include_dir, 0);
}

int duet__config_check_int_literals_file(const char *path, const char *include_dir) {
    char *text = NULL;
    DUET_TRY(read_text(path, &text));
    if (text == NULL) return DUET_OK;
    int rc = scan(text, path, include_dir, 0);
    free(text);
    return rc;
}
