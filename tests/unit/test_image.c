/* Images: PNG round trip, PNG colour types converted to RGB (gray, gray+alpha,
 * RGBA, palette, 16-bit, interlaced), JPEG files written here with libjpeg,
 * corrupt and truncated files, tensor conversion. */
#include "testutil.h"

#include <jpeglib.h>
#include <png.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof(tmpdir), "duet_test_image") == NULL ? -1 : 0;
}

static int teardown_dir(void **state) {
    (void)state;
    return tu_rm_tree(tmpdir);
}

static const char *tmp_path(char *buf, size_t n, const char *name) {
    return tu_path(buf, n, tmpdir, name);
}

/* Writes a PNG with libpng directly: `rows` holds height rows of
 * width * channels samples of `depth` bits (16-bit big-endian as PNG wants). */
static void write_png_raw(const char *path, int w, int h, int color, int depth,
                          const uint8_t *pixels, size_t stride, const png_color *palette,
                          int npalette, int interlace, const png_byte *trans, int ntrans) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(info);
    if (setjmp(png_jmpbuf(png))) fail_msg("libpng failed writing %s", path);
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (palette) png_set_PLTE(png, info, palette, npalette);
    if (trans) png_set_tRNS(png, info, trans, ntrans, NULL);
    png_write_info(png, info);
    png_bytep *rows = malloc(sizeof(png_bytep) * h);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)pixels + (size_t)y * stride;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    fclose(f);
}

static void write_jpeg_exif(const char *path, const uint8_t *pixels, int w, int h, int comps,
                            int quality, int orientation, bool big_endian);

static void write_jpeg(const char *path, const uint8_t *pixels, int w, int h, int comps,
                       int quality) {
    write_jpeg_exif(path, pixels, w, h, comps, quality, 0, false);
}

/* orientation 0: no EXIF marker. Otherwise an APP1 "Exif" marker whose IFD0
 * holds one other tag, then Orientation (SHORT). */
static void write_jpeg_exif(const char *path, const uint8_t *pixels, int w, int h, int comps,
                            int quality, int orientation, bool big_endian) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    jpeg_stdio_dest(&c, f);
    c.image_width = w;
    c.image_height = h;
    c.input_components = comps;
    c.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    for (int i = 0; i < c.num_components; i++) /* 4:4:4, no chroma subsampling */
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    jpeg_start_compress(&c, TRUE);
    if (orientation > 0) {
        /* TIFF: byte order, 42, IFD0 offset 8; IFD0: 2 entries of 12 bytes
         * (tag, type, count, value), next-IFD offset 0. */
        uint8_t app1[6 + 8 + 2 + 2 * 12 + 4] = {'E', 'x', 'i', 'f', 0, 0};
        uint8_t *t = app1 + 6;
        uint32_t v32;
#define W16(off, v) (big_endian ? (t[off] = (uint8_t)((v) >> 8), t[(off) + 1] = (uint8_t)(v)) \
                                : (t[off] = (uint8_t)(v), t[(off) + 1] = (uint8_t)((v) >> 8)))
#define W32(off, v) (v32 = (v), big_endian ? (W16(off, v32 >> 16), W16((off) + 2, v32 & 0xffff)) \
                                           : (W16(off, v32 & 0xffff), W16((off) + 2, v32 >> 16)))
        t[0] = t[1] = big_endian ? 'M' : 'I';
        W16(2, 42);
        W32(4, 8);
        W16(8, 2);
        W16(10, 0x010f); /* Make, ASCII, count 4, "duet" would be here: ignored */
        W16(12, 2);
        W32(14, 4);
        W16(22, 0x0112); /* Orientation, SHORT, count 1, value in the first 2 bytes */
        W16(24, 3);
        W32(26, 1);
        W16(30, orientation);
#undef W32
#undef W16
        jpeg_write_marker(&c, JPEG_APP0 + 1, app1, sizeof(app1));
    }
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)pixels + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

/* Loading `path` fails with `status` and a message naming the file and
 * containing `what`. */
static void assert_load_fails(const char *path, int status, const char *what) {
    duet_image *img = NULL;
    int rc = duet_image_load(path, &img);
    assert_null(img);
    if (rc != status)
        fail_msg("loading %s: got %s (%s), want %s", path, duet_err_name(rc), duet_last_error(),
                 duet_err_name(status));
    if (strstr(duet_last_error(), path) == NULL)
        fail_msg("message does not name the file: %s", duet_last_error());
    if (what && strstr(duet_last_error(), what) == NULL)
        fail_msg("message lacks \"%s\": %s", what, duet_last_error());
}

static void test_png_round_trip(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    char path[300];
    for (int c = 1; c <= 3; c += 2) {
        duet_image *img = tu_random_image(&rng, 37, 53, c), *back = NULL;
        TU_OK(duet_image_save_png(img, tmp_path(path, sizeof(path), "rt.png")));
        TU_OK(duet_image_load(path, &back));
        assert_int_equal(back->height, 37);
        assert_int_equal(back->width, 53);
        assert_int_equal(back->channels, 3);
        for (int64_t p = 0; p < 37 * 53; p++)
            for (int k = 0; k < 3; k++)
                assert_int_equal(back->data[p * 3 + k], img->data[p * c + (c == 3 ? k : 0)]);
        duet_image_destroy(img);
        duet_image_destroy(back);
    }
}

static void test_png_color_types(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(2, 0);
    char path[300];
    const int w = 19, h = 11;
    uint8_t *buf = malloc((size_t)w * h * 8);
    duet_image *img = NULL;

    /* gray + alpha: gray replicated, alpha dropped */
    for (int i = 0; i < w * h * 2; i++) buf[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_png_raw(tmp_path(path, sizeof(path), "ga.png"), w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8,
                  buf, (size_t)w * 2, NULL, 0, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    assert_int_equal(img->channels, 3);
    for (int p = 0; p < w * h; p++)
        for (int k = 0; k < 3; k++) assert_int_equal(img->data[p * 3 + k], buf[p * 2]);
    duet_image_destroy(img);

    /* RGBA: alpha dropped, colour kept as is (not premultiplied) */
    for (int i = 0; i < w * h * 4; i++) buf[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_png_raw(tmp_path(path, sizeof(path), "rgba.png"), w, h, PNG_COLOR_TYPE_RGBA, 8, buf,
                  (size_t)w * 4, NULL, 0, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    for (int p = 0; p < w * h; p++)
        for (int k = 0; k < 3; k++) assert_int_equal(img->data[p * 3 + k], buf[p * 4 + k]);
    duet_image_destroy(img);

    /* 16-bit RGB: the high byte of each big-endian sample */
    for (int i = 0; i < w * h * 6; i++) buf[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_png_raw(tmp_path(path, sizeof(path), "rgb16.png"), w, h, PNG_COLOR_TYPE_RGB, 16, buf,
                  (size_t)w * 6, NULL, 0, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    for (int p = 0; p < w * h; p++)
        for (int k = 0; k < 3; k++) assert_int_equal(img->data[p * 3 + k], buf[p * 6 + k * 2]);
    duet_image_destroy(img);

    /* 16-bit gray */
    write_png_raw(tmp_path(path, sizeof(path), "g16.png"), w, h, PNG_COLOR_TYPE_GRAY, 16, buf,
                  (size_t)w * 2, NULL, 0, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    for (int p = 0; p < w * h; p++)
        for (int k = 0; k < 3; k++) assert_int_equal(img->data[p * 3 + k], buf[p * 2]);
    duet_image_destroy(img);

    /* 8-bit palette: expanded */
    png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
    for (int i = 0; i < w * h; i++) buf[i] = (uint8_t)duet_rng_int(&rng, 0, 3);
    write_png_raw(tmp_path(path, sizeof(path), "pal.png"), w, h, PNG_COLOR_TYPE_PALETTE, 8, buf,
                  (size_t)w, pal, 4, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    for (int p = 0; p < w * h; p++) {
        assert_int_equal(img->data[p * 3 + 0], pal[buf[p]].red);
        assert_int_equal(img->data[p * 3 + 1], pal[buf[p]].green);
        assert_int_equal(img->data[p * 3 + 2], pal[buf[p]].blue);
    }
    duet_image_destroy(img);

    /* palette with transparency (tRNS): the colours, transparency ignored */
    const png_byte trans[4] = {0, 128, 255, 7};
    write_png_raw(tmp_path(path, sizeof(path), "paltrns.png"), w, h, PNG_COLOR_TYPE_PALETTE, 8,
                  buf, (size_t)w, pal, 4, PNG_INTERLACE_NONE, trans, 4);
    TU_OK(duet_image_load(path, &img));
    assert_int_equal(img->channels, 3);
    for (int p = 0; p < w * h; p++) {
        assert_int_equal(img->data[p * 3 + 0], pal[buf[p]].red);
        assert_int_equal(img->data[p * 3 + 2], pal[buf[p]].blue);
    }
    duet_image_destroy(img);

    /* 1-bit gray: 0 -> 0, 1 -> 255 */
    const int w1 = 16; /* two bytes per row */
    uint8_t bits[2 * 11];
    for (int i = 0; i < 2 * h; i++) bits[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_png_raw(tmp_path(path, sizeof(path), "g1.png"), w1, h, PNG_COLOR_TYPE_GRAY, 1, bits, 2,
                  NULL, 0, PNG_INTERLACE_NONE, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w1; x++) {
            int bit = (bits[y * 2 + x / 8] >> (7 - x % 8)) & 1;
            assert_int_equal(img->data[(y * w1 + x) * 3 + 1], bit ? 255 : 0);
        }
    duet_image_destroy(img);

    /* interlaced RGB */
    for (int i = 0; i < w * h * 3; i++) buf[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_png_raw(tmp_path(path, sizeof(path), "adam7.png"), w, h, PNG_COLOR_TYPE_RGB, 8, buf,
                  (size_t)w * 3, NULL, 0, PNG_INTERLACE_ADAM7, NULL, 0);
    TU_OK(duet_image_load(path, &img));
    assert_memory_equal(img->data, buf, (size_t)w * h * 3);
    duet_image_destroy(img);
    free(buf);
}

/* A smooth image JPEG keeps well at quality 100 without subsampling. */
static void test_jpeg_decode(void **state) {
    (void)state;
    char path[300];
    const int w = 48, h = 40;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            rgb[(y * w + x) * 3 + 0] = (uint8_t)(x * 5);
            rgb[(y * w + x) * 3 + 1] = (uint8_t)(y * 6);
            rgb[(y * w + x) * 3 + 2] = (uint8_t)(128 + 100 * sin(0.2 * (x + y)));
        }
    write_jpeg(tmp_path(path, sizeof(path), "smooth.jpg"), rgb, w, h, 3, 100);
    duet_image *img = NULL;
    TU_OK(duet_image_load(path, &img));
    assert_int_equal(img->height, h);
    assert_int_equal(img->width, w);
    assert_int_equal(img->channels, 3);
    double sum = 0;
    int worst = 0;
    for (int i = 0; i < w * h * 3; i++) {
        int d = abs((int)img->data[i] - (int)rgb[i]);
        sum += d;
        worst = d > worst ? d : worst;
    }
    if (sum / (w * h * 3) > 1.0 || worst > 6)
        fail_msg("JPEG decode: mean abs error %.3f, max %d", sum / (w * h * 3), worst);
    duet_image_destroy(img);

    /* Grayscale JPEG: three equal channels close to the gray values. The
     * .jpeg name does not matter: the format is found from the bytes. */
    uint8_t *gray = malloc((size_t)w * h);
    for (int i = 0; i < w * h; i++) gray[i] = (uint8_t)(i % w * 5);
    write_jpeg(tmp_path(path, sizeof(path), "gray.jpeg"), gray, w, h, 1, 100);
    TU_OK(duet_image_load(path, &img));
    for (int i = 0; i < w * h; i++) {
        assert_int_equal(img->data[i * 3], img->data[i * 3 + 1]);
        assert_int_equal(img->data[i * 3], img->data[i * 3 + 2]);
        assert_true(abs((int)img->data[i * 3] - (int)gray[i]) <= 3);
    }
    duet_image_destroy(img);

    /* From memory as well. */
    size_t n = 0;
    uint8_t *bytes = tu_read_file(path, &n);
    TU_OK(duet_image_decode(bytes, n, "mem.jpg", &img));
    assert_int_equal(img->width, w);
    duet_image_destroy(img);
    free(bytes);
    free(gray);
    free(rgb);
}

/* EXIF orientation 1..8 (both byte orders): the same pixels as the plain
 * file, turned the way the tag says (OpenCV's convention). */
static void test_jpeg_exif_orientation(void **state) {
    (void)state;
    char path[300];
    const int w = 24, h = 16;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            rgb[(y * w + x) * 3 + 0] = (uint8_t)(x * 10);
            rgb[(y * w + x) * 3 + 1] = (uint8_t)(y * 15);
            rgb[(y * w + x) * 3 + 2] = 60;
        }
    write_jpeg(tmp_path(path, sizeof(path), "plain.jpg"), rgb, w, h, 3, 95);
    duet_image *plain = NULL;
    TU_OK(duet_image_load(path, &plain));
    for (int o = 1; o <= 8; o++)
        for (int be = 0; be <= 1; be++) {
            write_jpeg_exif(tmp_path(path, sizeof(path), "exif.jpg"), rgb, w, h, 3, 95, o, be);
            duet_image *img = NULL;
            TU_OK(duet_image_load(path, &img));
            bool swap = o >= 5;
            assert_int_equal(img->height, swap ? w : h);
            assert_int_equal(img->width, swap ? h : w);
            for (int64_t y = 0; y < img->height; y++)
                for (int64_t x = 0; x < img->width; x++) {
                    int64_t sy, sx;
                    switch (o) {
                    case 1: sy = y, sx = x; break;
                    case 2: sy = y, sx = w - 1 - x; break;
                    case 3: sy = h - 1 - y, sx = w - 1 - x; break;
                    case 4: sy = h - 1 - y, sx = x; break;
                    case 5: sy = x, sx = y; break;
                    case 6: sy = h - 1 - x, sx = y; break;
                    case 7: sy = h - 1 - x, sx = w - 1 - y; break;
                    default: sy = x, sx = w - 1 - y; break;
                    }
                    if (memcmp(img->data + (y * img->width + x) * 3,
                               plain->data + (sy * w + sx) * 3, 3) != 0)
                        fail_msg("orientation %d (%s): pixel (%lld, %lld) is not stored (%lld, "
                                 "%lld)", o, be ? "MM" : "II", (long long)y, (long long)x,
                                 (long long)sy, (long long)sx);
                }
            duet_image_destroy(img);
        }
    /* Orientation 6 of a known corner: the stored bottom-left (x 0, green
     * high) is the displayed top-left. */
    write_jpeg_exif(tmp_path(path, sizeof(path), "exif6.jpg"), rgb, w, h, 3, 95, 6, false);
    duet_image *img = NULL;
    TU_OK(duet_image_load(path, &img));
    assert_true(img->data[0] < 20 && img->data[1] > 200);
    duet_image_destroy(img);
    duet_image_destroy(plain);
    free(rgb);
}

static void test_corrupt_files(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    char path[300], bad[300];
    size_t n = 0;

    /* PNG cut in half: the decoder runs out of data. */
    duet_image *img = tu_random_image(&rng, 64, 64, 3);
    TU_OK(duet_image_save_png(img, tmp_path(path, sizeof(path), "whole.png")));
    uint8_t *b = tu_read_file(path, &n);
    tu_write_file(tmp_path(bad, sizeof(bad), "half.png"), b, n / 2);
    assert_load_fails(bad, DUET_EFORMAT, "PNG");
    /* PNG missing only its last bytes (IEND). */
    tu_write_file(tmp_path(bad, sizeof(bad), "noend.png"), b, n - 6);
    assert_load_fails(bad, DUET_EFORMAT, "PNG");
    /* A flipped byte in the pixel data: CRC or zlib error. */
    b[n / 2] ^= 0x5a;
    tu_write_file(tmp_path(bad, sizeof(bad), "flipped.png"), b, n);
    assert_load_fails(bad, DUET_EFORMAT, "PNG");
    free(b);
    duet_image_destroy(img);

    /* JPEG cut short: libjpeg only warns ("premature end"); we refuse. */
    const int w = 64, h = 64;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)duet_rng_int(&rng, 0, 255);
    write_jpeg(tmp_path(path, sizeof(path), "whole.jpg"), rgb, w, h, 3, 90);
    free(rgb);
    b = tu_read_file(path, &n);
    tu_write_file(tmp_path(bad, sizeof(bad), "cut.jpg"), b, n * 2 / 3);
    assert_load_fails(bad, DUET_EFORMAT, "JPEG");
    /* JPEG cut inside its header. */
    tu_write_file(tmp_path(bad, sizeof(bad), "head.jpg"), b, 40);
    assert_load_fails(bad, DUET_EFORMAT, "JPEG");
    free(b);

    /* Not an image at all, an empty file, a missing file. */
    tu_write_file(tmp_path(bad, sizeof(bad), "text.png"), (const uint8_t *)"hello world", 11);
    assert_load_fails(bad, DUET_EFORMAT, "neither PNG nor JPEG");
    tu_write_file(tmp_path(bad, sizeof(bad), "empty.jpg"), (const uint8_t *)"", 0);
    assert_load_fails(bad, DUET_EFORMAT, "empty");
    assert_load_fails(tmp_path(bad, sizeof(bad), "absent.png"), DUET_EIO, NULL);

    /* Saving into a folder that does not exist. */
    img = tu_random_image(&rng, 4, 4, 3);
    int rc = duet_image_save_png(img, tmp_path(bad, sizeof(bad), "no/such/dir.png"));
    assert_int_equal(rc, DUET_EIO);
    assert_non_null(strstr(duet_last_error(), "no/such/dir.png"));
    duet_image_destroy(img);
}

static void test_tensor_conversion(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    duet_image *img = tu_random_image(&rng, 5, 7, 3), *back = NULL;
    duet_tensor *t = NULL;
    TU_OK(duet_image_to_tensor(img, &t));
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 5);
    assert_int_equal(t->shape[2], 7);
    /* CHW: channel 2 of pixel (4, 6) */
    assert_float_equal(t->data[(2 * 5 + 4) * 7 + 6], img->data[(4 * 7 + 6) * 3 + 2] / 255.0f,
                       1e-7);
    TU_OK(duet_image_from_tensor(t, 0, &back));
    assert_memory_equal(back->data, img->data, 5 * 7 * 3);
    duet_image_destroy(back);

    /* Rounding, clamping, NaN. */
    const float vals[] = {-0.3f, 0.0f, 1.4f / 255, 1.6f / 255, 2.49f / 255, 2.51f / 255,
                          0.2f, 1.0f, 1.7f, NAN, INFINITY, -INFINITY};
    const uint8_t want[] = {0, 0, 1, 2, 2, 3, 51, 255, 255, 255, 255, 0};
    const int64_t nv = sizeof(vals) / sizeof(vals[0]);
    duet_tensor *g = NULL;
    TU_OK(duet_tensor_create4(2, 1, 1, nv, &g));
    memcpy(g->data + nv, vals, sizeof(vals));
    TU_OK(duet_image_from_tensor(g, 1, &back));
    assert_int_equal(back->channels, 1);
    assert_memory_equal(back->data, want, (size_t)nv);
    duet_image_destroy(back);

    /* Bad shapes: 2 channels, sample out of range. */
    duet_tensor *two = NULL;
    TU_OK(duet_tensor_create(3, (int64_t[]){2, 3, 3}, &two));
    assert_int_equal(duet_image_from_tensor(two, 0, &back), DUET_ESHAPE);
    assert_int_equal(duet_image_from_tensor(g, 2, &back), DUET_ESHAPE);
    assert_null(back);
    duet_tensor_release(two);
    duet_tensor_release(g);
    duet_tensor_release(t);
    duet_image_destroy(img);
}

/* Properties of the resize that need no reference: a constant stays
 * constant, sizes follow MATLAB, and 1/scale of a scale-up is close to the
 * identity on smooth data. */
static void test_resize_properties(void **state) {
    (void)state;
    assert_int_equal(duet_imresize_length(128, 0.25), 32);
    assert_int_equal(duet_imresize_length(130, 0.25), 33);
    assert_int_equal(duet_imresize_length(15, 1.0 / 5), 3);
    assert_int_equal(duet_imresize_length(300, 1.0 / 3), 100);
    assert_int_equal(duet_imresize_length(7, 1.5), 11);

    float in[3 * 9 * 13], out[3 * 3 * 5];
    for (int i = 0; i < 3 * 9 * 13; i++) in[i] = 0.25f + (i / (9 * 13)) * 0.25f;
    TU_OK(duet_imresize(out, in, 3, 9, 13, 1.0 / 3));
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 15; i++) assert_float_equal(out[c * 15 + i], 0.25f + c * 0.25f, 1e-6);
    assert_int_equal(duet_imresize(out, in, 3, 9, 13, 0.0), DUET_EINVAL);
    assert_int_equal(duet_imresize(out, in, 3, 9, 13, -1.0), DUET_EINVAL);

    /* A downscale of a linear ramp away from the borders is the ramp at the
     * mapped positions (the cubic kernel reproduces linear functions). */
    float ramp[1 * 4 * 64], half[1 * 2 * 32];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 64; x++) ramp[y * 64 + x] = (float)x;
    TU_OK(duet_imresize(half, ramp, 1, 4, 64, 0.5));
    for (int x = 4; x < 28; x++) /* output k (0-based) samples input 2k + 0.5 */
        assert_float_equal(half[x], 2.0f * x + 0.5f, 1e-4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_round_trip),     cmocka_unit_test(test_png_color_types),
        cmocka_unit_test(test_jpeg_decode),        cmocka_unit_test(test_jpeg_exif_orientation),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_tensor_conversion),  cmocka_unit_test(test_resize_properties),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
