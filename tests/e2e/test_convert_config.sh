#!/usr/bin/env bash
# scripts/convert-config.py (issue 23): MMEditing 0.x Python configs to duet
# configs, without running them.
#   - a config tree written here: _base_ (a list of two), a child dict merged
#     into its base, _delete_=True replacing one, dict(**x), f-strings,
#     tuples, None, helper variables, top-level train_cfg / test_cfg and a
#     perceptual loss's layer_weights={'34': 1.0}: the values land where
#     duet reads them, and duet trains on the result;
#   - files that would run code (an import, a call, an attribute): refused
#     naming the line, writing nothing;
#   - duet test evaluates the converted config's data.test, as MMEditing's
#     tools/test.py does (data.val without one);
#   - MMEditing 0.16.1's own Pix2Pix facades config (from the MMEditing venv
#     of scripts/make-mmedit-venv.sh, when it is there): converted, and duet
#     trains an iteration from it (data and widths overridden);
#   - --lmdb: an annotated DIV2K training set (inside RepeatDataset) becomes
#     SRLmdbDataset over MMEditing's LMDB names, its loads io_backend "lmdb"
#     with db_path; MMEditing's own SRGAN and ESRGAN DIV2K configs convert
#     so (test_prepare_div2k trains from such LMDBs); a set with no LMDB twin
#     is refused.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_convert_config
CONVERT="$(cd "$(dirname "$0")/../.." && pwd)/scripts/convert-config.py"
e2e_pngs "$T/data/train" 2
mkdir -p "$T/cfg/_base_"

cat > "$T/cfg/_base_/runtime.py" <<'PY'
checkpoint_config = dict(interval=5000, save_optimizer=True, by_epoch=False)
log_config = dict(interval=100, hooks=[dict(type='TextLoggerHook', by_epoch=False)])
dist_params = dict(backend='nccl')
log_level = 'INFO'
workflow = [('train', 1)]
lr_config = dict(policy='Step', by_epoch=False, step=[100], gamma=0.5)
PY
cat > "$T/cfg/_base_/model.py" <<'PY'
model = dict(type='BasicRestorer',
             generator=dict(type='MSRResNet', in_channels=3, out_channels=3, mid_channels=64,
                            num_blocks=16, upscale_factor=4),
             pixel_loss=dict(type='MSELoss', loss_weight=1.0, reduction='mean'))
optimizers = dict(generator=dict(type='Adam', lr=1e-3, betas=(0.9, 0.999)))
PY
cat > "$T/cfg/child.py" <<PY
_base_ = ['_base_/runtime.py', './_base_/model.py']
exp_name = 'child'
scale = 4
common = dict(in_channels=3, out_channels=3)
model = dict(generator=dict(mid_channels=4, num_blocks=1, **common),
             pixel_loss=dict(_delete_=True, type='L1Loss', loss_weight=1.0, reduction='mean'))
train_cfg = None
test_cfg = dict(metrics=['PSNR'], crop_border=scale)
data = dict(samples_per_gpu=2, workers_per_gpu=4,
            train=dict(type='SRFolderGTDataset', gt_folder=f'$T/data/train', scale=scale,
                       gt_patch_size=2 * scale))
total_iters = 2
lr_config = dict(step=[1])
PY
"$PY" "$CONVERT" "$T/cfg/child.py" -o "$T/child.cfg" > "$T/conv.out" || { cat "$T/conv.out"; fail "convert"; }
grep -q "dropped the helper variables scale, common" "$T/conv.out" || fail "no note on helpers: $(cat "$T/conv.out")"
grep -q "moved the top-level test_cfg into model.test_cfg" "$T/conv.out" || fail "test_cfg note"
"$DUET" train "$T/child.cfg" --work-dir "$T/w" > "$T/train.out" 2>&1 || { cat "$T/child.cfg" "$T/train.out"; fail "duet on the converted config"; }
"$PY" - "$T/child.cfg" <<'PY_CHECK' || { cat "$T/child.cfg"; fail "converted values"; }
import re, sys
t = open(sys.argv[1]).read()
def has(pattern):
    assert re.search(pattern, t, re.S), pattern
has(r'generator = \{\s*type = "MSRResNet";\s*in_channels = 3;\s*out_channels = 3;\s*mid_channels = 4;\s*num_blocks = 1;')
has(r'pixel_loss = \{\s*type = "L1Loss";\s*loss_weight = 1.0;\s*reduction = "mean";\s*\}')  # _delete_: no MSE leftovers
has(r'test_cfg = \{\s*metrics = \["PSNR"\];\s*crop_border = 4;')
has(r'betas = \[0.9, 0.999\];')
has(r'lr_config = \{\s*policy = "Step";\s*by_epoch = false;\s*step = \[1\];\s*gamma = 0.5;')
has(r'workflow = \(\s*\(\s*"train",\s*1\s*\)\s*\);')
assert "train_cfg" not in t and not re.search(r"^(scale|common) =", t, re.M), "helpers kept"
PY_CHECK

# duet train X.py converts on the fly through the same script (issue 33):
# the same run as the converted .cfg; scripts/ found beside the binary,
# or through DUET_SCRIPTS; DUET_PYTHON names the interpreter; a missing
# converter and a refused file are named.
"$DUET" train "$T/cfg/child.py" --work-dir "$T/wpy" > "$T/py.out" 2>&1 || { cat "$T/py.out"; fail "duet train child.py"; }
cmp -s "$T/w/latest.safetensors" "$T/wpy/latest.safetensors" || fail "child.py and child.cfg trained differently"
grep -q "convert-config: .*child.py -> " "$T/py.out" || fail "no converter line: $(cat "$T/py.out")"
DUET_SCRIPTS="$T/noscripts" "$DUET" train "$T/cfg/child.py" --dry-run > "$T/nos.out" 2>&1 && fail "no scripts: accepted"
grep -q "child.py needs scripts/convert-config.py, which is not at $T/noscripts/convert-config.py (\$DUET_SCRIPTS): set DUET_SCRIPTS" "$T/nos.out" \
  || fail "missing converter: $(cat "$T/nos.out")"
DUET_PYTHON=/nonexistent/python3 "$DUET" train "$T/cfg/child.py" --dry-run > "$T/nopy.out" 2>&1 && fail "no python: accepted"
grep -q "cannot run /nonexistent/python3 .*DUET_PYTHON names the Python 3 to use" "$T/nopy.out" \
  || fail "missing python: $(cat "$T/nopy.out")"
printf 'import os\n' > "$T/cfg/code.py"
"$DUET" train "$T/cfg/code.py" --dry-run > "$T/code.out" 2>&1 && fail "a .py with code: accepted"
grep -q "code.py:1: only 'name = value' lines are read" "$T/code.out" && grep -q "refused it" "$T/code.out" \
  || fail "a .py with code: $(cat "$T/code.out")"

# duet test evaluates data.test where the config has one (MMEditing's
# tools/test.py), else data.val.
e2e_pngs "$T/data/val" 1 48
e2e_pngs "$T/data/test" 2 48
VAL="data.val={type=\"SRFolderGTDataset\"; gt_folder=\"$T/data/val\"; scale=4;}"
TST="data.test={type=\"SRFolderGTDataset\"; gt_folder=\"$T/data/test\"; scale=4;}"
"$DUET" test "$T/child.cfg" "$T/w/latest.safetensors" --set "$VAL" --set "$TST" --json > "$T/t2.json" 2> "$T/t2.err" \
  || { cat "$T/t2.err"; fail "duet test with data.test"; }
"$DUET" test "$T/child.cfg" "$T/w/latest.safetensors" --set "$VAL" --json > "$T/t1.json" 2> "$T/t1.err" \
  || { cat "$T/t1.err"; fail "duet test with data.val"; }
"$PY" -c "import json, sys; a, b = (json.load(open(p))['images'] for p in sys.argv[1:]); assert (a, b) == (2, 1), (a, b)" \
  "$T/t2.json" "$T/t1.json" || fail "duet test did not evaluate data.test (2 images) over data.val (1)"

# Perceptual layers.
cat > "$T/cfg/srgan.py" <<'PY'
model = dict(type='SRGAN', perceptual_loss=dict(type='PerceptualLoss', layer_weights={'34': 1.0},
                                                vgg_type='vgg19', perceptual_weight=1.0))
PY
"$PY" "$CONVERT" "$T/cfg/srgan.py" -o "$T/srgan.cfg" > /dev/null || fail "convert srgan"
grep -q "layer_ids = \[34\];" "$T/srgan.cfg" && grep -q "layer_weights = \[1.0\];" "$T/srgan.cfg" \
  || { cat "$T/srgan.cfg"; fail "layer_weights"; }

# --lmdb: the annotated DIV2K set read from LMDB.
cat > "$T/cfg/div2k.py" <<'PY'
data = dict(train=dict(type='RepeatDataset', times=1000, dataset=dict(
    type='SRAnnotationDataset', lq_folder='data/DIV2K/DIV2K_train_LR_bicubic/X4_sub',
    gt_folder='data/DIV2K/DIV2K_train_HR_sub', ann_file='data/DIV2K/meta_info_DIV2K800sub_GT.txt',
    filename_tmpl='{}', scale=4, pipeline=[
        dict(type='LoadImageFromFile', io_backend='disk', key='lq', flag='unchanged'),
        dict(type='LoadImageFromFile', io_backend='disk', key='gt', flag='unchanged'),
        dict(type='RescaleToZeroOne', keys=['lq', 'gt'])])))
PY
"$PY" "$CONVERT" --lmdb "$T/cfg/div2k.py" -o "$T/div2k.cfg" > "$T/div2k.out" || fail "convert --lmdb"
grep -q "data.train.dataset reads data/DIV2K/DIV2K_train_HR_sub.lmdb and data/DIV2K/DIV2K_train_LR_bicubic_X4_sub.lmdb"   "$T/div2k.out" || fail "--lmdb note: $(cat "$T/div2k.out")"
tr -d ' \n' < "$T/div2k.cfg" > "$T/div2k.flat"
for want in 'type="SRLmdbDataset";lq_folder="data/DIV2K/DIV2K_train_LR_bicubic_X4_sub.lmdb";gt_folder="data/DIV2K/DIV2K_train_HR_sub.lmdb";' \
    'io_backend="lmdb";key="lq";flag="unchanged";db_path="data/DIV2K/DIV2K_train_LR_bicubic_X4_sub.lmdb";' \
    'io_backend="lmdb";key="gt";flag="unchanged";db_path="data/DIV2K/DIV2K_train_HR_sub.lmdb";' 'times=1000;'; do
  grep -qF -- "$want" "$T/div2k.flat" || { cat "$T/div2k.cfg"; fail "--lmdb: no $want"; }
done
! grep -q "ann_file\|filename_tmpl" "$T/div2k.cfg" || fail "--lmdb kept ann_file"
printf '%s\n' "data = dict(train=dict(type='GenerationPairedDataset', dataroot='x', pipeline=[]))" > "$T/cfg/p.py"
if "$PY" "$CONVERT" --lmdb "$T/cfg/p.py" -o "$T/p.cfg" > "$T/p.out" 2>&1; then fail "--lmdb on a paired-image set"; fi
grep -q "data.train is a GenerationPairedDataset; only SRAnnotationDataset and SRFolderDataset" "$T/p.out" \
  || fail "--lmdb refusal: $(cat "$T/p.out")"

# Code is refused, naming the line; nothing is written.
refuse() {  # name, file text, message
  printf '%s\n' "$2" > "$T/cfg/$1.py"
  if "$PY" "$CONVERT" "$T/cfg/$1.py" -o "$T/$1.cfg" > "$T/$1.out" 2>&1; then fail "$1 accepted"; fi
  grep -qF -- "$3" "$T/$1.out" || fail "$1: no '$3' in $(cat "$T/$1.out")"
  [ ! -e "$T/$1.cfg" ] || fail "$1: wrote a file"
}
refuse import $'total_iters = 1\nimport os' "$T/cfg/import.py:2: only 'name = value' lines are read"
refuse call2 $'x = __import__("os")' "call2.py:1: "
refuse attr $'x = dict(a=1).keys' "attr.py:1: "
[ ! -e "$T/PWNED" ] || fail "a config ran code"

# MMEditing's own config, when its venv is there.
VENV=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
P2P=$(ls "$VENV"/lib/python3*/site-packages/mmedit/.mim/configs/synthesizers/pix2pix/pix2pix_vanilla_unet_bn_1x1_80k_facades.py 2> /dev/null | head -1 || true)
if [ -n "$P2P" ]; then
  "$PY" - "$T/facades" <<'PY_PAIRS'
import os, random, struct, sys, zlib
rng = random.Random(1)
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
for d in ("train", "test", "val"):
    os.makedirs(os.path.join(sys.argv[1], d))
    raw = b"".join(b"\x00" + bytes(rng.randint(0, 255) for _ in range(128 * 3)) for _ in range(64))
    open(os.path.join(sys.argv[1], d, "1.png"), "wb").write(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 128, 64, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY_PAIRS
  "$PY" "$CONVERT" "$P2P" -o "$T/p2p.cfg" > "$T/p2p_conv.out" || { cat "$T/p2p_conv.out"; fail "MMEditing's pix2pix config"; }
  sed -i "s|data/paired/facades|$T/facades|" "$T/p2p.cfg"
  "$DUET" train "$T/p2p.cfg" --work-dir "$T/wp" --set total_iters=1 --set model.generator.base_channels=4 \
    --set model.discriminator.base_channels=4 > "$T/p2p.out" 2>&1 || { cat "$T/p2p.out"; fail "duet on MMEditing's converted pix2pix config"; }
  echo "test_convert_config: MMEditing 0.16.1's pix2pix_vanilla_unet_bn_1x1_80k_facades.py converted; duet trained from it"
  for c in srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py esrgan/esrgan_x4c64b23g32_g1_400k_div2k.py; do
    f=$(ls "$VENV"/lib/python3*/site-packages/mmedit/.mim/configs/restorers/$c | head -1)
    "$PY" "$CONVERT" --lmdb "$f" -o "$T/mm_lmdb.cfg" > "$T/mm_lmdb.out" || { cat "$T/mm_lmdb.out"; fail "--lmdb $c"; }
    ! grep -qi "lacks\|ann_file" "$T/mm_lmdb.out" "$T/mm_lmdb.cfg" || fail "--lmdb $c: $(cat "$T/mm_lmdb.out")"
    [ "$(grep -c 'io_backend = "lmdb"' "$T/mm_lmdb.cfg")" = 2 ] && grep -q 'type = "SRLmdbDataset"' "$T/mm_lmdb.cfg" \
      || fail "--lmdb $c: $(cat "$T/mm_lmdb.cfg")"
  done
  echo "test_convert_config: MMEditing's SRGAN and ESRGAN DIV2K configs converted with --lmdb"
else
  echo "test_convert_config: MMEditing's own config not checked: no MMEditing venv at $VENV (scripts/make-mmedit-venv.sh)"
fi
echo "test_convert_config: ok"
