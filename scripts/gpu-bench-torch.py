"""The same timings as bench/cuda/gpu_ops.c, in PyTorch on the same GPU
(run by scripts/gpu-check.sh): conv2d forward and backward of an SRGAN body
layer, a 4096^3 float32 GEMM (TF32 off and on), Adam (fused=True) over
1.52M parameters in 40 tensors. Medians of CUDA-event times after 3
warm-ups; TF32 off unless said; cuDNN with benchmark off (its default) and
on."""
import sys

import torch


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if not torch.cuda.is_available():
        print("bench torch: skipped: no CUDA device")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    x = torch.randn(16, 64, 128, 128, device=dev, requires_grad=True)
    w = torch.randn(64, 64, 3, 3, device=dev, requires_grad=True)
    b = torch.randn(64, device=dev, requires_grad=True)
    dy = torch.randn(16, 64, 128, 128, device=dev)
    flop = 2.0 * x.numel() * 64 * 9
    for bench in (False, True):
        torch.backends.cudnn.benchmark = bench
        with torch.no_grad():
            f = time_ms(lambda: torch.nn.functional.conv2d(x, w, b, padding=1), reps)
        y = torch.nn.functional.conv2d(x, w, b, padding=1)

        def backward():
            torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)

        bw = time_ms(backward, reps)
        tag = "benchmark on " if bench else "benchmark off"
        print(f"bench torch conv2d forward  ({tag}): {f:8.3f} ms {flop / f / 1e9:7.1f} TFLOP/s")
        print(f"bench torch conv2d backward ({tag}): {bw:8.3f} ms {2 * flop / bw / 1e9:7.1f} "
              "TFLOP/s (data + weight + bias)")
    a = torch.randn(4096, 4096, device=dev)
    c = torch.randn(4096, 4096, device=dev)
    gflop = 2.0 * 4096 ** 3
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        g = time_ms(lambda: torch.mm(a, c), reps)
        print(f"bench torch sgemm 4096^3 (TF32 {'on' if tf32 else 'off'}): {g:8.3f} ms "
              f"{gflop / g / 1e9:7.1f} TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False
    params = [torch.zeros(36864 if i % 2 == 0 else 1024 + i, device=dev, requires_grad=True)
              for i in range(40)]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    total = sum(p.numel() for p in params)
    print(f"bench torch Adam fused, {total} parameters in 40 tensors: "
          f"{time_ms(opt.step, reps):8.3f} ms")
    print(f"bench torch device memory: peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
