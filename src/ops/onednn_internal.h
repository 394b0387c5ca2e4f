/* What the ops layer's two users of oneDNN primitives (gemm_bf16.c,
 * conv_onednn.c) share: the process's CPU engine and the status of a failed
 * call. Not installed. */
#ifndef DUET_OPS_ONEDNN_INTERNAL_H
#define DUET_OPS_ONEDNN_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>

#include "ops/ops_internal.h"

/* Caps the ISA oneDNN's JIT may use at AVX512-BF16, before oneDNN's first
 * call (every path to oneDNN goes through here first; later calls do
 * nothing). oneDNN 2.6's AMX kernels: measured on a Sapphire Rapids guest
 * (Linux 6.18, 2026-12-07), its bf16 matmul run after its AMX convolution
 * primitives dies with SIGILL (ILL_ILLOPN at tdpbf16ps on an OpenMP worker,
 * whose tile configuration is not loaded), which takes the process down;
 * the AVX512-BF16 kernels run the same calls. ONEDNN_MAX_CPU_ISA (or
 * DNNL_MAX_CPU_ISA) set in the environment is left to decide. */
void duet__onednn_isa_init(void);

/* The CPU engine, made on first use and kept for the process (gemm_bf16.c).
 * DUET_OK, or DUET_EUNSUPPORTED when oneDNN cannot make one. */
int duet__dnnl_engine(dnnl_engine_t *out);

/* DUET_EUNSUPPORTED "<who>: oneDNN <what> failed (status N)". */
int duet__dnnl_fail(const char *who, dnnl_status_t st, const char *what);

/* Returns duet__dnnl_fail(who, ...) from the enclosing function when call
 * does not succeed. */
#define DUET__DNNL_TRY(who, call, what)                                  \
    do {                                                                 \
        dnnl_status_t st_ = (call);                                      \
        if (st_ != dnnl_success) return duet__dnnl_fail(who, st_, what); \
    } while (0)

#endif
