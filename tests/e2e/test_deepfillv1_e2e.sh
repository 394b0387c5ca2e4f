#!/usr/bin/env bash
# End to end for DeepFillv1 (DeepFillv1Inpaintor) on 2 processes:
# configs/deepfillv1_tiny.cfg, 100 iterations of box holes with one
# discriminator step per generator step as the config has them, through
# e2e_deepfill (common.sh, which says what it checks; the filled held-out
# stand-ins must beat the masked input by 3 dB: measured +11.1); the log must hold
# both stages' L1 terms, the adversarial term, both discriminators' WGAN
# losses, their gradient penalties and the DiscShiftLoss.
source "$(dirname "$0")/common.sh"
e2e_begin deepfillv1_e2e
E2E_DEEPFILL_GAIN_DB=3.0 e2e_deepfill "$(cd "$(dirname "$0")/../.." && pwd)/configs/deepfillv1_tiny.cfg" \
  real_loss_global real_loss_local fake_loss_global fake_loss_local loss_gp_global \
  loss_gp_local loss_disc_shift_global loss_disc_shift_local stage1_loss_l1_hole \
  stage1_loss_l1_valid stage2_loss_l1_hole stage2_loss_l1_valid stage2_loss_g_fake
echo "test_deepfillv1_e2e: ok"
