#!/usr/bin/env bash
# Every MMEditing 0.16.1 config of the models duet has runs as it is (issue
# 33): the SR configs over MSRResNet / RRDBNet (srresnet_srgan, esrgan),
# Pix2Pix, CycleGAN, Global&Local, DeepFillv1 and DeepFillv2, taken from the
# MMEditing venv (scripts/make-mmedit-venv.sh; without it the test is
# skipped), all of them, not a chosen few:
#   - each converts with scripts/convert-config.py and `duet train X.cfg
#     --dry-run` accepts it with no edit, in a folder where
#     tests/e2e/mmedit_standin.py made stand-in data at the config's own
#     paths (DIV2K sub-images, Set5/Set14, facades/maps/edges2shoes pairs,
#     unpaired sets, Places/CelebA lists), a stand-in .pth at load_from, and
#     torchvision's vgg19 file in TORCH_HOME/hub/checkpoints for the
#     perceptual loss (MMEditing's pretrained = 'torchvision://vgg19');
#   - the count of configs and of accepted ones is printed, and every
#     config must be accepted;
#   - `duet train X.py --dry-run` converts on the fly (one config of each
#     family), with the same result;
#   - no run of them names a key as unknown, and the stand-in vgg19's
#     hash mismatch is a warning naming the file.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_mmedit_configs
HERE=$(cd "$(dirname "$0")" && pwd)
CONVERT="$HERE/../../scripts/convert-config.py"
VENV=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
CFGS=$(ls -d "$VENV"/lib/python3*/site-packages/mmedit/.mim/configs 2> /dev/null | head -1 || true)
if [ -z "$CFGS" ]; then
  echo "SKIPPED: no MMEditing venv at $VENV (scripts/make-mmedit-venv.sh)"
  exit 77
fi
families="restorers/srresnet_srgan restorers/esrgan synthesizers/pix2pix synthesizers/cyclegan
          inpainting/global_local inpainting/deepfillv1 inpainting/deepfillv2"
mkdir -p "$T/run" "$T/cfg"
export TORCH_HOME="$T/torch"
total=0 ok=0 failed=""
for fam in $families; do
  for py in "$CFGS"/$fam/*.py; do
    name=$(basename "${py%.py}")
    total=$((total + 1))
    "$PY" "$HERE/mmedit_standin.py" "$py" "$T/run" "$TORCH_HOME" > /dev/null \
      || fail "$name: no stand-in data"
    "$PY" "$CONVERT" "$py" -o "$T/cfg/$name.cfg" > /dev/null || fail "$name: convert-config"
    if (cd "$T/run" && "$DUET" train "$T/cfg/$name.cfg" --dry-run > "$T/$name.out" 2>&1); then
      ok=$((ok + 1))
    else
      failed="$failed $name"
      sed 's/^/    /' "$T/$name.out" | tail -5
    fi
    ! grep -q "unknown key" "$T/$name.out" || { cat "$T/$name.out"; fail "$name: an unknown key"; }
  done
done
echo "test_mmedit_configs: $ok of $total MMEditing 0.16.1 configs accepted by duet train --dry-run"
[ "$total" -ge 20 ] || fail "only $total configs found under $CFGS (MMEditing 0.16.1 has 20 of these families)"
[ "$ok" = "$total" ] || fail "refused:$failed"
grep -q "warning: .*vgg19-dcbb9e9d.pth: its sha256 begins" "$T/srgan_x4c64b16_g1_1000k_div2k.out" \
  || { cat "$T/srgan_x4c64b16_g1_1000k_div2k.out"; fail "no hash warning for the stand-in vgg19"; }

# duet train X.py: converted on the fly, one config of each family.
for fam in $families; do
  py=$(ls "$CFGS"/$fam/*.py | head -1)
  (cd "$T/run" && "$DUET" train "$py" --dry-run > "$T/py.out" 2>&1) \
    || { cat "$T/py.out"; fail "duet train $(basename "$py") --dry-run"; }
  grep -q "is ready to train" "$T/py.out" || fail "$(basename "$py"): $(cat "$T/py.out")"
done
echo "test_mmedit_configs: duet train X.py --dry-run converts on the fly ($(echo $families | wc -w) families)"
echo "test_mmedit_configs: ok"
