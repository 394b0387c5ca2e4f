/* Config files: libconfig parsing, --set overrides that keep types, typed
 * getters by dotted path, unknown-key detection, and the config as text.
 *
 * Each libconfig setting may carry a note (through its hook pointer) saying
 * whether a getter read it and, for settings created by --set, which
 * assignment made them. Notes and the paths getters asked for live in the
 * shared core; views (duet_config_sub) hold a reference to it. */
#include "duet/train.h"

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

#include "train/config_internal.h"

#define CFG_PATH_MAX 1024

typedef struct cfg_note {
    bool used;
    char *origin; /* "--set a.b=1" for settings an override created */
    struct cfg_note *next;
} cfg_note;

typedef struct {
    config_t lc;
    char *name;
    char *include_dir;
    cfg_note *notes;
    char **asked; /* canonical full paths getters asked for */
    size_t nasked, capasked;
    int refs;
} cfg_core;

struct duet_config {
    cfg_core *core;
    config_setting_t *root;
    char *prefix; /* "" or "model.generator." */
};

/* ---- names, locations, messages ----------------------------------------- */

static const char *kind_phrase(int type) {
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
static const char *kind_plural(int type) {
    switch (type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "integers";
    case CONFIG_TYPE_FLOAT: return "floats";
    case CONFIG_TYPE_BOOL: return "booleans";
    case CONFIG_TYPE_STRING: return "strings";
    }
    return "values";
}

static bool is_int_type(int type) { return type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64; }

/* Appends to buf[at..size), keeping it terminated; returns the new length
 * (clamped). */
static size_t append(char *buf, size_t size, size_t at, const char *s) {
    size_t n = strlen(s);
    if (at + n >= size) n = at < size - 1 ? size - 1 - at : 0;
    memcpy(buf + at, s, n);
    buf[at + n] = '\0';
    return at + n;
}

/* Full dotted path of a setting from the config root ("model.generator",
 * "data.pipeline.[0].type"); "" for the root. */
static void setting_path(const config_setting_t *s, char *buf, size_t size) {
    const config_setting_t *chain[64];
    int n = 0;
    for (const config_setting_t *p = s; p != NULL && p->parent != NULL && n < 64; p = p->parent)
        chain[n++] = p;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = n - 1; i >= 0; i--) {
        if (at > 0) at = append(buf, size, at, ".");
        if (chain[i]->name != NULL) {
            at = append(buf, size, at, chain[i]->name);
        } else {
            char idx[32];
            snprintf(idx, sizeof idx, "[%d]", config_setting_index(chain[i]));
            at = append(buf, size, at, idx);
        }
    }
}

/* Where a setting came from: "configs/x.cfg:12", "--set a.b=1" or the
 * config's name. */
static void setting_loc(const duet_config *cfg, const config_setting_t *s, char *buf,
                        size_t size) {
    const cfg_note *note = config_setting_get_hook(s);
    if (note != NULL && note->origin != NULL) {
        snprintf(buf, size, "%s", note->origin);
        return;
    }
    const char *file = config_setting_source_file(s);
    unsigned line = config_setting_source_line(s);
    if (file == NULL) file = cfg->core->name;
    if (line > 0) snprintf(buf, size, "%s:%u", file, line);
    else snprintf(buf, size, "%s", file);
}

static bool is_index_token(const char *tok, size_t len, long *index) {
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
static void full_path(const duet_config *cfg, const char *path, char *buf, size_t size) {
    size_t at = append(buf, size, 0, cfg->prefix);
    if (path[0] == '\0') {
        if (at > 0 && buf[at - 1] == '.') buf[at - 1] = '\0';
        return;
    }
    const char *tok = path;
    for (;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot != NULL ? (size_t)(dot - tok) : strlen(tok);
        long idx;
        char piece[CFG_PATH_MAX];
        if (is_index_token(tok, len, &idx)) {
            snprintf(piece, sizeof piece, "[%ld]", idx);
        } else {
            if (len >= sizeof piece) len = sizeof piece - 1;
            memcpy(piece, tok, len);
            piece[len] = '\0';
        }
        at = append(buf, size, at, piece);
        if (dot == NULL) break;
        at = append(buf, size, at, ".");
        tok = dot + 1;
    }
}

/* ---- path walking --------------------------------------------------------- */

/* Finds `path` under `root`. *out is NULL when absent; DUET_ECONFIG when the
 * path is malformed or runs through a scalar. */
static int walk_from(const duet_config *cfg, config_setting_t *root, const char *path,
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
        char full[CFG_PATH_MAX];
        if (len == 0 || len >= 256) {
            full_path(cfg, path, full, sizeof full);
            return duet__error(DUET_ECONFIG, "%s: malformed key path '%s'", cfg->core->name,
                               full);
        }
        long idx;
        if (s->type == CONFIG_TYPE_GROUP) {
            char name[256];
            memcpy(name, tok, len);
            name[len] = '\0';
            s = config_setting_get_member(s, name);
        } else if (s->type == CONFIG_TYPE_LIST || s->type == CONFIG_TYPE_ARRAY) {
            if (!is_index_token(tok, len, &idx)) {
                char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
                setting_path(s, where, sizeof where);
                setting_loc(cfg, s, loc, sizeof loc);
                return duet__error(DUET_ECONFIG, "%s: '%s' is %s: index it with [i], not "
                                   "'%.*s'", loc, where, kind_phrase(s->type), (int)len, tok);
            }
            s = idx < config_setting_length(s) ? config_setting_get_elem(s, (unsigned)idx)
                                               : NULL;
        } else {
            char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
            setting_path(s, where, sizeof where);
            setting_loc(cfg, s, loc, sizeof loc);
            full_path(cfg, path, full, sizeof full);
            return duet__error(DUET_ECONFIG, "%s: '%s' is %s, not a group, so '%s' cannot "
                               "exist", loc, where, kind_phrase(s->type), full);
        }
        if (s == NULL || dot == NULL) break;
        tok = dot + 1;
    }
    *out = s;
    return DUET_OK;
}

static int walk(const duet_config *cfg, const char *path, config_setting_t **out) {
    return walk_from(cfg, cfg->root, path, out);
}

/* ---- notes: used flags and the paths consumers asked for ------------------ */

static cfg_note *note_of(cfg_core *core, config_setting_t *s) {
    cfg_note *note = config_setting_get_hook(s);
    if (note != NULL) return note;
    note = calloc(1, sizeof *note);
    if (note == NULL) return NULL;
    note->next = core->notes;
    core->notes = note;
    config_setting_set_hook(s, note);
    return note;
}

static int mark(duet_config *cfg, config_setting_t *s) {
    for (; s != NULL; s = s->parent) {
        cfg_note *note = note_of(cfg->core, s);
        if (note == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
        note->used = true;
        /* An array is one value: reading an element reads the array. */
        if (s->parent == NULL || s->parent->type != CONFIG_TYPE_ARRAY) break;
    }
    return DUET_OK;
}

static void remember_asked(duet_config *cfg, const char *path) {
    cfg_core *core = cfg->core;
    char full[CFG_PATH_MAX];
    full_path(cfg, path, full, sizeof full);
    for (size_t i = 0; i < core->nasked; i++)
        if (strcmp(core->asked[i], full) == 0) return;
    if (core->nasked == core->capasked) {
        size_t cap = core->capasked > 0 ? 2 * core->capasked : 64;
        char **grown = realloc(core->asked, cap * sizeof *grown);
        if (grown == NULL) return; /* only loses a did-you-mean hint */
        core->asked = grown;
        core->capasked = cap;
    }
    char *copy = duet__strdup(full);
    if (copy != NULL) core->asked[core->nasked++] = copy;
}

/* Walks for a getter: remembers the path, then finds the setting. */
static int lookup(duet_config *cfg, const char *path, config_setting_t **s) {
    remember_asked(cfg, path);
    return walk(cfg, path, s);
}

static int missing(const duet_config *cfg, const char *path, const char *what) {
    char full[CFG_PATH_MAX];
    full_path(cfg, path, full, sizeof full);
    return duet__error(DUET_ECONFIG, "%s: missing key '%s' (%s)", cfg->core->name, full, what);
}

static int wrong_type(const duet_config *cfg, const config_setting_t *s, const char *what) {
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
    setting_path(s, where, sizeof where);
    setting_loc(cfg, s, loc, sizeof loc);
    return duet__error(DUET_ECONFIG, "%s: '%s' must be %s, got %s", loc, where, what,
                       kind_phrase(s->type));
}

/* libconfig reads 1e999 as inf; no duet setting means inf or nan. */
static int not_finite(const duet_config *cfg, const config_setting_t *s, double v) {
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
    setting_path(s, where, sizeof where);
    setting_loc(cfg, s, loc, sizeof loc);
    return duet__error(DUET_ECONFIG, "%s: '%s' must be a finite number, got %g (too large for "
                       "a double?)", loc, where, v);
}

/* ---- create / destroy ------------------------------------------------------ */

static int core_create(const char *name, duet_config **out) {
    *out = NULL;
    duet_config *cfg = calloc(1, sizeof *cfg);
    cfg_core *core = calloc(1, sizeof *core);
    char *nm = duet__strdup(name), *prefix = duet__strdup("");
    if (cfg == NULL || core == NULL || nm == NULL || prefix == NULL) {
        free(cfg);
        free(core);
        free(nm);
        free(prefix);
        return duet__error(DUET_ENOMEM, "config %s: out of memory", name);
    }
    config_init(&core->lc);
    core->name = nm;
    core->refs = 1;
    cfg->core = core;
    cfg->prefix = prefix;
    cfg->root = config_root_setting(&core->lc);
    *out = cfg;
    return DUET_OK;
}

static void core_release(cfg_core *core) {
    if (--core->refs > 0) return;
    config_destroy(&core->lc);
    for (cfg_note *n = core->notes, *next; n != NULL; n = next) {
        next = n->next;
        free(n->origin);
        free(n);
    }
    for (size_t i = 0; i < core->nasked; i++) free(core->asked[i]);
    free(core->asked);
    free(core->include_dir);
    free(core->name);
    free(core);
}

void duet_config_destroy(duet_config *cfg) {
    if (cfg == NULL) return;
    core_release(cfg->core);
    free(cfg->prefix);
    free(cfg);
}

const char *duet_config_name(const duet_config *cfg) { return cfg->core->name; }

int duet_config_load(const char *path, duet_config **out) {
    DUET_ASSERT(path != NULL && out != NULL);
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return duet__error(DUET_EIO, "%s: cannot open config: %s", path, strerror(errno));
    fclose(f);
    duet_config *cfg;
    DUET_TRY(core_create(path, &cfg));
    cfg_core *core = cfg->core;
    char *copy = duet__strdup(path);
    if (copy == NULL) {
        duet_config_destroy(cfg);
        return duet__error(DUET_ENOMEM, "config %s: out of memory", path);
    }
    core->include_dir = duet__strdup(dirname(copy));
    free(copy);
    if (core->include_dir != NULL) config_set_include_dir(&core->lc, core->include_dir);
    int wrc = duet__config_check_int_literals_file(path, core->include_dir);
    if (wrc != DUET_OK) {
        duet_config_destroy(cfg);
        return wrc;
    }
    if (config_read_file(&core->lc, path) != CONFIG_TRUE) {
        const char *file = config_error_file(&core->lc);
        int rc;
        if (config_error_type(&core->lc) == CONFIG_ERR_FILE_IO)
            rc = duet__error(DUET_EIO, "%s: cannot read config: %s", file != NULL ? file : path,
                             config_error_text(&core->lc));
        else
            rc = duet__error(DUET_ECONFIG, "%s:%d: %s", file != NULL ? file : path,
                             config_error_line(&core->lc), config_error_text(&core->lc));
        duet_config_destroy(cfg);
        return rc;
    }
    cfg->root = config_root_setting(&cfg->core->lc); /* reading replaces the root */
    *out = cfg;
    return DUET_OK;
}

int duet_config_load_string(const char *text, const char *name, duet_config **out) {
    DUET_ASSERT(text != NULL && out != NULL);
    *out = NULL;
    if (name == NULL) name = "<string>";
    duet_config *cfg;
    DUET_TRY(core_create(name, &cfg));
    int wrc = duet__config_check_int_literals(text, name, NULL);
    if (wrc != DUET_OK) {
        duet_config_destroy(cfg);
        return wrc;
    }
    if (config_read_string(&cfg->core->lc, text) != CONFIG_TRUE) {
        int rc = duet__error(DUET_ECONFIG, "%s:%d: %s", name, config_error_line(&cfg->core->lc),
                             config_error_text(&cfg->core->lc));
        duet_config_destroy(cfg);
        return rc;
    }
    cfg->root = config_root_setting(&cfg->core->lc);
    *out = cfg;
    return DUET_OK;
}

int duet_config_sub(duet_config *cfg, const char *path, duet_config **out) {
    *out = NULL;
    config_setting_t *s;
    DUET_TRY(lookup(cfg, path, &s));
    if (s == NULL) return missing(cfg, path, "a group");
    if (s->type != CONFIG_TYPE_GROUP && s->type != CONFIG_TYPE_LIST)
        return wrong_type(cfg, s, "a group");
    duet_config *v = calloc(1, sizeof *v);
    char where[CFG_PATH_MAX];
    setting_path(s, where, sizeof where - 1);
    if (where[0] != '\0') strcat(where, ".");
    char *prefix = duet__strdup(where);
    if (v == NULL || prefix == NULL) {
        free(v);
        free(prefix);
        return duet__error(DUET_ENOMEM, "config: out of memory");
    }
    v->core = cfg->core;
    v->core->refs++;
    v->root = s;
    v->prefix = prefix;
    *out = v;
    return DUET_OK;
}

/* ---- getters -------------------------------------------------------------- */

int duet_config_kind(const duet_config *cfg, const char *path) {
    config_setting_t *s;
    if (walk(cfg, path, &s) != DUET_OK || s == NULL) return DUET_CONFIG_NONE;
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

static int64_t int_value(const config_setting_t *s) {
    return s->type == CONFIG_TYPE_INT64 ? (int64_t)config_setting_get_int64(s)
                                        : (int64_t)config_setting_get_int(s);
}

/* Shared body of the scalar getters: *found false when absent. */
static int get_scalar(duet_config *cfg, const char *path, bool *found, config_setting_t **s) {
    DUET_TRY(lookup(cfg, path, s));
    *found = *s != NULL;
    if (*found) DUET_TRY(mark(cfg, *s));
    return DUET_OK;
}

static int get_int_impl(duet_config *cfg, const char *path, const int64_t *def, int64_t *out) {
    config_setting_t *s;
    bool found;
    DUET_TRY(get_scalar(cfg, path, &found, &s));
    if (!found) {
        if (def == NULL) return missing(cfg, path, "an integer");
        *out = *def;
        return DUET_OK;
    }
    if (!is_int_type(s->type)) return wrong_type(cfg, s, "an integer");
    *out = int_value(s);
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
        if (def == NULL) return missing(cfg, path, "a number");
        *out = *def;
        return DUET_OK;
    }
    if (is_int_type(s->type)) *out = (double)int_value(s);
    else if (s->type == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
    else return wrong_type(cfg, s, "a number");
    if (!isfinite(*out)) return not_finite(cfg, s, *out);
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
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
    full_path(cfg, path, where, sizeof where);
    if (walk(cfg, path, &s) == DUET_OK && s != NULL) setting_loc(cfg, s, loc, sizeof loc);
    else snprintf(loc, sizeof loc, "%s", cfg->core->name);
    return duet__error(DUET_ECONFIG, "%s: '%s' must be %s, got %s", loc, where, range, got);
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
        if (def == NULL) return missing(cfg, path, "true or false");
        *out = *def;
        return DUET_OK;
    }
    if (s->type != CONFIG_TYPE_BOOL) return wrong_type(cfg, s, "true or false");
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
        if (!has_def) return missing(cfg, path, "a string");
        *out = def;
        return DUET_OK;
    }
    if (s->type != CONFIG_TYPE_STRING) return wrong_type(cfg, s, "a string");
    *out = config_setting_get_string(s);
    return DUET_OK;
}

int duet_config_get_string(duet_config *cfg, const char *path, const char **out) {
    return get_string_impl(cfg, path, false, NULL, out);
}

int duet_config_get_string_or(duet_config *cfg, const char *path, const char *def,
                              const char **out) {
    return get_string_impl(cfg, path, true, def, out);
}

/* Shared body of the array getters: finds an array or list of at most cap
 * elements, all accepted by `ok`, and marks it used. */
static int get_elems(duet_config *cfg, const char *path, size_t cap, const char *what,
                     bool (*ok)(int type), config_setting_t **s, size_t *n) {
    DUET_TRY(lookup(cfg, path, s));
    char desc[64];
    snprintf(desc, sizeof desc, "an array of %s", what);
    if (*s == NULL) return missing(cfg, path, desc);
    if ((*s)->type != CONFIG_TYPE_ARRAY && (*s)->type != CONFIG_TYPE_LIST)
        return wrong_type(cfg, *s, desc);
    size_t len = (size_t)config_setting_length(*s);
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
    if (len > cap) {
        setting_path(*s, where, sizeof where);
        setting_loc(cfg, *s, loc, sizeof loc);
        return duet__error(DUET_ECONFIG, "%s: '%s' has %zu elements; at most %zu are allowed",
                           loc, where, len, cap);
    }
    for (size_t i = 0; i < len; i++) {
        const config_setting_t *e = config_setting_get_elem(*s, (unsigned)i);
        if (!ok(e->type)) {
            setting_path(*s, where, sizeof where);
            setting_loc(cfg, e, loc, sizeof loc);
            return duet__error(DUET_ECONFIG, "%s: '%s' must be %s, but element %zu is %s", loc,
                               where, desc, i, kind_phrase(e->type));
        }
    }
    *n = len;
    DUET_TRY(mark(cfg, *s));
    /* A list's elements are settings of their own: mark them too. */
    for (size_t i = 0; i < len; i++) DUET_TRY(mark(cfg, config_setting_get_elem(*s, (unsigned)i)));
    return DUET_OK;
}

static bool ok_int(int type) { return is_int_type(type); }
static bool ok_number(int type) { return is_int_type(type) || type == CONFIG_TYPE_FLOAT; }
static bool ok_string(int type) { return type == CONFIG_TYPE_STRING; }

int duet_config_get_int_array(duet_config *cfg, const char *path, int64_t *out, size_t cap,
                              size_t *n) {
    config_setting_t *s;
    DUET_TRY(get_elems(cfg, path, cap, "integers", ok_int, &s, n));
    for (size_t i = 0; i < *n; i++) out[i] = int_value(config_setting_get_elem(s, (unsigned)i));
    return DUET_OK;
}

int duet_config_get_double_array(duet_config *cfg, const char *path, double *out, size_t cap,
                                 size_t *n) {
    config_setting_t *s;
    DUET_TRY(get_elems(cfg, path, cap, "numbers", ok_number, &s, n));
    for (size_t i = 0; i < *n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        out[i] = is_int_type(e->type) ? (double)int_value(e) : config_setting_get_float(e);
        if (!isfinite(out[i])) return not_finite(cfg, e, out[i]);
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
    DUET_TRY(lookup(cfg, path, &s));
    if (s == NULL) return missing(cfg, path, "a group, list or array");
    if (!config_setting_is_aggregate(s)) return wrong_type(cfg, s, "a group, list or array");
    *n = (size_t)config_setting_length(s);
    return DUET_OK;
}

int duet_config_member_name(duet_config *cfg, const char *path, size_t i, const char **name) {
    config_setting_t *s;
    DUET_TRY(lookup(cfg, path, &s));
    if (s == NULL) return missing(cfg, path, "a group");
    if (s->type != CONFIG_TYPE_GROUP) return wrong_type(cfg, s, "a group");
    if (i >= (size_t)config_setting_length(s)) {
        char full[CFG_PATH_MAX];
        full_path(cfg, path, full, sizeof full);
        return duet__error(DUET_EINVAL, "config %s: member %zu of '%s' requested; it has %d",
                           cfg->core->name, i, full, config_setting_length(s));
    }
    *name = config_setting_name(config_setting_get_elem(s, (unsigned)i));
    return DUET_OK;
}

int duet_config_mark_used(duet_config *cfg, const char *path) {
    config_setting_t *s;
    /* Not a consumer's name: walk without remembering it for did-you-mean. */
    DUET_TRY(walk(cfg, path, &s));
    if (s == NULL) return missing(cfg, path, "any value");
    return mark(cfg, s);
}

/* ---- unknown keys ---------------------------------------------------------- */

static const config_setting_t *first_unused(const config_setting_t *s) {
    const cfg_note *note = config_setting_get_hook(s);
    if (note != NULL && note->used) return NULL;
    if (s->type == CONFIG_TYPE_GROUP || s->type == CONFIG_TYPE_LIST) {
        int n = config_setting_length(s);
        for (int i = 0; i < n; i++) {
            const config_setting_t *u = first_unused(config_setting_get_elem(s, (unsigned)i));
            if (u != NULL) return u;
        }
        return NULL;
    }
    return s;
}

static size_t edit_distance(const char *a, const char *b) {
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

/* The name consumers asked for under the same parent that is closest to the
 * unknown key, or NULL when none is close. */
static const char *did_you_mean(const cfg_core *core, const char *path) {
    const char *dot = strrchr(path, '.');
    size_t plen = dot != NULL ? (size_t)(dot - path) + 1 : 0;
    const char *name = path + plen;
    const char *best = NULL;
    size_t best_d = strlen(name) / 3 > 2 ? strlen(name) / 3 : 2;
    for (size_t i = 0; i < core->nasked; i++) {
        const char *a = core->asked[i];
        const char *adot = strrchr(a, '.');
        size_t alen = adot != NULL ? (size_t)(adot - a) + 1 : 0;
        if (alen != plen || strncmp(a, path, plen) != 0) continue;
        size_t d = edit_distance(name, a + alen);
        if (d > 0 && d <= best_d) {
            best = a + alen;
            best_d = d;
            if (d == 1) break;
        }
    }
    return best;
}

int duet_config_check_unused(const duet_config *cfg) {
    const config_setting_t *u = first_unused(cfg->root);
    if (u == NULL) return DUET_OK;
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX], hint[300] = "";
    setting_path(u, where, sizeof where);
    setting_loc(cfg, u, loc, sizeof loc);
    const char *alt = did_you_mean(cfg->core, where);
    if (alt != NULL) snprintf(hint, sizeof hint, " (did you mean '%s'?)", alt);
    return duet__error(DUET_ECONFIG, "%s: unknown key '%s'%s: no part of duet reads it; remove "
                       "it or fix its name", loc, where, hint);
}

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
        int ok = config_read_string(tmp, src);
        free(src);
        if (ok != CONFIG_TRUE)
            return duet__error(DUET_ECONFIG, "--set %s: cannot parse the value: %s",
                               assignment, config_error_text(tmp));
        v = config_setting_get_member(config_root_setting(tmp), "v");
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
    cfg_note *note = note_of(core, s);
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
    case CONFIG_TYPE_INT: config_setting_set_int(s, (int)int_value(src)); break;
    case CONFIG_TYPE_INT64: config_setting_set_int64(s, int_value(src)); break;
    case CONFIG_TYPE_FLOAT:
        config_setting_set_float(s, is_int_type(src->type) ? (double)int_value(src)
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

static int cannot_set(const duet_config *cfg, const config_setting_t *dst,
                      const config_setting_t *src, const char *assignment) {
    char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
    setting_path(dst, where, sizeof where);
    setting_loc(cfg, dst, loc, sizeof loc);
    return duet__error(DUET_ECONFIG, "--set %s: '%s' is %s (%s); cannot set it to %s",
                       assignment, where, kind_phrase(dst->type), loc, kind_phrase(src->type));
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
    if (dt == CONFIG_TYPE_INT && is_int_type(st) && !fits_int32(int_value(src))) {
        /* A 32-bit key given a 64-bit value becomes a 64-bit key. */
        config_setting_t *parent = dst->parent;
        if (parent == NULL || parent->type != CONFIG_TYPE_GROUP || dst->name == NULL)
            return cannot_set(cfg, dst, src, assignment);
        char name[256];
        snprintf(name, sizeof name, "%s", dst->name);
        config_setting_remove(parent, name);
        return copy_new(core, parent, name, src, assignment, CONFIG_TYPE_INT64);
    }
    if ((is_int_type(dt) && is_int_type(st)) || (dt == CONFIG_TYPE_FLOAT && ok_number(st)) ||
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
        bool compatible = srct == et || (is_int_type(et) && is_int_type(srct)) ||
                          (et == CONFIG_TYPE_FLOAT && is_int_type(srct));
        if (!compatible) {
            char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
            setting_path(dst, where, sizeof where);
            setting_loc(cfg, dst, loc, sizeof loc);
            return duet__error(DUET_ECONFIG, "--set %s: '%s' is an array of %s (%s); cannot "
                               "set it to an array of %s", assignment, where,
                               kind_plural(et), loc, kind_plural(srct));
        }
        bool wide = false;
        for (int i = 0; i < n && is_int_type(et); i++)
            wide |= !fits_int32(int_value(config_setting_get_elem(src, (unsigned)i)));
        if (is_int_type(et)) et = wide ? CONFIG_TYPE_INT64 : CONFIG_TYPE_INT;
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

/* libconfig's names: a letter or '*', then letters, digits, '_', '-', '*'. */
static bool valid_name(const char *tok, size_t len) {
    if (len == 0 || !(isalpha((unsigned char)tok[0]) || tok[0] == '*')) return false;
    for (size_t i = 1; i < len; i++)
        if (!isalnum((unsigned char)tok[i]) && !strchr("_-*", tok[i])) return false;
    return true;
}

static int apply_set(duet_config *cfg, const char *assignment, char *key, const char *value,
                     config_t *tmp) {
    if (key[0] == '\0')
        return duet__error(DUET_ECONFIG, "--set %s: empty key", assignment);
    /* Check every name first, so that a bad key changes nothing. */
    for (const char *tok = key;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot != NULL ? (size_t)(dot - tok) : strlen(tok);
        long idx;
        if (!is_index_token(tok, len, &idx) && !valid_name(tok, len))
            return duet__error(DUET_ECONFIG, "--set %s: '%.*s' is not a valid key name (a "
                               "letter, then letters, digits, '_' or '-')", assignment,
                               (int)len, tok);
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
        DUET_TRY(walk_from(cfg, parent, tok, &next));
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
    DUET_TRY(walk_from(cfg, parent, tok, &dst));
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
    trim(value);
    config_t tmp;
    config_init(&tmp);
    int rc = apply_set(cfg, assignment, key, value, &tmp);
    config_destroy(&tmp);
    free(key);
    free(value);
    return rc;
}

/* ---- text ------------------------------------------------------------------ */

static void write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\x%02x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Shortest %g form that reads back to the same double, always with a '.'
 * or an exponent so that libconfig reads a float. */
static void write_float(FILE *f, double v) {
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (strpbrk(buf, ".eEn") == NULL) strcat(buf, ".0");
    fputs(buf, f);
}

static void write_value(FILE *f, const config_setting_t *s, int indent);

static void write_members(FILE *f, const config_setting_t *g, int indent) {
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        fprintf(f, "%*s%s = ", indent, "", m->name);
        write_value(f, m, indent);
        fputs(";\n", f);
    }
}

static void write_value(FILE *f, const config_setting_t *s, int indent) {
    int n;
    switch (s->type) {
    case CONFIG_TYPE_INT: fprintf(f, "%d", config_setting_get_int(s)); break;
    case CONFIG_TYPE_INT64: fprintf(f, "%lldL", config_setting_get_int64(s)); break;
    case CONFIG_TYPE_FLOAT: write_float(f, config_setting_get_float(s)); break;
    case CONFIG_TYPE_BOOL: fputs(config_setting_get_bool(s) ? "true" : "false", f); break;
    case CONFIG_TYPE_STRING: write_string(f, config_setting_get_string(s)); break;
    case CONFIG_TYPE_GROUP:
        fputs("{\n", f);
        write_members(f, s, indent + 2);
        fprintf(f, "%*s}", indent, "");
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST:
        n = config_setting_length(s);
        fputc(s->type == CONFIG_TYPE_ARRAY ? '[' : '(', f);
        for (int i = 0; i < n; i++) {
            const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
            if (config_setting_is_aggregate(e)) fprintf(f, "\n%*s", indent + 2, "");
            else if (i > 0) fputc(' ', f);
            write_value(f, e, indent + 2);
            if (i + 1 < n) fputc(',', f);
        }
        fputc(s->type == CONFIG_TYPE_ARRAY ? ']' : ')', f);
        break;
    }
}

int duet_config_text(const duet_config *cfg, char **out) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL) return duet__error(DUET_ENOMEM, "config: out of memory for the text");
    write_members(f, config_root_setting(&cfg->core->lc), 0);
    if (fclose(f) != 0) {
        free(buf);
        return duet__error(DUET_ENOMEM, "config: out of memory for the text");
    }
    *out = buf;
    return DUET_OK;
}

/* Added for the runner's value checks (owner of this function: runner). */
void duet_config_where(const duet_config *cfg, const char *path, char *buf, size_t size) {
    config_setting_t *s = NULL;
    if (walk(cfg, path, &s) == DUET_OK && s != NULL)
        setting_loc(cfg, s, buf, size);
    else
        snprintf(buf, size, "%s", cfg->core->name);
}
