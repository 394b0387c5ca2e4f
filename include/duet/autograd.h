/* duet/autograd.h — the tape.
 *
 * While grad mode is on, every op whose inputs require grad records a node on
 * this thread's tape. duet_backward(loss) runs the recorded nodes in reverse,
 * accumulates into the gradients of leaves that require grad, fires each
 * leaf's gradient-ready hook once its gradient for this pass is complete, and
 * then frees the whole tape (tensors still held by the caller survive, without
 * history).
 *
 * Usage:
 *
 *   duet_tensor *y = NULL, *loss = NULL;
 *   DUET_TRY(duet_linear(x, w, b, &y));        // w->requires_grad = true
 *   DUET_TRY(duet_mse_loss(y, target, 1.0f, &loss));
 *   DUET_TRY(duet_backward(loss));             // w->grad now holds dloss/dw
 *   duet_tensor_release(y); duet_tensor_release(loss);
 *
 *   bool prev = duet_set_grad_enabled(false);  // a no-grad scope
 *   DUET_TRY(duet_linear(x, w, b, &y));        // records nothing
 *   duet_tensor_release(y);
 *   duet_set_grad_enabled(prev);
 */
#ifndef DUET_AUTOGRAD_H
#define DUET_AUTOGRAD_H

#include "duet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DUET_NODE_MAX_INPUTS 8

struct duet_node;
/* An op's backward: reads node->output->grad (never NULL when called) and
 * accumulates (+=) into the gradient of each input that needs one, through
 * duet_node_input_grad(). Returns a status. */
typedef int (*duet_backward_fn)(struct duet_node *node);
/* An op's backward written in duet ops, for duet_autograd_grad: from the
 * output's gradient gy (a tensor, which may carry history) makes a new
 * tensor gx[i] for each input i with want[i] true (gx[i] NULL: no
 * contribution), through ops that record on the tape when grad mode is on,
 * so that the gradient can be differentiated again. Must not touch any
 * tensor's .grad. Returns a status. */
typedef int (*duet_graph_backward_fn)(struct duet_node *node, struct duet_tensor *gy,
                                      const bool *want, struct duet_tensor **gx);

typedef struct duet_node {
    const char *op;                 /* static name, e.g. "conv2d" */
    duet_backward_fn backward;
    void *ctx;                      /* op's saved state, freed with free_ctx */
    void (*free_ctx)(void *ctx);
    int ninputs;
    duet_tensor *inputs[DUET_NODE_MAX_INPUTS]; /* retained */
    duet_tensor *output;            /* retained */
    /* Set by ops whose backward never reads output->data (conv2d, linear,
     * batch_norm2d, add), so that an in-place op may overwrite the output:
     * written and read through duet_autograd_mark_output_unread and
     * duet_autograd_output_unread. */
    bool output_unread;
    uint64_t mark;                  /* private: reachability pass */
    /* The op's backward in recorded ops (duet_autograd_set_graph_backward);
     * NULL: the op cannot take part in duet_autograd_grad. */
    duet_graph_backward_fn graph_backward;
    struct duet_tensor *graph_grad; /* private: duet_autograd_grad's sum */
    bool graph_leads;               /* private: leads to one of its inputs */
} duet_node;

/* Grad mode is per thread, on by default. Returns the previous mode. */
bool duet_set_grad_enabled(bool enabled);
bool duet_grad_enabled(void);

/* True when grad mode is on and some input requires grad: the op must then
 * call duet_autograd_record(). NULL inputs are skipped. */
bool duet_autograd_needs_record(int ninputs, duet_tensor *const *inputs);
/* Records `output` as produced by an op. Retains output and inputs, sets
 * output->grad_fn and output->requires_grad. Takes ownership of ctx (freed
 * with free_ctx, also on failure). NULL inputs are allowed and skipped. */
int duet_autograd_record(duet_tensor *output, const char *op, duet_backward_fn backward,
                         void *ctx, void (*free_ctx)(void *ctx), int ninputs,
                         duet_tensor *const *inputs);
/* Gradient buffer of input i to accumulate into, allocated zero-filled on
 * first use; NULL when that input needs no gradient (skip the work) or when
 * allocation failed (then duet_node_alloc_failed() is true). */
float *duet_node_input_grad(duet_node *node, int i);
bool duet_node_input_needs_grad(const duet_node *node, int i);

/* Runs backward from a scalar (numel 1) loss with d loss = 1. The loss must
 * have been produced by recorded ops. Each node is freed (its context and
 * its references to saved tensors) right after its backward has run, the
 * rest of the tape afterwards, also on failure. A second backward from the
 * same loss fails with DUET_ESTATE ("trying to backward through the graph a
 * second time"), as PyTorch does without retain_graph. With the environment
 * variable DUET_ALLOC_TRACE=1, every backward logs the live and peak bytes
 * of duet's allocations (duet_alloc_stats) and the op outputs the tape keeps,
 * by op: where a step's memory goes. */
int duet_backward(duet_tensor *loss);

/* As duet_backward, but afterwards frees only the nodes it ran (those loss
 * depends on); the others stay recorded for a later duet_backward. This is
 * PyTorch's behaviour that Pix2Pix needs: the discriminator's backward on a
 * detached fake leaves the generator's graph, through which the generator
 * step backpropagates next. A kept node whose input came from a node this
 * pass freed sees that input as a constant from then on. On failure the
 * whole tape is freed, as duet_backward does. */
int duet_backward_keep_unreached(duet_tensor *loss);

/* Drops the caller's reference to t, as duet_tensor_release, and when the
 * tape's nodes then hold the only references to t and none of their
 * backwards reads t's values (a convolution's input when its weight needs
 * no gradient, a convolution's output, a relu's input: relu keeps a bit
 * mask), frees t's data now rather than when backward ends. The tensor
 * itself stays until backward (its gradient and history live there), with
 * data NULL. For code that built a forward and drops an intermediate it
 * will not read again. NULL is ok. */
void duet_autograd_release(duet_tensor *t);

/* PyTorch's torch.autograd.grad(outputs, inputs, grad_outputs, create_graph,
 * retain_graph=True): grads[j] = sum_i d<outputs[i], grad_outputs[i]>/d
 * inputs[j], new tensors of the inputs' shapes (one reference each for the
 * caller). grad_outputs NULL, or an entry NULL: ones. Every input must
 * require grad (a leaf, or a recorded op's output).
 *
 * Unlike duet_backward it never writes any tensor's .grad, never fires
 * gradient-ready hooks nor backward observers, and frees nothing: the tape
 * stays as it was (PyTorch's retain_graph=True, always), to be run by a
 * later duet_backward or dropped by duet_tape_clear. It runs only the
 * nodes between the outputs and the inputs, each through its backward in
 * recorded ops (duet_graph_backward_fn); an op on that path without one
 * fails with DUET_EUNSUPPORTED naming it.
 *
 * create_graph false: the gradients are constants (computed in no-grad
 * mode). create_graph true: the backward's ops are recorded on the tape, so
 * the gradients carry history through the forward's saved tensors and the
 * parameters; a later duet_backward(loss) with a loss built from them runs
 * through both graphs and fires each parameter's hook (the DDP's) once.
 * An input the outputs do not depend on is DUET_EINVAL naming it (PyTorch's
 * allow_unused=False). On failure every grads[j] is NULL.
 *
 * Usage (a gradient penalty: backward through a gradient):
 *
 *   duet_tensor *h = NULL, *y = NULL, *s = NULL, *g = NULL, *g2 = NULL, *pen = NULL;
 *   DUET_TRY(duet_linear(x, w, b, &h));        // x and w require grad
 *   DUET_TRY(duet_elu(h, 1.0f, &y));
 *   DUET_TRY(duet_sum(y, &s));
 *   DUET_TRY(duet_autograd_grad(1, &s, NULL, 1, &x, true, &g)); // ds/dx, with history
 *   DUET_TRY(duet_mul(g, g, &g2));              // no .grad written so far
 *   DUET_TRY(duet_sum(g2, &pen));
 *   DUET_TRY(duet_backward(pen));              // w->grad = d pen / dw
 *   duet_tensor *ts[] = {h, y, s, g, g2, pen};
 *   for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
 */
int duet_autograd_grad(int noutputs, duet_tensor *const *outputs,
                       duet_tensor *const *grad_outputs, int ninputs, duet_tensor *const *inputs,
                       bool create_graph, duet_tensor **grads);

/* Gives y's node (when y is a recorded op's output) its backward in recorded
 * ops; no-op for NULL or an unrecorded y. Ops call it after recording. */
void duet_autograd_set_graph_backward(duet_tensor *y, duet_graph_backward_fn fn);

/* Drops every recorded node (e.g. after a forward whose result is not
 * backpropagated). Tensors held elsewhere survive without history. */
void duet_tape_clear(void);
size_t duet_tape_size(void);

/* A new tensor sharing t's data, with no history and requires_grad false. */
int duet_detach(duet_tensor *t, duet_tensor **out);

/* Calls fn for each distinct leaf that requires grad and is reachable
 * backwards from the given roots on the current tape. */
int duet_autograd_visit_leaves(duet_tensor *const *roots, int nroots,
                               void (*fn)(void *ctx, duet_tensor *leaf), void *ctx);

/* Observers of backward passes on this thread (DDP uses one): on_progress is
 * called between nodes (to drive communication), on_end after the last node
 * and before the tape is freed; a failing on_end makes duet_backward fail. */
typedef struct duet_backward_observer {
    void (*on_progress)(void *ctx);
    int (*on_end)(void *ctx);
    void *ctx;
} duet_backward_observer;
int duet_autograd_add_observer(const duet_backward_observer *obs, int *id);
void duet_autograd_remove_observer(int id);

/* A leaf's gradient-ready hook (one slot; the DDP's): fn(ctx, t) runs once
 * t's gradient for this backward is final. Setting replaces the hook; fn
 * NULL clears it. Code outside autograd reaches the hook only through these. */
void duet_autograd_set_grad_hook(duet_tensor *t, duet_grad_hook_fn fn, void *ctx);
/* The ctx given with fn when fn is t's hook; NULL otherwise. */
void *duet_autograd_grad_hook_ctx(const duet_tensor *t, duet_grad_hook_fn fn);
bool duet_autograd_has_grad_hook(const duet_tensor *t);

/* For an op whose backward never reads its output's values (conv2d, linear,
 * add, relu, ...): marks y, when it is its node's output, so that the
 * in-place ops may overwrite it and duet_autograd_release may free it. No-op
 * for NULL or an unrecorded y. */
void duet_autograd_mark_output_unread(duet_tensor *y);
/* Whether y is its node's output and that node's backward does not read it. */
bool duet_autograd_output_unread(const duet_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
