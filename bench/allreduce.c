/* Gradient synchronisation bandwidth and overlap.
 *
 *   mpiexec -n 2 ./bench_allreduce [--reps N] [--cap MB] [--factor F] [--sweep BYTES]
 *                                  [--max-bytes BYTES]
 *
 * For gradient sizes from 100 KB to 64 MB, in one run:
 *   raw      bus bandwidth of one blocking MPI_Allreduce of the whole buffer
 *   iallred  the same through MPI_Iallreduce + MPI_Wait (Open MPI's libnbc)
 *   ring     the same through duet_comm_iallreduce + wait (duet's ring, what
 *            the DDP's buckets use)
 *   ddp      a DDP's synchronisation of the same bytes (arm, mark every
 *            parameter ready in backward order, finalize), with its buckets
 *   exposed  a simulated backward: compute between the ready hooks (F times
 *            the raw allreduce time in all, in slices of at most 200 us with
 *            progress between them, as the backward engine drives progress
 *            between nodes); the time from the moment the last rank finished
 *            its backward until the synchronisation completed everywhere, as
 *            a share of the raw allreduce time of the same bytes.
 * Bus bandwidth = bytes * 2(n-1)/n / time (NCCL's convention). First table:
 * medians over the repetitions (the slowest rank's); second: the best
 * repetition, which on a shared machine is the one least disturbed by other
 * processes. With --sweep BYTES, also bucket
 * caps from 0.25 to 64 MiB on a gradient of BYTES (how docs/ddp.md chose the
 * default). --max-bytes skips the larger sizes. The parameters of the fake network follow the proportions of
 * SRGAN's discriminator (ModifiedVGG), scaled to each total. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duet/duet.h"

/* ModifiedVGG (128x128 input, 64 channels) parameter sizes in registration
 * order: conv weights and biases, two linear layers. */
static const double vgg_sizes[] = {
    1728,    64,  65536,   64,  73728,  128, 262144, 128, 294912, 256, 1048576, 256,
    1179648, 512, 4194304, 512, 2359296, 512, 4194304, 512, 819200, 100, 100,     1};
#define NVGG (sizeof vgg_sizes / sizeof vgg_sizes[0])

static int rank, size;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stat2 {
    double med, min;
} stat2;

/* Median and minimum of this rank's samples, then the slowest rank's. */
static stat2 summarize(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double m[2] = {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0]};
    MPI_Allreduce(MPI_IN_PLACE, m, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return (stat2){m[0], m[1]};
}

static double busbw(size_t bytes, double t) {
    double f = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    return (double)bytes * f / t / 1e9;
}

static const duet_module_type grads_type = {"Grads", NULL, NULL};

/* A module whose parameters total `floats` floats in VGG proportions. */
static duet_module *fake_net(size_t floats) {
    double total = 0;
    for (size_t i = 0; i < NVGG; i++) total += vgg_sizes[i];
    duet_module *m = NULL;
    if (duet_module_create(&grads_type, NULL, &m) != DUET_OK) return NULL;
    size_t left = floats;
    for (size_t i = 0; i < NVGG; i++) {
        int64_t n = i + 1 == NVGG ? (int64_t)left : (int64_t)(vgg_sizes[i] / total * (double)floats);
        if (n < 1) n = 1;
        if ((size_t)n > left) n = (int64_t)(left > 0 ? left : 1);
        left -= (size_t)n < left ? (size_t)n : left;
        duet_tensor *t = NULL;
        if (duet_tensor_create(1, &n, &t) != DUET_OK) return NULL;
        t->requires_grad = true;
        char name[16];
        snprintf(name, sizeof name, "p%zu", i);
        if (duet_module_add_param(m, name, t) != DUET_OK) return NULL;
    }
    return m;
}

static void spin(double seconds) {
    double end = duet_time_now() + seconds;
    volatile double x = 1.0;
    while (duet_time_now() < end) x = x * 1.0000001 + 1e-9;
}

typedef struct row {
    stat2 raw, iall, ring, ddp, exposed;
    size_t buckets;
} row;

/* One synchronisation; compute_s > 0 simulates a backward around it.
 * Returns the time from the last rank's end of backward to the last rank's
 * end of synchronisation (exposed communication). */
static double ddp_pass(duet_module *ddp, double compute_s, size_t floats) {
    size_t nt = duet_ddp_num_tracked(ddp);
    duet_ddp_prepare(ddp, NULL, 0);
    for (size_t j = 0; j < nt; j++) {
        duet_tensor *p = duet_ddp_tracked_param(ddp, nt - 1 - j);
        /* This layer's share of the backward's compute, in node-sized
         * slices with progress in between. */
        double c = compute_s * (double)p->numel / (double)floats;
        while (c > 0) {
            double s = c < 200e-6 ? c : 200e-6;
            spin(s);
            c -= s;
            duet_ddp_progress(ddp);
        }
        duet_ddp_mark_ready(ddp, nt - 1 - j);
    }
    double t[2];
    t[0] = duet_time_now(); /* CLOCK_MONOTONIC: one clock for all ranks */
    int rc = duet_ddp_finalize(ddp);
    if (rc != DUET_OK) duet_comm_abort(NULL, 1, "bench: %s", duet_last_error());
    t[1] = duet_time_now();
    MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t[1] - t[0];
}

static row measure(duet_comm *comm, size_t bytes, double cap_mb, double factor, int reps) {
    row r;
    memset(&r, 0, sizeof r);
    size_t floats = bytes / sizeof(float);
    float *buf = malloc(floats * sizeof *buf);
    double *t = malloc((size_t)reps * sizeof *t);
    for (size_t i = 0; i < floats; i++) buf[i] = 1.0f;
    /* Raw blocking allreduce (one warm-up). */
    for (int k = -1; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (k >= 0) t[k] = MPI_Wtime() - t0;
    }
    r.raw = summarize(t, reps);
    for (int k = -1; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, buf, (int)floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (k >= 0) t[k] = MPI_Wtime() - t0;
    }
    r.iall = summarize(t, reps);
    for (int k = -1; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        duet_comm_request *req = NULL;
        if (duet_comm_iallreduce(comm, buf, floats, DUET_DTYPE_F32, DUET_REDUCE_SUM, &req) != DUET_OK ||
            duet_comm_wait(&req) != DUET_OK)
            duet_comm_abort(NULL, 1, "bench: %s", duet_last_error());
        if (k >= 0) t[k] = MPI_Wtime() - t0;
    }
    r.ring = summarize(t, reps);
    free(buf);

    duet_ddp_opts o = duet_ddp_opts_default();
    if (cap_mb > 0) o.bucket_cap_mb = cap_mb;
    o.broadcast_buffers = false;
    duet_module *ddp = NULL;
    if (duet_ddp_create(fake_net(floats), comm, &o, &ddp) != DUET_OK)
        duet_comm_abort(NULL, 1, "bench: %s", duet_last_error());
    size_t count = 0;
    float *g = duet_ddp_grad_buffer(ddp, &count);
    for (size_t i = 0; i < count; i++) g[i] = 1.0f; /* the average of ones stays one */
    r.buckets = duet_ddp_num_buckets(ddp);
    for (int k = -1; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        ddp_pass(ddp, 0, floats);
        if (k >= 0) t[k] = MPI_Wtime() - t0;
    }
    r.ddp = summarize(t, reps);
    for (int k = -1; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double e = ddp_pass(ddp, factor * r.raw.med, floats);
        if (k >= 0) t[k] = e;
    }
    r.exposed = summarize(t, reps);
    duet_module_destroy(ddp);
    free(t);
    return r;
}

int main(int argc, char **argv) {
    int reps = 9;
    double cap = 0, factor = 2.0;
    size_t sweep = 0, max_bytes = (size_t)-1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cap") == 0 && i + 1 < argc) cap = atof(argv[++i]);
        else if (strcmp(argv[i], "--factor") == 0 && i + 1 < argc) factor = atof(argv[++i]);
        else if (strcmp(argv[i], "--sweep") == 0 && i + 1 < argc) sweep = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
            max_bytes = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--reps N] [--cap MB] [--factor F] [--sweep BYTES] "
                            "[--max-bytes BYTES]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    duet_comm *comm = NULL;
    if (duet_comm_world(&comm) != DUET_OK) {
        fprintf(stderr, "bench: %s\n", duet_last_error());
        return 1;
    }
    rank = duet_comm_rank(comm);
    size = duet_comm_size(comm);
    duet_ddp_opts def = duet_ddp_opts_default();
    if (rank == 0) {
        printf("# %d ranks, %d reps, bucket cap %.2f MiB (first %.2f), simulated backward "
               "compute = %.1f x raw allreduce time\n",
               size, reps, cap > 0 ? cap : def.bucket_cap_mb, def.first_bucket_cap_mb, factor);
        printf("# busbw in GB/s = bytes * 2(n-1)/n / time%s\n",
               size == 1 ? " (n = 1: bytes / time, no communication)" : "");
    }
    const size_t sizes[] = {100 * 1024, 256 * 1024, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    row rows[NS];
    size_t ns = 0;
    for (; ns < NS && sizes[ns] <= max_bytes; ns++) rows[ns] = measure(comm, sizes[ns], cap, factor, reps);
    for (int best = 0; best < 2 && rank == 0; best++) {
        printf("\n# %s\n", best ? "best repetition" : "median of the repetitions");
        printf("%10s %8s %8s %8s %8s %8s %7s %8s %8s %8s\n", "bytes", "raw", "iallred", "ring",
               "ddp", "ddp/raw", "buckets", "raw_ms", "exp_ms", "exposed");
        for (size_t i = 0; i < ns; i++) {
            const row *r = &rows[i];
            double raw = best ? r->raw.min : r->raw.med, iall = best ? r->iall.min : r->iall.med;
            double ring = best ? r->ring.min : r->ring.med, ddp = best ? r->ddp.min : r->ddp.med;
            double exp = best ? r->exposed.min : r->exposed.med;
            printf("%10zu %8.2f %8.2f %8.2f %8.2f %7.1f%% %7zu %8.3f %8.3f %7.1f%%\n", sizes[i],
                   busbw(sizes[i], raw), busbw(sizes[i], iall), busbw(sizes[i], ring),
                   busbw(sizes[i], ddp), 100.0 * raw / ddp, r->buckets, raw * 1e3, exp * 1e3,
                   100.0 * exp / raw);
        }
    }
    if (sweep > 0) {
        const double caps[] = {0.25, 0.5, 1, 2, 4, 8, 16, 25, 64};
        size_t bytes = sweep;
        if (rank == 0) {
            printf("\n# bucket cap sweep, %zu-byte gradient (median; best)\n", bytes);
            printf("%8s %7s %8s %8s %8s %8s %8s %8s\n", "cap_MiB", "buckets", "raw", "ddp",
                   "exposed", "raw_b", "ddp_b", "exp_b");
        }
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
            row r = measure(comm, bytes, caps[i], factor, reps);
            if (rank == 0)
                printf("%8.2f %7zu %8.2f %8.2f %7.1f%% %8.2f %8.2f %7.1f%%\n", caps[i], r.buckets,
                       busbw(bytes, r.raw.med), busbw(bytes, r.ddp.med),
                       100.0 * r.exposed.med / r.raw.med, busbw(bytes, r.raw.min),
                       busbw(bytes, r.ddp.min), 100.0 * r.exposed.min / r.raw.min);
            fflush(stdout);
        }
    }
    duet_comm_destroy(comm);
    duet_comm_finalize();
    return 0;
}
