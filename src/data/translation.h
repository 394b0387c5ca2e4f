/* Private to src/data/: OpenCV's bicubic resize that mmcv.imresize runs
 * (cv_resize.c), used by the translation pipeline's Resize (translation.c). */
#ifndef DUET_DATA_TRANSLATION_H
#define DUET_DATA_TRANSLATION_H

#include "duet/data.h"

/* OpenCV's cv::resize(..., INTER_CUBIC) on an 8-bit (h, w, c) image into
 * dst (oh, ow, c): Keys' cubic with a = -0.75, half-pixel centres (source
 * x = (dx + 0.5) * w / ow - 0.5 in float), edge pixels repeated, no
 * antialiasing, weights rounded to 11-bit fixed point and the two passes'
 * sum shifted back by 22 bits with rounding, then clamped to [0, 255]
 * (OpenCV's scalar code; its SIMD vertical pass rounds the same sum in
 * float and can differ by one level on rare pixels). c in 1..4. */
int duet__cv_resize_cubic_u8(const uint8_t *src, int64_t h, int64_t w, int c, uint8_t *dst,
                             int64_t oh, int64_t ow);

#endif
