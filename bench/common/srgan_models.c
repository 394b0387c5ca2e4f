#include "srgan_models.h"

#include <string.h>

static const bench_model models[] = {
    {"tiny", 32, 4, 16, 64, 8, 8, {16, 16, 0, 32, 32, 0, 64, 64}, 12},
    /* MMEditing's srgan_x4c64b16: vgg19 features up to conv5_4 (layer 34). */
    {"full", 64, 16, 64, 128, 16, 21,
     {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512,
      0}, 34},
};

const bench_model *bench_find_model(const char *name) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

duet_srgan_opts bench_srgan_opts(const bench_model *bm) {
    duet_srgan_opts so = duet_srgan_opts_default();
    so.generator.mid_channels = bm->mid;
    so.generator.num_blocks = bm->blocks;
    so.discriminator.mid_channels = bm->dmid;
    so.discriminator.input_size = bm->crop;
    so.perceptual_loss.ncfg = bm->ncfg;
    memcpy(so.perceptual_loss.cfg, bm->cfg, sizeof bm->cfg);
    so.perceptual_loss.nlayer_weights = 1;
    so.perceptual_loss.layer_ids[0] = bm->layer;
    so.perceptual_loss.layer_weights[0] = 1.0f;
    return so;
}
