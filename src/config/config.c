/* Config files: loading (libconfig, @include, the integer-literal check),
 * views (duet_config_sub) and their shared core. */
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

/* After libconfig has read the text: takes its new root and refuses inf and
 * nan (1e999 reads as inf), naming the key and line, so that no value duet
 * keeps is one it could not write back. cfg is destroyed on error. */
static int finish_read(duet_config *cfg, duet_config **out) {
    cfg->root = config_root_setting(&cfg->core->lc); /* reading replaces the root */
    const config_setting_t *bad = duet__cfg_first_not_finite(cfg->root);
    if (bad != NULL) {
        int rc = duet__cfg_not_finite(cfg, bad, config_setting_get_float(bad));
        duet_config_destroy(cfg);
        return rc;
    }
    *out = cfg;
    return DUET_OK;
}

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
    DUET_TRY(finish_read(cfg, out));
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
    DUET_TRY(finish_read(cfg, out));
    return DUET_OK;
}

int duet_config_sub(duet_config *cfg, const char *path, duet_config **out) {
    *out = NULL;
    config_setting_t *s;
    DUET_TRY(duet__cfg_lookup(cfg, path, &s));
    if (s == NULL) return duet__cfg_missing(cfg, path, "a group");
    if (s->type != CONFIG_TYPE_GROUP && s->type != CONFIG_TYPE_LIST)
        return duet__cfg_wrong_type(cfg, s, "a group");
    duet_config *v = calloc(1, sizeof *v);
    char *where = duet__cfg_setting_path(s);
    char *prefix = where == NULL ? NULL : where[0] != '\0' ? duet__strf("%s.", where) : duet__strdup("");
    free(where);
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
