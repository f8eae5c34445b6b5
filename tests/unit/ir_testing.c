#include "ir_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"

#define GUARD_WORDS 4u
#define GUARD 0xdeadbeefu

bool kt_ir_gpu(kf_context *ctx, kf_kernel *k, kf_host_buffer *bufs, uint32_t count,
               const kt_launch *launch) {
    kf_buffer **gb = calloc(count ? count : 1, sizeof *gb);
    bool ok = gb != NULL;
    for (uint32_t i = 0; ok && i < count; i++) {
        /* guards only after what the kernel may write: a read binding keeps its exact length,
         * which arrayLength and the default element count see */
        kf_binding_info info;
        kf_kernel_binding_info(k, i, &info);
        uint32_t guard = info.kind == KF_BINDING_STORAGE_READ_WRITE ? GUARD_WORDS : 0;
        uint64_t size = (bufs[i].size + 3) / 4 * 4 + guard * 4;
        ok = kf_buffer_create(ctx, size, &gb[i]) == KF_OK &&
             kf_buffer_fill_u32(gb[i], GUARD) == KF_OK;
        ok = ok &&
             (bufs[i].size == 0 || kf_buffer_upload(gb[i], 0, bufs[i].data, bufs[i].size) == KF_OK);
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "buffer %u: %s", i, kf_context_last_error(ctx));
        }
    }
    if (ok) {
        kf_kernel_launch l = {0};
        l.buffers = gb;
        l.buffer_count = count;
        memcpy(l.groups, launch->groups, sizeof l.groups);
        l.elements = launch->elements;
        l.constants = launch->constants;
        l.constant_count = launch->constant_count;
        kf_status st = kf_kernel_run(ctx, k, &l);
        if (st != KF_OK) {
            char *w = kf_kernel_emit_wgsl(k);
            kt_fail(__FILE__, __LINE__, "GPU run of '%s': %s: %s\n%s", kf_kernel_name(k),
                    kf_status_str(st), kf_kernel_error(k), w ? w : "");
            kf_free(w);
            ok = false;
        }
    }
    for (uint32_t i = 0; ok && i < count; i++) {
        kf_binding_info info;
        kf_kernel_binding_info(k, i, &info);
        if (info.kind != KF_BINDING_STORAGE_READ_WRITE) {
            continue;
        }
        uint64_t words = (bufs[i].size + 3) / 4 + GUARD_WORDS;
        uint32_t *back = malloc(words * 4);
        ok = back && kf_buffer_download(gb[i], 0, back, words * 4) == KF_OK;
        if (ok) {
            memcpy(bufs[i].data, back, bufs[i].size);
            for (uint64_t g = (bufs[i].size + 3) / 4; g < words; g++) {
                if (back[g] != GUARD) {
                    kt_fail(__FILE__, __LINE__, "'%s': guard word %llu past the end was written",
                            info.name, (unsigned long long)g);
                    ok = false;
                    break;
                }
            }
        } else {
            kt_fail(__FILE__, __LINE__, "download '%s': %s", info.name, kf_context_last_error(ctx));
        }
        free(back);
    }
    for (uint32_t i = 0; gb && i < count; i++) {
        kf_buffer_destroy(gb[i]);
    }
    free(gb);
    return ok;
}

bool kt_ir_interp(kf_kernel *k, kf_host_buffer *bufs, uint32_t count, const kt_launch *launch) {
    kf_interp_desc d = {0};
    d.buffers = bufs;
    d.buffer_count = count;
    memcpy(d.groups, launch->groups, sizeof d.groups);
    d.elements = launch->elements;
    d.constants = launch->constants;
    d.constant_count = launch->constant_count;
    d.subgroup_size = launch->subgroup_size;
    kf_status st = kf_kernel_interpret(k, &d);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "interpreting '%s': %s: %s", kf_kernel_name(k),
                kf_status_str(st), kf_kernel_error(k));
        return false;
    }
    return true;
}

kf_host_buffer *kt_bufs_copy(const kf_host_buffer *bufs, uint32_t count) {
    kf_host_buffer *c = calloc(count ? count : 1, sizeof *c);
    for (uint32_t i = 0; c && i < count; i++) {
        c[i].size = bufs[i].size;
        c[i].data = malloc(bufs[i].size ? bufs[i].size : 1);
        if (c[i].data && bufs[i].size) {
            memcpy(c[i].data, bufs[i].data, bufs[i].size);
        }
    }
    return c;
}

void kt_bufs_free(kf_host_buffer *bufs, uint32_t count) {
    for (uint32_t i = 0; bufs && i < count; i++) {
        free(bufs[i].data);
    }
    free(bufs);
}

static bool close1(double a, double b, double tol, double floor) {
    if (isnan(a) || isnan(b)) {
        return isnan(a) && isnan(b);
    }
    if (isinf(a) || isinf(b)) {
        return a == b;
    }
    double scale = fabs(b) > floor ? fabs(b) : floor;
    return fabs(a - b) <= tol * scale;
}

bool kt_close_f32(const float *a, const float *b, uint64_t n, double tol, double floor,
                  const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        if (!close1(a[i], b[i], tol, floor)) {
            kt_fail(__FILE__, __LINE__, "%s: element %llu is %.9g, expected %.9g (tolerance %g)",
                    what, (unsigned long long)i, (double)a[i], (double)b[i], tol);
            return false;
        }
    }
    return true;
}

bool kt_close_f16(const uint16_t *a, const uint16_t *b, uint64_t n, double tol, double floor,
                  const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        double x = kf__half_to_float(a[i]), y = kf__half_to_float(b[i]);
        if (!close1(x, y, tol, floor)) {
            kt_fail(__FILE__, __LINE__, "%s: element %llu is %.6g, expected %.6g (tolerance %g)",
                    what, (unsigned long long)i, x, y, tol);
            return false;
        }
    }
    return true;
}

bool kt_equal_u32(const uint32_t *a, const uint32_t *b, uint64_t n, const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        if (a[i] != b[i]) {
            kt_fail(__FILE__, __LINE__, "%s: word %llu is 0x%08x, expected 0x%08x", what,
                    (unsigned long long)i, a[i], b[i]);
            return false;
        }
    }
    return true;
}

void kt_fill_f32(float *p, uint64_t n, float lo, float hi) {
    for (uint64_t i = 0; i < n; i++) {
        p[i] = kt_rand_f32(lo, hi);
    }
    if (n && p[0] == 0.0f) {
        p[0] = hi > 1.0f ? 1.0f : hi * 0.5f;
    }
}

void kt_fill_poison(void *p, uint64_t bytes) {
    uint32_t w = KT_POISON;
    for (uint64_t i = 0; i + 4 <= bytes; i += 4) {
        memcpy((char *)p + i, &w, 4);
    }
    for (uint64_t i = bytes / 4 * 4; i < bytes; i++) {
        ((unsigned char *)p)[i] = 0xff;
    }
}
