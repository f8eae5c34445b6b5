/* Per-context extension slots: state a layer above the runtime hangs off a context (the matmul
 * tuner's table lives here), so the runtime needs to know nothing of operators. */
#include <stdlib.h>

#include "runtime/runtime.h"

struct kf__context_extension {
    const void *key;
    void *data;
    void (*free_data)(void *data);
};

void *kf__context_extension(const kf_context *ctx, const void *key) {
    for (uint32_t i = 0; ctx && i < ctx->extension_count; i++) {
        if (ctx->extensions[i].key == key) {
            return ctx->extensions[i].data;
        }
    }
    return NULL;
}

kf_status kf__context_extension_set(kf_context *ctx, const void *key, void *data,
                                    void (*free_data)(void *data)) {
    for (uint32_t i = 0; i < ctx->extension_count; i++) {
        struct kf__context_extension *e = &ctx->extensions[i];
        if (e->key == key) {
            if (e->free_data && e->data != data) {
                e->free_data(e->data);
            }
            e->data = data;
            e->free_data = free_data;
            return KF_OK;
        }
    }
    struct kf__context_extension *grown =
        realloc(ctx->extensions, sizeof *grown * (ctx->extension_count + 1));
    if (!grown) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    ctx->extensions = grown;
    ctx->extensions[ctx->extension_count++] =
        (struct kf__context_extension){.key = key, .data = data, .free_data = free_data};
    return KF_OK;
}

void kf__context_extensions_release(kf_context *ctx) {
    for (uint32_t i = 0; i < ctx->extension_count; i++) {
        if (ctx->extensions[i].free_data) {
            ctx->extensions[i].free_data(ctx->extensions[i].data);
        }
    }
    free(ctx->extensions);
    ctx->extensions = NULL;
    ctx->extension_count = 0;
}
