#!/usr/bin/env bash
# End to end for DeepFillv2 (TwoStageInpaintor) on 2 processes:
# configs/deepfillv2_tiny.cfg, 100 iterations of free-form masks, through
# e2e_deepfill (common.sh, which says what it checks; the filled held-out
# stand-ins must beat the masked input by 1.5 dB: measured +5.0); the log must hold
# both stages' L1 terms, the adversarial term and the discriminator's hinge
# losses.
source "$(dirname "$0")/common.sh"
e2e_begin deepfillv2_e2e
E2E_DEEPFILL_GAIN_DB=1.5 e2e_deepfill "$(cd "$(dirname "$0")/../.." && pwd)/configs/deepfillv2_tiny.cfg" \
  real_loss fake_loss stage1_loss_l1_hole stage1_loss_l1_valid stage2_loss_l1_hole \
  stage2_loss_l1_valid stage2_loss_g_fake
echo "test_deepfillv2_e2e: ok"
