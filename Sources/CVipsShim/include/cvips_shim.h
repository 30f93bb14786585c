// Typed wrappers for the libvips calls imagecached makes (libvips's API is variadic: optional arguments as
// name/value pairs ending in NULL, which Swift does not import). Each function is one libvips call with its options
// fixed; every decision (which loader options, which colourspace, which format, geometry, limits) is made in Swift
// under ImageCacheTransform/. libvips's own types stay behind this header: Swift sees an opaque image and plain C
// values, never glib. The one piece of C that is more than a call is the deadline: libvips reports evaluation
// progress through a GObject signal, whose handler must be C.
#ifndef CVIPS_SHIM_PUBLIC_H
#define CVIPS_SHIM_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

typedef struct _VipsImage icv_image;
typedef struct icv_deadline icv_deadline;

/// VIPS_INIT, then: operation cache off, `concurrency` threads per image, leak checks off, libvips's warnings
/// (repeats of its errors) not printed. 0 on success.
int icv_init(const char *_Nonnull argv0, int concurrency);
/// vips_block_untrusted_set.
void icv_block_untrusted(int blocked);
/// vips_operation_block_set: blocks (1) or allows (0) an operation class and its subclasses; -1 if no operation
/// class has that GType name. (Abstract classes such as VipsForeignLoad count: vips_type_find finds only classes
/// that can be instantiated, so it is not the test.)
int icv_block_operation(const char *_Nonnull name, int blocked);
/// vips_error_buffer_copy: the error text collected (process-wide), cleared; free with icv_free. Never NULL.
char *_Nonnull icv_error_take(void);
void icv_free(void *_Nullable p);
void icv_unref(icv_image *_Nonnull image);

/// vips_image_new_from_buffer over `data` (which must outlive the image); reads the header only. `fail`:
/// fail_on=error (damaged or truncated files refused); `random`: random access, else sequential. NULL on error.
icv_image *_Nullable icv_load_buffer(const void *_Nonnull data, size_t length, int fail, int random);
/// The same with the loader's "n" (frames; -1 all), for multi-frame loaders only (GIF, WebP).
/// A JPEG's header over `data`, decoded `shrink` (2, 4 or 8) times smaller by the decoder (shrink-on-load).
icv_image *_Nullable icv_load_buffer_shrink(const void *_Nonnull data, size_t length, int shrink);
icv_image *_Nullable icv_load_buffer_pages(const void *_Nonnull data, size_t length, int pages, int fail, int random);
int icv_width(icv_image *_Nonnull image);
int icv_height(icv_image *_Nonnull image);
int icv_bands(icv_image *_Nonnull image);
/// Bytes of the pixels: width x height x bands x bytes per band.
size_t icv_pixel_bytes(icv_image *_Nonnull image);
/// The pixels plus every metadata blob and string the image carries (ICC, EXIF, XMP, IPTC, PNG text): what a
/// memory image keeps alive.
size_t icv_retained_bytes(icv_image *_Nonnull image);
int icv_has_alpha(icv_image *_Nonnull image);
int icv_n_pages(icv_image *_Nonnull image);
int icv_page_height(icv_image *_Nonnull image);
int icv_orientation(icv_image *_Nonnull image);
/// The loader's nickname ("jpegload_buffer", ...); "" when unknown. Valid while the image lives.
const char *_Nonnull icv_loader(icv_image *_Nonnull image);
/// vips_image_get_interpretation's name ("srgb", "b-w", "cmyk", "rgb16", "grey16", ...), from libvips's own enum
/// nicknames.
const char *_Nonnull icv_interpretation(icv_image *_Nonnull image);
/// Whether the band format is 8-bit unsigned.
int icv_is_uchar(icv_image *_Nonnull image);

/// vips_thumbnail_buffer: width x height with size `force` (0: both, i.e. cover when `crop`), crop 0 none,
/// 1 centre, 2 attention; `options`: the loader's option string; auto-rotated unless `no_rotate`.
icv_image *_Nullable icv_thumbnail_buffer(const void *_Nonnull data, size_t length, int width, int height, int force,
                                          int crop, int no_rotate, const char *_Nonnull options);
icv_image *_Nullable icv_autorot(icv_image *_Nonnull in);
icv_image *_Nullable icv_copy_memory(icv_image *_Nonnull in);
icv_image *_Nullable icv_extract_area(icv_image *_Nonnull in, int left, int top, int width, int height);
/// vips_smartcrop with the attention strategy.
icv_image *_Nullable icv_smartcrop(icv_image *_Nonnull in, int width, int height);
/// vips_smartcrop with the attention strategy, reporting the attention centre it found. 0 on success.
int icv_attention(icv_image *_Nonnull in, int width, int height, int *_Nonnull x, int *_Nonnull y);
icv_image *_Nullable icv_resize(icv_image *_Nonnull in, double hscale, double vscale);
/// vips_shrink: box-averages `hshrink` x `vshrink` pixels into one.
icv_image *_Nullable icv_shrink(icv_image *_Nonnull in, double hshrink, double vshrink);
/// vips_thumbnail_image: as icv_thumbnail_buffer, from an image (no shrink-on-load).
icv_image *_Nullable icv_thumbnail_image(icv_image *_Nonnull in, int width, int height, int force, int crop, int no_rotate);
/// vips_rot by 90 (1), 180 (2) or 270 (3) degrees clockwise.
icv_image *_Nullable icv_rot(icv_image *_Nonnull in, int quarters);
icv_image *_Nullable icv_gaussblur(icv_image *_Nonnull in, double sigma);
icv_image *_Nullable icv_sharpen(icv_image *_Nonnull in, double sigma);
/// vips_embed with extend=background.
icv_image *_Nullable icv_embed(icv_image *_Nonnull in, int x, int y, int width, int height,
                               const double *_Nonnull background, int n);
/// vips_flatten onto `background` (three values).
icv_image *_Nullable icv_flatten(icv_image *_Nonnull in, const double *_Nonnull background);
icv_image *_Nullable icv_add_alpha(icv_image *_Nonnull in);
/// vips_colourspace to sRGB (0) or B_W (1).
icv_image *_Nullable icv_colourspace(icv_image *_Nonnull in, int grey);
/// vips_cast to 8-bit unsigned.
icv_image *_Nullable icv_cast_uchar(icv_image *_Nonnull in);
/// vips_arrayjoin of `n` frames, one above the other, then page-height set to `page_height`.
icv_image *_Nullable icv_join_frames(icv_image *_Nonnull const *_Nonnull frames, int n, int page_height);
/// vips_find_trim. 0 on success.
int icv_find_trim(icv_image *_Nonnull in, double threshold, const double *_Nonnull background, int n,
                  int *_Nonnull left, int *_Nonnull top, int *_Nonnull width, int *_Nonnull height);
/// vips_getpoint: at most `capacity` band values; how many, or -1.
int icv_getpoint(icv_image *_Nonnull in, int x, int y, double *_Nonnull values, int capacity);

/// The savers (to a buffer; free *out with icv_free). 0 on success.
int icv_jpegsave(icv_image *_Nonnull in, int quality, int strip, void *_Nullable *_Nonnull out, size_t *_Nonnull length);
int icv_pngsave(icv_image *_Nonnull in, int strip, void *_Nullable *_Nonnull out, size_t *_Nonnull length);
int icv_webpsave(icv_image *_Nonnull in, int quality, int strip, int effort, void *_Nullable *_Nonnull out, size_t *_Nonnull length);
/// heifsave with compression AV1 (AVIF).
int icv_avifsave(icv_image *_Nonnull in, int quality, int strip, int effort, void *_Nullable *_Nonnull out, size_t *_Nonnull length);
int icv_gifsave(icv_image *_Nonnull in, int strip, void *_Nullable *_Nonnull out, size_t *_Nonnull length);

/// A point in time `seconds` from now (monotonic clock); free with icv_deadline_free once no watched image lives.
icv_deadline *_Nonnull icv_deadline_new(double seconds);
void icv_deadline_free(icv_deadline *_Nullable deadline);
/// 1 once the deadline has passed.
int icv_deadline_passed(const icv_deadline *_Nonnull deadline);
/// Seconds left until the deadline (negative once it has passed).
double icv_deadline_remaining(const icv_deadline *_Nonnull deadline);
/// Reports `image`'s evaluation progress to a handler that kills the evaluation once `deadline` has passed.
void icv_watch(icv_image *_Nonnull image, icv_deadline *_Nonnull deadline);
/// Undoes icv_watch: no progress signals from `image` (nor from the images made from it), no deadline.
void icv_unwatch(icv_image *_Nonnull image, icv_deadline *_Nonnull deadline);

#endif
