/* Private to the comm layer: the comm object's layout, the one checking macro
 * for MPI calls, and the checked size_t -> int conversion. Only src/comm/ (and
 * the comm layer's own tests) include it; other layers use duet/comm.h. */
#ifndef DUET_COMM_INTERNAL_H
#define DUET_COMM_INTERNAL_H

#include "duet/comm.h"

/* What a comm and every duet_comm_dup of it share (watchdog.c): the
 * roll-call channel the watchdog uses to find the ranks that did not take
 * part in a stalled operation, and the verdict once one timed out. */
typedef struct duet__family {
    int refs;
    int ncomms;      /* comms built in this family: each one's id */
    MPI_Comm watch;  /* duplicate of the first comm: roll-call messages */
    int broken;      /* a timeout happened: every later wait fails at once */
    char *broken_msg;
} duet__family;

struct duet_comm {
    MPI_Comm comm; /* our duplicate, MPI_ERRORS_RETURN */
    int rank, size;
    duet__family *family;
    int id;           /* index in the family (the same on every rank) */
    uint64_t op_seq;  /* collectives started on this comm (the same on every rank) */
    double timeout_s; /* watchdog: longest wait without progress */
    char name[96];    /* for watchdog messages ("runner", "DDP 'generator'") */
    /* Two-byte element type for F16/BF16, and the user ops over it. */
    MPI_Datatype half_type;
    MPI_Op f16_ops[3];  /* indexed by duet_reduce_op */
    MPI_Op bf16_ops[3];
    /* Largest element count handed to one MPI call (<= INT_MAX); lowered by
     * tests to exercise chunking. */
    size_t max_chunk;
    /* Nonblocking allreduce of F32/F16/BF16 through our ring (ring.c)
     * rather than MPI_Iallreduce; on by default. */
    bool use_ring;
    unsigned ring_seq; /* ring operations started, for their tags */
};

/* One ring allreduce in flight (ring.c). */
typedef struct duet__ring {
    MPI_Comm comm;
    int rank, size;
    char *buf;
    size_t count, es;
    duet_dtype dt;
    duet_reduce_op op;
    MPI_Datatype type;
    int tag, step, nsteps, recv_i;
    MPI_Request reqs[2]; /* receive, send of the current step */
    void *tmp;           /* one chunk (ring) or the buffer (doubling) */
    bool rd;             /* recursive doubling instead of the ring */
    bool done;
} duet__ring;

/* Describes the peers whose messages this step still waits for
 * ("rank 1 (ring step 2 of 4)"); empty when none. */
void duet__ring_peers(const duet__ring *g, char *buf, size_t size);

bool duet__ring_supports(const duet_comm *c, duet_dtype dt);
/* count must be <= c->max_chunk * c->size... any count whose chunks
 * (count / size + 1 elements) fit an int. */
int duet__ring_start(duet__ring *g, duet_comm *c, void *buf, size_t count, duet_dtype dt,
                     duet_reduce_op op, MPI_Datatype type);
int duet__ring_progress(duet__ring *g, bool *done);
void duet__ring_free(duet__ring *g);

/* Chooses the nonblocking allreduce: our ring (true) or MPI_Iallreduce. For
 * tests and the benchmark. */
void duet__comm_set_ring(duet_comm *c, bool use_ring);

/* ---- watchdog (watchdog.c) ----------------------------------------------
 * Every wait in duet goes through one poll loop: test, and when nothing
 * moved, back off (a short spin, then sleeps doubling up to 2 ms, so that a
 * waiting rank does not hold a core) and check the deadline. A wait that
 * sees no progress for the comm's timeout asks every rank over the family's
 * roll-call channel what it is doing (ranks waiting anywhere in duet answer;
 * a stopped, hung or busy rank does not), then fails with DUET_ETIMEOUT and
 * a message naming the operation, its label and the ranks that did not take
 * part. The family is then broken: later waits fail at once, so a runner's
 * error path reaches its abort without waiting again. */
typedef struct duet__wait {
    duet_comm *c;
    const char *op;   /* "allreduce", "bcast", ... */
    char label[160];  /* "DDP 'generator' bucket 2 of 5" */
    uint64_t seq;     /* the operation's number on c */
    double t_start, t_progress, sleep_s;
    bool no_timeout;  /* waits for rank 0's checkpoint: times out only when a
                       * rank stops answering (check_alive in watchdog.c) */
    /* no_timeout: the liveness question in flight, asked at t_asked, and
     * which ranks answered (c->size entries; NULL until asked). */
    bool asking;
    double t_asked;
    bool *answered;
    /* Fills buf with the peers this rank is still waiting for (may be NULL). */
    void (*peers)(void *ctx, char *buf, size_t size);
    void *peers_ctx;
    struct duet__wait *prev;
} duet__wait;

/* Starts a wait on c for operation `op` number `seq`; label may be NULL
 * (the comm's name is used). Pair with duet__wait_end. */
void duet__wait_begin(duet__wait *w, duet_comm *c, const char *op, uint64_t seq,
                      const char *label);
/* After a poll: progressed resets the backoff; otherwise it backs off
 * (maybe sleeping) and returns DUET_ETIMEOUT once the wait has seen no
 * progress for the timeout. Also fails at once when the family is broken. */
int duet__wait_idle(duet__wait *w, bool progressed);
void duet__wait_end(duet__wait *w);
/* What the poll loop of this process did, counted since it started (tests
 * judge the backoff by these, not by clocks): polls that saw no progress,
 * those that slept, and those that returned without sleeping although
 * the wait had already backed off (sleep_s > 0) with no progress since
 * (nor a roll call that every rank answered), which a backing-off loop
 * never does. */
typedef struct duet__wait_counts {
    uint64_t idle_polls, sleeps, spins_after_sleep;
} duet__wait_counts;
duet__wait_counts duet__wait_counts_get(void);
/* DUET_ETIMEOUT with the family's verdict when a timeout happened. */
int duet__comm_check_broken(const duet_comm *c);

int duet__family_join(duet_comm *c, const duet_comm *parent);
void duet__family_leave(duet_comm *c);

/* Describes an in-flight request's pending peers (see duet__ring_peers). */
void duet__request_peers(const duet_comm_request *r, char *buf, size_t size);
/* Like duet_comm_test, also saying whether anything moved (a ring step, a
 * part completed), for callers that run their own wait loop. */
int duet__comm_test_progress(duet_comm_request **req, bool *done, bool *progressed);

/* duet_comm_bcast; no_timeout: the wait never times out (it warns every
 * timeout instead), for ranks that wait while rank 0 writes a checkpoint,
 * which no watchdog may cut short. */
int duet__comm_bcast_ex(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root,
                        bool no_timeout);


/* Turns a failed MPI return code into DUET_EMPI with MPI's message and the
 * call site; returns DUET_EMPI. */
int duet__mpi_error(int mpi_rc, const char *call, const char *file, int line);

/* `DUET__MPI_TRY(MPI_Bcast(...));` returns DUET_EMPI from the enclosing
 * function on failure. */
#define DUET__MPI_TRY(call)                                                    \
    do {                                                                       \
        int duet__mrc = (call);                                                \
        if (duet__mrc != MPI_SUCCESS)                                          \
            return duet__mpi_error(duet__mrc, #call, __FILE__, __LINE__);      \
    } while (0)

/* Same, for code that must clean up: evaluates to a duet status. */
#define DUET__MPI_CHECK(call)                                                  \
    duet__mpi_check((call), #call, __FILE__, __LINE__)
static inline int duet__mpi_check(int mpi_rc, const char *call, const char *file, int line) {
    return mpi_rc == MPI_SUCCESS ? 0 : duet__mpi_error(mpi_rc, call, file, line);
}

/* buf (n elements of a floating dtype) *= s, in the element type. */
void duet__scale(void *buf, size_t n, duet_dtype dt, double s);

/* Sets the largest element count per MPI call (clamped to 1..INT_MAX). For
 * tests of the chunked paths. */
void duet__comm_set_max_chunk(duet_comm *c, size_t max_elems);

#endif
