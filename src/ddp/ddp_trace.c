/* The DDP's optional Chrome trace: complete ("X") events for forward,
 * backward, each bucket's allreduce and the end-of-backward wait, one file
 * per rank (pid = rank; tid 0 compute, 1 communication), readable by
 * chrome://tracing and Perfetto. */
#include "ddp/ddp_internal.h"

#include <jansson.h>
#include <string.h>

/* A long run keeps at most this many events (the first ones). */
#define TRACE_MAX_EVENTS ((size_t)1 << 20)

int duet__ddp_trace_init(ddp_state *d, const char *path) {
    const char *pct = strstr(path, "%d");
    size_t n = strlen(path) + 32;
    d->trace_path = malloc(n);
    if (d->trace_path == NULL) return duet__error(DUET_ENOMEM, "DDP: out of memory");
    if (pct != NULL)
        snprintf(d->trace_path, n, "%.*s%d%s", (int)(pct - path), path, d->rank, pct + 2);
    else
        snprintf(d->trace_path, n, "%s.rank%d", path, d->rank);
    d->trace_origin = duet_time_now();
    return DUET_OK;
}

void duet__ddp_trace_free(ddp_state *d) {
    free(d->trace_path);
    d->trace_path = NULL;
    free(d->events);
    d->events = NULL;
    d->nevents = d->cap_events = 0;
}

void duet__ddp_trace_add(ddp_state *d, const char *name, int64_t arg, int tid, double t0,
                         double t1) {
    if (d->trace_path == NULL || d->trace_full) return;
    if (d->nevents == d->cap_events) {
        size_t cap = d->cap_events ? d->cap_events * 2 : 256;
        ddp_trace_event *e = cap <= TRACE_MAX_EVENTS ? realloc(d->events, cap * sizeof *e) : NULL;
        if (e == NULL) {
            d->trace_full = true;
            duet_log(DUET_LOG_WARN, "DDP '%s': trace full after %zu events; later ones are dropped",
                     d->name, d->nevents);
            return;
        }
        d->events = e;
        d->cap_events = cap;
    }
    d->events[d->nevents++] = (ddp_trace_event){name, arg, tid, t0, t1};
}

static json_t *meta_event(const char *what, int pid, int tid, const char *name) {
    return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M", "pid", pid, "tid",
                     tid, "args", "name", name);
}

int duet__ddp_trace_flush(ddp_state *d) {
    if (d->trace_path == NULL) return DUET_OK;
    json_t *events = json_array();
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ms");
    if (root == NULL) return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for the trace", d->name);
    char *pname = duet__strf("rank %d (%s)", d->rank, d->name); /* the part's whole name */
    if (pname == NULL) {
        json_decref(root);
        return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for the trace", d->name);
    }
    json_array_append_new(events, meta_event("process_name", d->rank, 0, pname));
    free(pname);
    json_array_append_new(events, meta_event("thread_name", d->rank, 0, "compute"));
    json_array_append_new(events, meta_event("thread_name", d->rank, 1, "communication"));
    for (size_t i = 0; i < d->nevents; i++) {
        const ddp_trace_event *e = &d->events[i];
        char name[64]; /* e->name is one of ddp's literals; arg an integer */
        if (e->arg >= 0 && strcmp(e->name, "allreduce") == 0)
            snprintf(name, sizeof name, "allreduce bucket %lld", (long long)e->arg);
        else
            snprintf(name, sizeof name, "%s", e->name);
        json_t *ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name", name, "cat", "ddp",
                               "ph", "X", "ts", (e->t0 - d->trace_origin) * 1e6, "dur",
                               (e->t1 - e->t0) * 1e6, "pid", d->rank, "tid", e->tid);
        if (ev == NULL || json_array_append_new(events, ev) != 0) {
            json_decref(root);
            return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for the trace", d->name);
        }
    }
    int rc = json_dump_file(root, d->trace_path, JSON_COMPACT);
    json_decref(root);
    if (rc != 0)
        return duet__error(DUET_EIO, "DDP '%s': cannot write the trace file %s", d->name,
                           d->trace_path);
    return DUET_OK;
}
