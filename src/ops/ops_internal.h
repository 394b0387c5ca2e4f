/* Private helpers shared by the GEMM-based ops (conv, linear, batch norm,
 * pooling) and bench/ops.c. Not installed. */
#ifndef DUET_OPS_INTERNAL_H
#define DUET_OPS_INTERNAL_H

#include "duet/ops.h"

/* Sets OpenBLAS's thread count once per process: 1 by default (duet runs one
 * or two MPI ranks on a few cores, and BLAS threads would fight the ranks),
 * or the value of the environment variable DUET_BLAS_THREADS. duet_sgemm
 * calls it; code that calls cblas directly (the benchmark) calls it first.
 * Returns the thread count in effect. */
int duet__blas_init(void);

/* Per-thread scratch buffers, reused across calls so that an op does not
 * allocate its im2col columns on every call. Slot i in
 * [0, DUET__SCRATCH_SLOTS) holds at least nfloats floats (64-byte aligned,
 * uninitialised) until the next call for the same slot on this thread, which
 * may move it. NULL when out of memory (message set). Freed at thread exit. */
#define DUET__SCRATCH_SLOTS 4
float *duet__scratch(int slot, size_t nfloats);

#endif
