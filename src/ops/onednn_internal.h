/* What the ops layer's two users of oneDNN primitives (gemm_bf16.c,
 * conv_onednn.c) share: the process's CPU engine and the status of a failed
 * call. Not installed. */
#ifndef DUET_OPS_ONEDNN_INTERNAL_H
#define DUET_OPS_ONEDNN_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>

#include "ops/ops_internal.h"

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
