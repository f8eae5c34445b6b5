/* From a kernel to its WGSL: lower it (kf__kernel_prepare), prove its accesses in bounds for the
 * binding lengths and grid it runs with (kf__bounds_prove), and hand both to the emitter
 * (src/wgsl, through wgsl/wgsl.h: the only way the IR reaches it). */
#include "ir/ir_internal.h"
#include "wgsl/wgsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_stage(const kf_kernel *k) {
    return k->input.scalar != KF_SCALAR_VOID;
}

/* Each binding's length (binding order): given, else declared; NULL when out of memory. */
static uint64_t *lengths_for(const kf_kernel *k, const uint64_t *given, uint32_t *count) {
    uint32_t n = kf_kernel_binding_count(k);
    uint64_t *len = calloc(n + 1u, sizeof *len);
    if (!len) {
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        len[i] = given && given[i] ? given[i] : kf__kernel_binding_length(k, i);
    }
    *count = n;
    return len;
}

static uint64_t key_of(const uint64_t *len, uint32_t n, const uint32_t grid[3]) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ len[i]) * 1099511628211ull;
    }
    for (int i = 0; i < 3; i++) {
        h = (h ^ (grid ? grid[i] : 0)) * 1099511628211ull;
    }
    return h;
}

/* The proof of prepared kernel w for binding-order lengths len. */
static kf__bounds *prove(const kf_kernel *w, const uint64_t *len, const uint32_t grid[3],
                         bool report) {
    uint64_t *by_id = calloc(w->binding_count ? w->binding_count : 1, sizeof *by_id);
    if (!by_id) {
        return NULL;
    }
    for (uint32_t b = 1; b < w->binding_count; b++) {
        by_id[b] = len[b - 1];
    }
    kf__bounds *r = kf__bounds_prove(w, by_id, grid, report);
    free(by_id);
    return r;
}

/* Prepares k (errors copied onto k); NULL on failure. */
static kf_kernel *prepared(kf_kernel *k) {
    kf_kernel *w = kf__kernel_prepare(k);
    if (!w) {
        kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "out of memory while emitting WGSL");
        return NULL;
    }
    if (w->status != KF_OK) {
        if (k->status == KF_OK) {
            k->status = w->status;
            memcpy(k->error, w->error, sizeof k->error);
        }
        kf_kernel_destroy(w);
        return NULL;
    }
    /* the lengths declared for "in" and "out", which only the lowered kernel has */
    for (uint32_t b = 1; b < w->binding_count; b++) {
        if (w->bindings[b].role == KF__ROLE_IN) {
            w->bindings[b].length = k->in_length;
        } else if (w->bindings[b].role == KF__ROLE_OUT) {
            w->bindings[b].length = k->out_length;
        }
    }
    return w;
}

const char *kf__kernel_wgsl_for(kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3]) {
    if (!k || k->status != KF_OK) {
        return NULL;
    }
    bool zero = !grid || (!grid[0] && !grid[1] && !grid[2]);
    uint32_t n = 0;
    uint64_t *len = lengths_for(k, lengths, &n);
    if (!len) {
        kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "out of memory while emitting WGSL");
        return NULL;
    }
    uint64_t key = key_of(len, n, zero ? k->grid : grid);
    if (k->wgsl && k->wgsl_version == k->version && k->wgsl_key == key) {
        free(len);
        return k->wgsl;
    }
    kf_kernel *w = prepared(k);
    if (!w) {
        free(len);
        return NULL;
    }
    kf__bounds *b = prove(w, len, zero ? NULL : grid, false);
    char *text = b ? kf__wgsl_emit(w, k->name, b) : NULL;
    kf__bounds_free(b);
    free(len);
    kf_kernel_destroy(w);
    if (!text) {
        kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "out of memory while emitting WGSL");
        return NULL;
    }
    free(k->wgsl);
    k->wgsl = text;
    k->wgsl_version = k->version;
    k->wgsl_key = key;
    return k->wgsl;
}

kf_kernel *kf__kernel_proved(kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3],
                             kf__bounds **proof) {
    *proof = NULL;
    if (!k || k->status != KF_OK) {
        return NULL;
    }
    bool zero = !grid || (!grid[0] && !grid[1] && !grid[2]);
    uint32_t n = 0;
    uint64_t *len = lengths_for(k, lengths, &n);
    kf_kernel *w = len ? prepared(k) : NULL;
    *proof = w ? prove(w, len, zero ? NULL : grid, false) : NULL;
    free(len);
    if (!*proof) {
        kf_kernel_destroy(w);
        return NULL;
    }
    return w;
}

char *kf_kernel_emit_wgsl(kf_kernel *k) {
    const char *text = kf__kernel_wgsl_for(k, NULL, NULL);
    if (!text) {
        return NULL;
    }
    char *copy = malloc(strlen(text) + 1);
    if (copy) {
        strcpy(copy, text);
    }
    return copy;
}

kf_status kf_kernel_set_binding_length(kf_kernel *k, uint32_t index, uint64_t elements) {
    if (!k) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!kf__ok(k)) {
        return k->status;
    }
    uint32_t n = kf_kernel_binding_count(k);
    if (index >= n) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_set_binding_length: binding %u does not exist (the kernel has %u)",
                 (unsigned)index, (unsigned)n);
        return k->status;
    }
    uint32_t i = index;
    if (is_stage(k) && i == 0) {
        k->in_length = elements;
    } else {
        i -= is_stage(k) ? 1u : 0u;
        if (i < k->binding_count - 1) {
            if (k->bindings[i + 1].kind == KF_BINDING_UNIFORM) {
                kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                         "kf_kernel_set_binding_length: binding %u ('%s') is a uniform (its "
                         "size is its type's)",
                         (unsigned)index, kf__str(k, k->bindings[i + 1].name));
                return k->status;
            }
            k->bindings[i + 1].length = elements;
        } else {
            k->out_length = elements;
        }
    }
    k->version++;
    return KF_OK;
}

uint64_t kf__kernel_binding_length(const kf_kernel *k, uint32_t index) {
    if (!k) {
        return 0;
    }
    uint32_t i = index;
    if (is_stage(k)) {
        if (i == 0) {
            return k->in_length;
        }
        i--;
    }
    if (i < k->binding_count - 1) {
        return k->bindings[i + 1].length;
    }
    return k->output.scalar != KF_SCALAR_VOID && i == k->binding_count - 1 ? k->out_length : 0;
}

kf_status kf_kernel_bounds(kf_kernel *k, kf_bounds_report *out, char **text) {
    if (text) {
        *text = NULL;
    }
    if (!k || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    if (k->status != KF_OK) {
        return k->status;
    }
    uint32_t n = 0;
    uint64_t *len = lengths_for(k, NULL, &n);
    kf_kernel *w = len ? prepared(k) : NULL;
    kf__bounds *b = w ? prove(w, len, NULL, text != NULL) : NULL;
    free(len);
    kf_kernel_destroy(w);
    if (!b) {
        return k->status != KF_OK ? k->status : KF_ERROR_OUT_OF_MEMORY;
    }
    out->accesses = b->accesses;
    out->proved = b->proved;
    out->guarded = b->guarded;
    if (text) {
        *text = b->report;
        b->report = NULL;
    }
    kf__bounds_free(b);
    return KF_OK;
}
