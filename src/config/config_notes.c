/* Config notes: the used flag and --set origin each setting carries, the
 * paths getters asked for, and the messages of a failed lookup. */
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

/* ---- notes: used flags and the paths consumers asked for ------------------ */

cfg_note *duet__cfg_note_of(cfg_core *core, config_setting_t *s) {
    cfg_note *note = config_setting_get_hook(s);
    if (note != NULL) return note;
    note = calloc(1, sizeof *note);
    if (note == NULL) return NULL;
    note->next = core->notes;
    core->notes = note;
    config_setting_set_hook(s, note);
    return note;
}

int duet__cfg_mark(duet_config *cfg, config_setting_t *s) {
    for (; s != NULL; s = s->parent) {
        cfg_note *note = duet__cfg_note_of(cfg->core, s);
        if (note == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
        note->used = true;
        /* An array is one value: reading an element reads the array. */
        if (s->parent == NULL || s->parent->type != CONFIG_TYPE_ARRAY) break;
    }
    return DUET_OK;
}

static void remember_asked(duet_config *cfg, const char *path) {
    cfg_core *core = cfg->core;
    /* Out of memory here only loses a did-you-mean hint. */
    char *full = duet__cfg_full_path(cfg, path);
    if (full == NULL) return;
    for (size_t i = 0; i < core->nasked; i++) {
        if (strcmp(core->asked[i], full) == 0) {
            free(full);
            return;
        }
    }
    if (core->nasked == core->capasked) {
        size_t cap = core->capasked > 0 ? 2 * core->capasked : 64;
        char **grown = realloc(core->asked, cap * sizeof *grown);
        if (grown == NULL) {
            free(full);
            return;
        }
        core->asked = grown;
        core->capasked = cap;
    }
    core->asked[core->nasked++] = full;
}

/* Walks for a getter: remembers the path, then finds the setting. */
int duet__cfg_lookup(duet_config *cfg, const char *path, config_setting_t **s) {
    remember_asked(cfg, path);
    return duet__cfg_walk(cfg, path, s);
}

int duet__cfg_missing(const duet_config *cfg, const char *path, const char *what) {
    char *full = duet__cfg_full_path(cfg, path);
    int rc = duet__error(DUET_ECONFIG, "%s: missing key '%s' (%s)", cfg->core->name,
                         full != NULL ? full : path, what);
    free(full);
    return rc;
}

int duet__cfg_wrong_type(const duet_config *cfg, const config_setting_t *s, const char *what) {
    return duet__cfg_error_at(cfg, s, "must be %s, got %s", what, duet__cfg_kind_phrase(s->type));
}

/* libconfig reads 1e999 as inf; no duet setting means inf or nan. */
int duet__cfg_not_finite(const duet_config *cfg, const config_setting_t *s, double v) {
    return duet__cfg_error_at(cfg, s, "must be a finite number, got %g (too large for a "
                              "double?)", v);
}

const config_setting_t *duet__cfg_first_not_finite(const config_setting_t *s) {
    if (s->type == CONFIG_TYPE_FLOAT) return isfinite(config_setting_get_float(s)) ? NULL : s;
    if (!config_setting_is_aggregate(s)) return NULL;
    const int n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *bad =
            duet__cfg_first_not_finite(config_setting_get_elem(s, (unsigned)i));
        if (bad != NULL) return bad;
    }
    return NULL;
}
