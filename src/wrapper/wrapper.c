/* MMEditing's DistributedDataParallelWrapper
 * (mmedit/core/distributed_wrapper.py): one DDP per trainable top-level
 * part of a model, inputs scattered to the process's one device, forward /
 * train_step / val_step delegated to the model. Also the plain
 * DistributedDataParallel around a whole model, for contrast. */
#include "duet/wrapper.h"
#include "duet/comm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct duet_wrapper {
    duet_model *model;
    duet_comm *comm;
    duet_device device;  /* this process's one device: parameters, buffers, inputs */
    duet_wrapper_opts opts;
    size_t nddps;
    char **names;        /* owned */
    duet_module **ddps;  /* borrowed from the model */
};

duet_wrapper_opts duet_wrapper_opts_default(void) {
    return (duet_wrapper_opts){.kind = DUET_WRAPPER_PER_PART,
                               .dim = 0,
                               .broadcast_buffers = false,
                               .find_unused_parameters = false,
                               .bucket_cap_mb = 0.0,
                               .comm_hook = DUET_DDP_HOOK_ALLREDUCE,
                               .sync_bn = false,
                               .trace_path = NULL,
                               .device = getenv("DUET_DEVICE")};
}

/* This process's rank among the ranks of its node: what the launcher says
 * (Open MPI, MPICH/Hydra, Slurm), else rank mod the ranks on this node
 * (ranks placed node by node). Collective over comm in the second case. */
static int local_rank(duet_comm *comm, int *out) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v == NULL || *v == '\0') continue;
        char *end = NULL;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno == 0 && *end == '\0' && n >= 0 && n < 1 << 20) {
            *out = (int)n;
            return DUET_OK;
        }
    }
    int local = 1;
    DUET_TRY(duet_comm_local_size(comm, &local));
    *out = duet_comm_rank(comm) % (local > 0 ? local : 1);
    return DUET_OK;
}

int duet_wrapper_local_device(const char *kind, duet_comm *comm, duet_device *out) {
    *out = duet_device_cpu();
    if (kind == NULL || kind[0] == '\0') return DUET_OK;
    duet_device d;
    int rc = duet_device_parse(kind, &d);
    if (rc != DUET_OK || strchr(kind, ':') != NULL)
        return duet__error(DUET_EINVAL, "device kind '%s' (wrapper.device, DUET_DEVICE): "
                           "write cpu, cuda or sim (the index is the local rank)", kind);
    if (d.type != DUET_DEVICE_CPU) {
        int lr = 0;
        DUET_TRY(local_rank(comm, &lr));
        d.index = lr;
        if (d.type == DUET_DEVICE_CUDA && duet_cuda_device_count() > 0)
            d.index = lr % duet_cuda_device_count();
    }
    *out = d;
    return DUET_OK;
}

/* MMEditing asserts len(device_ids) == 1: one process per device. No
 * device_ids (n 0): opts' device kind at the local rank. */
static int resolve_device(const char *const *ids, size_t n, const duet_wrapper_opts *o,
                          duet_comm *comm, duet_device *out) {
    *out = duet_device_cpu();
    if (n == 0) {
        DUET_TRY(duet_wrapper_local_device(o->device, comm, out));
    } else if (n != 1) {
        duet__str list = {0};
        for (size_t i = 0; i < n; i++)
            duet__str_add_item(&list, ", ", "'%s'", ids[i] != NULL ? ids[i] : "(null)");
        int rc = duet__error(DUET_EINVAL,
                             "DistributedDataParallelWrapper supports exactly one device per "
                             "process; device_ids must have length 1, got %zu [%s]. Start one "
                             "process per device (mpiexec -n <devices>)", n, duet__str_get(&list));
        duet__str_free(&list);
        return rc;
    } else {
        /* "0" and "cpu:0" stay the CPU, as device ids were read before
         * devices existed. */
        const char *id = ids[0] != NULL ? ids[0] : "";
        if (strcmp(id, "0") != 0 && strcmp(id, "cpu:0") != 0) {
            int rc = duet_device_parse(id, out);
            if (rc != DUET_OK)
                return duet__error_context(rc, "DistributedDataParallelWrapper: device_ids");
        }
    }
    char d[DUET_DEVICE_STR_MAX];
    int rc = duet_device_check(*out);
    if (rc != DUET_OK)
        return duet__error_context(rc, "DistributedDataParallelWrapper: device %s",
                                   duet_device_str(*out, d, sizeof d));
    return DUET_OK;
}

static int add_entry(duet_wrapper *w, const char *name, duet_module *ddp) {
    char **names = realloc(w->names, (w->nddps + 1) * sizeof *names);
    if (names != NULL) w->names = names;
    duet_module **ddps = realloc(w->ddps, (w->nddps + 1) * sizeof *ddps);
    if (ddps != NULL) w->ddps = ddps;
    char *n = duet__strdup(name);
    if (names == NULL || ddps == NULL || n == NULL) {
        free(n);
        return duet__error(DUET_ENOMEM, "wrapper: out of memory");
    }
    w->names[w->nddps] = n;
    w->ddps[w->nddps] = ddp;
    w->nddps++;
    return DUET_OK;
}

/* DDP options for one part; trace receives the part's trace path (free
 * with duet__str_free). */
static duet_ddp_opts ddp_opts_for(const duet_wrapper_opts *o, const char *name, duet__str *trace) {
    duet_ddp_opts d = duet_ddp_opts_default();
    d.broadcast_buffers = o->broadcast_buffers;
    d.find_unused_parameters = o->find_unused_parameters;
    if (o->bucket_cap_mb > 0.0) d.bucket_cap_mb = o->bucket_cap_mb;
    d.comm_hook = o->comm_hook;
    d.name = name[0] != '\0' ? name : NULL;
    if (o->trace_path != NULL && o->trace_path[0] != '\0') {
        const char *s = strstr(o->trace_path, "%s");
        const char *part = name[0] != '\0' ? name : "model";
        if (s != NULL)
            duet__str_addf(trace, "%.*s%s%s", (int)(s - o->trace_path), o->trace_path, part, s + 2);
        else
            duet__str_addf(trace, "%s.%s", o->trace_path, part);
        d.trace_path = duet__str_get(trace);
    }
    return d;
}

/* Wraps one part of the model in a DDP (unless it has nothing to train). */
static int wrap_part(duet_wrapper *w, duet_module *root, const char *name, duet_module *part) {
    /* Parts with nothing to train (the losses, a frozen VGG) are only
     * "moved to the device", which on the CPU is nothing to do. */
    if (duet_module_num_parameters(part, true) == 0) {
        duet_log(DUET_LOG_DEBUG, "wrapper: %s has no trainable parameters; not wrapped", name);
        return DUET_OK;
    }
    if (w->opts.sync_bn) {
        int rc = duet_convert_sync_batchnorm(part, w->comm);
        if (rc != DUET_OK) return duet__error_context(rc, "wrapper: sync_bn on %s", name);
    }
    duet__str trace = {0};
    duet_ddp_opts d = ddp_opts_for(&w->opts, name, &trace);
    duet_module *ddp = NULL;
    int rc = trace.failed ? duet__error(DUET_ENOMEM, "wrapper: out of memory")
                          : duet_ddp_wrap_child(root, name, w->comm, &d, &ddp);
    duet__str_free(&trace);
    if (rc != DUET_OK) return duet__error_context(rc, "wrapper: wrapping %s", name);
    return add_entry(w, name, ddp);
}

static int wrap_parts(duet_wrapper *w) {
    duet_module *root = duet_model_module(w->model);
    for (size_t i = 0; i < duet_module_child_count(root); i++) {
        /* A copy: wrapping replaces the child, and its name with it. */
        char *name = duet__strdup(duet_module_child_name_at(root, i));
        if (name == NULL) return duet__error(DUET_ENOMEM, "wrapper: out of memory");
        int rc = wrap_part(w, root, name, duet_module_child_at(root, i));
        free(name);
        DUET_TRY(rc);
    }
    return DUET_OK;
}

static int wrap_whole(duet_wrapper *w) {
    duet_module *root = duet_model_module(w->model);
    if (w->opts.sync_bn) {
        int rc = duet_convert_sync_batchnorm(root, w->comm);
        if (rc != DUET_OK) return duet__error_context(rc, "wrapper: sync_bn");
    }
    duet__str trace = {0};
    duet_ddp_opts d = ddp_opts_for(&w->opts, "", &trace);
    d.name = duet_model_type_name(w->model);
    duet_module *ddp = NULL;
    int rc = trace.failed ? duet__error(DUET_ENOMEM, "wrapper: out of memory")
                          : duet_ddp_create(root, w->comm, &d, &ddp);
    duet__str_free(&trace);
    /* The DDP owns the root from now on, also when creation failed (it
     * destroyed it then). */
    duet_model_set_outer(w->model, rc == DUET_OK ? ddp : NULL);
    DUET_TRY(rc);
    return add_entry(w, "", ddp);
}

int duet_wrapper_create(duet_model *model, duet_comm *comm, const char *const *device_ids,
                        size_t ndevices, const duet_wrapper_opts *opts,
                        duet_wrapper **out) {
    *out = NULL;
    DUET_ASSERT(model != NULL);
    duet_wrapper_opts o = opts != NULL ? *opts : duet_wrapper_opts_default();
    duet_device dev = duet_device_cpu();
    int rc = comm != NULL ? resolve_device(device_ids, ndevices, &o, comm, &dev)
                          : duet__error(DUET_EINVAL, "wrapper: no process group (comm is NULL)");
    if (rc == DUET_OK && o.dim != 0)
        rc = duet__error(DUET_EUNSUPPORTED, "wrapper: scatter along dim %d; only dim 0 (the "
                         "samples) is supported", o.dim);
    duet_wrapper *w = NULL;
    if (rc == DUET_OK) {
        w = calloc(1, sizeof *w);
        if (w == NULL) rc = duet__error(DUET_ENOMEM, "wrapper: out of memory");
    }
    if (rc != DUET_OK) {
        duet_model_destroy(model);
        return rc;
    }
    w->model = model;
    w->comm = comm;
    w->opts = o;
    w->opts.device = NULL; /* borrowed: not kept past create */
    w->device = dev;
    /* MMEditing's model.cuda() before the wrapper: every part (the trainable
     * ones, the losses, an EMA copy) moves to the process's device. */
    rc = duet_module_to_device(duet_model_module(model), dev);
    if (rc != DUET_OK) duet__error_context(rc, "DistributedDataParallelWrapper");
    if (rc == DUET_OK) rc = o.kind == DUET_WRAPPER_WHOLE_MODEL ? wrap_whole(w) : wrap_parts(w);
    /* Not kept past create (the DDPs have their own copies); cleared only
     * now: wrapping reads it (it was cleared before, and no trace was ever
     * written). */
    w->opts.trace_path = NULL;
    if (rc != DUET_OK) {
        duet_wrapper_destroy(w);
        return rc;
    }
    duet_model_set_comm(model, comm);
    *out = w;
    return DUET_OK;
}

void duet_wrapper_destroy(duet_wrapper *w) {
    if (w == NULL) return;
    duet_model_destroy(w->model);
    for (size_t i = 0; i < w->nddps; i++) free(w->names[i]);
    free(w->names);
    free(w->ddps);
    free(w);
}

duet_model *duet_wrapper_model(duet_wrapper *w) { return w->model; }
duet_device duet_wrapper_device(const duet_wrapper *w) { return w->device; }
size_t duet_wrapper_num_ddps(const duet_wrapper *w) { return w->nddps; }

const char *duet_wrapper_ddp_name(const duet_wrapper *w, size_t i) {
    return i < w->nddps ? w->names[i] : NULL;
}

duet_module *duet_wrapper_ddp(duet_wrapper *w, size_t i) {
    return i < w->nddps ? w->ddps[i] : NULL;
}

/* ---- scatter -------------------------------------------------------------------- */

/* t on dev: a view of t when it is there already (the loader copied it),
 * else one copy. */
static int to_device(duet_tensor *t, duet_device dev, duet_tensor **out) {
    if (duet_device_equal(duet_tensor_device(t), dev)) return duet_tensor_view(t, t->ndim, t->shape, out);
    return duet_tensor_to(t, dev, out);
}

/* The batch on this process's device. Tensors there already (on the CPU,
 * or copied by the loader) become views of the same floats, others are
 * copied; the metadata columns are the caller's, untouched (borrowed:
 * release with scatter_release, never duet_batch_clear). */
static int scatter(duet_batch *out, const duet_batch *in, duet_device dev) {
    *out = *in;
    out->tensors = NULL;
    out->ntensors = 0;
    if (in->ntensors == 0) return DUET_OK;
    out->tensors = calloc(in->ntensors, sizeof *out->tensors);
    if (out->tensors == NULL) return duet__error(DUET_ENOMEM, "wrapper: scatter: out of memory");
    for (size_t i = 0; i < in->ntensors; i++) {
        duet_tensor *t = in->tensors[i].tensor, *v = NULL;
        int rc = to_device(t, dev, &v);
        if (rc != DUET_OK) return rc;
        out->tensors[i].name = in->tensors[i].name;
        out->tensors[i].tensor = v;
        out->ntensors++;
    }
    return DUET_OK;
}

static void scatter_release(duet_batch *b) {
    for (size_t i = 0; i < b->ntensors; i++) duet_tensor_release(b->tensors[i].tensor);
    free(b->tensors);
}

int duet_wrapper_forward(duet_wrapper *w, duet_tensor *lq, duet_tensor **out) {
    *out = NULL;
    duet_tensor *v = NULL;
    DUET_TRY(to_device(lq, w->device, &v));
    int rc;
    if (w->opts.kind == DUET_WRAPPER_WHOLE_MODEL)
        rc = duet_module_forward(w->ddps[0], v, out); /* arms the DDP in grad mode */
    else
        rc = duet_model_forward(w->model, v, out);
    duet_tensor_release(v);
    return rc;
}

int duet_wrapper_train_step(duet_wrapper *w, const duet_batch *batch, duet_optimizer_set *opts,
                            duet_log_vars *log) {
    duet_log_vars_clear(log);
    duet_batch local;
    int rc = scatter(&local, batch, w->device);
    /* One DDP around the model sees the whole train_step as its forward
     * (MMCV's MMDistributedDataParallel.train_step): armed once, it then
     * waits in vain for the discriminator's gradients in the generator step. */
    if (rc == DUET_OK && w->opts.kind == DUET_WRAPPER_WHOLE_MODEL)
        rc = duet_ddp_prepare(w->ddps[0], NULL, 0);
    if (rc == DUET_OK) rc = duet_model_train_step(w->model, &local, opts, log);
    scatter_release(&local);
    return rc;
}

int duet_wrapper_val_step(duet_wrapper *w, const duet_batch *batch, duet_val_output *out) {
    duet_batch local;
    int rc = scatter(&local, batch, w->device);
    if (rc == DUET_OK) rc = duet_model_val_step(w->model, &local, out);
    scatter_release(&local);
    return rc;
}

int duet_wrapper_check_replicas(duet_wrapper *w) {
    for (size_t i = 0; i < w->nddps; i++) {
        int rc = duet_ddp_check_replicas(w->ddps[i]);
        if (rc != DUET_OK)
            return duet__error_context(rc, "wrapper: %s", w->names[i][0] ? w->names[i] : "model");
    }
    return DUET_OK;
}
