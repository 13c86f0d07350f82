/* pack_image.h — pack_image.c's export, for `dsgd-run --pack` (src/data/ only): one thread's
 * image converter (its decoder, buffers and JPEG encoder). */
#ifndef DSGD_PACK_IMAGE_H
#define DSGD_PACK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pack_conv pack_conv;
pack_conv *pack_conv_new(void);
void pack_conv_free(pack_conv *c);

/* Convert an image file's bytes (JPEG or PNG) into a baseline 4:2:0 JPEG of largest side <=
 * max_side at quality: *jpeg (c's buffer, valid until the next call) of *jpeg_nbytes bytes, h × w
 * pixels; *warnings: decoder warnings (data recovered). Returns 0, or 1 (the image cannot be
 * packed: why says so, e.g. "truncated JPEG (no end-of-image marker)") . Never exits. */
int pack_convert(pack_conv *c, const uint8_t *buf, size_t nbytes, int max_side, int quality, const uint8_t **jpeg,
                 size_t *jpeg_nbytes, int *h, int *w, int *warnings, char *why, size_t whylen);

#endif
