/* Unknown config keys: the first setting no getter read, with a
 * did-you-mean from the paths getters asked for. */
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
        size_t d = duet__edit_distance(name, a + alen);
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
    char *where = duet__cfg_setting_path(u), *loc = duet__cfg_setting_loc(cfg, u);
    if (where == NULL || loc == NULL) {
        free(where);
        free(loc);
        return duet__error(DUET_ENOMEM, "config: out of memory for a message");
    }
    const char *alt = did_you_mean(cfg->core, where);
    int rc = duet__error(DUET_ECONFIG, "%s: unknown key '%s'%s%s%s: no part of duet reads it; "
                         "remove it or fix its name", loc, where,
                         alt != NULL ? " (did you mean '" : "", alt != NULL ? alt : "",
                         alt != NULL ? "'?)" : "");
    free(where);
    free(loc);
    return rc;
}
