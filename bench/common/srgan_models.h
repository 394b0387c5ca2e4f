/* The SRGAN models that bench_train and bench_mixed_precision time: "tiny"
 * (MSRResNet 32x4, ModifiedVGG 16, a small VGG for the perceptual loss) and
 * "full" (MMEditing's srgan_x4c64b16: MSRResNet 64x16, ModifiedVGG 64,
 * VGG19 features up to conv5_4). */
#ifndef DUET_BENCH_SRGAN_MODELS_H
#define DUET_BENCH_SRGAN_MODELS_H

#include "duet/duet.h"

typedef struct bench_model {
    const char *name;
    int mid, blocks, dmid, crop, batch; /* batch: per process */
    int ncfg;
    int cfg[24];                        /* perceptual VGG, 0 = max pool */
    int layer;                          /* perceptual feature layer */
} bench_model;

/* "tiny" or "full"; NULL for another name. */
const bench_model *bench_find_model(const char *name);

/* duet_srgan_opts_default() with bm's sizes and its one perceptual layer
 * (weight 1.0); the loss weights stay the defaults. */
duet_srgan_opts bench_srgan_opts(const bench_model *bm);

#endif
