/* A 5x7 bitmap font (the outputs layer, for the runner): capitals, digits and
 * %()+,-./:=_| ; lower case is drawn as capitals, other characters as
 * blanks. Each glyph takes 6 * scale pixels across and 7 * scale down. */
#ifndef DUET_RUNNER_FONT_H
#define DUET_RUNNER_FONT_H
#include <stdint.h>

#include "duet/data.h"

/* s drawn into im (3 channels) with its top-left corner at (x, y), in colour
 * rgb, each font pixel scale x scale; what falls outside im is clipped. */
void duet__draw_text(duet_image *im, int64_t x, int64_t y, const char *s, const uint8_t rgb[3],
                     int scale);
#endif
