#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

double bench_peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

double bench_cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

bool bench_self_path(char *buf, size_t size) {
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0) return false;
    buf[n] = '\0';
    return true;
}

bool bench_run_json(const char *cmd, char *line, size_t size) {
    FILE *p = popen(cmd, "r");
    if (p == NULL) return false;
    char buf[4096];
    bool found = false;
    while (fgets(buf, sizeof buf, p) != NULL)
        if (buf[0] == '{') {
            snprintf(line, size, "%s", buf);
            found = true;
        }
    int st = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    return found && st == 0;
}

double bench_json_num(const char *line, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *s = strstr(line, pat);
    return s != NULL ? strtod(s + strlen(pat), NULL) : NAN;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
    double *s = malloc(sizeof *s * (size_t)(n > 0 ? n : 1));
    if (s == NULL) return NAN;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) s[k++] = v[i];
    double m = NAN;
    if (k > 0) {
        qsort(s, (size_t)k, sizeof *s, cmp_double);
        m = k % 2 ? s[k / 2] : 0.5 * (s[k / 2 - 1] + s[k / 2]);
    }
    free(s);
    return m;
}
