/* duet/registry.h — building networks, losses, models, wrappers, optimizers
 * and datasets from a config by type name, and registering new types (the
 * open model contract).
 *
 * Usage:
 *
 *   duet_config *cfg = NULL;
 *   DUET_TRY(duet_config_load_string("net = { type = \"MSRResNet\"; mid_channels = 8; "
 *                                    "num_blocks = 1; };", "example.cfg", &cfg));
 *   duet_rng rng = duet_rng_make(0, 0);
 *   duet_module *net = NULL;
 *   DUET_TRY(duet_build_module(cfg, "net", &rng, &net));  // by its type name
 *   DUET_TRY(duet_config_check_unused(cfg));              // every key was read
 *   int64_t nparams = duet_module_num_parameters(net, true);  // 6867
 *   duet_module_destroy(net);
 *   duet_config_destroy(cfg);
 */
#ifndef DUET_REGISTRY_H
#define DUET_REGISTRY_H

#include "duet/config.h"
#include "duet/data.h"
#include "duet/nn.h"
#include "duet/wrapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- registry: building parts, models, wrappers and optimizers from a
 * config by type name (src/registry/registry.c) ----------------------------
 * Each builder reads the group at `path` (its `type` and the options it
 * knows, each marked used, so duet_config_check_unused catches typos) and
 * fails with DUET_ECONFIG naming the path and the known type names when the
 * type is unknown. Option names and defaults are MMEditing's. */

/* Networks and losses: MSRResNet, RRDBNet, ModifiedVGG, UnetGenerator,
 * PatchDiscriminator, ResnetGenerator (without use_dropout: its Dropout
 * layers borrow a model's rng), L1Loss, MSELoss, GANLoss, PerceptualLoss,
 * and any registered type. MMEditing's layer_weights = {'34': 1.0} is written
 * `layer_ids = [34]; layer_weights = [1.0];` or `layer_weights = { conv34 =
 * 1.0; };` (libconfig names cannot be numbers: the index is the trailing
 * digits); vgg_type vgg11, vgg13, vgg16, vgg19, or cfg = [64, 64, 0, 128]
 * for a custom stack with 0 for a max pool; pretrained = a safetensors path
 * (torchvision's VGG state dict, keys features.<i>.weight) or "". */
int duet_build_module(duet_config *cfg, const char *path, duet_rng *rng, duet_module **out);
/* Models: SRGAN, ESRGAN, BasicRestorer (around MSRResNet or RRDBNet),
 * Pix2Pix, CycleGAN, or a registered type. Parts are groups whose type
 * the model must allow (SRGAN's generator an MSRResNet, ...); train_cfg
 * {disc_steps, disc_init_steps, ...}, test_cfg {metrics, crop_border,
 * convert_to, ...} as MMEditing's. */
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
