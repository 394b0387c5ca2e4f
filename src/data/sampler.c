/* MMEditing's DistributedSampler (shuffle, pad by repeating the start,
 * stripe by rank), with a cursor for iteration-based training. */
#include "duet/data.h"

#include <string.h>

/* Keeps the sampler's generator apart from other users of the same seed. */
#define SAMPLER_STREAM_TAG 0x73616d706c657200ULL /* "sampler\0" */

struct duet_sampler {
    int64_t size;
    int world;
    int rank;
    int64_t per_gpu;
    uint64_t seed;
    bool shuffle;
    int64_t num_samples; /* per rank per epoch */
    int64_t total;       /* world * num_samples */
    int64_t *full;       /* total entries of the cached epoch, padded */
    int64_t *mine;       /* this rank's num_samples entries of it */
    int64_t cached_epoch;
    duet_sampler_state state;
};

int duet_sampler_create(int64_t dataset_size, int world_size, int rank, int64_t samples_per_gpu,
                        uint64_t seed, bool shuffle, duet_sampler **out) {
    *out = NULL;
    if (dataset_size < 1 || world_size < 1 || rank < 0 || rank >= world_size ||
        samples_per_gpu < 1)
        return duet__error(DUET_EINVAL, "sampler: bad arguments (dataset size %lld, world size "
                           "%d, rank %d, samples per GPU %lld)", (long long)dataset_size,
                           world_size, rank, (long long)samples_per_gpu);
    /* Compared by division: world * samples_per_gpu may not fit in int64_t
     * (samples_per_gpu = 2^62). After this check it is <= dataset_size. */
    if (samples_per_gpu > dataset_size / world_size)
        return duet__error(DUET_ESHAPE, "sampler: the dataset has %lld samples, fewer than "
                           "world size %d x samples per GPU %lld; padding cannot give every "
                           "process a full batch: use fewer processes or a smaller batch",
                           (long long)dataset_size, world_size, (long long)samples_per_gpu);
    duet_sampler *s = calloc(1, sizeof(*s));
    if (s == NULL) return duet__error(DUET_ENOMEM, "sampler: out of memory");
    s->size = dataset_size;
    s->world = world_size;
    s->rank = rank;
    s->per_gpu = samples_per_gpu;
    s->seed = seed;
    s->shuffle = shuffle;
    int64_t group = (int64_t)world_size * samples_per_gpu; /* <= dataset_size */
    /* ceil(size / group) without size + group - 1, which may overflow. */
    int64_t groups = dataset_size / group + (dataset_size % group != 0);
    if (groups > INT64_MAX / world_size / samples_per_gpu) {
        free(s);
        return duet__error(DUET_EINVAL, "sampler: %lld samples padded for %d processes x %lld "
                           "overflow", (long long)dataset_size, world_size,
                           (long long)samples_per_gpu);
    }
    s->num_samples = groups * samples_per_gpu;
    s->total = s->num_samples * world_size;
    /* total < size + group <= 2 size, so the padding repeats each index at
     * most once. */
    s->full = malloc(sizeof(int64_t) * (size_t)s->total);
    s->mine = malloc(sizeof(int64_t) * (size_t)s->num_samples);
    if (s->full == NULL || s->mine == NULL) {
        duet_sampler_destroy(s);
        return duet__error(DUET_ENOMEM, "sampler: out of memory for %lld indices",
                           (long long)s->total);
    }
    s->cached_epoch = -1;
    *out = s;
    return DUET_OK;
}

void duet_sampler_destroy(duet_sampler *s) {
    if (s == NULL) return;
    free(s->full);
    free(s->mine);
    free(s);
}

int64_t duet_sampler_num_samples(const duet_sampler *s) { return s->num_samples; }

/* Fills full (padded permutation) and mine (this rank's stripe) for epoch. */
static void compute_epoch(const duet_sampler *s, int64_t epoch, int64_t *full, int64_t *mine) {
    if (s->shuffle) {
        duet_rng rng = duet_rng_make(s->seed, SAMPLER_STREAM_TAG ^ (uint64_t)epoch);
        duet_rng_permutation(&rng, full, s->size);
    } else {
        for (int64_t i = 0; i < s->size; i++) full[i] = i;
    }
    for (int64_t i = s->size; i < s->total; i++) full[i] = full[i - s->size];
    for (int64_t k = 0; k < s->num_samples; k++) mine[k] = full[s->rank + k * s->world];
}

static void cache_epoch(duet_sampler *s, int64_t epoch) {
    if (s->cached_epoch == epoch) return;
    compute_epoch(s, epoch, s->full, s->mine);
    s->cached_epoch = epoch;
}

int duet_sampler_epoch_indices(const duet_sampler *s, int64_t epoch, int64_t *out) {
    if (s->cached_epoch == epoch) {
        memcpy(out, s->mine, sizeof(int64_t) * (size_t)s->num_samples);
        return DUET_OK;
    }
    /* A const sampler: compute into scratch rather than touch the cache. */
    int64_t *full = malloc(sizeof(int64_t) * (size_t)s->total);
    if (full == NULL) return duet__error(DUET_ENOMEM, "sampler: out of memory");
    compute_epoch(s, epoch, full, out);
    free(full);
    return DUET_OK;
}

void duet_sampler_next_batch(duet_sampler *s, int64_t *out, int64_t *epoch) {
    if (s->state.position >= s->num_samples) {
        s->state.epoch++;
        s->state.position = 0;
    }
    cache_epoch(s, s->state.epoch);
    memcpy(out, s->mine + s->state.position, sizeof(int64_t) * (size_t)s->per_gpu);
    s->state.position += s->per_gpu;
    if (epoch != NULL) *epoch = s->state.epoch;
}

duet_sampler_state duet_sampler_get_state(const duet_sampler *s) { return s->state; }

int duet_sampler_set_state(duet_sampler *s, duet_sampler_state state) {
    if (state.epoch < 0 || state.position < 0 || state.position > s->num_samples ||
        state.position % s->per_gpu != 0)
        return duet__error(DUET_EINVAL, "sampler: cannot resume at epoch %lld position %lld "
                           "(want epoch >= 0 and a position in [0, %lld] that is a multiple "
                           "of %lld); was the checkpoint made with another world size or "
                           "batch size?", (long long)state.epoch, (long long)state.position,
                           (long long)s->num_samples, (long long)s->per_gpu);
    s->state = state;
    return DUET_OK;
}

int duet_sampler_state_from_global(int64_t dataset_size, int world_size, int64_t samples_per_gpu,
                                   int64_t epoch, int64_t global, duet_sampler_state *out) {
    *out = (duet_sampler_state){0, 0};
    if (dataset_size < 1 || world_size < 1 || samples_per_gpu < 1 ||
        samples_per_gpu > dataset_size / world_size || epoch < 0 || global < 0)
        return duet__error(DUET_EINVAL, "sampler: bad arguments (dataset size %lld, world size "
                           "%d, samples per GPU %lld, epoch %lld, global index %lld)",
                           (long long)dataset_size, world_size, (long long)samples_per_gpu,
                           (long long)epoch, (long long)global);
    int64_t group = (int64_t)world_size * samples_per_gpu;
    if (global % group != 0)
        return duet__error(DUET_EINVAL, "sampler: global sample index %lld is not a multiple "
                           "of %d processes x %lld samples: the global batches would not line "
                           "up with the stream's", (long long)global, world_size,
                           (long long)samples_per_gpu);
    int64_t num_samples = (dataset_size / group + (dataset_size % group != 0)) * samples_per_gpu;
    int64_t position = global / world_size;
    /* At or past this epoch's padded end: the next epoch, as next_batch
     * would go on. */
    *out = position >= num_samples ? (duet_sampler_state){epoch + 1, 0}
                                   : (duet_sampler_state){epoch, position};
    return DUET_OK;
}
