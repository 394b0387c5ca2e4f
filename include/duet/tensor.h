/* duet/tensor.h — float32 N-d arrays (up to 4-D, NCHW, contiguous) on a
 * device (the CPU, a CUDA GPU or the simulated device sim:N) with reference
 * counting, and safetensors files.
 *
 * Usage:
 *
 *   duet_tensor *x = NULL;
 *   DUET_TRY(duet_tensor_create(4, (int64_t[]){2, 3, 8, 8}, &x));  // or see base.h
 *   x->data[0] = 1.0f;               // contiguous row-major floats (on the CPU)
 *   duet_tensor_release(x);          // frees when the last reference goes
 *
 * Usage, devices (host access to a device tensor is an explicit copy):
 *
 *   duet_tensor *h = NULL, *d = NULL, *back = NULL;
 *   DUET_TRY(duet_tensor_from_data(1, (int64_t[]){3}, (float[]){1, 2, 3}, &h));
 *   duet_device dev;
 *   DUET_TRY(duet_device_parse("sim:0", &dev));     // "cuda:0" on a GPU
 *   DUET_TRY(duet_tensor_to(h, dev, &d));           // a copy on the device
 *   // duet_tensor_host_data(d) == NULL: its data is not host memory
 *   DUET_TRY(duet_tensor_to(d, duet_device_cpu(), &back));
 *   // duet_tensor_host_data(back)[2] == 3.0f
 *   duet_tensor_release(back);
 *   duet_tensor_release(d);
 *   duet_tensor_release(h);
 *
 * Ownership: a function that returns a new tensor gives the caller one
 * reference, to drop with duet_tensor_release(). Tensors that are borrowed
 * (a module's parameters, duet_st_find) say so.
 */
#ifndef DUET_TENSOR_H
#define DUET_TENSOR_H

#include "duet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DUET_MAX_DIMS 4

struct duet_node;
struct duet_tensor;

/* Called by autograd when this tensor's gradient for the current backward
 * pass is complete (see duet/autograd.h). */
typedef void (*duet_grad_hook_fn)(void *ctx, struct duet_tensor *t);

typedef struct duet_tensor {
    int ndim;
    int64_t shape[DUET_MAX_DIMS]; /* unused trailing dims are 1 */
    int64_t numel;
    /* numel floats, contiguous, in the memory of `device`: host code reads
     * it only on the CPU (duet_tensor_host_data says so, NULL otherwise);
     * a device tensor's values reach the host by a copy
     * (duet_tensor_copy_to_host, duet_tensor_to). Ops read it on its device. */
    float *data;
    /* Gradient, same shape and device as data. NULL until backward first
     * writes it. Leaves accumulate across backward passes until zeroed. */
    float *grad;
    bool requires_grad;
    /* Autograd bookkeeping; NULL for leaves. Owned by the tape. */
    struct duet_node *grad_fn;
    /* Fired once per backward when grad is complete (leaves only). */
    duet_grad_hook_fn grad_hook;
    void *grad_hook_ctx;
    /* Private. */
    int refcount;
    bool owns_data;
    bool owns_grad;
    struct duet_tensor *base; /* data owner when this is a view; retained */
    int64_t tape_uses;        /* autograd: pending contributions this pass */
    duet_device device;       /* where data and grad live; read duet_tensor_device */
} duet_tensor;

/* New zero-filled tensor. ndim in 1..4, every dim >= 1 (0 allowed for empty
 * batch-free shapes is not supported). Returns DUET_EINVAL or DUET_ENOMEM. */
int duet_tensor_create(int ndim, const int64_t *shape, duet_tensor **out);
/* Shorthand for 4-D NCHW. */
int duet_tensor_create4(int64_t n, int64_t c, int64_t h, int64_t w, duet_tensor **out);
/* New zero-filled tensor on device `dev` (duet_tensor_create on the CPU).
 * DUET_EDEVICE when dev cannot hold tensors (duet_device_check's message). */
int duet_tensor_create_on(duet_device dev, int ndim, const int64_t *shape, duet_tensor **out);
/* New tensor with the same shape and device as `like`, zero-filled. */
int duet_tensor_create_like(const duet_tensor *like, duet_tensor **out);
/* As duet_tensor_create, but the data is left uninitialised: for an op's
 * output that the op overwrites whole, so that a large activation is not
 * zeroed just before being written. */
int duet_tensor_create_uninit(int ndim, const int64_t *shape, duet_tensor **out);
/* New tensor copying `data` (numel floats). */
int duet_tensor_from_data(int ndim, const int64_t *shape, const float *data, duet_tensor **out);
/* Deep copy of data on t's device (no grad, no autograd history). */
int duet_tensor_clone(const duet_tensor *t, duet_tensor **out);
/* A tensor that shares `t`'s data with another shape of the same numel
 * (retains t). Not recorded by autograd: use duet_reshape in duet/ops.h for
 * that. */
int duet_tensor_view(duet_tensor *t, int ndim, const int64_t *shape, duet_tensor **out);
/* A tensor over samples [start, start+count) of dim 0, sharing data. */
int duet_tensor_slice0(duet_tensor *t, int64_t start, int64_t count, duet_tensor **out);

/* ---- where the data is --------------------------------------------------- */

/* t's device (views share their base's). */
duet_device duet_tensor_device(const duet_tensor *t);
/* t's data when it is on device `dev`, NULL when t lives elsewhere: code
 * that reads storage says where it expects it. */
float *duet_tensor_data_on(duet_tensor *t, duet_device dev);
/* duet_tensor_data_on(t, cpu): the floats host code may read and write. */
float *duet_tensor_host_data(duet_tensor *t);
/* New tensor on `dev` with t's values (always a copy, also on t's own
 * device; no grad, no autograd history). */
int duet_tensor_to(const duet_tensor *t, duet_device dev, duet_tensor **out);
/* t's numel values into host memory dst / from host memory src into t,
 * whatever t's device; returns when dst holds them / src may be reused. */
int duet_tensor_copy_to_host(const duet_tensor *t, float *dst);
int duet_tensor_copy_from_host(duet_tensor *t, const float *src);
/* dst's values = src's (same numel; DUET_ESHAPE names both shapes
 * otherwise), between any two devices. */
int duet_tensor_copy(duet_tensor *dst, const duet_tensor *src);

duet_tensor *duet_tensor_retain(duet_tensor *t);
/* Drops one reference; frees data, grad and the struct at zero. NULL ok. */
void duet_tensor_release(duet_tensor *t);
/* References held on t (creation, duet_tensor_retain, the tape). */
int duet_tensor_refcount(const duet_tensor *t);
/* True when t holds its own data rather than being
 * a view (duet_tensor_view). An in-place op may overwrite such a
 * tensor when nobody else holds it. */
bool duet_tensor_owns_data(const duet_tensor *t);

/* Makes sure t->grad exists (zero-filled on first allocation), on t's
 * device. */
int duet_tensor_ensure_grad(duet_tensor *t);
/* Points t->grad at external storage of numel floats on t's device (not
 * freed by the tensor; used by DDP's contiguous gradient buffer). Existing
 * gradient values are copied into it (on a device, queued on its compute
 * stream), else it is left as is. Fails only when the copy cannot be
 * queued (t keeps its gradient). */
int duet_tensor_set_grad_storage(duet_tensor *t, float *storage);
/* Gives t its own gradient storage again after duet_tensor_set_grad_storage,
 * keeping the values (a DDP unwrapping a module), on t's device. Nothing to
 * do when t owns its gradient or has none. DUET_ENOMEM (t keeps the external
 * storage). */
int duet_tensor_own_grad(duet_tensor *t);
/* Both on t's device; DUET_EDEVICE when a device fill fails (on the CPU
 * they cannot fail). */
int duet_tensor_zero_grad(duet_tensor *t);

int duet_tensor_fill(duet_tensor *t, float v);
bool duet_tensor_same_shape(const duet_tensor *a, const duet_tensor *b);
/* Writes "[2, 3, 8, 8]" into buf; returns buf. */
char *duet_shape_str(const duet_tensor *t, char *buf, size_t size);
#define DUET_SHAPE_STR_MAX 96

/* ---- safetensors ---------------------------------------------------------
 * The Hugging Face format: 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
 * raw little-endian data. Reading converts F32, F16, BF16, F64, I64, I32 and
 * U8 to float32 tensors. */

typedef struct duet_st duet_st;

/* Reads and validates the whole file. Errors name the file and what is
 * wrong. Free with duet_st_destroy. */
int duet_st_load(const char *path, duet_st **out);
void duet_st_destroy(duet_st *st);
size_t duet_st_count(const duet_st *st);
/* Name of tensor i in file order. Borrowed. */
const char *duet_st_name(const duet_st *st, size_t i);
bool duet_st_has(const duet_st *st, const char *name);
/* New float32 tensor with the named entry's values. DUET_ENOTFOUND names the
 * file and the key when absent. */
int duet_st_get(const duet_st *st, const char *name, duet_tensor **out);
/* Copies the named entry into `dst`, on any device, which must have the
 * same shape (DUET_ESHAPE names both shapes otherwise). */
int duet_st_copy_into(const duet_st *st, const char *name, duet_tensor *dst);
/* Raw access for non-float entries (e.g. an I64 step count or U8 blob):
 * dtype string ("F32", "I64", "U8", ...), byte pointer and length (borrowed),
 * number of dimensions and shape. Any output may be NULL; shape, when given,
 * holds DUET_ST_MAX_DIMS values (the most dimensions a file entry may have;
 * a file with more is refused when opened). */
#define DUET_ST_MAX_DIMS 8
int duet_st_raw(const duet_st *st, const char *name, const char **dtype,
                const void **bytes, size_t *nbytes, int *ndim, int64_t *shape);
/* Metadata value, or NULL when absent. Borrowed. */
const char *duet_st_meta(const duet_st *st, const char *key);
/* Checksums: duet_st_writer_save records a 64-bit checksum of every
 * tensor's bytes in the metadata ("checksum/<name>", and
 * "checksum_algorithm" = "duet-h64"); duet_st_load verifies them and fails
 * with DUET_EFORMAT naming the file and the first tensor (in file order)
 * whose bytes changed. Files without them (PyTorch's) load unchecked: this
 * says whether the file had them. */
bool duet_st_has_checksums(const duet_st *st);
/* The path the file was loaded from (borrowed), for messages. */
const char *duet_st_path(const duet_st *st);
/* A view of `st` without the entries whose names start with `prefix` (the
 * metadata is kept), sharing st's data: st must outlive the view. Lets a
 * strict state-dict load ignore a checkpoint's "optimizer." entries. Free
 * with duet_st_destroy. */
int duet_st_view_without(const duet_st *st, const char *prefix, duet_st **out);

typedef struct duet_st_writer duet_st_writer;
int duet_st_writer_create(duet_st_writer **out);
void duet_st_writer_destroy(duet_st_writer *w);
/* Adds a float32 tensor; the data is copied now (from its device: a
 * checkpoint is written from the device). Duplicate names are DUET_EINVAL. */
int duet_st_writer_add(duet_st_writer *w, const char *name, const duet_tensor *t);
/* Adds raw bytes with a dtype string and shape; copied now. */
int duet_st_writer_add_raw(duet_st_writer *w, const char *name, const char *dtype,
                           int ndim, const int64_t *shape, const void *bytes, size_t nbytes);
int duet_st_writer_set_meta(duet_st_writer *w, const char *key, const char *value);
/* Writes atomically: temporary file in the same folder, fsync, rename; with
 * every tensor's checksum in the metadata (see duet_st_has_checksums). */
int duet_st_writer_save(duet_st_writer *w, const char *path);
/* fn(ctx) is called by duet_st_writer_save between pieces of at most 8 MiB
 * of the file, and after its sync: a long write can show it is alive (the
 * runner answers the other ranks' watchdog there). NULL: none. */
void duet_st_writer_set_progress(duet_st_writer *w, void (*fn)(void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif
#endif
