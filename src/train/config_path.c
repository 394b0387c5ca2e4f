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
#include <string.h>
#include <strings.h>

#include "train/config_internal.h"

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
void duet__cfg_setting_path(const config_setting_t *s, char *buf, size_t size) {
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
void duet__cfg_setting_loc(const duet_config *cfg, const config_setting_t *s, char *buf,
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
void duet__cfg_full_path(const duet_config *cfg, const char *path, char *buf, size_t size) {
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
        if (duet__cfg_is_index_token(tok, len, &idx)) {
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
        char full[CFG_PATH_MAX];
        if (len == 0 || len >= 256) {
            duet__cfg_full_path(cfg, path, full, sizeof full);
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
            if (!duet__cfg_is_index_token(tok, len, &idx)) {
                char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
                duet__cfg_setting_path(s, where, sizeof where);
                duet__cfg_setting_loc(cfg, s, loc, sizeof loc);
                return duet__error(DUET_ECONFIG, "%s: '%s' is %s: index it with [i], not "
                                   "'%.*s'", loc, where, duet__cfg_kind_phrase(s->type), (int)len, tok);
            }
            s = idx < config_setting_length(s) ? config_setting_get_elem(s, (unsigned)idx)
                                               : NULL;
        } else {
            char where[CFG_PATH_MAX], loc[CFG_PATH_MAX];
            duet__cfg_setting_path(s, where, sizeof where);
            duet__cfg_setting_loc(cfg, s, loc, sizeof loc);
            duet__cfg_full_path(cfg, path, full, sizeof full);
            return duet__error(DUET_ECONFIG, "%s: '%s' is %s, not a group, so '%s' cannot "
                               "exist", loc, where, duet__cfg_kind_phrase(s->type), full);
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
