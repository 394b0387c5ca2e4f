/* Helpers shared by the restorers in src/models/. */
#ifndef DUET_MODELS_INTERNAL_H
#define DUET_MODELS_INTERNAL_H

#include "duet/models.h"

/* MMEditing's forward_test: out->output = the model's forward(lq); with a
 * "gt" in the batch, the mean of each metric of cfg over the samples. */
int duet__restorer_val_step(duet_model *m, const duet_test_cfg *cfg, const duet_batch *batch,
                            duet_val_output *out);

/* For a wrapper that puts one module (a DDP) around the model's root:
 * from now on `outer` owns the root and the model destroys outer instead;
 * the parts are still found in the root. outer NULL: the root is gone (a
 * failed wrap destroyed it); the model is then only fit for destroy. */
void duet__model_set_outer(duet_model *m, duet_module *outer);
/* outer when set, else the root (borrowed). */
duet_module *duet__model_outer(duet_model *m);

#endif
