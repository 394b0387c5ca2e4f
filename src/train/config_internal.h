/* Private to src/train/config*.c. */
#ifndef DUET_TRAIN_CONFIG_INTERNAL_H
#define DUET_TRAIN_CONFIG_INTERNAL_H

#include "duet/base.h"

/* DUET_ECONFIG "x.cfg:3: 'scale' = 4294967300 does not fit in a 32-bit
 * integer ..." for the first integer literal without an L suffix that
 * libconfig 1.5 would wrap; follows @include files (relative to
 * include_dir, may be NULL). `name` stands for the file in messages. */
int duet__config_check_int_literals(const char *text, const char *name,
                                    const char *include_dir);
/* The same for a file (an unreadable file is left to libconfig to report). */
int duet__config_check_int_literals_file(const char *path, const char *include_dir);

#endif
