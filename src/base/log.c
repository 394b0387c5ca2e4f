/* Rank-aware logging to stderr (errors, warnings) and stdout (info, debug). */
#include "duet/base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Process-wide logger settings, set at start-up by the runner and read by
 * every thread (the data loader's prefetch thread logs too), hence atomic. */
static atomic_int log_level = -1;
static atomic_int log_rank = 0;
static atomic_bool log_all_ranks = false;
static atomic_bool log_info_stdout = true;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static int level_from_env(void) {
    const char *s = getenv("DUET_LOG");
    if (s == NULL) return DUET_LOG_INFO;
    if (strcasecmp(s, "debug") == 0) return DUET_LOG_DEBUG;
    if (strcasecmp(s, "warn") == 0) return DUET_LOG_WARN;
    if (strcasecmp(s, "error") == 0) return DUET_LOG_ERROR;
    if (strcasecmp(s, "off") == 0) return DUET_LOG_OFF;
    return DUET_LOG_INFO;
}

static void read_env_level(void) {
    int unset = -1;
    atomic_compare_exchange_strong(&log_level, &unset, level_from_env());
}

void duet_log_set_level(int level) {
    pthread_once(&env_once, read_env_level);
    log_level = level;
}

int duet_log_get_level(void) {
    pthread_once(&env_once, read_env_level);
    return log_level;
}

void duet_log_set_stdout(bool info_to_stdout) { log_info_stdout = info_to_stdout; }

void duet_log_set_rank(int rank, bool all_ranks) {
    log_rank = rank;
    log_all_ranks = all_ranks;
}

static void vlog(int level, bool local, const char *fmt, va_list ap) {
    if (level < duet_log_get_level()) return;
    int rank = log_rank;
    bool all_ranks = log_all_ranks || local;
    if (level < DUET_LOG_ERROR && rank != 0 && !all_ranks) return;
    static const char *names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
    FILE *f = level >= DUET_LOG_WARN || !log_info_stdout ? stderr : stdout;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (all_ranks || level >= DUET_LOG_ERROR)
        fprintf(f, "%s - duet - %s - [rank %d] %s\n", stamp, names[level], rank, msg);
    else
        fprintf(f, "%s - duet - %s - %s\n", stamp, names[level], msg);
    fflush(f);
}

void duet_log(int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, false, fmt, ap);
    va_end(ap);
}

void duet_log_local(int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, true, fmt, ap);
    va_end(ap);
}
