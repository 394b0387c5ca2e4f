/* The registry's built-in types as rows (private to src/registry/registry*.c).
 *
 * A network or loss a config can name is a module row: its type name, the
 * options struct its reader fills and the create that takes it
 * (registry_modules.c). A model is a model row: its type name, its parts
 * (config groups, each with the module types it may name and where their
 * options go in the model's options struct), the reader of its own keys and
 * its create (registry_models.c). registry.c registers every row under its
 * type name and builds from the rows: a new built-in model is its file in
 * src/models/ and one row. */
#ifndef DUET_REGISTRY_INTERNAL_H
#define DUET_REGISTRY_INTERNAL_H

#include <stddef.h>

#include "duet/config.h"
#include "duet/registry.h"

typedef struct duet__module_row {
    const char *type;
    size_t opts_size;
    /* The type's own defaults, for a group built on its own (a model's
     * part starts from the model's defaults instead). */
    void (*defaults)(void *opts);
    /* The group's keys over *opts, each marked used. */
    int (*read)(duet_config *c, void *opts);
    int (*create)(const void *opts, duet_rng *rng, duet_module **out);
} duet__module_row;

/* What a row's reader made for create and create does not keep (a
 * converted weights file): released after create, whatever it returned. */
void duet__module_opts_release(const char *type, void *opts);

#define DUET__MAX_PART_TYPES 3
#define DUET__MAX_PARTS 8

typedef struct duet__part_row {
    const char *key; /* the part's name and its config group; NULL ends the list */
    /* The module types the group may name; they share one options struct
     * (L1Loss and MSELoss: the loss weight). */
    const char *types[DUET__MAX_PART_TYPES];
    size_t at;     /* where that struct is in the model's options */
    bool optional; /* absent: the model's reader decides what it means */
} duet__part_row;

typedef struct duet__model_row {
    const char *type;
    size_t opts_size;
    void (*defaults)(void *opts);
    /* Read in this order, each through its module row's reader. Rows with
     * one type name are alternatives, told apart by their parts' types
     * (BasicRestorer around MSRResNet or RRDBNet): the first that fits. */
    duet__part_row parts[DUET__MAX_PARTS];
    /* The model's own keys (train_cfg, test_cfg, ...), after its parts;
     * draws the model's seeds from rng where it has any. */
    int (*read)(duet_config *m, const char *path, duet_rng *rng, void *opts);
    int (*create)(const void *opts, duet_rng *rng, duet_model **out);
} duet__model_row;

/* The built-in rows, in registration order (names listed by
 * duet_registry_*_types in this order). */
extern const duet__module_row duet__module_rows[];
extern const size_t duet__module_row_count;
extern const duet__model_row duet__model_rows[];
extern const size_t duet__model_row_count;

/* The module row of `type`, or NULL. */
const duet__module_row *duet__module_row_find(const char *type);

/* Typed getters with defaults, narrowing to the option structs' types;
 * out of range is DUET_ECONFIG naming the key. */
int duet__reg_get_int_in(duet_config *c, const char *key, int def, int min, int *out);
int duet__reg_get_int(duet_config *c, const char *key, int def, int *out);
int duet__reg_get_float(duet_config *c, const char *key, float def, float *out);
/* The group at `path` of cfg as a view to destroy, and its type. */
int duet__reg_open_group(duet_config *cfg, const char *path, duet_config **sub,
                         const char **type);
/* norm_cfg `key` of a GL / DeepFill part: absent (false), or BN / SyncBN. */
int duet__reg_read_gl_norm(duet_config *c, const char *key, bool *norm);

/* DeepFillEncoderDecoder's row (registry_deepfill.c). */
void duet__reg_def_deepfill_encdec(void *opts);
int duet__reg_read_deepfill_encdec(duet_config *c, void *opts);
int duet__reg_make_deepfill_encdec(const void *opts, duet_rng *rng, duet_module **out);

/* EDSR's, RDN's and UNetDiscriminatorWithSpectralNorm's rows (registry_sr_nets.c). */
void duet__reg_def_edsr(void *opts);
int duet__reg_read_edsr(duet_config *c, void *opts);
int duet__reg_make_edsr(const void *opts, duet_rng *rng, duet_module **out);
void duet__reg_def_rdn(void *opts);
int duet__reg_read_rdn(duet_config *c, void *opts);
int duet__reg_make_rdn(const void *opts, duet_rng *rng, duet_module **out);
void duet__reg_def_unet_disc(void *opts);
int duet__reg_read_unet_disc(duet_config *c, void *opts);
int duet__reg_make_unet_disc(const void *opts, duet_rng *rng, duet_module **out);

/* PConvEncoderDecoder's and MaskedTVLoss's rows (registry_pconv.c). */
void duet__reg_def_pconv_encdec(void *opts);
int duet__reg_read_pconv_encdec(duet_config *c, void *opts);
int duet__reg_make_pconv_encdec(const void *opts, duet_rng *rng, duet_module **out);
void duet__reg_def_masked_tv(void *opts);
int duet__reg_read_masked_tv(duet_config *c, void *opts);
int duet__reg_make_masked_tv(const void *opts, duet_rng *rng, duet_module **out);

#endif
