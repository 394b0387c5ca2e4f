/* MMEditing's GANImageBuffer (models_internal.h): buffer_size images of one
 * shape in one contiguous array, filled in arrival order. */
#include "models/models_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct duet__image_pool {
    int64_t size;           /* buffer_size */
    int64_t count;          /* images stored, <= size */
    int64_t c, h, w;        /* the shape of one image, set by the first */
    float *images;          /* (size, c, h, w), the first count valid */
};

int duet__image_pool_create(int64_t buffer_size, duet__image_pool **out) {
    *out = NULL;
    if (buffer_size < 0)
        return duet__error(DUET_EINVAL, "image pool: buffer_size %" PRId64 " must be >= 0",
                           buffer_size);
    duet__image_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "image pool: out of memory");
    p->size = buffer_size;
    *out = p;
    return DUET_OK;
}

void duet__image_pool_destroy(duet__image_pool *p) {
    if (p == NULL) return;
    free(p->images);
    free(p);
}

int64_t duet__image_pool_count(const duet__image_pool *p) { return p->count; }

/* Fixes the image shape (and allocates) on first use; checks it after. */
static int set_shape(duet__image_pool *p, int64_t c, int64_t h, int64_t w) {
    if (p->images != NULL) {
        if (c == p->c && h == p->h && w == p->w) return DUET_OK;
        return duet__error(DUET_ESHAPE, "image pool: images of (%" PRId64 ", %" PRId64 ", %"
                           PRId64 ") cannot join a pool of (%" PRId64 ", %" PRId64 ", %" PRId64
                           ") images (MMEditing's torch.cat fails the same way); give every "
                           "batch the same crop size", c, h, w, p->c, p->h, p->w);
    }
    const size_t n = (size_t)(p->size * c * h * w);
    p->images = malloc((n ? n : 1) * sizeof(float));
    if (p->images == NULL)
        return duet__error(DUET_ENOMEM, "image pool: out of memory for %" PRId64 " images",
                           p->size);
    p->c = c;
    p->h = h;
    p->w = w;
    return DUET_OK;
}

int duet__image_pool_query(duet__image_pool *p, const duet_tensor *images, duet_rng *rng,
                           duet_tensor **out) {
    *out = NULL;
    if (images->ndim != 4) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "image pool: images must be (N, C, H, W), got %s",
                           duet_shape_str(images, s, sizeof s));
    }
    duet_tensor *r = NULL;
    DUET_TRY(duet_tensor_clone(images, &r));
    if (p->size == 0) {
        *out = r;
        return DUET_OK;
    }
    int rc = set_shape(p, images->shape[1], images->shape[2], images->shape[3]);
    if (rc != DUET_OK) {
        duet_tensor_release(r);
        return rc;
    }
    /* The pool lives on the host: r is mapped (in place on the CPU). */
    float *rh = NULL;
    rc = duet_tensor_map_write(r, true, &rh);
    if (rc != DUET_OK) {
        duet_tensor_release(r);
        return rc;
    }
    const size_t per = (size_t)(p->c * p->h * p->w);
    for (int64_t i = 0; i < images->shape[0]; i++) {
        float *sample = rh + (size_t)i * per; /* holds images[i] */
        if (p->count < p->size) {
            memcpy(p->images + (size_t)p->count * per, sample, per * sizeof(float));
            p->count++;
        } else if (duet_rng_uniform(rng) < 0.5f) {
            /* Return the stored image, store the new one in its place. */
            float *slot = p->images + (size_t)duet_rng_int(rng, 0, p->size - 1) * per;
            for (size_t k = 0; k < per; k++) {
                float t = slot[k];
                slot[k] = sample[k];
                sample[k] = t;
            }
        }
    }
    rc = duet_tensor_unmap_write(r, rh);
    if (rc != DUET_OK) {
        duet_tensor_release(r);
        return rc;
    }
    *out = r;
    return DUET_OK;
}

/* key is the model's literal ("cyclegan.pool_a"): a longer one is a bug,
 * caught here rather than cut into a wrong checkpoint name. */
#define POOL_KEY_MAX 100

int duet__image_pool_save(const duet__image_pool *p, duet_st_writer *w, const char *key) {
    DUET_ASSERT(strlen(key) <= POOL_KEY_MAX);
    char name[160], v[32];
    snprintf(name, sizeof name, "%s.count", key);
    snprintf(v, sizeof v, "%" PRId64, p->count);
    DUET_TRY(duet_st_writer_set_meta(w, name, v));
    if (p->count == 0) return DUET_OK;
    snprintf(name, sizeof name, DUET_MODEL_STATE_PREFIX "%s", key);
    duet_tensor *t = NULL;
    DUET_TRY(duet_tensor_from_data(4, (int64_t[]){p->count, p->c, p->h, p->w}, p->images, &t));
    int rc = duet_st_writer_add(w, name, t);
    duet_tensor_release(t);
    return rc;
}

int duet__image_pool_load(duet__image_pool *p, const duet_st *st, const char *key) {
    DUET_ASSERT(strlen(key) <= POOL_KEY_MAX);
    char name[160];
    snprintf(name, sizeof name, "%s.count", key);
    const char *s = duet_st_meta(st, name);
    if (s == NULL)
        return duet__error(DUET_ENOTFOUND, "the checkpoint has no metadata '%s' (a CycleGAN "
                           "checkpoint has): resume a CycleGAN run, or start from it with "
                           "load_from", name);
    char *end = NULL;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || n < 0 || n > p->size)
        return duet__error(DUET_EFORMAT, "metadata '%s' is '%s'; want a count of images from 0 "
                           "to the pool's buffer_size %" PRId64, name, s, p->size);
    if (n == 0) {
        p->count = 0;
        return DUET_OK;
    }
    snprintf(name, sizeof name, DUET_MODEL_STATE_PREFIX "%s", key);
    duet_tensor *t = NULL;
    DUET_TRY(duet_st_get(st, name, &t));
    int rc = DUET_OK;
    if (t->ndim != 4 || t->shape[0] != n) {
        char sh[DUET_SHAPE_STR_MAX];
        rc = duet__error(DUET_EFORMAT, "'%s' is %s; want (%lld, C, H, W)", name,
                         duet_shape_str(t, sh, sizeof sh), n);
    }
    if (rc == DUET_OK) {
        /* The stored shape wins: a fresh pool takes it, a used one must match. */
        if (p->images != NULL && (p->c != t->shape[1] || p->h != t->shape[2] ||
                                  p->w != t->shape[3])) {
            free(p->images);
            p->images = NULL;
        }
        rc = set_shape(p, t->shape[1], t->shape[2], t->shape[3]);
    }
    if (rc == DUET_OK) {
        rc = duet_tensor_copy_to_host(t, p->images);
        if (rc == DUET_OK) p->count = n;
    }
    duet_tensor_release(t);
    return rc;
}
