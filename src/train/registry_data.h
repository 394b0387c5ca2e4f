/* The registry's builders for MMEditing's translation datasets
 * (registry_data.c), called by duet_build_dataset. */
#ifndef DUET_REGISTRY_DATA_H
#define DUET_REGISTRY_DATA_H

#include "duet/train.h"

/* GenerationPairedDataset / GenerationUnpairedDataset from the group d (at
 * `path`): dataroot, test_mode, max_image_pixels and the pipeline list. */
int duet__build_generation_paired(duet_config *d, const char *path, bool train,
                                  duet_dataset **out);
int duet__build_generation_unpaired(duet_config *d, const char *path, bool train,
                                    duet_dataset **out);

#endif
