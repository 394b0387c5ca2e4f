/* sim:N's streams (sim.h): a worker thread per stream running its queue in
 * order, sticky kernel errors, events as marks in a stream's queue, the
 * copies and fills queued on streams, and the device's counters. */
#include "sim/sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define OP_MAX 64

typedef enum task_kind { TASK_KERNEL, TASK_WAIT } task_kind;

typedef struct task {
    struct task *next;
    task_kind kind;
    char op[OP_MAX];
    int (*kernel)(void *ctx);
    void *ctx;
    void (*free_ctx)(void *ctx);
    duet__sim_stream *wait_on; /* TASK_WAIT: until wait_on has run wait_mark tasks */
    uint64_t wait_mark;
} task;

struct duet__sim_stream {
    int index;
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t work;     /* the worker waits for tasks */
    pthread_cond_t progress; /* waiters wait for done to grow */
    task *head, *tail;
    uint64_t queued, done;   /* tasks queued and run (or skipped) so far */
    bool stop;
    int error;               /* sticky: the first failing kernel's status */
    char error_op[OP_MAX];
    char error_msg[1024];
    duet__sim_stream *next;  /* the device's streams */
};

struct duet__sim_event {
    duet__sim_stream *stream; /* NULL until recorded */
    uint64_t mark;
};

enum { C_H2D, C_D2H, C_D2D, C_H2D_BYTES, C_D2H_BYTES, C_D2D_BYTES, C_LAUNCH, C_SYNC, C_COUNT };

static struct {
    duet__sim_stream *compute;
    duet__sim_stream *streams; /* every stream of the device, compute first */
    _Atomic uint64_t counters[C_COUNT];
} devices[DUET_SIM_MAX_DEVICES];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t sync_once = PTHREAD_ONCE_INIT;
static bool sync_mode;
static void read_sync_mode(void) {
    const char *e = getenv("DUET_SIM_SYNC");
    sync_mode = e != NULL && strcmp(e, "1") == 0;
}

void duet__sim_count(int index, duet__sim_counter which, size_t bytes) {
    DUET_ASSERT(index >= 0 && index < DUET_SIM_MAX_DEVICES);
    _Atomic uint64_t *c = devices[index].counters;
    switch (which) {
    case DUET__SIM_H2D:
        atomic_fetch_add(&c[C_H2D], 1);
        atomic_fetch_add(&c[C_H2D_BYTES], bytes);
        break;
    case DUET__SIM_D2H:
        atomic_fetch_add(&c[C_D2H], 1);
        atomic_fetch_add(&c[C_D2H_BYTES], bytes);
        break;
    case DUET__SIM_D2D:
        atomic_fetch_add(&c[C_D2D], 1);
        atomic_fetch_add(&c[C_D2D_BYTES], bytes);
        break;
    case DUET__SIM_LAUNCH: atomic_fetch_add(&c[C_LAUNCH], 1); break;
    case DUET__SIM_SYNC: atomic_fetch_add(&c[C_SYNC], 1); break;
    }
}

int duet_sim_stats_get(int index, duet_sim_stats *out) {
    memset(out, 0, sizeof *out);
    if (index < 0 || index >= DUET_SIM_MAX_DEVICES)
        return duet__error(DUET_EINVAL, "sim stats: sim:%d asked for, sim:0 to sim:%d exist",
                           index, DUET_SIM_MAX_DEVICES - 1);
    _Atomic uint64_t *c = devices[index].counters;
    out->h2d_copies = atomic_load(&c[C_H2D]);
    out->d2h_copies = atomic_load(&c[C_D2H]);
    out->d2d_copies = atomic_load(&c[C_D2D]);
    out->h2d_bytes = atomic_load(&c[C_H2D_BYTES]);
    out->d2h_bytes = atomic_load(&c[C_D2H_BYTES]);
    out->d2d_bytes = atomic_load(&c[C_D2D_BYTES]);
    out->launches = atomic_load(&c[C_LAUNCH]);
    out->syncs = atomic_load(&c[C_SYNC]);
    return DUET_OK;
}

void duet_sim_stats_reset(int index) {
    if (index < 0 || index >= DUET_SIM_MAX_DEVICES) return;
    for (int i = 0; i < C_COUNT; i++) atomic_store(&devices[index].counters[i], 0);
}

/* ---- the worker ----------------------------------------------------------- */

static void run_wait(duet__sim_stream *on, uint64_t mark) {
    pthread_mutex_lock(&on->lock);
    while (on->done < mark) pthread_cond_wait(&on->progress, &on->lock);
    pthread_mutex_unlock(&on->lock);
}

static void *worker_main(void *arg) {
    duet__sim_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work, &s->lock);
        if (s->head == NULL) break;
        task *t = s->head;
        bool skip = s->error != DUET_OK;
        pthread_mutex_unlock(&s->lock);
        int rc = DUET_OK;
        if (t->kind == TASK_WAIT) {
            run_wait(t->wait_on, t->wait_mark);
        } else if (!skip) {
            duet_clear_error();
            rc = t->kernel(t->ctx);
        }
        if (t->kind == TASK_KERNEL && t->free_ctx != NULL) t->free_ctx(t->ctx);
        pthread_mutex_lock(&s->lock);
        if (rc != DUET_OK && s->error == DUET_OK) {
            s->error = rc;
            snprintf(s->error_op, sizeof s->error_op, "%s", t->op);
            const char *msg = duet_last_error();
            snprintf(s->error_msg, sizeof s->error_msg, "%s",
                     msg[0] != '\0' ? msg : duet_strerror(rc));
        }
        s->head = t->next;
        if (s->head == NULL) s->tail = NULL;
        s->done++;
        pthread_cond_broadcast(&s->progress);
        free(t);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* s's sticky error as a status with its message; DUET_OK when none.
 * Call with s->lock held. */
static int sticky_error(duet__sim_stream *s) {
    if (s->error == DUET_OK) return DUET_OK;
    return duet__error(s->error, "sim:%d: kernel %s failed: %s", s->index, s->error_op,
                       s->error_msg);
}

/* Waits until s has run `mark` tasks; s's sticky error. */
static int wait_mark(duet__sim_stream *s, uint64_t mark) {
    pthread_mutex_lock(&s->lock);
    while (s->done < mark) pthread_cond_wait(&s->progress, &s->lock);
    int rc = sticky_error(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Queues t on s; its mark (s's count of tasks once t is in) in *mark. With
 * DUET_SIM_SYNC=1, waits for it and returns the stream's error. */
static int enqueue(duet__sim_stream *s, task *t, uint64_t *mark) {
    pthread_once(&sync_once, read_sync_mode);
    t->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    uint64_t m = ++s->queued;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    if (mark != NULL) *mark = m;
    return sync_mode ? wait_mark(s, m) : DUET_OK;
}

static int stream_new(int index, duet__sim_stream **out) {
    *out = NULL;
    duet__sim_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return duet__error(DUET_ENOMEM, "sim:%d: out of memory for a stream", index);
    s->index = index;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    int e = pthread_create(&s->worker, NULL, worker_main, s);
    if (e != 0) {
        pthread_cond_destroy(&s->progress);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return duet__error(DUET_EDEVICE, "sim:%d: cannot start a stream's worker thread: %s",
                           index, strerror(e));
    }
    *out = s;
    return DUET_OK;
}

duet__sim_stream *duet__sim_compute_stream(int index) {
    DUET_ASSERT(index >= 0 && index < DUET_SIM_MAX_DEVICES);
    pthread_mutex_lock(&devices_lock);
    if (devices[index].compute == NULL) {
        duet__sim_stream *s = NULL;
        int rc = stream_new(index, &s);
        if (rc != DUET_OK) {
            fprintf(stderr, "duet: %s\n", duet_last_error());
            DUET_ASSERT(!"the compute stream of a sim device could not be made");
        }
        s->next = devices[index].streams;
        devices[index].streams = s;
        devices[index].compute = s;
    }
    duet__sim_stream *s = devices[index].compute;
    pthread_mutex_unlock(&devices_lock);
    return s;
}

int duet__sim_stream_create(int index, duet__sim_stream **out) {
    *out = NULL;
    if (index < 0 || index >= DUET_SIM_MAX_DEVICES)
        return duet__error(DUET_EDEVICE, "sim stream: sim:%d asked for, sim:0 to sim:%d exist",
                           index, DUET_SIM_MAX_DEVICES - 1);
    (void)duet__sim_compute_stream(index); /* the device's list starts with it */
    DUET_TRY(stream_new(index, out));
    pthread_mutex_lock(&devices_lock);
    (*out)->next = devices[index].streams->next;
    devices[index].streams->next = *out;
    pthread_mutex_unlock(&devices_lock);
    return DUET_OK;
}

void duet__sim_stream_destroy(duet__sim_stream *s) {
    if (s == NULL) return;
    DUET_ASSERT(s != devices[s->index].compute);
    pthread_mutex_lock(&devices_lock);
    for (duet__sim_stream **p = &devices[s->index].streams; *p != NULL; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&devices_lock);
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL); /* runs the queue to its end first */
    pthread_cond_destroy(&s->progress);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int duet__sim_stream_index(const duet__sim_stream *s) { return s->index; }

uint64_t duet__sim_stream_mark(duet__sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    uint64_t m = s->queued;
    pthread_mutex_unlock(&s->lock);
    return m;
}

bool duet__sim_stream_passed(duet__sim_stream *s, uint64_t mark) {
    pthread_mutex_lock(&s->lock);
    bool passed = s->done >= mark;
    pthread_mutex_unlock(&s->lock);
    return passed;
}

int duet__sim_launch(duet__sim_stream *s, const char *op, int (*kernel)(void *ctx), void *ctx,
                     void (*free_ctx)(void *ctx)) {
    task *t = calloc(1, sizeof *t);
    if (t == NULL) {
        if (free_ctx != NULL) free_ctx(ctx);
        return duet__error(DUET_ENOMEM, "%s: out of memory queueing a kernel on sim:%d", op,
                           s->index);
    }
    t->kind = TASK_KERNEL;
    snprintf(t->op, sizeof t->op, "%s", op);
    t->kernel = kernel;
    t->ctx = ctx;
    t->free_ctx = free_ctx;
    duet__sim_count(s->index, DUET__SIM_LAUNCH, 0);
    return enqueue(s, t, NULL);
}

int duet__sim_stream_synchronize(duet__sim_stream *s) {
    duet__sim_count(s->index, DUET__SIM_SYNC, 0);
    return wait_mark(s, duet__sim_stream_mark(s));
}

int duet__sim_synchronize(int index) {
    if (index < 0 || index >= DUET_SIM_MAX_DEVICES)
        return duet__error(DUET_EDEVICE, "synchronize: sim:%d asked for, sim:0 to sim:%d exist",
                           index, DUET_SIM_MAX_DEVICES - 1);
    duet__sim_count(index, DUET__SIM_SYNC, 0);
    int first = DUET_OK;
    pthread_mutex_lock(&devices_lock);
    for (duet__sim_stream *s = devices[index].streams; s != NULL; s = s->next) {
        int rc = wait_mark(s, duet__sim_stream_mark(s));
        if (first == DUET_OK) first = rc;
    }
    pthread_mutex_unlock(&devices_lock);
    /* The first error's message (a later stream's may have replaced it). */
    if (first != DUET_OK) {
        pthread_mutex_lock(&devices_lock);
        for (duet__sim_stream *s = devices[index].streams; s != NULL; s = s->next) {
            pthread_mutex_lock(&s->lock);
            int rc = sticky_error(s);
            pthread_mutex_unlock(&s->lock);
            if (rc != DUET_OK) break;
        }
        pthread_mutex_unlock(&devices_lock);
    }
    return first;
}

void duet__sim_device_reset(int index) {
    DUET_ASSERT(index >= 0 && index < DUET_SIM_MAX_DEVICES);
    pthread_mutex_lock(&devices_lock);
    for (duet__sim_stream *s = devices[index].streams; s != NULL; s = s->next) {
        (void)wait_mark(s, duet__sim_stream_mark(s));
        pthread_mutex_lock(&s->lock);
        s->error = DUET_OK;
        s->error_op[0] = s->error_msg[0] = '\0';
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&devices_lock);
    duet_clear_error();
}

/* ---- events ---------------------------------------------------------------- */

int duet__sim_event_create(duet__sim_event **out) {
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return duet__error(DUET_ENOMEM, "sim: out of memory for an event");
    return DUET_OK;
}

void duet__sim_event_destroy(duet__sim_event *ev) { free(ev); }

int duet__sim_event_record(duet__sim_event *ev, duet__sim_stream *s) {
    ev->stream = s;
    ev->mark = duet__sim_stream_mark(s);
    return DUET_OK;
}

int duet__sim_stream_wait_event(duet__sim_stream *s, duet__sim_event *ev) {
    if (ev->stream == NULL || ev->stream == s) return DUET_OK; /* in order already */
    task *t = calloc(1, sizeof *t);
    if (t == NULL)
        return duet__error(DUET_ENOMEM, "sim:%d: out of memory queueing an event wait",
                           s->index);
    t->kind = TASK_WAIT;
    snprintf(t->op, sizeof t->op, "event wait");
    t->wait_on = ev->stream;
    t->wait_mark = ev->mark;
    return enqueue(s, t, NULL);
}

int duet__sim_event_synchronize(duet__sim_event *ev) {
    if (ev->stream == NULL) return DUET_OK;
    duet__sim_count(ev->stream->index, DUET__SIM_SYNC, 0);
    return wait_mark(ev->stream, ev->mark);
}

bool duet__sim_event_query(duet__sim_event *ev) {
    return ev->stream == NULL || duet__sim_stream_passed(ev->stream, ev->mark);
}

/* ---- copies and fills ------------------------------------------------------ */

typedef struct copy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;

static int copy_kernel(void *arg) {
    copy_ctx *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    return DUET_OK;
}

/* Queues the copy on s (after a wait for the source device's compute
 * stream when it is another sim device); the copy's mark in *mark. */
static int queue_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                      size_t bytes, const char *op, duet__sim_stream *s, uint64_t *mark) {
    bool dst_sim = dst_dev.type == DUET_DEVICE_SIM, src_sim = src_dev.type == DUET_DEVICE_SIM;
    DUET_ASSERT((dst_sim || dst_dev.type == DUET_DEVICE_CPU) &&
                (src_sim || src_dev.type == DUET_DEVICE_CPU));
    if (dst_sim && src_sim && dst_dev.index != src_dev.index) {
        duet__sim_event ev;
        duet__sim_event_record(&ev, duet__sim_compute_stream(src_dev.index));
        DUET_TRY(duet__sim_stream_wait_event(s, &ev));
    }
    copy_ctx *c = malloc(sizeof *c);
    task *t = calloc(1, sizeof *t);
    if (c == NULL || t == NULL) {
        free(c);
        free(t);
        return duet__error(DUET_ENOMEM, "%s: out of memory queueing a copy on sim:%d", op,
                           s->index);
    }
    c->dst = dst_sim ? duet__sim_resolve(dst) : dst;
    c->src = src_sim ? duet__sim_resolve(src) : src;
    c->bytes = bytes;
    t->kind = TASK_KERNEL;
    snprintf(t->op, sizeof t->op, "%s", op);
    t->kernel = copy_kernel;
    t->ctx = c;
    t->free_ctx = free;
    if (dst_sim && src_sim) duet__sim_count(dst_dev.index, DUET__SIM_D2D, bytes);
    else if (dst_sim) duet__sim_count(dst_dev.index, DUET__SIM_H2D, bytes);
    else duet__sim_count(src_dev.index, DUET__SIM_D2H, bytes);
    return enqueue(s, t, mark);
}

int duet__sim_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                   size_t bytes, const char *op) {
    if (bytes == 0) return DUET_OK;
    if (dst_dev.type == DUET_DEVICE_CPU && src_dev.type == DUET_DEVICE_CPU) {
        memcpy(dst, src, bytes);
        return DUET_OK;
    }
    int index = dst_dev.type == DUET_DEVICE_SIM ? dst_dev.index : src_dev.index;
    duet__sim_stream *s = duet__sim_compute_stream(index);
    uint64_t mark = 0;
    DUET_TRY(queue_copy(dst_dev, dst, src_dev, src, bytes, op, s, &mark));
    if (dst_dev.type == DUET_DEVICE_SIM && src_dev.type == DUET_DEVICE_SIM) return DUET_OK;
    /* The host side is read or written by the worker: wait for it. */
    int rc = wait_mark(s, mark);
    return rc == DUET_OK ? DUET_OK : duet__error_context(rc, "%s", op);
}

int duet__sim_copy_async(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                         size_t bytes, const char *op, duet__sim_stream *s) {
    if (bytes == 0) return DUET_OK;
    if (dst_dev.type == DUET_DEVICE_CPU && src_dev.type == DUET_DEVICE_CPU) {
        memcpy(dst, src, bytes);
        return DUET_OK;
    }
    return queue_copy(dst_dev, dst, src_dev, src, bytes, op, s, NULL);
}

typedef struct fill_ctx {
    float *p;
    const float *a, *b;
    size_t n;
    float v;
} fill_ctx;

static int fill_kernel(void *arg) {
    fill_ctx *c = arg;
    for (size_t i = 0; i < c->n; i++) c->p[i] = c->v;
    return DUET_OK;
}

static int add_kernel(void *arg) {
    fill_ctx *c = arg;
    for (size_t i = 0; i < c->n; i++) c->p[i] = c->a[i] + c->b[i];
    return DUET_OK;
}

int duet__sim_fill_f32(int index, float *handle, size_t n, float v, const char *op) {
    if (n == 0) return DUET_OK;
    fill_ctx *c = malloc(sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory queueing a fill", op);
    *c = (fill_ctx){.p = duet__sim_resolve(handle), .n = n, .v = v};
    return duet__sim_launch(duet__sim_compute_stream(index), op, fill_kernel, c, free);
}

int duet__sim_add_f32(int index, float *dst, const float *a, const float *b, size_t n,
                      const char *op) {
    if (n == 0) return DUET_OK;
    fill_ctx *c = malloc(sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory queueing a sum", op);
    *c = (fill_ctx){.p = duet__sim_resolve(dst), .a = duet__sim_resolve(a),
                    .b = duet__sim_resolve(b), .n = n};
    return duet__sim_launch(duet__sim_compute_stream(index), op, add_kernel, c, free);
}
