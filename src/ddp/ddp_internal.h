/* Private to src/ddp: the DDP's state, shared by its files (ddp.c: creation,
 * forward, buckets and synchronisation; ddp_check.c: cross-rank agreement on
 * the module and on replica contents; ddp_trace.c: the Chrome trace). */
#ifndef DUET_DDP_INTERNAL_H
#define DUET_DDP_INTERNAL_H

#include "duet/autograd.h"
#include "duet/ddp.h"

typedef struct ddp_state ddp_state;

/* One tracked parameter. */
typedef struct ddp_slot {
    ddp_state *ddp;     /* back pointer for the grad hook */
    size_t index;       /* tracked index (registration order) */
    char *name;         /* dotted name inside the wrapped module, owned */
    duet_tensor *param; /* retained */
    size_t offset;      /* float offset of its gradient in the buffer */
    size_t bucket;
    bool ready;         /* marked in the current pass */
    bool reachable;     /* find_unused: reached from an armed forward's output */
} ddp_slot;

typedef struct ddp_bucket {
    size_t offset, count;  /* float slice of the gradient buffer */
    size_t first, nparams; /* buffer-order range of its parameters */
    size_t pending;        /* parameters not ready yet in this pass */
    bool launched, done;
    duet_comm_request *req;
    double t_launch;
} ddp_bucket;

typedef struct ddp_trace_event {
    const char *name; /* static string */
    int64_t arg;      /* bucket index, or -1 */
    int tid;          /* 0 compute, 1 communication */
    double t0, t1;    /* seconds, duet_time_now() */
} ddp_trace_event;

struct ddp_state {
    duet_module *self;  /* the DDP module */
    duet_module *inner; /* the wrapped module (also child "module") */
    char *name;         /* for messages */
    duet_comm *user_comm;
    duet_comm *comm; /* private dup: bucket reductions, broadcasts */
    duet_comm *ctl;  /* private dup: end-of-backward agreement */
    int rank, size;
    duet_ddp_opts opts; /* name/trace_path pointers cleared (copies below) */

    size_t ntracked;
    ddp_slot *slots;   /* registration order */
    size_t *order;     /* buffer order j -> tracked index */
    float *grad;       /* contiguous gradient buffer, buffer order */
    size_t grad_count; /* floats */
    uint16_t *staging; /* compressed copy for the fp16/bf16 hooks */
    size_t nbuckets;
    ddp_bucket *buckets;

    duet_named_tensors buffers; /* for broadcast_buffers */

    int observer_id;
    bool observer_added;

    /* Per pass. */
    bool no_sync;
    bool armed;
    bool unused_marked; /* find_unused: unreachable ones marked this pass */
    size_t nready;
    size_t next_launch;    /* buckets started in order: [0, next_launch) */
    size_t next_complete;  /* buckets completed: [0, next_complete) */
    int pass_error;        /* a local error in this pass (marked twice, MPI) */
    /* A tracked parameter got a gradient while the DDP was not armed and not
     * in no_sync (a forward went around the DDP): its index + 1, 0 if none.
     * Reported by the end of that backward (finalize). */
    size_t stray;
    char *pass_error_msg;
    double t_arm, t_backward0;

    /* Sticky: an unfinished reduction or a failed synchronisation makes
     * every later armed forward fail with this status and message. */
    int sticky_error;
    char *sticky_msg;

    duet_ddp_stats stats;

    /* Trace. */
    char *trace_path; /* rank already substituted */
    ddp_trace_event *events;
    size_t nevents, cap_events;
    bool trace_full;
    double trace_origin; /* duet_time_now() at trace start: ts 0 */
};

/* ddp.c */
ddp_state *duet__ddp_state(duet_module *m);

/* ddp_check.c */
/* Every rank compares its module's description (names, shapes,
 * requires_grad of parameters and buffers) with every other's; on
 * disagreement all ranks return DUET_EMISMATCH with the same message. */
int duet__ddp_verify_module(ddp_state *d, const duet_named_tensors *params,
                            const duet_named_tensors *buffers);
uint64_t duet__hash_bytes(uint64_t h, const void *data, size_t n);

/* ddp_trace.c */
void duet__ddp_trace_add(ddp_state *d, const char *name, int64_t arg, int tid, double t0,
                         double t1);
int duet__ddp_trace_init(ddp_state *d, const char *path);
void duet__ddp_trace_free(ddp_state *d);
int duet__ddp_trace_flush(ddp_state *d);

/* ---- the end-of-backward agreement (ddp.c) ---------------------------------
 * Each rank sends how many buckets it started and how many parameters were
 * ready, and whether it failed; one allreduce with MAX gives the largest and
 * (as the largest of the negations) the smallest of each. Integers, so any
 * count is exact: floats would round counts above 2^24. */
#define DUET__DDP_AGREE_LEN 5
typedef struct duet__ddp_agreement {
    size_t max_started, min_started, max_ready, min_ready;
    bool any_error;
} duet__ddp_agreement;
void duet__ddp_agree_encode(int64_t v[DUET__DDP_AGREE_LEN], size_t started, size_t ready,
                            bool failed);
/* v after the MAX allreduce. */
duet__ddp_agreement duet__ddp_agree_decode(const int64_t v[DUET__DDP_AGREE_LEN]);

#endif
