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
