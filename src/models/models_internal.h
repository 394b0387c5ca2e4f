/* Helpers shared by the restorers in src/models/. */
#ifndef DUET_MODELS_INTERNAL_H
#define DUET_MODELS_INTERNAL_H

#include "duet/models.h"

/* MMEditing's forward_test: out->output = the model's forward(lq); with a
 * "gt" in the batch, the mean of each metric of cfg over the samples. */
int duet__restorer_val_step(duet_model *m, const duet_test_cfg *cfg, const duet_batch *batch,
                            duet_val_output *out);

#endif
