/* duet/comm.h — a process group over an MPI communicator.
 *
 * A duet_comm is a private duplicate of MPI_COMM_WORLD (or of a communicator
 * the host program passes in) with MPI_ERRORS_RETURN set, so that every MPI
 * failure comes back as DUET_EMPI with MPI's own message and the call site in
 * duet_last_error(), never as a silent abort. duet initialises MPI only when
 * nobody has yet, and finalizes only what it initialised. Started without a
 * launcher the world has one process; under mpirun, mpiexec or srun it spans
 * the job.
 *
 * Counts are element counts (not bytes) as size_t; buffers larger than MPI's
 * int are sent in chunks. Every collective must be called by every rank of
 * the communicator in the same order (MPI's rule).
 *
 * Usage:
 *
 *   duet_comm *comm = NULL;
 *   DUET_TRY(duet_comm_world(&comm));                 // MPI_Init if needed
 *   float g[1000];
 *   for (int i = 0; i < 1000; i++) g[i] = (float)i;   // this rank's values
 *   DUET_TRY(duet_comm_allreduce(comm, g, 1000, DUET_DTYPE_F32, DUET_REDUCE_SUM));
 *
 *   duet_comm_request *req = NULL;                     // overlap with work
 *   DUET_TRY(duet_comm_iallreduce(comm, g, 1000, DUET_DTYPE_F32, DUET_REDUCE_SUM, &req));
 *   bool done = false;
 *   while (!done) { do_some_work(); DUET_TRY(duet_comm_test(&req, &done)); }
 *
 *   duet_comm_destroy(comm);
 *   duet_comm_finalize();                              // only if duet initialised MPI
 */
#ifndef DUET_COMM_H
#define DUET_COMM_H

#include <mpi.h>

#include "duet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types on the wire. F16 (IEEE half) and BF16 are summed (and
 * max/min'ed) by user-defined MPI operations that widen to float32, combine,
 * and round to nearest even. */
typedef enum duet_dtype {
    DUET_DTYPE_F32,
    DUET_DTYPE_F64,
    DUET_DTYPE_F16,
    DUET_DTYPE_BF16,
    DUET_DTYPE_I32,
    DUET_DTYPE_I64,
    DUET_DTYPE_U64,
    DUET_DTYPE_U8
} duet_dtype;

/* Bytes per element of a dtype. */
size_t duet_dtype_size(duet_dtype dt);

/* AVG is the sum divided by the number of ranks (floating types only), the
 * division done once on the reduced values. */
typedef enum duet_reduce_op {
    DUET_REDUCE_SUM,
    DUET_REDUCE_MAX,
    DUET_REDUCE_MIN,
    DUET_REDUCE_AVG
} duet_reduce_op;

typedef struct duet_comm duet_comm;
typedef struct duet_comm_request duet_comm_request;

/* Initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) unless it already
 * is; argc/argv may be NULL. Called by duet_comm_world, so calling it is
 * optional. Fails (DUET_ESTATE) after MPI_Finalize. */
int duet_comm_init(int *argc, char ***argv);
/* True when duet_comm_init (or duet_comm_world) called MPI_Init. */
bool duet_comm_initialised_mpi(void);
/* Calls MPI_Finalize when duet initialised MPI and MPI is not finalized yet;
 * otherwise does nothing (the host program owns MPI). Destroy every comm
 * first. */
int duet_comm_finalize(void);

/* A process group spanning the job (a duplicate of MPI_COMM_WORLD). Collective
 * over MPI_COMM_WORLD. Free with duet_comm_destroy. */
int duet_comm_world(duet_comm **out);
/* A process group over the host's communicator (duplicated: duet's traffic
 * never mixes with the host's, and the host's error handler is untouched).
 * MPI must be initialised. Collective over `comm`. Free with
 * duet_comm_destroy. */
int duet_comm_create(MPI_Comm comm, duet_comm **out);
/* A new process group over the same processes (an independent channel:
 * collectives on it do not order against those on `c`). Collective. */
int duet_comm_dup(const duet_comm *c, duet_comm **out);
/* Frees the duplicate communicator. Outstanding requests must be completed
 * first. NULL ok. Does not finalize MPI. */
void duet_comm_destroy(duet_comm *c);

int duet_comm_rank(const duet_comm *c);
int duet_comm_size(const duet_comm *c);
/* The duplicated communicator (borrowed; freed by duet_comm_destroy). */
MPI_Comm duet_comm_mpi(const duet_comm *c);

/* ---- watchdog ------------------------------------------------------------
 * Every wait (blocking collectives, duet_comm_wait, a DDP's bucket
 * reductions) polls with a backoff (it does not hold a core) and gives up
 * when the operation has made no progress for timeout_s seconds (PyTorch's
 * process-group timeout): it asks every rank what it is doing, then returns
 * DUET_ETIMEOUT with a message naming the operation, its bucket or module,
 * and the ranks that did not take part. Every later wait on the comm, and on
 * its duplicates, fails at once with the same message, so that a runner
 * reaches duet_comm_abort quickly; the job cannot go on after a timeout. */
#define DUET_COMM_DEFAULT_TIMEOUT_S 600.0
typedef struct duet_comm_opts {
    double timeout_s; /* > 0; default DUET_TIMEOUT from the environment, else 600 */
} duet_comm_opts;
duet_comm_opts duet_comm_opts_default(void);
/* DUET_TIMEOUT from the environment, the one reader of it: DUET_OK with
 * *seconds set when it holds a number in [1, 1e9], DUET_OK with *seconds
 * untouched when it is unset or empty, DUET_EINVAL naming the value
 * otherwise (duet_comm_opts_default then warns and keeps its default; the
 * runner refuses to start). */
int duet_comm_env_timeout(double *seconds);
/* Applies to c and to comms duplicated from it afterwards (a DDP dups its
 * comm when created: set the timeout first). DUET_EINVAL outside (0, 1e9]. */
int duet_comm_set_opts(duet_comm *c, const duet_comm_opts *opts);
duet_comm_opts duet_comm_get_opts(const duet_comm *c);
/* Names c in watchdog messages ("runner", "DDP 'generator' buckets");
 * copied, truncated to 95 bytes. */
void duet_comm_set_name(duet_comm *c, const char *name);
/* True once a wait on c or on a comm duplicated with it timed out (every
 * later wait fails at once): a runner then exits with the timeout code. */
bool duet_comm_timed_out(const duet_comm *c);
/* Answers the watchdog's questions from the other ranks ("are you alive,
 * what are you waiting for?") that have arrived. Call it now and then
 * during long work outside collectives that other ranks wait for without
 * a timeout (rank 0 writing a checkpoint): a rank that answers is alive;
 * one that has not answered for dist.timeout (stopped, hung) ends the job. */
void duet_comm_serve(duet_comm *c);

/* ---- blocking collectives ------------------------------------------------ */

/* In place: buf (count elements) becomes the reduction over all ranks. */
int duet_comm_allreduce(duet_comm *c, void *buf, size_t count, duet_dtype dt, duet_reduce_op op);
/* buf (count elements) on every rank becomes root's. */
int duet_comm_bcast(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root);
/* duet_comm_bcast whose wait never times out (it warns every timeout_s
 * instead): for ranks that wait while root writes a checkpoint, which a
 * slow file system may make long without any peer being hung. */
int duet_comm_bcast_untimed(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root);
/* recv (size * count elements) gets each rank's send (count elements), in rank
 * order. send and recv must not overlap. */
int duet_comm_allgather(duet_comm *c, const void *send, void *recv, size_t count,
                        duet_dtype dt);
int duet_comm_barrier(duet_comm *c);

/* ---- nonblocking allreduce -------------------------------------------------- */

/* Starts an in-place allreduce of buf; buf must stay untouched until the
 * request completes. *req is a new handle, freed by test (when done) or wait.
 * On failure *req is NULL. */
int duet_comm_iallreduce(duet_comm *c, void *buf, size_t count, duet_dtype dt,
                         duet_reduce_op op, duet_comm_request **req);
/* Drives progress. *done becomes true when the operation completed; the
 * handle is then freed and *req set to NULL. A NULL *req counts as done. */
int duet_comm_test(duet_comm_request **req, bool *done);
/* Blocks until completion, frees the handle and sets *req to NULL (also on
 * failure). A NULL *req returns at once. */
int duet_comm_wait(duet_comm_request **req);
/* Labels req in watchdog messages ("DDP 'g' gradient bucket 2 of 5");
 * printf-style, truncated to 127 bytes. */
void duet_comm_request_set_label(duet_comm_request *req, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Work done between polls while waiting: advances the caller's other
 * operations and sets *progressed when something moved (which resets the
 * watchdog's backoff). A non-zero status ends the wait with it. */
typedef int (*duet_comm_work_fn)(void *ctx, bool *progressed);
/* duet_comm_wait that calls work(ctx) between polls, so that other
 * nonblocking operations of the caller (a DDP's buckets) keep moving while
 * this one completes; the watchdog covers the whole wait. Frees the handle
 * and sets *req to NULL, also on failure. */
int duet_comm_wait_working(duet_comm_request **req, duet_comm_work_fn work, void *ctx);

/* ---- job control ------------------------------------------------------------- */

/* For runners: prints "duet: rank r: <message>" on stderr and aborts every
 * process of the job (MPI_Abort on c, or on MPI_COMM_WORLD when c is NULL), so
 * that an error on one rank never leaves the others waiting. Without MPI it
 * calls abort(). Does not return. */
void duet_comm_abort(duet_comm *c, int errorcode, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* ---- where the group runs ------------------------------------------------------ */

/* Ranks of c on this process's node (those that can share memory; one
 * MPI_Comm_split_type, so every rank of c must call it). 1 for NULL. */
int duet_comm_local_size(duet_comm *c, int *out);
/* The MPI library's name and version ("Open MPI v4.1.4"), truncated to size.
 * Works before MPI_Init. */
void duet_comm_library_version(char *buf, size_t size);

/* Half-precision conversion (duet_f32_to_f16, ...) is in duet/base.h. */

#ifdef __cplusplus
}
#endif
#endif
