/* Checkpoints of a whole model: its state dict and optimizers as
 * duet_checkpoint_save writes them, plus the model's own state through the
 * save_state / load_state hooks of its ops (SRGAN's step counter, image
 * pools), so that the runner never needs to know a model type. */
#include "runner/checkpoint_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct save_ctx {
    duet_model *model;
    void (*progress)(void *ctx);
    void *pctx;
} save_ctx;

static int save_hook(void *ctx, duet_st_writer *w) {
    save_ctx *s = ctx;
    duet_st_writer_set_progress(w, s->progress, s->pctx);
    return duet_model_save_state(s->model, w);
}

int duet__checkpoint_save_model_ex(const char *path, duet_model *model,
                                   const duet_named_optimizer *opts, size_t nopts,
                                   const duet_meta_item *meta, size_t nmeta,
                                   void (*progress)(void *ctx), void *pctx) {
    save_ctx s = {model, progress, pctx};
    return duet__checkpoint_save_ex(path, duet_model_module(model), opts, nopts, meta, nmeta,
                                    save_hook, &s);
}

int duet_checkpoint_save_model(const char *path, duet_model *model,
                               const duet_named_optimizer *opts, size_t nopts,
                               const duet_meta_item *meta, size_t nmeta) {
    return duet__checkpoint_save_model_ex(path, model, opts, nopts, meta, nmeta, NULL, NULL);
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

/* The parts evaluation uses, and the moving average of each that the model
 * has (the runner's EMA hook adds P_ema before loading): every one of their
 * entries must be in the file. */
static int require_eval_parts(const duet_st *ck, duet_model *model) {
    const size_t n = duet_model_eval_part_count(model);
    for (size_t i = 0; i < n; i++) {
        const char *part = duet_model_eval_part_at(model, i);
        char prefix[160];
        snprintf(prefix, sizeof prefix, "%s.", part);
        DUET_TRY(duet_checkpoint_require(ck, duet_model_module(model), prefix));
        snprintf(prefix, sizeof prefix, "%s_ema", part);
        if (duet_model_part(model, prefix) == NULL) continue;
        strcat(prefix, ".");
        DUET_TRY(duet_checkpoint_require(ck, duet_model_module(model), prefix));
    }
    return DUET_OK;
}

int duet_checkpoint_load_eval(const char *path, duet_model *model) {
    duet_st *ck = NULL;
    DUET_TRY(duet_st_load(path, &ck));
    duet__checkpoint_note_unchecked(ck);
    int rc = require_eval_parts(ck, model);
    if (rc == DUET_OK) rc = duet_checkpoint_load_model(ck, duet_model_module(model), false, NULL,
                                                       NULL, NULL);
    duet_st_destroy(ck);
    return rc;
}
