/* libFuzzer target: the image decoders (PNG through libpng, JPEG through
 * libjpeg-turbo with duet's EXIF orientation parser), from memory: the same
 * path duet_image_load takes after reading the file. */
#include <stdint.h>

#include "duet/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    duet_image *img = NULL;
    if (duet_image_decode(data, size, "<fuzz>", &img) == DUET_OK) {
        duet_tensor *t = NULL;
        if (duet_image_to_tensor(img, &t) == DUET_OK) duet_tensor_release(t);
        duet_image_destroy(img);
    }
    return 0;
}
