/* Config getters: typed values by dotted path with defaults and ranges,
 * arrays, lengths and member names; each marks what it read as used. */
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

/* ---- getters -------------------------------------------------------------- */

int duet_config_kind(const duet_config *cfg, const char *path) {
    config_setting_t *s;
    if (duet__cfg_walk(cfg, path, &s) != DUET_OK || s == NULL) return DUET_CONFIG_NONE;
    switch (s->type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return DUET_CONFIG_INT;
    case CONFIG_TYPE_FLOAT: return DUET_CONFIG_FLOAT;
    case CONFIG_TYPE_BOOL: return DUET_CONFIG_BOOL;
    case CONFIG_TYPE_STRING: return DUET_CONFIG_STRING;
    case CONFIG_TYPE_ARRAY: return DUET_CONFIG_ARRAY;
    case CONFIG_TYPE_LIST: return DUET_CONFIG_LIST;
    case CONFIG_TYPE_GROUP: return DUET_CONFIG_GROUP;
    }
    return DUET_CONFIG_NONE;
}

bool duet_config_has(const duet_config *cfg, const char *path) {
    return duet_config_kind(cfg, path) != DUET_CONFIG_NONE;
}

int64_t duet__cfg_int_value(const config_setting_t *s) {
    return s->type == CONFIG_TYPE_INT64 ? (int64_t)config_setting_get_int64(s)
                                        : (int64_t)config_setting_get_int(s);
}

/* Shared body of the scalar getters: *found false when absent. */
static int get_scalar(duet_config *cfg, const char *path, bool *found, config_setting_t **s) {
    DUET_TRY(duet__cfg_lookup(cfg, path, s));
    *found = *s != NULL;
    if (*found) DUET_TRY(duet__cfg_mark(cfg, *s));
    return DUET_OK;
}

static int get_int_impl(duet_config *cfg, const char *path, const int64_t *def, int64_t *out) {
    config_setting_t *s;
    bool found;
    DUET_TRY(get_scalar(cfg, path, &found, &s));
    if (!found) {
        if (def == NULL) return duet__cfg_missing(cfg, path, "an integer");
        *out = *def;
        return DUET_OK;
    }
    if (!duet__cfg_is_int_type(s->type)) return duet__cfg_wrong_type(cfg, s, "an integer");
    *out = duet__cfg_int_value(s);
    return DUET_OK;
}

int duet_config_get_int(duet_config *cfg, const char *path, int64_t *out) {
    return get_int_impl(cfg, path, NULL, out);
}

int duet_config_get_int_or(duet_config *cfg, const char *path, int64_t def, int64_t *out) {
    return get_int_impl(cfg, path, &def, out);
}

static int get_double_impl(duet_config *cfg, const char *path, const double *def, double *out) {
    config_setting_t *s;
    bool found;
    DUET_TRY(get_scalar(cfg, path, &found, &s));
    if (!found) {
        if (def == NULL) return duet__cfg_missing(cfg, path, "a number");
        *out = *def;
        return DUET_OK;
    }
    if (duet__cfg_is_int_type(s->type)) *out = (double)duet__cfg_int_value(s);
    else if (s->type == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
    else return duet__cfg_wrong_type(cfg, s, "a number");
    if (!isfinite(*out)) return duet__cfg_not_finite(cfg, s, *out);
    return DUET_OK;
}

int duet_config_get_double(duet_config *cfg, const char *path, double *out) {
    return get_double_impl(cfg, path, NULL, out);
}

int duet_config_get_double_or(duet_config *cfg, const char *path, double def, double *out) {
    return get_double_impl(cfg, path, &def, out);
}

/* ---- range-checked getters --------------------------------------------------
 * Every number a consumer narrows or relies on goes through these, so that a
 * bad value is refused where it was read, with its file, line and key. */

static int out_of_range(duet_config *cfg, const char *path, const char *range, const char *got) {
    config_setting_t *s = NULL;
    char *where = duet__cfg_full_path(cfg, path), *loc = NULL;
    if (duet__cfg_walk(cfg, path, &s) == DUET_OK && s != NULL) loc = duet__cfg_setting_loc(cfg, s);
    int rc = duet__error(DUET_ECONFIG, "%s: '%s' must be %s, got %s",
                         loc != NULL ? loc : cfg->core->name, where != NULL ? where : path, range,
                         got);
    free(where);
    free(loc);
    return rc;
}

static int check_int_range(duet_config *cfg, const char *path, int64_t min, int64_t max,
                           int64_t v) {
    if (v >= min && v <= max) return DUET_OK;
    char range[96], got[32];
    if (max == INT64_MAX) snprintf(range, sizeof range, ">= %" PRId64, min);
    else if (min == INT64_MIN) snprintf(range, sizeof range, "<= %" PRId64, max);
    else snprintf(range, sizeof range, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
    snprintf(got, sizeof got, "%" PRId64, v);
    return out_of_range(cfg, path, range, got);
}

static int check_double_range(duet_config *cfg, const char *path, double min, double max,
                              double v) {
    if (v >= min && v <= max) return DUET_OK;
    char range[96], got[32];
    /* DBL_TRUE_MIN as the lower bound reads "> 0". */
    char lo[40];
    if (min == DBL_TRUE_MIN) snprintf(lo, sizeof lo, "> 0");
    else snprintf(lo, sizeof lo, ">= %g", min);
    if (max == DBL_MAX) snprintf(range, sizeof range, "%s", lo);
    else snprintf(range, sizeof range, "%s and <= %g", lo, max);
    snprintf(got, sizeof got, "%g", v);
    return out_of_range(cfg, path, range, got);
}

int duet_config_get_int_in(duet_config *cfg, const char *path, int64_t min, int64_t max,
                           int64_t *out) {
    int64_t v = 0;
    DUET_TRY(get_int_impl(cfg, path, NULL, &v));
    DUET_TRY(check_int_range(cfg, path, min, max, v));
    *out = v;
    return DUET_OK;
}

int duet_config_get_int_in_or(duet_config *cfg, const char *path, int64_t def, int64_t min,
                              int64_t max, int64_t *out) {
    int64_t v = 0;
    DUET_TRY(get_int_impl(cfg, path, &def, &v));
    if (duet_config_has(cfg, path)) DUET_TRY(check_int_range(cfg, path, min, max, v));
    *out = v;
    return DUET_OK;
}

int duet_config_get_double_in(duet_config *cfg, const char *path, double min, double max,
                              double *out) {
    double v = 0;
    DUET_TRY(get_double_impl(cfg, path, NULL, &v));
    DUET_TRY(check_double_range(cfg, path, min, max, v));
    *out = v;
    return DUET_OK;
}

int duet_config_get_double_in_or(duet_config *cfg, const char *path, double def, double min,
                                 double max, double *out) {
    double v = 0;
    DUET_TRY(get_double_impl(cfg, path, &def, &v));
    if (duet_config_has(cfg, path)) DUET_TRY(check_double_range(cfg, path, min, max, v));
    *out = v;
    return DUET_OK;
}

static int get_bool_impl(duet_config *cfg, const char *path, const bool *def, bool *out) {
    config_setting_t *s;
    bool found;
    DUET_TRY(get_scalar(cfg, path, &found, &s));
    if (!found) {
        if (def == NULL) return duet__cfg_missing(cfg, path, "true or false");
        *out = *def;
        return DUET_OK;
    }
    if (s->type != CONFIG_TYPE_BOOL) return duet__cfg_wrong_type(cfg, s, "true or false");
    *out = config_setting_get_bool(s) != 0;
    return DUET_OK;
}

int duet_config_get_bool(duet_config *cfg, const char *path, bool *out) {
    return get_bool_impl(cfg, path, NULL, out);
}

int duet_config_get_bool_or(duet_config *cfg, const char *path, bool def, bool *out) {
    return get_bool_impl(cfg, path, &def, out);
}

static int get_string_impl(duet_config *cfg, const char *path, bool has_def, const char *def,
                           const char **out) {
    config_setting_t *s;
    bool found;
    DUET_TRY(get_scalar(cfg, path, &found, &s));
    if (!found) {
        if (!has_def) return duet__cfg_missing(cfg, path, "a string");
        *out = def;
        return DUET_OK;
    }
    if (s->type != CONFIG_TYPE_STRING) return duet__cfg_wrong_type(cfg, s, "a string");
    *out = config_setting_get_string(s);
    return DUET_OK;
}

int duet_config_get_string(duet_config *cfg, const char *path, const char **out) {
    return get_string_impl(cfg, path, false, NULL, out);
}

int duet_config_peek_string(const duet_config *cfg, const char *path, const char **out) {
    config_setting_t *s = NULL;
    DUET_TRY(duet__cfg_walk(cfg, path, &s));
    *out = s != NULL && s->type == CONFIG_TYPE_STRING ? config_setting_get_string(s) : NULL;
    return DUET_OK;
}

int duet_config_get_string_or(duet_config *cfg, const char *path, const char *def,
                              const char **out) {
    return get_string_impl(cfg, path, true, def, out);
}

/* Shared body of the array getters: finds an array or list of at most cap
 * elements, all accepted by `ok`, and marks it used. */
static int get_elems(duet_config *cfg, const char *path, size_t cap, const char *what,
                     bool (*ok)(int type), config_setting_t **s, size_t *n) {
    DUET_TRY(duet__cfg_lookup(cfg, path, s));
    char desc[64];
    snprintf(desc, sizeof desc, "an array of %s", what);
    if (*s == NULL) return duet__cfg_missing(cfg, path, desc);
    if ((*s)->type != CONFIG_TYPE_ARRAY && (*s)->type != CONFIG_TYPE_LIST)
        return duet__cfg_wrong_type(cfg, *s, desc);
    size_t len = (size_t)config_setting_length(*s);
    if (len > cap)
        return duet__cfg_error_at(cfg, *s, "has %zu elements; at most %zu are allowed", len, cap);
    for (size_t i = 0; i < len; i++) {
        const config_setting_t *e = config_setting_get_elem(*s, (unsigned)i);
        if (!ok(e->type)) {
            /* The element's line, the array's name. */
            char *loc = duet__cfg_setting_loc(cfg, e), *where = duet__cfg_setting_path(*s);
            int rc = loc == NULL || where == NULL
                         ? duet__error(DUET_ENOMEM, "config: out of memory for a message")
                         : duet__error(DUET_ECONFIG, "%s: '%s' must be %s, but element %zu is %s",
                                       loc, where, desc, i, duet__cfg_kind_phrase(e->type));
            free(loc);
            free(where);
            return rc;
        }
    }
    *n = len;
    DUET_TRY(duet__cfg_mark(cfg, *s));
    /* A list's elements are settings of their own: mark them too. */
    for (size_t i = 0; i < len; i++) DUET_TRY(duet__cfg_mark(cfg, config_setting_get_elem(*s, (unsigned)i)));
    return DUET_OK;
}

static bool ok_int(int type) { return duet__cfg_is_int_type(type); }
bool duet__cfg_ok_number(int type) { return duet__cfg_is_int_type(type) || type == CONFIG_TYPE_FLOAT; }
static bool ok_string(int type) { return type == CONFIG_TYPE_STRING; }

int duet_config_get_int_array(duet_config *cfg, const char *path, int64_t *out, size_t cap,
                              size_t *n) {
    config_setting_t *s;
    DUET_TRY(get_elems(cfg, path, cap, "integers", ok_int, &s, n));
    for (size_t i = 0; i < *n; i++) out[i] = duet__cfg_int_value(config_setting_get_elem(s, (unsigned)i));
    return DUET_OK;
}

int duet_config_get_double_array(duet_config *cfg, const char *path, double *out, size_t cap,
                                 size_t *n) {
    config_setting_t *s;
    DUET_TRY(get_elems(cfg, path, cap, "numbers", duet__cfg_ok_number, &s, n));
    for (size_t i = 0; i < *n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        out[i] = duet__cfg_is_int_type(e->type) ? (double)duet__cfg_int_value(e) : config_setting_get_float(e);
        if (!isfinite(out[i])) return duet__cfg_not_finite(cfg, e, out[i]);
    }
    return DUET_OK;
}

int duet_config_get_string_array(duet_config *cfg, const char *path, const char **out,
                                 size_t cap, size_t *n) {
    config_setting_t *s;
    DUET_TRY(get_elems(cfg, path, cap, "strings", ok_string, &s, n));
    for (size_t i = 0; i < *n; i++)
        out[i] = config_setting_get_string(config_setting_get_elem(s, (unsigned)i));
    return DUET_OK;
}

int duet_config_length(duet_config *cfg, const char *path, size_t *n) {
    config_setting_t *s;
    DUET_TRY(duet__cfg_lookup(cfg, path, &s));
    if (s == NULL) return duet__cfg_missing(cfg, path, "a group, list or array");
    if (!config_setting_is_aggregate(s)) return duet__cfg_wrong_type(cfg, s, "a group, list or array");
    *n = (size_t)config_setting_length(s);
    return DUET_OK;
}

int duet_config_member_name(duet_config *cfg, const char *path, size_t i, const char **name) {
    config_setting_t *s;
    DUET_TRY(duet__cfg_lookup(cfg, path, &s));
    if (s == NULL) return duet__cfg_missing(cfg, path, "a group");
    if (s->type != CONFIG_TYPE_GROUP) return duet__cfg_wrong_type(cfg, s, "a group");
    if (i >= (size_t)config_setting_length(s)) {
        char *full = duet__cfg_full_path(cfg, path);
        int rc = duet__error(DUET_EINVAL, "config %s: member %zu of '%s' requested; it has %d",
                             cfg->core->name, i, full != NULL ? full : path,
                             config_setting_length(s));
        free(full);
        return rc;
    }
    *name = config_setting_name(config_setting_get_elem(s, (unsigned)i));
    return DUET_OK;
}

int duet_config_mark_used(duet_config *cfg, const char *path) {
    config_setting_t *s;
    /* Not a consumer's name: walk without remembering it for did-you-mean. */
    DUET_TRY(duet__cfg_walk(cfg, path, &s));
    if (s == NULL) return duet__cfg_missing(cfg, path, "any value");
    return duet__cfg_mark(cfg, s);
}
