/* The config as text (duet_config_text) and a setting's file:line
 * (duet_config_where). */
#include "duet/config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <libconfig.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

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
int duet_config_error(const duet_config *cfg, const char *path, const char *fmt, ...) {
    char *where = NULL;
    DUET_TRY(duet_config_where(cfg, path, &where));
    duet__str msg = {0};
    va_list ap;
    va_start(ap, fmt);
    duet__str_vaddf(&msg, fmt, ap);
    va_end(ap);
    int rc = msg.failed ? duet__error(DUET_ENOMEM, "%s: out of memory for a message", where)
                        : duet__error(DUET_ECONFIG, "%s: %s", where, duet__str_get(&msg));
    free(where);
    duet__str_free(&msg);
    return rc;
}

int duet_config_where(const duet_config *cfg, const char *path, char **out) {
    config_setting_t *s = NULL;
    if (duet__cfg_walk(cfg, path, &s) == DUET_OK && s != NULL)
        *out = duet__cfg_setting_loc(cfg, s);
    else
        *out = duet__strdup(cfg->core->name);
    return *out != NULL ? DUET_OK : duet__error(DUET_ENOMEM, "config: out of memory");
}
