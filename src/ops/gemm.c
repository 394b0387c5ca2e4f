/* GEMM, the kernel path and its threads (the one place duet calls a GEMM
 * library), and the per-thread scratch memory the GEMM-based ops reuse.
 *
 * Two GEMM libraries sit behind duet_sgemm:
 * - oneDNN's sgemm JIT-compiles its kernels for the ISA that cpuid reports
 *   (avx2, avx512_core, ...), so a CPU newer than the library still gets
 *   its vector units. The default.
 * - OpenBLAS picks its kernels from a table of CPU models: on a model newer
 *   than 0.3.21 it can fall back to SSE3 ("Prescott") kernels, far slower,
 *   unless OPENBLAS_CORETYPE says otherwise. Used when asked for
 *   (DUET_GEMM=openblas or duet_kernels_configure), or when oneDNN has no
 *   JIT for this CPU (below AVX2).
 * Neither library's own setting is touched: OPENBLAS_CORETYPE still decides
 * OpenBLAS's kernels and ONEDNN_MAX_CPU_ISA still caps oneDNN's; without
 * it, duet caps oneDNN at AVX512-BF16 (not AMX: duet__onednn_isa_init). */
#include "ops/onednn_internal.h"
#include "ops/ops_internal.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

char *openblas_get_corename(void);
char *openblas_get_config(void);

/* ---- the kernel path ------------------------------------------------------ */

static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int kernels_ready;                 /* configured at least once */
static _Atomic int gemm_backend = DUET_GEMM_ONEDNN; /* resolved: never AUTO */
static _Atomic int kernel_threads = 1;
static _Atomic bool use_bf16;
static _Atomic int conv_path = DUET_CONV_AUTO; /* as configured; AUTO: im2col in float32 */
static char bf16_impl[96], bf16_conv_impl[96], conv_impl[96]; /* under kernels_lock */
static _Atomic uint64_t gemm_flops; /* 2 m n k summed over duet_sgemm calls */

/* ---- signals and the libraries' kernels ------------------------------------
 *
 * oneDNN 2.6.3's JIT sgemm corrupts the heap when a signal handler runs on
 * its thread in the middle of a call: a program calling dnnl_sgemm in a
 * loop while a second process sent it SIGUSR1 every 20 us (the handler only
 * counted) aborted with glibc's "corrupted size vs. prev_size" within
 * seconds in every run, and never without the signals. A SIGTERM to a
 * training rank (duet's graceful stop) did the same once in a few runs. So
 * every call into a kernel library runs with the asynchronous signals held
 * on the calling thread, which takes them when the call returns, and the
 * OpenMP threads that run parts of those kernels hold them for good
 * (duet_kernels_configure). Faults (SIGSEGV, SIGBUS, ...) are not held. */
void duet__signals_hold(sigset_t *old) {
    sigset_t s;
    sigfillset(&s);
    const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&s, faults[i]);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

void duet__signals_release(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* The OpenMP team of n threads: every thread but the caller holds the
 * asynchronous signals from now on. */
static void hold_signals_in_team(int n) {
#pragma omp parallel num_threads(n)
    {
        sigset_t before; /* kept: the team holds them for good */
        if (omp_get_thread_num() != 0) duet__signals_hold(&before);
    }
}

duet_kernel_opts duet_kernel_opts_default(void) {
    duet_kernel_opts o;
    memset(&o, 0, sizeof o);
    o.gemm = DUET_GEMM_AUTO;
    o.num_threads = 0;
    o.local_ranks = 1;
    o.bf16 = false;
    o.conv = DUET_CONV_AUTO;
    return o;
}

const char *duet_gemm_backend_name(duet_gemm_backend b) {
    switch (b) {
    case DUET_GEMM_AUTO: return "auto";
    case DUET_GEMM_ONEDNN: return "onednn";
    case DUET_GEMM_OPENBLAS: return "openblas";
    }
    return "?";
}

int duet_gemm_backend_parse(const char *s, duet_gemm_backend *out) {
    static const duet_gemm_backend all[] = {DUET_GEMM_AUTO, DUET_GEMM_ONEDNN,
                                            DUET_GEMM_OPENBLAS};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s != NULL && strcmp(s, duet_gemm_backend_name(all[i])) == 0) {
            *out = all[i];
            return DUET_OK;
        }
    return duet__error(DUET_EINVAL, "unknown GEMM backend '%s': use auto, onednn or openblas",
                       s ? s : "(null)");
}

const char *duet_conv_path_name(duet_conv_path c) {
    switch (c) {
    case DUET_CONV_AUTO: return "auto";
    case DUET_CONV_ONEDNN: return "onednn";
    case DUET_CONV_IM2COL: return "im2col";
    case DUET_CONV_WINOGRAD: return "winograd";
    }
    return "?";
}

int duet_conv_path_parse(const char *s, duet_conv_path *out) {
    static const duet_conv_path all[] = {DUET_CONV_AUTO, DUET_CONV_ONEDNN, DUET_CONV_IM2COL,
                                         DUET_CONV_WINOGRAD};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s != NULL && strcmp(s, duet_conv_path_name(all[i])) == 0) {
            *out = all[i];
            return DUET_OK;
        }
    return duet__error(DUET_EINVAL, "unknown convolution path '%s': use auto, onednn, im2col or winograd",
                       s ? s : "(null)");
}

/* A positive integer from the environment; 0 when unset; -1 when malformed. */
static long env_count(const char *name, long max) {
    const char *env = getenv(name);
    if (env == NULL || env[0] == '\0') return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v < 1 || v > max) return -1;
    return v;
}

int duet_default_num_threads(int local_ranks) {
    int avail = duet_cpu_available_cores(), online = duet_cpu_online_cores();
    if (local_ranks < 1) local_ranks = 1;
    /* The affinity mask says which cores the launcher gave this rank, but
     * not whether other ranks got the same ones (Open MPI's socket binding,
     * or no binding at all): never take more than a fair share of the node. */
    int share = online / local_ranks;
    int n = avail < share ? avail : share;
    return n >= 1 ? n : 1;
}

static bool onednn_has_jit(void) {
    /* Below AVX2 oneDNN's sgemm runs reference loops: OpenBLAS is better. */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2;
}

/* Resolves AUTO and 0 threads (from the environment when use_env) and
 * applies the result. */
static int configure(const duet_kernel_opts *o, bool use_env) {
    duet__onednn_isa_init(); /* before onednn_has_jit's first question */
    duet_gemm_backend b = o->gemm;
    if (b != DUET_GEMM_AUTO && b != DUET_GEMM_ONEDNN && b != DUET_GEMM_OPENBLAS)
        return duet__error(DUET_EINVAL, "kernels: unknown GEMM backend %d", (int)b);
    if (o->num_threads < 0 || o->num_threads > 1024)
        return duet__error(DUET_EINVAL, "kernels: num_threads %d is not in 0..1024 (0: auto)",
                           o->num_threads);
    const char *env = use_env ? getenv("DUET_GEMM") : NULL;
    if (b == DUET_GEMM_AUTO && env != NULL && env[0] != '\0') {
        int rc = duet_gemm_backend_parse(env, &b);
        if (rc != DUET_OK) return duet__error_context(rc, "DUET_GEMM");
    }
    if (b == DUET_GEMM_AUTO) b = onednn_has_jit() ? DUET_GEMM_ONEDNN : DUET_GEMM_OPENBLAS;
    duet_conv_path cp = o->conv;
    if (cp != DUET_CONV_AUTO && cp != DUET_CONV_ONEDNN && cp != DUET_CONV_IM2COL &&
        cp != DUET_CONV_WINOGRAD)
        return duet__error(DUET_EINVAL, "kernels: unknown convolution path %d", (int)cp);
    const char *cenv = use_env ? getenv("DUET_CONV") : NULL;
    if (cp == DUET_CONV_AUTO && cenv != NULL && cenv[0] != '\0') {
        int rc = duet_conv_path_parse(cenv, &cp);
        if (rc != DUET_OK) return duet__error_context(rc, "DUET_CONV");
    }
    int n = o->num_threads;
    if (n == 0) {
        long v = use_env ? env_count("DUET_NUM_THREADS", 1024) : 0;
        if (v < 0)
            return duet__error(DUET_EINVAL, "DUET_NUM_THREADS=%s is not a thread count in 1..1024",
                               getenv("DUET_NUM_THREADS"));
        n = v > 0 ? (int)v : duet_default_num_threads(o->local_ranks);
    }
    char impl[96] = "", bconv_impl[96] = "", fconv_impl[96] = "im2col + sgemm";
    if (cp == DUET_CONV_ONEDNN || cp == DUET_CONV_WINOGRAD)
        DUET_TRY(duet__conv_onednn_check(false, cp == DUET_CONV_WINOGRAD, fconv_impl,
                                         sizeof fconv_impl));
    if (o->bf16) {
        duet_cpu_info ci = duet_cpu_info_get();
        if (!ci.avx512_bf16 && !ci.amx_bf16) {
            char f[256];
            duet_cpu_features_string(&ci, f, sizeof f);
            return duet__error(DUET_EUNSUPPORTED,
                               "mixed precision bf16 needs a CPU with AVX512_BF16 or AMX-BF16; "
                               "this one (%s) has: %s. Use float32 (mixed_precision = \"none\")",
                               ci.brand[0] ? ci.brand : ci.vendor, f[0] ? f : "no AVX");
        }
        DUET_TRY(duet__bf16_check(impl, sizeof impl));
        if (cp != DUET_CONV_IM2COL)
            DUET_TRY(duet__conv_onednn_check(true, cp == DUET_CONV_WINOGRAD, bconv_impl,
                                             sizeof bconv_impl));
        else snprintf(bconv_impl, sizeof bconv_impl, "im2col + matmul");
    }
    int avail = duet_cpu_available_cores();
    if (n > avail)
        duet_log(DUET_LOG_WARN,
                 "kernels: %d threads on %d core%s this process may use: they will take turns. "
                 "Under mpirun, give the ranks more cores (--bind-to none, or --map-by "
                 "slot:PE=%d) or lower num_threads / DUET_NUM_THREADS",
                 n, avail, avail == 1 ? "" : "s", n);
    pthread_mutex_lock(&kernels_lock);
    snprintf(bf16_impl, sizeof bf16_impl, "%s", impl);
    snprintf(bf16_conv_impl, sizeof bf16_conv_impl, "%s", bconv_impl);
    snprintf(conv_impl, sizeof conv_impl, "%s", fconv_impl);
    atomic_store(&use_bf16, o->bf16);
    atomic_store(&conv_path, (int)cp);
    /* Both libraries get the count: oneDNN runs on OpenMP, and OpenBLAS
     * would otherwise start a thread per core of its own. */
    omp_set_num_threads(n);
    hold_signals_in_team(n);
    openblas_set_num_threads(n);
    atomic_store(&gemm_backend, (int)b);
    atomic_store(&kernel_threads, n);
    atomic_store_explicit(&kernels_ready, 1, memory_order_release);
    pthread_mutex_unlock(&kernels_lock);
    return DUET_OK;
}

int duet_kernels_configure(const duet_kernel_opts *opts) {
    duet_kernel_opts o = opts != NULL ? *opts : duet_kernel_opts_default();
    return configure(&o, true);
}

/* The first GEMM of a process that never configured: the defaults, with
 * the launcher's count of ranks on this node when it exports one. */
static void kernels_ensure(void) {
    if (atomic_load_explicit(&kernels_ready, memory_order_acquire)) return;
    duet_kernel_opts o = duet_kernel_opts_default();
    long local = env_count("OMPI_COMM_WORLD_LOCAL_SIZE", 1 << 20);
    if (local <= 0) local = env_count("MPI_LOCALNRANKS", 1 << 20);
    if (local > 0) o.local_ranks = (int)local;
    if (configure(&o, true) != DUET_OK) {
        /* A malformed DUET_GEMM / DUET_NUM_THREADS: say so once, then run
         * the built-in defaults. duet_kernels_configure reports it as an
         * error to the runner and the CLI. */
        duet_log(DUET_LOG_WARN, "%s; using the defaults", duet_last_error());
        DUET_ASSERT(configure(&o, false) == DUET_OK);
    }
}

int duet__blas_init(void) {
    kernels_ensure();
    return atomic_load(&kernel_threads);
}

int duet__par_threads(int64_t work) {
    if (work < DUET__PAR_MIN_WORK) return 1;
    kernels_ensure();
    int64_t t = atomic_load_explicit(&kernel_threads, memory_order_relaxed);
    int64_t most = work / (DUET__PAR_MIN_WORK / 2);
    return (int)(t < most ? t : most);
}

void duet__gemm_count_flops(uint64_t n) {
    atomic_fetch_add_explicit(&gemm_flops, n, memory_order_relaxed);
}

bool duet__conv_onednn_on(bool *bf16) {
    *bf16 = atomic_load_explicit(&use_bf16, memory_order_relaxed);
    const int path = atomic_load_explicit(&conv_path, memory_order_relaxed);
    return path == DUET_CONV_ONEDNN || path == DUET_CONV_WINOGRAD ||
           (*bf16 && path != DUET_CONV_IM2COL);
}

bool duet__conv_winograd_on(void) {
    return atomic_load_explicit(&conv_path, memory_order_relaxed) == DUET_CONV_WINOGRAD;
}

uint64_t duet_kernels_gemm_flops(void) {
    return atomic_load_explicit(&gemm_flops, memory_order_relaxed);
}

int duet_kernels_info_get(duet_kernels_info *out) {
    kernels_ensure();
    memset(out, 0, sizeof *out);
    out->gemm = (duet_gemm_backend)atomic_load(&gemm_backend);
    out->num_threads = atomic_load(&kernel_threads);
    const dnnl_version_t *v = dnnl_version();
    const char *isa = "?";
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: isa = "sse41"; break;
    case dnnl_cpu_isa_avx: isa = "avx"; break;
    case dnnl_cpu_isa_avx2: isa = "avx2"; break;
    case dnnl_cpu_isa_avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
    default: break;
    }
    snprintf(out->onednn, sizeof out->onednn, "oneDNN %d.%d.%d %s", v->major, v->minor, v->patch,
             isa);
    const char *core = openblas_get_corename();
    const char *cfg = openblas_get_config();
    /* The config string starts "OpenBLAS 0.3.21 ..."; keep name + version. */
    int vlen = 0;
    if (cfg != NULL && strncmp(cfg, "OpenBLAS ", 9) == 0) vlen = 9 + (int)strcspn(cfg + 9, " ");
    snprintf(out->openblas, sizeof out->openblas, "%.*s %s", vlen > 0 ? vlen : 8,
             vlen > 0 ? cfg : "OpenBLAS", core != NULL ? core : "?");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (ct != NULL && ct[0] != '\0')
        snprintf(out->openblas + strlen(out->openblas),
                 sizeof out->openblas - strlen(out->openblas), " (OPENBLAS_CORETYPE=%s)", ct);
    pthread_mutex_lock(&kernels_lock);
    out->bf16 = atomic_load(&use_bf16);
    snprintf(out->bf16_impl, sizeof out->bf16_impl, "%s", bf16_impl);
    snprintf(out->bf16_conv_impl, sizeof out->bf16_conv_impl, "%s", bf16_conv_impl);
    snprintf(out->conv_impl, sizeof out->conv_impl, "%s", conv_impl);
    const int cp = atomic_load(&conv_path);
    out->conv = cp == DUET_CONV_ONEDNN || cp == DUET_CONV_WINOGRAD ? (duet_conv_path)cp
                                                                   : DUET_CONV_IM2COL;
    pthread_mutex_unlock(&kernels_lock);
    char mp[256] = "";
    if (out->bf16)
        snprintf(mp, sizeof mp, ", bf16 inputs on oneDNN matmul %s and convolution %s",
                 out->bf16_impl, out->bf16_conv_impl);
    snprintf(out->summary, sizeof out->summary, "GEMM: %s, conv %s%s, %d thread%s",
             out->gemm == DUET_GEMM_ONEDNN ? out->onednn : out->openblas, out->conv_impl, mp,
             out->num_threads, out->num_threads == 1 ? "" : "s");
    return DUET_OK;
}

/* sgemm's product; sgemm holds the signals around it. */
static int sgemm_run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, const uint16_t *b_bf16,
                     int64_t ldb, float beta, float *c, int64_t ldc, bool held_a) {
    if (b_bf16 != NULL) {
        /* No float32 B to fall back on: a failure goes to the caller. */
        DUET_ASSERT(atomic_load_explicit(&use_bf16, memory_order_relaxed) && alpha == 1.0f);
        return duet__sgemm_bf16(trans_a, trans_b, m, n, k, a, lda, NULL, b_bf16, ldb, beta, c,
                                ldc, held_a);
    }
    if (atomic_load_explicit(&use_bf16, memory_order_relaxed) && alpha == 1.0f &&
        (beta == 0.0f || beta == 1.0f)) {
        if (duet__sgemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, NULL, ldb, beta, c, ldc,
                             held_a) == DUET_OK)
            return DUET_OK;
        /* Out of memory for the rounded copies (the primitive itself was
         * checked when bf16 was switched on): this product runs in float32. */
        duet_log(DUET_LOG_WARN, "bf16 GEMM: %s; running it in float32", duet_last_error());
    }
    if (atomic_load_explicit(&gemm_backend, memory_order_relaxed) == DUET_GEMM_ONEDNN) {
        /* oneDNN's sgemm is row-major, like ours. It fails only on bad
         * arguments, which the asserts above and the ops' checks exclude. */
        dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                      a, lda, b, ldb, beta, c, ldc);
        DUET_ASSERT(st == dnnl_success);
        return DUET_OK;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return DUET_OK;
}

/* The one GEMM behind duet_sgemm and the internal variants: B is b (float32,
 * leading dimension ldb) or b_bf16 (already rounded, compact; bf16 mixed
 * precision only, alpha 1, and then the only case that can fail). */
static int sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, const uint16_t *b_bf16,
                 int64_t ldb, float beta, float *c, int64_t ldc, bool held_a) {
    /* BLAS takes int sizes; every op's shapes are checked well below this. */
    DUET_ASSERT(m >= 0 && n >= 0 && k >= 0);
    DUET_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    DUET_ASSERT(lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX);
    if (m == 0 || n == 0) return DUET_OK;
    kernels_ensure();
    atomic_fetch_add_explicit(&gemm_flops, 2u * (uint64_t)m * (uint64_t)n * (uint64_t)k,
                              memory_order_relaxed);
    if (k == 0) {
        /* op(A) op(B) is empty: C = beta C (beta 0 clears, as BLAS does). */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return DUET_OK;
    }
    sigset_t old;
    duet__signals_hold(&old);
    int rc = sgemm_run(trans_a, trans_b, m, n, k, alpha, a, lda, b, b_bf16, ldb, beta, c, ldc,
                       held_a);
    duet__signals_release(&old);
    return rc;
}

void duet_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                int64_t ldc) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, NULL, ldb, beta, c, ldc, false);
}

void duet__sgemm_held_a(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc) {
    sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, NULL, ldb, beta, c, ldc, true);
}

bool duet__gemm_bf16_on(void) {
    kernels_ensure();
    return atomic_load_explicit(&use_bf16, memory_order_relaxed);
}

int duet__sgemm_rounded_b(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          const float *a, int64_t lda, const uint16_t *b, float beta, float *c,
                          int64_t ldc, bool held_a) {
    return sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, NULL, b, trans_b ? k : n, beta, c, ldc,
                 held_a);
}

/* ---- per-thread scratch ------------------------------------------------- */

typedef struct scratch {
    float *buf[DUET__SCRATCH_SLOTS];
    size_t cap[DUET__SCRATCH_SLOTS];
} scratch;

/* The fast path reads the thread-local pointer; the key only exists so that
 * a thread's buffers are freed when it exits. */
static _Thread_local scratch *tls_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_rc;

static void scratch_free(void *p) {
    scratch *s = p;
    if (s == NULL) return;
    for (int i = 0; i < DUET__SCRATCH_SLOTS; i++) duet_aligned_free(s->buf[i]);
    free(s);
}

static void scratch_key_make(void) { scratch_key_rc = pthread_key_create(&scratch_key, scratch_free); }

float *duet__scratch(int slot, size_t nfloats) {
    DUET_ASSERT(slot >= 0 && slot < DUET__SCRATCH_SLOTS);
    scratch *s = tls_scratch;
    if (s == NULL) {
        pthread_once(&scratch_once, scratch_key_make);
        if (scratch_key_rc != 0) {
            duet__error(DUET_ENOMEM, "ops: cannot create the thread-local scratch key");
            return NULL;
        }
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            duet__error(DUET_ENOMEM, "ops: out of memory for the scratch table");
            return NULL;
        }
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            duet__error(DUET_ENOMEM, "ops: cannot register the thread-local scratch");
            return NULL;
        }
        tls_scratch = s;
    }
    if (s->cap[slot] < nfloats) {
        /* Grow by half again so that a sequence of slightly larger layers
         * does not reallocate every time. */
        size_t want = nfloats + nfloats / 2;
        duet_aligned_free(s->buf[slot]);
        s->buf[slot] = duet_aligned_alloc(want * sizeof(float));
        s->cap[slot] = s->buf[slot] != NULL ? want : 0;
        if (s->buf[slot] == NULL) {
            duet__error(DUET_ENOMEM, "ops: out of memory for %zu floats of scratch", want);
            return NULL;
        }
    }
    return s->buf[slot];
}
