/* image.h — JPEG decoding (libjpeg-turbo's libjpeg API) and Pillow-exact resampling for the
 * ImageNet input path (issue 11; augmentation on top of these: augment.h).
 *
 * Both halves reproduce what torchvision's PIL path computes on the same bytes, so that a
 * Python reference (tools/make_image_reference.py) can check them bit for bit:
 *  - decode: Pillow 9.4 opens a JPEG with libjpeg's defaults (JDCT_ISLOW, fancy upsampling) and
 *    converts to RGB (src/PIL/JpegImagePlugin.py, src/libImaging/JpegDecode.c, Convert.c);
 *  - resize: Pillow's separable, antialiased convolution (src/libImaging/Resample.c).
 *
 * Threads: an image_dec is used by one thread at a time; make one per decode thread. Its
 * buffers grow to the largest image seen and are then reused (no allocation of ours per image;
 * libjpeg itself still takes a few small blocks from malloc per image for its work pools and
 * returns them when the image is done). */
#ifndef DSGD_IMAGE_H
#define DSGD_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct image_dec image_dec;

/* A decoder: a libjpeg decompress object with a setjmp error manager, and working buffers.
 * Returns NULL when out of memory. */
image_dec *image_dec_new(void);
void image_dec_free(image_dec *d);

enum { IMAGE_BILINEAR = 0, IMAGE_BICUBIC = 1 };

/* A buffer of d of at least nbytes, distinct from the decode and resize buffers, for a caller's
 * intermediate results (augment.c's u8 crop); grows, never shrinks; valid until the next
 * image_scratch on d. NULL when out of memory. */
uint8_t *image_scratch(image_dec *d, size_t nbytes);

/* Decode a whole JPEG (baseline or progressive; YCbCr, grayscale, RGB, CMYK and YCCK) to RGB u8
 * (h, w, 3) at scale 1/denom (denom 1, 2, 4 or 8: libjpeg's DCT-domain scaling, h = ceil(H /
 * denom)). 4-component JPEGs are taken as Adobe-inverted CMYK whatever their markers say, as
 * Pillow does (JpegImagePlugin.py: rawmode "CMYK;I"), and converted to RGB with Pillow's
 * cmyk2rgb (Convert.c): R = 255 − K' − (C'·(255 − K') / 255), C' = 255 − stored; YCCK is turned
 * into CMYK by libjpeg first. Grayscale is replicated into R = G = B (Pillow's L → RGB).
 * At denom 1 the pixels equal Pillow's Image.open(...).convert("RGB"); at denom > 1 they equal
 * Pillow after Image.draft("RGB", ...) with the same scale.
 * *rgb points into d's own buffer, valid until the next decode on d. *warnings: libjpeg
 * warnings (corrupt data recovered, premature end of data, extraneous bytes) counted, never
 * printed. Returns 0, or -1 with err saying what is wrong ("not a JPEG", "empty input",
 * unsupported colour space, libjpeg's message for unrecoverable data). Never longjmps out to
 * the caller, never exits. */
int image_decode_rgb(image_dec *d, const uint8_t *buf, size_t nbytes, int denom, const uint8_t **rgb, int *h, int *w,
                     int *warnings, char *err, size_t errlen);

/* Read only the header: the full-size height and width and the number of components. Returns 0
 * or -1 with err (as image_decode_rgb). */
int image_read_size(image_dec *d, const uint8_t *buf, size_t nbytes, int *h, int *w, char *err, size_t errlen);

/* Decode the rows [y0, y1) and columns [x0, x1) of the full-size image (0 <= y0 < y1 <= H,
 * 0 <= x0 < x1 <= W) into (y1 - y0, x1 - x0, 3) u8 at *rgb (d's buffer, row stride *stride
 * bytes), skipping the work for the rest where libjpeg can: rows above y0 are skipped
 * (jpeg_skip_scanlines: entropy-decoded only), rows below y1 never decoded, and columns
 * outside the iMCU-aligned span around [x0, x1) never inverse-transformed or colour-converted
 * (jpeg_crop_scanline). The pixels equal those of image_decode_rgb at the same place: the span
 * decoded is widened by one iMCU on each side (and two rows up and down) so that fancy
 * upsampling at its edges sees the same neighbours as in a whole decode (test_image checks
 * this on every test JPEG). Errors and warnings as image_decode_rgb; warnings about data
 * after y1 are not seen. */
int image_decode_rect(image_dec *d, const uint8_t *buf, size_t nbytes, int y0, int y1, int x0, int x1,
                      const uint8_t **rgb, size_t *stride, int *warnings, char *err, size_t errlen);

/* image_decode_rect on the image decoded at scale 1/denom (denom 1, 2, 4 or 8, libjpeg's DCT
 * scaling as image_decode_rgb): the rows [y0, y1) and columns [x0, x1) are coordinates of that
 * scaled image (ceil(H / denom) × ceil(W / denom)), and the pixels equal those of
 * image_decode_rgb at the same denom and place (test_image checks it at every denom). The
 * margin kept for the upsampler is one iMCU of the scaled image. denom 1 is image_decode_rect. */
int image_decode_rect_scaled(image_dec *d, const uint8_t *buf, size_t nbytes, int denom, int y0, int y1, int x0, int x1,
                             const uint8_t **rgb, size_t *stride, int *warnings, char *err, size_t errlen);

/* image_read_size and image_decode_rect_scaled with the header read once (augment.c's
 * aug_sample: the header gives the size the draws need, then the rect is decoded).
 * image_open reads buf's header and keeps d on it: *h, *w the full-size height and width;
 * returns 0, or -1 with err as image_read_size (the image abandoned, d reusable). buf must stay
 * valid until the image is decoded or abandoned. image_decode_rect_scaled_open then decodes the
 * rect from that header exactly as image_decode_rect_scaled(d, buf, ...) would (same pixels,
 * errors and warnings; warnings counted from image_open), and the image is done either way;
 * without an open image it returns -1 ("no JPEG open"). Any other decode or image_open on d
 * abandons an open image first, and image_dec_free releases it: nothing leaks. */
int image_open(image_dec *d, const uint8_t *buf, size_t nbytes, int *h, int *w, char *err, size_t errlen);
int image_decode_rect_scaled_open(image_dec *d, int denom, int y0, int y1, int x0, int x1, const uint8_t **rgb,
                                  size_t *stride, int *warnings, char *err, size_t errlen);

/* Resample src (sh, sw, 3) u8 into dst (dh, dw, 3) u8 as Pillow's Image.resize((dw, dh), filter,
 * box) does (Resample.c, ImagingResample): separable, antialiased (the kernel's support scaled
 * by the reduction factor when downscaling), triangle (IMAGE_BILINEAR) or Keys a = −0.5
 * (IMAGE_BICUBIC), horizontal pass first into a u8 intermediate, 22-bit fixed-point
 * coefficients, rounding and clipping to [0, 255] after each pass. box = {x0, y0, x1, y1} in
 * source pixels (floats, as Pillow takes them), NULL = the whole image; taps are clamped to the
 * whole source, not to the box. Uses d's intermediate buffer (distinct from the decode buffer,
 * so src may be the decode output). */
void image_resize_u8(image_dec *d, uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw, int interp,
                     const float *box);

/* The resampler's instruction set: want 0 forces the scalar passes (the reference), want 1
 * chooses the best this CPU runs (AVX2 when __builtin_cpu_supports says so, else scalar), want
 * -1 only asks. Returns the level in use: 0 scalar, 1 AVX2. Both give the same bits (integer
 * sums in another order; test_image checks it). The first resize chooses by itself; call this
 * before decode threads start (a process-wide setting, for tests and benchmarks). */
int image_simd(int want);

/* A u8 RGB source for image_resize_window: pixel (y, x) of an h × w image is at
 * px + (y - y0)·stride + 3·(x - x0); only the rows and columns that the window's taps reach
 * need to be present (image_window_taps gives them). */
typedef struct {
    const uint8_t *px;
    int h, w;          /* size of the whole image the taps are clamped to */
    int y0, x0;        /* image coordinates of px[0] */
    size_t stride;     /* bytes between rows */
} image_view;

/* The rows [oy, oy + dh) and columns [ox, ox + dw) of Pillow's resize of the whole src to
 * (DH, DW) (Image.resize((DW, DH), filter) followed by .crop((ox, oy, ox + dw, oy + dh))),
 * computed without the rest: bit-identical to resize-then-crop, since every output pixel has
 * the same taps and coefficients. dst (dh, dw, 3) u8, row stride 3·dw. */
void image_resize_window(image_dec *d, uint8_t *dst, int dh, int dw, const image_view *src, int DH, int DW, int oy,
                         int ox, int interp);

/* image_resize_window of Pillow's Image.resize((DW, DH), filter, box) with a box = {x0, y0, x1,
 * y1} in src's image coordinates (floats, as Pillow takes them; NULL: the whole image, which is
 * image_resize_window); taps are still clamped to the whole src->h × src->w image. Used for a
 * DCT-scaled decode (augment.c, data.dct_scale), where Pillow's draft returns the box (0, 0,
 * W / denom, H / denom) that maps the scaled image onto the full-size one. */
void image_resize_window_box(image_dec *d, uint8_t *dst, int dh, int dw, const image_view *src, int DH, int DW, int oy,
                             int ox, int interp, const float *box);

/* image_window_taps for image_resize_window_box's box (NULL: the whole image). */
void image_window_taps_box(int h, int w, int DH, int DW, int oy, int ox, int dh, int dw, int interp, const float *box,
                           int r[4]);

/* The source rows [r[0], r[1]) and columns [r[2], r[3]) of an h × w image that the window
 * (oy, ox, dh, dw) of a resize to (DH, DW) reads. */
void image_window_taps(int h, int w, int DH, int DW, int oy, int ox, int dh, int dw, int interp, int r[4]);

#endif
