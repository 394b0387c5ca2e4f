/* Checkpoints of a whole model: its state dict and optimizers as
 * duet_checkpoint_save writes them, plus the model's own state through the
 * save_state / load_state hooks of its ops (SRGAN's step counter, image
 * pools), so that the runner never needs to know a model type. */
#include "train/checkpoint_internal.h"

static int save_hook(void *ctx, duet_st_writer *w) { return duet_model_save_state(ctx, w); }

int duet_checkpoint_save_model(const char *path, duet_model *model,
                               const duet_named_optimizer *opts, size_t nopts,
                               const duet_meta_item *meta, size_t nmeta) {
    return duet__checkpoint_save_ex(path, duet_model_module(model), opts, nopts, meta, nmeta,
                                    save_hook, model);
}

int duet_checkpoint_resume_model(const char *path, duet_model *model,
                                 const duet_named_optimizer *opts, size_t nopts,
                                 duet_st **ckpt_out) {
    if (ckpt_out != NULL) *ckpt_out = NULL;
    duet_st *ck = NULL;
    DUET_TRY(duet_checkpoint_resume(path, duet_model_module(model), opts, nopts, &ck));
    int rc = duet_model_load_state(model, ck);
    if (rc != DUET_OK) duet__error_context(rc, "%s", path);
    if (rc != DUET_OK || ckpt_out == NULL) duet_st_destroy(ck);
    else *ckpt_out = ck;
    return rc;
}
