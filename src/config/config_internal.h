/* Private to src/config/config*.c. */
#ifndef DUET_TRAIN_CONFIG_INTERNAL_H
#define DUET_TRAIN_CONFIG_INTERNAL_H

#include "duet/config.h"

#include <libconfig.h>
#include <stdbool.h>
#include <stdio.h>

/* DUET_ECONFIG "x.cfg:3: 'scale' = 4294967300 does not fit in a 32-bit
 * integer ..." for the first integer literal without an L suffix that
 * libconfig 1.5 would wrap; follows @include files (relative to
 * include_dir, may be NULL). `name` stands for the file in messages. */
int duet__config_check_int_literals(const char *text, const char *name,
                                    const char *include_dir);
/* The same for a file (an unreadable file is left to libconfig to report). */
int duet__config_check_int_literals_file(const char *path, const char *include_dir);

/* ---- the config object, shared by src/config/config*.c ---------------------- */

/* Each libconfig setting may carry a note (through its hook pointer) saying
 * whether a getter read it and, for settings created by --set, which
 * assignment made them. Notes and the paths getters asked for live in the
 * shared core; views (duet_config_sub) hold a reference to it. Paths and
 * locations are malloc'd strings of any length: a key path is as long and as
 * deep as the config makes it. */

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

/* ---- helpers shared by the config files ---------------------------------- */

/* config_path.c */
/* Canonical full path for messages and the asked-for set: the view prefix,
 * then the tokens of `path` with indices written "[i]". Free with free();
 * NULL when out of memory (so for the next three). */
char *duet__cfg_full_path(const duet_config *cfg, const char *path);
bool duet__cfg_is_index_token(const char *tok, size_t len, long *index);
bool duet__cfg_is_int_type(int type);
const char *duet__cfg_kind_phrase(int type);
/* For array element types: "integers". */
const char *duet__cfg_kind_plural(int type);
/* Where a setting came from: "configs/x.cfg:12", "--set a.b=1" or the
 * config's name. */
char *duet__cfg_setting_loc(const duet_config *cfg, const config_setting_t *s);
/* Full dotted path of a setting from the config root ("model.generator",
 * "data.pipeline.[0].type"); "" for the root. */
char *duet__cfg_setting_path(const config_setting_t *s);
/* DUET_ECONFIG "<where s came from>: '<s's full path>' <fmt...>" (DUET_ENOMEM
 * when the message cannot be made). */
int duet__cfg_error_at(const duet_config *cfg, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int duet__cfg_walk(const duet_config *cfg, const char *path, config_setting_t **out);
/* Finds `path` under `root`. *out is NULL when absent; DUET_ECONFIG when the
 * path is malformed or runs through a scalar. */
int duet__cfg_walk_from(const duet_config *cfg, config_setting_t *root, const char *path,
                        config_setting_t **out);

/* config_notes.c */
/* Walks for a getter: remembers the path, then finds the setting. */
int duet__cfg_lookup(duet_config *cfg, const char *path, config_setting_t **s);
int duet__cfg_mark(duet_config *cfg, config_setting_t *s);
int duet__cfg_missing(const duet_config *cfg, const char *path, const char *what);
/* libconfig reads 1e999 as inf; no duet setting means inf or nan. */
int duet__cfg_not_finite(const duet_config *cfg, const config_setting_t *s, double v);
/* The first float setting at or under s that is inf or nan, or NULL: a
 * config is checked when it is read, since what duet writes back of it must
 * read again and libconfig has no literal for either. */
const config_setting_t *duet__cfg_first_not_finite(const config_setting_t *s);
cfg_note *duet__cfg_note_of(cfg_core *core, config_setting_t *s);
int duet__cfg_wrong_type(const duet_config *cfg, const config_setting_t *s, const char *what);

/* config_get.c */
int64_t duet__cfg_int_value(const config_setting_t *s);
bool duet__cfg_ok_number(int type);

#endif
