/* duet/data.h — images (PNG/JPEG decode, PNG encode), MATLAB bicubic
 * resizing, super-resolution datasets, MMEditing's distributed sampler and a
 * prefetching batch loader.
 *
 * Usage (one rank of a data-parallel run):
 *
 *   duet_sr_dataset_opts o = duet_sr_dataset_options_default();
 *   o.gt_dir = "data/sample/train";     // ground truth; lq made by bicubic x1/4
 *   o.scale = 4;
 *   o.gt_size = 128;                    // random 128x128 GT crop, 32x32 LQ
 *   duet_dataset *train = NULL, *rep = NULL;
 *   DUET_TRY(duet_sr_train_dataset_create(&o, &train));
 *   DUET_TRY(duet_repeat_dataset_create(train, 1000, &rep));  // takes `train`
 *
 *   duet_loader_opts lo = duet_loader_options_default();
 *   lo.samples_per_gpu = 16; lo.world_size = world; lo.rank = rank;
 *   lo.seed = 42;                       // the same on every rank
 *   duet_loader *loader = NULL;
 *   DUET_TRY(duet_loader_create(rep, &lo, &loader));  // rep is borrowed
 *   for (int it = 0; it < iters; it++) {
 *       duet_data_batch *b = NULL;
 *       DUET_TRY(duet_loader_next(loader, &b));  // b->batch: "lq" (16,3,32,32), "gt" (16,3,128,128)
 *       // train on b; b->data_time is the wait for it
 *       duet_data_batch_destroy(b);
 *   }
 *   duet_sampler_state resume = duet_loader_get_state(loader);  // checkpoint
 *   duet_loader_destroy(loader);
 *   duet_dataset_destroy(rep);          // frees `train` too
 *
 * Threads: a dataset may be read from several threads at once (duet_dataset_get
 * is reentrant); loaders, samplers and images are used by one thread at a time.
 */
#ifndef DUET_DATA_H
#define DUET_DATA_H

#include "duet/base.h"
#include "duet/batch.h"
#include "duet/config.h"
#include "duet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- images ---------------------------------------------------------------
 * 8-bit images, interleaved HWC, row-major: pixel (y, x) channel c is at
 * data[(y * width + x) * channels + c]. */

typedef struct duet_image {
    int64_t height;
    int64_t width;
    int channels;  /* 3 (RGB) for decoded images; 1 (gray) or 3 accepted elsewhere */
    uint8_t *data; /* height * width * channels bytes; owned by the image */
} duet_image;

/* New zero-filled image. channels 1 or 3. Free with duet_image_destroy. */
int duet_image_create(int64_t height, int64_t width, int channels, duet_image **out);
/* NULL ok. */
void duet_image_destroy(duet_image *img);

/* Reads a PNG or JPEG file (recognised by its first bytes, not its name) as
 * 8-bit RGB: gray is replicated, alpha dropped, a palette expanded and 16-bit
 * PNG samples reduced to their high byte, and a JPEG's EXIF orientation
 * applied (all three as OpenCV's imread, hence MMEditing, does).
 * A corrupt or truncated file — including one libjpeg would only warn about,
 * such as "premature end of JPEG file" — is DUET_EFORMAT with a message naming
 * the file and the decoder's complaint; a missing file is DUET_EIO; a CMYK
 * JPEG is DUET_EUNSUPPORTED. Free *out with duet_image_destroy. */
int duet_image_load(const char *path, duet_image **out);
/* The same from bytes in memory; `name` is only used in messages. */
int duet_image_decode(const void *bytes, size_t nbytes, const char *name, duet_image **out);
/* Writes an 8-bit PNG (gray for 1 channel, RGB for 3) to a new temporary
 * file in path's folder (".<name>.duet-tmp.XXXXXX", created exclusively,
 * so never through a symlink), then renames it over `path`. A failed write
 * removes only that temporary file: whatever was at `path` stays as it was.
 * A symlink at `path` is replaced by the file, its target is never written. */
int duet_image_save_png(const duet_image *img, const char *path);
/* The same with zlib compression `level` (0 fastest .. 9 smallest; -1
 * libpng's default), as OpenCV's IMWRITE_PNG_COMPRESSION. */
int duet_image_save_png_level(const duet_image *img, const char *path, int level);
/* The PNG file of `img` (compression `level` as above) in memory: *bytes
 * (malloc'd, free with free()) of *nbytes; `name` is for messages. */
int duet_image_encode_png(const duet_image *img, int level, const char *name, uint8_t **bytes,
                          size_t *nbytes);

/* ---- data preparation ------------------------------------------------------
 * MMEditing's DIV2K preparation (tools/data/super-resolution/div2k/
 * preprocess_div2k_dataset.py, extract_subimages): every image of a folder
 * cut into crop_size squares with a sliding window of `step`, plus a last
 * row/column flush with the border when more than thresh_size pixels would
 * be left over; image "0001x4.png" gives "0001_s001.png", "0001_s002.png",
 * ... (row by row; "x2", "x3", "x4", "x8" dropped from the name) in
 * save_dir, PNG at compression_level. Images smaller than a crop give none
 * (counted in *skipped). `threads` images at once (<= 0: the cores). A
 * PNG-only tool, as the script is for DIV2K. */
typedef struct duet_subimage_opts {
    int64_t crop_size, step, thresh_size;
    int compression_level;
    int threads;
    /* Called after each image (from one thread at a time), may be NULL. */
    void (*progress)(void *ctx, int64_t done, int64_t total);
    void *progress_ctx;
} duet_subimage_opts;
typedef struct duet_subimage_stats {
    int64_t images, subimages, skipped;
} duet_subimage_stats;
/* save_dir must not exist yet (as the script, which exits): it is made,
 * under a temporary name renamed to save_dir at the end. Refused up front
 * (DUET_EINVAL, naming the files): two images that give one sub-image name
 * ("0001.png" and "0001x2.png"), and names an annotation file cannot hold
 * (whitespace or control bytes: MMEditing reads a line up to its first
 * space). */
int duet_extract_subimages(const char *input_dir, const char *save_dir,
                           const duet_subimage_opts *o, duet_subimage_stats *stats);
/* A DIV2K HR folder and its LR folder at `scale`, checked before anything
 * is cut: every HR image has exactly one LR image of the same name (less
 * "x<scale>") and the other way round, of the HR size divided by the scale
 * (rounded down); DUET_EINVAL naming the first pair that is not. */
int duet_div2k_check_pairs(const char *hr_dir, const char *lr_dir, int scale);
/* MMEditing's annotation file of a folder of images: one line per PNG,
 * sorted by name, "0001_s001.png (480,480,3)" (its height, width, 3),
 * written to `path` (a new file, renamed into place). */
int duet_write_annotation(const char *dir, const char *path, int64_t *count);
/* MMEditing's make_lmdb: every PNG of `dir` decoded and encoded again at
 * compression_level (MMEditing's 1) into a new LMDB folder lmdb_path (must
 * end with ".lmdb" and not exist yet) under its name without ".png"
 * ("0001_s001"), with lmdb_path/meta_info.txt listing
 * "0001_s001.png (480,480,3) 1" per image in name order. `threads` images
 * encoded at once (<= 0: the cores); the LMDB is written by one thread.
 * The SR datasets read it back (duet_sr_dataset_opts.lmdb). */
typedef struct duet_lmdb_opts {
    int compression_level;
    int threads;
    void (*progress)(void *ctx, int64_t done, int64_t total); /* may be NULL */
    void *progress_ctx;
} duet_lmdb_opts;
int duet_lmdb_write_folder(const char *dir, const char *lmdb_path, const duet_lmdb_opts *o,
                           int64_t *count);

/* ---- decompression bombs ------------------------------------------------------
 * A small file can declare a huge image (a 1 MB PNG of 20000x20000 decodes to
 * 1.2 GB of bytes and 4.8 GB of floats). The width and height are checked
 * against a pixel limit right after the header is read, before anything is
 * allocated or decoded (PIL's Image.MAX_IMAGE_PIXELS), for PNG and JPEG.
 * The limit: the environment variable DUET_MAX_IMAGE_PIXELS when set, else
 * the config key data.max_image_pixels, else this default (PIL's value);
 * 0 turns the check off. An image over the limit is DUET_EUNSUPPORTED, with
 * its size, the limit and how to raise it. */
#define DUET_IMAGE_MAX_PIXELS_DEFAULT INT64_C(89478485)
/* The limit in force: DUET_MAX_IMAGE_PIXELS when set (a decimal >= 0, else
 * DUET_EINVAL naming it), else `configured` (>= 0). */
int duet_image_pixel_limit(int64_t configured, int64_t *out);
/* duet_image_load / duet_image_decode with the limit max_pixels (0: none).
 * The plain forms use duet_image_pixel_limit(DUET_IMAGE_MAX_PIXELS_DEFAULT). */
int duet_image_load_limited(const char *path, int64_t max_pixels, duet_image **out);
int duet_image_decode_limited(const void *bytes, size_t nbytes, const char *name,
                              int64_t max_pixels, duet_image **out);

/* New (C, H, W) float tensor with values byte / 255, in [0, 1]. */
int duet_image_to_tensor(const duet_image *img, duet_tensor **out);
/* New image from sample `n` of a (N, C, H, W) tensor, or from a (C, H, W)
 * tensor with n = 0; C is 1 or 3. Values are clamped to [0, 1], scaled by 255
 * and rounded half to even (numpy's round, as MMEditing's tensor2img). */
int duet_image_from_tensor(const duet_tensor *t, int64_t n, duet_image **out);

/* ---- MATLAB bicubic resizing -----------------------------------------------
 * This is MATLAB's imresize(img, scale, 'bicubic') with its default
 * antialiasing, which BasicSR's and MMEditing's `imresize` port and which
 * makes the LQ images of SR benchmarks (DIV2K, Set5, ...):
 *   - Keys' cubic kernel with a = -0.5;
 *   - output pixel k (1-based) samples input position u = k/scale + (1 - 1/scale)/2;
 *   - when downscaling (scale < 1) the kernel is stretched to width 4/scale
 *     and scaled by `scale` (antialiasing); weights are normalised to sum 1;
 *   - taps outside the image are mirrored with the edge pixel repeated
 *     (MATLAB's symmetric padding: -1 -> 0, -2 -> 1, H -> H-1, ...);
 *   - rows are resized first, then columns; the same scale for both.
 * The output size is ceil(in * scale), as in MATLAB, except that a product
 * within 1e-9 of an integer is taken as that integer (so 15 * (1/5) is 3,
 * not 4 as a naive ceil of the double product would give). */

/* Output length for one dimension. */
int64_t duet_imresize_length(int64_t in_length, double scale);
/* Kernel: out (C, OH, OW) from in (C, H, W), OH/OW = duet_imresize_length of
 * H/W. scale > 0. Float in, float out, no rounding or clamping (values may
 * overshoot the input range slightly, as MATLAB's do). DUET_EINVAL on a bad
 * scale or size, DUET_ENOMEM. */
int duet_imresize(float *out, const float *in, int64_t channels, int64_t height, int64_t width,
                  double scale);
/* Tensor form: (C, H, W) or (N, C, H, W) in, new tensor of the resized shape
 * out. */
int duet_imresize_tensor(const duet_tensor *in, double scale, duet_tensor **out);
/* uint8 form, as MATLAB resizes a uint8 image: computed in float on the byte
 * values, then rounded half to even and clamped to [0, 255]. */
int duet_image_resize(const duet_image *in, double scale, duet_image **out);

/* ---- the pipeline engine ----------------------------------------------------
 * MMEditing's `pipeline` lists, one engine for every dataset: a list entry
 * ({type = "Flip"; keys = ["lq", "gt"]; flip_ratio = 0.5; ...}) is one row
 * of a table of transforms, each with its MMEditing type name, a reader of
 * its keys (every key read or refused with its file and line) and an apply
 * function on a keyed sample ("img_a", "gt", "mask", ...). A sample is
 * built as MMEditing builds it: images stay 8-bit HWC until
 * RescaleToZeroOne or Normalize makes them float, in the channel order
 * MMEditing would have them (its loaders give BGR; Normalize's to_rgb
 * swaps), and every random choice is drawn from the sample's rng
 * (duet_dataset_sample_rng) in MMEditing's order of np.random calls, so
 * any process that builds sample i of epoch e sees the same values.
 *
 * The transforms: LoadImageFromFile, LoadPairedImageFromFile, LoadMask,
 * Resize, Crop, FixedCrop, PairedRandomCrop, Flip, RandomTransposeHW,
 * RescaleToZeroOne, Normalize, GetMaskedImage, ImageToTensor, ToTensor,
 * Collect (duet_pipeline_transform_names). An unknown type is refused by
 * name with the closest known one and the list. */

typedef struct duet_pipeline duet_pipeline;

/* What a dataset offers its pipeline. Plain value; its strings must live
 * while duet_pipeline_read runs (the pipeline copies them). */
typedef struct duet_pipeline_spec {
    const char *dataset;         /* its type, for messages ("GenerationPairedDataset") */
    const char *path_keys[4];    /* keys LoadImageFromFile may load (NULL-ended) */
    const char *pair_key;        /* LoadPairedImageFromFile's key (its halves img_a, img_b);
                                    NULL: this dataset has no pairs */
    const char *load_hint;       /* added to the refusal of a load of another key */
    const char *optional_key;    /* a key rows pass over while it is absent (SR's lq before
                                    PairedRandomCrop makes it from gt), or NULL */
    bool lmdb;                   /* images in LMDB: LoadImageFromFile's io_backend "lmdb" */
    const char *db_paths[4];     /* lmdb: the LMDB folder of each path key */
    bool require_collect;        /* the pipeline must have Collect */
    int scale;                   /* SR factor for PairedRandomCrop (0: not an SR set) */
} duet_pipeline_spec;

/* Reads group's `pipeline` list (the group at config path `path`, named in
 * messages) into a new pipeline; free with duet_pipeline_destroy. Errors
 * (DUET_ECONFIG, DUET_EUNSUPPORTED) name the entry's file and line and the
 * key. */
int duet_pipeline_read(duet_config *group, const char *path, const duet_pipeline_spec *spec,
                       duet_pipeline **out);
/* The same from the text of a pipeline list ("( {type = ...}, ... )"),
 * named `name` in messages: how C callers build one without a file. */
int duet_pipeline_parse(const char *text, const char *name, const duet_pipeline_spec *spec,
                        duet_pipeline **out);
/* NULL ok. */
void duet_pipeline_destroy(duet_pipeline *p);
/* Steps of the pipeline, and the type name of step i. */
size_t duet_pipeline_length(const duet_pipeline *p);
const char *duet_pipeline_step_type(const duet_pipeline *p, size_t i);
/* The transform type names, NULL-terminated; borrowed, static. */
const char *const *duet_pipeline_transform_names(void);

/* ---- datasets ---------------------------------------------------------------
 * A dataset maps an index in [0, size) to a sample. Its randomness (crops,
 * flips) comes only from (seed, epoch, index) through duet_dataset_sample_rng,
 * never from the rank or the thread, so any process that asks for the same
 * sample gets the same tensors. */

typedef struct duet_dataset duet_dataset;

typedef struct duet_sample {
    duet_tensor *lq;  /* (3, h, w) in [0, 1]; owned by the sample */
    duet_tensor *gt;  /* (3, h * scale, w * scale) in [0, 1]; owned */
    const char *name; /* file name without folder ("0801.png"); borrowed from
                         the dataset, valid while it lives */
    int64_t index;    /* the dataset index asked for */
} duet_sample;

/* Releases lq and gt and zeroes the struct. NULL ok. */
void duet_sample_clear(duet_sample *s);

typedef struct duet_sr_dataset_opts {
    /* Folder of ground-truth images (*.png, *.jpg, *.jpeg, any case), taken
     * in strcmp order of their names. Required. */
    const char *gt_dir;
    /* Optional folder of low-quality images with the same file names, each
     * exactly 1/scale the size of its GT (MMEditing's paired folders). NULL:
     * the LQ is made by bicubic downscaling (duet_imresize, scale 1/scale). */
    const char *lq_dir;
    int scale;          /* SR factor, >= 1. Default 4. */
    int64_t gt_size;    /* training: side of the square GT crop, a multiple of
                           scale. Default 128. Ignored by validation sets. */
    bool use_hflip;     /* training: random horizontal flip, p = 0.5. Default true. */
    bool use_vflip;     /* training: random vertical flip, p = 0.5. Default true. */
    bool use_transpose; /* training: random H/W transpose, p = 0.5. Default true. */
    /* false (default): decode every image once at creation and keep the
     * pixels in memory (errors surface at creation). true: decode on every
     * access and keep nothing (for sets larger than memory). */
    bool lazy;
    /* Images larger than this many pixels are refused before decoding (see
     * "decompression bombs"); 0: no limit. Default DUET_IMAGE_MAX_PIXELS_DEFAULT. */
    int64_t max_pixels;
    /* MMEditing's SRAnnotationDataset: when set, the images are the lines of
     * this file ("0001_s001.png (480,480,3)": the name up to the first
     * space, relative to gt_dir, in the file's order) instead of gt_dir's
     * listing; the LQ of GT "dir/b.ext" is lq_dir/<filename_tmpl with {}
     * replaced by b>.ext. Blank lines are skipped; a line without a name,
     * or a missing file, is an error naming the file and line. */
    const char *ann_file;
    /* The LQ file of GT "b.ext" is lq_dir/<filename_tmpl with {} = b>.ext
     * (annotated or paired folders; MMEditing's "{}x4" style). NULL: "{}". */
    const char *filename_tmpl;
    /* MMEditing's SRLmdbDataset: gt_dir and lq_dir (both required) are LMDB
     * folders (duet_lmdb_write_folder, MMEditing's make_lmdb); the images
     * are the keys of gt_dir/meta_info.txt (each line's name up to its first
     * '.'), each read from both LMDBs under the same key. A missing key is
     * an error naming the key and the LMDB; ann_file must be NULL. */
    bool lmdb;
    /* MMEditing's pipeline list, read with duet_sr_pipeline_spec (borrowed,
     * copied by the dataset). NULL: the pipeline the fields above describe
     * (load, RescaleToZeroOne, PairedRandomCrop, Flip horizontal and
     * vertical, RandomTransposeHW, each with p = 0.5, or 0 when switched
     * off, Collect). gt_size and the flips are then ignored. */
    const duet_pipeline *pipeline;
} duet_sr_dataset_opts;

/* The spec of an SR set's pipeline (o's folders, scale and lmdb; train:
 * PairedRandomCrop makes lq from gt without lq_dir). */
duet_pipeline_spec duet_sr_pipeline_spec(const duet_sr_dataset_opts *o, bool train);

/* The largest SR factor datasets and configs accept. */
#define DUET_MAX_SCALE 64

duet_sr_dataset_opts duet_sr_dataset_options_default(void);

/* Training set (MMEditing's SRFolderGTDataset / SRFolderDataset pipeline):
 * sample i takes image i, a random gt_size x gt_size crop whose corner is a
 * multiple of scale, its LQ (the crop downscaled by duet_imresize and rounded
 * to 8-bit levels, as an LQ file made by MATLAB or BasicSR would be; or the
 * matching crop of the LQ image), then flips both horizontally, vertically
 * and transposes them, each with p = 0.5, in that order. The draws are made
 * whether or not a flip is enabled, so switching one off leaves the crops
 * unchanged. Errors (DUET_ENOTFOUND for an empty folder or a
 * missing LQ file, DUET_ESHAPE for an image smaller than the crop or an LQ of
 * the wrong size, decode errors) name the file. Free with
 * duet_dataset_destroy. */
int duet_sr_train_dataset_create(const duet_sr_dataset_opts *opts, duet_dataset **out);
/* Validation set: sample i is image i whole; the GT is cropped (top-left) to
 * a multiple of scale, the LQ is its bicubic downscale in 8-bit levels (or
 * the LQ image, the GT then cropped to LQ size * scale). No randomness;
 * gt_size and the flips are ignored. */
int duet_sr_val_dataset_create(const duet_sr_dataset_opts *opts, duet_dataset **out);
/* MMEditing's RepeatDataset: size times * inner size; index i is inner
 * sample i % inner size but with i's own randomness. Takes ownership of
 * `inner` (also on failure). DUET_EINVAL when times < 1 or times * inner
 * size does not fit in int64_t. */
int duet_repeat_dataset_create(duet_dataset *inner, int64_t times, duet_dataset **out);
/* NULL ok. */
void duet_dataset_destroy(duet_dataset *ds);

int64_t duet_dataset_size(const duet_dataset *ds);
/* The SR factor of the dataset (1 for datasets without one). */
int duet_dataset_scale(const duet_dataset *ds);
/* File name of sample `index` without loading it. Borrowed. */
const char *duet_dataset_name(const duet_dataset *ds, int64_t index);
/* Builds sample `index` for this seed and epoch into *out (cleared first).
 * Reentrant. Errors name the file. */
int duet_dataset_get(const duet_dataset *ds, int64_t index, uint64_t seed, int64_t epoch,
                     duet_sample *out);
/* The generator sample `index` of `epoch` draws from: duet_rng_make(seed,
 * stream) with the stream a hash of (epoch, index). Exposed for tests. */
duet_rng duet_dataset_sample_rng(uint64_t seed, int64_t epoch, int64_t index);

/* ---- samples as named tensors -------------------------------------------------
 * What the loader reads: sample `index` as a batch of one, named tensors
 * (1, ...) and metadata columns of one string. The SR datasets give "lq"
 * (1, 3, h, w), "gt" (1, 3, h * scale, w * scale) and metadata "gt_path"
 * (the file name), MMEditing's keys; a dataset of one's own gives its own
 * names (paired translation: "img_a", "img_b"; unpaired: one per domain),
 * and the loader and sampler carry them unchanged. */
int duet_dataset_get_item(const duet_dataset *ds, int64_t index, uint64_t seed, int64_t epoch,
                          duet_batch *out);

/* A dataset of one's own (register its builder with
 * duet_registry_register_dataset to name it in configs). */
typedef struct duet_dataset_ops {
    const char *name; /* for messages: "PairedImageDataset" */
    /* Sample `index` (in [0, size)) into the empty *out as a batch of one.
     * rng is the sample's own generator (duet_dataset_sample_rng of the
     * loader's seed, the epoch and the outer index): draw every random
     * choice from it, so that every rank and thread builds the same sample.
     * Called from several threads at once: impl is read-only here. Errors
     * name the file. */
    int (*get)(const void *impl, int64_t index, duet_rng *rng, duet_batch *out);
    /* A name for sample `index` (a file name), borrowed; may be NULL. */
    const char *(*sample_name)(const void *impl, int64_t index);
    void (*destroy)(void *impl); /* may be NULL */
} duet_dataset_ops;

/* size >= 1 samples. Takes ownership of impl (ops->destroy, also on
 * failure). duet_dataset_get gives such a dataset's "lq" and "gt" when it
 * has them; duet_dataset_scale is 1. Free with duet_dataset_destroy. */
int duet_dataset_create(const duet_dataset_ops *ops, void *impl, int64_t size,
                        duet_dataset **out);

/* ---- distributed sampler -----------------------------------------------------
 * MMEditing's DistributedSampler: per epoch one permutation of [0, size) from
 * the shared seed and the epoch (the identity when shuffle is false), padded
 * by repeating its start to total = world * num_samples entries, and rank r
 * takes entries r, r + world, r + 2 world, ... num_samples =
 * ceil(size / world / samples_per_gpu) * samples_per_gpu, so every rank gets
 * the same whole number of batches. */

typedef struct duet_sampler duet_sampler;

/* Where a sampler (or loader) stands: the epoch and how many of this rank's
 * num_samples indices of it were handed out. A plain value: save the two
 * numbers in a checkpoint and give them back to resume. */
typedef struct duet_sampler_state {
    int64_t epoch;
    int64_t position;
} duet_sampler_state;

/* DUET_EINVAL for bad arguments; DUET_ESHAPE when size < world_size *
 * samples_per_gpu (the padding could not make equal shares: use fewer
 * processes or a smaller batch). Free with duet_sampler_destroy. */
int duet_sampler_create(int64_t dataset_size, int world_size, int rank, int64_t samples_per_gpu,
                        uint64_t seed, bool shuffle, duet_sampler **out);
void duet_sampler_destroy(duet_sampler *s);
/* Indices per rank per epoch (a multiple of samples_per_gpu). */
int64_t duet_sampler_num_samples(const duet_sampler *s);
/* This rank's num_samples indices of `epoch` into out (no state change).
 * DUET_ENOMEM only. */
int duet_sampler_epoch_indices(const duet_sampler *s, int64_t epoch, int64_t *out);
/* The next samples_per_gpu indices into out, and the epoch they belong to;
 * moves to the next epoch (a new permutation) when the current one is used up.
 * Batches never straddle epochs. */
void duet_sampler_next_batch(duet_sampler *s, int64_t *out, int64_t *epoch);
duet_sampler_state duet_sampler_get_state(const duet_sampler *s);
/* DUET_EINVAL when epoch < 0 or position is not in [0, num_samples] or not a
 * multiple of samples_per_gpu. */
int duet_sampler_set_state(duet_sampler *s, duet_sampler_state state);
/* The stream is the same at any world size: step t of an epoch draws
 * entries [t G, (t + 1) G) of the epoch's padded permutation, G = world size
 * x samples per GPU, rank r the entries r, r + world, ... of them. So a
 * point of it is one global sample index, `global` = position x world size
 * (entries all ranks together have drawn this epoch). This is the state at
 * which a sampler of (dataset_size, world_size, samples_per_gpu) continues
 * from there (a resume on another number of processes); at or past the
 * padded end of the epoch, the next epoch's start. DUET_EINVAL when global
 * is not a multiple of world_size x samples_per_gpu (the global batches
 * would not line up). */
int duet_sampler_state_from_global(int64_t dataset_size, int world_size, int64_t samples_per_gpu,
                                   int64_t epoch, int64_t global, duet_sampler_state *out);

/* ---- loader -----------------------------------------------------------------
 * Batches of a dataset for one rank, from a duet_sampler: the samples'
 * named tensors stacked along dim 0 (duet_dataset_get_item, then
 * duet_batch_concat), whatever the names; the batch goes to the model's
 * train_step as it is. */

typedef struct duet_loader duet_loader;

typedef struct duet_data_batch {
    int64_t n;         /* samples in the batch */
    duet_batch batch;  /* the samples' tensors (n, ...) and metadata columns; owned */
    int64_t *indices;  /* n dataset indices (padding repeats some); owned */
    int64_t epoch;     /* the sampler epoch the batch belongs to */
    double data_time;  /* seconds duet_loader_next spent waiting for (or, without
                          prefetch, building) this batch */
} duet_data_batch;

/* NULL ok. */
void duet_data_batch_destroy(duet_data_batch *b);

typedef struct duet_loader_opts {
    int64_t samples_per_gpu; /* batch size on this rank. Default 1. */
    int world_size;          /* default 1 */
    int rank;                /* default 0 */
    uint64_t seed;           /* shared by all ranks: shuffling and augmentation. Default 0. */
    bool shuffle;            /* default true; false for validation */
    /* Batches prepared ahead by a background thread. 0: no thread, batches
     * are built inside duet_loader_next. Default 2. */
    int prefetch;
    /* false (default): endless, epoch after epoch (iteration-based training).
     * true: one epoch from the starting state, then duet_loader_next gives
     * NULL (validation). */
    bool one_epoch;
    duet_sampler_state start; /* where to begin (resume). Default {0, 0}. */
    /* Where duet_loader_next hands the batch's tensors out: the decoders make
     * them on the host, then each is copied once to this device, on the
     * caller's thread (the rank's device: duet_wrapper_device). Default
     * the CPU (no copy). */
    duet_device device;
} duet_loader_opts;

duet_loader_opts duet_loader_options_default(void);

/* `ds` is borrowed and must outlive the loader. Sampler errors as in
 * duet_sampler_create. The prefetch thread starts on the first
 * duet_loader_next. Free with duet_loader_destroy. */
int duet_loader_create(duet_dataset *ds, const duet_loader_opts *opts, duet_loader **out);
/* Stops and joins the prefetch thread, frees batches not handed out. NULL ok. */
void duet_loader_destroy(duet_loader *l);
/* The next batch into *out (free with duet_data_batch_destroy); *out = NULL after
 * the last batch of a one_epoch loader, its tensors on options.device.
 * Batches are the same, in the same order, with or without prefetch. An
 * error from building a batch (on the prefetch thread or not) or from
 * copying it to the device comes back here with its message naming the
 * file or the tensor; the loader then stays failed (DUET_ESTATE) until
 * duet_loader_set_state. */
int duet_loader_next(duet_loader *l, duet_data_batch **out);
/* Batches per epoch on this rank. */
int64_t duet_loader_batches_per_epoch(const duet_loader *l);
/* The state after the last batch handed out (prefetched batches not
 * counted): give it back as options.start, or to duet_loader_set_state, to
 * continue with the next batch. */
duet_sampler_state duet_loader_get_state(const duet_loader *l);
/* Drops prefetched batches and restarts from `state`. Validation as
 * duet_sampler_set_state. */
int duet_loader_set_state(duet_loader *l, duet_sampler_state state);

/* ---- image-to-image translation datasets -------------------------------------
 * MMEditing 0.x's GenerationPairedDataset and GenerationUnpairedDataset.
 * Configs reach them through the registry (src/registry/registry_data.c). A
 * paired dataset's pipeline loads "pair" with LoadPairedImageFromFile (its
 * halves "img_a" and "img_b"); an unpaired one loads "img_a" and "img_b"
 * with LoadImageFromFile. The pipeline must end with Collect. */

/* The spec of their pipelines. */
duet_pipeline_spec duet_translation_pipeline_spec(bool paired);

typedef struct duet_translation_opts {
    const char *dataroot;   /* train/ test/ (paired) or trainA ... testB (unpaired) */
    bool paired;
    bool test_mode;         /* test folders; unpaired: img_b by index, not at random */
    const duet_pipeline *pipeline; /* read with duet_translation_pipeline_spec(paired); borrowed */
    int64_t max_pixels;     /* decompression-bomb limit, 0: none */
} duet_translation_opts;

/* Lists the folders and makes the dataset. Errors name the folder. The
 * pipeline is copied. */
int duet_translation_dataset_create(const duet_translation_opts *o, duet_dataset **out);

/* duet infer's input: the image at `path` as image `key` ("img_a" or
 * "img_b") of a sample, through the pipeline's steps for that key. The file
 * is that image alone (for a paired pipeline the A or B half, loaded as
 * LoadPairedImageFromFile loads a pair, without the split); steps on other
 * keys are skipped, random steps draw from a fixed rng (a test pipeline has
 * none). *out is (1, 3, H, W) as Collect gives it. */
int duet_translation_one_image(const duet_pipeline *p, const char *key, const char *path,
                               int64_t max_pixels, duet_tensor **out);


/* ---- inpainting ------------------------------------------------------------------
 * MMEditing 0.x's ImgInpaintingDataset and the pipeline steps its inpainting
 * configs use (LoadImageFromFile key gt_img, LoadMask, Crop, Resize, Flip,
 * Normalize / RescaleToZeroOne, GetMaskedImage, Collect, ImageToTensor,
 * ToTensor). A sample is "gt_img" (1, 3, H, W) and "masked_img" (1, 3, H, W)
 * in the pipeline's channel order and range, "mask" (1, 1, H, W) with 1 in
 * the hole and 0 elsewhere, "mask_bbox" (1, 4) = (top, left, h, w) for bbox
 * masks, and the meta column "gt_img_path". The mask is drawn from the
 * sample's rng (duet_dataset_sample_rng), so every rank and thread draws the
 * same mask for the same (seed, epoch, index). */

typedef enum duet_mask_mode {
    DUET_MASK_BBOX,      /* a random box (mmedit.core.mask.random_bbox) */
    DUET_MASK_IRREGULAR, /* free-form strokes (get_irregular_mask) */
    DUET_MASK_SET,       /* a random file of mask_list_file under prefix */
    DUET_MASK_FILE       /* the sample's own mask file (mask_path) */
} duet_mask_mode;

typedef struct duet_mask_opts {
    duet_mask_mode mode;
    int64_t img_h, img_w; /* bbox, irregular: img_shape (h, w) of the mask */
    /* bbox: (h, w) pairs; the box's top-left is drawn in [margin, img -
     * margin - max_bbox), then shrunk by a delta in [0, max_delta / 2] at
     * the top and left (MMEditing's np.random.randint bounds). */
    int64_t max_bbox[2], max_delta[2], min_margin[2];
    /* irregular, each a half-open range [lo, hi) as np.random.randint's:
     * strokes, segment lengths, brush widths; angles are integers in
     * [0, max_angle) plus 0.01; a mask is redrawn until its hole covers a
     * fraction strictly inside area_ratio. */
    int64_t num_vertices[2], length_range[2], brush_width[2];
    double max_angle;
    double area_ratio[2];
    /* set: file of mask names (the first word of each line), relative to
     * prefix. */
    const char *mask_list_file, *prefix;
} duet_mask_opts;

/* MMEditing's defaults for `mode` (GL's bbox: img_shape 256x256, max_bbox
 * 128x128, delta 40, margin 20; irregular: 4..12 strokes, angle 4, length
 * 10..100, width 10..40, area 0.15..0.5). */
duet_mask_opts duet_mask_options_default(duet_mask_mode mode);
/* Checks the options as MMEditing's random_bbox does (box larger than the
 * image, delta too large, margins impossible) and the ranges; errors name
 * the option. */
int duet_mask_options_check(const duet_mask_opts *o);
/* random_bbox: bbox = (top, left, h, w). */
void duet_mask_random_bbox(const duet_mask_opts *o, duet_rng *rng, int64_t bbox[4]);
/* get_irregular_mask into mask (img_h * img_w bytes, 1 in the hole):
 * strokes drawn as cv2.line with the brush width as its thickness (a
 * capsule: every pixel within width / 2 of the segment). *strokes (may be
 * NULL) gets the number of strokes of the accepted mask, *segments (may be
 * NULL) its segments. DUET_ERANGE after 1000 masks outside area_ratio. */
int duet_mask_irregular(const duet_mask_opts *o, duet_rng *rng, uint8_t *mask, int64_t *strokes,
                        int64_t *segments);

/* The spec of its pipeline: LoadImageFromFile key "gt_img", the mask
 * options in LoadMask; Collect optional (without it a sample is gt_img,
 * masked_img, mask and, for bbox masks, mask_bbox). */
duet_pipeline_spec duet_inpainting_pipeline_spec(void);

typedef struct duet_inpainting_opts {
    /* One image per line, the first word a path relative to data_prefix. A
     * second word, when present, is the sample's mask file (relative to
     * data_prefix too), which mask mode 'file' reads. */
    const char *ann_file;
    const char *data_prefix;
    const duet_pipeline *pipeline; /* read with duet_inpainting_pipeline_spec(); copied */
    int64_t max_pixels; /* decompression-bomb limit, 0: none */
} duet_inpainting_opts;

/* Reads the annotation file (a missing image is an error naming file and
 * line; mask_mode 'file' wants a mask on every line) and the mask set of
 * LoadMask's mode 'set', and makes the dataset. The pipeline (which must
 * have GetMaskedImage) is copied. */
int duet_inpainting_dataset_create(const duet_inpainting_opts *o, duet_dataset **out);

/* duet infer's input: image `path` and mask file `mask_path` (nonzero =
 * hole; its first channel) through `steps` (LoadMask reads mask_path
 * whatever its mode; random steps draw from a fixed rng), as a batch of
 * one with the dataset's names. */
int duet_inpainting_one_image(const duet_pipeline *p, const char *path, const char *mask_path,
                              int64_t max_pixels, duet_batch *out);

/* OpenCV's cv::resize(..., INTER_LINEAR) of an 8-bit (h, w, c) image into
 * dst (oh, ow, c), which mmcv.imresize's default 'bilinear' runs: half-pixel
 * centres, edge pixels repeated, 11-bit fixed-point weights, no
 * antialiasing, and the rounding of OpenCV 4.8's vertical pass (equal to
 * cv2.resize's output byte for byte, tests/unit/test_ref_inpainting.c).
 * c in 1..4. */
int duet_image_resize_bilinear_u8(const uint8_t *src, int64_t h, int64_t w, int c,
                                  uint8_t *dst, int64_t oh, int64_t ow);

#ifdef __cplusplus
}
#endif
#endif
