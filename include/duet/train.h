/* duet/train.h — the train layer: config files, checkpoint files, and (in
 * later sections) the iteration runner and its hooks.
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
#ifndef DUET_TRAIN_H
#define DUET_TRAIN_H

#include "duet/data.h"
#include "duet/nn.h"
#include "duet/wrapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== config (owner: st) ==================================================
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
 * key becomes its text, a group value merges member by member; other changes
 * fail with DUET_ECONFIG naming the key, its type and where it was defined.
 * A new key is created, with any missing groups on its path. */
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
/* DUET_ECONFIG naming the first setting (in file order, under cfg's root)
 * that no getter read: "configs/x.cfg:12: unknown key
 * 'model.generator.mid_channel' (did you mean 'mid_channels'?)". */
int duet_config_check_unused(const duet_config *cfg);

/* The whole config after overrides, as libconfig text that loads back to
 * the same values (floats round-trip exactly; comments are not kept). For
 * checkpoint metadata. Free *out with free(). */
int duet_config_text(const duet_config *cfg, char **out);

/* Where the setting at `path` was defined, for messages about its value:
 * "configs/x.cfg:12", "--set a.b=1", or the config's name when absent.
 * (Added by the runner.) */
void duet_config_where(const duet_config *cfg, const char *path, char *buf, size_t size);

/* ==== checkpoint files (owner: st) ========================================
 * One safetensors file holds a model's state dict under its unwrapped
 * PyTorch names (generator.conv_first.weight, discriminator.bn0_0.
 * num_batches_tracked as 0-d I64), each named optimizer's state under
 * "optimizer.<name>." (duet_optimizer_save_state), and string metadata
 * (iteration, seed, world size, config text, RNG state as text, ...; the
 * caller chooses the keys, "duet_version" is added). A safetensors file
 * written by PyTorch with the same names loads as weights.
 *
 * Usage:
 *
 *   duet_named_optimizer opts[] = {{"generator", g_opt}, {"discriminator", d_opt}};
 *   duet_meta_item meta[] = {{"iter", "1000"}, {"config", text}};
 *   DUET_TRY(duet_checkpoint_save("work/iter_1000.safetensors", model, opts, 2, meta, 2));
 *
 *   duet_st *ck = NULL;                                 // --resume
 *   DUET_TRY(duet_checkpoint_resume("work/iter_1000.safetensors", model, opts, 2, &ck));
 *   int64_t iter;
 *   DUET_TRY(duet_checkpoint_meta_int(ck, "iter", &iter));
 *   duet_st_destroy(ck);
 */

typedef struct duet_named_optimizer {
    const char *name;    /* "generator": no '.', not empty */
    duet_optimizer *opt; /* borrowed */
} duet_named_optimizer;

typedef struct duet_meta_item {
    const char *key;
    const char *value;
} duet_meta_item;

/* Writes the checkpoint atomically (duet_st_writer_save: temporary file,
 * fsync, rename, fsync of the folder); an existing file at path is replaced
 * only when the new one is complete. Errors name the file. */
int duet_checkpoint_save(const char *path, duet_module *model, const duet_named_optimizer *opts,
                         size_t nopts, const duet_meta_item *meta, size_t nmeta);

/* Loads the model's weights from an open checkpoint (duet_st_load), ignoring
 * its "optimizer." entries. strict (--resume): every state-dict key present,
 * no unexpected key, else DUET_ENOTFOUND listing both ("optimizer." and
 * DUET_MODEL_STATE_PREFIX entries are never weights). Non-strict
 * (load_from): missing and unexpected keys are logged at WARN level with
 * their names and counted in *nmissing and *nunexpected (either may be
 * NULL), except that state-dict keys starting with `require_prefix` (NULL:
 * none), e.g. "generator.", must be present. Shape mismatches always fail.
 * Nothing is copied unless everything checks out. Errors name the file. */
int duet_checkpoint_load_model(const duet_st *ckpt, duet_module *model, bool strict,
                               const char *require_prefix, size_t *nmissing,
                               size_t *nunexpected);
/* Loads each optimizer's state from "optimizer.<name>.". Every named
 * optimizer must have state in the file (DUET_ENOTFOUND naming it,
 * checked before anything loads); strict: the file may not hold state for
 * an optimizer that is not in opts. An optimizer whose entries do not fit
 * fails without changing (those before it in opts are loaded). */
int duet_checkpoint_load_optimizers(const duet_st *ckpt, const duet_named_optimizer *opts,
                                    size_t nopts, bool strict);
/* --resume: opens path, loads the weights strictly and the optimizers
 * strictly. *ckpt_out (may be NULL) keeps the file open for its metadata:
 * free with duet_st_destroy. */
int duet_checkpoint_resume(const char *path, duet_module *model,
                           const duet_named_optimizer *opts, size_t nopts, duet_st **ckpt_out);
/* A model's checkpoint: duet_checkpoint_save of its module, plus what the
 * save_state hook of its ops writes (metadata; tensors named
 * DUET_MODEL_STATE_PREFIX..., which no weight loading reads). */
int duet_checkpoint_save_model(const char *path, duet_model *model,
                               const duet_named_optimizer *opts, size_t nopts,
                               const duet_meta_item *meta, size_t nmeta);
/* --resume of a model: duet_checkpoint_resume, then the load_state hook of
 * its ops (duet_model_load_state). *ckpt_out as duet_checkpoint_resume. */
int duet_checkpoint_resume_model(const char *path, duet_model *model,
                                 const duet_named_optimizer *opts, size_t nopts,
                                 duet_st **ckpt_out);
/* load_from / test: opens path and loads the weights (see load_model). */
int duet_checkpoint_load_weights(const char *path, duet_module *model, bool strict,
                                 const char *require_prefix, size_t *nmissing,
                                 size_t *nunexpected);
/* Integer metadata: DUET_ENOTFOUND when absent ("<file> has no metadata
 * 'iter': not a duet training checkpoint"), DUET_EFORMAT when not a decimal
 * integer. */
int duet_checkpoint_meta_int(const duet_st *ckpt, const char *key, int64_t *out);
int duet_checkpoint_meta_uint(const duet_st *ckpt, const char *key, uint64_t *out);

/* ==== runner (owner: runner) ================================================
 * The commands behind `duet train | test | infer` (tools/duet.c only parses
 * arguments). Each runs as one process or as every rank of an MPI job
 * (mpirun / srun); MPI is initialised when needed and left initialised (the
 * program calls duet_comm_finalize() before it exits).
 *
 * Errors: a function prints its error once on stderr ("duet: error: ...",
 * from the lowest failing rank) and returns its status (also in
 * duet_last_error()). An error that happens on some ranks only once
 * training runs (a bad image, a NaN loss, a failed write) cannot be agreed
 * on without leaving the others blocked in a collective: it is printed with
 * its rank and the whole job is aborted (MPI_Abort), leaving the last good
 * checkpoint intact.
 *
 *   duet_runner_opts o = duet_runner_opts_default();
 *   o.config = "configs/msrresnet_x4_tiny.cfg";
 *   const char *sets[] = {"total_iters=100"};
 *   o.sets = sets; o.nsets = 1;
 *   if (duet_runner_train(&o) != DUET_OK) ...   // message already printed
 *   duet_comm_finalize();
 */
/* Exit statuses of `duet` (and of the whole job under mpirun / srun):
 * 0 done, 1 error, 2 usage; DUET_EXIT_STOPPED: stopped by SIGTERM or SIGINT
 * at an iteration boundary with a checkpoint written (continue with
 * --resume; duet_runner_train returned DUET_ESTOPPED); DUET_EXIT_TIMEOUT: a
 * collective made no progress for dist.timeout seconds (a stalled or dead
 * rank) and the job was aborted. */
#define DUET_EXIT_STOPPED 75 /* sysexits' EX_TEMPFAIL: try again */
#define DUET_EXIT_TIMEOUT 76 /* sysexits' EX_PROTOCOL: a peer failed us */

typedef struct duet_runner_opts {
    const char *config;             /* libconfig file (required) */
    const char *const *sets;        /* nsets "a.b=value" overrides, in order */
    size_t nsets;
    const char *work_dir;           /* train: NULL = the config's work_dir */
    bool resume;                    /* train: continue a run */
    const char *resume_from;        /* train: checkpoint; NULL = WORK_DIR/latest.safetensors */
    const char *checkpoint;         /* test, infer: weights to use (required) */
    const char *out_dir;            /* test: optional, infer: required; created */
    const char *const *images;      /* infer: nimages PNG/JPEG files */
    size_t nimages;
    bool quiet;                     /* print nothing on stdout (tests) */
} duet_runner_opts;
duet_runner_opts duet_runner_opts_default(void);

/* What `duet test` measures: means over the validation images (each image
 * counted once over all ranks). */
typedef struct duet_test_result {
    int64_t images;
    int crop_border;                   /* pixels ignored at each edge */
    int rank;                          /* this process's rank (print on 0) */
    double psnr, ssim;                 /* the model (0 when test_cfg does not name it) */
    double psnr_bicubic, ssim_bicubic; /* MATLAB bicubic upscaling of the inputs */
    /* The metrics model.test_cfg.metrics names (default PSNR, SSIM), no
     * others, in its order: the model, and bicubic upscaling. */
    duet_log_vars metrics, metrics_bicubic;
} duet_test_result;

/* `duet info`: version, CPU and its features, cores, the kernel path
 * (GEMM library and ISA), oneDNN / OpenBLAS / MPI library versions, threads
 * and the environment variables that change them, like
 * torch.__config__.show(). DUET_EIO when f cannot be written. */
int duet_info_print(FILE *f);

/* Trains the config's model for total_iters iterations with its hooks (LR
 * schedule, logging, evaluation, checkpoints); see docs/pipeline.md. */
int duet_runner_train(const duet_runner_opts *opts);
/* Evaluates opts->checkpoint on data.val next to bicubic. Prints nothing:
 * *result holds the means, the same on every rank (result->rank says which
 * rank this is, so that a caller prints once). */
int duet_runner_test(const duet_runner_opts *opts, duet_test_result *result);
/* Upscales opts->images into opts->out_dir/<name>.png. */
int duet_runner_infer(const duet_runner_opts *opts);

/* ---- registry: building parts, models, wrappers and optimizers from a
 * config by type name (src/train/registry.c) ----------------------------
 * Each builder reads the group at `path` (its `type` and the options it
 * knows, each marked used, so duet_config_check_unused catches typos) and
 * fails with DUET_ECONFIG naming the path and the known type names when the
 * type is unknown. Option names and defaults are MMEditing's. */

/* Networks and losses: MSRResNet, ModifiedVGG, L1Loss, MSELoss, GANLoss,
 * PerceptualLoss, and any registered type. MMEditing's layer_weights = {'34': 1.0} is written
 * `layer_ids = [34]; layer_weights = [1.0];` or `layer_weights = { conv34 =
 * 1.0; };` (libconfig names cannot be numbers: the index is the trailing
 * digits); vgg_type vgg11, vgg13, vgg16, vgg19, or cfg = [64, 64, 0, 128]
 * for a custom stack with 0 for a max pool; pretrained = a safetensors path
 * (torchvision's VGG state dict, keys features.<i>.weight) or "". */
int duet_build_module(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out);
/* Models: SRGAN, BasicRestorer, or a registered type (parts as groups, train_cfg {disc_steps,
 * disc_init_steps}, test_cfg {metrics, crop_border, convert_to}). */
int duet_build_model(duet_config *cfg, const char *path, duet_rng *rng, duet_model **out);
/* Wrappers: DistributedDataParallelWrapper, DistributedDataParallel (keys
 * broadcast_buffers, find_unused_parameters, bucket_cap_mb, comm_hook
 * "allreduce" | "fp16" | "bf16", sync_bn, device_ids ["cpu"], dim).
 * Takes ownership of model, also on failure. */
int duet_build_wrapper(duet_config *cfg, const char *path, duet_model *model, duet_comm *comm,
                       duet_wrapper **out);
/* One optimizer per member of the group at `path`, keyed by the member's
 * name, which is a part of the model: {generator = {type = "Adam"; lr =
 * 1e-4; betas = [0.9, 0.999]; eps; weight_decay;}; ...}; types Adam, SGD
 * (lr, momentum, dampening, weight_decay, nesterov). */
int duet_build_optimizers(duet_config *cfg, const char *path, duet_model *model,
                          duet_optimizer_set **out);

/* The type names each builder knows, NULL-terminated, in registration
 * order (built-ins first). Borrowed; valid for the life of the process
 * (a later registration extends the same list). */
const char *const *duet_registry_module_types(void);
const char *const *duet_registry_model_types(void);
const char *const *duet_registry_wrapper_types(void);
const char *const *duet_registry_dataset_types(void);

/* ---- registering a type: the open model contract -------------------------
 * A model, network, loss or dataset written in C outside duet is registered
 * under a type name; a config group with that `type` is then built by the
 * builders above, so duet_runner_train trains it exactly like a built-in
 * (which registers through these same calls). Register from the main
 * thread before building anything (e.g. at the start of main, before
 * duet_runner_train); examples/custom_model.c shows a whole model.
 *
 *   static int build_toy(duet_config *cfg, const char *path, duet_rng *rng,
 *                        duet_model **out) {
 *       int64_t mid;
 *       DUET_TRY(duet_config_get_int_or(cfg, "mid_channels", 8, &mid)); // model.mid_channels
 *       ...                                          // parts, then duet_model_create
 *   }
 *   DUET_TRY(duet_registry_register_model("ToyGAN", build_toy));
 *   // config: model = { type = "ToyGAN"; mid_channels = 16; };
 *
 * A builder gets `cfg`, a view of the group (keys relative to it: read
 * "mid_channels", not "model.mid_channels"; `type` is already read) and
 * `path`, the group's full path for messages ("model"). It reads every key
 * it knows with the duet_config getters (a key nobody reads is reported as
 * unknown by duet_config_check_unused), builds sub-groups with
 * duet_build_module(cfg, "generator", ...), and returns a status with a
 * message (DUET_ECONFIG for a bad value, naming `path` and the key). On
 * failure it leaves *out NULL or a complete object (the registry destroys
 * it). */
typedef int (*duet_module_builder)(duet_config *cfg, const char *path, duet_rng *rng,
                                   duet_module **out);
typedef int (*duet_model_builder)(duet_config *cfg, const char *path, duet_rng *rng,
                                  duet_model **out);
/* train: data.train (random crops, augmentation) or data.val / test. */
typedef int (*duet_dataset_builder)(duet_config *cfg, const char *path, bool train,
                                    duet_dataset **out);

/* DUET_EINVAL when the name is empty, longer than 63 characters or already
 * registered (built-ins included), or build is NULL. */
int duet_registry_register_model(const char *type, duet_model_builder build);
int duet_registry_register_module(const char *type, duet_module_builder build);
/* Losses are modules (forward / forward2 give the loss): the same table as
 * duet_registry_register_module, named for what it registers. */
int duet_registry_register_loss(const char *type, duet_module_builder build);
int duet_registry_register_dataset(const char *type, duet_dataset_builder build);

/* Datasets: SRFolderGTDataset (gt_folder; LQ by MATLAB bicubic) and
 * SRFolderDataset (gt_folder + lq_folder), keys scale, lazy, and for
 * training gt_patch_size, use_hflip, use_vflip, use_transpose; or a
 * registered type. (`times`, MMEditing's RepeatDataset, is the runner's.) */
int duet_build_dataset(duet_config *cfg, const char *path, bool train, duet_dataset **out);

#ifdef __cplusplus
}
#endif
#endif
