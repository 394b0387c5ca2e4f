/* Batches: named tensors (samples along dim 0) and metadata columns. */
#include "duet/batch.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- batches --------------------------------------------------------------- */

static int batch_check_count(duet_batch *b, int64_t n, const char *what, const char *name) {
    if (n < 1)
        return duet__error(DUET_EINVAL, "batch: %s '%s' has no samples", what, name);
    bool empty = b->ntensors == 0 && b->nmeta == 0;
    if (!empty && b->nsamples != n)
        return duet__error(DUET_ESHAPE,
                           "batch: %s '%s' has %" PRId64 " samples but the batch has %" PRId64,
                           what, name, n, b->nsamples);
    return DUET_OK;
}

static bool batch_has_name(const duet_batch *b, const char *name) {
    for (size_t i = 0; i < b->ntensors; i++)
        if (strcmp(b->tensors[i].name, name) == 0) return true;
    for (size_t i = 0; i < b->nmeta; i++)
        if (strcmp(b->meta[i].key, name) == 0) return true;
    return false;
}

int duet_batch_add_tensor(duet_batch *b, const char *name, duet_tensor *t) {
    DUET_ASSERT(b != NULL && name != NULL && t != NULL);
    if (batch_has_name(b, name))
        return duet__error(DUET_EINVAL, "batch: '%s' is already in the batch", name);
    DUET_TRY(batch_check_count(b, t->shape[0], "tensor", name));
    duet_batch_tensor *grown = realloc(b->tensors, (b->ntensors + 1) * sizeof *grown);
    if (grown == NULL) return duet__error(DUET_ENOMEM, "batch: out of memory adding '%s'", name);
    b->tensors = grown;
    char *n = duet__strdup(name);
    if (n == NULL) return duet__error(DUET_ENOMEM, "batch: out of memory adding '%s'", name);
    b->tensors[b->ntensors].name = n;
    b->tensors[b->ntensors].tensor = duet_tensor_retain(t);
    b->ntensors++;
    b->nsamples = t->shape[0];
    return DUET_OK;
}

static void free_strings(char **v, int64_t n) {
    if (v == NULL) return;
    for (int64_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

int duet_batch_add_meta(duet_batch *b, const char *key, int64_t n, const char *const *values) {
    DUET_ASSERT(b != NULL && key != NULL && (values != NULL || n == 0));
    if (batch_has_name(b, key))
        return duet__error(DUET_EINVAL, "batch: '%s' is already in the batch", key);
    DUET_TRY(batch_check_count(b, n, "metadata column", key));
    char **v = calloc((size_t)n, sizeof *v);
    char *k = duet__strdup(key);
    duet_batch_meta *grown = realloc(b->meta, (b->nmeta + 1) * sizeof *grown);
    if (grown != NULL) b->meta = grown;
    bool ok = v != NULL && k != NULL && grown != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        v[i] = duet__strdup(values[i] != NULL ? values[i] : "");
        ok = v[i] != NULL;
    }
    if (!ok) {
        free_strings(v, n);
        free(k);
        return duet__error(DUET_ENOMEM, "batch: out of memory adding metadata '%s'", key);
    }
    b->meta[b->nmeta].key = k;
    b->meta[b->nmeta].values = v;
    b->nmeta++;
    b->nsamples = n;
    return DUET_OK;
}

duet_tensor *duet_batch_tensor_get(const duet_batch *b, const char *name) {
    for (size_t i = 0; i < b->ntensors; i++)
        if (strcmp(b->tensors[i].name, name) == 0) return b->tensors[i].tensor;
    return NULL;
}

int duet_batch_require(const duet_batch *b, const char *name, duet_tensor **out) {
    *out = duet_batch_tensor_get(b, name);
    if (*out != NULL) return DUET_OK;
    duet__str have = {0};
    for (size_t i = 0; i < b->ntensors; i++)
        duet__str_add_item(&have, ", ", "%s", b->tensors[i].name);
    int rc = duet__error(DUET_ENOTFOUND, "batch: no tensor '%s' (the batch has: %s)", name,
                         b->ntensors ? duet__str_get(&have) : "nothing");
    duet__str_free(&have);
    return rc;
}

const char *duet_batch_meta_get(const duet_batch *b, const char *key, int64_t i) {
    if (i < 0 || i >= b->nsamples) return NULL;
    for (size_t k = 0; k < b->nmeta; k++)
        if (strcmp(b->meta[k].key, key) == 0) return b->meta[k].values[i];
    return NULL;
}

int duet_batch_slice(duet_batch *out, const duet_batch *b, int64_t start, int64_t count) {
    DUET_ASSERT(out->ntensors == 0 && out->nmeta == 0);
    if (start < 0 || count < 1 || start + count > b->nsamples)
        return duet__error(DUET_EINVAL,
                           "batch: samples [%" PRId64 ", %" PRId64 ") are outside a batch of %"
                           PRId64, start, start + count, b->nsamples);
    int rc = DUET_OK;
    for (size_t i = 0; i < b->ntensors && rc == DUET_OK; i++) {
        duet_tensor *v = NULL;
        rc = duet_tensor_slice0(b->tensors[i].tensor, start, count, &v);
        if (rc == DUET_OK) rc = duet_batch_add_tensor(out, b->tensors[i].name, v);
        duet_tensor_release(v);
    }
    for (size_t i = 0; i < b->nmeta && rc == DUET_OK; i++)
        rc = duet_batch_add_meta(out, b->meta[i].key, count,
                                 (const char *const *)b->meta[i].values + start);
    if (rc != DUET_OK) duet_batch_clear(out);
    return rc;
}

void duet_batch_clear(duet_batch *b) {
    if (b == NULL) return;
    for (size_t i = 0; i < b->ntensors; i++) {
        free(b->tensors[i].name);
        duet_tensor_release(b->tensors[i].tensor);
    }
    for (size_t i = 0; i < b->nmeta; i++) {
        free(b->meta[i].key);
        free_strings(b->meta[i].values, b->nsamples);
    }
    free(b->tensors);
    free(b->meta);
    memset(b, 0, sizeof *b);
}


/* ---- stacking ------------------------------------------------------------------- */

static const duet_batch_meta *meta_find(const duet_batch *b, const char *key) {
    for (size_t i = 0; i < b->nmeta; i++)
        if (strcmp(b->meta[i].key, key) == 0) return &b->meta[i];
    return NULL;
}

/* Every part holds the first part's names, tensors of one shape after dim
 * 0, and nothing else. */
static int concat_check(const duet_batch *const *parts, size_t nparts) {
    const duet_batch *p0 = parts[0];
    for (size_t k = 1; k < nparts; k++) {
        const duet_batch *p = parts[k];
        if (p->ntensors != p0->ntensors || p->nmeta != p0->nmeta)
            return duet__error(DUET_EINVAL, "batch: part %zu has %zu tensors and %zu metadata "
                               "columns, part 0 has %zu and %zu: stacked samples must carry "
                               "the same names", k, p->ntensors, p->nmeta, p0->ntensors,
                               p0->nmeta);
        for (size_t i = 0; i < p0->ntensors; i++) {
            const duet_tensor *a = p0->tensors[i].tensor;
            const duet_tensor *t = duet_batch_tensor_get(p, p0->tensors[i].name);
            if (t == NULL)
                return duet__error(DUET_EINVAL, "batch: part %zu has no tensor '%s' (part 0 "
                                   "has)", k, p0->tensors[i].name);
            bool same = t->ndim == a->ndim;
            for (int d = 1; same && d < a->ndim; d++) same = t->shape[d] == a->shape[d];
            if (!same) {
                char sa[DUET_SHAPE_STR_MAX], st[DUET_SHAPE_STR_MAX];
                return duet__error(DUET_ESHAPE, "batch: tensor '%s' is %s in part %zu but %s "
                                   "in part 0: only equal sizes stack", p0->tensors[i].name,
                                   duet_shape_str(t, st, sizeof st), k,
                                   duet_shape_str(a, sa, sizeof sa));
            }
        }
        for (size_t i = 0; i < p0->nmeta; i++)
            if (meta_find(p, p0->meta[i].key) == NULL)
                return duet__error(DUET_EINVAL, "batch: part %zu has no metadata '%s' (part 0 "
                                   "has)", k, p0->meta[i].key);
    }
    return DUET_OK;
}

int duet_batch_concat(duet_batch *out, const duet_batch *const *parts, size_t nparts) {
    DUET_ASSERT(out->ntensors == 0 && out->nmeta == 0);
    if (nparts == 0) return duet__error(DUET_EINVAL, "batch: nothing to stack");
    DUET_TRY(concat_check(parts, nparts));
    const duet_batch *p0 = parts[0];
    int64_t n = 0;
    for (size_t k = 0; k < nparts; k++) n += parts[k]->nsamples;
    int rc = DUET_OK;
    for (size_t i = 0; i < p0->ntensors && rc == DUET_OK; i++) {
        const char *name = p0->tensors[i].name;
        const duet_tensor *a = p0->tensors[i].tensor;
        int64_t shape[DUET_MAX_DIMS];
        memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
        shape[0] = n;
        duet_tensor *t = NULL;
        rc = duet_tensor_create(a->ndim, shape, &t);
        /* Tensors are contiguous with samples along dim 0: one copy a part. */
        float *dst = rc == DUET_OK ? t->data : NULL;
        for (size_t k = 0; k < nparts && dst != NULL; k++) {
            const duet_tensor *src = duet_batch_tensor_get(parts[k], name);
            memcpy(dst, src->data, sizeof(float) * (size_t)src->numel);
            dst += src->numel;
        }
        if (rc == DUET_OK) rc = duet_batch_add_tensor(out, name, t);
        duet_tensor_release(t);
    }
    for (size_t i = 0; i < p0->nmeta && rc == DUET_OK; i++) {
        const char **v = malloc(sizeof *v * (size_t)n);
        if (v == NULL) {
            rc = duet__error(DUET_ENOMEM, "batch: out of memory");
            break;
        }
        int64_t at = 0;
        for (size_t k = 0; k < nparts; k++) {
            const duet_batch_meta *m = meta_find(parts[k], p0->meta[i].key);
            for (int64_t j = 0; j < parts[k]->nsamples; j++) v[at++] = m->values[j];
        }
        rc = duet_batch_add_meta(out, p0->meta[i].key, n, v);
        free(v);
    }
    if (rc != DUET_OK) duet_batch_clear(out);
    return rc;
}
