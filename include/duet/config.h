/* duet/config.h — config files: libconfig files mirroring MMEditing's python
 * configs, dotted paths, typed getters that mark keys used, overrides and
 * the check for unknown keys.
 *
 * Usage:
 *
 *   duet_config *cfg = NULL;
 *   DUET_TRY(duet_config_load("configs/srgan_x4_tiny.cfg", &cfg));
 *   DUET_TRY(duet_config_set(cfg, "total_iters=2000"));      // --set
 *   int64_t iters, mid;
 *   DUET_TRY(duet_config_get_int(cfg, "total_iters", &iters));
 *   duet_config *gen = NULL;                                   // a view
 *   DUET_TRY(duet_config_sub(cfg, "model.generator", &gen));
 *   DUET_TRY(duet_config_get_int_or(gen, "mid_channels", 64, &mid));
 *   duet_config_destroy(gen);
 *   DUET_TRY(duet_config_check_unused(cfg));  // typos: "unknown key ..."
 *   duet_config_destroy(cfg);
 */
#ifndef DUET_CONFIG_H
#define DUET_CONFIG_H

#include "duet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- config files ---------------------------------------------------------
 * Config files are libconfig files (https://hyperrealm.github.io/libconfig/)
 * mirroring MMEditing's python configs: groups `model`, `data`, `optimizers`,
 * `lr_config`, ..., scalars, arrays `[1, 2]` (one element type) and lists
 * `( {...}, {...} )`. `@include "base.cfg"` resolves relative to the
 * including file's folder.
 *
 * Paths are dotted member names, relative to the handle's root:
 * "model.generator.mid_channels"; list and array elements are "[i]" or "i"
 * ("data.pipeline.[0].type"). The empty path is the root itself.
 *
 * Every getter marks the setting it read as used, and remembers the path it
 * asked for; duet_config_check_unused() then names the first setting that no
 * consumer read (a typo, or an option duet does not implement).
 *
 * libconfig 1.5 silently wraps integers beyond 32 bits in files: write them
 * with an L suffix (seed = 5000000000L;). --set values are range-checked.
 *
 * Strings returned by getters are borrowed from the config and stay valid
 * until it is destroyed or that key is overridden. */

typedef struct duet_config duet_config;

enum duet_config_kind {
    DUET_CONFIG_NONE = 0, /* absent */
    DUET_CONFIG_INT,      /* 32- or 64-bit integer */
    DUET_CONFIG_FLOAT,
    DUET_CONFIG_BOOL,
    DUET_CONFIG_STRING,
    DUET_CONFIG_ARRAY,    /* [scalars of one type] */
    DUET_CONFIG_LIST,     /* (any values) */
    DUET_CONFIG_GROUP     /* { name = value; ... } */
};

/* Parses a file. Errors: DUET_EIO (cannot read, naming the file and why),
 * DUET_ECONFIG ("configs/x.cfg:12: syntax error"). Free with
 * duet_config_destroy. */
int duet_config_load(const char *path, duet_config **out);
/* Parses text; `name` stands for the file name in messages ("<metadata>"). */
int duet_config_load_string(const char *text, const char *name, duet_config **out);
/* Frees a config or a view (the config lives until its last view goes).
 * NULL ok. */
void duet_config_destroy(duet_config *cfg);
/* The file name given to load (borrowed). */
const char *duet_config_name(const duet_config *cfg);

/* Applies one `--set` override "a.b.c=value", relative to cfg's root. The
 * value is an integer, float, true/false, a "quoted string", an array
 * [..], a list (..) or a group {..} in libconfig syntax; anything else is
 * taken as a plain string (work_dir=./runs/x). An existing key keeps its
 * type: an integer into a float key becomes a float, any value into a string
 * key becomes its text; a group value replaces the group ("data.val={...}",
 * as writing it in the file would), and "a.b+={...}" merges one member by
 * member into the group that is there; other changes fail with
 * DUET_ECONFIG naming the key, its type and where it was defined. A new key
 * is created, with any missing groups on its path. */
int duet_config_set(duet_config *cfg, const char *assignment);

/* A view rooted at the group (or list) at `path`: getters on it take paths
 * relative to that group and messages give full paths. Shares the config
 * (free with duet_config_destroy). DUET_ECONFIG when absent or not a group
 * or list. */
int duet_config_sub(duet_config *cfg, const char *path, duet_config **out);

/* What is at `path` (DUET_CONFIG_NONE when absent). Does not mark it used. */
int duet_config_kind(const duet_config *cfg, const char *path);
bool duet_config_has(const duet_config *cfg, const char *path);

/* Typed getters. The plain forms fail with DUET_ECONFIG when the key is
 * absent ("configs/x.cfg: missing key 'total_iters' (an integer)"); the _or
 * forms return `def` then. A key of the wrong type fails with DUET_ECONFIG
 * and its file and line ("configs/x.cfg:7: 'total_iters' must be an integer,
 * got a string"). Doubles accept integers; nothing else converts. */
int duet_config_get_int(duet_config *cfg, const char *path, int64_t *out);
int duet_config_get_int_or(duet_config *cfg, const char *path, int64_t def, int64_t *out);
int duet_config_get_double(duet_config *cfg, const char *path, double *out);
int duet_config_get_double_or(duet_config *cfg, const char *path, double def, double *out);
/* Range-checked forms: as above, and DUET_ECONFIG with file, line and key
 * when the value is outside [min, max] ("configs/x.cfg:7: 'data.prefetch'
 * must be an integer in [0, 64], got -1"). The _or forms check only a value
 * that is present (`def` comes back as is). Use them for every number that
 * is narrowed (to int, float) or that must be positive: a value that does
 * not fit is refused, never truncated. min = DBL_TRUE_MIN means "> 0".
 * Every double getter refuses inf and nan (`lr = 1e999`), and an integer
 * literal in a file that libconfig 1.5 would wrap to 32 bits (`scale =
 * 4294967300;`, no L suffix) fails when the file is loaded. */
int duet_config_get_int_in(duet_config *cfg, const char *path, int64_t min, int64_t max,
                           int64_t *out);
int duet_config_get_int_in_or(duet_config *cfg, const char *path, int64_t def, int64_t min,
                              int64_t max, int64_t *out);
int duet_config_get_double_in(duet_config *cfg, const char *path, double min, double max,
                              double *out);
int duet_config_get_double_in_or(duet_config *cfg, const char *path, double def, double min,
                                 double max, double *out);
int duet_config_get_bool(duet_config *cfg, const char *path, bool *out);
int duet_config_get_bool_or(duet_config *cfg, const char *path, bool def, bool *out);
/* Borrowed string (see above); the _or form returns `def` itself. */
int duet_config_get_string(duet_config *cfg, const char *path, const char **out);
int duet_config_get_string_or(duet_config *cfg, const char *path, const char *def,
                              const char **out);
/* The string at `path` without marking it used (NULL when absent or not a
 * string): for a check that looks at keys another reader owns, so that the
 * unused-key check still sees whether that reader took them. */
int duet_config_peek_string(const duet_config *cfg, const char *path, const char **out);

/* An array or list of numbers / strings into out[0..*n). More than `cap`
 * elements, an absent key or a wrong element type fail with DUET_ECONFIG.
 * Float arrays accept integer elements. Strings are borrowed. */
int duet_config_get_int_array(duet_config *cfg, const char *path, int64_t *out, size_t cap,
                              size_t *n);
int duet_config_get_double_array(duet_config *cfg, const char *path, double *out, size_t cap,
                                 size_t *n);
int duet_config_get_string_array(duet_config *cfg, const char *path, const char **out,
                                 size_t cap, size_t *n);

/* Number of members of a group, or elements of a list or array.
 * DUET_ECONFIG when absent or a scalar. */
int duet_config_length(duet_config *cfg, const char *path, size_t *n);
/* Name of member i of the group at `path`, in file order (borrowed). Lets a
 * consumer walk groups keyed by name (optimizers.generator, ...). */
int duet_config_member_name(duet_config *cfg, const char *path, size_t i, const char **name);

/* Marks the setting at `path` and everything under it as used, for keys a
 * consumer deliberately ignores. DUET_ECONFIG when absent. */
int duet_config_mark_used(duet_config *cfg, const char *path);
/* DUET_ECONFIG naming the settings (in file order, under cfg's root) that
 * no getter read, all of them (up to 32 listed, then a count): one is
 * "configs/x.cfg:12: unknown key 'model.generator.mid_channel' (did you
 * mean 'mid_channels'?): ..."; several are "N unknown keys (...):" and one
 * such line each. */
int duet_config_check_unused(const duet_config *cfg);

/* The whole config after overrides, as libconfig text that loads back to
 * the same values (floats round-trip exactly; comments are not kept). For
 * checkpoint metadata. Free *out with free(). */
int duet_config_text(const duet_config *cfg, char **out);

/* Where the setting at `path` was defined, for messages about its value:
 * "configs/x.cfg:12", "--set a.b=1", or the config's name when absent, at its
 * full length. Free *out with free(); NULL and DUET_ENOMEM when out of memory.
 * (Added by the runner.) */
int duet_config_where(const duet_config *cfg, const char *path, char **out);
/* DUET_ECONFIG with the message "<where path was set>: <fmt, ...>" (as
 * duet_config_where); DUET_ENOMEM when there is no memory for it. For
 * errors about a value that the config layer read correctly but its user
 * cannot take. */
int duet_config_error(const duet_config *cfg, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
