/* A nonblocking ring allreduce over MPI point-to-point messages, for the
 * element types DDP buckets use (F32, F16, BF16).
 *
 * Why not MPI_Iallreduce: Open MPI's libnbc picks a binomial tree for fewer
 * than 4 ranks or in-place buffers (the whole buffer travels up, is reduced
 * on one rank, travels down), and allocates a buffer-sized temporary per
 * call; on 2 ranks that is well below the blocking MPI_Allreduce's bandwidth
 * (docs/ddp.md). The ring sends 2(n-1)/n of the buffer per rank, the
 * bandwidth-optimal amount, in 2(n-1) steps that the caller's test calls
 * advance, so it overlaps with the backward pass. Every chunk's sum is
 * formed on one rank and copied to the others: all ranks end bit-identical.
 *
 * Buffer (count elements) in n chunks; on rank r, reduce-scatter step s
 * sends chunk r-s and receives chunk r-s-1 (mod n) from the left neighbour,
 * reducing it into place; afterwards rank r holds the total of chunk r+1.
 * Allgather step s sends chunk r+1-s and receives chunk r-s in place. An
 * average divides each chunk's total on its owner before the allgather.
 *
 * Small buffers on a power-of-two number of ranks take recursive doubling
 * instead: log2(n) steps, each exchanging the whole buffer with rank r^2^s
 * and adding; half the ring's latency (one message on 2 ranks, which matters
 * for the DDP's end-of-backward agreement and small buckets). Both ranks of
 * a pair add the same two operands, and IEEE addition is commutative, so the
 * results stay bit-identical. */

/* Up to this many bytes, recursive doubling (latency-bound regime). */
#define RD_MAX_BYTES 65536
#include "comm/comm_internal.h"

#include <string.h>

static size_t chunk_begin(const duet__ring *g, int i) {
    return (size_t)i * g->count / (size_t)g->size;
}

static size_t chunk_len(const duet__ring *g, int i) {
    return chunk_begin(g, i + 1) - chunk_begin(g, i);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* inout[i] = in[i] (op) inout[i], element-wise. */
static void reduce_into(void *inout, const void *in, size_t n, duet_dtype dt, duet_reduce_op op) {
    if (dt == DUET_DTYPE_F32) {
        float *b = inout;
        const float *a = in;
        if (op == DUET_REDUCE_SUM || op == DUET_REDUCE_AVG)
            for (size_t i = 0; i < n; i++) b[i] += a[i];
        else if (op == DUET_REDUCE_MAX)
            for (size_t i = 0; i < n; i++) b[i] = a[i] > b[i] || a[i] != a[i] ? a[i] : b[i];
        else
            for (size_t i = 0; i < n; i++) b[i] = a[i] < b[i] || a[i] != a[i] ? a[i] : b[i];
        return;
    }
    /* Halves: widen 256 at a time, combine in float32, round back. */
    uint16_t *b = inout;
    const uint16_t *a = in;
    float x[256], y[256];
    bool half = dt == DUET_DTYPE_F16;
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        if (half) {
            duet_f16_to_f32(x, a + i, m);
            duet_f16_to_f32(y, b + i, m);
        } else {
            duet_bf16_to_f32(x, a + i, m);
            duet_bf16_to_f32(y, b + i, m);
        }
        for (size_t k = 0; k < m; k++) {
            if (op == DUET_REDUCE_SUM || op == DUET_REDUCE_AVG) y[k] += x[k];
            else if (op == DUET_REDUCE_MAX) y[k] = x[k] > y[k] || x[k] != x[k] ? x[k] : y[k];
            else y[k] = x[k] < y[k] || x[k] != x[k] ? x[k] : y[k];
        }
        if (half) duet_f32_to_f16(b + i, y, m);
        else duet_f32_to_bf16(b + i, y, m);
    }
}

bool duet__ring_supports(const duet_comm *c, duet_dtype dt) {
    return c->use_ring && c->size > 1 &&
           (dt == DUET_DTYPE_F32 || dt == DUET_DTYPE_F16 || dt == DUET_DTYPE_BF16);
}

/* Posts the messages of the current step. */
static int post_step(duet__ring *g) {
    int n = g->size, r = g->rank;
    if (g->rd) {
        int partner = r ^ (1 << g->step);
        DUET__MPI_TRY(MPI_Irecv(g->tmp, (int)g->count, g->type, partner, g->tag, g->comm,
                                &g->reqs[0]));
        int rc = DUET__MPI_CHECK(
            MPI_Isend(g->buf, (int)g->count, g->type, partner, g->tag, g->comm, &g->reqs[1]));
        if (rc != DUET_OK) {
            MPI_Cancel(&g->reqs[0]);
            MPI_Wait(&g->reqs[0], MPI_STATUS_IGNORE);
        }
        return rc;
    }
    int right = mod(r + 1, n), left = mod(r - 1, n);
    int s = g->step;
    int send_i, recv_i;
    void *recv_buf;
    if (s < n - 1) { /* reduce-scatter */
        send_i = mod(r - s, n);
        recv_i = mod(r - s - 1, n);
        recv_buf = g->tmp;
    } else { /* allgather */
        int t = s - (n - 1);
        send_i = mod(r + 1 - t, n);
        recv_i = mod(r - t, n);
        recv_buf = g->buf + chunk_begin(g, recv_i) * g->es;
    }
    g->recv_i = recv_i;
    /* Chunks are at most count/size + 1 <= max_chunk elements: int-sized. */
    int nrecv = (int)chunk_len(g, recv_i), nsend = (int)chunk_len(g, send_i);
    DUET__MPI_TRY(MPI_Irecv(recv_buf, nrecv, g->type, left, g->tag, g->comm, &g->reqs[0]));
    int rc = DUET__MPI_CHECK(MPI_Isend(g->buf + chunk_begin(g, send_i) * g->es, nsend, g->type,
                                       right, g->tag, g->comm, &g->reqs[1]));
    if (rc != DUET_OK) {
        /* Leave no posted receive behind. */
        MPI_Cancel(&g->reqs[0]);
        MPI_Wait(&g->reqs[0], MPI_STATUS_IGNORE);
    }
    return rc;
}

int duet__ring_start(duet__ring *g, duet_comm *c, void *buf, size_t count, duet_dtype dt,
                     duet_reduce_op op, MPI_Datatype type) {
    memset(g, 0, sizeof *g);
    g->reqs[0] = g->reqs[1] = MPI_REQUEST_NULL;
    g->comm = c->comm;
    g->rank = c->rank;
    g->size = c->size;
    g->buf = buf;
    g->count = count;
    g->dt = dt;
    g->op = op;
    g->es = duet_dtype_size(dt);
    g->type = type;
    /* Every rank starts its ring operations in the same order, so the
     * sequence number (hence the tag) of an operation agrees across ranks and
     * messages of operations in flight together never match each other. */
    g->tag = 1 + (int)(c->ring_seq++ % 32000u);
    g->rd = (g->size & (g->size - 1)) == 0 && count * g->es <= RD_MAX_BYTES;
    g->nsteps = 2 * (g->size - 1);
    size_t tmp_count = count / (size_t)g->size + 1;
    if (g->rd) {
        g->nsteps = 0;
        while ((1 << g->nsteps) < g->size) g->nsteps++;
        tmp_count = count + 1;
    }
    g->tmp = malloc(tmp_count * g->es);
    if (g->tmp == NULL) return duet__error(DUET_ENOMEM, "comm: out of memory for an allreduce");
    int rc = post_step(g);
    if (rc != DUET_OK) {
        free(g->tmp);
        g->tmp = NULL;
        g->done = true;
    }
    return rc;
}

/* Advances as far as the messages allow (the caller's wait loop polls). */
int duet__ring_progress(duet__ring *g, bool *done) {
    while (!g->done) {
        int flag = 0;
        DUET__MPI_TRY(MPI_Testall(2, g->reqs, &flag, MPI_STATUSES_IGNORE));
        if (!flag) break;
        if (g->rd) {
            reduce_into(g->buf, g->tmp, g->count, g->dt, g->op);
            if (g->step == g->nsteps - 1 && g->op == DUET_REDUCE_AVG)
                duet__scale(g->buf, g->count, g->dt, 1.0 / g->size);
            if (++g->step == g->nsteps) {
                g->done = true;
                free(g->tmp);
                g->tmp = NULL;
                break;
            }
            DUET_TRY(post_step(g));
            continue;
        }
        if (g->step < g->size - 1)
            reduce_into(g->buf + chunk_begin(g, g->recv_i) * g->es, g->tmp,
                        chunk_len(g, g->recv_i), g->dt, g->op);
        /* After the reduce-scatter this rank owns the total of chunk r+1: an
         * average divides it here, once, before it goes round. */
        if (g->step == g->size - 2 && g->op == DUET_REDUCE_AVG) {
            int own = mod(g->rank + 1, g->size);
            duet__scale(g->buf + chunk_begin(g, own) * g->es, chunk_len(g, own), g->dt,
                        1.0 / g->size);
        }
        if (++g->step == g->nsteps) {
            g->done = true;
            free(g->tmp);
            g->tmp = NULL;
            break;
        }
        DUET_TRY(post_step(g));
    }
    *done = g->done;
    return DUET_OK;
}

void duet__ring_peers(const duet__ring *g, char *buf, size_t size) {
    buf[0] = '\0';
    if (g->done || g->reqs[0] == MPI_REQUEST_NULL) return;
    /* The receive of the current step is what a stalled peer holds up. */
    int flag = 0;
    MPI_Request probe = g->reqs[0];
    if (MPI_Request_get_status(probe, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) return;
    int from = g->rd ? g->rank ^ (1 << g->step) : mod(g->rank - 1, g->size);
    snprintf(buf, size, "rank %d's message (%s step %d of %d)", from,
             g->rd ? "recursive-doubling" : "ring", g->step + 1, g->nsteps);
}

void duet__ring_free(duet__ring *g) {
    free(g->tmp);
    g->tmp = NULL;
}
