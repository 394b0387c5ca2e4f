/* The registry's builders for MMEditing's datasets, called by
 * duet_build_dataset: translation (registry_data.c) and super-resolution
 * (registry_sr.c). */
#ifndef DUET_REGISTRY_DATA_H
#define DUET_REGISTRY_DATA_H

#include "duet/config.h"
#include "duet/registry.h"

/* GenerationPairedDataset / GenerationUnpairedDataset from the group d (at
 * `path`): dataroot, test_mode, max_image_pixels and the pipeline list. */
int duet__build_generation_paired(duet_config *d, const char *path, bool train,
                                  duet_dataset **out);
int duet__build_generation_unpaired(duet_config *d, const char *path, bool train,
                                    duet_dataset **out);

/* SRFolderGTDataset, SRFolderDataset, SRAnnotationDataset, SRLmdbDataset (gt_folder,
 * lq_folder, ann_file, filename_tmpl, scale, test_mode, lazy, and the
 * pipeline list or duet's flat crop/flip keys) and RepeatDataset (its
 * `dataset` group; `times` is build.c's). */
int duet__build_sr_folder_gt(duet_config *d, const char *path, bool train, duet_dataset **out);
int duet__build_sr_folder(duet_config *d, const char *path, bool train, duet_dataset **out);
int duet__build_sr_annotation(duet_config *d, const char *path, bool train,
                              duet_dataset **out);
int duet__build_sr_lmdb(duet_config *d, const char *path, bool train, duet_dataset **out);
int duet__build_repeat(duet_config *d, const char *path, bool train, duet_dataset **out);

/* duet infer's input for a model whose forward takes `key` ("img_a" or
 * "img_b"): the image file `image` through the steps of cfg's
 * data.val.pipeline for that key (see duet_translation_one_image), a
 * (1, 3, H, W) tensor as duet test would give the model. Errors name the
 * config key. */
int duet__translation_infer_input(duet_config *cfg, const char *key, const char *image,
                                  int64_t max_pixels, duet_tensor **out);

/* ImgInpaintingDataset (registry_inpainting.c): ann_file, data_prefix,
 * test_mode, max_image_pixels and the pipeline list (LoadImageFromFile,
 * LoadMask with mask_mode and mask_config, Crop, Resize, Flip,
 * RescaleToZeroOne, Normalize, GetMaskedImage, Collect, ImageToTensor,
 * ToTensor). */
int duet__build_img_inpainting(duet_config *d, const char *path, bool train, duet_dataset **out);
/* duet infer's input for an inpaintor: `image` and the mask file `mask`
 * through cfg's data.val.pipeline (duet_inpainting_one_image). */
int duet__inpainting_infer_input(duet_config *cfg, const char *image, const char *mask,
                                 int64_t max_pixels, duet_batch *out);

#endif
