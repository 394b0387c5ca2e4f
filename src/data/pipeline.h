/* Private to src/data/: the pipeline engine's rows and keyed samples.
 *
 * A transform is one row (duet__transform): MMEditing's type name, its key
 * reader (reads one `pipeline` list entry, checks it against what the
 * earlier rows left in each key, records what it leaves), and its apply
 * function on a keyed sample, drawing randomness only from the sample's rng.
 * The rows live in the file of their concern (pipeline.c: load, format and
 * collect; transforms.c: geometry and values; inpainting.c: masks) and are
 * listed once in pipeline.c's table.
 *
 * A sample holds named entries ("img_a", "gt", "mask", "mask_bbox", ...):
 * an image (HWC, 8-bit or float32) or a short int vector. An 8-bit image may
 * carry two pending operations that cost nothing until a value is needed:
 * `unit` (the values are byte / 255, RescaleToZeroOne) and `swap` (channels
 * 0 and 2 exchanged, a BGR load or Normalize's to_rgb). Crops, flips and
 * transposes commute with both, so a sample is copied and converted once,
 * at the end, as duet's SR data always was. */
#ifndef DUET_DATA_PIPELINE_H
#define DUET_DATA_PIPELINE_H

#include "duet/config.h"
#include "duet/data.h"

#define DUET__PIPE_MAX_KEYS 8
#define DUET__PIPE_KEY_LEN 32
#define DUET__PIPE_MAX_ENTRIES 12
#define DUET__PIPE_MAX_STEPS 32

/* One image of an entry: HWC, row-major, c channels. Exactly one of u8 / f
 * is set. */
typedef struct duet__pimage {
    int64_t h, w;
    int c;
    uint8_t *u8;
    float *f;
    bool owned; /* false: u8 is borrowed (a dataset's cached pixels), copied on write */
    bool unit;  /* u8 only: the values are byte / 255 */
    bool swap;  /* channels 0 and 2 are to be exchanged (3 channels) */
} duet__pimage;

typedef struct duet__pentry {
    char key[DUET__PIPE_KEY_LEN];
    bool is_image;
    duet__pimage im;
    int64_t ints[4]; /* !is_image: e.g. mask_bbox (top, left, h, w) */
    int nints;
    bool bgr;         /* the image's channel order now (for the channel_order meta) */
    const char *path; /* the file it came from; borrowed from the dataset */
} duet__pentry;

/* What a dataset gives a sample: file paths per key and how to read one. */
typedef struct duet__pipe_io {
    /* Loads the image of `key` at `path` (may be NULL: the pipeline reads
     * only through here). *borrowed true: the image stays the dataset's
     * (not freed, not written). NULL: duet_image_load_limited(path). */
    int (*load)(void *ctx, const char *key, const char *path, duet_image **img, bool *borrowed);
    void *ctx;
    int64_t max_pixels;
} duet__pipe_io;

typedef struct duet__psample {
    duet__pentry e[DUET__PIPE_MAX_ENTRIES];
    int n;
    const char *paths[DUET__PIPE_MAX_ENTRIES]; /* file of path_key[i] of the spec */
    duet_rng *rng;
    const duet__pipe_io *io;
    const duet_pipeline_spec *spec;
    const char *mask_file; /* duet infer --mask: LoadMask reads this file whatever its mode */
    const char *mask_path; /* the sample's own mask file (mask_mode 'file'), or NULL */
    char *const *mask_set; /* LoadMask mode 'set': the files it draws from (the dataset's) */
    int64_t nmask_set;
    bool collected;        /* Collect ran */
    char collect[DUET__PIPE_MAX_KEYS][DUET__PIPE_KEY_LEN];
    int ncollect;
    char meta[DUET__PIPE_MAX_KEYS][DUET__PIPE_KEY_LEN];
    int nmeta;
} duet__psample;

/* What each key holds at a point of the pipeline, for the readers' checks. */
typedef struct duet__pkey_state {
    char key[DUET__PIPE_KEY_LEN];
    bool is_image, is_float, unit, tensor;
    bool bgr; /* channel order: a BGR load, swapped by each Normalize with to_rgb */
} duet__pkey_state;

typedef struct duet__pipe_read {
    const duet_pipeline_spec *spec;
    duet__pkey_state k[DUET__PIPE_MAX_ENTRIES];
    int n;
    bool collected;
    bool has_collect;
} duet__pipe_read;

typedef struct duet__step duet__step;

typedef struct duet__transform {
    const char *name; /* MMEditing's type name */
    /* Reads the entry `c` into st (st->keys, st->opts: calloc'd by the
     * reader, freed with free_opts or free()), checks it against r and
     * updates r. Errors name the key and its line (duet_config_error) or
     * the step (st->where). */
    int (*read)(duet_config *c, duet__pipe_read *r, duet__step *st);
    /* Applies the step to the sample. */
    int (*apply)(const duet__step *st, duet__psample *s);
    void (*free_opts)(void *opts); /* NULL: free() */
    /* Draws from the rng (for the engine's table test: a row that draws
     * must give another sample for another rng). */
    bool random;
} duet__transform;

struct duet__step {
    const duet__transform *t;
    int nkeys;
    char keys[DUET__PIPE_MAX_KEYS][DUET__PIPE_KEY_LEN];
    void *opts;
    char where[160]; /* "x.cfg:12: data.train.pipeline.[2] (Flip)", for messages */
};

struct duet_pipeline {
    int refs;
    duet__step steps[DUET__PIPE_MAX_STEPS];
    size_t n;
    duet_pipeline_spec spec; /* its lists copied below */
    char spec_keys[DUET__PIPE_MAX_KEYS][DUET__PIPE_KEY_LEN];
    const char *spec_key_ptrs[DUET__PIPE_MAX_KEYS + 1];
    char spec_dataset[64];
    duet__pkey_state final[DUET__PIPE_MAX_ENTRIES]; /* each key after the last step */
    int nfinal;
};

/* The rows, in the order the table lists them (pipeline.c). */
extern const duet__transform duet__t_load_image, duet__t_load_paired, duet__t_load_mask,
    duet__t_resize, duet__t_crop, duet__t_fixed_crop, duet__t_paired_random_crop, duet__t_flip,
    duet__t_transpose, duet__t_rescale, duet__t_normalize, duet__t_masked_image,
    duet__t_image_to_tensor, duet__t_to_tensor, duet__t_collect;

/* ---- the engine (pipeline.c) ---- */
/* One more owner; duet_pipeline_destroy drops one. */
duet_pipeline *duet__pipeline_retain(const duet_pipeline *p);
/* The first step of transform t, NULL when none. */
const duet__step *duet__pipeline_find(const duet_pipeline *p, const duet__transform *t);
/* Runs every step on s (s->rng, s->io, s->paths set by the caller). */
int duet__pipeline_run(const duet_pipeline *p, duet__psample *s);
/* Runs the steps for one image `key` loaded from `path` alone (duet
 * infer): loads of other keys and steps without `key` are passed over;
 * the others run on `key` only. */
int duet__pipeline_run_key(const duet_pipeline *p, const char *key, const char *path,
                           duet__psample *s);
/* The sample's collected keys (or, without Collect, `defaults`: a
 * NULL-ended list; keys the sample lacks are passed over) into out as
 * (1, C, H, W) images or (1, n) vectors, and with `meta` Collect's
 * meta_keys ("<key>_path") as meta columns. */
int duet__psample_to_batch(duet__psample *s, const char *const *defaults, bool meta,
                           duet_batch *out);

/* ---- keys and state (pipeline.c) ---- */
/* The state of `key`, NULL when nothing holds it yet. */
duet__pkey_state *duet__pipe_state(duet__pipe_read *r, const char *key);
/* A new key's state (a load); ECONFIG naming it at `c`'s `at` when loaded twice. */
int duet__pipe_state_add(duet__pipe_read *r, duet_config *c, const char *at, const char *key,
                         duet__pkey_state **out);
/* Reads `keys` (1..max names, no repeats) into st; each must be held
 * (loaded by an earlier step, or optional per the spec). */
int duet__pipe_read_keys(duet_config *c, duet__pipe_read *r, duet__step *st, int max);
/* For an image step on st's keys: each an image not yet a tensor; with
 * u8_only, also still 8-bit (`what` says the step for the message). */
int duet__pipe_need_images(const duet__pipe_read *r, const duet__step *st, bool u8_only,
                           const char *what);
/* The option struct of st, zeroed, of `size` bytes. */
int duet__pipe_opts(duet__step *st, size_t size);
/* Error at `key` of entry c: "x.cfg:12: 'key' msg". */
int duet__pipe_bad(duet_config *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A string option that must be one of `allowed` (NULL-terminated). */
int duet__pipe_string_in(duet_config *c, const char *key, const char *def,
                         const char *const *allowed, const char **out);
/* An int or two ints [a, b] (MMEditing's int | tuple), each in [lo, 16384];
 * absent: def for both. `pair_only`: an int alone is refused. */
int duet__pipe_int_pair(duet_config *c, const char *key, int64_t def, int64_t lo, bool pair_only,
                        int64_t v[2]);

/* ---- samples (pipeline.c) ---- */
duet__pentry *duet__psample_get(duet__psample *s, const char *key);
/* A new entry (replacing one of the same key); its image zeroed. */
int duet__psample_put(duet__psample *s, const char *key, duet__pentry **out);
void duet__psample_clear(duet__psample *s);
void duet__pimage_free(duet__pimage *m);
/* Makes the 8-bit pixels the image's own (copies borrowed ones). */
int duet__pimage_own(duet__pimage *m, const char *what);
/* Carries out a pending channel swap. */
int duet__pimage_realize_swap(duet__pimage *m, const char *what);
/* Turns the image into float32 (byte values, or byte / 255 when unit),
 * with any pending swap carried out. */
int duet__pimage_to_float(duet__pimage *m, const char *what);
/* The rectangle (x, y, cw, ch) as the image's new pixels. */
int duet__pimage_crop(duet__pimage *m, int64_t x, int64_t y, int64_t cw, int64_t ch,
                      const char *what);

#endif
