/* duet/ddp.h — DistributedDataParallel for one module.
 *
 * A DDP is a module (type "DistributedDataParallel", transparent, one child
 * named "module") that keeps the replicas of its child identical across the
 * ranks of a duet_comm:
 *
 * - at creation every rank checks that all ranks hold the same parameters and
 *   buffers (names, shapes, requires_grad); the first difference comes back
 *   as DUET_EMISMATCH on every rank, naming the entry, both shapes and both
 *   ranks. Then parameters and buffers are broadcast from rank 0.
 * - the parameters that require grad at creation are *tracked*. Their
 *   gradients live in one contiguous buffer in reverse registration order
 *   (about the order backward produces them), cut into buckets: a small
 *   first bucket, then slices of about bucket_cap_mb.
 * - a forward with grad mode on (and not in no_sync) *arms* the DDP. In the
 *   following backward each parameter's ready hook marks it; a complete
 *   bucket starts a nonblocking allreduce at once, in bucket order; progress
 *   is driven between backward nodes; at the end of the backward the DDP
 *   waits, and every rank holds the same averaged gradients.
 * - gradients accumulate as in PyTorch: the buffer holds the running sum and
 *   each synchronised backward reduces it, (sum over ranks of grad) / size,
 *   so two synchronised backwards before one step give PyTorch DDP's result,
 *   and after no_sync backwards the next synchronised one averages the
 *   locally accumulated sum.
 * - a backward that gives some but not all tracked parameters a gradient
 *   leaves the reduction unfinished: the next armed forward fails with
 *   DUET_EUNUSED naming the module and the parameters that got none (unless
 *   find_unused_parameters). A backward that gives none of them a gradient
 *   (the discriminator frozen during the generator step) is fine. Ranks that
 *   disagree on what was ready fail the backward with DUET_EMISMATCH, on
 *   every rank, without hanging.
 * - a backward that gives a tracked parameter a gradient although no forward
 *   through the DDP armed it (the wrapped module, or a sub-network of it,
 *   was called directly) and no_sync is off fails with DUET_ESTATE naming
 *   the parameter: that gradient would never be averaged.
 *
 * Collectives: creation, every armed forward (buffer broadcast), every
 * synchronised backward, and duet_ddp_check_replicas must be reached by every
 * rank in the same order (MPI's rule). A DDP must be used on the thread that
 * created it (backward observers are per thread).
 *
 * Usage:
 *
 *   duet_comm *comm = NULL;
 *   DUET_TRY(duet_comm_world(&comm));
 *   duet_ddp_opts o = duet_ddp_opts_default();
 *   o.broadcast_buffers = false;                  // as MMEditing
 *   duet_module *ddp = NULL;
 *   DUET_TRY(duet_ddp_create(net, comm, &o, &ddp)); // ddp owns net now
 *   duet_tensor *y = NULL, *loss = NULL;
 *   DUET_TRY(duet_module_forward(ddp, x, &y));     // arms the DDP
 *   DUET_TRY(duet_mse_loss(y, target, 1.0f, &loss));
 *   DUET_TRY(duet_backward(loss));                 // gradients averaged
 *   DUET_TRY(duet_optimizer_step(opt));
 *   duet_tensor_release(y); duet_tensor_release(loss);
 *
 *   bool prev = duet_ddp_set_no_sync(ddp, true);   // accumulate locally
 *   DUET_TRY(duet_module_forward(ddp, x, &y));     // no communication
 *   DUET_TRY(duet_mse_loss(y, target, 1.0f, &loss));
 *   DUET_TRY(duet_backward(loss));
 *   duet_tensor_release(y); duet_tensor_release(loss);
 *   duet_ddp_set_no_sync(ddp, prev);               // next backward reduces the sum
 *
 *   duet_module_destroy(ddp);                      // destroys net too
 *   duet_comm_destroy(comm);
 */
#ifndef DUET_DDP_H
#define DUET_DDP_H

#include "duet/comm.h"
#include "duet/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a bucket travels (PyTorch's communication hooks): plain float32
 * allreduce, or compressed to IEEE half / bfloat16 (cast, divide by the
 * world size in that format, sum in that format, widen back). */
typedef enum duet_ddp_hook {
    DUET_DDP_HOOK_ALLREDUCE,
    DUET_DDP_HOOK_FP16,
    DUET_DDP_HOOK_BF16
} duet_ddp_hook;

typedef struct duet_ddp_opts {
    /* Parameters not reachable from the forward's output are treated as
     * ready with a zero gradient in the following backward. Default false. */
    bool find_unused_parameters;
    /* Buffers (BatchNorm running stats) are broadcast from rank 0 at every
     * armed forward. Default true (PyTorch); MMEditing sets false. */
    bool broadcast_buffers;
    /* Bucket size cap in MiB (1 MiB = 2^20 bytes of float32 gradient). A
     * parameter larger than the cap gets a bucket of its own. Default 1,
     * chosen by measurement (docs/ddp.md): large enough to reach the
     * allreduce's bandwidth, small enough that most of the communication
     * overlaps the backward. */
    double bucket_cap_mb;
    /* Cap of the first bucket, which holds the last layers' gradients and
     * should start while most of the backward is still to run. Default 1. */
    double first_bucket_cap_mb;
    duet_ddp_hook comm_hook; /* default DUET_DDP_HOOK_ALLREDUCE */
    /* Name used in messages ("discriminator"); NULL: the wrapped module's
     * type name, or the child's name for duet_ddp_wrap_child. Copied. */
    const char *name;
    /* Chrome trace (chrome://tracing, Perfetto) of forward, backward and each
     * bucket's allreduce on this rank, written by duet_ddp_trace_write and at
     * destroy. "%d" in the path is replaced by the rank; without it ".rank<r>"
     * is appended. NULL: no trace. Copied. */
    const char *trace_path;
} duet_ddp_opts;

duet_ddp_opts duet_ddp_opts_default(void);

/* Wraps `module` in a new DDP over `comm` (collective over comm). The DDP
 * takes ownership of module, also on failure (as duet_module_add_child does);
 * comm is borrowed and must outlive the DDP. opts NULL: defaults. Free with
 * duet_module_destroy(*out), which also destroys module and gives its
 * parameters their own gradient storage back. */
int duet_ddp_create(duet_module *module, duet_comm *comm, const duet_ddp_opts *opts,
                    duet_module **out);

/* Puts a DDP in place of parent's child `child` (the names of the parent's
 * state dict do not change: the DDP is transparent). On failure the child
 * stays where it was, unchanged (except DUET_ENOMEM in the very last step,
 * which leaves the parent unusable). *ddp (may be NULL) is the new DDP,
 * borrowed from parent. Collective over comm. */
int duet_ddp_wrap_child(duet_module *parent, const char *child, duet_comm *comm,
                        const duet_ddp_opts *opts, duet_module **ddp);

/* True when m is a DDP made by this file. */
bool duet_is_ddp(const duet_module *m);
/* The wrapped module (borrowed), or NULL when m is not a DDP. */
duet_module *duet_ddp_inner(duet_module *ddp);
/* The comm the DDP was created over (borrowed), or NULL. */
duet_comm *duet_ddp_comm(duet_module *ddp);

/* The forward of the wrapped module's child `child` (a network of a
 * container, as CycleGAN's generators.a), through the DDP: it arms the DDP
 * as a forward of the whole DDP does, so the following backward averages
 * the gradients. (MMEditing reaches around its DDP for this, with
 * get_module(self.generators)['a'](x), and its gradients are never
 * averaged. In duet a backward that gives a tracked parameter a gradient
 * while the DDP is neither armed nor in no_sync fails with DUET_ESTATE
 * naming the DDP and the parameter, and the DDP stays failed.)
 * DUET_ENOTFOUND when the wrapped module has no such child. */
int duet_ddp_forward_child(duet_module *ddp, const char *child, int nin, duet_tensor *const *in,
                           duet_tensor **out);

/* PyTorch's no_sync(): while on, forwards do not arm the DDP and backwards
 * accumulate locally; the first synchronised backward after it reduces the
 * accumulated sum. Returns the previous setting (false for a non-DDP). */
bool duet_ddp_set_no_sync(duet_module *ddp, bool no_sync);

/* Cheap cross-rank check that parameters and buffers are bit-identical (a
 * 64-bit hash per tensor, reduced by min and max). Collective. DUET_EMISMATCH
 * names the first differing tensor, how many differ, and the ranks whose
 * copy differs from rank 0's. */
int duet_ddp_check_replicas(duet_module *ddp);

/* ---- driving a DDP by hand ---------------------------------------------
 * What the forward and the autograd hooks do, for code with its own
 * backward. Tracked parameter i is the i-th parameter that required grad at
 * creation, in registration order (duet_module_named_parameters order). */

size_t duet_ddp_num_tracked(duet_module *ddp);
/* Dotted name inside the wrapped module (borrowed) and the tensor (borrowed). */
const char *duet_ddp_tracked_name(duet_module *ddp, size_t i);
duet_tensor *duet_ddp_tracked_param(duet_module *ddp, size_t i);
/* Arms the DDP as an armed forward does (fails with the pending DUET_EUNUSED
 * error of an unfinished reduction; broadcasts buffers when asked). With
 * find_unused_parameters, `outputs` (may be empty) are the roots from which
 * reachable parameters are found on the tape. Collective. */
int duet_ddp_prepare(duet_module *ddp, duet_tensor *const *outputs, int noutputs);
/* Parameter i's gradient (its slice of the buffer) is final for this pass.
 * Ignored when the DDP is not armed. Marking one twice fails (DUET_ESTATE),
 * and makes duet_ddp_finalize fail on every rank. */
int duet_ddp_mark_ready(duet_module *ddp, size_t i);
/* Drives the reductions in flight (what the backward does between nodes);
 * call it between pieces of a hand-written backward. */
void duet_ddp_progress(duet_module *ddp);
/* End of the backward pass: waits for the started reductions (starting,
 * with the data at hand, any that other ranks started, so nobody hangs) and
 * records whether every tracked parameter was ready. No-op when not armed
 * (but for the DUET_ESTATE of a gradient that came around the DDP, above).
 * Collective for an armed DDP. */
int duet_ddp_finalize(duet_module *ddp);

/* ---- introspection --------------------------------------------------------- */

/* The contiguous gradient buffer (borrowed) and its length in floats. */
float *duet_ddp_grad_buffer(duet_module *ddp, size_t *count);
size_t duet_ddp_num_buckets(duet_module *ddp);
/* Bucket k: float offset and length in the buffer, and its parameters as a
 * range [first, first + nparams) of buffer order (buffer order j is tracked
 * parameter num_tracked - 1 - j). Any pointer may be NULL. */
int duet_ddp_bucket(duet_module *ddp, size_t k, size_t *offset, size_t *count, size_t *first,
                    size_t *nparams);

typedef struct duet_ddp_stats {
    int64_t syncs;        /* synchronised backward passes completed */
    int64_t bytes;        /* bytes handed to allreduce (after compression) */
    double comm_s;        /* sum over buckets of start -> completion seen */
    double exposed_s;     /* time in finalize (waiting after the backward) */
    double backward_s;    /* sum over syncs of first ready mark -> finalize */
} duet_ddp_stats;
/* Zeroed when ddp is not a DDP. */
duet_ddp_stats duet_ddp_get_stats(duet_module *ddp);

/* Writes the trace now (when opts.trace_path was set); keeps recording. */
int duet_ddp_trace_write(duet_module *ddp);

/* ---- SyncBatchNorm ---------------------------------------------------------- */

/* Makes every BatchNorm2d in the module tree compute its batch statistics
 * over all ranks of comm (an allreduce inside forward and backward: every rank
 * must run the same BatchNorm layers). Only forwards with grad mode on are
 * synchronised: a training-mode forward without grad is evaluation (Pix2Pix's
 * and CycleGAN's val_step use test-time batch statistics, MMEditing's
 * forward_test), where each rank evaluates its own share of the images, as
 * many as it has: it uses its own batch's statistics, as one process
 * evaluating that image would, and never waits for the other ranks
 * (PyTorch's SyncBatchNorm synchronises there too, which MMEditing's padded
 * test sampler makes safe). comm is borrowed and must outlive the module. */
int duet_convert_sync_batchnorm(duet_module *module, duet_comm *comm);

#ifdef __cplusplus
}
#endif
#endif
