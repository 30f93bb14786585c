// Typed wrappers for libvips's variadic calls; see include/cvips_shim.h. One call each, no decisions.
#include "cvips_shim.h"
#include <vips/vips.h>
#include <string.h>

static void icv_quiet(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer user) {
    (void)domain; (void)level; (void)message; (void)user;
}

int icv_init(const char *argv0, int concurrency) {
    if (VIPS_INIT(argv0) != 0) return -1;
    // libvips's warnings ("error in tile ...") repeat what its error buffer says; the daemon logs the error once.
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING, icv_quiet, NULL);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(concurrency);
    vips_block_untrusted_set(TRUE);
    vips_leak_set(FALSE);
    return 0;
}

int icv_block_operation(const char *name, int blocked) {
    if (!vips_type_find("VipsOperation", name)) return -1;
    vips_operation_block_set(name, blocked ? TRUE : FALSE);
    return 0;
}

char *icv_error_take(void) {
    char *text = g_strdup(vips_error_buffer());
    vips_error_clear();
    return text;
}

void icv_free(void *p) { g_free(p); }
void icv_unref(icv_image *image) { g_object_unref(image); }

static VipsFailOn fail_on(int fail) { return fail ? VIPS_FAIL_ON_ERROR : VIPS_FAIL_ON_NONE; }

icv_image *icv_load_buffer(const void *data, size_t length, int pages, int fail, int random) {
    VipsAccess access = random ? VIPS_ACCESS_RANDOM : VIPS_ACCESS_SEQUENTIAL;
    // "n" is taken by the loaders of multi-frame formats only; the others would refuse it.
    VipsImage *image = vips_image_new_from_buffer(data, length, "", "access", access, "fail_on", fail_on(fail), NULL);
    if (image == NULL || pages == 1) return image;
    const char *loader = vips_foreign_find_load_buffer(data, length);
    if (loader == NULL) return image;
    if (strstr(loader, "gif") == NULL && strstr(loader, "webp") == NULL) return image;
    g_object_unref(image);
    return vips_image_new_from_buffer(data, length, "", "access", access, "fail_on", fail_on(fail), "n", pages, NULL);
}

int icv_width(icv_image *image) { return vips_image_get_width(image); }
int icv_height(icv_image *image) { return vips_image_get_height(image); }
int icv_bands(icv_image *image) { return vips_image_get_bands(image); }
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

static VipsInteresting interesting(int crop) {
    switch (crop) {
    case 1: return VIPS_INTERESTING_CENTRE;
    case 2: return VIPS_INTERESTING_ATTENTION;
    default: return VIPS_INTERESTING_NONE;
    }
}

icv_image *icv_thumbnail_buffer(const void *data, size_t length, int width, int height, int crop, int pages,
                                int no_rotate, int fail) {
    VipsImage *out = NULL;
    char options[64];
    g_snprintf(options, sizeof options, "fail_on=%s%s", fail ? "error" : "none", pages == -1 ? ",n=-1" : "");
    // Options the loader does not take (n for a JPEG) are ignored by vips_thumbnail's option string.
    if (vips_thumbnail_buffer((void *)data, length, &out, width, "height", height,
                              "size", crop ? VIPS_SIZE_BOTH : VIPS_SIZE_FORCE, "crop", interesting(crop),
                              "no_rotate", no_rotate ? TRUE : FALSE, "option_string", options, NULL) != 0)
        return NULL;
    return out;
}

icv_image *icv_copy_memory(icv_image *in) {
    return vips_image_copy_memory(in);
}

icv_image *icv_autorot(icv_image *in) {
    VipsImage *out = NULL;
    return vips_autorot(in, &out, NULL) == 0 ? out : NULL;
}

icv_image *icv_extract_area(icv_image *in, int left, int top, int width, int height) {
    VipsImage *out = NULL;
    return vips_extract_area(in, &out, left, top, width, height, NULL) == 0 ? out : NULL;
}

icv_image *icv_smartcrop(icv_image *in, int width, int height) {
    VipsImage *out = NULL;
    return vips_smartcrop(in, &out, width, height, "interesting", VIPS_INTERESTING_ATTENTION, NULL) == 0 ? out : NULL;
}

icv_image *icv_resize(icv_image *in, double hscale, double vscale) {
    VipsImage *out = NULL;
    return vips_resize(in, &out, hscale, "vscale", vscale, NULL) == 0 ? out : NULL;
}

icv_image *icv_rot(icv_image *in, int degrees) {
    VipsAngle angle = degrees == 90 ? VIPS_ANGLE_D90 : degrees == 180 ? VIPS_ANGLE_D180 : degrees == 270 ? VIPS_ANGLE_D270 : VIPS_ANGLE_D0;
    VipsImage *out = NULL;
    return vips_rot(in, &out, angle, NULL) == 0 ? out : NULL;
}

icv_image *icv_gaussblur(icv_image *in, double sigma) {
    VipsImage *out = NULL;
    return vips_gaussblur(in, &out, sigma, NULL) == 0 ? out : NULL;
}

icv_image *icv_sharpen(icv_image *in, double sigma) {
    VipsImage *out = NULL;
    return vips_sharpen(in, &out, "sigma", sigma, NULL) == 0 ? out : NULL;
}

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

icv_image *icv_add_alpha(icv_image *in) {
    VipsImage *out = NULL;
    return vips_addalpha(in, &out, NULL) == 0 ? out : NULL;
}

icv_image *icv_to_srgb(icv_image *in) {
    VipsInterpretation kind = vips_image_get_interpretation(in);
    if ((kind == VIPS_INTERPRETATION_sRGB || kind == VIPS_INTERPRETATION_B_W) && vips_image_get_format(in) == VIPS_FORMAT_UCHAR) {
        g_object_ref(in);
        return in;
    }
    VipsInterpretation target = (kind == VIPS_INTERPRETATION_B_W || kind == VIPS_INTERPRETATION_GREY16) ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB;
    VipsImage *out = NULL;
    if (vips_colourspace(in, &out, target, NULL) != 0) return NULL;
    if (vips_image_get_format(out) == VIPS_FORMAT_UCHAR) return out;
    VipsImage *cast = NULL;
    int failed = vips_cast(out, &cast, VIPS_FORMAT_UCHAR, NULL);
    g_object_unref(out);
    return failed ? NULL : cast;
}

int icv_find_trim(icv_image *in, double threshold, const double *background, int n, int *left, int *top, int *width,
                  int *height) {
    VipsArrayDouble *bg = vips_array_double_new(background, n);
    int failed = vips_find_trim(in, left, top, width, height, "threshold", threshold, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return failed;
}

icv_image *icv_join_frames(icv_image *const *frames, int n, int page_height) {
    VipsImage *out = NULL;
    if (vips_arrayjoin((VipsImage **)frames, &out, n, "across", 1, NULL) != 0) return NULL;
    vips_image_set_int(out, VIPS_META_PAGE_HEIGHT, page_height);
    return out;
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

typedef struct { gint64 deadline; } icv_deadline;

static void icv_eval(VipsImage *image, VipsProgress *progress, void *user) {
    (void)progress;
    icv_deadline *deadline = user;
    if (g_get_monotonic_time() > deadline->deadline) vips_image_set_kill(image, TRUE);
}

int icv_save(icv_image *in, int format, int quality, int strip, int effort, double seconds, void **out, size_t *length) {
    *out = NULL;
    *length = 0;
    icv_deadline deadline = { g_get_monotonic_time() + (gint64)(seconds * 1e6) };
    gulong handler = 0;
    if (seconds > 0) {
        vips_image_set_progress(in, TRUE);
        handler = g_signal_connect(in, "eval", G_CALLBACK(icv_eval), &deadline);
    }
    int failed;
    gboolean s = strip ? TRUE : FALSE;
    switch (format) {
    case 0: failed = vips_jpegsave_buffer(in, out, length, "Q", quality, "strip", s, "optimize_coding", TRUE, NULL); break;
    case 1: failed = vips_pngsave_buffer(in, out, length, "strip", s, "compression", 6, NULL); break;
    case 2: failed = vips_webpsave_buffer(in, out, length, "Q", quality, "strip", s, "effort", effort, NULL); break;
    case 3: failed = vips_heifsave_buffer(in, out, length, "Q", quality, "strip", s, "effort", effort,
                                          "compression", VIPS_FOREIGN_HEIF_COMPRESSION_AV1, NULL); break;
    case 4: failed = vips_gifsave_buffer(in, out, length, "strip", s, NULL); break;
    default: vips_error("imagecached", "unknown output format %d", format); failed = -1; break;
    }
    if (handler) {
        g_signal_handler_disconnect(in, handler);
        vips_image_set_progress(in, FALSE);
    }
    if (!failed && vips_image_iskilled(in)) failed = -1;
    if (failed) {
        g_free(*out);
        *out = NULL;
        *length = 0;
        if (seconds > 0 && g_get_monotonic_time() > deadline.deadline) {
            vips_error_clear();
            vips_error("imagecached", "the transform took longer than its time limit");
        }
    }
    return failed;
}
