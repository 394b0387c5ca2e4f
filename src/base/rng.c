/* Counter-based RNG: each draw hashes (seed, stream, counter) with two
 * rounds of the splitmix64 finaliser, so the state is three integers and
 * any stream can be jumped to without generating the ones before it. */
#include "duet/base.h"

#include <math.h>

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

duet_rng duet_rng_make(uint64_t seed, uint64_t stream) {
    duet_rng r = {seed, stream, 0};
    return r;
}

uint64_t duet_rng_u64(duet_rng *rng) {
    uint64_t key = mix64(rng->seed + 0x9e3779b97f4a7c15ULL * (rng->stream + 1));
    uint64_t c = rng->counter++;
    return mix64(key ^ mix64(c + 0x632be59bd9b4e019ULL));
}

float duet_rng_uniform(duet_rng *rng) {
    return (float)(duet_rng_u64(rng) >> 40) * (1.0f / 16777216.0f);
}

double duet_rng_uniform_double(duet_rng *rng) {
    return (double)(duet_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

float duet_rng_normal(duet_rng *rng) {
    double u1 = duet_rng_uniform_double(rng);
    double u2 = duet_rng_uniform_double(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

int64_t duet_rng_int(duet_rng *rng, int64_t lo, int64_t hi) {
    DUET_ASSERT(lo <= hi);
    uint64_t range = (uint64_t)(hi - lo) + 1u;
    if (range == 0) return (int64_t)duet_rng_u64(rng); /* the full 64-bit range */
    /* Rejection sampling: drop the top partial block so every value is
     * equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t x;
    do {
        x = duet_rng_u64(rng);
    } while (x >= limit);
    return lo + (int64_t)(x % range);
}

void duet_rng_permutation(duet_rng *rng, int64_t *perm, int64_t n) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = duet_rng_int(rng, 0, i);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
