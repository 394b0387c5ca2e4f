/* Image-to-image translation data (internal): MMEditing 0.x's
 * GenerationPairedDataset and GenerationUnpairedDataset, the pipeline steps
 * their configs use, and OpenCV's bicubic resize that mmcv.imresize runs.
 * Configs reach them through the registry (src/runner/registry_data.c),
 * which turns a `pipeline = ( {type = ...}, ... )` list into steps.
 *
 * A sample is built as MMEditing builds it: images are kept as 8-bit HWC
 * until RescaleToZeroOne or Normalize turns them into float, in the
 * channel order MMEditing would have them (its loaders give BGR;
 * Normalize's to_rgb swaps), and every random choice is drawn from the
 * sample's rng in MMEditing's order of np.random calls. */
#ifndef DUET_DATA_TRANSLATION_H
#define DUET_DATA_TRANSLATION_H

#include "duet/data.h"

/* The images a pipeline works on ("keys" in MMEditing's steps). */
enum { DUET__SLOT_A, DUET__SLOT_B, DUET__SLOT_PAIR, DUET__NSLOTS };

typedef enum duet__tstep_kind {
    DUET__T_LOAD,        /* LoadImageFromFile: key img_a or img_b */
    DUET__T_LOAD_PAIRED, /* LoadPairedImageFromFile: key pair, split into img_a | img_b */
    DUET__T_RESIZE,      /* Resize to (width, height), mmcv's bicubic */
    DUET__T_FIXED_CROP,  /* FixedCrop: one window for all keys */
    DUET__T_CROP,        /* Crop: a window per key (random or centred) */
    DUET__T_FLIP,        /* Flip: one draw for all keys */
    DUET__T_RESCALE,     /* RescaleToZeroOne */
    DUET__T_NORMALIZE,   /* Normalize (mean, std, to_rgb) */
    DUET__T_TO_TENSOR,   /* ImageToTensor */
    DUET__T_COLLECT      /* Collect: the sample's tensors and meta columns */
} duet__tstep_kind;

typedef struct duet__tstep {
    duet__tstep_kind kind;
    int nkeys;
    int keys[DUET__NSLOTS];       /* DUET__SLOT_* */
    bool bgr;                     /* LOAD: channel_order 'bgr' (MMEditing's default) */
    int64_t width, height;        /* RESIZE: output size; crops: crop size */
    bool random_crop;             /* CROP: random (true) or centred window */
    bool has_pos;                 /* FIXED_CROP: crop_pos given */
    int64_t pos_x, pos_y;
    double flip_ratio;            /* FLIP */
    bool vertical;                /* FLIP: direction 'vertical' */
    float mean[3], std[3];        /* NORMALIZE, in the order of the image's channels */
    bool to_rgb;                  /* NORMALIZE: BGR -> RGB first */
    bool meta_path[2];            /* COLLECT: meta_keys img_a_path, img_b_path */
    char where[160]; /* a label for messages only ("x.cfg:12: data.train.pipeline.[2] (type)"),
                        set by duet__label_set: a longer one ends in "..." */
} duet__tstep;

typedef struct duet__translation_opts {
    const char *dataroot;   /* train/ test/ (paired) or trainA ... testB (unpaired) */
    bool paired;
    bool test_mode;         /* test folders; unpaired: img_b by index, not at random */
    const duet__tstep *steps;
    size_t nsteps;
    int64_t max_pixels;     /* decompression-bomb limit, 0: none */
} duet__translation_opts;

/* Checks the pipeline (every key loaded before use, Resize on 8-bit images,
 * Collect last with tensors), lists the folders and makes the dataset. Errors
 * name the step (its `where`) or the folder. Steps are copied. */
int duet__translation_dataset_create(const duet__translation_opts *o, duet_dataset **out);

/* duet infer's input: the image at `path` as image `slot` (DUET__SLOT_A or
 * _B) of a sample, through the pipeline's steps for that key. The file is
 * that image alone (for a paired pipeline the A or B half, loaded as
 * LoadPairedImageFromFile loads a pair, without the split); steps on other
 * keys are skipped, random steps draw from a fixed rng (a test pipeline has
 * none). The pipeline is checked as the dataset checks it; *out is (1, 3,
 * H, W) as Collect gives it. */
int duet__translation_one_image(const duet__tstep *steps, size_t nsteps, bool paired, int slot,
                                const char *path, int64_t max_pixels, duet_tensor **out);

/* OpenCV's cv::resize(..., INTER_CUBIC) on an 8-bit (h, w, c) image into
 * dst (oh, ow, c): Keys' cubic with a = -0.75, half-pixel centres (source
 * x = (dx + 0.5) * w / ow - 0.5 in float), edge pixels repeated, no
 * antialiasing, weights rounded to 11-bit fixed point and the two passes'
 * sum shifted back by 22 bits with rounding, then clamped to [0, 255]
 * (OpenCV's scalar code; its SIMD vertical pass rounds the same sum in
 * float and can differ by one level on rare pixels). c in 1..4. */
int duet__cv_resize_cubic_u8(const uint8_t *src, int64_t h, int64_t w, int c, uint8_t *dst,
                             int64_t oh, int64_t ow);

#endif
