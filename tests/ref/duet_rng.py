"""duet's counter-based RNG (src/base/rng.c) in Python, bit for bit, so that
reference scripts can draw the same dropout masks as duet_dropout."""
import numpy as np
import torch

M64 = (1 << 64) - 1


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class DuetRng:
    def __init__(self, seed, stream=0, counter=0):
        self.seed, self.stream, self.counter = seed, stream, counter

    def u64(self):
        key = _mix64((self.seed + 0x9E3779B97F4A7C15 * (self.stream + 1)) & M64)
        c = self.counter
        self.counter += 1
        return _mix64(key ^ _mix64((c + 0x632BE59BD9B4E019) & M64))

    def int_range(self, lo, hi):
        """duet_rng_int: uniform in [lo, hi], rejection sampling as rng.c."""
        n = hi - lo + 1
        limit = M64 - M64 % n
        while True:
            x = self.u64()
            if x < limit:
                return lo + x % n

    def uniform(self):
        """duet_rng_uniform: 24 random bits as a float32 in [0, 1)."""
        return np.float32(self.u64() >> 40) * np.float32(1.0 / 16777216.0)

    def dropout_factor(self, shape, p):
        """duet_dropout's per-element factor: 1/(1-p) (float32) where the
        draw is < 1-p, else 0; draws in element order."""
        keep = np.float32(1.0) - np.float32(p)
        scale = np.float32(1.0) / keep if keep > 0 else np.float32(0.0)
        n = int(np.prod(shape))
        f = np.array([scale if self.uniform() < keep else np.float32(0.0) for _ in range(n)],
                     dtype=np.float32)
        return torch.from_numpy(f).reshape(shape)
