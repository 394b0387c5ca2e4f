/* --set overrides: "a.b=value" parsed with the type of the setting it
 * replaces, creating groups and members as needed. */
#include "duet/config.h"

#include <ctype.h>
#include <float.h>
#include <errno.h>
#include <inttypes.h>
#include <libconfig.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

/* ---- overrides --------------------------------------------------------------- */

static bool fits_int32(int64_t v) { return v >= INT_MIN && v <= INT_MAX; }

/* Integer literal: [+-]digits or [+-]0x hex, optional L. */
static bool parse_int_literal(const char *s, int64_t *v, bool *force64) {
    char buf[64];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n + 1);
    *force64 = false;
    if (buf[n - 1] == 'L' || buf[n - 1] == 'l') {
        buf[--n] = '\0';
        *force64 = true;
    }
    const char *p = buf + (buf[0] == '+' || buf[0] == '-');
    bool hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    const char *digits = hex ? p + 2 : p;
    if (*digits == '\0') return false;
    for (const char *q = digits; *q; q++)
        if (hex ? !isxdigit((unsigned char)*q) : !isdigit((unsigned char)*q)) return false;
    errno = 0;
    char *end;
    long long x = strtoll(buf, &end, hex ? 16 : 10);
    if (errno != 0 || *end != '\0') return false;
    *v = (int64_t)x;
    return true;
}

/* [+-]digits or [+-]0x hex, optional L: an integer, whatever its size. */
static bool looks_like_int(const char *s) {
    const char *p = s + (s[0] == '+' || s[0] == '-');
    bool hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    const char *d = hex ? p + 2 : p;
    size_t n = hex ? strspn(d, "0123456789abcdefABCDEF") : strspn(d, "0123456789");
    return n > 0 && (d[n] == '\0' || ((d[n] == 'L' || d[n] == 'l') && d[n + 1] == '\0'));
}

static bool parse_float_literal(const char *s, double *v) {
    bool digit = false;
    for (const char *q = s; *q; q++) {
        if (isdigit((unsigned char)*q)) digit = true;
        else if (!strchr("+-.eE", *q)) return false;
    }
    if (!digit) return false;
    errno = 0;
    char *end;
    *v = strtod(s, &end);
    return *end == '\0' && errno == 0 && isfinite(*v);
}

/* Parses an override's value into setting "v" of tmp. *raw_string is true
 * when the text was taken as a plain (unquoted) string. */
static int parse_value(const char *text, const char *assignment, config_t *tmp, bool *raw_string,
                       config_setting_t **out) {
    config_setting_t *root = config_root_setting(tmp);
    config_setting_t *v = NULL;
    int64_t iv;
    bool force64;
    double fv;
    *raw_string = false;
    if (strchr("\"[({", text[0]) != NULL && text[0] != '\0') {
        size_t n = strlen(text) + 16;
        char *src = malloc(n);
        if (src == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
        snprintf(src, n, "v = %s;", text);
        int crc = duet__config_check_int_literals(src, "--set", NULL);
        if (crc != DUET_OK) {
            free(src);
            return duet__error_context(crc, "--set %s", assignment);
        }
        int ok = config_read_string(tmp, src);
        free(src);
        if (ok != CONFIG_TRUE)
            return duet__error(DUET_ECONFIG, "--set %s: cannot parse the value: %s",
                               assignment, config_error_text(tmp));
        v = config_setting_get_member(config_root_setting(tmp), "v");
        if (v != NULL && duet__cfg_first_not_finite(v) != NULL)
            return duet__error(DUET_ECONFIG, "--set %s: every number must be finite (1e999 reads "
                               "as inf)", assignment);
    } else if (strcasecmp(text, "true") == 0 || strcasecmp(text, "false") == 0) {
        v = config_setting_add(root, "v", CONFIG_TYPE_BOOL);
        if (v != NULL) config_setting_set_bool(v, strcasecmp(text, "true") == 0);
    } else if (parse_int_literal(text, &iv, &force64)) {
        bool big = force64 || !fits_int32(iv);
        v = config_setting_add(root, "v", big ? CONFIG_TYPE_INT64 : CONFIG_TYPE_INT);
        if (v != NULL) {
            if (big) config_setting_set_int64(v, iv);
            else config_setting_set_int(v, (int)iv);
        }
    } else if (looks_like_int(text)) {
        return duet__error(DUET_ECONFIG, "--set %s: %s does not fit in a 64-bit integer "
                           "(-2^63 .. 2^63-1)", assignment, text);
    } else if (parse_float_literal(text, &fv)) {
        v = config_setting_add(root, "v", CONFIG_TYPE_FLOAT);
        if (v != NULL) config_setting_set_float(v, fv);
    } else {
        *raw_string = true;
        v = config_setting_add(root, "v", CONFIG_TYPE_STRING);
        if (v != NULL) config_setting_set_string(v, text);
    }
    if (v == NULL) return duet__error(DUET_ENOMEM, "--set %s: out of memory", assignment);
    *out = v;
    return DUET_OK;
}

static int note_origin(cfg_core *core, config_setting_t *s, const char *assignment) {
    cfg_note *note = duet__cfg_note_of(core, s);
    if (note == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
    free(note->origin);
    size_t n = strlen(assignment) + 8;
    note->origin = malloc(n);
    if (note->origin == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
    snprintf(note->origin, n, "--set %s", assignment);
    return DUET_OK;
}

/* Sets scalar s (of its own type) from src's value. */
static void set_scalar(config_setting_t *s, const config_setting_t *src) {
    switch (s->type) {
    case CONFIG_TYPE_INT: config_setting_set_int(s, (int)duet__cfg_int_value(src)); break;
    case CONFIG_TYPE_INT64: config_setting_set_int64(s, duet__cfg_int_value(src)); break;
    case CONFIG_TYPE_FLOAT:
        config_setting_set_float(s, duet__cfg_is_int_type(src->type) ? (double)duet__cfg_int_value(src)
                                                            : config_setting_get_float(src));
        break;
    case CONFIG_TYPE_BOOL: config_setting_set_bool(s, config_setting_get_bool(src)); break;
    case CONFIG_TYPE_STRING: config_setting_set_string(s, config_setting_get_string(src)); break;
    }
}

/* New setting `name` (NULL inside lists and arrays) under parent, a copy of
 * src; every created setting remembers the assignment. */
static int copy_new(cfg_core *core, config_setting_t *parent, const char *name,
                    const config_setting_t *src, const char *assignment, int type) {
    config_setting_t *s = config_setting_add(parent, name, type);
    if (s == NULL)
        return duet__error(DUET_ECONFIG, "--set %s: cannot create '%s' (a key is a letter "
                           "followed by letters, digits, '_', '-' or '*')", assignment,
                           name != NULL ? name : "element");
    DUET_TRY(note_origin(core, s, assignment));
    if (!config_setting_is_aggregate(s)) {
        set_scalar(s, src);
        return DUET_OK;
    }
    int n = config_setting_length(src);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(src, (unsigned)i);
        DUET_TRY(copy_new(core, s, e->name, e, assignment, e->type));
    }
    return DUET_OK;
}

static void clear_elems(config_setting_t *s) {
    for (int i = config_setting_length(s) - 1; i >= 0; i--)
        config_setting_remove_elem(s, (unsigned)i);
}

/* dst's path and location for a --set message, malloc'd; false (and both
 * NULL) when out of memory. */
static bool where_loc(const duet_config *cfg, const config_setting_t *dst, char **where,
                      char **loc) {
    *where = duet__cfg_setting_path(dst);
    *loc = duet__cfg_setting_loc(cfg, dst);
    if (*where != NULL && *loc != NULL) return true;
    free(*where);
    free(*loc);
    *where = *loc = NULL;
    return false;
}

static int cannot_set(const duet_config *cfg, const config_setting_t *dst,
                      const config_setting_t *src, const char *assignment) {
    char *where, *loc;
    if (!where_loc(cfg, dst, &where, &loc))
        return duet__error(DUET_ENOMEM, "--set %s: out of memory", assignment);
    int rc = duet__error(DUET_ECONFIG, "--set %s: '%s' is %s (%s); cannot set it to %s",
                         assignment, where, duet__cfg_kind_phrase(dst->type), loc,
                         duet__cfg_kind_phrase(src->type));
    free(where);
    free(loc);
    return rc;
}

/* Assigns src to the existing setting dst, keeping dst's type. `text` is the
 * value as typed, for string keys. */
static int assign(duet_config *cfg, config_setting_t *dst, const config_setting_t *src,
                  const char *text, const char *assignment) {
    cfg_core *core = cfg->core;
    int dt = dst->type, st = src->type;
    if (dt == CONFIG_TYPE_GROUP && st == CONFIG_TYPE_GROUP) {
        int n = config_setting_length(src);
        for (int i = 0; i < n; i++) {
            const config_setting_t *m = config_setting_get_elem(src, (unsigned)i);
            config_setting_t *old = config_setting_get_member(dst, m->name);
            if (old != NULL) DUET_TRY(assign(cfg, old, m, NULL, assignment));
            else DUET_TRY(copy_new(core, dst, m->name, m, assignment, m->type));
        }
        return DUET_OK;
    }
    if (dt == CONFIG_TYPE_INT && duet__cfg_is_int_type(st) && !fits_int32(duet__cfg_int_value(src))) {
        /* A 32-bit key given a 64-bit value becomes a 64-bit key. */
        config_setting_t *parent = dst->parent;
        if (parent == NULL || parent->type != CONFIG_TYPE_GROUP || dst->name == NULL)
            return cannot_set(cfg, dst, src, assignment);
        char *name = duet__strdup(dst->name); /* remove frees dst->name */
        if (name == NULL) return duet__error(DUET_ENOMEM, "--set %s: out of memory", assignment);
        config_setting_remove(parent, name);
        int rc = copy_new(core, parent, name, src, assignment, CONFIG_TYPE_INT64);
        free(name);
        return rc;
    }
    if ((duet__cfg_is_int_type(dt) && duet__cfg_is_int_type(st)) || (dt == CONFIG_TYPE_FLOAT && duet__cfg_ok_number(st)) ||
        (dt == CONFIG_TYPE_BOOL && st == CONFIG_TYPE_BOOL) ||
        (dt == CONFIG_TYPE_STRING && st == CONFIG_TYPE_STRING)) {
        set_scalar(dst, src);
        return DUET_OK;
    }
    if (dt == CONFIG_TYPE_STRING && config_setting_is_scalar(src) && text != NULL) {
        config_setting_set_string(dst, text);
        return DUET_OK;
    }
    if (dt == CONFIG_TYPE_ARRAY && st == CONFIG_TYPE_ARRAY) {
        int n = config_setting_length(src);
        int et = config_setting_length(dst) > 0 ? config_setting_get_elem(dst, 0)->type
                 : n > 0                        ? config_setting_get_elem(src, 0)->type
                                                : CONFIG_TYPE_INT;
        int srct = n > 0 ? config_setting_get_elem(src, 0)->type : et;
        bool compatible = srct == et || (duet__cfg_is_int_type(et) && duet__cfg_is_int_type(srct)) ||
                          (et == CONFIG_TYPE_FLOAT && duet__cfg_is_int_type(srct));
        if (!compatible) {
            char *where, *loc;
            if (!where_loc(cfg, dst, &where, &loc))
                return duet__error(DUET_ENOMEM, "--set %s: out of memory", assignment);
            int rc = duet__error(DUET_ECONFIG, "--set %s: '%s' is an array of %s (%s); cannot "
                                 "set it to an array of %s", assignment, where,
                                 duet__cfg_kind_plural(et), loc, duet__cfg_kind_plural(srct));
            free(where);
            free(loc);
            return rc;
        }
        bool wide = false;
        for (int i = 0; i < n && duet__cfg_is_int_type(et); i++)
            wide |= !fits_int32(duet__cfg_int_value(config_setting_get_elem(src, (unsigned)i)));
        if (duet__cfg_is_int_type(et)) et = wide ? CONFIG_TYPE_INT64 : CONFIG_TYPE_INT;
        clear_elems(dst);
        for (int i = 0; i < n; i++) {
            config_setting_t *e = config_setting_add(dst, NULL, et);
            if (e == NULL) return duet__error(DUET_ENOMEM, "--set %s: out of memory", assignment);
            set_scalar(e, config_setting_get_elem(src, (unsigned)i));
        }
        return DUET_OK;
    }
    if (dt == CONFIG_TYPE_LIST && st == CONFIG_TYPE_LIST) {
        clear_elems(dst);
        int n = config_setting_length(src);
        for (int i = 0; i < n; i++) {
            const config_setting_t *e = config_setting_get_elem(src, (unsigned)i);
            DUET_TRY(copy_new(core, dst, NULL, e, assignment, e->type));
        }
        return DUET_OK;
    }
    return cannot_set(cfg, dst, src, assignment);
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t k = 0;
    while (isspace((unsigned char)s[k])) k++;
    memmove(s, s + k, n - k + 1);
}

/* libconfig's names: a letter or '*', then letters, digits, '_', '-', '*';
 * not its booleans (true, false in any case), which its reader takes as
 * values, so that a config holding such a key could not be read back. */
static bool valid_name(const char *tok, size_t len) {
    if (len == 0 || !(isalpha((unsigned char)tok[0]) || tok[0] == '*')) return false;
    if ((len == 4 && strncasecmp(tok, "true", 4) == 0) ||
        (len == 5 && strncasecmp(tok, "false", 5) == 0))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!isalnum((unsigned char)tok[i]) && !strchr("_-*", tok[i])) return false;
    return true;
}

static int apply_set(duet_config *cfg, const char *assignment, char *key, const char *value,
                     bool merge, config_t *tmp) {
    if (key[0] == '\0')
        return duet__error(DUET_ECONFIG, "--set %s: empty key", assignment);
    /* Check every name first, so that a bad key changes nothing. */
    for (const char *tok = key;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot != NULL ? (size_t)(dot - tok) : strlen(tok);
        long idx;
        if (!duet__cfg_is_index_token(tok, len, &idx) && !valid_name(tok, len))
            return duet__error(DUET_ECONFIG,
                               "--set %s: '%.*s' is not a valid key name (a letter, then "
                               "letters, digits, '_' or '-'; not true or false)",
                               assignment, (int)len, tok);
        if (dot == NULL) break;
        tok = dot + 1;
    }
    bool raw;
    config_setting_t *src = NULL;
    DUET_TRY(parse_value(value, assignment, tmp, &raw, &src));
    /* Walk the parents, creating missing groups. */
    config_setting_t *parent = cfg->root;
    char *tok = key;
    for (;;) {
        char *dot = strchr(tok, '.');
        if (dot == NULL) break;
        *dot = '\0';
        config_setting_t *next;
        DUET_TRY(duet__cfg_walk_from(cfg, parent, tok, &next));
        if (next == NULL) {
            if (parent->type != CONFIG_TYPE_GROUP)
                return duet__error(DUET_ECONFIG, "--set %s: no element '%s'", assignment, tok);
            next = config_setting_add(parent, tok, CONFIG_TYPE_GROUP);
            if (next == NULL)
                return duet__error(DUET_ECONFIG, "--set %s: '%s' is not a valid key name",
                                   assignment, tok);
            DUET_TRY(note_origin(cfg->core, next, assignment));
        } else if (!config_setting_is_aggregate(next) || next->type == CONFIG_TYPE_ARRAY) {
            return cannot_set(cfg, next, src, assignment);
        }
        parent = next;
        tok = dot + 1;
    }
    config_setting_t *dst;
    DUET_TRY(duet__cfg_walk_from(cfg, parent, tok, &dst));
    if (merge && (dst == NULL || dst->type != CONFIG_TYPE_GROUP || src->type != CONFIG_TYPE_GROUP))
        return duet__error(DUET_ECONFIG, "--set %s: '+=' merges a group into a group; '%s' %s",
                           assignment, key, dst == NULL ? "does not exist (use '=')"
                                                        : "or the value is not a group");
    /* key={...} replaces the group (as in the file); key+={...} merges. */
    if (dst != NULL && !merge && dst->type == CONFIG_TYPE_GROUP && src->type == CONFIG_TYPE_GROUP &&
        parent->type == CONFIG_TYPE_GROUP && dst->name != NULL) {
        config_setting_remove(parent, tok);
        return copy_new(cfg->core, parent, tok, src, assignment, src->type);
    }
    if (dst != NULL) return assign(cfg, dst, src, raw || src->type != CONFIG_TYPE_STRING ? value
                                                                                        : NULL,
                                   assignment);
    if (parent->type != CONFIG_TYPE_GROUP)
        return duet__error(DUET_ECONFIG, "--set %s: '%s' is past the end of the list",
                           assignment, tok);
    return copy_new(cfg->core, parent, tok, src, assignment, src->type);
}

int duet_config_set(duet_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (eq == NULL)
        return duet__error(DUET_ECONFIG, "--set %s: expected key=value (e.g. total_iters=1000)",
                           assignment);
    char *key = malloc((size_t)(eq - assignment) + 1);
    char *value = duet__strdup(eq + 1);
    if (key == NULL || value == NULL) {
        free(key);
        free(value);
        return duet__error(DUET_ENOMEM, "config: out of memory");
    }
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = '\0';
    trim(key);
    /* "key+={...}": merge a group member by member. */
    size_t klen = strlen(key);
    bool merge = klen > 0 && key[klen - 1] == '+';
    if (merge) {
        key[klen - 1] = '\0';
        trim(key);
    }
    trim(value);
    config_t tmp;
    config_init(&tmp);
    int rc = apply_set(cfg, assignment, key, value, merge, &tmp);
    config_destroy(&tmp);
    free(key);
    free(value);
    return rc;
}
