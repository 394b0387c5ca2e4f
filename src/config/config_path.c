/* Config paths: dotted paths and "[i]" indices to libconfig settings, and the
 * names and file:line locations messages give. */
#include "duet/config.h"

#include <ctype.h>
#include <float.h>
#include <errno.h>
#include <inttypes.h>
#include <libconfig.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

/* ---- names, locations, messages ----------------------------------------- */

const char *duet__cfg_kind_phrase(int type) {
    switch (type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    case CONFIG_TYPE_GROUP: return "a group";
    }
    return "nothing";
}

/* For array element types: "integers". */
const char *duet__cfg_kind_plural(int type) {
    switch (type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "integers";
    case CONFIG_TYPE_FLOAT: return "floats";
    case CONFIG_TYPE_BOOL: return "booleans";
    case CONFIG_TYPE_STRING: return "strings";
    }
    return "values";
}

bool duet__cfg_is_int_type(int type) { return type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64; }

/* Full dotted path of a setting from the config root ("model.generator",
 * "data.pipeline.[0].type"); "" for the root. Built on the way up, so no
 * depth or length caps it. */
static void add_setting_path(duet__str *b, const config_setting_t *s) {
    if (s == NULL || s->parent == NULL) return;
    add_setting_path(b, s->parent);
    if (b->len > 0) duet__str_addf(b, ".");
    if (s->name != NULL) duet__str_addf(b, "%s", s->name);
    else duet__str_addf(b, "[%d]", config_setting_index(s));
}

static char *str_take(duet__str *b) {
    if (b->failed) {
        duet__str_free(b);
        return NULL;
    }
    char *s = b->s != NULL ? b->s : duet__strdup("");
    *b = (duet__str){0};
    return s;
}

char *duet__cfg_setting_path(const config_setting_t *s) {
    duet__str b = {0};
    add_setting_path(&b, s);
    return str_take(&b);
}

char *duet__cfg_setting_loc(const duet_config *cfg, const config_setting_t *s) {
    const cfg_note *note = config_setting_get_hook(s);
    if (note != NULL && note->origin != NULL) return duet__strdup(note->origin);
    const char *file = config_setting_source_file(s);
    unsigned line = config_setting_source_line(s);
    if (file == NULL) file = cfg->core->name;
    if (line > 0) return duet__strf("%s:%u", file, line);
    return duet__strdup(file);
}

int duet__cfg_error_at(const duet_config *cfg, const config_setting_t *s, const char *fmt, ...) {
    char *loc = duet__cfg_setting_loc(cfg, s), *where = duet__cfg_setting_path(s);
    duet__str b = {0};
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(&b, fmt, ap);
    va_end(ap);
    int rc = loc == NULL || where == NULL || b.failed
                 ? duet__error(DUET_ENOMEM, "config: out of memory for a message")
                 : duet__error(DUET_ECONFIG, "%s: '%s' %s", loc, where, duet__str_get(&b));
    free(loc);
    free(where);
    duet__str_free(&b);
    return rc;
}

bool duet__cfg_is_index_token(const char *tok, size_t len, long *index) {
    if (len >= 2 && tok[0] == '[' && tok[len - 1] == ']') {
        tok++;
        len -= 2;
    }
    if (len == 0 || len > 9) return false;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)tok[i])) return false;
        v = v * 10 + (tok[i] - '0');
    }
    *index = v;
    return true;
}

/* Canonical full path for messages and the asked-for set: the view prefix,
 * then the tokens of `path` with indices written "[i]". */
char *duet__cfg_full_path(const duet_config *cfg, const char *path) {
    duet__str b = {0};
    duet__str_addf(&b, "%s", cfg->prefix);
    if (path[0] == '\0') {
        if (b.len > 0 && b.s[b.len - 1] == '.') b.s[--b.len] = '\0';
        return str_take(&b);
    }
    const char *tok = path;
    for (;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot != NULL ? (size_t)(dot - tok) : strlen(tok);
        long idx;
        if (duet__cfg_is_index_token(tok, len, &idx)) duet__str_addf(&b, "[%ld]", idx);
        else duet__str_addf(&b, "%.*s", (int)len, tok);
        if (dot == NULL) break;
        duet__str_addf(&b, ".");
        tok = dot + 1;
    }
    return str_take(&b);
}

/* ---- path walking --------------------------------------------------------- */

/* Finds `path` under `root`. *out is NULL when absent; DUET_ECONFIG when the
 * path is malformed or runs through a scalar. */
int duet__cfg_walk_from(const duet_config *cfg, config_setting_t *root, const char *path,
                     config_setting_t **out) {
    *out = NULL;
    config_setting_t *s = root;
    const char *tok = path;
    if (path[0] == '\0') {
        *out = root;
        return DUET_OK;
    }
    for (;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot != NULL ? (size_t)(dot - tok) : strlen(tok);
        if (len == 0) {
            char *full = duet__cfg_full_path(cfg, path);
            int rc = duet__error(DUET_ECONFIG, "%s: malformed key path '%s'", cfg->core->name,
                                 full != NULL ? full : path);
            free(full);
            return rc;
        }
        long idx;
        if (s->type == CONFIG_TYPE_GROUP) {
            /* A member name is as long as the config wrote it. */
            char *name = duet__strf("%.*s", (int)len, tok);
            if (name == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
            s = config_setting_get_member(s, name);
            free(name);
        } else if (s->type == CONFIG_TYPE_LIST || s->type == CONFIG_TYPE_ARRAY) {
            if (!duet__cfg_is_index_token(tok, len, &idx))
                return duet__cfg_error_at(cfg, s, "is %s: index it with [i], not '%.*s'",
                                          duet__cfg_kind_phrase(s->type), (int)len, tok);
            s = idx < config_setting_length(s) ? config_setting_get_elem(s, (unsigned)idx)
                                               : NULL;
        } else {
            char *full = duet__cfg_full_path(cfg, path);
            int rc = duet__cfg_error_at(cfg, s, "is %s, not a group, so '%s' cannot exist",
                                        duet__cfg_kind_phrase(s->type),
                                        full != NULL ? full : path);
            free(full);
            return rc;
        }
        if (s == NULL || dot == NULL) break;
        tok = dot + 1;
    }
    *out = s;
    return DUET_OK;
}

int duet__cfg_walk(const duet_config *cfg, const char *path, config_setting_t **out) {
    return duet__cfg_walk_from(cfg, cfg->root, path, out);
}
