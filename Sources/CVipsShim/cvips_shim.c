// Typed wrappers for libvips's variadic calls; see include/cvips_shim.h. One call each, no decisions.
#include "cvips_shim.h"
#include <vips/vips.h>

static void icv_quiet(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer user) {
    (void)domain; (void)level; (void)message; (void)user;
}

int icv_init(const char *argv0, int concurrency) {
    if (VIPS_INIT(argv0) != 0) return -1;
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING, icv_quiet, NULL);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(concurrency);
    vips_leak_set(FALSE);
    return 0;
}

void icv_block_untrusted(int blocked) { vips_block_untrusted_set(blocked ? TRUE : FALSE); }

int icv_block_operation(const char *name, int blocked) {
    GType type = g_type_from_name(name);
    if (!type || !g_type_is_a(type, VIPS_TYPE_OPERATION)) return -1;
    vips_operation_block_set(name, blocked ? TRUE : FALSE);
    return 0;
}

char *icv_error_take(void) { return vips_error_buffer_copy(); }
void icv_free(void *p) { g_free(p); }
void icv_unref(icv_image *image) { g_object_unref(image); }

static VipsFailOn fail_on(int fail) { return fail ? VIPS_FAIL_ON_ERROR : VIPS_FAIL_ON_NONE; }
static VipsAccess access_of(int random) { return random ? VIPS_ACCESS_RANDOM : VIPS_ACCESS_SEQUENTIAL; }

icv_image *icv_load_buffer(const void *data, size_t length, int fail, int random) {
    return vips_image_new_from_buffer(data, length, "", "access", access_of(random), "fail_on", fail_on(fail), NULL);
}

icv_image *icv_load_buffer_shrink(const void *data, size_t length, int shrink) {
    return vips_image_new_from_buffer(data, length, "", "access", VIPS_ACCESS_SEQUENTIAL, "fail_on", fail_on(1),
                                      "shrink", shrink, NULL);
}

icv_image *icv_load_buffer_pages(const void *data, size_t length, int pages, int fail, int random) {
    return vips_image_new_from_buffer(data, length, "", "access", access_of(random), "fail_on", fail_on(fail),
                                      "n", pages, NULL);
}

int icv_width(icv_image *image) { return vips_image_get_width(image); }
int icv_height(icv_image *image) { return vips_image_get_height(image); }
int icv_bands(icv_image *image) { return vips_image_get_bands(image); }
size_t icv_pixel_bytes(icv_image *image) { return VIPS_IMAGE_SIZEOF_IMAGE(image); }

static void *icv_add_field_bytes(VipsImage *image, const char *name, GValue *value, void *total) {
    (void)image;
    (void)name;
    size_t length = 0;
    if (G_VALUE_HOLDS(value, VIPS_TYPE_BLOB)) vips_blob_get(g_value_get_boxed(value), &length);
    else if (G_VALUE_HOLDS(value, VIPS_TYPE_REF_STRING)) vips_value_get_ref_string(value, &length);
    else if (G_VALUE_HOLDS_STRING(value) && g_value_get_string(value)) length = strlen(g_value_get_string(value));
    *(size_t *)total += length;
    return NULL;
}

size_t icv_retained_bytes(icv_image *image) {
    size_t total = VIPS_IMAGE_SIZEOF_IMAGE(image);
    vips_image_map(image, icv_add_field_bytes, &total);
    return total;
}
int icv_has_alpha(icv_image *image) { return vips_image_hasalpha(image) ? 1 : 0; }
int icv_n_pages(icv_image *image) { return vips_image_get_n_pages(image); }
int icv_page_height(icv_image *image) { return vips_image_get_page_height(image); }
int icv_orientation(icv_image *image) { return vips_image_get_orientation(image); }

const char *icv_loader(icv_image *image) {
    const char *name = NULL;
    if (vips_image_get_typeof(image, VIPS_META_LOADER) && vips_image_get_string(image, VIPS_META_LOADER, &name) == 0 && name)
        return name;
    return "";
}

const char *icv_interpretation(icv_image *image) {
    return vips_enum_nick(VIPS_TYPE_INTERPRETATION, vips_image_get_interpretation(image));
}

int icv_is_uchar(icv_image *image) { return vips_image_get_format(image) == VIPS_FORMAT_UCHAR ? 1 : 0; }

static VipsInteresting interesting(int crop) {
    return crop == 1 ? VIPS_INTERESTING_CENTRE : crop == 2 ? VIPS_INTERESTING_ATTENTION : VIPS_INTERESTING_NONE;
}

icv_image *icv_thumbnail_buffer(const void *data, size_t length, int width, int height, int force, int crop,
                                int no_rotate, const char *options) {
    VipsImage *out = NULL;
    if (vips_thumbnail_buffer((void *)data, length, &out, width, "height", height,
                              "size", force ? VIPS_SIZE_FORCE : VIPS_SIZE_BOTH, "crop", interesting(crop),
                              "no_rotate", no_rotate ? TRUE : FALSE, "option_string", options, NULL) != 0)
        return NULL;
    return out;
}

#define ICV_ONE(call) do { VipsImage *out = NULL; return (call) == 0 ? out : NULL; } while (0)

icv_image *icv_autorot(icv_image *in) { ICV_ONE(vips_autorot(in, &out, NULL)); }
icv_image *icv_copy_memory(icv_image *in) { return vips_image_copy_memory(in); }
icv_image *icv_extract_area(icv_image *in, int left, int top, int width, int height) {
    ICV_ONE(vips_extract_area(in, &out, left, top, width, height, NULL));
}
icv_image *icv_smartcrop(icv_image *in, int width, int height) {
    ICV_ONE(vips_smartcrop(in, &out, width, height, "interesting", VIPS_INTERESTING_ATTENTION, NULL));
}
int icv_attention(icv_image *in, int width, int height, int *x, int *y) {
    VipsImage *out = NULL;
    if (vips_smartcrop(in, &out, width, height, "interesting", VIPS_INTERESTING_ATTENTION, "attention_x", x,
                       "attention_y", y, NULL) != 0) return -1;
    g_object_unref(out);
    return 0;
}
icv_image *icv_resize(icv_image *in, double hscale, double vscale) { ICV_ONE(vips_resize(in, &out, hscale, "vscale", vscale, NULL)); }
icv_image *icv_shrink(icv_image *in, double hshrink, double vshrink) { ICV_ONE(vips_shrink(in, &out, hshrink, vshrink, NULL)); }
icv_image *icv_thumbnail_image(icv_image *in, int width, int height, int force, int crop, int no_rotate) {
    ICV_ONE(vips_thumbnail_image(in, &out, width, "height", height, "size", force ? VIPS_SIZE_FORCE : VIPS_SIZE_BOTH,
                                 "crop", interesting(crop), "no_rotate", no_rotate ? TRUE : FALSE, NULL));
}
icv_image *icv_rot(icv_image *in, int quarters) {
    VipsAngle angle = quarters == 1 ? VIPS_ANGLE_D90 : quarters == 2 ? VIPS_ANGLE_D180 : quarters == 3 ? VIPS_ANGLE_D270 : VIPS_ANGLE_D0;
    ICV_ONE(vips_rot(in, &out, angle, NULL));
}
icv_image *icv_gaussblur(icv_image *in, double sigma) { ICV_ONE(vips_gaussblur(in, &out, sigma, NULL)); }
icv_image *icv_sharpen(icv_image *in, double sigma) { ICV_ONE(vips_sharpen(in, &out, "sigma", sigma, NULL)); }
icv_image *icv_add_alpha(icv_image *in) { ICV_ONE(vips_addalpha(in, &out, NULL)); }
icv_image *icv_colourspace(icv_image *in, int grey) {
    ICV_ONE(vips_colourspace(in, &out, grey ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB, NULL));
}
icv_image *icv_cast_uchar(icv_image *in) { ICV_ONE(vips_cast(in, &out, VIPS_FORMAT_UCHAR, NULL)); }

icv_image *icv_embed(icv_image *in, int x, int y, int width, int height, const double *background, int n) {
    VipsArrayDouble *bg = vips_array_double_new(background, n);
    VipsImage *out = NULL;
    int failed = vips_embed(in, &out, x, y, width, height, "extend", VIPS_EXTEND_BACKGROUND, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return failed ? NULL : out;
}

icv_image *icv_flatten(icv_image *in, const double *background) {
    VipsArrayDouble *bg = vips_array_double_new(background, 3);
    VipsImage *out = NULL;
    int failed = vips_flatten(in, &out, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return failed ? NULL : out;
}

icv_image *icv_join_frames(icv_image *const *frames, int n, int page_height) {
    VipsImage *out = NULL;
    if (vips_arrayjoin((VipsImage **)frames, &out, n, "across", 1, NULL) != 0) return NULL;
    vips_image_set_int(out, VIPS_META_PAGE_HEIGHT, page_height);
    return out;
}

int icv_find_trim(icv_image *in, double threshold, const double *background, int n, int *left, int *top, int *width,
                  int *height) {
    VipsArrayDouble *bg = vips_array_double_new(background, n);
    int failed = vips_find_trim(in, left, top, width, height, "threshold", threshold, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return failed;
}

int icv_getpoint(icv_image *in, int x, int y, double *values, int capacity) {
    double *vector = NULL;
    int n = 0;
    if (vips_getpoint(in, &vector, &n, x, y, NULL) != 0) return -1;
    int count = n < capacity ? n : capacity;
    for (int i = 0; i < count; i++) values[i] = vector[i];
    g_free(vector);
    return count;
}

int icv_jpegsave(icv_image *in, int quality, int strip, void **out, size_t *length) {
    return vips_jpegsave_buffer(in, out, length, "Q", quality, "strip", strip ? TRUE : FALSE, "optimize_coding", TRUE, NULL);
}
int icv_pngsave(icv_image *in, int strip, void **out, size_t *length) {
    return vips_pngsave_buffer(in, out, length, "strip", strip ? TRUE : FALSE, "compression", 6, NULL);
}
int icv_webpsave(icv_image *in, int quality, int strip, int effort, void **out, size_t *length) {
    return vips_webpsave_buffer(in, out, length, "Q", quality, "strip", strip ? TRUE : FALSE, "effort", effort, NULL);
}
int icv_avifsave(icv_image *in, int quality, int strip, int effort, void **out, size_t *length) {
    return vips_heifsave_buffer(in, out, length, "Q", quality, "strip", strip ? TRUE : FALSE, "effort", effort,
                                "compression", VIPS_FOREIGN_HEIF_COMPRESSION_AV1, NULL);
}
int icv_gifsave(icv_image *in, int strip, void **out, size_t *length) {
    return vips_gifsave_buffer(in, out, length, "strip", strip ? TRUE : FALSE, NULL);
}

/* `at` is written by the job's thread and read by libvips's worker threads (the "eval" signal), which get their
 * work through glib's own locks; those wait on futexes ThreadSanitizer cannot see, so the accesses are atomic. */
struct icv_deadline { gint64 at; };

icv_deadline *icv_deadline_new(double seconds) {
    icv_deadline *deadline = g_new(icv_deadline, 1);
    __atomic_store_n(&deadline->at, g_get_monotonic_time() + (gint64)(seconds * 1e6), __ATOMIC_RELEASE);
    return deadline;
}

void icv_deadline_free(icv_deadline *deadline) { g_free(deadline); }

int icv_deadline_passed(const icv_deadline *deadline) {
    return g_get_monotonic_time() > __atomic_load_n(&deadline->at, __ATOMIC_ACQUIRE) ? 1 : 0;
}

double icv_deadline_remaining(const icv_deadline *deadline) {
    return (double)(__atomic_load_n(&deadline->at, __ATOMIC_ACQUIRE) - g_get_monotonic_time()) / 1e6;
}

static void icv_eval(VipsImage *image, VipsProgress *progress, void *user) {
    (void)progress;
    if (icv_deadline_passed(user)) vips_image_set_kill(image, TRUE);
}

void icv_watch(icv_image *image, icv_deadline *deadline) {
    vips_image_set_progress(image, TRUE);
    g_signal_connect(image, "eval", G_CALLBACK(icv_eval), deadline);
}

void icv_unwatch(icv_image *image, icv_deadline *deadline) {
    g_signal_handlers_disconnect_by_func(image, G_CALLBACK(icv_eval), deadline);
    vips_image_set_progress(image, FALSE);
}
