/* Batches for one rank: the sampler picks indices, the dataset builds the
 * samples (named tensors, each a batch of one), they are stacked by name
 * into (N, ...) tensors, whatever the names. With prefetch > 0 a
 * producer thread runs ahead by up to `prefetch` batches through a bounded
 * queue. The producer owns the sampler while it runs; batch contents depend
 * only on the sampler state and the dataset, so prefetching changes timing,
 * never data. */
#include "duet/data.h"

#include <pthread.h>
#include <string.h>

typedef struct queued {
    duet_data_batch *batch;
    duet_sampler_state after; /* sampler state once this batch is taken */
} queued;

struct duet_loader {
    duet_dataset *ds; /* borrowed */
    duet_loader_opts opts;
    duet_sampler *sampler;
    int64_t num_samples;
    duet_sampler_state consumed; /* after the last batch handed out */
    bool failed;                 /* a batch failed: refuse until set_state */
    bool finished;               /* one_epoch: the epoch is done */
    /* prefetch thread and its queue, guarded by mu */
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    queued *queue;
    int qhead, qcount;
    bool stop;          /* consumer -> producer: exit */
    bool producer_done; /* producer -> consumer: no more batches (end or error) */
    int producer_rc;
    char *producer_msg;
};

duet_loader_opts duet_loader_options_default(void) {
    duet_loader_opts o;
    memset(&o, 0, sizeof(o));
    o.samples_per_gpu = 1;
    o.world_size = 1;
    o.rank = 0;
    o.seed = 0;
    o.shuffle = true;
    o.prefetch = 2;
    o.one_epoch = false;
    o.device = duet_device_cpu();
    return o;
}

void duet_data_batch_destroy(duet_data_batch *b) {
    if (b == NULL) return;
    duet_batch_clear(&b->batch);
    free(b->indices);
    free(b);
}

/* ---- building a batch --------------------------------------------------------- */

static int build_batch(const duet_loader *l, const int64_t *indices, int64_t epoch,
                       duet_data_batch **out) {
    *out = NULL;
    int64_t n = l->opts.samples_per_gpu;
    duet_data_batch *b = calloc(1, sizeof(*b));
    duet_batch *items = calloc((size_t)n, sizeof(*items));
    const duet_batch **parts = calloc((size_t)n, sizeof(*parts));
    int rc = b && items && parts ? DUET_OK : duet__error(DUET_ENOMEM, "loader: out of memory");
    if (rc == DUET_OK) {
        b->n = n;
        b->epoch = epoch;
        b->indices = malloc(sizeof(int64_t) * (size_t)n);
        if (b->indices == NULL) rc = duet__error(DUET_ENOMEM, "loader: out of memory");
    }
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        rc = duet_dataset_get_item(l->ds, indices[i], l->opts.seed, epoch, &items[i]);
        parts[i] = &items[i];
        b->indices[i] = indices[i];
    }
    if (rc == DUET_OK) {
        rc = duet_batch_concat(&b->batch, parts, (size_t)n);
        if (rc == DUET_ESHAPE) {
            const char *first = duet_dataset_name(l->ds, indices[0]);
            duet__error_context(rc, "loader: samples of one batch differ in size (the first is "
                                "%s); whole-image sets need samples_per_gpu 1",
                                first != NULL ? first : "?");
        }
    }
    for (int64_t i = 0; items != NULL && i < n; i++) duet_batch_clear(&items[i]);
    free(items);
    free(parts);
    if (rc != DUET_OK) {
        duet_data_batch_destroy(b);
        return rc;
    }
    *out = b;
    return DUET_OK;
}

/* The next batch from `sampler`, or *out = NULL at the end of a one_epoch
 * loader. *after: the sampler state once it is taken. */
static int produce(const duet_loader *l, duet_sampler *sampler, duet_data_batch **out,
                   duet_sampler_state *after) {
    *out = NULL;
    duet_sampler_state st = duet_sampler_get_state(sampler);
    if (l->opts.one_epoch &&
        (st.epoch > l->opts.start.epoch || st.position >= l->num_samples)) {
        *after = st;
        return DUET_OK;
    }
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)l->opts.samples_per_gpu);
    if (idx == NULL) return duet__error(DUET_ENOMEM, "loader: out of memory");
    int64_t epoch = 0;
    duet_sampler_next_batch(sampler, idx, &epoch);
    int rc = build_batch(l, idx, epoch, out);
    free(idx);
    *after = duet_sampler_get_state(sampler);
    return rc;
}

/* The batch's tensors, made on the host by the dataset's decoders, each
 * replaced by one copy on dev (nothing to do on the CPU). On the caller's
 * thread: a device's copies go on that thread's stream. */
static int place_batch(duet_data_batch *b, duet_device dev) {
    for (size_t i = 0; i < b->batch.ntensors; i++) {
        duet_tensor *t = b->batch.tensors[i].tensor, *d = NULL;
        if (duet_device_equal(duet_tensor_device(t), dev)) continue;
        int rc = duet_tensor_to(t, dev, &d);
        if (rc != DUET_OK) {
            char s[DUET_DEVICE_STR_MAX];
            return duet__error_context(rc, "loader: batch tensor '%s' to %s",
                                       b->batch.tensors[i].name,
                                       duet_device_str(dev, s, sizeof s));
        }
        duet_tensor_release(t);
        b->batch.tensors[i].tensor = d;
    }
    return DUET_OK;
}

/* ---- the prefetch thread ---------------------------------------------------------- */

static void *prefetch_main(void *arg) {
    duet_loader *l = arg;
    int cap = l->opts.prefetch;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->stop && l->qcount == cap) pthread_cond_wait(&l->not_full, &l->mu);
        bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop) break;

        duet_data_batch *b = NULL;
        duet_sampler_state after;
        int rc = produce(l, l->sampler, &b, &after);

        pthread_mutex_lock(&l->mu);
        if (rc != DUET_OK || b == NULL || l->stop) {
            if (rc != DUET_OK) {
                /* duet_last_error() is per thread: carry the text over. */
                l->producer_rc = rc;
                l->producer_msg = strdup(duet_last_error());
            }
            l->producer_done = true;
            pthread_cond_broadcast(&l->not_empty);
            pthread_mutex_unlock(&l->mu);
            duet_data_batch_destroy(b);
            break;
        }
        l->queue[(l->qhead + l->qcount) % cap] = (queued){b, after};
        l->qcount++;
        pthread_cond_signal(&l->not_empty);
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

static void stop_thread(duet_loader *l) {
    if (l->running) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->not_full);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        l->running = false;
    }
    while (l->qcount > 0) {
        duet_data_batch_destroy(l->queue[l->qhead].batch);
        l->qhead = (l->qhead + 1) % l->opts.prefetch;
        l->qcount--;
    }
    l->qhead = 0;
    /* The producer ran ahead of what was handed out: rewind. */
    int rc = duet_sampler_set_state(l->sampler, l->consumed);
    DUET_ASSERT(rc == DUET_OK); /* consumed was a valid state of this sampler */
    (void)rc;
    l->stop = false;
    l->producer_done = false;
    l->producer_rc = DUET_OK;
    free(l->producer_msg);
    l->producer_msg = NULL;
}

/* ---- public --------------------------------------------------------------------------- */

int duet_loader_create(duet_dataset *ds, const duet_loader_opts *opts, duet_loader **out) {
    *out = NULL;
    if (ds == NULL || opts == NULL || opts->prefetch < 0)
        return duet__error(DUET_EINVAL, "loader: need a dataset, options and prefetch >= 0");
    duet_loader *l = calloc(1, sizeof(*l));
    if (l == NULL) return duet__error(DUET_ENOMEM, "loader: out of memory");
    l->ds = ds;
    l->opts = *opts;
    int rc = duet_sampler_create(duet_dataset_size(ds), opts->world_size, opts->rank,
                                 opts->samples_per_gpu, opts->seed, opts->shuffle, &l->sampler);
    if (rc == DUET_OK) rc = duet_sampler_set_state(l->sampler, opts->start);
    if (rc != DUET_OK) {
        duet_sampler_destroy(l->sampler);
        free(l);
        return duet__error_context(rc, "loader");
    }
    l->num_samples = duet_sampler_num_samples(l->sampler);
    l->consumed = opts->start;
    if (opts->prefetch > 0) {
        l->queue = calloc((size_t)opts->prefetch, sizeof(queued));
        if (l->queue == NULL) {
            duet_sampler_destroy(l->sampler);
            free(l);
            return duet__error(DUET_ENOMEM, "loader: out of memory");
        }
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->not_empty, NULL);
    pthread_cond_init(&l->not_full, NULL);
    *out = l;
    return DUET_OK;
}

void duet_loader_destroy(duet_loader *l) {
    if (l == NULL) return;
    stop_thread(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->not_empty);
    pthread_cond_destroy(&l->not_full);
    free(l->queue);
    duet_sampler_destroy(l->sampler);
    free(l);
}

int64_t duet_loader_batches_per_epoch(const duet_loader *l) {
    return l->num_samples / l->opts.samples_per_gpu;
}

duet_sampler_state duet_loader_get_state(const duet_loader *l) { return l->consumed; }

int duet_loader_set_state(duet_loader *l, duet_sampler_state state) {
    stop_thread(l);
    DUET_TRY(duet_sampler_set_state(l->sampler, state));
    l->opts.start = state; /* a one_epoch loader now covers this epoch */
    l->consumed = state;
    l->failed = false;
    l->finished = false;
    return DUET_OK;
}

int duet_loader_next(duet_loader *l, duet_data_batch **out) {
    *out = NULL;
    double t0 = duet_time_now();
    if (l->failed)
        return duet__error(DUET_ESTATE, "loader: an earlier batch failed; call "
                           "duet_loader_set_state to go on");
    if (l->finished) return DUET_OK;
    duet_data_batch *b = NULL;
    duet_sampler_state after;
    if (l->opts.prefetch == 0) {
        int rc = produce(l, l->sampler, &b, &after);
        if (rc != DUET_OK) {
            l->failed = true;
            return rc;
        }
    } else {
        if (!l->running) {
            int e = pthread_create(&l->thread, NULL, prefetch_main, l);
            if (e != 0)
                return duet__error(DUET_ENOMEM, "loader: cannot start the prefetch thread: %s",
                                   strerror(e));
            l->running = true;
        }
        pthread_mutex_lock(&l->mu);
        while (l->qcount == 0 && !l->producer_done) pthread_cond_wait(&l->not_empty, &l->mu);
        if (l->qcount > 0) {
            /* Batches built before a failure are good: hand them out first. */
            b = l->queue[l->qhead].batch;
            after = l->queue[l->qhead].after;
            l->qhead = (l->qhead + 1) % l->opts.prefetch;
            l->qcount--;
            pthread_cond_signal(&l->not_full);
            pthread_mutex_unlock(&l->mu);
        } else {
            int rc = l->producer_rc;
            char *msg = l->producer_msg;
            l->producer_msg = NULL;
            pthread_mutex_unlock(&l->mu);
            if (rc != DUET_OK) {
                l->failed = true;
                rc = duet__error(rc, "%s", msg ? msg : "loader: prefetch thread failed");
                free(msg);
                return rc;
            }
            free(msg);
        }
    }
    if (b == NULL) {
        l->finished = true;
        return DUET_OK;
    }
    int rc = place_batch(b, l->opts.device);
    if (rc != DUET_OK) {
        duet_data_batch_destroy(b);
        l->failed = true;
        return rc;
    }
    l->consumed = after;
    b->data_time = duet_time_now() - t0;
    *out = b;
    return DUET_OK;
}
