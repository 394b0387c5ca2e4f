/* The registry: builds networks, losses, models, datasets, wrappers and
 * optimizers from config groups by their `type`, reading MMEditing's option
 * names. Types are looked up in tables filled by duet_registry_register_*:
 * the built-in types register through the same calls (once, on first use)
 * as a user's own, so a model written in C outside duet trains like SRGAN.
 * Every key read is marked used by the config, so a typo or an option duet
 * does not know is caught later by duet_config_check_unused. */
#include "duet/train.h"
#include "runner/registry_data.h"
#include "runner/registry_gan.h"

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
const char *const *duet_registry_wrapper_types(void) { return wrapper_types; }

static int unknown_type(const char *what, const char *path, const char *type,
                        const char *const *known) {
    duet__str list = {0};
    for (size_t i = 0; known[i] != NULL; i++) duet__str_add_item(&list, ", ", "%s", known[i]);
    int rc = duet__error(DUET_ECONFIG, "%s.type: unknown %s type '%s' (known: %s)", path, what,
                         type, duet__str_get(&list));
    duet__str_free(&list);
    return rc;
}

/* Typed getters with defaults, narrowing to the types of the option structs. */
static int get_int_in(duet_config *c, const char *key, int def, int min, int *out) {
    int64_t v;
    DUET_TRY(duet_config_get_int_in_or(c, key, def, min, INT_MAX, &v));
    *out = (int)v;
    return DUET_OK;
}

static int get_int(duet_config *c, const char *key, int def, int *out) {
    return get_int_in(c, key, def, INT_MIN, out);
}

static int get_float(duet_config *c, const char *key, float def, float *out) {
    double v;
    DUET_TRY(duet_config_get_double_in_or(c, key, def, -FLT_MAX, FLT_MAX, &v));
    *out = (float)v;
    return DUET_OK;
}

/* The group at path as a view, and its type. */
static int open_group(duet_config *cfg, const char *path, duet_config **sub, const char **type) {
    *sub = NULL;
    DUET_TRY(duet_config_sub(cfg, path, sub));
    int rc = duet_config_get_string(*sub, "type", type);
    if (rc != DUET_OK) {
        duet_config_destroy(*sub);
        *sub = NULL;
    }
    return rc;
}

static int expect_type(const char *path, const char *type, const char *want) {
    if (strcmp(type, want) == 0) return DUET_OK;
    return duet__error(DUET_EUNSUPPORTED, "%s.type: '%s' is not supported here (duet has %s)",
                       path, type, want);
}

/* ---- option readers ------------------------------------------------------------- */

static int read_msrresnet(duet_config *c, duet_msrresnet_opts *o) {
    *o = duet_msrresnet_opts_default();
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    return get_int(c, "upscale_factor", o->upscale_factor, &o->upscale_factor);
}

static int read_modified_vgg(duet_config *c, duet_modified_vgg_opts *o) {
    *o = duet_modified_vgg_opts_default();
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    return get_int(c, "input_size", o->input_size, &o->input_size);
}

static int read_pixel_loss(duet_config *c, float *weight) {
    const char *red;
    DUET_TRY(get_float(c, "loss_weight", 1.0f, weight));
    DUET_TRY(duet_config_get_string_or(c, "reduction", "mean", &red));
    if (strcmp(red, "mean") != 0)
        return duet__error(DUET_EUNSUPPORTED, "%s: reduction '%s' is not supported (only 'mean')",
                           duet_config_name(c), red);
    return DUET_OK;
}

static int read_gan_loss(duet_config *c, duet_gan_loss_opts *o) {
    *o = duet_gan_loss_opts_default();
    DUET_TRY(duet_config_get_string_or(c, "gan_type", "vanilla", &o->gan_type));
    DUET_TRY(get_float(c, "real_label_val", o->real_label_val, &o->real_label_val));
    DUET_TRY(get_float(c, "fake_label_val", o->fake_label_val, &o->fake_label_val));
    return get_float(c, "loss_weight", o->loss_weight, &o->loss_weight);
}

/* torchvision's VGG configurations, 0 = max pool. */
static int vgg_cfg(const char *vgg_type, int *cfg, int *n) {
    static const int v11[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v13[] = {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v16[] = {64,  64,  0,   128, 128, 0,   256, 256, 256,
                              0,   512, 512, 512, 0,   512, 512, 512, 0};
    static const int v19[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                              512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
    const int *src;
    size_t len;
    if (strcmp(vgg_type, "vgg11") == 0) src = v11, len = sizeof v11 / sizeof *v11;
    else if (strcmp(vgg_type, "vgg13") == 0) src = v13, len = sizeof v13 / sizeof *v13;
    else if (strcmp(vgg_type, "vgg16") == 0) src = v16, len = sizeof v16 / sizeof *v16;
    else if (strcmp(vgg_type, "vgg19") == 0) src = v19, len = sizeof v19 / sizeof *v19;
    else
        return duet__error(DUET_ECONFIG, "PerceptualLoss: vgg_type '%s' (use vgg11, vgg13, vgg16, "
                           "vgg19, or give cfg = [...])", vgg_type);
    for (size_t i = 0; i < len; i++) cfg[i] = src[i];
    *n = (int)len;
    return DUET_OK;
}

static int read_perceptual(duet_config *c, duet_perceptual_loss_opts *o) {
    *o = duet_perceptual_loss_opts_default();
    /* MMEditing writes layer_weights = {'34': 1.0}; libconfig names cannot
     * be numbers, so duet reads layer_ids = [34]; layer_weights = [1.0];
     * or a group whose member names end in the index: { conv34 = 1.0; }. */
    int kind = duet_config_kind(c, "layer_weights");
    if (kind == DUET_CONFIG_ARRAY || kind == DUET_CONFIG_LIST) {
        int64_t ids[DUET_PERCEPTUAL_MAX_LAYERS];
        double w[DUET_PERCEPTUAL_MAX_LAYERS];
        size_t nids = 0, nw = 0;
        DUET_TRY(duet_config_get_double_array(c, "layer_weights", w, DUET_PERCEPTUAL_MAX_LAYERS,
                                              &nw));
        DUET_TRY(duet_config_get_int_array(c, "layer_ids", ids, DUET_PERCEPTUAL_MAX_LAYERS,
                                           &nids));
        if (nids != nw || nw == 0)
            return duet__error(DUET_ECONFIG, "%s: layer_ids has %zu entries and layer_weights "
                               "%zu; give one weight per layer index", duet_config_name(c),
                               nids, nw);
        o->nlayer_weights = (int)nw;
        for (size_t i = 0; i < nw; i++) {
            if (ids[i] < 0 || ids[i] > INT_MAX || !(fabs(w[i]) <= FLT_MAX))
                return duet__error(DUET_ECONFIG, "%s: layer_ids[%zu] = %lld / layer_weights[%zu] "
                                   "= %g is out of range", duet_config_name(c), i,
                                   (long long)ids[i], i, w[i]);
            o->layer_ids[i] = (int)ids[i];
            o->layer_weights[i] = (float)w[i];
        }
    } else if (kind != DUET_CONFIG_NONE) {
        size_t n = 0;
        DUET_TRY(duet_config_length(c, "layer_weights", &n));
        if (n < 1 || n > DUET_PERCEPTUAL_MAX_LAYERS)
            return duet__error(DUET_ECONFIG, "%s: layer_weights has %zu entries (1 to %d)",
                               duet_config_name(c), n, DUET_PERCEPTUAL_MAX_LAYERS);
        o->nlayer_weights = (int)n;
        for (size_t i = 0; i < n; i++) {
            const char *name;
            DUET_TRY(duet_config_member_name(c, "layer_weights", i, &name));
            const char *digits = name + strlen(name);
            while (digits > name && digits[-1] >= '0' && digits[-1] <= '9') digits--;
            if (*digits == '\0')
                return duet__error(DUET_ECONFIG, "%s: layer_weights member '%s' must end in a "
                                   "layer index (conv34 = 1.0 for MMEditing's '34'), or use "
                                   "layer_ids = [34]; layer_weights = [1.0];",
                                   duet_config_name(c), name);
            char *key = duet__strf("layer_weights.%s", name);
            if (key == NULL) return duet__error(DUET_ENOMEM, "registry: out of memory");
            double w;
            int rc = duet_config_get_double_in(c, key, -FLT_MAX, FLT_MAX, &w);
            free(key);
            DUET_TRY(rc);
            o->layer_ids[i] = atoi(digits);
            o->layer_weights[i] = (float)w;
        }
    }
    const char *vgg_type;
    DUET_TRY(duet_config_get_string_or(c, "vgg_type", "vgg19", &vgg_type));
    if (duet_config_has(c, "cfg")) {
        int64_t v[DUET_VGG_MAX_CFG];
        size_t n = 0;
        DUET_TRY(duet_config_get_int_array(c, "cfg", v, DUET_VGG_MAX_CFG, &n));
        for (size_t i = 0; i < n; i++) {
            if (v[i] < 0 || v[i] > INT_MAX)
                return duet__error(DUET_ECONFIG, "%s: cfg[%zu] = %lld is out of range (channels, "
                                   "or 0 for a max pool)", duet_config_name(c), i,
                                   (long long)v[i]);
            o->cfg[i] = (int)v[i];
        }
        o->ncfg = (int)n;
    } else {
        DUET_TRY(vgg_cfg(vgg_type, o->cfg, &o->ncfg));
    }
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(duet_config_get_bool_or(c, "use_input_norm", o->use_input_norm, &o->use_input_norm));
    DUET_TRY(duet_config_get_bool_or(c, "norm_img", o->norm_img, &o->norm_img));
    DUET_TRY(get_float(c, "perceptual_weight", o->perceptual_weight, &o->perceptual_weight));
    DUET_TRY(get_float(c, "style_weight", o->style_weight, &o->style_weight));
    DUET_TRY(duet_config_get_string_or(c, "criterion", "l1", &o->criterion));
    DUET_TRY(duet_config_get_string_or(c, "pretrained", "", &o->weights_path));
    if (strncmp(o->weights_path, "torchvision://", 14) == 0)
        return duet__error(DUET_ECONFIG, "%s: pretrained = '%s': duet reads VGG weights from a "
                           "safetensors file (torchvision's state dict converted, keys "
                           "features.<i>.weight); give its path", duet_config_name(c),
                           o->weights_path);
    return DUET_OK;
}

static int read_test_cfg(duet_config *c, const char *path, duet_test_cfg *o, int crop_default) {
    *o = duet_test_cfg_default();
    o->crop_border = crop_default;
    if (!duet_config_has(c, path)) return DUET_OK;
    duet_config *t = NULL;
    DUET_TRY(duet_config_sub(c, path, &t));
    int rc = DUET_OK;
    if (duet_config_has(t, "metrics")) {
        size_t n = 0;
        const char *names[DUET_MAX_METRICS];
        rc = duet_config_get_string_array(t, "metrics", names, DUET_MAX_METRICS, &n);
        for (size_t i = 0; i < n && rc == DUET_OK; i++) {
            /* Static names, so that the settings outlive the config. */
            if (strcmp(names[i], "PSNR") == 0) o->metrics[i] = "PSNR";
            else if (strcmp(names[i], "SSIM") == 0) o->metrics[i] = "SSIM";
            else
                rc = duet__error(DUET_ECONFIG, "%s.metrics: '%s' is not supported (PSNR, SSIM)",
                                 path, names[i]);
        }
        o->nmetrics = (int)n;
    }
    if (rc == DUET_OK) rc = get_int_in(t, "crop_border", o->crop_border, 0, &o->crop_border);
    const char *conv = "";
    if (rc == DUET_OK) rc = duet_config_get_string_or(t, "convert_to", "", &conv);
    if (rc == DUET_OK && conv[0] != '\0') {
        if (strcmp(conv, "y") == 0 || strcmp(conv, "Y") == 0) o->convert_to = "y";
        else rc = duet__error(DUET_ECONFIG, "%s.convert_to: '%s' (use \"y\" or leave it out)",
                              path, conv);
    }
    duet_config_destroy(t);
    return rc;
}

/* ---- networks and losses -------------------------------------------------------- */

static int build_msrresnet(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    (void)path;
    duet_msrresnet_opts o;
    DUET_TRY(read_msrresnet(c, &o));
    return duet_msrresnet_create(&o, rng, out);
}

static int build_modified_vgg(duet_config *c, const char *path, duet_rng *rng,
                              duet_module **out) {
    (void)path;
    duet_modified_vgg_opts o;
    DUET_TRY(read_modified_vgg(c, &o));
    return duet_modified_vgg_create(&o, rng, out);
}

static int build_l1_loss(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    (void)path, (void)rng;
    float w;
    DUET_TRY(read_pixel_loss(c, &w));
    return duet_l1_loss_module_create(w, out);
}

static int build_mse_loss(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    (void)path, (void)rng;
    float w;
    DUET_TRY(read_pixel_loss(c, &w));
    return duet_mse_loss_module_create(w, out);
}

static int build_gan_loss(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    (void)path, (void)rng;
    duet_gan_loss_opts o;
    DUET_TRY(read_gan_loss(c, &o));
    return duet_gan_loss_create(&o, out);
}

static int build_perceptual(duet_config *c, const char *path, duet_rng *rng,
                            duet_module **out) {
    (void)path;
    duet_perceptual_loss_opts o;
    DUET_TRY(read_perceptual(c, &o));
    return duet_perceptual_loss_create(&o, rng, out);
}
/* ESRGAN's block, at the end of this file. */
static int build_rrdbnet_module(duet_config *c, duet_rng *rng, duet_module **out);
static int build_rrdbnet(duet_config *c, const char *path, duet_rng *rng, duet_module **out) {
    (void)path;
    return build_rrdbnet_module(c, rng, out);
}
static int build_esrgan(duet_config *m, const char *path, duet_rng *rng, duet_model **out);
static bool generator_is_rrdbnet(duet_config *m);
static int build_basic_restorer_rrdbnet(duet_config *m, const char *path, duet_rng *rng,
                                        duet_model **out);

int duet_build_module(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_config *c = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(cfg, path, &c, &type));
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

/* ---- models ---------------------------------------------------------------------- */

/* A part's group at "<model>.<part>": its type must be `want`; reader fills
 * the options. */
static int read_part(duet_config *m, const char *model_path, const char *part, const char *want,
                     int (*reader)(duet_config *, void *), void *opts) {
    duet_config *c = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(m, part, &c, &type));
    char *path = duet__strf("%s.%s", model_path, part);
    int rc = path != NULL ? expect_type(path, type, want)
                          : duet__error(DUET_ENOMEM, "registry: out of memory");
    free(path);
    if (rc == DUET_OK) rc = reader(c, opts);
    duet_config_destroy(c);
    return rc;
}

static int rd_msrresnet(duet_config *c, void *o) { return read_msrresnet(c, o); }
static int rd_vgg(duet_config *c, void *o) { return read_modified_vgg(c, o); }
static int rd_gan(duet_config *c, void *o) { return read_gan_loss(c, o); }
static int rd_percep(duet_config *c, void *o) { return read_perceptual(c, o); }
static int rd_l1(duet_config *c, void *o) { return read_pixel_loss(c, o); }

/* `train_cfg = {};` holds nothing to read; any key in it is reported as
 * unknown by duet_config_check_unused. */
static int mark_empty_group(duet_config *m, const char *key) {
    if (!duet_config_has(m, key)) return DUET_OK;
    size_t n = 0;
    DUET_TRY(duet_config_length(m, key, &n));
    return n == 0 ? duet_config_mark_used(m, key) : DUET_OK;
}

static int check_pretrained(duet_config *m, const char *path) {
    const char *pre = "";
    DUET_TRY(duet_config_get_string_or(m, "pretrained", "", &pre));
    if (pre[0] != '\0')
        return duet__error(DUET_EUNSUPPORTED, "%s.pretrained = '%s': start from a checkpoint with "
                           "load_from instead", path, pre);
    return DUET_OK;
}

static int build_srgan(duet_config *m, const char *path, duet_rng *rng, duet_model **out) {
    duet_srgan_opts o = duet_srgan_opts_default();
    DUET_TRY(read_part(m, path, "generator", "MSRResNet", rd_msrresnet, &o.generator));
    DUET_TRY(read_part(m, path, "discriminator", "ModifiedVGG", rd_vgg, &o.discriminator));
    DUET_TRY(read_part(m, path, "gan_loss", "GANLoss", rd_gan, &o.gan_loss));
    o.pixel_loss_weight = 0.0f;
    if (duet_config_has(m, "pixel_loss"))
        DUET_TRY(read_part(m, path, "pixel_loss", "L1Loss", rd_l1, &o.pixel_loss_weight));
    o.perceptual = duet_config_has(m, "perceptual_loss");
    if (o.perceptual)
        DUET_TRY(read_part(m, path, "perceptual_loss", "PerceptualLoss", rd_percep,
                           &o.perceptual_loss));
    DUET_TRY(get_int(m, "train_cfg.disc_steps", 1, &o.disc_steps));
    DUET_TRY(get_int(m, "train_cfg.disc_init_steps", 0, &o.disc_init_steps));
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o.test_cfg, o.generator.upscale_factor));
    DUET_TRY(check_pretrained(m, path));
    return duet_srgan_create(&o, rng, out);
}

static int build_basic_restorer(duet_config *m, const char *path, duet_rng *rng,
                                duet_model **out) {
    /* MMEditing's PSNR stage of ESRGAN is a BasicRestorer around RRDBNet. */
    if (generator_is_rrdbnet(m)) return build_basic_restorer_rrdbnet(m, path, rng, out);
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    DUET_TRY(read_part(m, path, "generator", "MSRResNet", rd_msrresnet, &o.generator));
    duet_config *c = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(m, "pixel_loss", &c, &type));
    int rc = DUET_OK;
    if (strcmp(type, "L1Loss") == 0) o.pixel_loss = "L1Loss";
    else if (strcmp(type, "MSELoss") == 0) o.pixel_loss = "MSELoss";
    else rc = duet__error(DUET_ECONFIG, "%s.pixel_loss.type: '%s' (use L1Loss or MSELoss)", path,
                          type);
    if (rc == DUET_OK) rc = read_pixel_loss(c, &o.pixel_loss_weight);
    duet_config_destroy(c);
    DUET_TRY(rc);
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o.test_cfg, o.generator.upscale_factor));
    DUET_TRY(check_pretrained(m, path));
    return duet_basic_restorer_create(&o, rng, out);
}

int duet_build_model(duet_config *cfg, const char *path, duet_rng *rng, duet_model **out) {
    *out = NULL;
    duet_config *m = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(cfg, path, &m, &type));
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

/* MMEditing's SRFolderGTDataset (GT folder, LQ by bicubic) and SRFolderDataset
 * (paired folders). Training sets read the crop and flip settings of the
 * pipeline as flat keys. */
static int build_sr_dataset(duet_config *d, const char *path, bool train, bool paired,
                            duet_dataset **out) {
    (void)path; /* the config view's keys carry it in their messages */
    duet_sr_dataset_opts o = duet_sr_dataset_options_default();
    int64_t scale = 4, gt_size = o.gt_size;
    DUET_TRY(duet_config_get_string(d, "gt_folder", &o.gt_dir));
    if (paired) DUET_TRY(duet_config_get_string(d, "lq_folder", &o.lq_dir));
    DUET_TRY(duet_config_get_int_in_or(d, "scale", 4, 1, DUET_MAX_SCALE, &scale));
    DUET_TRY(duet_config_get_bool_or(d, "lazy", false, &o.lazy));
    int64_t max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(d, "max_image_pixels", DUET_IMAGE_MAX_PIXELS_DEFAULT, 0,
                                       INT64_MAX, &max_pixels));
    DUET_TRY(duet_image_pixel_limit(max_pixels, &o.max_pixels));
    if (train) {
        DUET_TRY(duet_config_get_int_in_or(d, "gt_patch_size", o.gt_size, 1, (int64_t)1 << 24,
                                           &gt_size));
        DUET_TRY(duet_config_get_bool_or(d, "use_hflip", true, &o.use_hflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_vflip", true, &o.use_vflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_transpose", true, &o.use_transpose));
    }
    o.scale = (int)scale;
    o.gt_size = gt_size;
    return train ? duet_sr_train_dataset_create(&o, out) : duet_sr_val_dataset_create(&o, out);
}

static int build_sr_folder_gt(duet_config *d, const char *path, bool train,
                              duet_dataset **out) {
    return build_sr_dataset(d, path, train, false, out);
}

static int build_sr_folder(duet_config *d, const char *path, bool train, duet_dataset **out) {
    return build_sr_dataset(d, path, train, true, out);
}

int duet_build_dataset(duet_config *cfg, const char *path, bool train, duet_dataset **out) {
    *out = NULL;
    duet_config *d = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(cfg, path, &d, &type));
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
    register_one(duet_registry_register_module("MSRResNet", build_msrresnet));
    register_one(duet_registry_register_module("ModifiedVGG", build_modified_vgg));
    register_one(duet_registry_register_loss("L1Loss", build_l1_loss));
    register_one(duet_registry_register_loss("MSELoss", build_mse_loss));
    register_one(duet_registry_register_loss("GANLoss", build_gan_loss));
    register_one(duet_registry_register_loss("PerceptualLoss", build_perceptual));
    register_one(duet_registry_register_module("RRDBNet", build_rrdbnet));
    register_one(duet_registry_register_model("SRGAN", build_srgan));
    register_one(duet_registry_register_model("ESRGAN", build_esrgan));
    register_one(duet_registry_register_model("BasicRestorer", build_basic_restorer));
    register_one(duet_registry_register_model("Pix2Pix", duet__build_pix2pix));
    register_one(duet_registry_register_model("CycleGAN", duet__build_cyclegan));
    register_one(duet_registry_register_dataset("SRFolderGTDataset", build_sr_folder_gt));
    register_one(duet_registry_register_dataset("SRFolderDataset", build_sr_folder));
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
    int rc = open_group(cfg, path, &c, &type);
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
    /* Absent: 0.0, the wrapper's default (25 MB); given: must be > 0. */
    if (rc == DUET_OK)
        rc = duet_config_get_double_in_or(c, "bucket_cap_mb", 0.0, DBL_TRUE_MIN, 1e6,
                                          &o.bucket_cap_mb);
    if (rc == DUET_OK) rc = duet_config_get_bool_or(c, "sync_bn", false, &o.sync_bn);
    if (rc == DUET_OK) rc = get_int(c, "dim", 0, &o.dim);
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
        DUET_TRY(get_float(c, "eps", o.eps, &o.eps));
        DUET_TRY(get_float(c, "weight_decay", o.weight_decay, &o.weight_decay));
        return duet_optimizer_set_add_adam(set, model, part, &o);
    }
    if (strcmp(type, "SGD") == 0) {
        duet_sgd_opts o = duet_sgd_opts_default();
        o.lr = (float)lr;
        DUET_TRY(get_float(c, "momentum", o.momentum, &o.momentum));
        DUET_TRY(get_float(c, "dampening", o.dampening, &o.dampening));
        DUET_TRY(get_float(c, "weight_decay", o.weight_decay, &o.weight_decay));
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

/* ---- ESRGAN (issue 9): RRDBNet, ESRGAN, BasicRestorer with RRDBNet ---------------- */

/* MMEditing's RRDBNet arguments; `scale` is the later 0.x name of the
 * factor (default 4, the only one duet builds). */
static int read_rrdbnet(duet_config *c, duet_rrdbnet_opts *o) {
    *o = duet_rrdbnet_opts_default();
    DUET_TRY(get_int(c, "in_channels", o->in_channels, &o->in_channels));
    DUET_TRY(get_int(c, "out_channels", o->out_channels, &o->out_channels));
    DUET_TRY(get_int(c, "mid_channels", o->mid_channels, &o->mid_channels));
    DUET_TRY(get_int(c, "num_blocks", o->num_blocks, &o->num_blocks));
    DUET_TRY(get_int(c, "growth_channels", o->growth_channels, &o->growth_channels));
    return get_int(c, "scale", o->upscale_factor, &o->upscale_factor);
}

static int rd_rrdbnet(duet_config *c, void *o) { return read_rrdbnet(c, o); }

static int build_rrdbnet_module(duet_config *c, duet_rng *rng, duet_module **out) {
    duet_rrdbnet_opts o;
    DUET_TRY(read_rrdbnet(c, &o));
    return duet_rrdbnet_create(&o, rng, out);
}

static bool generator_is_rrdbnet(duet_config *m) {
    const char *type = NULL;
    return duet_config_get_string_or(m, "generator.type", "", &type) == DUET_OK &&
           strcmp(type, "RRDBNet") == 0;
}

/* As build_srgan, with an RRDBNet generator. */
static int build_esrgan(duet_config *m, const char *path, duet_rng *rng, duet_model **out) {
    duet_esrgan_opts o = duet_esrgan_opts_default();
    DUET_TRY(read_part(m, path, "generator", "RRDBNet", rd_rrdbnet, &o.generator));
    DUET_TRY(read_part(m, path, "discriminator", "ModifiedVGG", rd_vgg, &o.discriminator));
    DUET_TRY(read_part(m, path, "gan_loss", "GANLoss", rd_gan, &o.gan_loss));
    o.pixel_loss_weight = 0.0f;
    if (duet_config_has(m, "pixel_loss"))
        DUET_TRY(read_part(m, path, "pixel_loss", "L1Loss", rd_l1, &o.pixel_loss_weight));
    o.perceptual = duet_config_has(m, "perceptual_loss");
    if (o.perceptual)
        DUET_TRY(read_part(m, path, "perceptual_loss", "PerceptualLoss", rd_percep,
                           &o.perceptual_loss));
    DUET_TRY(get_int(m, "train_cfg.disc_steps", 1, &o.disc_steps));
    DUET_TRY(get_int(m, "train_cfg.disc_init_steps", 0, &o.disc_init_steps));
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o.test_cfg, o.generator.upscale_factor));
    DUET_TRY(check_pretrained(m, path));
    return duet_esrgan_create(&o, rng, out);
}

/* MMEditing's esrgan_psnr config: a BasicRestorer around an RRDBNet. */
static int build_basic_restorer_rrdbnet(duet_config *m, const char *path, duet_rng *rng,
                                        duet_model **out) {
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    duet_rrdbnet_opts g;
    DUET_TRY(read_part(m, path, "generator", "RRDBNet", rd_rrdbnet, &g));
    duet_config *c = NULL;
    const char *type = NULL;
    DUET_TRY(open_group(m, "pixel_loss", &c, &type));
    int rc = DUET_OK;
    if (strcmp(type, "L1Loss") == 0) o.pixel_loss = "L1Loss";
    else if (strcmp(type, "MSELoss") == 0) o.pixel_loss = "MSELoss";
    else rc = duet__error(DUET_ECONFIG, "%s.pixel_loss.type: '%s' (use L1Loss or MSELoss)", path,
                          type);
    if (rc == DUET_OK) rc = read_pixel_loss(c, &o.pixel_loss_weight);
    duet_config_destroy(c);
    DUET_TRY(rc);
    DUET_TRY(mark_empty_group(m, "train_cfg"));
    DUET_TRY(read_test_cfg(m, "test_cfg", &o.test_cfg, g.upscale_factor));
    DUET_TRY(check_pretrained(m, path));
    return duet_basic_restorer_rrdbnet_create(&g, &o, rng, out);
}
