/* Private to src/data/: the folder listing the SR datasets and the data
 * preparation tools share. */
#ifndef DUET_DATA_INTERNAL_H
#define DUET_DATA_INTERNAL_H

#include "duet/data.h"

/* The image file names (*.png, *.jpg, *.jpeg, any case; regular files) of
 * `dir`, sorted by strcmp; DUET_ENOTFOUND for none or a missing folder.
 * Free with duet__free_names. */
int duet__list_images(const char *dir, char ***out, int64_t *count);
void duet__free_names(char **names, int64_t n);

#endif
