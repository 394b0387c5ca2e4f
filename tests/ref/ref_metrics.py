"""PSNR / SSIM / tensor2img references, read by tests/unit/test_ref_srgan.c.

The formulas are MMEditing's (mmedit/core/evaluation/metrics.py and
mmedit/core/misc.py tensor2img), written out in numpy: cv2.filter2D with
cv2.getGaussianKernel(11, 1.5) is replaced by the same valid-mode
correlation (only the [5:-5, 5:-5] part is kept, so the border mode does not
matter), and mmcv.bgr2ycbcr(y_only=True) by its formula.

metrics.safetensors:
  t2i.in      (2, 3, 9, 7) floats in [-0.2, 1.2] (some outside [0, 1])
  t2i.out     (2, 9, 7, 3) tensor2img of each sample, uint8 values as floats
  img.a, img.b          (2, 40, 36, 3) uint8 BGR images stored as floats;
                        b is a noisy copy of a
  psnr.<mode>.<crop>    (2,) per image, mode rgb or y, crop 0 or 4
  ssim.<mode>.<crop>    (2,)
  eval.out, eval.gt     (2, 3, 40, 36) output/gt tensors for duet_evaluate
  eval.psnr, eval.ssim  (1,) batch means, crop_border 4, convert_to y
"""
import os

import numpy as np
import torch

import st


def tensor2img(t):
    # t (3, H, W) float32 -> (H, W, 3) uint8 BGR, as mmedit's tensor2img
    t = t.float().clamp(0, 1)
    t = (t - 0) / (1 - 0)
    img = t.numpy()
    img = np.transpose(img[[2, 1, 0], :, :], (1, 2, 0))
    img = (img * 255.0).round()
    return img.astype(np.uint8)


def bgr2y(img):
    # mmcv.bgr2ycbcr(img / 255., y_only=True) * 255. on float32 input
    img = img.astype(np.float32) / 255.
    y = np.dot(img, [24.966, 128.553, 65.481]) + 16.0
    y /= 255.
    return y * 255.


def prepare(img, crop, convert_to):
    img = img.astype(np.float32)
    if convert_to == "y":
        img = bgr2y(img)[..., None]
    if crop:
        img = img[crop:-crop, crop:-crop, ...]
    return img


def psnr(a, b, crop, convert_to):
    a, b = prepare(a, crop, convert_to), prepare(b, crop, convert_to)
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    if mse == 0:
        return float("inf")
    return 20. * np.log10(255. / np.sqrt(mse))


def gaussian_window():
    x = np.arange(11) - 5
    k = np.exp(-(x ** 2) / (2 * 1.5 ** 2))
    k = k / k.sum()
    return np.outer(k, k)


def filter_valid(img, win):
    h, w = img.shape
    out = np.zeros((h - 10, w - 10))
    for a in range(11):
        for b in range(11):
            out += win[a, b] * img[a:a + h - 10, b:b + w - 10]
    return out


def _ssim(img1, img2):
    C1 = (0.01 * 255) ** 2
    C2 = (0.03 * 255) ** 2
    img1 = img1.astype(np.float64)
    img2 = img2.astype(np.float64)
    win = gaussian_window()
    mu1 = filter_valid(img1, win)
    mu2 = filter_valid(img2, win)
    mu1_sq, mu2_sq, mu1_mu2 = mu1 ** 2, mu2 ** 2, mu1 * mu2
    sigma1_sq = filter_valid(img1 ** 2, win) - mu1_sq
    sigma2_sq = filter_valid(img2 ** 2, win) - mu2_sq
    sigma12 = filter_valid(img1 * img2, win) - mu1_mu2
    ssim_map = ((2 * mu1_mu2 + C1) * (2 * sigma12 + C2)) / (
        (mu1_sq + mu2_sq + C1) * (sigma1_sq + sigma2_sq + C2))
    return ssim_map.mean()


def ssim(a, b, crop, convert_to):
    a, b = prepare(a, crop, convert_to), prepare(b, crop, convert_to)
    return np.array([_ssim(a[..., i], b[..., i]) for i in range(a.shape[2])]).mean()


def main(outdir):
    g = torch.Generator().manual_seed(424242)
    d = {}
    t = torch.rand(2, 3, 9, 7, generator=g) * 1.4 - 0.2
    d["t2i.in"] = t
    d["t2i.out"] = torch.from_numpy(np.stack([tensor2img(t[i]) for i in range(2)]).astype(np.float32))

    a = torch.randint(0, 256, (2, 40, 36, 3), generator=g).numpy().astype(np.uint8)
    # smooth a little so that SSIM is far from 0, then add noise for b
    a = ((a.astype(np.float32) + np.roll(a, 1, axis=1) + np.roll(a, 1, axis=2)) / 3).astype(np.uint8)
    noise = torch.randint(-40, 41, (2, 40, 36, 3), generator=g).numpy()
    b = np.clip(a.astype(np.int64) + noise, 0, 255).astype(np.uint8)
    d["img.a"] = torch.from_numpy(a.astype(np.float32))
    d["img.b"] = torch.from_numpy(b.astype(np.float32))
    for mode in ("rgb", "y"):
        conv = "y" if mode == "y" else None
        for crop in (0, 4):
            d[f"psnr.{mode}.{crop}"] = torch.tensor([psnr(a[i], b[i], crop, conv) for i in range(2)],
                                                   dtype=torch.float64)
            d[f"ssim.{mode}.{crop}"] = torch.tensor([ssim(a[i], b[i], crop, conv) for i in range(2)],
                                                   dtype=torch.float64)

    out = torch.rand(2, 3, 40, 36, generator=g)
    gt = (out + 0.05 * torch.randn(2, 3, 40, 36, generator=g)).clamp(0, 1)
    d["eval.out"], d["eval.gt"] = out, gt
    ps = [psnr(tensor2img(out[i]), tensor2img(gt[i]), 4, "y") for i in range(2)]
    ss = [ssim(tensor2img(out[i]), tensor2img(gt[i]), 4, "y") for i in range(2)]
    d["eval.psnr"] = torch.tensor([np.mean(ps)], dtype=torch.float64)
    d["eval.ssim"] = torch.tensor([np.mean(ss)], dtype=torch.float64)
    st.save(d, os.path.join(outdir, "metrics.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
