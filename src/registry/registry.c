/* The registry: builds networks, losses, models, datasets, wrappers and
 * optimizers from config groups by their `type`, reading MMEditing's option
 * names. Types are looked up in tables filled by duet_registry_register_*:
 * the built-in types register through the same calls (once, on first use)
 * as a user's own, so a model written in C outside duet trains like SRGAN.
 * Every key read is marked used by the config, so a typo or an option duet
 * does not know is caught later by duet_config_check_unused. */
#include "registry/registry_data.h"
#include "registry/registry_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const wrapper_types[] = {"DistributedDataParallelWrapper",
                                            "DistributedDataParallel", NULL};

/* ---- the tables -------------------------------------------------------------- */

/* Type names are a program's own (MMEditing's class names), not a model's:
 * a longer name or a 65th type is refused with DUET_EINVAL / DUET_ENOMEM
 * naming it (reg_add), never cut; fixed arrays keep the lists that
 * duet_*_types() return valid while types are added. */
#define REG_MAX 64
#define REG_NAME_MAX 64

/* One kind of type (modules, models, datasets): names and builders in
 * registration order. `names` stays NULL-terminated for the _types()
 * getters; the arrays never move, so a returned list stays valid. */
typedef struct reg_table {
    const char *what; /* "module", "model", "dataset" */
    size_t n;
    char name[REG_MAX][REG_NAME_MAX];
    const char *names[REG_MAX + 1];
    union {
        duet_module_builder module;
        duet_model_builder model;
        duet_dataset_builder dataset;
    } fn[REG_MAX];
} reg_table;

static reg_table modules = {.what = "module"};
static reg_table models = {.what = "model"};
static reg_table datasets = {.what = "dataset"};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static int builtins_rc = DUET_OK;
static void register_builtins(void);

/* register_builtins calls the public registration functions, which call
 * ensure_builtins: inside it, on its thread, they must not wait for the
 * once routine they are part of. */
static _Thread_local bool in_builtins = false;

static void ensure_builtins(void) {
    if (!in_builtins) pthread_once(&builtins_once, register_builtins);
}

static int reg_find(const reg_table *t, const char *type) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->name[i], type) == 0) return (int)i;
    return -1;
}

/* Adds `type` to t; *slot is where its builder goes. */
static int reg_add(reg_table *t, const char *type, bool have_fn, size_t *slot) {
    if (type == NULL || type[0] == '\0' || strlen(type) >= REG_NAME_MAX || !have_fn)
        return duet__error(DUET_EINVAL, "registry: a %s type needs a name of 1 to %d "
                           "characters and a builder (got '%s')", t->what, REG_NAME_MAX - 1,
                           type != NULL ? type : "(null)");
    if (reg_find(t, type) >= 0)
        return duet__error(DUET_EINVAL, "registry: %s type '%s' is already registered; pick "
                           "another name", t->what, type);
    if (t->n == REG_MAX)
        return duet__error(DUET_ENOMEM, "registry: more than %d %s types (adding '%s')", REG_MAX,
                           t->what, type);
    *slot = t->n;
    strcpy(t->name[t->n], type);
    t->names[t->n] = t->name[t->n];
    t->names[t->n + 1] = NULL;
    return DUET_OK;
}

int duet_registry_register_module(const char *type, duet_module_builder build) {
    ensure_builtins();
    pthread_mutex_lock(&reg_mu);
    size_t i = 0;
    int rc = reg_add(&modules, type, build != NULL, &i);
    if (rc == DUET_OK) {
        modules.fn[i].module = build;
        modules.n++;
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

int duet_registry_register_loss(const char *type, duet_module_builder build) {
    return duet_registry_register_module(type, build);
}

int duet_registry_register_model(const char *type, duet_model_builder build) {
    ensure_builtins();
    pthread_mutex_lock(&reg_mu);
    size_t i = 0;
    int rc = reg_add(&models, type, build != NULL, &i);
    if (rc == DUET_OK) {
        models.fn[i].model = build;
        models.n++;
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

int duet_registry_register_dataset(const char *type, duet_dataset_builder build) {
    ensure_builtins();
    pthread_mutex_lock(&reg_mu);
    size_t i = 0;
    int rc = reg_add(&datasets, type, build != NULL, &i);
    if (rc == DUET_OK) {
        datasets.fn[i].dataset = build;
        datasets.n++;
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

/* The builder registered for `type` in t (copied under the lock), or -1. */
static int reg_lookup(reg_table *t, const char *type, size_t *slot) {
    ensure_builtins();
    pthread_mutex_lock(&reg_mu);
    int i = reg_find(t, type);
    pthread_mutex_unlock(&reg_mu);
    if (i >= 0) *slot = (size_t)i;
    return i;
}

const char *const *duet_registry_module_types(void) {
    ensure_builtins();
    return modules.names;
}
const char *const *duet_registry_model_types(void) {
    ensure_builtins();
    return models.names;
}
const char *const *duet_registry_dataset_types(void) {
    ensure_builtins();
    return datasets.names;
}

static int unknown_type(const char *what, const char *path, const char *type,
                        const char *const *known) {
    duet__str list = {0};
    for (size_t i = 0; known[i] != NULL; i++) duet__str_add_item(&list, ", ", "%s", known[i]);
    int rc = duet__error(DUET_ECONFIG, "%s.type: unknown %s type '%s' (known: %s)", path, what,
                         type, duet__str_get(&list));
    duet__str_free(&list);
    return rc;
}

/* ---- building from the rows (registry_internal.h) ----------------------------------- */

/* A built-in network or loss: its row's defaults, reader and create. */
static int build_module_row(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    const char *type = NULL;
    DUET_TRY(duet_config_get_string(c, "type", &type));
    const duet__module_row *row = duet__module_row_find(type);
    DUET_ASSERT(row != NULL); /* registered from the rows under their names only */
    void *opts = malloc(row->opts_size);
    if (opts == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    row->defaults(opts);
    int rc = row->read(c, opts);
    if (rc == DUET_OK) rc = row->create(opts, rng, out);
    duet__module_opts_release(row->type, opts);
    free(opts);
    return rc;
}

int duet_build_module(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_config *c = NULL;
    const char *type = NULL;
    DUET_TRY(duet__reg_open_group(cfg, path, &c, &type));
    size_t i = 0;
    int rc;
    if (reg_lookup(&modules, type, &i) < 0)
        rc = unknown_type("module", path, type, duet_registry_module_types());
    else
        rc = modules.fn[i].module(c, path, rng, out);
    duet_config_destroy(c);
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
        if (rc != DUET_ECONFIG) duet__error_context(rc, "%s", path);
    }
    return rc;
}

static bool part_allows(const duet__part_row *p, const char *type) {
    for (int i = 0; i < DUET__MAX_PART_TYPES && p->types[i] != NULL; i++)
        if (strcmp(p->types[i], type) == 0) return true;
    return false;
}

/* DUET_EUNSUPPORTED naming the types that part `key` of the model type
 * may name, over every row of that type. */
static int part_refused(const char *model, const char *path, const char *key, const char *type) {
    duet__str list = {0};
    for (size_t r = 0; r < duet__model_row_count; r++) {
        if (strcmp(duet__model_rows[r].type, model) != 0) continue;
        for (const duet__part_row *p = duet__model_rows[r].parts; p->key != NULL; p++)
            for (int i = 0; strcmp(p->key, key) == 0 && i < DUET__MAX_PART_TYPES &&
                            p->types[i] != NULL; i++)
                duet__str_add_item(&list, ", ", "%s", p->types[i]);
    }
    int rc = duet__error(DUET_EUNSUPPORTED, "%s.%s.type: '%s' is not supported here (duet has %s)",
                         path, key, type, duet__str_get(&list));
    duet__str_free(&list);
    return rc;
}

/* Whether every part of row that m holds names one of the part's types. */
static bool row_fits(const duet__model_row *row, duet_config *m) {
    for (const duet__part_row *p = row->parts; p->key != NULL; p++) {
        char key[96]; /* "<part>.type": the rows' part names are short */
        snprintf(key, sizeof key, "%s.type", p->key);
        const char *type = NULL;
        if (duet_config_kind(m, key) != DUET_CONFIG_STRING) continue; /* read_parts reports it */
        if (duet_config_get_string(m, key, &type) != DUET_OK || !part_allows(p, type))
            return false;
    }
    return true;
}

/* The first row of model type `type`, or NULL. */
static const duet__model_row *first_model_row(const char *type) {
    for (size_t r = 0; r < duet__model_row_count; r++)
        if (strcmp(duet__model_rows[r].type, type) == 0) return &duet__model_rows[r];
    return NULL;
}

/* The row of model type `type` that fits m: the first whose parts' types
 * fit, else the first of that name (whose reader reports the misfit). */
static const duet__model_row *find_model_row(duet_config *m, const char *type) {
    for (size_t r = 0; r < duet__model_row_count; r++) {
        const duet__model_row *row = &duet__model_rows[r];
        if (strcmp(row->type, type) == 0 && row_fits(row, m)) return row;
    }
    return first_model_row(type);
}

/* The part groups of row from m into opts, in order, each through the
 * module row of its type. */
static int read_parts(const duet__model_row *row, duet_config *m, const char *path, void *opts) {
    for (const duet__part_row *p = row->parts; p->key != NULL; p++) {
        if (p->optional && !duet_config_has(m, p->key)) continue;
        duet_config *c = NULL;
        const char *type = NULL;
        DUET_TRY(duet__reg_open_group(m, p->key, &c, &type));
        int rc = part_allows(p, type)
                     ? duet__module_row_find(type)->read(c, (char *)opts + p->at)
                     : part_refused(row->type, path, p->key, type);
        duet_config_destroy(c);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

/* A built-in model: its row's defaults, parts, own keys and create. */
static int build_model_row(duet_config *m, const char *path, duet_rng *rng, duet_model **out) {
    const char *type = NULL;
    DUET_TRY(duet_config_get_string(m, "type", &type));
    const duet__model_row *row = find_model_row(m, type);
    DUET_ASSERT(row != NULL); /* registered from the rows under their names only */
    void *opts = malloc(row->opts_size);
    if (opts == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    row->defaults(opts);
    int rc = read_parts(row, m, path, opts);
    if (rc == DUET_OK) rc = row->read(m, path, rng, opts);
    if (rc == DUET_OK) rc = row->create(opts, rng, out);
    /* The parts' types share their struct: the first one's release. */
    for (const duet__part_row *p = row->parts; p->key != NULL; p++)
        duet__module_opts_release(p->types[0], (char *)opts + p->at);
    free(opts);
    return rc;
}

int duet_build_model(duet_config *cfg, const char *path, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_config *m = NULL;
    const char *type = NULL;
    DUET_TRY(duet__reg_open_group(cfg, path, &m, &type));
    size_t i = 0;
    int rc;
    if (reg_lookup(&models, type, &i) < 0)
        rc = unknown_type("model", path, type, duet_registry_model_types());
    else
        rc = models.fn[i].model(m, path, rng, out);
    duet_config_destroy(m);
    if (rc != DUET_OK) {
        duet_model_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- datasets --------------------------------------------------------------------- */

int duet_build_dataset(duet_config *cfg, const char *path, bool train, duet_dataset **out) {
    *out = NULL;
    duet_config *d = NULL;
    const char *type = NULL;
    DUET_TRY(duet__reg_open_group(cfg, path, &d, &type));
    size_t i = 0;
    int rc;
    if (reg_lookup(&datasets, type, &i) < 0)
        rc = unknown_type("dataset", path, type, duet_registry_dataset_types());
    else
        rc = datasets.fn[i].dataset(d, path, train, out);
    duet_config_destroy(d);
    if (rc != DUET_OK) {
        duet_dataset_destroy(*out);
        *out = NULL;
        if (rc != DUET_ECONFIG) duet__error_context(rc, "%s", path);
    }
    return rc;
}

/* ---- built-in types ------------------------------------------------------------------ */

static void register_one(int rc) {
    if (rc != DUET_OK && builtins_rc == DUET_OK) builtins_rc = rc;
}

static void register_builtins(void) {
    in_builtins = true;
    for (size_t i = 0; i < duet__module_row_count; i++)
        register_one(duet_registry_register_module(duet__module_rows[i].type, build_module_row));
    for (size_t i = 0; i < duet__model_row_count; i++) {
        /* Rows sharing a name are one type: registered at the first. */
        const char *type = duet__model_rows[i].type;
        if (first_model_row(type) == &duet__model_rows[i])
            register_one(duet_registry_register_model(type, build_model_row));
    }
    register_one(duet_registry_register_dataset("SRFolderGTDataset", duet__build_sr_folder_gt));
    register_one(duet_registry_register_dataset("SRFolderDataset", duet__build_sr_folder));
    register_one(duet_registry_register_dataset("SRAnnotationDataset", duet__build_sr_annotation));
    register_one(duet_registry_register_dataset("SRLmdbDataset", duet__build_sr_lmdb));
    register_one(duet_registry_register_dataset("RepeatDataset", duet__build_repeat));
    register_one(duet_registry_register_dataset("ImgInpaintingDataset",
                                                duet__build_img_inpainting));
    register_one(duet_registry_register_dataset("GenerationPairedDataset",
                                                duet__build_generation_paired));
    register_one(duet_registry_register_dataset("GenerationUnpairedDataset",
                                                duet__build_generation_unpaired));
    /* A table overflow here is a bug (REG_MAX is far above the built-ins). */
    DUET_ASSERT(builtins_rc == DUET_OK);
    in_builtins = false;
}

/* ---- wrappers --------------------------------------------------------------------- */

int duet_build_wrapper(duet_config *cfg, const char *path, duet_model *model, duet_comm *comm,
                       duet_wrapper **out) {
    *out = NULL;
    duet_config *c = NULL;
    const char *type = NULL;
    int rc = duet__reg_open_group(cfg, path, &c, &type);
    if (rc != DUET_OK) {
        duet_model_destroy(model);
        return rc;
    }
    duet_wrapper_opts o = duet_wrapper_opts_default();
    if (strcmp(type, "DistributedDataParallel") == 0) o.kind = DUET_WRAPPER_WHOLE_MODEL;
    else if (strcmp(type, "DistributedDataParallelWrapper") != 0)
        rc = unknown_type("wrapper", path, type, wrapper_types);
    const char *hook = "allreduce";
    const char *devices[4] = {"cpu"};
    size_t ndevices = 1;
    if (rc == DUET_OK) rc = duet_config_get_bool_or(c, "broadcast_buffers", false,
                                                    &o.broadcast_buffers);
    if (rc == DUET_OK) rc = duet_config_get_bool_or(c, "find_unused_parameters", false,
                                                    &o.find_unused_parameters);
    /* Absent: 0.0, the DDP's default (1 MiB, duet_ddp_opts); given: must be > 0. */
    if (rc == DUET_OK)
        rc = duet_config_get_double_in_or(c, "bucket_cap_mb", 0.0, DBL_TRUE_MIN, 1e6,
                                          &o.bucket_cap_mb);
    if (rc == DUET_OK) rc = duet_config_get_bool_or(c, "sync_bn", false, &o.sync_bn);
    if (rc == DUET_OK) rc = duet__reg_get_int(c, "dim", 0, &o.dim);
    if (rc == DUET_OK) rc = duet_config_get_string_or(c, "comm_hook", "allreduce", &hook);
    if (rc == DUET_OK && duet_config_has(c, "device_ids"))
        rc = duet_config_get_string_array(c, "device_ids", devices, 4, &ndevices);
    if (rc == DUET_OK) {
        if (strcmp(hook, "allreduce") == 0) o.comm_hook = DUET_DDP_HOOK_ALLREDUCE;
        else if (strcmp(hook, "fp16") == 0) o.comm_hook = DUET_DDP_HOOK_FP16;
        else if (strcmp(hook, "bf16") == 0) o.comm_hook = DUET_DDP_HOOK_BF16;
        else rc = duet__error(DUET_ECONFIG, "%s.comm_hook: '%s' (use allreduce, fp16 or bf16)",
                              path, hook);
    }
    if (rc != DUET_OK) {
        duet_config_destroy(c);
        duet_model_destroy(model);
        return rc;
    }
    rc = duet_wrapper_create(model, comm, devices, ndevices, &o, out);
    duet_config_destroy(c);
    return rc;
}

/* ---- optimizers ------------------------------------------------------------------- */

static int build_one_optimizer(duet_config *c, const char *path, const char *part,
                               duet_model *model, duet_optimizer_set *set) {
    const char *type = NULL;
    DUET_TRY(duet_config_get_string(c, "type", &type));
    if (duet_model_part(model, part) == NULL) {
        duet_module *root = duet_model_module(model);
        duet__str list = {0};
        for (size_t i = 0; i < duet_module_child_count(root); i++)
            duet__str_add_item(&list, ", ", "%s", duet_module_child_name_at(root, i));
        int rc = duet__error(DUET_ECONFIG, "%s.%s: the model (%s) has no part '%s' (parts: %s)",
                             path, part, duet_model_type_name(model), part, duet__str_get(&list));
        duet__str_free(&list);
        return rc;
    }
    double lr;
    DUET_TRY(duet_config_get_double_in(c, "lr", 0.0, FLT_MAX, &lr));
    if (strcmp(type, "Adam") == 0) {
        duet_adam_opts o = duet_adam_opts_default();
        o.lr = (float)lr;
        if (duet_config_has(c, "betas")) {
            double b[2];
            size_t n = 0;
            DUET_TRY(duet_config_get_double_array(c, "betas", b, 2, &n));
            if (n != 2)
                return duet__error(DUET_ECONFIG, "%s.%s.betas: two values, got %zu", path, part,
                                   n);
            o.beta1 = (float)b[0];
            o.beta2 = (float)b[1];
        }
        DUET_TRY(duet__reg_get_float(c, "eps", o.eps, &o.eps));
        DUET_TRY(duet__reg_get_float(c, "weight_decay", o.weight_decay, &o.weight_decay));
        return duet_optimizer_set_add_adam(set, model, part, &o);
    }
    if (strcmp(type, "SGD") == 0) {
        duet_sgd_opts o = duet_sgd_opts_default();
        o.lr = (float)lr;
        DUET_TRY(duet__reg_get_float(c, "momentum", o.momentum, &o.momentum));
        DUET_TRY(duet__reg_get_float(c, "dampening", o.dampening, &o.dampening));
        DUET_TRY(duet__reg_get_float(c, "weight_decay", o.weight_decay, &o.weight_decay));
        DUET_TRY(duet_config_get_bool_or(c, "nesterov", o.nesterov, &o.nesterov));
        return duet_optimizer_set_add_sgd(set, model, part, &o);
    }
    return duet__error(DUET_ECONFIG, "%s.%s.type: unknown optimizer type '%s' (known: Adam, SGD)",
                       path, part, type);
}

int duet_build_optimizers(duet_config *cfg, const char *path, duet_model *model,
                          duet_optimizer_set **out) {
    *out = NULL;
    size_t n = 0;
    DUET_TRY(duet_config_length(cfg, path, &n));
    duet_optimizer_set *set = NULL;
    DUET_TRY(duet_optimizer_set_create(&set));
    int rc = DUET_OK;
    for (size_t i = 0; i < n && rc == DUET_OK; i++) {
        const char *part = NULL;
        rc = duet_config_member_name(cfg, path, i, &part);
        if (rc != DUET_OK) break;
        /* part is a model part's name, as long as the model makes it. */
        char *sub_path = duet__strf("%s.%s", path, part);
        duet_config *c = NULL;
        rc = sub_path != NULL ? duet_config_sub(cfg, sub_path, &c)
                              : duet__error(DUET_ENOMEM, "optimizers: out of memory");
        free(sub_path);
        if (rc == DUET_OK) rc = build_one_optimizer(c, path, part, model, set);
        duet_config_destroy(c);
    }
    if (rc != DUET_OK) {
        duet_optimizer_set_destroy(set);
        return rc;
    }
    *out = set;
    return DUET_OK;
}
