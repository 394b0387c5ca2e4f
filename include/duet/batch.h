/* duet/batch.h — a batch as named tensors and metadata columns, the one
 * currency from a dataset's samples through the loader and the wrapper's
 * scatter to a model's train_step: super-resolution data carries "lq" and
 * "gt", paired translation data "img_a" / "img_b", any dataset its own
 * names. (Tensor layer: no knowledge of models or data.)
 *
 * Usage:
 *
 *   duet_batch b = {0};
 *   DUET_TRY(duet_batch_add_tensor(&b, "lq", lq));       // (N, 3, h, w)
 *   DUET_TRY(duet_batch_add_meta(&b, "gt_path", n, names));
 *   duet_tensor *x = NULL;
 *   DUET_TRY(duet_batch_require(&b, "lq", &x));          // borrowed
 *   duet_batch_clear(&b);
 */
#ifndef DUET_BATCH_H
#define DUET_BATCH_H

#include "duet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batches ---------------------------------------------------------- */

/* Named tensors (each with the samples along dim 0) and per-sample metadata
 * as named string columns ("gt_path": one file name per sample). A zeroed
 * struct is an empty batch. The batch holds one reference on each tensor and
 * owns its strings: free with duet_batch_clear. */
typedef struct duet_batch_tensor {
    char *name;
    duet_tensor *tensor;
} duet_batch_tensor;

typedef struct duet_batch_meta {
    char *key;
    char **values; /* nsamples strings */
} duet_batch_meta;

typedef struct duet_batch {
    int64_t nsamples; /* 0 until the first tensor or metadata column */
    size_t ntensors;
    duet_batch_tensor *tensors;
    size_t nmeta;
    duet_batch_meta *meta;
} duet_batch;

/* Adds (retains) t under `name`; its dim 0 must equal the batch's sample
 * count (set by the first entry). Duplicate names are DUET_EINVAL. */
int duet_batch_add_tensor(duet_batch *b, const char *name, duet_tensor *t);
/* Copies n strings as the column `key`; n must equal the sample count. */
int duet_batch_add_meta(duet_batch *b, const char *key, int64_t n, const char *const *values);
/* Borrowed, or NULL when absent. */
duet_tensor *duet_batch_tensor_get(const duet_batch *b, const char *name);
/* DUET_ENOTFOUND with a message naming the key and the keys there are. */
int duet_batch_require(const duet_batch *b, const char *name, duet_tensor **out);
/* Sample i's value of column `key`; borrowed, or NULL. */
const char *duet_batch_meta_get(const duet_batch *b, const char *key, int64_t i);
/* Samples [start, start+count) of every tensor (views) and column (copies)
 * into an empty `out`: a rank's share of a global batch. */
int duet_batch_slice(duet_batch *out, const duet_batch *b, int64_t start, int64_t count);
/* Releases everything; leaves an empty batch. */
void duet_batch_clear(duet_batch *b);

/* Stacks batches along dim 0 into an empty `out`: every part must hold the
 * same tensor names (in any order) with the same shape after dim 0, and the
 * same metadata keys; out's tensors are new (copies), in the first part's
 * order. DUET_ESHAPE / DUET_EINVAL naming the tensor or key and the part
 * that differs. (The loader stacks its samples, each a batch of one.) */
int duet_batch_concat(duet_batch *out, const duet_batch *const *parts, size_t nparts);

#ifdef __cplusplus
}
#endif
#endif
