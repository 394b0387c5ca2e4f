/* The process group: MPI initialisation that cooperates with a host program,
 * a private duplicate communicator with MPI_ERRORS_RETURN, and collectives
 * whose size_t counts are cut into int-sized chunks in one place. */
#include "comm/comm_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <string.h>

/* MPI is process-global state; so is the one fact "duet called MPI_Init".
 * Only the main thread initialises and finalizes. */
static bool duet_initialised_mpi;

int duet__mpi_error(int mpi_rc, const char *call, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    /* Only the function name of the call text: "MPI_Bcast(buf, ...)" -> MPI_Bcast. */
    int namelen = 0;
    while (call[namelen] != '\0' && call[namelen] != '(') namelen++;
    const char *base = strrchr(file, '/');
    return duet__error(DUET_EMPI, "%.*s failed at %s:%d: %s (MPI error code %d)", namelen, call,
                       base ? base + 1 : file, line, len ? msg : "unknown MPI error", mpi_rc);
}

size_t duet_dtype_size(duet_dtype dt) {
    switch (dt) {
    case DUET_DTYPE_F32: return 4;
    case DUET_DTYPE_F64: return 8;
    case DUET_DTYPE_F16: return 2;
    case DUET_DTYPE_BF16: return 2;
    case DUET_DTYPE_I32: return 4;
    case DUET_DTYPE_I64: return 8;
    case DUET_DTYPE_U64: return 8;
    case DUET_DTYPE_U8: return 1;
    }
    return 0;
}

/* ---- initialisation ------------------------------------------------------ */

int duet_comm_init(int *argc, char ***argv) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return duet__error(DUET_ESTATE, "comm: MPI has already been finalized; it cannot be "
                                        "initialised again in this process");
    if (inited) return DUET_OK;
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
        return duet__error(DUET_EMPI, "comm: MPI_Init_thread failed (MPI error code %d); is the "
                                      "MPI runtime installed and the launcher working?",
                           rc);
    duet_initialised_mpi = true;
    /* Failures of calls on MPI_COMM_WORLD itself (the dup in duet_comm_world)
     * come back as codes too. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return DUET_OK;
}

bool duet_comm_initialised_mpi(void) { return duet_initialised_mpi; }

int duet_comm_finalize(void) {
    if (!duet_initialised_mpi) return DUET_OK;
    int finalized = 0;
    MPI_Finalized(&finalized);
    duet_initialised_mpi = false;
    if (finalized) return DUET_OK;
    DUET__MPI_TRY(MPI_Finalize());
    return DUET_OK;
}

/* ---- F16 / BF16 reduction operators -------------------------------------- */

/* Element-wise over `len` two-byte values: inout[i] = in[i] (op) inout[i],
 * computed in float32 and rounded back. */
#define DUET__HALF_OP(name, to32, to16, combine)                                 \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {       \
        (void)dt;                                                                \
        const uint16_t *a = in;                                                  \
        uint16_t *b = inout;                                                     \
        float x[256], y[256];                                                    \
        for (int i = 0; i < *len; i += 256) {                                    \
            size_t n = (size_t)(*len - i < 256 ? *len - i : 256);                \
            to32(x, a + i, n);                                                   \
            to32(y, b + i, n);                                                   \
            for (size_t k = 0; k < n; k++) y[k] = combine(x[k], y[k]);          \
            to16(b + i, y, n);                                                   \
        }                                                                        \
    }
#define DUET__ADD(a, b) ((a) + (b))
#define DUET__MAX(a, b) ((a) > (b) || (a) != (a) ? (a) : (b))
#define DUET__MIN(a, b) ((a) < (b) || (a) != (a) ? (a) : (b))
DUET__HALF_OP(f16_sum, duet_f16_to_f32, duet_f32_to_f16, DUET__ADD)
DUET__HALF_OP(f16_max, duet_f16_to_f32, duet_f32_to_f16, DUET__MAX)
DUET__HALF_OP(f16_min, duet_f16_to_f32, duet_f32_to_f16, DUET__MIN)
DUET__HALF_OP(bf16_sum, duet_bf16_to_f32, duet_f32_to_bf16, DUET__ADD)
DUET__HALF_OP(bf16_max, duet_bf16_to_f32, duet_f32_to_bf16, DUET__MAX)
DUET__HALF_OP(bf16_min, duet_bf16_to_f32, duet_f32_to_bf16, DUET__MIN)

/* ---- creation -------------------------------------------------------------- */

static void free_handles(duet_comm *c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return; /* MPI has freed everything already */
    for (int i = 0; i < 3; i++) {
        if (c->f16_ops[i] != MPI_OP_NULL) MPI_Op_free(&c->f16_ops[i]);
        if (c->bf16_ops[i] != MPI_OP_NULL) MPI_Op_free(&c->bf16_ops[i]);
    }
    if (c->half_type != MPI_DATATYPE_NULL) MPI_Type_free(&c->half_type);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
}


void duet_comm_destroy(duet_comm *c) {
    if (c == NULL) return;
    free_handles(c);
    duet__family_leave(c);
    free(c);
}

/* Builds our comm over a duplicate of `parent`; `family` is the duet comm
 * it is duplicated from (sharing its watchdog channel), or NULL. */
static int comm_build(duet_comm **out, MPI_Comm parent, const duet_comm *family) {
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return duet__error(DUET_ESTATE, "comm: MPI is %s; call duet_comm_init (or let "
                                        "duet_comm_world do it) before creating a comm",
                           finalized ? "already finalized" : "not initialised");
    duet_comm *c = calloc(1, sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "comm: out of memory");
    c->comm = MPI_COMM_NULL;
    c->half_type = MPI_DATATYPE_NULL;
    for (int i = 0; i < 3; i++) c->f16_ops[i] = c->bf16_ops[i] = MPI_OP_NULL;
    c->max_chunk = (size_t)INT_MAX;
    c->use_ring = true;
    c->timeout_s = family != NULL ? family->timeout_s : duet_comm_opts_default().timeout_s;
    snprintf(c->name, sizeof c->name, "%s", family != NULL ? family->name : "comm");
    int rc = DUET__MPI_CHECK(MPI_Comm_dup(parent, &c->comm));
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Comm_rank(c->comm, &c->rank));
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Comm_size(c->comm, &c->size));
    if (rc == DUET_OK) rc = duet__family_join(c, family);
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &c->half_type));
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Type_commit(&c->half_type));
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};
    for (int i = 0; i < 3 && rc == DUET_OK; i++) {
        rc = DUET__MPI_CHECK(MPI_Op_create(fns[0][i], 1, &c->f16_ops[i]));
        if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Op_create(fns[1][i], 1, &c->bf16_ops[i]));
    }
    if (rc != DUET_OK) {
        duet__error_context(rc, "comm: creating the process group");
        duet_comm_destroy(c);
        return rc;
    }
    *out = c;
    return DUET_OK;
}

int duet_comm_world(duet_comm **out) {
    *out = NULL;
    DUET_TRY(duet_comm_init(NULL, NULL));
    return comm_build(out, MPI_COMM_WORLD, NULL);
}

int duet_comm_create(MPI_Comm comm, duet_comm **out) {
    *out = NULL;
    if (comm == MPI_COMM_NULL)
        return duet__error(DUET_EINVAL, "comm: duet_comm_create got MPI_COMM_NULL");
    return comm_build(out, comm, NULL);
}

int duet_comm_dup(const duet_comm *c, duet_comm **out) {
    *out = NULL;
    int rc = comm_build(out, c->comm, c);
    if (rc == DUET_OK) {
        (*out)->max_chunk = c->max_chunk;
        (*out)->use_ring = c->use_ring;
    }
    return rc;
}

int duet_comm_rank(const duet_comm *c) { return c->rank; }
int duet_comm_size(const duet_comm *c) { return c->size; }
MPI_Comm duet_comm_mpi(const duet_comm *c) { return c->comm; }

void duet__comm_set_ring(duet_comm *c, bool use_ring) { c->use_ring = use_ring; }

void duet__comm_set_max_chunk(duet_comm *c, size_t max_elems) {
    if (max_elems < 1) max_elems = 1;
    if (max_elems > (size_t)INT_MAX) max_elems = (size_t)INT_MAX;
    c->max_chunk = max_elems;
}

/* ---- types and ops ---------------------------------------------------------- */

static MPI_Datatype mpi_type(const duet_comm *c, duet_dtype dt) {
    switch (dt) {
    case DUET_DTYPE_F32: return MPI_FLOAT;
    case DUET_DTYPE_F64: return MPI_DOUBLE;
    case DUET_DTYPE_F16:
    case DUET_DTYPE_BF16: return c->half_type;
    case DUET_DTYPE_I32: return MPI_INT32_T;
    case DUET_DTYPE_I64: return MPI_INT64_T;
    case DUET_DTYPE_U64: return MPI_UINT64_T;
    case DUET_DTYPE_U8: return MPI_UINT8_T;
    }
    return MPI_DATATYPE_NULL;
}

static bool is_floating(duet_dtype dt) {
    return dt == DUET_DTYPE_F32 || dt == DUET_DTYPE_F64 || dt == DUET_DTYPE_F16 ||
           dt == DUET_DTYPE_BF16;
}

/* The MPI operation; AVG travels as SUM and is divided afterwards. */
static int mpi_op(const duet_comm *c, duet_dtype dt, duet_reduce_op op, MPI_Op *out) {
    if ((unsigned)op > DUET_REDUCE_AVG)
        return duet__error(DUET_EINVAL, "comm: unknown reduce op %d", (int)op);
    if (op == DUET_REDUCE_AVG && !is_floating(dt))
        return duet__error(DUET_EINVAL, "comm: DUET_REDUCE_AVG needs a floating-point dtype");
    int k = op == DUET_REDUCE_AVG ? DUET_REDUCE_SUM : (int)op;
    if (dt == DUET_DTYPE_F16) *out = c->f16_ops[k];
    else if (dt == DUET_DTYPE_BF16) *out = c->bf16_ops[k];
    else *out = k == DUET_REDUCE_SUM ? MPI_SUM : k == DUET_REDUCE_MAX ? MPI_MAX : MPI_MIN;
    return DUET_OK;
}

void duet__scale(void *buf, size_t n, duet_dtype dt, double s) {
    if (dt == DUET_DTYPE_F64) {
        double *d = buf;
        for (size_t i = 0; i < n; i++) d[i] *= s;
    } else if (dt == DUET_DTYPE_F32) {
        float *f = buf, fs = (float)s;
        for (size_t i = 0; i < n; i++) f[i] *= fs;
    } else if (dt == DUET_DTYPE_F16 || dt == DUET_DTYPE_BF16) {
        uint16_t *h = buf;
        float tmp[256], fs = (float)s;
        for (size_t i = 0; i < n; i += 256) {
            size_t m = n - i < 256 ? n - i : 256;
            if (dt == DUET_DTYPE_F16) duet_f16_to_f32(tmp, h + i, m);
            else duet_bf16_to_f32(tmp, h + i, m);
            for (size_t k = 0; k < m; k++) tmp[k] *= fs;
            if (dt == DUET_DTYPE_F16) duet_f32_to_f16(h + i, tmp, m);
            else duet_f32_to_bf16(h + i, tmp, m);
        }
    }
}

static int check_dtype(duet_dtype dt, const char *what) {
    if (duet_dtype_size(dt) == 0)
        return duet__error(DUET_EINVAL, "comm: %s: unknown dtype %d", what, (int)dt);
    return DUET_OK;
}

/* The one place where a size_t count becomes MPI's int: the next chunk of at
 * most c->max_chunk (<= INT_MAX) elements out of `left`. */
static int chunk_count(const duet_comm *c, size_t left) {
    size_t n = left < c->max_chunk ? left : c->max_chunk;
    DUET_ASSERT(n <= (size_t)INT_MAX);
    return (int)n;
}

/* ---- blocking collectives ------------------------------------------------ */

/* Completes a nonblocking MPI collective under the watchdog. On a timeout
 * the request is abandoned: MPI forbids freeing or cancelling a collective's
 * request, and the job is ending. */
static int wait_mpi(duet_comm *c, const char *op, MPI_Request *req, bool no_timeout) {
    duet__wait w;
    duet__wait_begin(&w, c, op, c->op_seq++, NULL);
    w.no_timeout = no_timeout;
    int rc = DUET_OK;
    for (;;) {
        int flag = 0;
        rc = DUET__MPI_CHECK(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
        if (rc != DUET_OK || flag) break;
        rc = duet__wait_idle(&w, false);
        if (rc != DUET_OK) break;
    }
    duet__wait_end(&w);
    return rc;
}

int duet_comm_allreduce(duet_comm *c, void *buf, size_t count, duet_dtype dt, duet_reduce_op op) {
    DUET_TRY(check_dtype(dt, "allreduce"));
    MPI_Op mop = MPI_OP_NULL;
    DUET_TRY(mpi_op(c, dt, op, &mop));
    DUET_TRY(duet__comm_check_broken(c));
    size_t es = duet_dtype_size(dt);
    for (size_t off = 0; off < count;) {
        int n = chunk_count(c, count - off);
        MPI_Request req;
        DUET__MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * es, n, mpi_type(c, dt), mop,
                                     c->comm, &req));
        DUET_TRY(wait_mpi(c, "allreduce", &req, false));
        if (op == DUET_REDUCE_AVG && c->size > 1)
            duet__scale((char *)buf + off * es, (size_t)n, dt, 1.0 / c->size);
        off += (size_t)n;
    }
    return DUET_OK;
}

int duet_comm_bcast(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root) {
    return duet__comm_bcast_ex(c, buf, count, dt, root, false);
}

int duet_comm_bcast_untimed(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root) {
    return duet__comm_bcast_ex(c, buf, count, dt, root, true);
}

int duet__comm_bcast_ex(duet_comm *c, void *buf, size_t count, duet_dtype dt, int root,
                        bool no_timeout) {
    DUET_TRY(check_dtype(dt, "bcast"));
    DUET_TRY(duet__comm_check_broken(c));
    if (root < 0 || root >= c->size)
        return duet__error(DUET_EINVAL, "comm: bcast root %d outside the group of %d", root,
                           c->size);
    size_t es = duet_dtype_size(dt);
    for (size_t off = 0; off < count;) {
        int n = chunk_count(c, count - off);
        MPI_Request req;
        DUET__MPI_TRY(MPI_Ibcast((char *)buf + off * es, n, mpi_type(c, dt), root, c->comm, &req));
        DUET_TRY(wait_mpi(c, "bcast", &req, no_timeout));
        off += (size_t)n;
    }
    return DUET_OK;
}

int duet_comm_allgather(duet_comm *c, const void *send, void *recv, size_t count,
                        duet_dtype dt) {
    DUET_TRY(check_dtype(dt, "allgather"));
    DUET_TRY(duet__comm_check_broken(c));
    size_t es = duet_dtype_size(dt);
    if (count <= c->max_chunk) {
        int n = chunk_count(c, count);
        MPI_Request req;
        DUET__MPI_TRY(MPI_Iallgather(send, n, mpi_type(c, dt), recv, n, mpi_type(c, dt), c->comm,
                                     &req));
        return wait_mpi(c, "allgather", &req, false);
    }
    /* Chunk j of every rank's block: rank r's elements [off, off+n) land at
     * recv + (r*count + off) elements, i.e. a block of n elements whose
     * extent is a whole per-rank block. */
    for (size_t off = 0; off < count;) {
        int n = chunk_count(c, count - off);
        MPI_Datatype block, strided;
        DUET__MPI_TRY(MPI_Type_contiguous(n, mpi_type(c, dt), &block));
        int rc = DUET__MPI_CHECK(
            MPI_Type_create_resized(block, 0, (MPI_Aint)(count * es), &strided));
        MPI_Type_free(&block);
        if (rc != DUET_OK) return rc;
        rc = DUET__MPI_CHECK(MPI_Type_commit(&strided));
        MPI_Request req;
        if (rc == DUET_OK)
            rc = DUET__MPI_CHECK(MPI_Iallgather((const char *)send + off * es, n, mpi_type(c, dt),
                                                (char *)recv + off * es, 1, strided, c->comm,
                                                &req));
        if (rc == DUET_OK) rc = wait_mpi(c, "allgather", &req, false);
        MPI_Type_free(&strided);
        if (rc != DUET_OK) return rc;
        off += (size_t)n;
    }
    return DUET_OK;
}

int duet_comm_barrier(duet_comm *c) {
    DUET_TRY(duet__comm_check_broken(c));
    MPI_Request req;
    DUET__MPI_TRY(MPI_Ibarrier(c->comm, &req));
    return wait_mpi(c, "barrier", &req, false);
}

/* ---- nonblocking allreduce -------------------------------------------------- */

/* One part per chunk of at most max_chunk elements: an MPI request, or a
 * ring operation (ring.c). */
typedef struct request_part {
    bool ring_op, done;
    MPI_Request req;
    duet__ring ring;
    /* MPI parts of an AVG: divided when complete. */
    void *buf;
    size_t count;
    duet_dtype dt;
    double scale;
} request_part;

struct duet_comm_request {
    duet_comm *c;
    uint64_t seq;     /* the operation's number on c */
    char label[128];  /* for watchdog messages; the comm's name by default */
    int n;
    request_part parts[];
};

/* Parts still in flight (after a timeout) are left to MPI: the ring's
 * point-to-point requests are freed (legal while active), and the request
 * and the ring's buffers are kept, since MPI may still write into them
 * while the job ends. */
static void request_free(duet_comm_request *r) {
    bool abandoned = false;
    for (int i = 0; i < r->n; i++) {
        request_part *p = &r->parts[i];
        if (p->done) {
            if (p->ring_op) duet__ring_free(&p->ring);
            continue;
        }
        abandoned = true;
        if (p->ring_op) {
            for (int k = 0; k < 2; k++)
                if (p->ring.reqs[k] != MPI_REQUEST_NULL) MPI_Request_free(&p->ring.reqs[k]);
        } /* an MPI collective's request cannot be freed: left to the job's end */
    }
    if (!abandoned) free(r);
}

void duet_comm_request_set_label(duet_comm_request *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->label, sizeof r->label, fmt, ap);
    va_end(ap);
}

void duet__request_peers(const duet_comm_request *r, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->n && at + 1 < size; i++) {
        const request_part *p = &r->parts[i];
        if (p->done || !p->ring_op) continue;
        char one[128];
        duet__ring_peers(&p->ring, one, sizeof one);
        if (one[0] == '\0' || strstr(buf, one) != NULL) continue;
        int k = snprintf(buf + at, size - at, "%s%s", at ? ", " : "", one);
        at += k > 0 ? (size_t)k : 0;
    }
}

/* Advances every part; *done when all are complete, *progressed when a
 * ring moved a step or a part completed. */
static int request_progress(duet_comm_request *r, bool *done, bool *progressed) {
    *done = true;
    *progressed = false;
    for (int i = 0; i < r->n; i++) {
        request_part *p = &r->parts[i];
        if (p->done) continue;
        if (p->ring_op) {
            int step = p->ring.step;
            int rc = duet__ring_progress(&p->ring, &p->done);
            if (rc != DUET_OK) {
                p->done = true; /* its messages are cancelled or complete */
                return rc;
            }
            if (p->ring.step != step) *progressed = true;
        } else {
            int flag = 0;
            DUET__MPI_TRY(MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE));
            p->done = flag != 0;
        }
        if (p->done) *progressed = true;
        if (p->done && !p->ring_op && p->scale != 1.0) duet__scale(p->buf, p->count, p->dt, p->scale);
        if (!p->done) *done = false;
    }
    return DUET_OK;
}

static void request_peers_cb(void *ctx, char *buf, size_t size) {
    duet__request_peers(ctx, buf, size);
}

/* Polls r to completion under the watchdog, calling work (may be NULL)
 * between polls. */
static int request_wait(duet_comm_request *r, duet_comm_work_fn work, void *ctx) {
    duet__wait w;
    duet__wait_begin(&w, r->c, "allreduce", r->seq, r->label);
    w.peers = request_peers_cb;
    w.peers_ctx = r;
    int rc = DUET_OK;
    for (;;) {
        bool done = false, progressed = false;
        rc = request_progress(r, &done, &progressed);
        if (rc != DUET_OK || done) break;
        if (work != NULL) {
            bool moved = false;
            rc = work(ctx, &moved);
            if (rc != DUET_OK) break;
            progressed = progressed || moved;
        }
        rc = duet__wait_idle(&w, progressed);
        if (rc != DUET_OK) break;
    }
    duet__wait_end(&w);
    return rc;
}

int duet_comm_iallreduce(duet_comm *c, void *buf, size_t count, duet_dtype dt,
                         duet_reduce_op op, duet_comm_request **req) {
    *req = NULL;
    DUET_TRY(check_dtype(dt, "iallreduce"));
    DUET_TRY(duet__comm_check_broken(c));
    MPI_Op mop = MPI_OP_NULL;
    DUET_TRY(mpi_op(c, dt, op, &mop));
    size_t nchunks = count == 0 ? 0 : (count - 1) / c->max_chunk + 1;
    if (nchunks > (size_t)INT_MAX)
        return duet__error(DUET_EINVAL, "comm: iallreduce of %zu elements needs too many chunks",
                           count);
    duet_comm_request *r = calloc(1, sizeof *r + nchunks * sizeof(request_part));
    if (r == NULL) return duet__error(DUET_ENOMEM, "comm: out of memory for a request");
    r->c = c;
    r->seq = c->op_seq++;
    snprintf(r->label, sizeof r->label, "%s", c->name);
    bool ring = duet__ring_supports(c, dt);
    size_t es = duet_dtype_size(dt);
    for (size_t off = 0; off < count;) {
        int n = chunk_count(c, count - off);
        request_part *p = &r->parts[r->n];
        char *b = (char *)buf + off * es;
        p->buf = b;
        p->count = (size_t)n;
        p->dt = dt;
        p->scale = op == DUET_REDUCE_AVG && c->size > 1 ? 1.0 / c->size : 1.0;
        int rc;
        if (ring) {
            p->ring_op = true;
            rc = duet__ring_start(&p->ring, c, b, (size_t)n, dt, op, mpi_type(c, dt));
        } else {
            rc = DUET__MPI_CHECK(
                MPI_Iallreduce(MPI_IN_PLACE, b, n, mpi_type(c, dt), mop, c->comm, &p->req));
        }
        if (rc != DUET_OK) {
            /* Parts already started must still finish, or the peers would
             * wait on them forever. */
            request_wait(r, NULL, NULL);
            request_free(r);
            return rc;
        }
        r->n++;
        off += (size_t)n;
    }
    *req = r;
    return DUET_OK;
}

int duet__comm_test_progress(duet_comm_request **req, bool *done, bool *progressed) {
    *done = true;
    *progressed = false;
    duet_comm_request *r = *req;
    if (r == NULL) return DUET_OK;
    int rc = duet__comm_check_broken(r->c);
    if (rc == DUET_OK) rc = request_progress(r, done, progressed);
    if (rc != DUET_OK || *done) {
        request_free(r);
        *req = NULL;
        *done = true;
    }
    return rc;
}

int duet_comm_test(duet_comm_request **req, bool *done) {
    bool progressed;
    return duet__comm_test_progress(req, done, &progressed);
}

int duet_comm_wait(duet_comm_request **req) { return duet_comm_wait_working(req, NULL, NULL); }

int duet_comm_wait_working(duet_comm_request **req, duet_comm_work_fn work, void *ctx) {
    duet_comm_request *r = *req;
    if (r == NULL) return DUET_OK;
    int rc = request_wait(r, work, ctx);
    request_free(r);
    *req = NULL;
    return rc;
}

/* ---- job control ------------------------------------------------------------- */

void duet_comm_abort(duet_comm *c, int errorcode, const char *fmt, ...) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    bool mpi_up = inited && !finalized;
    int rank = 0;
    if (c != NULL) rank = c->rank;
    else if (mpi_up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "duet: rank %d: %s\n", rank, msg);
    fflush(stderr);
    if (mpi_up) MPI_Abort(c != NULL ? c->comm : MPI_COMM_WORLD, errorcode != 0 ? errorcode : 1);
    abort();
}
