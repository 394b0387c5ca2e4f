"""MMEditing's own ContextualAttentionModule (DeepFillv1's refiner neck) as
the reference: contextual_attention.safetensors.

mmedit/models/common/contextual_attention.py imports only torch, so it is
loaded straight from the mmedit venv's site-packages (scripts/
make-mmedit-venv.sh; DUET_MMEDIT_VENV or ~/.cache/duet/mmedit-venv) under
this torch, without mmcv. Without the venv no file is written and the C test
skips, saying how to make it.

Module with its defaults; x, context (2, 4, 8, 8); mask (2, 1, 8, 8) with a
hole. Cases nomask and mask: <case>.out, <case>.attention (MMEditing's
(n, h, w, h, w) scores), r (upstream gradient of out) and the gradients of
sum(out * r) with respect to x and context (<case>.grad.x, .grad.context)."""
import glob
import importlib.util
import os

import torch

import st


def mmedit_file():
    venv = os.environ.get("DUET_MMEDIT_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "duet", "mmedit-venv")
    hits = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "mmedit", "models",
                                  "common", "contextual_attention.py"))
    return hits[0] if hits else None


def main(outdir):
    path = mmedit_file()
    if path is None:
        print("ref_contextual_attention: no mmedit venv, contextual_attention.safetensors "
              "not written (scripts/make-mmedit-venv.sh makes it)")
        return
    spec = importlib.util.spec_from_file_location("mmedit_contextual_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = torch.Generator().manual_seed(41)
    x0 = torch.randn(2, 4, 8, 8, generator=g)
    c0 = torch.randn(2, 4, 8, 8, generator=g)
    mask = torch.zeros(2, 1, 8, 8)
    mask[0, :, 2:6, 3:7] = 1.0
    mask[1, :, 0:3, 0:8] = 1.0
    d = {"x": x0, "context": c0, "mask": mask}
    module = mod.ContextualAttentionModule()
    for case, m in (("nomask", None), ("mask", mask)):
        x = x0.clone().requires_grad_(True)
        c = c0.clone().requires_grad_(True)
        out, attn = module(x, c, m)
        r = torch.randn(out.shape, generator=g)
        (out * r).sum().backward()
        d[f"{case}.out"] = out.detach()
        d[f"{case}.attention"] = attn.detach().reshape(attn.shape[0], -1, *attn.shape[3:])
        d[f"{case}.r"] = r
        d[f"{case}.grad.x"] = x.grad.clone()
        d[f"{case}.grad.context"] = c.grad.clone()
    d["fuse_kernel"] = module.fuse_kernel.detach().clone()
    st.save(d, os.path.join(outdir, "contextual_attention.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
