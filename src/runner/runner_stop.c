/* The runner's iteration boundary: the watchdog's timeout from the config,
 * graceful stop on SIGTERM / SIGINT (as Slurm sends before it kills a job),
 * the per-iteration agreement on errors and stops, and checkpoints that no
 * rank's error path can cut short. */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/runner_ckpt.h"
#include "runner/runner_internal.h"

/* ---- dist.timeout ---------------------------------------------------------- */

/* The watchdog must outlast a collective's ordinary jitter: below a second a
 * busy machine's scheduling alone would abort healthy jobs. */
#define MIN_TIMEOUT_S 1.0
#define MAX_TIMEOUT_S 1e9

int duet__run_set_timeout(duet__run *r) {
    duet_comm_opts o = duet_comm_get_opts(r->comm);
    double t = DUET_COMM_DEFAULT_TIMEOUT_S;
    DUET_TRY(duet_config_get_double_or(r->cfg, "dist.timeout", DUET_COMM_DEFAULT_TIMEOUT_S, &t));
    if (!(t >= MIN_TIMEOUT_S && t <= MAX_TIMEOUT_S))
        return duet_config_error(r->cfg, "dist.timeout", "dist.timeout = %g: it must be a number "
                                 "of seconds in [%g, %g] (default %g)", t, MIN_TIMEOUT_S,
                                 MAX_TIMEOUT_S, DUET_COMM_DEFAULT_TIMEOUT_S);
    /* The environment overrides the config, and is checked like it: a value
     * that is not a timeout is an error, not a silent 600 s. */
    if (duet_comm_env_timeout(&t) != DUET_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", duet_last_error());
        return duet__error(DUET_ECONFIG, "%s (it overrides dist.timeout; unset it to use the "
                           "config's %g s)", why, t);
    }
    o.timeout_s = t;
    return duet_comm_set_opts(r->comm, &o);
}

/* ---- signals ------------------------------------------------------------------ */

/* Written by the handler only; read at iteration boundaries. */
static volatile sig_atomic_t stop_count, stop_signo;
static struct sigaction saved_term, saved_int, saved_usr1, saved_pipe;
static bool installed;

/* stdout and stderr's file status flags at install, and whether a stop
 * signal makes them non-blocking (see on_stop_signal). */
static int out_flags[2] = {-1, -1};
static bool unblock_outputs;

static void on_stop_signal(int sig) {
    if (stop_count++ > 0) {
        /* A second signal: stop at once, as if duet had no handler. */
        static const char msg[] = "duet: second stop signal: stopping at once\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signo = sig;
    /* A launcher that is shutting down (mpirun after its own SIGTERM) stops
     * reading the ranks' output; a rank blocked writing a log line to a
     * full pipe would never reach the boundary and be killed without its
     * checkpoint. From now on such writes fail instead (the text log
     * ignores them; log.jsonl is a file). fcntl is async-signal-safe. */
    if (unblock_outputs)
        for (int fd = 1; fd <= 2; fd++)
            if (out_flags[fd - 1] >= 0) fcntl(fd, F_SETFL, out_flags[fd - 1] | O_NONBLOCK);
}

void duet__stop_install(void) {
    stop_count = 0;
    stop_signo = 0;
    /* Not a user's terminal (whose flags the shell shares): output that goes
     * to a launcher, a pipe or a file. */
    unblock_outputs = getenv("OMPI_COMM_WORLD_SIZE") != NULL || !isatty(STDOUT_FILENO);
    for (int fd = 1; fd <= 2; fd++) out_flags[fd - 1] = fcntl(fd, F_GETFL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes go on; the loop checks */
    installed = sigaction(SIGTERM, &sa, &saved_term) == 0;
    installed = sigaction(SIGINT, &sa, &saved_int) == 0 && installed;
    /* mpirun forwards SIGUSR1 to every rank and lets the job end by itself
     * (it answers SIGTERM by killing the ranks after a grace period and
     * exits 1 whatever they return): `kill -USR1 <mpirun>`, or Slurm's
     * --signal=USR1@120, stops a launched job with exit 75. */
    installed = sigaction(SIGUSR1, &sa, &saved_usr1) == 0 && installed;
    /* A launcher that is shutting down closes the ranks' stdout; a log line
     * then must not kill a rank that is writing its stop checkpoint. */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    installed = sigaction(SIGPIPE, &ign, &saved_pipe) == 0 && installed;
}

void duet__stop_restore(void) {
    if (!installed) return;
    sigaction(SIGTERM, &saved_term, NULL);
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGUSR1, &saved_usr1, NULL);
    sigaction(SIGPIPE, &saved_pipe, NULL);
    for (int fd = 1; fd <= 2; fd++)
        if (stop_signo != 0 && unblock_outputs && out_flags[fd - 1] >= 0)
            fcntl(fd, F_SETFL, out_flags[fd - 1]);
    installed = false;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1"
                                                                                   : "a signal";
}

/* ---- the boundary ---------------------------------------------------------- */

int duet__run_boundary(duet__run *r, int64_t iter, int local_rc, bool *stop) {
    *stop = false;
    /* [0]: some rank got a stop signal (its number); [1]: INT32_MAX - the
     * lowest failing rank, 0 when none failed. MAX over ranks. */
    int32_t v[2] = {stop_signo, local_rc != DUET_OK ? INT32_MAX - r->rank : 0};
    if (r->world > 1) {
        int rc = duet_comm_allreduce(r->comm, v, 2, DUET_DTYPE_I32, DUET_REDUCE_MAX);
        if (rc != DUET_OK) return duet__error_context(rc, "iteration %" PRId64 " boundary", iter);
    }
    if (v[1] != 0) {
        int failed = INT32_MAX - v[1];
        if (local_rc != DUET_OK && failed == r->rank) return local_rc;
        return duet__error(DUET_ESTATE, "process %d failed at iteration %" PRId64 " (its "
                           "message is above)", failed, iter);
    }
    if (v[0] != 0 && iter < r->total_iters) {
        *stop = true;
        if (stop_signo == 0) stop_signo = v[0]; /* another rank's signal */
    }
    return DUET_OK;
}

int duet__run_checkpoint(duet__run *r, int64_t iter) {
    int32_t status = DUET_OK;
    char failure[1024] = "";
    if (r->rank == 0) {
        duet__ckpt_state s = {.iter = iter, .sampler = duet_loader_get_state(r->loader)};
        status = duet__ckpt_save(r, &s);
        if (status != DUET_OK) snprintf(failure, sizeof failure, "%s", duet_last_error());
        else if (r->log != NULL)
            duet__logger_text(r->log, "saved checkpoint %s/iter_%" PRId64 ".safetensors",
                              r->work_dir, iter);
    }
    /* Everyone waits here while rank 0 writes: nothing can abort the job
     * under it. The wait never times out (a slow file system is not a hung
     * peer); it warns every dist.timeout instead. */
    if (r->world > 1) {
        int rc = duet_comm_bcast_untimed(r->comm, &status, 1, DUET_DTYPE_I32, 0);
        if (rc != DUET_OK) return duet__error_context(rc, "checkpoint of iteration %" PRId64, iter);
    }
    if (status == DUET_OK) return DUET_OK;
    if (r->rank == 0) return duet__error(status, "%s", failure);
    return duet__error(status, "rank 0 could not write the checkpoint of iteration %" PRId64
                       " (its message is above)", iter);
}

int duet__run_stopped(duet__run *r, int64_t iter, bool saved) {
    const char *sig = signal_name(stop_signo);
    if (r->log != NULL)
        duet__logger_text(r->log, "stopped by %s at iteration %" PRId64 "%s%s%s", sig, iter,
                          saved ? "; checkpoint " : "", saved ? r->work_dir : "",
                          saved ? "/latest.safetensors: continue with --resume" : "");
    fprintf(stderr, "duet: rank %d: stopped by %s at iteration %" PRId64 " of %" PRId64
            "%s (exit status %d)\n", r->rank, sig, iter, r->total_iters,
            saved ? "; checkpoint written, continue with --resume" : "", DUET_EXIT_STOPPED);
    fflush(stderr);
    return duet__error(DUET_ESTOPPED, "stopped by %s at iteration %" PRId64 "%s", sig, iter,
                       saved ? "; continue with --resume" : "");
}
