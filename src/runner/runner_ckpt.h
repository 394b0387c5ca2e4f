/* The runner's checkpoint files (private to src/runner/). */
#ifndef DUET_TRAIN_RUNNER_CKPT_H
#define DUET_TRAIN_RUNNER_CKPT_H

#include "runner/runner_internal.h"

typedef struct duet__ckpt_state {
    int64_t iter;                 /* iterations done */
    duet_sampler_state sampler;   /* where the data continues */
} duet__ckpt_state;

/* Rank 0: WORK_DIR/iter_<iter>.safetensors and latest.safetensors. */
int duet__ckpt_save(duet__run *r, const duet__ckpt_state *s);
/* Weights of the model from `path` (duet_checkpoint_load_weights). strict:
 * every key of the state dict present and no unknown key (optimizer.*
 * entries are never weights); otherwise missing and unexpected keys are
 * listed at WARN level, except that keys starting with require_prefix (may
 * be NULL) must be there. */
int duet__ckpt_load_weights(duet__run *r, const char *path, bool strict,
                            const char *require_prefix);
/* --resume: weights (strict), optimizer states, the model's own state
 * (its load_state hook), iteration, sampler state, seed and RNG. */
int duet__ckpt_resume(duet__run *r, const char *path, duet__ckpt_state *s);

#endif
