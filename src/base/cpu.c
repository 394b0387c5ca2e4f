/* What the CPU can do (cpuid, checked against what the OS saves with xgetbv)
 * and how many cores this process may use (its affinity mask). The kernel
 * selection in ops and `duet info` read these; nothing here depends on a
 * library's table of CPU models, so a CPU newer than every library still
 * gets its real features. */
#include "duet/base.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(duet_cpu_info *ci) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    unsigned max_leaf = a;
    memcpy(ci->vendor + 0, &b, 4);
    memcpy(ci->vendor + 4, &d, 4);
    memcpy(ci->vendor + 8, &c, 4);
    ci->vendor[12] = '\0';

    __get_cpuid(1, &a, &b, &c, &d);
    unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
    ci->family = (int)base_family + (base_family == 0xf ? (int)((a >> 20) & 0xff) : 0);
    ci->model = (int)base_model;
    if (base_family == 0x6 || base_family == 0xf) ci->model += (int)(((a >> 16) & 0xf) << 4);
    ci->stepping = (int)(a & 0xf);
    bool osxsave = (c >> 27) & 1;
    ci->fma = (c >> 12) & 1;
    /* The OS must save the vector state for the registers to be usable:
     * XMM|YMM (bits 1, 2) for AVX, plus opmask and ZMM (5, 6, 7) for
     * AVX-512, plus the tile state (17, 18) for AMX. */
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;
    bool amx_os = (xcr0 & 0x60000) == 0x60000;
    ci->avx = ymm_os && ((c >> 28) & 1);
    ci->fma = ci->fma && ci->avx;

    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        ci->avx2 = ci->avx && ((b >> 5) & 1);
        ci->avx512f = zmm_os && ((b >> 16) & 1);
        ci->avx512dq = ci->avx512f && ((b >> 17) & 1);
        ci->avx512bw = ci->avx512f && ((b >> 30) & 1);
        ci->avx512vl = ci->avx512f && ((b >> 31) & 1);
        ci->avx512_vnni = ci->avx512f && ((c >> 11) & 1);
        ci->amx_bf16 = amx_os && ((d >> 22) & 1);
        ci->amx_tile = amx_os && ((d >> 24) & 1);
        unsigned sub = a;
        if (sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            ci->avx512_bf16 = ci->avx512f && ((a >> 5) & 1);
        }
    }
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        unsigned *brand = (unsigned *)ci->brand;
        for (unsigned leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002 + leaf, &brand[4 * leaf], &brand[4 * leaf + 1],
                        &brand[4 * leaf + 2], &brand[4 * leaf + 3]);
        ci->brand[48] = '\0';
        /* Some CPUs pad the brand string with spaces. */
        size_t lead = strspn(ci->brand, " ");
        memmove(ci->brand, ci->brand + lead, strlen(ci->brand + lead) + 1);
        for (size_t n = strlen(ci->brand); n > 0 && ci->brand[n - 1] == ' '; n--)
            ci->brand[n - 1] = '\0';
    }
}
#else
static void detect(duet_cpu_info *ci) { (void)ci; }
#endif

duet_cpu_info duet_cpu_info_get(void) {
    duet_cpu_info ci;
    memset(&ci, 0, sizeof ci);
    detect(&ci);
    return ci;
}

int duet_cpu_features_string(const duet_cpu_info *ci, char *buf, size_t size) {
    static const char *const names[] = {"avx", "fma", "avx2", "avx512f", "avx512dq",
                                        "avx512bw", "avx512vl", "avx512_vnni",
                                        "avx512_bf16", "amx_tile", "amx_bf16"};
    const bool have[] = {ci->avx, ci->fma, ci->avx2, ci->avx512f, ci->avx512dq,
                         ci->avx512bw, ci->avx512vl, ci->avx512_vnni, ci->avx512_bf16,
                         ci->amx_tile, ci->amx_bf16};
    size_t used = 0;
    if (size > 0) buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!have[i]) continue;
        int n = snprintf(buf + used, used < size ? size - used : 0, "%s%s", used ? " " : "",
                         names[i]);
        if (n < 0) return -1;
        used += (size_t)n;
    }
    return (int)used;
}

int duet_cpu_available_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int duet_cpu_online_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}
