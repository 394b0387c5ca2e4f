/* The tape: nodes recorded in forward order on a per-thread list, run in
 * reverse by duet_backward. Reverse recording order is a topological order,
 * since an op's inputs exist before it runs. */
#include "duet/autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tape_uses of a tensor whose history a backward freed (it was the output of
 * a node that ran): lets a second backward from it say what happened. Leaves
 * reset the field to 0 whenever a backward counts their uses. */
#define HISTORY_FREED ((int64_t)-1)

typedef struct tape {
    duet_node **nodes;
    size_t count, cap;
    uint64_t epoch;
    bool alloc_failed;
} tape;

static _Thread_local tape the_tape;
static _Thread_local bool grad_disabled;

#define MAX_OBSERVERS 64
static _Thread_local duet_backward_observer observers[MAX_OBSERVERS];
static _Thread_local bool observer_used[MAX_OBSERVERS];

bool duet_set_grad_enabled(bool enabled) {
    bool prev = !grad_disabled;
    grad_disabled = !enabled;
    return prev;
}

bool duet_grad_enabled(void) { return !grad_disabled; }

bool duet_autograd_needs_record(int ninputs, duet_tensor *const *inputs) {
    if (grad_disabled) return false;
    for (int i = 0; i < ninputs; i++)
        if (inputs[i] != NULL && inputs[i]->requires_grad) return true;
    return false;
}

static void free_node(duet_node *n) {
    if (n->free_ctx != NULL) n->free_ctx(n->ctx);
    duet_tensor_release(n->graph_grad);
    for (int i = 0; i < n->ninputs; i++) duet_tensor_release(n->inputs[i]);
    if (n->output != NULL) {
        /* The output outlives its history only through other references;
         * from now on it is a constant. */
        if (n->output->grad_fn == n) {
            n->output->grad_fn = NULL;
            n->output->requires_grad = false;
            n->output->tape_uses = HISTORY_FREED;
            if (n->output->owns_grad) duet__device_free(n->output->device, n->output->grad);
            n->output->grad = NULL;
            n->output->owns_grad = false;
        }
        duet_tensor_release(n->output);
    }
    free(n);
}

int duet_autograd_record(duet_tensor *output, const char *op, duet_backward_fn backward,
                         void *ctx, void (*free_ctx)(void *ctx), int ninputs,
                         duet_tensor *const *inputs) {
    DUET_ASSERT(ninputs >= 0 && ninputs <= DUET_NODE_MAX_INPUTS);
    DUET_ASSERT(output->grad_fn == NULL);
    tape *tp = &the_tape;
    if (tp->count == tp->cap) {
        size_t cap = tp->cap ? tp->cap * 2 : 256;
        duet_node **nodes = realloc(tp->nodes, cap * sizeof *nodes);
        if (nodes == NULL) {
            if (free_ctx != NULL) free_ctx(ctx);
            return duet__error(DUET_ENOMEM, "autograd: out of memory growing the tape");
        }
        tp->nodes = nodes;
        tp->cap = cap;
    }
    duet_node *n = calloc(1, sizeof *n);
    if (n == NULL) {
        if (free_ctx != NULL) free_ctx(ctx);
        return duet__error(DUET_ENOMEM, "autograd: out of memory recording %s", op);
    }
    n->op = op;
    n->backward = backward;
    n->ctx = ctx;
    n->free_ctx = free_ctx;
    n->ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) n->inputs[i] = duet_tensor_retain(inputs[i]);
    n->output = duet_tensor_retain(output);
    output->grad_fn = n;
    output->requires_grad = true;
    tp->nodes[tp->count++] = n;
    return DUET_OK;
}

bool duet_node_input_needs_grad(const duet_node *node, int i) {
    const duet_tensor *in = node->inputs[i];
    return in != NULL && in->requires_grad;
}

float *duet_node_input_grad(duet_node *node, int i) {
    if (!duet_node_input_needs_grad(node, i)) return NULL;
    duet_tensor *in = node->inputs[i];
    if (duet_tensor_ensure_grad(in) != DUET_OK) {
        the_tape.alloc_failed = true;
        return NULL;
    }
    return in->grad;
}

void duet_tape_clear(void) {
    tape *tp = &the_tape;
    /* Newest first, so that an output is let go before the nodes that made
     * its inputs. */
    for (size_t i = tp->count; i-- > 0;)
        if (tp->nodes[i] != NULL) free_node(tp->nodes[i]);
    tp->count = 0;
    if (tp->cap > 4096) {
        free(tp->nodes);
        tp->nodes = NULL;
        tp->cap = 0;
    }
}

size_t duet_tape_size(void) { return the_tape.count; }

static bool is_tracked_leaf(const duet_tensor *t) {
    return t != NULL && t->grad_fn == NULL && t->requires_grad;
}

/* Frees the nodes marked with epoch (those a backward ran), newest first as
 * duet_tape_clear does, and keeps the others in recording order. */
static void tape_drop_marked(uint64_t epoch) {
    tape *tp = &the_tape;
    for (size_t i = tp->count; i-- > 0;)
        if (tp->nodes[i] != NULL && tp->nodes[i]->mark == epoch) {
            free_node(tp->nodes[i]);
            tp->nodes[i] = NULL;
        }
    size_t kept = 0;
    for (size_t i = 0; i < tp->count; i++)
        if (tp->nodes[i] != NULL) tp->nodes[kept++] = tp->nodes[i];
    tp->count = kept;
}

/* ---- saved values ------------------------------------------------------------
 * A node retains its inputs and its output, which keeps the tensors (their
 * gradients, their grad_fn links) alive; but many backwards never read some
 * of those values: a convolution's dx needs the weight and not the input, a
 * max pool keeps its argmax, relu a bit mask. node_reads says which values a
 * node's backward reads, so that duet_autograd_release can free the others
 * right after forward, as PyTorch saves only what each backward needs. */

#define SLOT_OUTPUT (-1)

static bool op_is(const duet_node *n, const char *name) { return strcmp(n->op, name) == 0; }

static bool input_wants_grad(const duet_node *n, int i) {
    return i < n->ninputs && duet_node_input_needs_grad(n, i);
}

/* Whether n's backward reads the values of input `slot` (SLOT_OUTPUT: of its
 * output), given which inputs need a gradient now. The output's answer is
 * the op's own (duet_autograd_mark_output_unread, through
 * duet__op_output_unread in src/ops/ops_internal.h; the in-place ops rely on
 * it too); the inputs' answers mirror the backwards in
 * src/ops/ and must change with them. An op not listed reads every input
 * (never wrong, only less lean). */
static bool node_reads(const duet_node *n, int slot) {
    if (slot == SLOT_OUTPUT) return !n->output_unread;
    /* dX = W^T dY needs W; dW = dY X^T needs X; db needs neither. */
    if (op_is(n, "conv2d") || op_is(n, "linear"))
        return (slot == 0 && input_wants_grad(n, 1)) || (slot == 1 && input_wants_grad(n, 0));
    /* Shapes, constants in the op's context, an argmax or a bit mask. */
    static const char *const reads_no_input[] = {
        "relu",    "leaky_relu", "max_pool2d", "pixel_shuffle", "add",
        "sub",     "scale",      "reshape",    "flatten",       "sigmoid",
        "tanh",    "upsample_bilinear",        "channel_affine", "relu_backward"};
    for (size_t i = 0; i < sizeof reads_no_input / sizeof reads_no_input[0]; i++)
        if (op_is(n, reads_no_input[i])) return false;
    return true; /* batch_norm2d reads x, weight and bias */
}

/* Frees t's values when only the tape holds t and no recorded backward
 * reads them. The struct stays (the tape links and gradients live there);
 * its data pointer becomes NULL, so a mistake in node_reads faults at once
 * instead of reading stale values. */
static void release_unread(duet_tensor *t);

static void drop_if_unread(duet_tensor *t) {
    duet_node *p = t->grad_fn;
    if (p == NULL || p->output != t || t->data == NULL) return;
    if (node_reads(p, SLOT_OUTPUT)) return;
    /* Consumers were recorded after the producer: scan back to it. */
    tape *tp = &the_tape;
    int tape_refs = 1;
    size_t i = tp->count;
    for (; i > 0 && tp->nodes[i - 1] != p; i--) {
        const duet_node *n = tp->nodes[i - 1];
        if (n == NULL) continue;
        for (int k = 0; k < n->ninputs; k++) {
            if (n->inputs[k] != t) continue;
            if (node_reads(n, k)) return;
            tape_refs++;
        }
    }
    if (i == 0 || t->refcount != tape_refs) return; /* held elsewhere (a view, a caller) */
    if (t->base != NULL) {
        /* A view (an in-place op's result): let go of the base, whose own
         * readers decide. */
        duet_tensor *base = t->base;
        t->base = NULL;
        t->data = NULL;
        release_unread(base);
    } else if (t->owns_data) {
        duet__device_free(t->device, t->data);
        t->data = NULL;
        t->owns_data = false;
    }
}

static void release_unread(duet_tensor *t) {
    if (t == NULL) return;
    if (t->refcount == 1) {
        duet_tensor_release(t);
        return;
    }
    duet_tensor_release(t);
    drop_if_unread(t);
}

void duet_autograd_release(duet_tensor *t) { release_unread(t); }

/* A value that n's backward reads was freed after forward: a requires_grad
 * changed between forward and backward, so a gradient that nobody needed
 * then is wanted now. */
static int check_saved_values(const duet_node *n) {
    for (int k = SLOT_OUTPUT; k < n->ninputs; k++) {
        const duet_tensor *t = k == SLOT_OUTPUT ? n->output : n->inputs[k];
        if (t == NULL || t->data != NULL || !node_reads(n, k)) continue;
        char which[32];
        if (k == SLOT_OUTPUT) snprintf(which, sizeof which, "output");
        else snprintf(which, sizeof which, "input %d", k);
        return duet__error(DUET_ESTATE,
                           "backward of %s: the values of its %s were freed after forward, "
                           "when no gradient needed them; a requires_grad changed between "
                           "forward and backward: set it before the forward", n->op, which);
    }
    return DUET_OK;
}

/* ---- DUET_ALLOC_TRACE ------------------------------------------------------- */

static bool trace_on(void) {
    static _Thread_local int on = -1;
    if (on < 0) {
        const char *s = getenv("DUET_ALLOC_TRACE");
        on = s != NULL && s[0] != '\0' && strcmp(s, "0") != 0;
    }
    return on == 1;
}

/* Logs live and peak bytes, and the activations the tape keeps by the op
 * that made them (each buffer once: views count at their base). */
static void trace_tape(const char *when, const char *loss_op) {
    enum { MAX_OPS = 32 };
    const char *ops[MAX_OPS];
    double mb[MAX_OPS];
    int nops = 0;
    double total = 0.0;
    tape *tp = &the_tape;
    for (size_t i = 0; i < tp->count; i++) {
        const duet_node *n = tp->nodes[i];
        if (n == NULL || n->output->data == NULL || !n->output->owns_data) continue;
        double b = (double)n->output->numel * sizeof(float) / 1048576.0;
        total += b;
        int j = 0;
        while (j < nops && strcmp(ops[j], n->op) != 0) j++;
        if (j == nops && nops < MAX_OPS) {
            ops[nops] = n->op;
            mb[nops++] = 0.0;
        }
        if (j < nops) mb[j] += b;
    }
    char line[1024];
    size_t used = 0;
    for (int j = 0; j < nops && used < sizeof line; j++)
        used += (size_t)snprintf(line + used, sizeof line - used, "%s%s %.1f", j ? ", " : "",
                                 ops[j], mb[j]);
    line[used < sizeof line ? used : sizeof line - 1] = '\0';
    size_t live = 0, peak = 0;
    duet_alloc_stats(&live, &peak);
    /* stderr, not the log: an explicit request, whatever the log level. */
    fprintf(stderr,
            "duet alloc trace: %s backward from %s: live %.1f MB, peak %.1f MB since the last "
            "report; %zu nodes keep %.1f MB of op outputs: %s\n",
            when, loss_op, (double)live / 1048576.0, (double)peak / 1048576.0, tp->count, total,
            nops ? line : "none");
    duet_alloc_reset_peak();
}

/* ---- backward --------------------------------------------------------------- */

/* Drops the NULL slots that freed nodes left, keeping recording order. */
static void tape_compact(void) {
    tape *tp = &the_tape;
    size_t kept = 0;
    for (size_t i = 0; i < tp->count; i++)
        if (tp->nodes[i] != NULL) tp->nodes[kept++] = tp->nodes[i];
    tp->count = kept;
}

/* d loss / d loss += 1, where the loss lives (a device loss by a copy each
 * way: one float). */
static int seed_gradient(duet_tensor *loss) {
    if (loss->device.type == DUET_DEVICE_CPU) {
        loss->grad[0] += 1.0f;
        return DUET_OK;
    }
    float g;
    DUET_TRY(duet__device_copy(duet_device_cpu(), &g, loss->device, loss->grad, sizeof g,
                               "backward"));
    g += 1.0f;
    return duet__device_copy(loss->device, loss->grad, duet_device_cpu(), &g, sizeof g,
                             "backward");
}

static int backward_impl(duet_tensor *loss, bool keep_unreached) {
    tape *tp = &the_tape;
    if (loss->numel != 1) {
        char s[DUET_SHAPE_STR_MAX];
        duet_tape_clear();
        return duet__error(DUET_EINVAL, "backward: the loss must have one element, got shape %s",
                           duet_shape_str(loss, s, sizeof s));
    }
    if (loss->grad_fn == NULL && loss->tape_uses == HISTORY_FREED) {
        duet_tape_clear();
        return duet__error(DUET_ESTATE,
                           "backward: trying to backward through the graph a second time: the "
                           "previous backward through this loss freed its history and saved "
                           "tensors as it used them; run the forward again for a new loss");
    }
    if (loss->grad_fn == NULL) {
        duet_tape_clear();
        return duet__error(DUET_EINVAL,
                           "backward: the loss has no recorded history (no input required "
                           "grad, grad mode was off, or the tape was already freed)");
    }
    const bool trace = trace_on();
    const char *loss_op = loss->grad_fn->op;
    if (trace) trace_tape("start of", loss_op);
    uint64_t epoch = ++tp->epoch;
    loss->grad_fn->mark = epoch;
    /* Pass 1: reachability from the loss; reset the leaves' counters. */
    for (size_t i = tp->count; i-- > 0;) {
        duet_node *n = tp->nodes[i];
        if (n->mark != epoch) continue;
        for (int k = 0; k < n->ninputs; k++) {
            duet_tensor *in = n->inputs[k];
            if (in == NULL) continue;
            if (in->grad_fn != NULL) in->grad_fn->mark = epoch;
            else if (in->requires_grad) in->tape_uses = 0;
        }
    }
    /* Pass 2: how many reachable uses each leaf has, so that its ready hook
     * fires after the last one. */
    for (size_t i = 0; i < tp->count; i++) {
        duet_node *n = tp->nodes[i];
        if (n->mark != epoch) continue;
        for (int k = 0; k < n->ninputs; k++)
            if (is_tracked_leaf(n->inputs[k])) n->inputs[k]->tape_uses++;
    }
    int rc = duet_tensor_ensure_grad(loss);
    if (rc == DUET_OK) rc = seed_gradient(loss);
    tp->alloc_failed = false;
    /* Pass 3: run the nodes newest first. Each node is freed as soon as it
     * has run (with its context and its references to saved tensors): no
     * later node reads it, since its consumers ran before it, and each
     * node runs once per pass. What it alone kept goes now, not at the end. */
    for (size_t i = tp->count; i-- > 0 && rc == DUET_OK;) {
        duet_node *n = tp->nodes[i];
        if (n->mark != epoch) continue;
        if (n->output->grad != NULL) {
            rc = check_saved_values(n);
            if (rc == DUET_OK) rc = n->backward(n);
            if (rc == DUET_OK && tp->alloc_failed)
                rc = duet__error(DUET_ENOMEM, "backward: out of memory for gradients in %s",
                                 n->op);
            if (rc != DUET_OK) {
                duet__error_context(rc, "backward of %s", n->op);
                break;
            }
        }
        for (int k = 0; k < n->ninputs; k++) {
            duet_tensor *in = n->inputs[k];
            if (!is_tracked_leaf(in)) continue;
            if (--in->tape_uses == 0 && in->grad_hook != NULL && in->grad != NULL)
                in->grad_hook(in->grad_hook_ctx, in);
        }
        free_node(n);
        tp->nodes[i] = NULL;
        for (int o = 0; o < MAX_OBSERVERS; o++)
            if (observer_used[o] && observers[o].on_progress != NULL)
                observers[o].on_progress(observers[o].ctx);
    }
    tape_compact();
    /* Observers finish (DDP waits for its reductions) even after a failure,
     * so that no peer is left waiting on a collective this rank skipped. */
    for (int o = 0; o < MAX_OBSERVERS; o++) {
        if (!observer_used[o] || observers[o].on_end == NULL) continue;
        int orc = observers[o].on_end(observers[o].ctx);
        if (rc == DUET_OK) rc = orc;
    }
    if (keep_unreached && rc == DUET_OK)
        tape_drop_marked(epoch);
    else
        duet_tape_clear();
    if (trace) trace_tape("end of", loss_op);
    return rc;
}

int duet_backward(duet_tensor *loss) { return backward_impl(loss, false); }

int duet_backward_keep_unreached(duet_tensor *loss) { return backward_impl(loss, true); }

int duet_detach(duet_tensor *t, duet_tensor **out) {
    DUET_TRY(duet_tensor_view(t, t->ndim, t->shape, out));
    (*out)->requires_grad = false;
    return DUET_OK;
}

/* The leaves visit_leaves has reported so far (a short list: one per
 * parameter of a module). */
typedef struct leaf_set {
    duet_tensor **items;
    size_t count, cap;
} leaf_set;

/* Reports leaf once; DUET_ENOMEM when the set cannot grow. */
static int visit_once(leaf_set *seen, duet_tensor *leaf,
                      void (*fn)(void *ctx, duet_tensor *leaf), void *ctx) {
    for (size_t s = 0; s < seen->count; s++)
        if (seen->items[s] == leaf) return DUET_OK;
    if (seen->count == seen->cap) {
        size_t cap = seen->cap ? seen->cap * 2 : 64;
        duet_tensor **grown = realloc(seen->items, cap * sizeof *grown);
        if (grown == NULL)
            return duet__error(DUET_ENOMEM, "autograd: out of memory visiting leaves");
        seen->items = grown;
        seen->cap = cap;
    }
    seen->items[seen->count++] = leaf;
    fn(ctx, leaf);
    return DUET_OK;
}

int duet_autograd_visit_leaves(duet_tensor *const *roots, int nroots,
                               void (*fn)(void *ctx, duet_tensor *leaf), void *ctx) {
    tape *tp = &the_tape;
    uint64_t epoch = ++tp->epoch;
    leaf_set seen = {0};
    int rc = DUET_OK;
    for (int r = 0; r < nroots && rc == DUET_OK; r++) {
        duet_tensor *t = roots[r];
        if (t == NULL) continue;
        if (t->grad_fn != NULL) t->grad_fn->mark = epoch;
        else if (t->requires_grad) rc = visit_once(&seen, t, fn, ctx);
    }
    for (size_t i = tp->count; i-- > 0 && rc == DUET_OK;) {
        duet_node *n = tp->nodes[i];
        if (n->mark != epoch) continue;
        for (int k = 0; k < n->ninputs && rc == DUET_OK; k++) {
            duet_tensor *in = n->inputs[k];
            if (in == NULL) continue;
            if (in->grad_fn != NULL) in->grad_fn->mark = epoch;
            else if (in->requires_grad) rc = visit_once(&seen, in, fn, ctx);
        }
    }
    free(seen.items);
    return rc;
}

int duet_autograd_add_observer(const duet_backward_observer *obs, int *id) {
    for (int o = 0; o < MAX_OBSERVERS; o++) {
        if (observer_used[o]) continue;
        observers[o] = *obs;
        observer_used[o] = true;
        *id = o;
        return DUET_OK;
    }
    return duet__error(DUET_ENOMEM, "autograd: more than %d backward observers", MAX_OBSERVERS);
}

void duet_autograd_remove_observer(int id) {
    if (id >= 0 && id < MAX_OBSERVERS) observer_used[id] = false;
}

/* ---- duet_autograd_grad -------------------------------------------------------
 * A reverse pass over the nodes between the outputs and the inputs, each
 * through its backward in recorded ops. Sums live in node->graph_grad (the
 * gradient of the node's output) and in grads[j] (of the requested inputs);
 * no .grad, hook or observer is touched. */

void duet_autograd_set_graph_backward(duet_tensor *y, duet_graph_backward_fn fn) {
    if (y != NULL && y->grad_fn != NULL && y->grad_fn->output == y) y->grad_fn->graph_backward = fn;
}

static int input_index(const duet_tensor *t, int ninputs, duet_tensor *const *inputs) {
    for (int j = 0; j < ninputs; j++)
        if (inputs[j] == t) return j;
    return -1;
}

/* The sum of two contributions to one gradient, as an op of the tape's own
 * ("grad_sum"; autograd sits below the ops layer): recorded when grad mode
 * is on and either part has history, with both backwards. */
static int grad_sum_backward(duet_node *node) {
    const duet_tensor *y = node->output;
    for (int k = 0; k < 2; k++) {
        float *g = duet_node_input_grad(node, k);
        if (g != NULL)
            DUET_TRY(duet__device_add_f32(y->device, g, g, y->grad, (size_t)y->numel,
                                          "grad_sum backward"));
    }
    return DUET_OK;
}

static int grad_sum_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    (void)node;
    for (int k = 0; k < 2; k++)
        if (want[k]) gx[k] = duet_tensor_retain(gy);
    return DUET_OK;
}

/* *slot += g: g is retained when *slot is empty, else summed into a new
 * tensor that replaces *slot. */
static int accumulate(duet_tensor **slot, duet_tensor *g) {
    if (*slot == NULL) {
        *slot = duet_tensor_retain(g);
        return DUET_OK;
    }
    duet_tensor *a = *slot, *sum = NULL;
    if (a->numel != g->numel || !duet_device_equal(a->device, g->device)) {
        char da[DUET_DEVICE_STR_MAX], dg[DUET_DEVICE_STR_MAX];
        return duet__error(DUET_EINVAL, "autograd grad: summing gradients of %lld elements on "
                           "%s and %lld on %s", (long long)a->numel,
                           duet_device_str(a->device, da, sizeof da), (long long)g->numel,
                           duet_device_str(g->device, dg, sizeof dg));
    }
    if (a->device.type == DUET_DEVICE_CPU)
        DUET_TRY(duet_tensor_create_uninit(a->ndim, a->shape, &sum));
    else
        DUET_TRY(duet_tensor_create_on(a->device, a->ndim, a->shape, &sum));
    int rc = duet__device_add_f32(a->device, sum->data, a->data, g->data, (size_t)a->numel,
                                  "autograd grad");
    if (rc != DUET_OK) {
        duet_tensor_release(sum);
        return rc;
    }
    duet_tensor *ins[2] = {a, g};
    if (duet_autograd_needs_record(2, ins)) {
        rc = duet_autograd_record(sum, "grad_sum", grad_sum_backward, NULL, NULL, 2, ins);
        if (rc != DUET_OK) {
            duet_tensor_release(sum);
            return rc;
        }
        sum->grad_fn->graph_backward = grad_sum_graph;
    }
    duet_tensor_release(*slot);
    *slot = sum;
    return DUET_OK;
}

/* Where a gradient for t goes: the requested input's sum, else the sum of
 * the node that made t when that node leads to an input; NULL: nowhere. */
static duet_tensor **grad_slot(duet_tensor *t, int ninputs, duet_tensor *const *inputs,
                               duet_tensor **grads, uint64_t epoch) {
    int j = input_index(t, ninputs, inputs);
    if (j >= 0) return &grads[j];
    duet_node *p = t->grad_fn;
    if (p != NULL && p->output == t && p->mark == epoch && p->graph_leads) return &p->graph_grad;
    return NULL;
}

static int grad_run(int noutputs, duet_tensor *const *outputs, duet_tensor *const *grad_outputs,
                    int ninputs, duet_tensor *const *inputs, duet_tensor **grads,
                    uint64_t epoch, size_t count) {
    tape *tp = &the_tape;
    /* Seeds: d output = grad_outputs[i] or ones. */
    for (int i = 0; i < noutputs; i++) {
        duet_tensor *t = outputs[i];
        duet_tensor *g = grad_outputs != NULL ? grad_outputs[i] : NULL;
        if (g != NULL && g->numel != t->numel) {
            char st[DUET_SHAPE_STR_MAX], sg[DUET_SHAPE_STR_MAX];
            return duet__error(DUET_ESHAPE, "autograd grad: grad_outputs[%d] %s does not match "
                               "outputs[%d] %s", i, duet_shape_str(g, sg, sizeof sg), i,
                               duet_shape_str(t, st, sizeof st));
        }
        duet_tensor **slot = grad_slot(t, ninputs, inputs, grads, epoch);
        if (slot == NULL) continue;
        duet_tensor *ones = NULL;
        if (g == NULL) {
            DUET_TRY(duet_tensor_create_on(t->device, t->ndim, t->shape, &ones));
            int rc = duet_tensor_fill(ones, 1.0f);
            if (rc != DUET_OK) {
                duet_tensor_release(ones);
                return rc;
            }
            g = ones;
        }
        int rc = accumulate(slot, g);
        duet_tensor_release(ones);
        DUET_TRY(rc);
    }
    /* Newest first over the nodes that existed; what this pass records goes
     * after them and is not visited. */
    for (size_t i = count; i-- > 0;) {
        duet_node *n = tp->nodes[i];
        if (n == NULL || n->mark != epoch || !n->graph_leads) continue;
        int self = input_index(n->output, ninputs, inputs);
        duet_tensor *gy = self >= 0 ? grads[self] : n->graph_grad;
        if (gy == NULL) continue;
        if (n->graph_backward == NULL)
            return duet__error(DUET_EUNSUPPORTED,
                               "autograd grad: op %s has no backward in recorded ops, so no "
                               "gradient (create_graph or not) can pass through it", n->op);
        bool want[DUET_NODE_MAX_INPUTS] = {false};
        duet_tensor *gx[DUET_NODE_MAX_INPUTS] = {NULL};
        for (int k = 0; k < n->ninputs; k++)
            want[k] = n->inputs[k] != NULL &&
                      grad_slot(n->inputs[k], ninputs, inputs, grads, epoch) != NULL;
        for (int k = SLOT_OUTPUT; k < n->ninputs; k++) {
            const duet_tensor *t = k == SLOT_OUTPUT ? n->output : n->inputs[k];
            /* The backwards in recorded ops read what the fused ones read. */
            if (t != NULL && t->data == NULL && node_reads(n, k))
                return duet__error(DUET_ESTATE, "autograd grad: the values op %s saved were "
                                   "freed after forward (duet_autograd_release)", n->op);
        }
        int rc = n->graph_backward(n, gy, want, gx);
        if (rc != DUET_OK) {
            for (int k = 0; k < n->ninputs; k++) duet_tensor_release(gx[k]);
            return duet__error_context(rc, "autograd grad through %s", n->op);
        }
        for (int k = 0; k < n->ninputs; k++) {
            if (gx[k] == NULL) continue;
            duet_tensor **slot = want[k] ? grad_slot(n->inputs[k], ninputs, inputs, grads, epoch)
                                         : NULL;
            if (rc == DUET_OK && slot != NULL) rc = accumulate(slot, gx[k]);
            duet_tensor_release(gx[k]);
        }
        DUET_TRY(rc);
        /* The node's own sum is spent (a requested input keeps grads[j]). */
        duet_tensor_release(n->graph_grad);
        n->graph_grad = NULL;
    }
    return DUET_OK;
}

int duet_autograd_grad(int noutputs, duet_tensor *const *outputs,
                       duet_tensor *const *grad_outputs, int ninputs, duet_tensor *const *inputs,
                       bool create_graph, duet_tensor **grads) {
    DUET_ASSERT(noutputs >= 1 && ninputs >= 1 && outputs != NULL && inputs != NULL &&
                grads != NULL);
    for (int j = 0; j < ninputs; j++) grads[j] = NULL;
    for (int j = 0; j < ninputs; j++)
        if (inputs[j] == NULL || !inputs[j]->requires_grad)
            return duet__error(DUET_EINVAL, "autograd grad: inputs[%d] does not require grad; "
                               "set requires_grad before the forward", j);
    tape *tp = &the_tape;
    const uint64_t epoch = ++tp->epoch;
    const size_t count = tp->count;
    bool any = false;
    for (int i = 0; i < noutputs; i++) {
        duet_tensor *t = outputs[i];
        DUET_ASSERT(t != NULL);
        if (t->grad_fn != NULL) {
            t->grad_fn->mark = epoch;
            any = true;
        } else if (input_index(t, ninputs, inputs) >= 0) {
            any = true;
        }
    }
    if (!any)
        return duet__error(DUET_EINVAL, "autograd grad: no output has recorded history (no "
                           "input required grad, grad mode was off, or a backward freed it)");
    /* Reachable from the outputs, newest first. */
    for (size_t i = count; i-- > 0;) {
        duet_node *n = tp->nodes[i];
        n->graph_leads = false;
        if (n->mark != epoch) continue;
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] != NULL && n->inputs[k]->grad_fn != NULL)
                n->inputs[k]->grad_fn->mark = epoch;
    }
    /* Of those, the ones an input reaches, oldest first. */
    for (size_t i = 0; i < count; i++) {
        duet_node *n = tp->nodes[i];
        if (n->mark != epoch) continue;
        for (int k = 0; k < n->ninputs && !n->graph_leads; k++) {
            duet_tensor *in = n->inputs[k];
            if (in == NULL) continue;
            n->graph_leads = input_index(in, ninputs, inputs) >= 0 ||
                             (in->grad_fn != NULL && in->grad_fn->output == in &&
                              in->grad_fn->graph_leads);
        }
    }
    const bool prev = duet_set_grad_enabled(create_graph);
    int rc = grad_run(noutputs, outputs, grad_outputs, ninputs, inputs, grads, epoch, count);
    duet_set_grad_enabled(prev);
    for (size_t i = 0; i < count; i++) {
        duet_node *n = tp->nodes[i];
        duet_tensor_release(n->graph_grad);
        n->graph_grad = NULL;
        n->graph_leads = false;
    }
    for (int j = 0; j < ninputs && rc == DUET_OK; j++)
        if (grads[j] == NULL)
            rc = duet__error(DUET_EINVAL, "autograd grad: the outputs do not depend on "
                             "inputs[%d] (no recorded path from them to it)", j);
    if (rc != DUET_OK)
        for (int j = 0; j < ninputs; j++) {
            duet_tensor_release(grads[j]);
            grads[j] = NULL;
        }
    return rc;
}

/* ---- hooks and output reads ----------------------------------------------------- */

void duet_autograd_set_grad_hook(duet_tensor *t, duet_grad_hook_fn fn, void *ctx) {
    t->grad_hook = fn;
    t->grad_hook_ctx = fn != NULL ? ctx : NULL;
}

void *duet_autograd_grad_hook_ctx(const duet_tensor *t, duet_grad_hook_fn fn) {
    return fn != NULL && t->grad_hook == fn ? t->grad_hook_ctx : NULL;
}

bool duet_autograd_has_grad_hook(const duet_tensor *t) { return t->grad_hook != NULL; }

void duet_autograd_mark_output_unread(duet_tensor *y) {
    if (y != NULL && y->grad_fn != NULL && y->grad_fn->output == y)
        y->grad_fn->output_unread = true;
}

bool duet_autograd_output_unread(const duet_tensor *y) {
    return y->grad_fn != NULL && y->grad_fn->output == y && y->grad_fn->output_unread;
}
