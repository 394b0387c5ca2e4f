/* The watchdog behind every wait in duet (PyTorch's process-group timeout):
 * the poll loop's backoff, the deadline, and the roll call that names the
 * ranks that did not take part in a stalled operation.
 *
 * Roll call. Every comm family (a comm and its duet_comm_dup copies, e.g.
 * the runner's comm and each DDP's private channels) owns one extra
 * duplicate communicator, `watch`. A rank that waits anywhere in duet polls
 * it and answers a query with what it waits for (comm id, operation number,
 * name, for how long). The rank whose wait times out sends a query to every
 * rank and listens for a short grace period: a rank that answers with the
 * same operation took part (it waits for someone else); a rank that answers
 * with another operation, or does not answer (stopped, hung, or busy
 * outside duet's collectives), did not. Point-to-point messages on their
 * own communicator never match the collectives or the ring's messages. */
#include "comm/comm_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

enum { TAG_QUERY = 1, TAG_ANSWER = 2 };

/* Polls without sleeping for this long after the last progress (latency of
 * collectives that complete quickly), then sleeps 10 us doubling to 2 ms. */
#define SPIN_S 50e-6
#define SLEEP_MIN_S 10e-6
#define SLEEP_MAX_S 2e-3

/* What a waiting rank says about itself. */
typedef struct roll_answer {
    int64_t comm_id, seq;
    double waited_s;
    char what[200];
} roll_answer;

/* The innermost wait of this process (waits nest only through callers'
 * own loops); MPI is used from one thread (MPI_THREAD_FUNNELED). */
static duet__wait *current;
/* duet__wait_counts_get; MPI, and so every wait, runs on one thread. */
static duet__wait_counts counts;

/* ---- family ---------------------------------------------------------------- */

int duet__family_join(duet_comm *c, const duet_comm *parent) {
    if (parent != NULL) {
        c->family = parent->family;
        c->family->refs++;
        c->id = c->family->ncomms++;
        return DUET_OK;
    }
    duet__family *f = calloc(1, sizeof *f);
    if (f == NULL) return duet__error(DUET_ENOMEM, "comm: out of memory");
    f->watch = MPI_COMM_NULL;
    int rc = DUET__MPI_CHECK(MPI_Comm_dup(c->comm, &f->watch));
    if (rc == DUET_OK) rc = DUET__MPI_CHECK(MPI_Comm_set_errhandler(f->watch, MPI_ERRORS_RETURN));
    if (rc != DUET_OK) {
        if (f->watch != MPI_COMM_NULL) MPI_Comm_free(&f->watch);
        free(f);
        return rc;
    }
    f->refs = 1;
    f->ncomms = 1;
    c->family = f;
    c->id = 0;
    return DUET_OK;
}

void duet__family_leave(duet_comm *c) {
    duet__family *f = c->family;
    c->family = NULL;
    if (f == NULL || --f->refs > 0) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* A broken family may have queries in flight: freeing is still legal
     * (MPI completes the free once pending traffic is done). */
    if (!finalized && f->watch != MPI_COMM_NULL) MPI_Comm_free(&f->watch);
    free(f->broken_msg);
    free(f);
}

int duet__comm_check_broken(const duet_comm *c) {
    if (c->family == NULL || !c->family->broken) return DUET_OK;
    return duet__error(DUET_ETIMEOUT, "%s", c->family->broken_msg ? c->family->broken_msg
                                                                  : "comm: an earlier timeout");
}

bool duet_comm_timed_out(const duet_comm *c) {
    return c != NULL && c->family != NULL && c->family->broken;
}

/* ---- options ----------------------------------------------------------------- */

int duet_comm_env_timeout(double *seconds) {
    const char *env = getenv("DUET_TIMEOUT");
    if (env == NULL || env[0] == '\0') return DUET_OK;
    char *end = NULL;
    errno = 0;
    double v = strtod(env, &end);
    /* Below a second, a busy machine's scheduling alone would abort healthy
     * jobs. */
    if (end == env || *end != '\0' || errno != 0 || !(v >= 1.0 && v <= 1e9))
        return duet__error(DUET_EINVAL, "DUET_TIMEOUT='%s' in the environment: it must be a "
                           "number of seconds in [1, 1e+09]", env);
    *seconds = v;
    return DUET_OK;
}

duet_comm_opts duet_comm_opts_default(void) {
    duet_comm_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_s = DUET_COMM_DEFAULT_TIMEOUT_S;
    if (duet_comm_env_timeout(&o.timeout_s) != DUET_OK)
        duet_log(DUET_LOG_WARN, "%s; using %g s", duet_last_error(), o.timeout_s);
    return o;
}

int duet_comm_set_opts(duet_comm *c, const duet_comm_opts *o) {
    if (!(o->timeout_s > 0 && o->timeout_s <= 1e9))
        return duet__error(DUET_EINVAL, "comm: timeout_s = %g; it must be a number of seconds in "
                           "(0, 1e9]", o->timeout_s);
    c->timeout_s = o->timeout_s;
    return DUET_OK;
}

duet_comm_opts duet_comm_get_opts(const duet_comm *c) {
    duet_comm_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_s = c->timeout_s;
    return o;
}

void duet_comm_set_name(duet_comm *c, const char *name) {
    snprintf(c->name, sizeof c->name, "%s", name != NULL ? name : "");
}

/* ---- the wait loop --------------------------------------------------------- */

void duet__wait_begin(duet__wait *w, duet_comm *c, const char *op, uint64_t seq,
                      const char *label) {
    memset(w, 0, sizeof *w);
    w->c = c;
    w->op = op;
    w->seq = seq;
    snprintf(w->label, sizeof w->label, "%s", label != NULL ? label : c->name);
    w->t_start = w->t_progress = duet_time_now();
    w->prev = current;
    current = w;
}

void duet__wait_end(duet__wait *w) {
    if (current == w) current = w->prev;
    free(w->answered);
    w->answered = NULL;
}

static void describe(const duet__wait *w, double now, char *buf, size_t size) {
    snprintf(buf, size, "%s #%llu on '%s' (waiting %.1f s)", w->op,
             (unsigned long long)w->seq, w->label, now - w->t_start);
}

/* Answers every query that has arrived on the family's channel. */
static void serve(duet__family *f) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, f->watch, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        int64_t q[2];
        if (MPI_Recv(q, 2, MPI_INT64_T, st.MPI_SOURCE, TAG_QUERY, f->watch, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return;
        roll_answer a;
        memset(&a, 0, sizeof a);
        a.comm_id = -1;
        double now = duet_time_now();
        if (current != NULL) {
            a.comm_id = current->c->family == f ? current->c->id : -1;
            a.seq = (int64_t)current->seq;
            a.waited_s = now - current->t_start;
            describe(current, now, a.what, sizeof a.what);
        }
        /* Small: sent eagerly, whether or not the asker still listens. */
        MPI_Send(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, f->watch);
    }
}

static void sleep_s(double s) {
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL); /* a signal cuts it short: the loop polls again */
}

static size_t append(char *buf, size_t size, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t size, size_t at, const char *fmt, ...) {
    if (at >= size) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, size - at, fmt, ap);
    va_end(ap);
    return n > 0 ? at + (size_t)n : at;
}

/* Asks every other rank what it waits for; writes the verdict into msg. */
static void roll_call(duet__wait *w, char *msg, size_t size, size_t at) {
    duet_comm *c = w->c;
    duet__family *f = c->family;
    int n = c->size;
    roll_answer *ans = calloc((size_t)n, sizeof *ans);
    bool *got = calloc((size_t)n, sizeof *got);
    MPI_Request *sends = calloc((size_t)n, sizeof *sends);
    if (ans == NULL || got == NULL || sends == NULL) {
        append(msg, size, at, " (out of memory for the roll call)");
        free(ans);
        free(got);
        free(sends);
        return;
    }
    /* Static: a query still in flight when the roll call ends is freed
     * unfinished, and MPI may read its buffer later. */
    static int64_t q[2];
    q[0] = c->id;
    q[1] = (int64_t)w->seq;
    for (int p = 0; p < n; p++) {
        sends[p] = MPI_REQUEST_NULL;
        if (p != c->rank) MPI_Isend(q, 2, MPI_INT64_T, p, TAG_QUERY, f->watch, &sends[p]);
    }
    /* Long enough for a rank that sleeps in its backoff (2 ms) to answer;
     * short next to any timeout worth setting. */
    double grace = w->c->timeout_s / 4;
    if (grace > 2.0) grace = 2.0;
    if (grace < 0.25) grace = 0.25;
    double t_end = duet_time_now() + grace;
    int nans = 0;
    while (nans < n - 1 && duet_time_now() < t_end) {
        serve(f); /* ranks timing out together ask each other */
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANSWER, f->watch, &flag, &st) != MPI_SUCCESS) break;
        if (!flag) {
            sleep_s(1e-3);
            continue;
        }
        roll_answer a;
        if (MPI_Recv(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, f->watch,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        int p = st.MPI_SOURCE;
        if (p >= 0 && p < n && !got[p]) {
            a.what[sizeof a.what - 1] = '\0';
            ans[p] = a;
            got[p] = true;
            nans++;
        }
    }
    for (int p = 0; p < n; p++) {
        if (sends[p] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&sends[p], &flag, MPI_STATUS_IGNORE);
        if (!flag) MPI_Request_free(&sends[p]); /* the job ends */
    }
    /* Ranks that did not take part: no answer, or waiting elsewhere. */
    at = append(msg, size, at, ". Ranks that did not take part:");
    int absent = 0;
    for (int p = 0; p < n; p++) {
        if (p == c->rank || (got[p] && ans[p].comm_id == c->id && ans[p].seq == (int64_t)w->seq))
            continue;
        at = append(msg, size, at, "%s %d", absent ? "," : "", p);
        if (!got[p])
            at = append(msg, size, at, " (no answer within %.2g s: stopped, hung, or busy "
                        "outside duet's collectives)", grace);
        else
            at = append(msg, size, at, " (waits in %s)", ans[p].what);
        absent++;
    }
    if (absent == 0) at = append(msg, size, at, " none (all wait in it: a message was lost?)");
    free(ans);
    free(got);
    free(sends);
}

void duet_comm_serve(duet_comm *c) {
    if (c != NULL && c->size > 1 && c->family != NULL) serve(c->family);
}

/* A wait without a timeout of its own (the other ranks' wait for rank 0's
 * checkpoint: a slow file system is not a hung peer) still ends when a rank
 * shows no sign of life. Each time it has seen no progress for the timeout
 * it asks every other rank whether it runs (the roll call's question);
 * ranks in a collective answer from their wait loops, rank 0 from between
 * the chunks it writes (duet_comm_serve). All answered: the wait goes on,
 * as if it had progressed. A rank silent for another timeout is stopped or
 * hung (or its file system is): DUET_ETIMEOUT naming it, from this rank. */
static int check_alive(duet__wait *w, double now) {
    duet_comm *c = w->c;
    duet__family *f = c->family;
    int n = c->size;
    if (!w->asking) {
        if (w->answered == NULL) w->answered = calloc((size_t)n, sizeof *w->answered);
        if (w->answered == NULL) return DUET_OK; /* keep waiting, as before */
        memset(w->answered, 0, (size_t)n * sizeof *w->answered);
        /* Static: the sends are freed unfinished and complete later. */
        static int64_t q[2];
        q[0] = c->id;
        q[1] = (int64_t)w->seq;
        for (int p = 0; p < n; p++) {
            if (p == c->rank) continue;
            MPI_Request req;
            if (MPI_Isend(q, 2, MPI_INT64_T, p, TAG_QUERY, f->watch, &req) == MPI_SUCCESS)
                MPI_Request_free(&req);
        }
        w->asking = true;
        w->t_asked = now;
        duet_log_local(DUET_LOG_WARN, "still waiting in %s on '%s' after %.0f s (this wait "
                       "does not time out while every rank answers; asking them now)", w->op,
                       w->label, now - w->t_start);
        return DUET_OK;
    }
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANSWER, f->watch, &flag, &st) != MPI_SUCCESS || !flag)
            break;
        roll_answer a;
        if (MPI_Recv(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, f->watch,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < n) w->answered[st.MPI_SOURCE] = true;
    }
    int silent = 0;
    for (int p = 0; p < n; p++) silent += p != c->rank && !w->answered[p];
    if (silent == 0) {
        w->asking = false;
        w->t_progress = now; /* alive, if slow: wait another timeout */
        w->sleep_s = 0;      /* as after progress */
        return DUET_OK;
    }
    if (now - w->t_asked <= c->timeout_s) return DUET_OK;
    char msg[3072];
    size_t at = append(msg, sizeof msg, 0,
                       "watchdog: %s #%llu on '%s' on rank %d of %d: waited %.1f s; this wait "
                       "has no timeout of its own, but rank%s", w->op,
                       (unsigned long long)w->seq, w->label, c->rank, n, now - w->t_start,
                       silent > 1 ? "s" : "");
    int listed = 0;
    for (int p = 0; p < n; p++)
        if (p != c->rank && !w->answered[p]) at = append(msg, sizeof msg, at, "%s %d",
                                                         listed++ ? "," : "", p);
    append(msg, sizeof msg, at, " gave no sign of life for %.1f s (dist.timeout / DUET_TIMEOUT "
           "= %g s): stopped (SIGSTOP), hung, or blocked on a file system that no longer "
           "answers", now - w->t_asked, c->timeout_s);
    f->broken = 1;
    free(f->broken_msg);
    f->broken_msg = strdup(msg);
    return duet__error(DUET_ETIMEOUT, "%s", msg);
}

static int timed_out(duet__wait *w, double now) {
    duet_comm *c = w->c;
    char msg[3072];
    size_t at = append(msg, sizeof msg, 0,
                       "watchdog: %s #%llu on '%s' made no progress for %.1f s on rank %d of %d "
                       "(dist.timeout / DUET_TIMEOUT = %g s)",
                       w->op, (unsigned long long)w->seq, w->label, now - w->t_progress, c->rank,
                       c->size, c->timeout_s);
    if (w->peers != NULL) {
        char peers[512] = "";
        w->peers(w->peers_ctx, peers, sizeof peers);
        if (peers[0] != '\0') at = append(msg, sizeof msg, at, "; waiting for %s", peers);
    }
    roll_call(w, msg, sizeof msg, at);
    duet__family *f = c->family;
    f->broken = 1;
    free(f->broken_msg);
    f->broken_msg = strdup(msg);
    return duet__error(DUET_ETIMEOUT, "%s", msg);
}

int duet__wait_idle(duet__wait *w, bool progressed) {
    DUET_TRY(duet__comm_check_broken(w->c));
    double now = duet_time_now();
    if (progressed) {
        w->t_progress = now;
        w->sleep_s = 0;
        return DUET_OK;
    }
    counts.idle_polls++;
    if (w->c->size > 1) serve(w->c->family);
    if (now - w->t_progress > w->c->timeout_s || w->asking) {
        if (!w->no_timeout) return timed_out(w, now);
        if (w->c->size > 1) DUET_TRY(check_alive(w, now));
    }
    if (now - w->t_progress < SPIN_S) {
        if (w->sleep_s > 0) counts.spins_after_sleep++;
        return DUET_OK;
    }
    w->sleep_s = w->sleep_s < SLEEP_MIN_S ? SLEEP_MIN_S : w->sleep_s * 2;
    if (w->sleep_s > SLEEP_MAX_S) w->sleep_s = SLEEP_MAX_S;
    counts.sleeps++;
    sleep_s(w->sleep_s);
    return DUET_OK;
}

duet__wait_counts duet__wait_counts_get(void) { return counts; }
