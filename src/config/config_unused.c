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

/* Every setting no getter read, in file order, into out[0..*n) (at most
 * max; *total counts them all). */
static void collect_unused(const config_setting_t *s, const config_setting_t **out, size_t max,
                           size_t *n, size_t *total) {
    const cfg_note *note = config_setting_get_hook(s);
    if (note != NULL && note->used) return;
    if (s->type == CONFIG_TYPE_GROUP || s->type == CONFIG_TYPE_LIST) {
        int len = config_setting_length(s);
        for (int i = 0; i < len; i++)
            collect_unused(config_setting_get_elem(s, (unsigned)i), out, max, n, total);
        return;
    }
    if (*n < max) out[(*n)++] = s;
    (*total)++;
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

/* "loc: unknown key 'path' (did you mean 'x'?)" into b. */
static void describe(const duet_config *cfg, const config_setting_t *u, duet__str *b) {
    char *where = duet__cfg_setting_path(u), *loc = duet__cfg_setting_loc(cfg, u);
    if (where == NULL || loc == NULL) {
        b->failed = true;
    } else {
        const char *alt = did_you_mean(cfg->core, where);
        duet__str_addf(b, "%s: unknown key '%s'%s%s%s", loc, where,
                       alt != NULL ? " (did you mean '" : "", alt != NULL ? alt : "",
                       alt != NULL ? "'?)" : "");
    }
    free(where);
    free(loc);
}

int duet_config_check_unused(const duet_config *cfg) {
    enum { MAX_LISTED = 32 };
    const config_setting_t *u[MAX_LISTED];
    size_t n = 0, total = 0;
    collect_unused(cfg->root, u, MAX_LISTED, &n, &total);
    if (total == 0) return DUET_OK;
    duet__str b = {0};
    if (total == 1) {
        describe(cfg, u[0], &b);
        duet__str_addf(&b, ": no part of duet reads it; remove it or fix its name");
    } else {
        /* Every one at once: a typo must not hide the next. */
        duet__str_addf(&b, "%zu unknown keys (no part of duet reads them; remove them or fix "
                       "their names):", total);
        for (size_t i = 0; i < n; i++) {
            duet__str_addf(&b, "\n  ");
            describe(cfg, u[i], &b);
        }
        if (total > n) duet__str_addf(&b, "\n  and %zu more", total - n);
    }
    int rc = b.failed ? duet__error(DUET_ENOMEM, "config: out of memory for a message")
                      : duet__error(DUET_ECONFIG, "%s", duet__str_get(&b));
    duet__str_free(&b);
    return rc;
}