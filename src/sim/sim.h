/* The simulated device sim:N's internal header (src/sim/): memory the host
 * cannot reach, streams with a worker thread each, events, counters. The
 * layers that handle device storage include it (base/device.c, tensor,
 * autograd, ops, comm, ddp); everything above reaches sim storage through
 * duet__device_* and the tensor calls. Not installed. The contract between
 * the layers is docs/architecture.md, "The simulated device".
 *
 * Memory. One arena per device, reserved on first use: 2 x DUET_SIM_MEMORY
 * bytes of address space (default 8 GiB each half, MAP_NORESERVE). The
 * lower half is PROT_NONE: allocations hand out addresses there (handles),
 * so a host dereference of a sim tensor's data faults at once. The upper
 * half holds the storage: duet__sim_resolve(h) = h + DUET_SIM_MEMORY, for
 * any address inside an allocation. Only code that runs on a sim stream
 * (a kernel) may touch resolved pointers.
 *
 * Streams. Each device has one compute stream; more come from
 * duet__sim_stream_create. A stream runs its queue in order on its own
 * worker thread, asynchronously from the host. A kernel that fails makes
 * its status sticky on the stream: later kernels are skipped, and every
 * synchronising call (stream or event synchronize, duet_device_synchronize,
 * a blocking copy) returns it, naming the op, until
 * duet__sim_device_reset.
 *
 * Frees are stream-ordered, as CUDA's caching allocator: a block freed on
 * the host is reused by later allocations at once (their work is queued on
 * the compute stream after the work that used the block). A block another
 * stream also uses must be marked with duet__sim_record_stream; after its
 * free it is reused only when that stream has run what it had queued at the
 * free.
 *
 * Environment: DUET_SIM_MEMORY (bytes, with an optional K, M or G suffix;
 * read once, at a device's first allocation), DUET_SIM_SYNC=1 (every launch
 * and asynchronous copy waits until it ran: tells a missing wait from a
 * kernel bug). */
#ifndef DUET_SIM_H
#define DUET_SIM_H

#include "duet/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory (memory.c) ---------------------------------------------------- */

/* bytes on sim:index (rounded up to 512; 0 bytes gets a block too) at
 * *handle; zeroed on the compute stream when zero. `what` names the
 * allocation in DUET_ENOMEM's message ("tensor", "ddp bucket"). Free with
 * duet__sim_free. */
int duet__sim_alloc(int index, size_t bytes, bool zero, const char *what, void **handle);
/* Frees a handle from duet__sim_alloc (NULL: nothing), stream-ordered. */
void duet__sim_free(int index, void *handle);
/* Where the storage of a handle (or of any address inside an allocation)
 * is; NULL for NULL. Asserts that the address is a sim address. */
void *duet__sim_resolve(const void *handle_or_inside);
/* The device index a sim address belongs to, or -1 when it is none. */
int duet__sim_index_of(const void *handle_or_inside);
/* Live, peak (since the last reset) and reserved bytes (live + cached). */
void duet__sim_alloc_stats(int index, size_t *live, size_t *peak, size_t *reserved);
void duet__sim_alloc_reset_peak(int index);

/* ---- streams and events (stream.c) ------------------------------------------ */

typedef struct duet__sim_stream duet__sim_stream;
typedef struct duet__sim_event duet__sim_event;

/* The compute stream of sim:index (made on first use; borrowed, lives as
 * long as the process). index must be 0..DUET_SIM_MAX_DEVICES-1. */
duet__sim_stream *duet__sim_compute_stream(int index);
/* A new stream of sim:index with its own worker; free with
 * duet__sim_stream_destroy (which waits for its queue first). */
int duet__sim_stream_create(int index, duet__sim_stream **out);
void duet__sim_stream_destroy(duet__sim_stream *s);
/* The device index of s. */
int duet__sim_stream_index(const duet__sim_stream *s);

/* Queues kernel(ctx) on s. ctx is owned by the queue from this call on:
 * free_ctx(ctx) runs after the kernel (also when the kernel is skipped
 * because the stream is in error, and when the queueing fails); free_ctx
 * may be NULL. A kernel's non-OK status sticks to the stream with
 * duet_last_error's text from the worker. Returns DUET_OK when queued
 * (with DUET_SIM_SYNC=1: the kernel's own status). */
int duet__sim_launch(duet__sim_stream *s, const char *op, int (*kernel)(void *ctx), void *ctx,
                     void (*free_ctx)(void *ctx));
/* Waits until s ran everything queued; its sticky error, if any. */
int duet__sim_stream_synchronize(duet__sim_stream *s);
/* Every stream of sim:index; the first sticky error among them. */
int duet__sim_synchronize(int index);
/* Waits for every stream of sim:index and clears their sticky errors (for
 * tests that provoke a kernel error). */
void duet__sim_device_reset(int index);

/* An event marks a point in one stream's queue (CUDA's semantics: a wait
 * or a synchronize uses the event's last record at the time of the call;
 * an event never recorded has passed). Free with duet__sim_event_destroy,
 * which does not wait. */
int duet__sim_event_create(duet__sim_event **out);
void duet__sim_event_destroy(duet__sim_event *ev);
/* ev marks what s has queued so far. */
int duet__sim_event_record(duet__sim_event *ev, duet__sim_stream *s);
/* s's later work waits until ev has passed; the host does not block. */
int duet__sim_stream_wait_event(duet__sim_stream *s, duet__sim_event *ev);
/* The host waits until ev has passed; the recording stream's sticky error. */
int duet__sim_event_synchronize(duet__sim_event *ev);
/* Whether ev has passed (no wait). */
bool duet__sim_event_query(duet__sim_event *ev);

/* handle (from duet__sim_alloc) is also used by stream s: after its free,
 * its block is reused only once s has run what it had queued at the free. */
int duet__sim_record_stream(void *handle, duet__sim_stream *s);

/* Within src/sim: the number of tasks s has queued so far (a mark), and
 * whether s has run them (what an event is, without the allocation). */
uint64_t duet__sim_stream_mark(duet__sim_stream *s);
bool duet__sim_stream_passed(duet__sim_stream *s, uint64_t mark);

/* ---- copies and fills (stream.c) --------------------------------------------
 * Host <-> sim and sim <-> sim (host <-> host is memcpy, for callers that
 * dispatch blindly). duet__sim_copy runs on the compute stream of the sim
 * side (the destination's, for sim to sim, after the source's compute
 * stream's queued work): a copy that reads or writes host memory returns
 * when the copy ran (cudaMemcpy), sim to sim returns at once. Counted in
 * duet_sim_stats. duet__sim_copy_async queues on s and never blocks: host
 * memory it reads or writes must stay valid until s has run it (staging
 * buffers of comm). */
int duet__sim_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                   size_t bytes, const char *op);
int duet__sim_copy_async(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                         size_t bytes, const char *op, duet__sim_stream *s);
/* n floats at handle (sim:index) = v, queued on the compute stream. */
int duet__sim_fill_f32(int index, float *handle, size_t n, float v, const char *op);
/* dst[i] = a[i] + b[i] for n floats (sim handles of sim:index; dst may be a
 * or b), queued on the compute stream: the tape's gradient sums. */
int duet__sim_add_f32(int index, float *dst, const float *a, const float *b, size_t n,
                      const char *op);

/* ---- counters (stream.c) -------------------------------------------------- */
/* Bumps a counter of sim:index (duet_sim_stats's fields). */
typedef enum duet__sim_counter {
    DUET__SIM_H2D,
    DUET__SIM_D2H,
    DUET__SIM_D2D,
    DUET__SIM_LAUNCH,
    DUET__SIM_SYNC
} duet__sim_counter;
void duet__sim_count(int index, duet__sim_counter which, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
