/* DistributedDataParallel: creation (agreement, broadcast, gradient buffer and
 * buckets), the arming forward, ready hooks that start bucket reductions in
 * order, progress between backward nodes, and the end-of-backward
 * finalization that keeps every rank in step even when something is wrong. */
#include "ddp/ddp_internal.h"

#include <math.h>
#include <string.h>


/* Measured on the target machine (2 ranks, shared-memory transport): see
 * docs/ddp.md. */
#define DDP_DEFAULT_BUCKET_CAP_MB 1.0
#define DDP_DEFAULT_FIRST_BUCKET_MB 1.0
#define MIB (1024.0 * 1024.0)

static int ddp_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out);
static void ddp_destroy_impl(void *impl);

static const duet_module_type ddp_type = {
    .name = "DistributedDataParallel",
    .forward = ddp_forward,
    .destroy = ddp_destroy_impl,
};

duet_ddp_opts duet_ddp_opts_default(void) {
    duet_ddp_opts o;
    memset(&o, 0, sizeof o);
    o.find_unused_parameters = false;
    o.broadcast_buffers = true;
    o.bucket_cap_mb = DDP_DEFAULT_BUCKET_CAP_MB;
    o.first_bucket_cap_mb = DDP_DEFAULT_FIRST_BUCKET_MB;
    o.comm_hook = DUET_DDP_HOOK_ALLREDUCE;
    o.name = NULL;
    o.trace_path = NULL;
    return o;
}

ddp_state *duet__ddp_state(duet_module *m) {
    return m != NULL && duet_module_get_type(m) == &ddp_type ? (ddp_state *)duet_module_impl(m)
                                                             : NULL;
}

bool duet_is_ddp(const duet_module *m) { return m != NULL && duet_module_get_type(m) == &ddp_type; }

/* ---- destruction ------------------------------------------------------------ */

/* Every tracked parameter's gradient-ready hook (defined with the backward
 * machinery below); its ctx is the parameter's slot. */
static void grad_hook(void *ctx, duet_tensor *t);

static void ddp_destroy_impl(void *impl) {
    ddp_state *d = impl;
    if (d == NULL) return;
    if (d->observer_added) duet_autograd_remove_observer(d->observer_id);
    /* Reductions still in flight cannot be cancelled (MPI); they complete
     * only if the peers take part, which they do when they destroy too. */
    for (size_t k = 0; k < d->nbuckets; k++)
        if (d->buckets[k].req != NULL) duet_comm_wait(&d->buckets[k].req);
    if (d->trace_path != NULL) {
        if (duet__ddp_trace_flush(d) != DUET_OK)
            duet_log(DUET_LOG_WARN, "DDP '%s': %s", d->name ? d->name : "?", duet_last_error());
    }
    duet__ddp_trace_free(d);
    for (size_t i = 0; i < d->ntracked; i++) {
        ddp_slot *s = &d->slots[i];
        duet_tensor *p = s->param;
        if (p == NULL) continue;
        if (duet_autograd_grad_hook_ctx(p, grad_hook) == s)
            duet_autograd_set_grad_hook(p, NULL, NULL);
        /* Give the parameter its own gradient storage back, keeping values,
         * so that an unwrapped module still has its gradients. */
        if (d->grad != NULL && p->grad == d->grad + s->offset && duet_tensor_own_grad(p) != DUET_OK)
            p->grad = NULL; /* out of memory: the values are lost, not the pointer kept */
        duet_tensor_release(p);
        free(s->name);
    }
    free(d->slots);
    free(d->order);
    free(d->buckets);
    duet_aligned_free(d->grad);
    duet_aligned_free(d->staging);
    duet_named_tensors_clear(&d->buffers);
    duet_comm_destroy(d->comm);
    duet_comm_destroy(d->ctl);
    free(d->pass_error_msg);
    free(d->sticky_msg);
    free(d->name);
    free(d);
}

/* ---- buckets ------------------------------------------------------------------ */

static int launch(ddp_state *d, size_t k) {
    ddp_bucket *b = &d->buckets[k];
    DUET_ASSERT(!b->launched && k == d->next_launch);
    b->launched = true;
    d->next_launch++;
    b->t_launch = duet_time_now();
    float *g = d->grad + b->offset;
    int rc;
    if (d->opts.comm_hook == DUET_DDP_HOOK_ALLREDUCE) {
        /* The buffer holds the running sum: earlier averaged passes are
         * equal on every rank, so they come back unchanged; no_sync
         * contributions are averaged now. The ring divides each chunk's
         * total once, on its owner (PyTorch divides every rank's copy
         * first; the results differ by rounding only). */
        rc = duet_comm_iallreduce(d->comm, g, b->count, DUET_DTYPE_F32, DUET_REDUCE_AVG, &b->req);
        d->stats.bytes += (int64_t)(b->count * sizeof(float));
    } else {
        /* fp16/bf16_compress_hook: cast, divide in the narrow format, sum in
         * it (rounding after each addition), widen when done. */
        bool half = d->opts.comm_hook == DUET_DDP_HOOK_FP16;
        uint16_t *h = d->staging + b->offset;
        float tmp[256];
        for (size_t i = 0; i < b->count; i += 256) {
            size_t n = b->count - i < 256 ? b->count - i : 256;
            if (half) {
                duet_f32_to_f16(h + i, g + i, n);
                duet_f16_to_f32(tmp, h + i, n);
            } else {
                duet_f32_to_bf16(h + i, g + i, n);
                duet_bf16_to_f32(tmp, h + i, n);
            }
            for (size_t j = 0; j < n; j++) tmp[j] /= (float)d->size;
            if (half) duet_f32_to_f16(h + i, tmp, n);
            else duet_f32_to_bf16(h + i, tmp, n);
        }
        rc = duet_comm_iallreduce(d->comm, h, b->count, half ? DUET_DTYPE_F16 : DUET_DTYPE_BF16,
                                  DUET_REDUCE_SUM, &b->req);
        d->stats.bytes += (int64_t)(b->count * sizeof(uint16_t));
    }
    if (rc == DUET_OK)
        duet_comm_request_set_label(b->req, "DDP '%s' gradient bucket %zu of %zu (%zu parameters, "
                                "%zu floats)", d->name, k, d->nbuckets, b->nparams, b->count);
    return rc;
}

static void complete(ddp_state *d, size_t k) {
    ddp_bucket *b = &d->buckets[k];
    b->done = true;
    if (d->opts.comm_hook == DUET_DDP_HOOK_FP16)
        duet_f16_to_f32(d->grad + b->offset, d->staging + b->offset, b->count);
    else if (d->opts.comm_hook == DUET_DDP_HOOK_BF16)
        duet_bf16_to_f32(d->grad + b->offset, d->staging + b->offset, b->count);
    double t = duet_time_now();
    d->stats.comm_s += t - b->t_launch;
    duet__ddp_trace_add(d, "allreduce", (int64_t)k, 1, b->t_launch, t);
}

/* Records the first local error of this pass (reported by finalize, on
 * every rank). */
static void pass_fail(ddp_state *d, int rc) {
    if (d->pass_error != 0) return;
    d->pass_error = rc;
    d->pass_error_msg = duet__strdup(duet_last_error());
}

/* Starts every complete bucket whose predecessors have started. */
static int launch_ready(ddp_state *d) {
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        int rc = launch(d, d->next_launch);
        if (rc != DUET_OK) {
            duet__error_context(rc, "DDP '%s': starting the reduction of bucket %zu", d->name,
                                d->next_launch - 1);
            pass_fail(d, rc);
            return rc;
        }
    }
    return DUET_OK;
}

/* Advances every bucket in flight (a ring needs its caller to post each
 * next step) and completes those that finished. */
static void progress(ddp_state *d) {
    for (size_t k = d->next_complete; k < d->next_launch; k++) {
        ddp_bucket *b = &d->buckets[k];
        if (b->done) continue;
        bool done = false;
        int rc = duet_comm_test(&b->req, &done);
        if (rc != DUET_OK) {
            b->done = true; /* the request is gone */
            pass_fail(d, rc);
            continue;
        }
        if (done) complete(d, k);
    }
    while (d->next_complete < d->next_launch && d->buckets[d->next_complete].done)
        d->next_complete++;
}

static void set_ready(ddp_state *d, size_t i) {
    ddp_slot *s = &d->slots[i];
    s->ready = true;
    d->nready++;
    d->buckets[s->bucket].pending--;
}

static int mark_ready(ddp_state *d, size_t i) {
    if (!d->armed) return DUET_OK; /* a backward no armed forward asked for */
    if (d->t_backward0 == 0) d->t_backward0 = duet_time_now();
    if (d->opts.find_unused_parameters && !d->unused_marked) {
        /* PyTorch marks the unreachable parameters ready at the first hook:
         * their slices keep what they hold (a zero contribution). */
        d->unused_marked = true;
        for (size_t j = 0; j < d->ntracked; j++)
            if (!d->slots[j].reachable && !d->slots[j].ready) set_ready(d, j);
    }
    ddp_slot *s = &d->slots[i];
    if (s->ready) {
        int rc = duet__error(
            DUET_ESTATE,
            "DDP '%s': parameter '%s' was marked ready twice in one backward pass. Each tracked "
            "parameter gets its gradient once per synchronised backward; this happens when a "
            "parameter is used outside the DDP's forward, when find_unused_parameters judged it "
            "unused from the forward's output although the loss uses it, or when a hand-driven "
            "DDP marks it twice",
            d->name, s->name);
        pass_fail(d, rc);
        return rc;
    }
    set_ready(d, i);
    return launch_ready(d);
}

static void grad_hook(void *ctx, duet_tensor *t) {
    (void)t;
    ddp_slot *s = ctx;
    ddp_state *d = s->ddp;
    /* A gradient that no armed forward asked for, outside no_sync: the
     * parameter was used by a forward that went around the DDP (MMEditing's
     * get_module(self.generators)['a'](x) calls the wrapped network
     * directly). Its gradient is this rank's own and nothing will average
     * it, so the replicas would drift apart without a word. Remembered
     * here, reported as an error by the end of this backward (finalize). */
    if (!d->armed && !d->no_sync && d->stray == 0) d->stray = s->index + 1;
    mark_ready(d, s->index); /* errors are kept for finalize */
}

/* Resets the per-pass state after finalize. */
static void reset_pass(ddp_state *d) {
    for (size_t i = 0; i < d->ntracked; i++) {
        d->slots[i].ready = false;
        d->slots[i].reachable = false;
    }
    for (size_t k = 0; k < d->nbuckets; k++) {
        ddp_bucket *b = &d->buckets[k];
        b->pending = b->nparams;
        b->launched = b->done = false;
        b->req = NULL;
    }
    d->armed = false;
    d->unused_marked = false;
    d->nready = 0;
    d->next_launch = d->next_complete = 0;
    d->pass_error = 0;
    free(d->pass_error_msg);
    d->pass_error_msg = NULL;
    d->t_backward0 = 0;
}

static void set_sticky(ddp_state *d, int rc, const char *msg) {
    if (d->sticky_error != 0) return;
    d->sticky_error = rc;
    d->sticky_msg = duet__strdup(msg);
}

/* The message for parameters that got no gradient (this rank's view). */
static char *unused_message(ddp_state *d) {
    static const char advice[] =
        ". The reduction could not finish. If these parameters are legitimately unused in some "
        "passes (a branch not taken, or a sub-network trained by a separate step), wrap each "
        "sub-network in its own DDP (DistributedDataParallelWrapper does that for every "
        "top-level child of a model), or create this DDP with find_unused_parameters = true";
    size_t cap = 256 + strlen(d->name) + sizeof advice;
    for (size_t i = 0; i < d->ntracked; i++)
        if (!d->slots[i].ready) cap += strlen(d->slots[i].name) + 2;
    char *m = malloc(cap);
    if (m == NULL) return NULL;
    int n = snprintf(m, cap,
                     "DDP '%s': %zu of %zu parameters got no gradient in the previous backward "
                     "pass on rank %d: ",
                     d->name, d->ntracked - d->nready, d->ntracked, d->rank);
    size_t used = n > 0 ? (size_t)n : 0;
    bool first = true;
    for (size_t i = 0; i < d->ntracked && used < cap; i++) {
        if (d->slots[i].ready) continue;
        n = snprintf(m + used, cap - used, "%s%s", first ? "" : ", ", d->slots[i].name);
        used += n > 0 ? (size_t)n : 0;
        first = false;
    }
    if (used < cap) snprintf(m + used, cap - used, "%s", advice);
    return m;
}

/* Between polls of the end-of-backward agreement: the buckets' rings. */
static int agree_work(void *ctx, bool *progressed) {
    ddp_state *d = ctx;
    size_t before = d->next_complete;
    progress(d);
    *progressed = d->next_complete != before;
    return DUET_OK;
}

/* Whether some tracked parameter requires grad now (the same on every
 * rank: freezing is program logic, not data). */
static bool any_trainable(const ddp_state *d) {
    for (size_t i = 0; i < d->ntracked; i++)
        if (d->slots[i].param->requires_grad) return true;
    return false;
}

/* The end of a backward in which the unarmed DDP got gradients (see
 * grad_hook). Local: every rank runs the same program, so every rank that
 * bypassed the DDP fails here, with no collective to hang in. A DDP that
 * already failed keeps its first error (the cause) for the next forward. */
static int report_stray(ddp_state *d) {
    const char *name = d->slots[d->stray - 1].name;
    d->stray = 0;
    if (d->sticky_error != 0) return DUET_OK;
    int rc = duet__error(
        DUET_ESTATE,
        "DDP '%s': parameter '%s' got a gradient in a backward pass that no forward through "
        "the DDP asked for: a forward of the wrapped module, or of one of its sub-networks, "
        "went around the DDP (as MMEditing's get_module(self.generators)['a'](x) does), so "
        "this rank's gradients would not be averaged across ranks. Forward through the DDP "
        "(duet_module_forward on it, or duet_ddp_forward_child for a sub-network), or turn "
        "on duet_ddp_set_no_sync for deliberate local accumulation",
        d->name, name);
    set_sticky(d, rc, duet_last_error());
    return rc;
}

void duet__ddp_agree_encode(int64_t v[DUET__DDP_AGREE_LEN], size_t started, size_t ready,
                            bool failed) {
    v[0] = (int64_t)started;
    v[1] = -(int64_t)started;
    v[2] = (int64_t)ready;
    v[3] = -(int64_t)ready;
    v[4] = failed ? 1 : 0;
}

duet__ddp_agreement duet__ddp_agree_decode(const int64_t v[DUET__DDP_AGREE_LEN]) {
    return (duet__ddp_agreement){.max_started = (size_t)v[0],
                                 .min_started = (size_t)-v[1],
                                 .max_ready = (size_t)v[2],
                                 .min_ready = (size_t)-v[3],
                                 .any_error = v[4] != 0};
}

/* Agrees with every rank, on the control channel (it does not order
 * against the buckets' reductions), on how many buckets each started, how
 * many parameters were ready and whether one failed (ddp_internal.h); keeps
 * the buckets' rings moving meanwhile. On failure the pass is over. */
static int agree(ddp_state *d, duet__ddp_agreement *out) {
    int64_t v[DUET__DDP_AGREE_LEN];
    duet__ddp_agree_encode(v, d->next_launch, d->nready, d->pass_error != 0);
    duet_comm_request *req = NULL;
    int rc = duet_comm_iallreduce(d->ctl, v, DUET__DDP_AGREE_LEN, DUET_DTYPE_I64, DUET_REDUCE_MAX,
                                  &req);
    /* While the slowest rank gets here, keep the buckets' rings moving,
     * under the watchdog (backing off while nothing moves). */
    if (rc == DUET_OK) {
        duet_comm_request_set_label(req, "DDP '%s' end-of-backward agreement (%zu of %zu "
                                    "buckets started here)", d->name, d->next_launch, d->nbuckets);
        rc = duet_comm_wait_working(&req, agree_work, d);
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "DDP '%s': end-of-backward agreement", d->name);
        set_sticky(d, rc, duet_last_error());
        /* Without agreement the safest is to finish what this rank started
         * (after a timeout these waits fail at once). */
        for (size_t k = d->next_complete; k < d->next_launch; k++) duet_comm_wait(&d->buckets[k].req);
        reset_pass(d);
        return rc;
    }
    *out = duet__ddp_agree_decode(v);
    return DUET_OK;
}

/* Starts, with the data at hand, the buckets some peer started (so that
 * nobody waits forever on a reduction this rank skipped), then completes
 * every bucket in flight. */
static void finish_buckets(ddp_state *d, size_t max_started) {
    int rc = DUET_OK;
    while (rc == DUET_OK && d->next_launch < max_started) {
        rc = launch(d, d->next_launch);
        if (rc != DUET_OK) pass_fail(d, rc);
    }
    for (size_t k = d->next_complete; k < d->next_launch; k++) {
        if (d->buckets[k].done) continue;
        int wrc = duet_comm_wait(&d->buckets[k].req);
        if (wrc != DUET_OK) {
            d->buckets[k].done = true;
            pass_fail(d, wrc);
            continue;
        }
        complete(d, k);
    }
    d->next_complete = d->next_launch;
}

/* What the agreed pass means for this DDP: an error (sticky, so that the
 * next forward repeats it), a completed synchronisation, a frozen module's
 * no-op, a half-reduced module (sticky DUET_EUNUSED for the next forward),
 * or, with *stay_armed, a backward that did not reach the module. */
static int judge_pass(ddp_state *d, const duet__ddp_agreement *a, double t0, bool *stay_armed) {
    *stay_armed = false;
    int rc = DUET_OK;
    if (d->pass_error != 0) {
        rc = duet__error(d->pass_error, "%s", d->pass_error_msg ? d->pass_error_msg : "?");
        set_sticky(d, rc, duet_last_error());
    } else if (a->any_error) {
        rc = duet__error(DUET_ESTATE,
                         "DDP '%s': another rank failed during this backward pass's gradient "
                         "synchronisation (its log says why); the gradients are not usable",
                         d->name);
        set_sticky(d, rc, duet_last_error());
    } else if (a->max_started != a->min_started) {
        rc = duet__error(DUET_EMISMATCH,
                         "DDP '%s': the ranks disagree on which parameters got a gradient in this "
                         "backward pass (between %zu and %zu of %zu parameters were ready; %zu on "
                         "rank %d). Every rank must run the same graph through a DDP; with "
                         "data-dependent branches use find_unused_parameters = true",
                         d->name, a->min_ready, a->max_ready, d->ntracked,
                         d->nready, d->rank);
        set_sticky(d, rc, duet_last_error());
    } else if (a->max_ready == 0 && any_trainable(d)) {
        /* No tracked parameter got a gradient on any rank although some
         * could: this backward did not reach the module (Pix2Pix's
         * discriminator backward on a detached fake, between the
         * generator's forward and its backward). Stay armed for the
         * backward that does: PyTorch's reducer, too, finalizes in the
         * backward where its hooks fire. A frozen module (every parameter
         * requires_grad false, SRGAN's discriminator in the generator step)
         * is done with this pass, as below. */
        *stay_armed = true;
    } else if (a->max_ready == 0) {
        /* A frozen module's pass: nothing to do. */
    } else if (a->min_ready == d->ntracked) {
        d->stats.syncs++;
        d->stats.backward_s += t0 - d->t_backward0;
    } else {
        /* Unfinished: the backward itself succeeds, as in PyTorch; the next
         * armed forward reports it. */
        char *msg = unused_message(d);
        if (msg == NULL) {
            set_sticky(d, DUET_EUNUSED, "DDP: parameters got no gradient (out of memory for "
                                        "the details)");
        } else {
            set_sticky(d, DUET_EUNUSED, msg);
            free(msg);
        }
    }
    return rc;
}

/* The end of an armed backward: agree with the other ranks, finish the
 * buckets, judge the pass, trace it and disarm (unless it did not reach
 * the module). */
static int finalize(ddp_state *d) {
    if (!d->armed) return d->stray != 0 ? report_stray(d) : DUET_OK;
    double t0 = duet_time_now();
    duet__ddp_agreement a;
    DUET_TRY(agree(d, &a));
    finish_buckets(d, a.max_started);
    double t1 = duet_time_now();
    bool stay_armed = false;
    int rc = judge_pass(d, &a, t0, &stay_armed);
    if (stay_armed) {
        duet__ddp_trace_add(d, "finalize", -1, 1, t0, t1);
        return DUET_OK;
    }
    if (d->t_backward0 > 0) duet__ddp_trace_add(d, "backward", -1, 0, d->t_backward0, t0);
    duet__ddp_trace_add(d, "finalize", -1, 1, t0, t1);
    d->stats.exposed_s += duet_time_now() - t0;
    reset_pass(d);
    return rc;
}

static void on_progress(void *ctx) {
    ddp_state *d = ctx;
    if (d->armed && d->next_complete < d->next_launch) progress(d);
}

static int on_end(void *ctx) { return finalize(ctx); }

/* ---- arming ------------------------------------------------------------------- */

static int broadcast_buffers(ddp_state *d) {
    size_t total = 0;
    for (size_t i = 0; i < d->buffers.count; i++) total += (size_t)d->buffers.items[i].tensor->numel;
    if (total == 0) return DUET_OK;
    float *pack = malloc(total * sizeof *pack);
    if (pack == NULL) return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for buffers", d->name);
    size_t off = 0;
    if (d->rank == 0) {
        for (size_t i = 0; i < d->buffers.count; i++) {
            duet_tensor *t = d->buffers.items[i].tensor;
            memcpy(pack + off, t->data, (size_t)t->numel * sizeof(float));
            off += (size_t)t->numel;
        }
    }
    int rc = duet_comm_bcast(d->comm, pack, total, DUET_DTYPE_F32, 0);
    if (rc == DUET_OK && d->rank != 0) {
        for (size_t i = 0; i < d->buffers.count; i++) {
            duet_tensor *t = d->buffers.items[i].tensor;
            memcpy(t->data, pack + off, (size_t)t->numel * sizeof(float));
            off += (size_t)t->numel;
        }
    }
    free(pack);
    if (rc != DUET_OK) duet__error_context(rc, "DDP '%s': broadcasting buffers", d->name);
    return rc;
}

static void visit_reachable(void *ctx, duet_tensor *leaf) {
    ddp_state *d = ctx;
    ddp_slot *s = duet_autograd_grad_hook_ctx(leaf, grad_hook);
    if (s != NULL && s->ddp == d) s->reachable = true;
}

static int arm(ddp_state *d) {
    if (d->sticky_error != 0) return duet__error(d->sticky_error, "%s", d->sticky_msg);
    if (d->armed && d->nready > 0)
        return duet__error(DUET_ESTATE,
                           "DDP '%s': a new forward started before the previous backward pass "
                           "was finalized (%zu of %zu parameters marked ready)",
                           d->name, d->nready, d->ntracked);
    if (d->opts.broadcast_buffers && d->size > 1) DUET_TRY(broadcast_buffers(d));
    if (!d->armed) d->t_arm = duet_time_now();
    /* Several armed forwards before one backward (D(real) + D(fake) in one
     * loss) keep the union of what they reached. */
    d->armed = true;
    return DUET_OK;
}

static int find_reachable(ddp_state *d, duet_tensor *const *roots, int nroots) {
    if (!d->opts.find_unused_parameters || nroots == 0) return DUET_OK;
    return duet_autograd_visit_leaves(roots, nroots, visit_reachable, d);
}

/* target: the wrapped module or one of its children. */
static int forward_through(ddp_state *d, duet_module *target, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    *out = NULL;
    if (d->inner == NULL)
        return duet__error(DUET_ESTATE, "DDP '%s' has no wrapped module", d->name);
    double t0 = duet_time_now();
    bool armed = duet_grad_enabled() && !d->no_sync;
    if (armed) DUET_TRY(arm(d));
    int rc = duet_module_forwardn(target, nin, in, out);
    if (rc == DUET_OK && armed) rc = find_reachable(d, out, 1);
    if (rc != DUET_OK) {
        duet_tensor_release(*out);
        *out = NULL;
        return rc;
    }
    duet__ddp_trace_add(d, "forward", armed ? 1 : 0, 0, t0, duet_time_now());
    return DUET_OK;
}

static int ddp_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    ddp_state *d = duet_module_impl(self);
    return forward_through(d, d->inner, nin, in, out);
}

int duet_ddp_forward_child(duet_module *ddp, const char *child, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    *out = NULL;
    ddp_state *d = duet__ddp_state(ddp);
    if (d == NULL)
        return duet__error(DUET_EINVAL, "duet_ddp_forward_child: the module is not a "
                           "DistributedDataParallel");
    duet_module *target = d->inner != NULL ? duet_module_child(d->inner, child) : NULL;
    if (target == NULL)
        return duet__error(DUET_ENOTFOUND, "DDP '%s': the wrapped module has no child '%s'",
                           d->name, child != NULL ? child : "(null)");
    return forward_through(d, target, nin, in, out);
}

/* ---- creation ------------------------------------------------------------------ */

static int check_opts(const duet_ddp_opts *o) {
    if (!(o->bucket_cap_mb > 0) || !isfinite(o->bucket_cap_mb))
        return duet__error(DUET_EINVAL, "DDP: bucket_cap_mb must be positive, got %g",
                           o->bucket_cap_mb);
    if (!(o->first_bucket_cap_mb > 0) || !isfinite(o->first_bucket_cap_mb))
        return duet__error(DUET_EINVAL, "DDP: first_bucket_cap_mb must be positive, got %g",
                           o->first_bucket_cap_mb);
    if ((unsigned)o->comm_hook > DUET_DDP_HOOK_BF16)
        return duet__error(DUET_EINVAL, "DDP: unknown comm_hook %d", (int)o->comm_hook);
    return DUET_OK;
}

/* Broadcasts every parameter and buffer from rank 0, packed in one message. */
static int broadcast_state(ddp_state *d, const duet_named_tensors *params) {
    if (d->size == 1) return DUET_OK;
    size_t total = 0;
    for (size_t i = 0; i < params->count; i++) total += (size_t)params->items[i].tensor->numel;
    for (size_t i = 0; i < d->buffers.count; i++) total += (size_t)d->buffers.items[i].tensor->numel;
    if (total == 0) return DUET_OK;
    float *pack = malloc(total * sizeof *pack);
    if (pack == NULL) return duet__error(DUET_ENOMEM, "DDP '%s': out of memory", d->name);
    const duet_named_tensors *lists[2] = {params, &d->buffers};
    size_t off = 0;
    if (d->rank == 0)
        for (int l = 0; l < 2; l++)
            for (size_t i = 0; i < lists[l]->count; i++) {
                duet_tensor *t = lists[l]->items[i].tensor;
                memcpy(pack + off, t->data, (size_t)t->numel * sizeof(float));
                off += (size_t)t->numel;
            }
    int rc = duet_comm_bcast(d->comm, pack, total, DUET_DTYPE_F32, 0);
    off = 0;
    if (rc == DUET_OK && d->rank != 0)
        for (int l = 0; l < 2; l++)
            for (size_t i = 0; i < lists[l]->count; i++) {
                duet_tensor *t = lists[l]->items[i].tensor;
                memcpy(t->data, pack + off, (size_t)t->numel * sizeof(float));
                off += (size_t)t->numel;
            }
    free(pack);
    return rc;
}

/* Tracked parameters, the gradient buffer and the buckets. */
static int build_layout(ddp_state *d, const duet_named_tensors *params) {
    size_t n = 0;
    for (size_t i = 0; i < params->count; i++) n += params->items[i].tensor->requires_grad;
    d->slots = calloc(n ? n : 1, sizeof *d->slots);
    d->order = calloc(n ? n : 1, sizeof *d->order);
    d->buckets = calloc(n ? n : 1, sizeof *d->buckets);
    if (d->slots == NULL || d->order == NULL || d->buckets == NULL)
        return duet__error(DUET_ENOMEM, "DDP '%s': out of memory", d->name);
    for (size_t i = 0; i < params->count; i++) {
        duet_tensor *t = params->items[i].tensor;
        if (!t->requires_grad) continue;
        if (duet_autograd_has_grad_hook(t))
            return duet__error(DUET_EINVAL,
                               "DDP '%s': parameter '%s' already has a gradient-ready hook (is it "
                               "tracked by another DDP, or shared between modules?)",
                               d->name, params->items[i].name);
        for (size_t j = 0; j < d->ntracked; j++)
            if (d->slots[j].param == t)
                return duet__error(DUET_EINVAL,
                                   "DDP '%s': parameters '%s' and '%s' are the same tensor; "
                                   "shared parameters are not supported",
                                   d->name, d->slots[j].name, params->items[i].name);
        ddp_slot *s = &d->slots[d->ntracked];
        s->ddp = d;
        s->index = d->ntracked;
        s->name = duet__strdup(params->items[i].name);
        if (s->name == NULL) return duet__error(DUET_ENOMEM, "DDP '%s': out of memory", d->name);
        s->param = duet_tensor_retain(t);
        d->ntracked++;
    }
    /* Buffer order is reverse registration: the last layers' gradients,
     * which backward produces first, open the buffer. */
    size_t off = 0, k = 0, cur = 0, first = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = n - 1 - j;
        ddp_slot *s = &d->slots[i];
        d->order[j] = i;
        s->offset = off;
        s->bucket = k;
        off += (size_t)s->param->numel;
        cur += (size_t)s->param->numel * sizeof(float);
        double cap = (k == 0 ? d->opts.first_bucket_cap_mb : d->opts.bucket_cap_mb) * MIB;
        if ((double)cur >= cap || j == n - 1) {
            ddp_bucket *b = &d->buckets[k];
            b->first = first;
            b->nparams = j + 1 - first;
            b->pending = b->nparams;
            b->offset = d->slots[d->order[first]].offset;
            b->count = off - b->offset;
            k++;
            first = j + 1;
            cur = 0;
        }
    }
    d->nbuckets = k;
    d->grad_count = off;
    d->grad = duet_aligned_calloc(off * sizeof(float));
    if (d->grad == NULL)
        return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for %zu gradient floats", d->name,
                           off);
    if (d->opts.comm_hook != DUET_DDP_HOOK_ALLREDUCE) {
        d->staging = duet_aligned_calloc(off * sizeof(uint16_t));
        if (d->staging == NULL)
            return duet__error(DUET_ENOMEM, "DDP '%s': out of memory for the compressed buffer",
                               d->name);
    }
    for (size_t i = 0; i < n; i++) {
        ddp_slot *s = &d->slots[i];
        /* Gradients accumulated before wrapping are kept. */
        duet_tensor_set_grad_storage(s->param, d->grad + s->offset);
        duet_autograd_set_grad_hook(s->param, grad_hook, s);
    }
    return DUET_OK;
}

/* A childless DDP around the borrowed `inner`; on failure nothing is owned. */
/* DDP's gradient buckets, broadcasts and replica checks work on host memory
 * so far (issue 31 item 4 makes them device tensors): a module on a device
 * is refused here, naming the first tensor and its device, rather than
 * read through device handles later. */
static int check_host_state(const ddp_state *d, const duet_named_tensors *params,
                            const duet_named_tensors *buffers) {
    const duet_named_tensors *lists[2] = {params, buffers};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->count; i++) {
            duet_device dev = duet_tensor_device(lists[l]->items[i].tensor);
            if (dev.type == DUET_DEVICE_CPU) continue;
            char name[DUET_DEVICE_STR_MAX];
            return duet__error(DUET_EUNSUPPORTED, "DDP '%s': %s %s is on %s, and duet's DDP "
                               "keeps its gradient buckets in host memory so far (device "
                               "buckets are issue 31's next step): train this part on the "
                               "CPU", d->name, l == 0 ? "parameter" : "buffer",
                               lists[l]->items[i].name,
                               duet_device_str(dev, name, sizeof name));
        }
    return DUET_OK;
}

static int ddp_build(duet_module **out, duet_module *inner, duet_comm *comm,
                     const duet_ddp_opts *opts_in, const char *default_name) {
    *out = NULL;
    if (inner == NULL || comm == NULL)
        return duet__error(DUET_EINVAL, "DDP: the module and the comm must not be NULL");
    duet_ddp_opts o = opts_in != NULL ? *opts_in : duet_ddp_opts_default();
    DUET_TRY(check_opts(&o));
    ddp_state *d = calloc(1, sizeof *d);
    if (d == NULL) return duet__error(DUET_ENOMEM, "DDP: out of memory");
    d->inner = inner;
    d->user_comm = comm;
    d->observer_id = -1;
    d->name = duet__strdup(o.name != NULL ? o.name : default_name);
    d->opts = o;
    d->opts.name = NULL;
    d->opts.trace_path = NULL;
    duet_module *m = NULL;
    int rc = duet_module_create(&ddp_type, d, &m); /* owns d from here, also on failure */
    if (rc != DUET_OK) return rc;
    duet_module_set_transparent(m, true);
    d->self = m;
    duet_named_tensors params = {0, NULL};
    if (d->name == NULL) rc = duet__error(DUET_ENOMEM, "DDP: out of memory");
    if (rc == DUET_OK) rc = duet_comm_dup(comm, &d->comm);
    if (rc == DUET_OK) rc = duet_comm_dup(comm, &d->ctl);
    if (rc == DUET_OK) {
        char label[96];
        snprintf(label, sizeof label, "DDP '%.40s' buffers and buckets", d->name);
        duet_comm_set_name(d->comm, label);
        snprintf(label, sizeof label, "DDP '%.40s' end-of-backward agreement", d->name);
        duet_comm_set_name(d->ctl, label);
        d->rank = duet_comm_rank(comm);
        d->size = duet_comm_size(comm);
        rc = duet_module_named_parameters(inner, false, &params);
    }
    if (rc == DUET_OK) rc = duet_module_named_buffers(inner, &d->buffers);
    if (rc == DUET_OK) rc = check_host_state(d, &params, &d->buffers);
    if (rc == DUET_OK) rc = duet__ddp_verify_module(d, &params, &d->buffers);
    if (rc == DUET_OK) rc = broadcast_state(d, &params);
    if (rc == DUET_OK) rc = build_layout(d, &params);
    if (rc == DUET_OK) {
        duet_backward_observer obs = {.on_progress = on_progress, .on_end = on_end, .ctx = d};
        rc = duet_autograd_add_observer(&obs, &d->observer_id);
        d->observer_added = rc == DUET_OK;
    }
    if (rc == DUET_OK && o.trace_path != NULL) rc = duet__ddp_trace_init(d, o.trace_path);
    duet_named_tensors_clear(&params);
    if (rc != DUET_OK) {
        d->inner = NULL;
        duet_module_destroy(m); /* no children yet: inner is untouched */
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet_ddp_create(duet_module *module, duet_comm *comm, const duet_ddp_opts *opts,
                    duet_module **out) {
    *out = NULL;
    duet_module *m = NULL;
    const char *def = module != NULL && duet_module_get_type(module) != NULL
                          ? duet_module_type_name(module)
                          : "module";
    int rc = ddp_build(&m, module, comm, opts, def);
    if (rc != DUET_OK) {
        duet_module_destroy(module);
        return rc;
    }
    rc = duet_module_add_child(m, "module", module); /* destroys module on failure */
    if (rc != DUET_OK) {
        duet__ddp_state(m)->inner = NULL;
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet_ddp_wrap_child(duet_module *parent, const char *child, duet_comm *comm,
                        const duet_ddp_opts *opts, duet_module **ddp) {
    if (ddp != NULL) *ddp = NULL;
    duet_module *inner = parent != NULL && child != NULL ? duet_module_child(parent, child) : NULL;
    if (inner == NULL)
        return duet__error(DUET_ENOTFOUND, "DDP: the module has no child named '%s'",
                           child != NULL ? child : "(null)");
    duet_module *m = NULL;
    DUET_TRY(ddp_build(&m, inner, comm, opts, child));
    duet_module *old = NULL;
    int rc = duet_module_replace_child(parent, child, m, &old);
    if (rc != DUET_OK) {
        duet__ddp_state(m)->inner = NULL;
        duet_module_destroy(m);
        return rc;
    }
    DUET_ASSERT(old == inner);
    rc = duet_module_add_child(m, "module", old);
    if (rc != DUET_OK) {
        duet__ddp_state(m)->inner = NULL; /* add_child destroyed it */
        return duet__error_context(rc, "DDP '%s': the model is unusable", child);
    }
    if (ddp != NULL) *ddp = m;
    return DUET_OK;
}

/* ---- public accessors and hand driving ------------------------------------------ */

duet_module *duet_ddp_inner(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL ? d->inner : NULL;
}

duet_comm *duet_ddp_comm(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL ? d->user_comm : NULL;
}

bool duet_ddp_set_no_sync(duet_module *m, bool no_sync) {
    ddp_state *d = duet__ddp_state(m);
    if (d == NULL) return false;
    bool prev = d->no_sync;
    d->no_sync = no_sync;
    return prev;
}

#define GET_STATE(m)                                                           \
    ddp_state *d = duet__ddp_state(m);                                         \
    if (d == NULL)                                                             \
        return duet__error(DUET_EINVAL, "%s: the module is not a DistributedDataParallel", \
                           __func__)

size_t duet_ddp_num_tracked(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL ? d->ntracked : 0;
}

const char *duet_ddp_tracked_name(duet_module *m, size_t i) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL && i < d->ntracked ? d->slots[i].name : NULL;
}

duet_tensor *duet_ddp_tracked_param(duet_module *m, size_t i) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL && i < d->ntracked ? d->slots[i].param : NULL;
}

int duet_ddp_prepare(duet_module *m, duet_tensor *const *outputs, int noutputs) {
    GET_STATE(m);
    DUET_TRY(arm(d));
    return find_reachable(d, outputs, noutputs);
}

int duet_ddp_mark_ready(duet_module *m, size_t i) {
    GET_STATE(m);
    if (i >= d->ntracked)
        return duet__error(DUET_EINVAL, "DDP '%s': parameter index %zu out of %zu", d->name, i,
                           d->ntracked);
    int rc = mark_ready(d, i);
    if (rc == DUET_OK) progress(d);
    return rc;
}

void duet_ddp_progress(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    if (d != NULL) on_progress(d);
}

int duet_ddp_finalize(duet_module *m) {
    GET_STATE(m);
    return finalize(d);
}

float *duet_ddp_grad_buffer(duet_module *m, size_t *count) {
    ddp_state *d = duet__ddp_state(m);
    if (count != NULL) *count = d != NULL ? d->grad_count : 0;
    return d != NULL ? d->grad : NULL;
}

size_t duet_ddp_num_buckets(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    return d != NULL ? d->nbuckets : 0;
}

int duet_ddp_bucket(duet_module *m, size_t k, size_t *offset, size_t *count, size_t *first,
                    size_t *nparams) {
    GET_STATE(m);
    if (k >= d->nbuckets)
        return duet__error(DUET_EINVAL, "DDP '%s': bucket %zu out of %zu", d->name, k, d->nbuckets);
    const ddp_bucket *b = &d->buckets[k];
    if (offset != NULL) *offset = b->offset;
    if (count != NULL) *count = b->count;
    if (first != NULL) *first = b->first;
    if (nparams != NULL) *nparams = b->nparams;
    return DUET_OK;
}

duet_ddp_stats duet_ddp_get_stats(duet_module *m) {
    ddp_state *d = duet__ddp_state(m);
    duet_ddp_stats s;
    memset(&s, 0, sizeof s);
    return d != NULL ? d->stats : s;
}

int duet_ddp_trace_write(duet_module *m) {
    GET_STATE(m);
    if (d->trace_path == NULL) return DUET_OK;
    return duet__ddp_trace_flush(d);
}
