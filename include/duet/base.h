/* duet/base.h — status codes, error messages, asserts, logging, aligned
 * allocation and a counter-based seeded RNG.
 *
 * Usage:
 *
 *   duet_tensor *t = NULL;
 *   int rc = duet_tensor_create(1, (int64_t[]){0}, &t);   // fails: empty dim
 *   if (rc != DUET_OK)
 *       fprintf(stderr, "%s: %s\n", duet_err_name(rc), duet_last_error());
 *
 *   duet_rng rng = duet_rng_make(42, 0);   // seed 42, stream 0
 *   float u = duet_rng_uniform(&rng);      // [0, 1)
 *   duet_rng saved = rng;                  // the state is a plain value
 */
#ifndef DUET_BASE_H
#define DUET_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DUET_VERSION_STRING "0.1.0"

/* ---- status codes ------------------------------------------------------ */

/* X(name, value, description): one list makes the enum, duet_strerror() and
 * duet_err_name(). */
#define DUET_STATUS_LIST(X)                                                    \
    X(OK, 0, "success")                                                        \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(ESHAPE, -3, "shape mismatch")                                            \
    X(EIO, -4, "input/output error")                                           \
    X(EFORMAT, -5, "malformed file or data")                                   \
    X(ECONFIG, -6, "bad configuration")                                        \
    X(EMPI, -7, "MPI error")                                                   \
    X(ESTATE, -8, "operation not valid in the current state")                  \
    X(ENOTFOUND, -9, "not found")                                              \
    X(EUNSUPPORTED, -10, "not supported")                                      \
    X(ENUMERIC, -11, "non-finite value")                                       \
    X(EMISMATCH, -12, "processes disagree")                                    \
    X(EUNUSED, -13, "parameters got no gradient")                             \
    X(ETIMEOUT, -14, "a collective made no progress within the timeout")     \
    X(ESTOPPED, -15, "stopped by a signal")                                   \
    X(EDEVICE, -16, "device error (CUDA, cuDNN, cuBLAS, NCCL) or mixed devices")

enum duet_status {
#define DUET__STATUS_ENUM(name, value, desc) DUET_##name = value,
    DUET_STATUS_LIST(DUET__STATUS_ENUM)
#undef DUET__STATUS_ENUM
};

/* Short description of a status code ("shape mismatch"). Static string. */
const char *duet_strerror(int status);
/* Name of a status code ("DUET_ESHAPE"). Static string. */
const char *duet_err_name(int status);

/* The detailed message of the last failure on this thread (what happened and
 * what to do). Borrowed; valid until the next failing call on this thread.
 * Empty string when nothing failed. */
const char *duet_last_error(void);
void duet_clear_error(void);

/* Records a detailed message for duet_last_error() and returns `status`, so
 * that library code can write `return duet__error(DUET_EINVAL, "...", ...);`. */
int duet__error(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "context: " and returns `status`. */
int duet__error_context(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- asserts (bugs only) ----------------------------------------------- */

void duet__assert_fail(const char *file, int line, const char *expr)
    __attribute__((noreturn));
#define DUET_ASSERT(expr)                                                      \
    do {                                                                       \
        if (!(expr)) duet__assert_fail(__FILE__, __LINE__, #expr);             \
    } while (0)

/* Propagates a failing status: `DUET_TRY(duet_x(...));` */
#define DUET_TRY(expr)                                                         \
    do {                                                                       \
        int duet__rc = (expr);                                                 \
        if (duet__rc != DUET_OK) return duet__rc;                              \
    } while (0)

/* ---- logging ------------------------------------------------------------ */

enum duet_log_level {
    DUET_LOG_DEBUG = 0,
    DUET_LOG_INFO = 1,
    DUET_LOG_WARN = 2,
    DUET_LOG_ERROR = 3,
    DUET_LOG_OFF = 4
};

/* Messages below `level` are dropped. Default DUET_LOG_INFO, or the value of
 * the environment variable DUET_LOG (debug, info, warn, error, off). */
void duet_log_set_level(int level);
int duet_log_get_level(void);
/* Tells the logger this process's rank. By default only rank 0 prints
 * (errors print on every rank); all_ranks=true prints on every rank with a
 * "[rank r]" prefix. */
void duet_log_set_rank(int rank, bool all_ranks);
/* Info and debug lines go to stdout (default), or to stderr with false:
 * for a program whose stdout is data (`duet test --json > result.json`). */
void duet_log_set_stdout(bool info_to_stdout);
void duet_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs on this rank whatever the rank filter, with the "[rank r]" prefix:
 * for what only this rank can see (its own wait for a stalled peer). */
void duet_log_local(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define DUET_LOG_DEBUG_(...) duet_log(DUET_LOG_DEBUG, __VA_ARGS__)

/* ---- aligned allocation -------------------------------------------------- */

#define DUET_ALIGNMENT 64
/* 64-byte aligned, uninitialised; NULL on failure (never aborts). bytes == 0
 * returns a valid unique pointer. Free with duet_aligned_free (NULL ok). */
void *duet_aligned_alloc(size_t bytes);
void *duet_aligned_calloc(size_t bytes);
void duet_aligned_free(void *p);
/* Bytes handed out by duet_aligned_alloc and not yet freed (tensor data,
 * gradients, op state; blocks kept in the allocator's cache for reuse do
 * not count), and the most there were at once since the last
 * duet_alloc_reset_peak (or the start). Process-wide. */
void duet_alloc_stats(size_t *live_bytes, size_t *peak_bytes);
void duet_alloc_reset_peak(void);

/* ---- devices ---------------------------------------------------------------
 * Where a tensor's storage lives: the CPU, CUDA device N, or the simulated
 * device sim:N. A plain value; zero-initialised it is the CPU. The CUDA
 * backend exists when duet was built with the CUDA toolkit
 * (duet_cuda_built()); a CUDA device must also be visible to the process
 * (duet_cuda_device_count()).
 *
 * sim:N (N = 0..DUET_SIM_MAX_DEVICES-1) is a GPU played by the CPU, in
 * every build: its memory is reserved address space the host cannot read
 * (a sim tensor's duet_tensor_host_data is NULL, and its data pointer is a
 * handle: dereferenced on the host it faults at once), its kernels are the
 * CPU kernels run on a worker thread per stream, asynchronously from the
 * host, and its copies to and from the host are counted (duet_sim_stats).
 * A missing synchronisation shows up on the CPU as a wrong result. Its
 * environment: DUET_SIM_MEMORY (arena bytes per device, default 8 GiB of
 * address space, with an optional K, M or G suffix), DUET_SIM_SYNC=1
 * (every launch waits until it ran). */

typedef enum duet_device_type {
    DUET_DEVICE_CPU = 0,
    DUET_DEVICE_CUDA = 1,
    DUET_DEVICE_SIM = 2
} duet_device_type;

typedef struct duet_device {
    duet_device_type type;
    int index; /* CUDA device ordinal or sim device number; 0 for the CPU */
} duet_device;

#define DUET_DEVICE_STR_MAX 24
#define DUET_SIM_MAX_DEVICES 8

static inline duet_device duet_device_cpu(void) { return (duet_device){DUET_DEVICE_CPU, 0}; }
static inline duet_device duet_device_cuda(int index) {
    return (duet_device){DUET_DEVICE_CUDA, index};
}
static inline duet_device duet_device_sim(int index) {
    return (duet_device){DUET_DEVICE_SIM, index};
}
static inline bool duet_device_equal(duet_device a, duet_device b) {
    return a.type == b.type && (a.type == DUET_DEVICE_CPU || a.index == b.index);
}
/* "cpu", "cuda" (device 0), "cuda:N" (as PyTorch writes them), "sim" (sim:0)
 * or "sim:N". Only the spelling is checked: DUET_EINVAL names the text
 * otherwise. Whether the device exists is duet_device_check's question. */
int duet_device_parse(const char *s, duet_device *out);
/* "cpu", "cuda:N" or "sim:N" into buf (DUET_DEVICE_STR_MAX is enough);
 * returns buf. */
char *duet_device_str(duet_device d, char *buf, size_t size);
/* DUET_OK when tensors can be made on d: always for the CPU and for sim:0
 * to sim:7; for CUDA, when duet was built with CUDA and device d.index is
 * visible. Otherwise DUET_EDEVICE with a message that says which ("duet
 * was built without CUDA", "no CUDA device is visible", "cuda:3 asked for,
 * 1 visible", "sim:9 asked for, sim:0 to sim:7 exist"). */
int duet_device_check(duet_device d);
/* `git describe --always --dirty --tags` of the source duet was built from
 * ("unknown" outside a git checkout); in `duet --version`, `duet info` and
 * every run's header records. */
const char *duet_git_describe(void);

/* Waits until every stream of device d has run what was queued on it, and
 * returns the first kernel error that stuck to one of them (DUET_EDEVICE or
 * the kernel's own status, its message naming the op). DUET_OK at once on
 * the CPU. */
int duet_device_synchronize(duet_device d);
/* Whether this build has the CUDA backend (CMake's DUET_CUDA). */
bool duet_cuda_built(void);
/* CUDA devices visible to this process: 0 without the CUDA backend, without
 * a driver, or with none visible (never an error). */
int duet_cuda_device_count(void);
/* The counters of sim:N since the start or the last duet_sim_stats_reset:
 * copies host to device (h2d), device to host (d2h) and device to device
 * (d2d) with their bytes, kernels queued (launches, fills included) and
 * host waits (syncs: duet_device_synchronize, stream and event waits;
 * a blocking copy counts as a copy only). */
typedef struct duet_sim_stats {
    uint64_t h2d_copies, d2h_copies, d2d_copies;
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes;
    uint64_t launches, syncs;
} duet_sim_stats;
/* sim:index's counters into *out; DUET_EINVAL for an index outside 0..7. */
int duet_sim_stats_get(int index, duet_sim_stats *out);
/* Sets sim:index's counters to zero (an index outside 0..7: nothing). */
void duet_sim_stats_reset(int index);
/* Bytes of device memory the caching allocator of device d has handed out
 * and not yet taken back, and the most at once since the last reset (or
 * the start), like duet_alloc_stats; and the bytes it holds from the driver
 * (handed out plus cached). Zeros for a device never used. */
void duet_device_alloc_stats(duet_device d, size_t *live_bytes, size_t *peak_bytes,
                             size_t *reserved_bytes);
void duet_device_alloc_reset_peak(duet_device d);
/* The GPU lines of `duet info`: CUDA runtime and driver, cuDNN, cuBLASLt
 * and NCCL versions and each visible GPU, "no GPU visible" where there is
 * none, or that duet was built without CUDA. */
int duet_cuda_info_print(FILE *f);

/* ---- RNG ------------------------------------------------------------------ */

/* Counter-based generator: every draw is a hash of (seed, stream, counter),
 * so the whole state is these three numbers. Copy the struct to save it.
 * Streams with different ids are independent (one per sample, per rank...). */
typedef struct duet_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t counter;
} duet_rng;

duet_rng duet_rng_make(uint64_t seed, uint64_t stream);
uint64_t duet_rng_u64(duet_rng *rng);
/* Uniform in [0, 1), 24 random bits. */
float duet_rng_uniform(duet_rng *rng);
/* Uniform double in [0, 1), 53 random bits. */
double duet_rng_uniform_double(duet_rng *rng);
/* Standard normal (Box-Muller on two fresh uniforms). */
float duet_rng_normal(duet_rng *rng);
/* Integer uniform in [lo, hi] inclusive, unbiased. Requires lo <= hi. */
int64_t duet_rng_int(duet_rng *rng, int64_t lo, int64_t hi);
/* Fisher-Yates permutation of 0..n-1 into perm. */
void duet_rng_permutation(duet_rng *rng, int64_t *perm, int64_t n);

/* Monotonic wall clock in seconds. */
double duet_time_now(void);

/* ---- half-precision conversion ------------------------------------------- */

/* float32 <-> IEEE half and bfloat16 (gradient compression, bf16 GEMMs).
 * Round to nearest even; NaN stays NaN, overflow becomes infinity. */
void duet_f32_to_f16(uint16_t *out, const float *in, size_t n);
void duet_f16_to_f32(float *out, const uint16_t *in, size_t n);
void duet_f32_to_bf16(uint16_t *out, const float *in, size_t n);
void duet_bf16_to_f32(float *out, const uint16_t *in, size_t n);

/* ---- the CPU ----------------------------------------------------------------- */

/* What this CPU offers, from cpuid and what the OS saves (xgetbv): a vector
 * unit counts only when the OS enables its registers. A plain value. Zero
 * (no features) on a non-x86 CPU. */
typedef struct duet_cpu_info {
    char vendor[13]; /* "GenuineIntel", "AuthenticAMD" */
    char brand[49];  /* "AMD EPYC 9R45 ..." */
    int family, model, stepping;
    bool avx, fma, avx2, avx512f, avx512dq, avx512bw, avx512vl, avx512_vnni, avx512_bf16;
    bool amx_tile, amx_bf16;
} duet_cpu_info;

duet_cpu_info duet_cpu_info_get(void);
/* The features as "avx fma avx2 avx512f ..." into buf (truncated to size);
 * returns the length it needed, as snprintf. */
int duet_cpu_features_string(const duet_cpu_info *ci, char *buf, size_t size);
/* Cores this process may run on (its affinity mask; a launcher that binds
 * ranks to cores narrows it), and cores online in the machine. */
int duet_cpu_available_cores(void);
int duet_cpu_online_cores(void);

/* ---- small helpers for duet's own layers (src/base/str.c) ------------------
 * duet__ names: shared by the layers above base so that each exists once;
 * not a stable API for applications. */

/* Copy of s in a malloc'd string (free with free); NULL when out of memory
 * or s is NULL. */
char *duet__strdup(const char *s);
/* "dir/name" in a malloc'd string (free with free); NULL when out of memory. */
char *duet__path_join(const char *dir, const char *name);
/* mkdir -p (safe_file.c); DUET_EIO naming the folder. */
int duet__mkdirs(const char *path);
/* printf into a malloc'd string of the size it needs (free with free); NULL
 * when out of memory. For names and paths built from a model's or a user's
 * text, which no fixed buffer bounds. */
char *duet__strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Levenshtein distance of two strings, for did-you-mean hints; SIZE_MAX
 * when either is longer than 63 bytes. */
size_t duet__edit_distance(const char *a, const char *b);
/* printf into a fixed buffer (size >= 4) for a label that only messages
 * print (a communicator's name, a pipeline step's place): one that does not
 * fit ends in "...", so a reader sees it was cut. Never for a name that is
 * looked up or compared. False when it was cut. */
bool duet__label_set(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The whole of the regular file at path in a 64-byte aligned buffer (free
 * with duet_aligned_free; one byte allocated for an empty file), its size in
 * *len. DUET_ENOTFOUND when path does not exist, DUET_EIO when it cannot be
 * opened or read or is not a regular file, DUET_ENOMEM; the message names
 * the path. */
int duet__read_file(const char *path, unsigned char **out, size_t *len);

/* ---- files written whole (src/base/safe_file.c) ----------------------------
 * Every file duet writes goes through these: a temporary with a random name
 * in the output's folder (".<name>.duet-<16 hex>"), created with
 * O_CREAT|O_EXCL|O_NOFOLLOW so that nothing planted there is written
 * through, flushed, fsynced and renamed over the output (the rename replaces
 * a link at the output's name, never its target), then the folder synced.
 * On any failure the temporary is removed: nothing is left behind and the
 * file at the output's name, if any, is untouched.
 *
 *     duet__safe_file sf;
 *     DUET_TRY(duet__safe_open(path, &sf));
 *     fprintf(sf.f, ...);                 // or fwrite
 *     if (bad) { duet__safe_abort(&sf); return rc; }
 *     return duet__safe_commit(&sf);      // flush, fsync, rename, sync folder */
typedef struct duet__safe_file {
    FILE *f;   /* write through this (owned) */
    char *path; /* the output */
    char *tmp;  /* the temporary, NULL once renamed */
} duet__safe_file;
/* A folder as the output is refused (DUET_EINVAL), as is no name. */
int duet__safe_open(const char *path, duet__safe_file *sf);
/* Flush, fsync, close, rename, sync the folder; sf is cleared either way. */
int duet__safe_commit(duet__safe_file *sf);
/* Closes and removes the temporary; sf is cleared. Accepts a cleared sf. */
void duet__safe_abort(duet__safe_file *sf);
/* The n bytes of data as the whole file at path. */
int duet__safe_write(const char *path, const void *data, size_t n);
/* A fresh random name beside path (malloc'd, free with free), for a folder
 * or an LMDB built under it and renamed into place at the end. */
char *duet__safe_temp_name(const char *path);
/* fsyncs the folder that holds path (EINVAL from a file system that cannot
 * is not an error). */
int duet__sync_parent(const char *path);
/* DUET_EINVAL, naming both, when the file at `out` is one of the n inputs
 * (the same file: device and inode, through any links or hard links);
 * NULL inputs and names that do not exist are skipped. A command calls it
 * with every file it reads before it writes `out`. */
int duet__safe_check_inputs(const char *out, const char *const *inputs, size_t n);

/* A growable string for messages and lists of names, so that none is cut
 * at a fixed size. Zero-initialise ({0}); append; read with duet__str_get;
 * free with duet__str_free. An append that runs out of memory sets failed
 * and leaves the content as it was. */
typedef struct duet__str {
    char *s;
    size_t len, cap;
    bool failed;
} duet__str;
void duet__str_addf(duet__str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void duet__str_vaddf(duet__str *b, const char *fmt, va_list ap);
/* Appends sep first unless b is empty: for "a, b, c" lists. */
void duet__str_add_item(duet__str *b, const char *sep, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The content ("" when empty; never NULL). Borrowed until the next append. */
const char *duet__str_get(const duet__str *b);
void duet__str_free(duet__str *b);

/* ---- device memory for duet's own layers (src/base/device.c) --------------
 * The one way the layers above base allocate, fill and copy storage that
 * may be on a device: on the CPU these are duet_aligned_alloc/calloc/free
 * and memcpy; on a CUDA device the caching allocator (src/cuda/alloc.c) on
 * the calling thread's current stream of that device, and copies ordered
 * on that stream; on sim:N the arena and the compute stream of src/sim/
 * (the fill and the sum queued, not waited for). A copy that reads or writes host memory returns when the
 * host side may be used. Errors are DUET_EDEVICE (or DUET_ENOMEM) with a
 * message naming the CUDA call; `op` names the caller for it ("tensor",
 * "relu"). */
int duet__device_alloc(duet_device d, size_t bytes, bool zero, const char *op, void **out);
void duet__device_free(duet_device d, void *p);
int duet__device_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                      size_t bytes, const char *op);
/* n floats at p on device d set to v. */
int duet__device_fill_f32(duet_device d, float *p, size_t n, float v, const char *op);
/* dst[i] = a[i] + b[i] for n floats on device d (dst may be a or b): the
 * tape's sums of gradients. DUET_EUNSUPPORTED on CUDA (no kernel yet). */
int duet__device_add_f32(duet_device d, float *dst, const float *a, const float *b, size_t n,
                         const char *op);

#ifdef __cplusplus
}
#endif
#endif
