/* duet/checkpoint.h — checkpoint files: a model's state dict, its optimizers'
 * states and string metadata in one safetensors file.
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
#ifndef DUET_CHECKPOINT_H
#define DUET_CHECKPOINT_H

#include "duet/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checkpoint files -------------------------------------------------------
 * One safetensors file holds a model's state dict under its unwrapped
 * PyTorch names (generator.conv_first.weight, discriminator.bn0_0.
 * num_batches_tracked as 0-d I64), each named optimizer's state under
 * "optimizer.<name>." (duet_optimizer_save_state), and string metadata
 * (iteration, seed, world size, config text, RNG state as text, ...; the
 * caller chooses the keys, "duet_version" is added). A safetensors file
 * written by PyTorch with the same names loads as weights.
 *
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
/* DUET_ENOTFOUND when ckpt lacks a state-dict entry of model whose name
 * starts with prefix ("generators."), naming the file, the prefix and the
 * entries, else DUET_OK. */
int duet_checkpoint_require(const duet_st *ckpt, duet_module *model, const char *prefix);
/* test / infer: opens path and loads the model's weights non-strictly
 * (duet_checkpoint_load_model), after checking that the file holds every
 * state-dict entry of the parts evaluation uses (duet_model_eval_part_at:
 * P.*, and P_ema.* when the model has a part P_ema); a checkpoint without
 * them is DUET_ENOTFOUND naming the file and the missing prefix, so that a
 * wrong checkpoint never runs random weights. */
int duet_checkpoint_load_eval(const char *path, duet_model *model);
/* Integer metadata: DUET_ENOTFOUND when absent ("<file> has no metadata
 * 'iter': not a duet training checkpoint"), DUET_EFORMAT when not a decimal
 * integer. */
int duet_checkpoint_meta_int(const duet_st *ckpt, const char *key, int64_t *out);
int duet_checkpoint_meta_uint(const duet_st *ckpt, const char *key, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
