/* The compute path of a run (the config's `num_threads`, `gemm` and
 * `mixed_precision` keys,
 * the startup line that says what runs) and `duet info`: what a bug report
 * or a benchmark needs to know about this machine and build. */
#include "runner/runner_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 1-minute load average, or -1 when /proc/loadavg cannot be read. */
static double load_average(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL) return -1.0;
    double l = -1.0;
    if (fscanf(f, "%lf", &l) != 1) l = -1.0;
    fclose(f);
    return l;
}

/* OpenMP threads spin at each parallel region's end (libgomp's default
 * wait policy) for a partner thread; when other processes keep the cores
 * busy the partner is often off its core, and 2 threads were measured 10x
 * slower than 1 (docs/performance.md). libgomp reads the policy when it
 * loads, so duet can only say so. */
void duet__run_warn_busy(const duet__run *r) {
    const int threads = r->kernel_threads;
    if (r->rank != 0 || threads < 2 || getenv("OMP_WAIT_POLICY") != NULL ||
        getenv("GOMP_SPINCOUNT") != NULL)
        return;
    double load = load_average();
    int online = duet_cpu_online_cores();
    if (load > (double)online)
        duet_log(DUET_LOG_WARN,
                 "kernels: this machine is busy (load %.1f on %d cores) and %d threads per "
                 "process will spin-wait on each other: set OMP_WAIT_POLICY=passive in the "
                 "environment, or num_threads = 1", load, online, threads);
}

int duet__run_setup_kernels(duet__run *r) {
    duet_kernel_opts ko = duet_kernel_opts_default();
    int64_t threads = 0;
    DUET_TRY(duet_config_get_int_or(r->cfg, "num_threads", 0, &threads));
    if (threads < 0 || threads > 1024)
        return duet_config_error(r->cfg, "num_threads",
                                 "num_threads = %lld is not in 0..1024 (0: the cores "
                                 "this process may use, shared among the ranks on its node)",
                                 (long long)threads);
    const char *gemm = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "gemm", "auto", &gemm));
    int rc = duet_gemm_backend_parse(gemm, &ko.gemm);
    if (rc != DUET_OK) {
        char *where = NULL;
        DUET_TRY(duet_config_where(r->cfg, "gemm", &where));
        rc = duet__error_context(DUET_ECONFIG, "%s", where);
        free(where);
        return rc;
    }
    const char *conv = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "conv", "auto", &conv));
    if (duet_conv_path_parse(conv, &ko.conv) != DUET_OK)
        return duet_config_error(r->cfg, "conv",
                                 "conv = \"%s\" is not known (use \"auto\", \"onednn\", "
                                 "\"im2col\" or \"winograd\")",
                                 conv);
    const char *mp = NULL;
    DUET_TRY(duet_config_get_string_or(r->cfg, "mixed_precision", "none", &mp));
    if (strcmp(mp, "bf16") != 0 && strcmp(mp, "none") != 0)
        return duet_config_error(r->cfg, "mixed_precision",
                                 "mixed_precision = \"%s\" is not known (use "
                                 "\"none\" for float32 or \"bf16\")",
                                 mp);
    ko.bf16 = strcmp(mp, "bf16") == 0;
    ko.num_threads = (int)threads;
    DUET_TRY(duet_comm_local_size(r->comm, &ko.local_ranks));
    DUET_TRY(duet_kernels_configure(&ko));
    duet_kernels_info ki;
    DUET_TRY(duet_kernels_info_get(&ki));
    duet_log(DUET_LOG_INFO, "kernels: %s per process, %d process%s (%d on this node)",
             ki.summary, r->world, r->world == 1 ? "" : "es", ko.local_ranks);
    r->kernel_threads = ki.num_threads; /* duet__run_warn_busy, when a run trains */
    return DUET_OK;
}

int duet_info_print(FILE *f) {
    duet_cpu_info ci = duet_cpu_info_get();
    char features[256];
    duet_cpu_features_string(&ci, features, sizeof features);
    duet_kernels_info ki;
    DUET_TRY(duet_kernels_info_get(&ki));
    char mpi[256];
    duet_comm_library_version(mpi, sizeof mpi);
    fprintf(f, "duet %s (git %s)\n", DUET_VERSION_STRING, duet_git_describe());
    fprintf(f, "  CPU:        %s (%s family %d model %d stepping %d)\n",
            ci.brand[0] ? ci.brand : "unknown", ci.vendor[0] ? ci.vendor : "?", ci.family,
            ci.model, ci.stepping);
    fprintf(f, "  features:   %s\n", features[0] ? features : "(none of avx..amx)");
    fprintf(f, "  cores:      %d online, %d available to this process\n",
            duet_cpu_online_cores(), duet_cpu_available_cores());
    fprintf(f, "  kernels:    %s\n", ki.summary);
    const char *isa_env = getenv("ONEDNN_MAX_CPU_ISA");
    bool amx_capped = ci.amx_bf16 && (isa_env == NULL || isa_env[0] == '\0') &&
                      strstr(ki.onednn, "amx") == NULL;
    fprintf(f, "  oneDNN:     %s%s%s\n", ki.onednn,
            ki.gemm == DUET_GEMM_ONEDNN ? " (in use)" : "",
            amx_capped ? "; AMX off by default (oneDNN 2.6's AMX bf16 matmul died with "
                         "SIGILL on an AMX guest; ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX "
                         "tries it)"
                       : "");
    fprintf(f, "  OpenBLAS:   %s%s\n", ki.openblas,
            ki.gemm == DUET_GEMM_OPENBLAS ? " (in use)" : "");
    fprintf(f, "  MPI:        %s\n", mpi);
    DUET_TRY(duet_cuda_info_print(f));
    fprintf(f, "  threads:    %d (DUET_NUM_THREADS or the config's num_threads; default: the "
               "cores available, at most online cores / ranks on the node; under mpirun, "
               "--bind-to none or --map-by slot:PE=T gives a rank more than one)\n",
            ki.num_threads);
    const char *vars[] = {"DUET_GEMM", "DUET_CONV", "DUET_NUM_THREADS", "OPENBLAS_CORETYPE",
                          "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL) fprintf(f, "  env:        %s=%s\n", vars[i], v);
    }
    return ferror(f) ? duet__error(DUET_EIO, "info: cannot write the report") : DUET_OK;
}
