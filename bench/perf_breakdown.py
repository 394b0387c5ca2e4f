#!/usr/bin/env python3
"""Where a training step's time goes, by kind of work, from a perf profile.

    perf record -F 499 -o step.data build/bench_train --worker --models full \
        --steps 2 --warmup 1
    python3 bench/perf_breakdown.py step.data

Reads `perf report --no-children --sort dso,symbol` (self time, so each
sample counts once) and sums the shares into: GEMM (oneDNN's JIT code and
libdnnl), conv outside the GEMM (im2col, col2im, bias and layout copies),
batch norm, pooling, other duet ops (activations, pixel shuffle, upsampling,
elementwise, losses), the optimizer, libc memset/memmove (zeroed gradients,
copies), the kernel (page faults; pvm_irq_enable, where a paravirtualised
guest re-enables interrupts, mostly at the end of a page fault or a futex
wake-up: `perf record -g` shows which), and the rest. Prints a Markdown
table."""
import re
import subprocess
import sys

GROUPS = [
    ("GEMM (oneDNN sgemm JIT)", lambda d, s: d.startswith("[JIT]") or "libdnnl" in d),
    ("conv outside the GEMM (im2col, col2im, bias, layout copies)",
     lambda d, s: re.search(r"im2col|col2im|chunk_columns|conv2d|_samples|sample_forward",
                            s) is not None),
    ("batch norm", lambda d, s: re.search(r"bn_|batch_norm|batch_stats", s) is not None),
    ("max pooling", lambda d, s: "pool" in s),
    ("activations (ReLU, leaky ReLU)",
     lambda d, s: re.search(r"relu|rectify|mask_make|masked_backward", s) is not None),
    ("other ops (pixel shuffle, upsampling, elementwise, losses)",
     lambda d, s: re.search(r"pixel_shuffle|upsample|nearest|bilinear|axpy|add_|mul_|sub_|"
                            r"l1_|mse_|bce_|scale|affine", s) is not None),
    ("optimizer (Adam)", lambda d, s: "optimizer" in s or "adam" in s),
    ("libc memset / memmove", lambda d, s: "libc" in d and re.search(r"mem(set|move|cpy)", s)),
    ("kernel: page faults", lambda d, s: "kernel" in d and re.search(
        r"clear_page|fault|folio|lru|mm_|mas_|page|pte|zap|alloc|cgroup", s) is not None),
    ("kernel: pvm_irq_enable (end of page faults, futex wake-ups)",
     lambda d, s: "kernel" in d and "pvm_irq_enable" in s),
    ("kernel: other (scheduler, system calls)", lambda d, s: "kernel" in d),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--sort",
                          "dso,symbol", "--stdio"], capture_output=True, text=True,
                         check=True).stdout
    totals = {name: 0.0 for name, _ in GROUPS}
    rest = 0.0
    for line in out.splitlines():
        m = re.match(r"\s+([0-9.]+)%\s+(\S+(?: tid \d+)?)\s+\[[.k]\]\s+(.*?)\s*(?:-\s+-\s*)?$",
                     line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        for name, match in GROUPS:
            if match(dso, sym):
                totals[name] += pct
                break
        else:
            rest += pct
    print("| where | share of samples |")
    print("|---|---:|")
    for name, _ in GROUPS:
        print(f"| {name} | {totals[name]:.1f}% |")
    print(f"| the rest (setup, RNG, data, autograd bookkeeping) | {rest:.1f}% |")


if __name__ == "__main__":
    main()
