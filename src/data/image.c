/* 8-bit images: PNG and JPEG decoding (libpng, libjpeg-turbo), PNG encoding,
 * and conversion to and from float CHW tensors.
 *
 * Both decoders report errors by longjmp. Every local that changes between
 * setjmp and a possible longjmp and is read after it is volatile, and the
 * jump target frees what was allocated. libjpeg's "warnings" (premature end
 * of file, corrupt entropy data) are turned into errors as well: a
 * truncated JPEG otherwise decodes "successfully" with a grey bottom. */
#include "duet/data.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#define MSG_MAX 256

int duet_image_create(int64_t height, int64_t width, int channels, duet_image **out) {
    *out = NULL;
    if (height < 1 || width < 1 || (channels != 1 && channels != 3))
        return duet__error(DUET_EINVAL, "image: bad size %lldx%lld with %d channels",
                           (long long)height, (long long)width, channels);
    if (height > (int64_t)1 << 24 || width > (int64_t)1 << 24)
        return duet__error(DUET_EINVAL, "image: %lldx%lld is too large", (long long)height,
                           (long long)width);
    duet_image *img = calloc(1, sizeof(*img));
    if (img == NULL) return duet__error(DUET_ENOMEM, "image: out of memory");
    size_t bytes = (size_t)height * (size_t)width * (size_t)channels;
    img->data = calloc(bytes, 1);
    if (img->data == NULL) {
        free(img);
        return duet__error(DUET_ENOMEM, "image: out of memory for %lldx%lldx%d",
                           (long long)height, (long long)width, channels);
    }
    img->height = height;
    img->width = width;
    img->channels = channels;
    *out = img;
    return DUET_OK;
}

void duet_image_destroy(duet_image *img) {
    if (img == NULL) return;
    free(img->data);
    free(img);
}

/* ---- pixel limit ------------------------------------------------------------ */

int duet_image_pixel_limit(int64_t configured, int64_t *out) {
    *out = configured;
    const char *env = getenv("DUET_MAX_IMAGE_PIXELS");
    if (env == NULL || env[0] == '\0') return DUET_OK;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(env, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0)
        return duet__error(DUET_EINVAL, "DUET_MAX_IMAGE_PIXELS='%s': want a whole number of "
                           "pixels >= 0 (0: no limit)", env);
    *out = (int64_t)v;
    return DUET_OK;
}

/* Called with the size from the header, before anything is allocated. */
static int check_pixels(const char *name, uint64_t w, uint64_t h, int64_t max_pixels) {
    if (max_pixels <= 0 || w * h <= (uint64_t)max_pixels) return DUET_OK;
    return duet__error(DUET_EUNSUPPORTED, "%s: the image declares %" PRIu64 "x%" PRIu64 " = %"
                       PRIu64 " pixels, more than the limit of %" PRId64 " (a decompression "
                       "bomb?); if it is genuine, raise data.max_image_pixels or the "
                       "environment variable DUET_MAX_IMAGE_PIXELS (0: no limit)", name, w, h,
                       w * h, max_pixels);
}

/* ---- PNG ------------------------------------------------------------------ */

typedef struct png_source {
    const uint8_t *bytes;
    size_t n, pos;
} png_source;

typedef struct png_errinfo {
    const char *name;
    char msg[MSG_MAX];
} png_errinfo;

static void png_read_mem(png_structp png, png_bytep dst, size_t len) {
    png_source *s = png_get_io_ptr(png);
    if (len > s->n - s->pos) png_error(png, "unexpected end of data (file truncated)");
    memcpy(dst, s->bytes + s->pos, len);
    s->pos += len;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_errinfo *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof(e->msg), "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk, an odd sRGB profile) do not make the
 * pixels wrong: keep them for debugging only. */
static void png_on_warning(png_structp png, png_const_charp msg) {
    png_errinfo *e = png_get_error_ptr(png);
    duet_log(DUET_LOG_DEBUG, "%s: libpng warning: %s", e->name, msg);
}

static int decode_png(const uint8_t *bytes, size_t nbytes, const char *name, int64_t max_pixels,
                      duet_image **out) {
    png_errinfo err = {name, ""};
    png_source src = {bytes, nbytes, 0};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error,
                                             png_on_warning);
    if (png == NULL) return duet__error(DUET_ENOMEM, "%s: cannot create a PNG reader", name);
    png_infop info = png_create_info_struct(png);
    if (info == NULL) {
        png_destroy_read_struct(&png, NULL, NULL);
        return duet__error(DUET_ENOMEM, "%s: cannot create a PNG reader", name);
    }
    duet_image *volatile img = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = DUET_OK;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        duet_image_destroy(img);
        free(rows);
        if (rc != DUET_OK) return rc; /* set before the jump, message already there */
        return duet__error(DUET_EFORMAT, "%s: corrupt PNG: %s", name, err.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int color = png_get_color_type(png, info);
    int depth = png_get_bit_depth(png, info);
    rc = check_pixels(name, w, h, max_pixels);
    if (rc != DUET_OK) png_longjmp(png, 1);
    /* To 8-bit RGB: expand palettes and low-depth gray, keep the high byte
     * of 16-bit samples (OpenCV's IMREAD_COLOR does the same), drop alpha,
     * replicate gray. */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    /* A tRNS chunk becomes an alpha channel when libpng expands a palette
     * or low-depth gray: strip that too. */
    if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != (size_t)w * 3) {
        rc = duet__error(DUET_EUNSUPPORTED, "%s: PNG layout not convertible to 8-bit RGB", name);
        png_longjmp(png, 1);
    }
    duet_image *im = NULL;
    rc = duet_image_create(h, w, 3, &im);
    if (rc != DUET_OK) {
        duet__error_context(rc, "%s", name);
        png_longjmp(png, 1);
    }
    img = im;
    rows = malloc(sizeof(png_bytep) * h);
    if (rows == NULL) {
        rc = duet__error(DUET_ENOMEM, "%s: out of memory", name);
        png_longjmp(png, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = im->data + (size_t)y * w * 3;
    png_read_image(png, rows);
    /* Reads up to IEND, so a file cut after its pixel data is an error too. */
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *out = im;
    return DUET_OK;
}

/* ---- JPEG ------------------------------------------------------------------- */

typedef struct jpeg_errinfo {
    struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to this */
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_errinfo;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_errinfo *e = (jpeg_errinfo *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* level -1 is a warning: corrupt or missing data that libjpeg would paper
 * over. An error for us. Levels >= 0 are trace messages. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0) jpeg_on_error(cinfo);
}

/* EXIF orientation (tag 0x0112 of IFD0 in an APP1 "Exif" marker), 1..8;
 * 1 (as stored) when absent or malformed, as OpenCV treats it. */
static int exif_orientation(const uint8_t *d, size_t n) {
    if (n < 14 || memcmp(d, "Exif\0\0", 6) != 0) return 1;
    const uint8_t *t = d + 6; /* TIFF header */
    size_t tn = n - 6;
    bool le;
    if (t[0] == 'I' && t[1] == 'I') le = true;
    else if (t[0] == 'M' && t[1] == 'M') le = false;
    else return 1;
#define RD16(p) (le ? (uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 : (uint32_t)(p)[0] << 8 | (p)[1])
#define RD32(p) (le ? RD16(p) | RD16((p) + 2) << 16 : RD16(p) << 16 | RD16((p) + 2))
    if (RD16(t + 2) != 42) return 1;
    uint32_t ifd = RD32(t + 4);
    if (ifd > tn || tn - ifd < 2) return 1;
    uint32_t count = RD16(t + ifd);
    for (uint32_t i = 0; i < count; i++) {
        size_t e = ifd + 2 + (size_t)i * 12;
        if (e + 12 > tn) return 1;
        if (RD16(t + e) == 0x0112 && RD16(t + e + 2) == 3 /* SHORT */) {
            uint32_t v = RD16(t + e + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
#undef RD32
#undef RD16
    return 1;
}

/* The displayed image of a stored one with EXIF orientation o (2..8):
 * out(y, x) = in(sy, sx), with H, W the stored size. */
static int apply_orientation(duet_image **img, int o) {
    duet_image *in = *img, *out = NULL;
    int64_t h = in->height, w = in->width;
    bool swap = o >= 5;
    DUET_TRY(duet_image_create(swap ? w : h, swap ? h : w, 3, &out));
    for (int64_t y = 0; y < out->height; y++)
        for (int64_t x = 0; x < out->width; x++) {
            int64_t sy, sx;
            switch (o) {
            case 2: sy = y, sx = w - 1 - x; break;          /* mirrored */
            case 3: sy = h - 1 - y, sx = w - 1 - x; break;  /* rotated 180 */
            case 4: sy = h - 1 - y, sx = x; break;          /* flipped */
            case 5: sy = x, sx = y; break;                  /* transposed */
            case 6: sy = h - 1 - x, sx = y; break;          /* rotated 90 clockwise */
            case 7: sy = h - 1 - x, sx = w - 1 - y; break;  /* transversed */
            default: sy = x, sx = w - 1 - y; break;         /* 8: rotated 90 anticlockwise */
            }
            memcpy(out->data + (y * out->width + x) * 3, in->data + (sy * w + sx) * 3, 3);
        }
    duet_image_destroy(in);
    *img = out;
    return DUET_OK;
}

static int decode_jpeg(const uint8_t *bytes, size_t nbytes, const char *name, int64_t max_pixels,
                       duet_image **out) {
    struct jpeg_decompress_struct cinfo;
    jpeg_errinfo err;
    memset(&cinfo, 0, sizeof(cinfo));
    memset(&err, 0, sizeof(err));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpeg_on_error;
    err.pub.emit_message = jpeg_on_message;
    duet_image *volatile img = NULL;
    volatile int rc = DUET_OK;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        duet_image_destroy(img);
        if (rc != DUET_OK) return rc;
        return duet__error(DUET_EFORMAT, "%s: corrupt JPEG: %s", name, err.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)bytes, (unsigned long)nbytes);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&cinfo, TRUE);
    rc = check_pixels(name, cinfo.image_width, cinfo.image_height, max_pixels);
    if (rc != DUET_OK) longjmp(err.jump, 1);
    int orientation = 1;
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != NULL; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && orientation == 1)
            orientation = exif_orientation(m->data, m->data_length);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        rc = duet__error(DUET_EUNSUPPORTED, "%s: CMYK JPEG images are not supported; convert "
                         "it to RGB", name);
        longjmp(err.jump, 1);
    }
    cinfo.out_color_space = JCS_RGB; /* converts gray and YCbCr */
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3) {
        rc = duet__error(DUET_EUNSUPPORTED, "%s: JPEG with %d output components", name,
                         cinfo.output_components);
        longjmp(err.jump, 1);
    }
    duet_image *im = NULL;
    rc = duet_image_create(cinfo.output_height, cinfo.output_width, 3, &im);
    if (rc != DUET_OK) {
        duet__error_context(rc, "%s", name);
        longjmp(err.jump, 1);
    }
    img = im;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = im->data + (size_t)cinfo.output_scanline * im->width * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    /* OpenCV's imread (so MMEditing) shows photos the way up EXIF says. */
    if (orientation != 1) {
        int orc = apply_orientation(&im, orientation);
        if (orc != DUET_OK) {
            duet_image_destroy(im);
            return duet__error_context(orc, "%s", name);
        }
    }
    *out = im;
    return DUET_OK;
}

/* ---- files ------------------------------------------------------------------ */

int duet_image_decode(const void *bytes, size_t nbytes, const char *name, duet_image **out) {
    int64_t limit = 0;
    *out = NULL;
    DUET_TRY(duet_image_pixel_limit(DUET_IMAGE_MAX_PIXELS_DEFAULT, &limit));
    return duet_image_decode_limited(bytes, nbytes, name, limit, out);
}

int duet_image_decode_limited(const void *bytes, size_t nbytes, const char *name,
                              int64_t max_pixels, duet_image **out) {
    *out = NULL;
    if (name == NULL) name = "<memory>";
    const uint8_t *b = bytes;
    if (nbytes == 0) return duet__error(DUET_EFORMAT, "%s: empty file, not an image", name);
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (nbytes >= 8 && memcmp(b, png_sig, 8) == 0) return decode_png(b, nbytes, name, max_pixels, out);
    if (nbytes >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return decode_jpeg(b, nbytes, name, max_pixels, out);
    char first[3 * 8 + 1] = "";
    for (size_t i = 0; i < nbytes && i < 8; i++)
        snprintf(first + 3 * i, sizeof(first) - 3 * i, "%02x ", b[i]);
    return duet__error(DUET_EFORMAT, "%s: neither PNG nor JPEG (first bytes: %s)", name, first);
}

int duet_image_load(const char *path, duet_image **out) {
    int64_t limit = 0;
    *out = NULL;
    DUET_TRY(duet_image_pixel_limit(DUET_IMAGE_MAX_PIXELS_DEFAULT, &limit));
    return duet_image_load_limited(path, limit, out);
}

int duet_image_load_limited(const char *path, int64_t max_pixels, duet_image **out) {
    *out = NULL;
    unsigned char *bytes = NULL;
    size_t n = 0;
    int rc = duet__read_file(path, &bytes, &n);
    /* data.h: a missing image is DUET_EIO (the message says which). */
    if (rc != DUET_OK) return rc == DUET_ENOTFOUND ? DUET_EIO : rc;
    rc = duet_image_decode_limited(bytes, n, path, max_pixels, out);
    duet_aligned_free(bytes);
    return rc;
}

/* The PNG of img through a writer whose output is set up (a file or a
 * memory sink): header, rows, end. libpng's errors longjmp to the caller's
 * setjmp; the writer is destroyed here on success. */
static void write_png_image(png_structp png, png_infop info, const duet_image *img, int level) {
    if (level >= 0) png_set_compression_level(png, level);
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8,
                 img->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t stride = (size_t)img->width * (size_t)img->channels;
    for (int64_t y = 0; y < img->height; y++) png_write_row(png, img->data + (size_t)y * stride);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
}

int duet_image_save_png(const duet_image *img, const char *path) {
    return duet_image_save_png_level(img, path, -1);
}

int duet_image_save_png_level(const duet_image *img, const char *path, int level) {
    if (level < -1 || level > 9)
        return duet__error(DUET_EINVAL, "%s: PNG compression level %d is not in [0, 9]", path,
                           level);
    if (img == NULL || img->data == NULL || (img->channels != 1 && img->channels != 3))
        return duet__error(DUET_EINVAL, "%s: can only save 1- or 3-channel images", path);
    duet__safe_file sf;
    DUET_TRY(duet__safe_open(path, &sf));
    png_errinfo err = {path, ""};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error,
                                              png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_write_struct(&png, NULL);
        duet__safe_abort(&sf);
        return duet__error(DUET_ENOMEM, "%s: cannot create a PNG writer", path);
    }
    /* sf is not changed between setjmp and longjmp: its fields keep their
     * values in the handler. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        duet__safe_abort(&sf); /* ours; the file at path (if any) is untouched */
        return duet__error(DUET_EIO, "cannot write %s: %s", path, err.msg);
    }
    png_init_io(png, sf.f);
    write_png_image(png, info, img, level);
    return duet__safe_commit(&sf);
}

/* A growing buffer libpng writes into (duet_image_encode_png). */
typedef struct png_sink {
    uint8_t *bytes;
    size_t n, cap;
} png_sink;

static void png_write_mem(png_structp png, png_bytep src, size_t len) {
    png_sink *s = png_get_io_ptr(png);
    if (len > s->cap - s->n) {
        size_t cap = s->cap ? s->cap : 1 << 16;
        while (cap - s->n < len) cap *= 2;
        uint8_t *bigger = realloc(s->bytes, cap);
        if (bigger == NULL) png_error(png, "out of memory");
        s->bytes = bigger;
        s->cap = cap;
    }
    memcpy(s->bytes + s->n, src, len);
    s->n += len;
}

static void png_flush_mem(png_structp png) { (void)png; }

int duet_image_encode_png(const duet_image *img, int level, const char *name, uint8_t **bytes,
                          size_t *nbytes) {
    *bytes = NULL;
    *nbytes = 0;
    if (level < -1 || level > 9)
        return duet__error(DUET_EINVAL, "%s: PNG compression level %d is not in [0, 9]", name,
                           level);
    if (img == NULL || img->data == NULL || (img->channels != 1 && img->channels != 3))
        return duet__error(DUET_EINVAL, "%s: can only encode 1- or 3-channel images", name);
    png_errinfo err = {name, ""};
    png_sink sink_value = {NULL, 0, 0};
    png_sink *volatile sink = &sink_value;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error,
                                              png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_write_struct(&png, NULL);
        return duet__error(DUET_ENOMEM, "%s: cannot create a PNG writer", name);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(sink->bytes);
        return duet__error(DUET_ENOMEM, "cannot encode %s as PNG: %s", name, err.msg);
    }
    png_set_write_fn(png, sink, png_write_mem, png_flush_mem);
    write_png_image(png, info, img, level);
    *bytes = sink->bytes;
    *nbytes = sink->n;
    return DUET_OK;
}

/* ---- tensors -------------------------------------------------------------------- */

int duet_image_to_tensor(const duet_image *img, duet_tensor **out) {
    *out = NULL;
    int64_t c = img->channels, h = img->height, w = img->width;
    duet_tensor *t = NULL;
    DUET_TRY(duet_tensor_create(3, (int64_t[]){c, h, w}, &t));
    /* HWC bytes -> CHW floats */
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int64_t k = 0; k < c; k++)
                t->data[(k * h + y) * w + x] = img->data[(y * w + x) * c + k] / 255.0f;
    *out = t;
    return DUET_OK;
}

int duet_image_from_tensor(const duet_tensor *t, int64_t n, duet_image **out) {
    *out = NULL;
    char shape[DUET_SHAPE_STR_MAX];
    int64_t c, h, w;
    if (t->ndim == 3 && n == 0) {
        c = t->shape[0], h = t->shape[1], w = t->shape[2];
    } else if (t->ndim == 4 && n >= 0 && n < t->shape[0]) {
        c = t->shape[1], h = t->shape[2], w = t->shape[3];
    } else {
        return duet__error(DUET_ESHAPE, "image from tensor: want (C, H, W) or sample %lld of "
                           "(N, C, H, W), got %s", (long long)n,
                           duet_shape_str(t, shape, sizeof(shape)));
    }
    if (c != 1 && c != 3)
        return duet__error(DUET_ESHAPE, "image from tensor: %lld channels in %s (want 1 or 3)",
                           (long long)c, duet_shape_str(t, shape, sizeof(shape)));
    duet_image *img = NULL;
    DUET_TRY(duet_image_create(h, w, (int)c, &img));
    const float *src = t->data + n * c * h * w;
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                /* fminf/fmaxf return the number when one side is NaN, so a
                 * NaN becomes 255 rather than undefined behaviour. */
                float v = fmaxf(0.0f, fminf(1.0f, src[(k * h + y) * w + x])) * 255.0f;
                img->data[(y * w + x) * c + k] = (uint8_t)nearbyintf(v);
            }
    *out = img;
    return DUET_OK;
}
