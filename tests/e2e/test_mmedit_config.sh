#!/usr/bin/env bash
# An MMEditing 0.16 config's run-level keys (issue 23), one process:
#   - exp_name, log_level, workflow, dist_params, gpu_ids, cudnn_benchmark,
#     find_unused_parameters, mp_start_method, opencv_num_threads,
#     visual_config, data.workers_per_gpu / val_* / *_dataloader,
#     log_config.hooks (TextLoggerHook; TensorboardLoggerHook writes
#     WORK_DIR/tf_logs, see test_tensorboard.sh),
#     evaluation.gpu_collect: accepted; those without effect named once with
#     the reason; exp_name names the default work dir (./work_dirs/<exp_name>);
#     data.train_dataloader.samples_per_gpu wins over data.samples_per_gpu,
#     as in MMEditing's build_dataloader;
#   - resume_from resumes as --resume=PATH does; so do --resume-from PATH
#     and --cfg-options KEY=VALUE ... (mmcv's spelling of --set);
#   - typos in a command or an option get a did-you-mean;
#   - each run's first log.jsonl record marks it ("mode": "run": start
#     iteration, resumed_from) and names its own text log file;
#   - log_level = "WARNING" silences duet's info messages;
#   - a bad log_level, a by_epoch TextLoggerHook and a misspelt key are
#     still errors naming the key.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_mmedit_config
export DUET_LOG=   # the config's log_level decides (DUET_LOG would win)
e2e_pngs "$T/data/train" 2
e2e_pngs "$T/data/val" 1 48
e2e_tiny_cfg "$T/mm.cfg" "$T/data/train" 4 1 'total_iters = 2;
exp_name = "mm_exp";
log_level = "INFO";
workflow = ( ("train", 1) );
dist_params = { backend = "nccl"; };
gpu_ids = [0];
cudnn_benchmark = true;
find_unused_parameters = false;
mp_start_method = "fork";
opencv_num_threads = 0;
visual_config = "";
log_config = { interval = 1; hooks = ( { type = "TextLoggerHook"; by_epoch = false; },
                                       { type = "TensorboardLoggerHook"; } ); };
checkpoint_config = { interval = 1; by_epoch = false; save_optimizer = true; max_keep_ckpts = 1; };
fp16 = { loss_scale = 512.0; };
evaluation = { interval = 5000; gpu_collect = true; };'
sed -i "s|^  train = {.*|&\n  val = { type = \"SRFolderGTDataset\"; gt_folder = \"$T/data/val\"; scale = 4; };\n  workers_per_gpu = 4; val_samples_per_gpu = 1; val_workers_per_gpu = 1; drop_last = true;\n  train_dataloader = { samples_per_gpu = 2; drop_last = true; }; val_dataloader = { samples_per_gpu = 1; };|" "$T/mm.cfg"

cd "$T"
"$DUET" train mm.cfg > run.out 2>&1 || { cat run.out; fail "an MMEditing config's keys"; }
# One line names every key of no effect; each reason at DEBUG (issue 33).
[ "$(grep -c "MMEditing keys\? with no effect in duet" run.out)" = 1 ] || { cat run.out; fail "not one summary line"; }
! grep -q "has no effect in duet: " run.out || { cat run.out; fail "reasons at INFO"; }
"$DUET" train mm.cfg --dry-run --set 'log_level="DEBUG"' > debug.out 2>&1 || { cat debug.out; fail "log_level DEBUG"; }
for k in workflow dist_params gpu_ids cudnn_benchmark find_unused_parameters mp_start_method \
         opencv_num_threads visual_config data.workers_per_gpu data.val_workers_per_gpu \
         data.val_samples_per_gpu data.val_dataloader data.train_dataloader.drop_last \
         evaluation.gpu_collect data.drop_last fp16; do
  grep "MMEditing keys with no effect in duet: " run.out | grep -q "[ ,]$k[,( ]" || { cat run.out; fail "$k not in the summary"; }
  grep -q "config: $k has no effect in duet: " debug.out || { cat debug.out; fail "no reason for $k at DEBUG"; }
done
grep -q 'config: fp16 has no effect in duet: .*mixed_precision = "bf16"' debug.out || fail "fp16 names bf16's key"
# checkpoint_config.max_keep_ckpts = 1: only the newest iter_N stays.
[ "$(ls work_dirs/mm_exp/iter_*.safetensors)" = "work_dirs/mm_exp/iter_2.safetensors" ] \
  || fail "max_keep_ckpts = 1 kept: $(ls work_dirs/mm_exp)"
grep -q "TensorBoard events: ./work_dirs/mm_exp/tf_logs/events.out.tfevents" run.out \
  || { cat run.out; fail "TensorboardLoggerHook wrote no events"; }
grep -q "2 images per process" run.out || { cat run.out; fail "train_dataloader.samples_per_gpu was not used"; }
[ -e work_dirs/mm_exp/latest.safetensors ] || fail "exp_name did not name the work dir"

# resume_from: continue work_dirs/mm_exp's run to 4 iterations.
"$DUET" train mm.cfg --set total_iters=4 --set 'resume_from="work_dirs/mm_exp/iter_2.safetensors"' \
  > resume.out 2>&1 || { cat resume.out; fail "resume_from"; }
grep -q "resumed from work_dirs/mm_exp/iter_2.safetensors at iteration 2" resume.out \
  || { cat resume.out; fail "resume_from did not resume"; }

# Each run in a work dir starts with a "run" record in log.jsonl (where it
# started, what it resumed from) and keeps its text lines in its own
# <YYYYmmdd_HHMMSS>.log, as MMEditing keeps one log per run.
"$PY" - work_dirs/mm_exp <<'PY_RUNS' || fail "run records / per-run text logs"
import json, os, sys
wd = sys.argv[1]
runs = [r for r in map(json.loads, open(os.path.join(wd, "log.jsonl"))) if r["mode"] == "run"]
assert [r["iter"] for r in runs] == [0, 2], runs
assert runs[0]["resumed_from"] is None and runs[1]["resumed_from"].endswith("iter_2.safetensors"), runs
for r in runs:
    text = open(os.path.join(wd, r["text_log"])).read()
    assert "duet 0.1.0: BasicRestorer" in text, (r["text_log"], text[:200])
assert "resumed from" in open(os.path.join(wd, runs[1]["text_log"])).read()
# mmcv's <timestamp>.log.json beside each text log: the meta record first
# (no "epoch", so mmcv's analyze_logs skips it), then TextLoggerHook records.
for r in runs:
    assert r["json_log"] == r["text_log"] + ".json", r
    assert r["git_describe"] and r["seed"] == 1, r
    recs = [json.loads(l) for l in open(os.path.join(wd, r["json_log"]))]
    meta, rest = recs[0], recs[1:]
    assert "epoch" not in meta and meta["exp_name"] == "mm_exp", meta
    assert meta["git_describe"] == r["git_describe"] and meta["world_size"] == 1, meta
    assert "total_iters" in meta["config"] and "duet 0.1.0" in meta["env_info"], meta
    train = [x for x in rest if x["mode"] == "train"]
    assert train and all(x["epoch"] == 1 and "time" in x and "data_time" in x for x in train), rest
    assert all(isinstance(x["lr"], dict) and "generator" in x["lr"] for x in train), train
    assert all(x["iter"] > r["iter"] for x in train), (r, train)
    # the same values as log.jsonl's records, to mmcv's 5 decimals
    full = {x["iter"]: x for x in map(json.loads, open(os.path.join(wd, "log.jsonl")))
            if x["mode"] == "train"}
    for x in train:
        assert abs(x["loss"] - round(full[x["iter"]]["loss"], 5)) < 1e-9, (x, full[x["iter"]])
PY_RUNS

# MMEditing's command-line spellings: --cfg-options (several KEY=VALUE) and
# --resume-from PATH.
"$DUET" train mm.cfg --cfg-options total_iters=6 'exp_name="mm_exp"' \
  --resume-from work_dirs/mm_exp/iter_4.safetensors > cfgopt.out 2>&1 || { cat cfgopt.out; fail "--cfg-options / --resume-from"; }
grep -q "resumed from work_dirs/mm_exp/iter_4.safetensors at iteration 4" cfgopt.out \
  || { cat cfgopt.out; fail "--resume-from did not resume"; }
[ -e work_dirs/mm_exp/iter_6.safetensors ] || fail "--cfg-options total_iters=6 was not applied"
# Typos in a command or an option get a suggestion.
"$DUET" tran mm.cfg > typo1.out 2>&1 && fail "'duet tran' accepted"
grep -q "unknown command 'tran' (did you mean 'train'?)" typo1.out || { cat typo1.out; fail "no suggestion for tran"; }
"$DUET" train mm.cfg --wrk-dir x > typo2.out 2>&1 && fail "--wrk-dir accepted"
grep -q "unknown option '--wrk-dir' (did you mean '--work-dir'?)" typo2.out || { cat typo2.out; fail "no suggestion for --wrk-dir"; }

# log_level = "WARNING": duet's info messages (the notes above) are not
# printed (the training log's own lines follow log_config).
"$DUET" train mm.cfg --set 'log_level="WARNING"' --set 'exp_name="quiet"' > quiet.out 2>&1 \
  || { cat quiet.out; fail "log_level WARNING"; }
! grep -q "has no effect in duet" quiet.out || { cat quiet.out; fail "log_level = WARNING printed info notes"; }

# Still errors, naming the key.
bad() {  # name, --set, message
  if "$DUET" train mm.cfg --set 'exp_name="bad"' --set "$2" > "$1.out" 2>&1; then fail "$1 accepted"; fi
  grep -qF -- "$3" "$1.out" || { cat "$1.out"; fail "$1: no '$3'"; }
}
bad level 'log_level="LOUD"' "log_level = \"LOUD\": use DEBUG, INFO, WARNING or ERROR"
bad epoch 'log_config.hooks.[0].by_epoch=true' "'log_config.hooks.[0].by_epoch' = true is not supported: duet's runner is iteration-based"
bad typo 'exp_nme="x"' "unknown key 'exp_nme'"
echo "test_mmedit_config: ok"
