/* Private to duet: the comm object's layout, the one checking macro for MPI
 * calls, and the checked size_t -> int conversion. Other layers (ddp,
 * wrapper, train) may include it for DUET__MPI_TRY. */
#ifndef DUET_COMM_INTERNAL_H
#define DUET_COMM_INTERNAL_H

#include "duet/comm.h"

struct duet_comm {
    MPI_Comm comm; /* our duplicate, MPI_ERRORS_RETURN */
    int rank, size;
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

bool duet__ring_supports(const duet_comm *c, duet_dtype dt);
/* count must be <= c->max_chunk * c->size... any count whose chunks
 * (count / size + 1 elements) fit an int. */
int duet__ring_start(duet__ring *g, duet_comm *c, void *buf, size_t count, duet_dtype dt,
                     duet_reduce_op op, MPI_Datatype type);
int duet__ring_progress(duet__ring *g, bool blocking, bool *done);
void duet__ring_free(duet__ring *g);

/* Chooses the nonblocking allreduce: our ring (true) or MPI_Iallreduce. For
 * tests and the benchmark. */
void duet__comm_set_ring(duet_comm *c, bool use_ring);

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
