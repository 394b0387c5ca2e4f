/* Checkpoint helpers shared inside src/runner/ (checkpoint.c, checkpoint_model.c). */
#ifndef DUET_TRAIN_CHECKPOINT_INTERNAL_H
#define DUET_TRAIN_CHECKPOINT_INTERNAL_H

#include "duet/train.h"

/* duet_checkpoint_save, with extra(ctx, w) (may be NULL) writing more into
 * the file before the metadata: a model's save_state hook. */
int duet__checkpoint_save_ex(const char *path, duet_module *model,
                             const duet_named_optimizer *opts, size_t nopts,
                             const duet_meta_item *meta, size_t nmeta,
                             int (*extra)(void *ctx, duet_st_writer *w), void *ctx);

/* duet_checkpoint_save_model, with progress(pctx) (may be NULL) called
 * during the write (duet_st_writer_set_progress). */
int duet__checkpoint_save_model_ex(const char *path, duet_model *model,
                                   const duet_named_optimizer *opts, size_t nopts,
                                   const duet_meta_item *meta, size_t nmeta,
                                   void (*progress)(void *ctx), void *pctx);

/* An INFO note when ck has no checksums (its data could not be verified). */
void duet__checkpoint_note_unchecked(const duet_st *ck);

#endif
