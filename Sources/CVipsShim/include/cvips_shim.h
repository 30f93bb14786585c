// Typed wrappers for the libvips calls imagecached makes (libvips's API is variadic: optional arguments as
// name/value pairs ending in NULL, which Swift does not import). Each function is one call with its options fixed;
// all decisions (geometry, limits, formats) are made in Swift under ImageCacheTransform/. libvips's own types stay
// behind this header: Swift sees an opaque image and plain C values, never glib.
#ifndef CVIPS_SHIM_PUBLIC_H
#define CVIPS_SHIM_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

typedef struct _VipsImage icv_image;

/// Starts libvips once per process: operation cache off, untrusted loaders blocked, `concurrency` threads per image.
/// 0 on success.
int icv_init(const char *_Nonnull argv0, int concurrency);
/// Blocks (1) or allows (0) an operation class and its subclasses, e.g. "VipsForeignLoadSvg". 0 on success.
int icv_block_operation(const char *_Nonnull name, int blocked);
/// The error text libvips collected (its buffer is process-wide), cleared; free with icv_free. Never NULL.
char *_Nonnull icv_error_take(void);
void icv_free(void *_Nullable p);
void icv_unref(icv_image *_Nonnull image);

/// An image over `data` (which must outlive it); reads the header only, pixels are decoded when needed.
/// `pages`: 1 for the first frame, -1 for all. `fail`: refuse damaged or truncated files. `random`: random access
/// (decoded whole into memory when first read: what smartcrop and find_trim need), else sequential. NULL on error.
icv_image *_Nullable icv_load_buffer(const void *_Nonnull data, size_t length, int pages, int fail, int random);
int icv_width(icv_image *_Nonnull image);
int icv_height(icv_image *_Nonnull image);
int icv_bands(icv_image *_Nonnull image);
int icv_has_alpha(icv_image *_Nonnull image);
int icv_n_pages(icv_image *_Nonnull image);
/// The height of one frame (the whole height for a single frame).
int icv_page_height(icv_image *_Nonnull image);
/// EXIF orientation 1-8 (1 when absent).
int icv_orientation(icv_image *_Nonnull image);
/// The loader's nickname ("jpegload_buffer", ...); "" when unknown. Valid while the image lives.
const char *_Nonnull icv_loader(icv_image *_Nonnull image);

/// vips_thumbnail_buffer: decode with shrink-on-load, resize to exactly width x height (size force), auto-rotated
/// unless `no_rotate`; `crop`: 0 none, 1 centre, 2 attention (smart); `pages` as icv_load_buffer.
icv_image *_Nullable icv_thumbnail_buffer(const void *_Nonnull data, size_t length, int width, int height, int crop,
                                          int pages, int no_rotate, int fail);
icv_image *_Nullable icv_autorot(icv_image *_Nonnull in);
icv_image *_Nullable icv_extract_area(icv_image *_Nonnull in, int left, int top, int width, int height);
icv_image *_Nullable icv_smartcrop(icv_image *_Nonnull in, int width, int height);
icv_image *_Nullable icv_resize(icv_image *_Nonnull in, double hscale, double vscale);
/// Rotates by 90, 180 or 270 degrees clockwise.
icv_image *_Nullable icv_rot(icv_image *_Nonnull in, int degrees);
icv_image *_Nullable icv_gaussblur(icv_image *_Nonnull in, double sigma);
icv_image *_Nullable icv_sharpen(icv_image *_Nonnull in, double sigma);
/// Places `in` at (x, y) on a width x height canvas of `background` (n values: one per band).
icv_image *_Nullable icv_embed(icv_image *_Nonnull in, int x, int y, int width, int height,
                               const double *_Nonnull background, int n);
/// Removes the alpha band over `background` (three values, RGB).
icv_image *_Nullable icv_flatten(icv_image *_Nonnull in, const double *_Nonnull background);
/// Adds an opaque alpha band.
icv_image *_Nullable icv_add_alpha(icv_image *_Nonnull in);
/// Converts to 8-bit sRGB (CMYK, 16-bit, LAB, ...); a grey or sRGB 8-bit image comes back as it is (a new ref).
icv_image *_Nullable icv_to_srgb(icv_image *_Nonnull in);
/// The box of what differs from the background by more than `threshold` (vips_find_trim). 0 on success.
int icv_find_trim(icv_image *_Nonnull in, double threshold, const double *_Nonnull background, int n,
                  int *_Nonnull left, int *_Nonnull top, int *_Nonnull width, int *_Nonnull height);

/// Stacks `n` frames of equal size into one animation image (vertically, page-height set to `page_height`).
icv_image *_Nullable icv_join_frames(icv_image *_Nonnull const *_Nonnull frames, int n, int page_height);
/// The image evaluated into memory (so that several regions of it can be read, once).
icv_image *_Nullable icv_copy_memory(icv_image *_Nonnull in);

/// The band values of the pixel at (x, y), at most `capacity` of them; how many, or -1 on error.
int icv_getpoint(icv_image *_Nonnull in, int x, int y, double *_Nonnull values, int capacity);

/// Encodes `in`: `format` 0 jpeg, 1 png, 2 webp, 3 avif, 4 gif. `quality` 1-100; `strip` drops metadata; `effort`
/// the encoder's effort (avif 0-9, webp 0-6; ignored by the others). Evaluation is killed once `seconds` have
/// passed (0: no limit). On success *out holds the bytes (free with icv_free) and 0 is returned.
int icv_save(icv_image *_Nonnull in, int format, int quality, int strip, int effort, double seconds,
             void *_Nullable *_Nonnull out, size_t *_Nonnull length);

#endif
