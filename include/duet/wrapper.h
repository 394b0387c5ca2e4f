/* duet/wrapper.h — MMEditing's DistributedDataParallelWrapper. (The
 * registry that builds models, networks, losses, optimizers and wrappers
 * from a config by type name is in duet/train.h, with the config.)
 *
 * The wrapper walks the model's top-level children (its parts) once: a part
 * with no parameters, or with every parameter frozen (a perceptual loss's
 * VGG), stays as it is; every other part gets a DDP of its own that replaces
 * it in place. The model's train_step, which calls
 * duet_model_part(m, "generator"), then goes through the generator's DDP,
 * and the generator step and the discriminator step each synchronise only
 * their own gradients. (One DDP around the whole GAN cannot work: in the
 * generator step the frozen discriminator's parameters get no gradient and
 * the reduction never finishes. The "DistributedDataParallel" wrapper type
 * does exactly that, to show it.)
 *
 * Usage:
 *
 *   duet_comm *comm = NULL;
 *   DUET_TRY(duet_comm_world(&comm));
 *   duet_wrapper_opts wo = duet_wrapper_opts_default();  // MMEditing's
 *   wo.sync_bn = true;
 *   duet_wrapper *w = NULL;
 *   const char *devices[] = {"cpu"};
 *   DUET_TRY(duet_wrapper_create(model, comm, devices, 1, &wo, &w)); // owns model
 *   duet_log_vars log;
 *   DUET_TRY(duet_wrapper_train_step(w, &batch, optimizers, &log));
 *   duet_wrapper_destroy(w);                              // and the model
 *
 *   // or from a config file (duet/train.h):
 *   DUET_TRY(duet_build_model(cfg, "model", &rng, &model));
 *   DUET_TRY(duet_build_wrapper(cfg, "wrapper", model, comm, &w));
 *   duet_optimizer_set *opts = NULL;
 *   DUET_TRY(duet_build_optimizers(cfg, "optimizers", duet_wrapper_model(w), &opts));
 */
#ifndef DUET_WRAPPER_H
#define DUET_WRAPPER_H

#include "duet/ddp.h"
#include "duet/models.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum duet_wrapper_kind {
    /* One DDP per trainable part (MMEditing's DistributedDataParallelWrapper). */
    DUET_WRAPPER_PER_PART,
    /* One DDP around the whole model (plain DistributedDataParallel): fails
     * with DUET_EUNUSED on a GAN, on purpose. */
    DUET_WRAPPER_WHOLE_MODEL
} duet_wrapper_kind;

typedef struct duet_wrapper_opts {
    duet_wrapper_kind kind;      /* DUET_WRAPPER_PER_PART */
    int dim;                     /* scatter dimension; only 0 (samples) */
    bool broadcast_buffers;      /* false (MMEditing) */
    bool find_unused_parameters; /* false */
    double bucket_cap_mb;        /* 0: the DDP default */
    duet_ddp_hook comm_hook;     /* plain allreduce */
    /* BatchNorm layers of wrapped parts become SyncBatchNorm (statistics
     * and their gradients reduced over comm). */
    bool sync_bn;                /* false */
    const char *trace_path;      /* per-DDP Chrome trace; "%s" = part name; NULL: none */
    /* The device kind when no device_ids are given (ndevices 0): "cpu",
     * "cuda" or "sim"; the index is this process's local rank (for CUDA
     * modulo the GPUs visible), as MMEditing's launcher picks a GPU.
     * Borrowed, read by create only. NULL or "": "cpu". Default: the
     * environment variable DUET_DEVICE (unset: NULL), so that
     * `DUET_DEVICE=sim mpiexec -n 2 duet train ...` runs rank r on sim:r. */
    const char *device;
} duet_wrapper_opts;
duet_wrapper_opts duet_wrapper_opts_default(void);

typedef struct duet_wrapper duet_wrapper;

/* Wraps `model` for data parallelism over comm (collective over comm). The
 * wrapper takes ownership of model, also on failure; comm is borrowed and
 * must outlive it. device_ids: exactly one device per process, as
 * duet_device_parse spells it ("cpu", "cuda:N", "sim:N"; "0" and "cpu:0"
 * are the CPU), or none (ndevices 0, device_ids may be NULL): opts->device's
 * kind at the local rank. DUET_EINVAL names what was given when it is not
 * one device; DUET_EDEVICE when the device cannot hold tensors
 * (duet_device_check). Every parameter and buffer of the model moves to
 * that device (duet_module_to_device) before the parts are wrapped, so
 * optimizers built from duet_wrapper_model afterwards keep their state
 * there. Sets the model's comm (duet_model_set_comm) so that its log values
 * are averaged over ranks. Free with duet_wrapper_destroy. */
int duet_wrapper_create(duet_model *model, duet_comm *comm, const char *const *device_ids,
                        size_t ndevices, const duet_wrapper_opts *opts,
                        duet_wrapper **out);
/* Destroys the wrapper, the model and its DDPs. NULL ok. */
void duet_wrapper_destroy(duet_wrapper *w);

/* The wrapped model (borrowed): its parts are DDPs where wrapped
 * (duet_is_ddp), its state dict names are unchanged. */
duet_model *duet_wrapper_model(duet_wrapper *w);
/* The device of kind `kind` ("cpu", "cuda", "sim"; NULL or "": the CPU) at
 * this process's local rank among the ranks of its node (the launcher's
 * OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID, else the
 * rank modulo the ranks on the node: collective over comm then); for CUDA
 * modulo the GPUs visible. What device_ids default to; `duet test` and
 * `duet infer` put their model there too. DUET_EINVAL names a kind that is
 * not one (or carries an index). Whether the device exists is
 * duet_device_check's question. */
int duet_wrapper_local_device(const char *kind, duet_comm *comm, duet_device *out);
/* This process's device: where the model's tensors live and where
 * forward / train_step / val_step take their inputs (give it to the
 * loader, duet_loader_opts.device, so batches arrive there). */
duet_device duet_wrapper_device(const duet_wrapper *w);
/* Names of the wrapped parts in child order (borrowed), e.g. generator,
 * discriminator. For DUET_WRAPPER_WHOLE_MODEL: one entry, "" (the root). */
size_t duet_wrapper_num_ddps(const duet_wrapper *w);
const char *duet_wrapper_ddp_name(const duet_wrapper *w, size_t i);
/* The DDP module of wrapped entry i (borrowed). */
duet_module *duet_wrapper_ddp(duet_wrapper *w, size_t i);

/* Each scatters its inputs to this process's device (tensors already there,
 * as the CPU's or the loader's: views of the same data; others: one copy
 * each; metadata passed through untouched) and delegates to the model. The
 * outputs stay on the device (duet_tensor_to / duet_tensor_copy_to_host to
 * read them). train_step's log values are averaged over the ranks. */
int duet_wrapper_forward(duet_wrapper *w, duet_tensor *lq, duet_tensor **out);
int duet_wrapper_train_step(duet_wrapper *w, const duet_batch *batch, duet_optimizer_set *opts,
                            duet_log_vars *log);
int duet_wrapper_val_step(duet_wrapper *w, const duet_batch *batch, duet_val_output *out);

/* Bit-identity of every wrapped part across ranks (duet_ddp_check_replicas
 * per DDP). Collective. */
int duet_wrapper_check_replicas(duet_wrapper *w);

#ifdef __cplusplus
}
#endif
#endif
