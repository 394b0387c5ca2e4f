/* MMEditing's GANImageBuffer (mmedit/models/common/generation_model_utils.py):
 * a history of generated images that CycleGAN's discriminators train on,
 * with its randomness drawn from an rng the caller owns (so that every rank
 * draws the same, and a checkpoint can save it). Internal to src/models. */
#ifndef DUET_IMAGE_POOL_H
#define DUET_IMAGE_POOL_H

#include "duet/models.h"

typedef struct duet__image_pool duet__image_pool;

/* An empty pool of buffer_size images (0: query returns its input).
 * Free with duet__image_pool_destroy (NULL ok). */
int duet__image_pool_create(int64_t buffer_size, duet__image_pool **out);
void duet__image_pool_destroy(duet__image_pool *p);
int64_t duet__image_pool_size(const duet__image_pool *p);  /* buffer_size */
int64_t duet__image_pool_count(const duet__image_pool *p); /* images held */

/* GANImageBuffer.query on images (N, C, H, W), sample by sample in order:
 * while the pool is not full the sample is stored and returned; then with
 * probability 0.5 (duet_rng_uniform(rng) < 0.5) a stored image chosen by
 * duet_rng_int(rng, 0, buffer_size - 1) is returned and the sample takes
 * its place, else the sample itself is returned. *out is a new tensor
 * (N, C, H, W) without autograd history (MMEditing stores image.data).
 * Every image must have the shape of the first one stored (DUET_ESHAPE). */
int duet__image_pool_query(duet__image_pool *p, const duet_tensor *images, duet_rng *rng,
                           duet_tensor **out);

/* Checkpoint: metadata "<key>.count" and, when not empty, the tensor
 * DUET_MODEL_STATE_PREFIX "<key>" of shape (count, C, H, W). load checks
 * the count against buffer_size (DUET_EFORMAT naming the key). */
int duet__image_pool_save(const duet__image_pool *p, duet_st_writer *w, const char *key);
int duet__image_pool_load(duet__image_pool *p, const duet_st *st, const char *key);

#endif
