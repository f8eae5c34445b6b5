/* kf_pipeline: WGSL + override constants + binding kinds -> a compute pipeline, compiled once per
 * context and then found again by a hash of all of them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

/* FNV-1a, 64-bit: small and good enough to spread keys; equality is checked on the full key. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

static uint64_t hash_key(const char *wgsl, const char *entry, const kf_pipeline_desc *desc) {
    uint64_t h = 14695981039346656037ull;
    h = hash_bytes(h, wgsl, strlen(wgsl) + 1);
    h = hash_bytes(h, entry, strlen(entry) + 1);
    for (uint32_t i = 0; i < desc->constant_count; i++) {
        h = hash_bytes(h, desc->constants[i].name, strlen(desc->constants[i].name) + 1);
        h = hash_bytes(h, &desc->constants[i].value, sizeof desc->constants[i].value);
    }
    for (uint32_t i = 0; i < desc->binding_count; i++) {
        uint32_t kind = (uint32_t)desc->bindings[i];
        h = hash_bytes(h, &kind, sizeof kind);
    }
    h = hash_bytes(h, &desc->binding_count, sizeof desc->binding_count);
    return h;
}

static bool same_key(const kf_pipeline *p, uint64_t hash, const char *wgsl, const char *entry,
                     const kf_pipeline_desc *desc) {
    if (p->hash != hash || p->constant_count != desc->constant_count ||
        p->binding_count != desc->binding_count || strcmp(p->entry_point, entry) != 0 ||
        strcmp(p->wgsl, wgsl) != 0) {
        return false;
    }
    for (uint32_t i = 0; i < desc->constant_count; i++) {
        if (strcmp(p->constants[i].name, desc->constants[i].name) != 0 ||
            memcmp(&p->constants[i].value, &desc->constants[i].value, sizeof(double)) != 0) {
            return false;
        }
    }
    for (uint32_t i = 0; i < desc->binding_count; i++) {
        if (p->bindings[i] != desc->bindings[i]) {
            return false;
        }
    }
    return true;
}

static void pipeline_release(kf_context *ctx, kf_pipeline *p) {
    if (p->handle) {
        ctx->api.compute_pipeline_release(p->handle);
    }
    if (p->layout) {
        ctx->api.pipeline_layout_release(p->layout);
    }
    if (p->bind_group_layout) {
        ctx->api.bind_group_layout_release(p->bind_group_layout);
    }
    if (p->module) {
        ctx->api.shader_module_release(p->module);
    }
    p->handle = NULL;
    p->layout = NULL;
    p->bind_group_layout = NULL;
    p->module = NULL;
}

static void pipeline_free(kf_context *ctx, kf_pipeline *p) {
    if (!p) {
        return;
    }
    pipeline_release(ctx, p);
    if (p->constants) {
        for (uint32_t i = 0; i < p->constant_count; i++) {
            free((char *)p->constants[i].name);
        }
    }
    free(p->constants);
    free(p->bindings);
    free(p->wgsl);
    free(p->entry_point);
    if (p->check) {
        p->check_ops->free(p->check);
    }
    free(p);
}

void kf__pipeline_cache_release(kf_context *ctx) {
    kf__pipeline_cache *c = &ctx->pipelines;
    for (size_t i = 0; i < c->capacity; i++) {
        if (c->slots[i]) {
            pipeline_release(ctx, c->slots[i]);
        }
    }
}

void kf__pipeline_cache_destroy(kf_context *ctx) {
    kf__pipeline_cache *c = &ctx->pipelines;
    for (size_t i = 0; i < c->capacity; i++) {
        pipeline_free(ctx, c->slots[i]);
    }
    free(c->slots);
    memset(c, 0, sizeof *c);
}

static kf_pipeline *cache_find(kf_context *ctx, uint64_t hash, const char *wgsl, const char *entry,
                               const kf_pipeline_desc *desc) {
    kf__pipeline_cache *c = &ctx->pipelines;
    if (c->capacity == 0) {
        return NULL;
    }
    for (size_t i = hash & (c->capacity - 1);; i = (i + 1) & (c->capacity - 1)) {
        kf_pipeline *p = c->slots[i];
        if (!p) {
            return NULL;
        }
        if (same_key(p, hash, wgsl, entry, desc)) {
            return p;
        }
    }
}

static bool cache_insert(kf_context *ctx, kf_pipeline *p) {
    kf__pipeline_cache *c = &ctx->pipelines;
    if ((c->count + 1) * 2 > c->capacity) {
        size_t capacity = c->capacity ? c->capacity * 2 : 64;
        kf_pipeline **slots = calloc(capacity, sizeof *slots);
        if (!slots) {
            return false;
        }
        for (size_t i = 0; i < c->capacity; i++) {
            kf_pipeline *q = c->slots[i];
            if (q) {
                size_t j = q->hash & (capacity - 1);
                while (slots[j]) {
                    j = (j + 1) & (capacity - 1);
                }
                slots[j] = q;
            }
        }
        free(c->slots);
        c->slots = slots;
        c->capacity = capacity;
    }
    size_t j = p->hash & (c->capacity - 1);
    while (c->slots[j]) {
        j = (j + 1) & (c->capacity - 1);
    }
    c->slots[j] = p;
    c->count++;
    return true;
}

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) {
        memcpy(d, s, n);
    }
    return d;
}

static bool copy_key(kf_pipeline *p, const char *wgsl, const char *entry,
                     const kf_pipeline_desc *desc) {
    p->wgsl = dup_string(wgsl);
    p->entry_point = dup_string(entry);
    p->constant_count = desc->constant_count;
    p->binding_count = desc->binding_count;
    if (!p->wgsl || !p->entry_point) {
        return false;
    }
    if (desc->constant_count) {
        p->constants = calloc(desc->constant_count, sizeof *p->constants);
        if (!p->constants) {
            return false;
        }
        for (uint32_t i = 0; i < desc->constant_count; i++) {
            p->constants[i].value = desc->constants[i].value;
            p->constants[i].name = dup_string(desc->constants[i].name);
            if (!p->constants[i].name) {
                return false;
            }
        }
    }
    if (desc->binding_count) {
        p->bindings = malloc(desc->binding_count * sizeof *p->bindings);
        if (!p->bindings) {
            return false;
        }
        memcpy(p->bindings, desc->bindings, desc->binding_count * sizeof *p->bindings);
    }
    return true;
}

/* --- compile errors as a reader wants them: position, message, the line, a caret --- */

typedef struct compile_messages {
    bool done;
    char *text; /* formatted; malloc'd */
    size_t errors;
} compile_messages;

typedef struct text_builder {
    char *data;
    size_t length, capacity;
} text_builder;

static void text_append(text_builder *t, const char *s, size_t n) {
    if (t->length + n + 1 > t->capacity) {
        size_t capacity = t->capacity ? t->capacity : 256;
        while (t->length + n + 1 > capacity) {
            capacity *= 2;
        }
        char *data = realloc(t->data, capacity);
        if (!data) {
            return;
        }
        t->data = data;
        t->capacity = capacity;
    }
    memcpy(t->data + t->length, s, n);
    t->length += n;
    t->data[t->length] = '\0';
}

static void text_printf(text_builder *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void text_printf(text_builder *t, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) {
        text_append(t, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
}

/* The 1-based line `line` of src, without its newline. */
static const char *source_line(const char *src, uint64_t line, size_t *length) {
    const char *p = src;
    for (uint64_t l = 1; l < line && *p; p++) {
        if (*p == '\n') {
            l++;
        }
    }
    const char *end = strchr(p, '\n');
    *length = end ? (size_t)(end - p) : strlen(p);
    return p;
}

typedef struct compile_request {
    compile_messages out;
    const char *wgsl;
} compile_request;

static void on_compilation_info(uint32_t status, const wg_compilation_info *info, void *user1,
                                void *user2) {
    (void)user2;
    compile_request *req = user1;
    compile_messages *out = &req->out;
    out->done = true;
    if (status != WG_REQUEST_SUCCESS || !info) {
        return;
    }
    text_builder t = {0};
    for (size_t i = 0; i < info->message_count; i++) {
        const wg_compilation_message *m = &info->messages[i];
        if (m->type != WG_MESSAGE_ERROR) {
            continue;
        }
        out->errors++;
        char message[1024];
        kf__wg_string_copy(message, sizeof message, m->message);
        if (m->line_num == 0) {
            text_printf(&t, "\n  error: %s", message);
            continue;
        }
        text_printf(&t, "\n  %llu:%llu: error: %s", (unsigned long long)m->line_num,
                    (unsigned long long)m->line_pos, message);
        size_t n;
        const char *line = source_line(req->wgsl, m->line_num, &n);
        if (n > 200) {
            n = 200;
        }
        text_printf(&t, "\n    %.*s\n    ", (int)n, line);
        for (uint64_t c = 1; c < m->line_pos && c <= n; c++) {
            text_append(&t, line[c - 1] == '\t' ? "\t" : " ", 1);
        }
        text_append(&t, "^", 1);
    }
    out->text = t.data;
}

static kf_status compile_error(kf_context *ctx, wg_shader_module module, const char *wgsl,
                               const char *entry) {
    char scope_message[KF__ERROR_SIZE];
    snprintf(scope_message, sizeof scope_message, "%s", ctx->error);
    compile_request *req = kf__callback_alloc(sizeof *req);
    kf_status waited = KF_ERROR_INTERNAL;
    if (req && module) {
        req->wgsl = wgsl;
        wg_compilation_info_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY,
                                                  on_compilation_info, req, NULL};
        waited = kf__context_wait(ctx, ctx->api.shader_module_get_compilation_info(module, info),
                                  "shader compilation info");
    }
    kf_status st;
    if (waited == KF_OK && req->out.errors && req->out.text) {
        st = kf__context_fail(ctx, KF_ERROR_COMPILE,
                              "kf_pipeline_get: WGSL does not compile (entry %s):%s", entry,
                              req->out.text);
    } else {
        st = kf__context_fail(ctx, KF_ERROR_COMPILE,
                              "kf_pipeline_get: WGSL does not compile (entry %s): %s", entry,
                              scope_message);
    }
    if (req && waited == KF_OK) {
        free(req->out.text);
    }
    kf__callback_release(ctx, req, waited == KF_OK || !module);
    return st;
}

/* --- building --- */

static uint32_t binding_type(kf_binding_kind kind) {
    switch (kind) {
    case KF_BINDING_STORAGE_READ_WRITE:
        return WG_BINDING_STORAGE;
    case KF_BINDING_UNIFORM:
        return WG_BINDING_UNIFORM;
    case KF_BINDING_STORAGE_READ:
    default:
        return WG_BINDING_READ_ONLY_STORAGE;
    }
}

static kf_status check_desc(kf_context *ctx, const kf_pipeline_desc *desc) {
    if (!desc->wgsl) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_pipeline_get: desc->wgsl is NULL");
    }
    if (desc->constant_count && !desc->constants) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_pipeline_get: %u constants but desc->constants is NULL",
                                desc->constant_count);
    }
    for (uint32_t i = 0; i < desc->constant_count; i++) {
        if (!desc->constants[i].name || !desc->constants[i].name[0]) {
            return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                    "kf_pipeline_get: constant %u has no name", i);
        }
    }
    if (desc->binding_count && !desc->bindings) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_pipeline_get: %u bindings but desc->bindings is NULL",
                                desc->binding_count);
    }
    uint32_t storage = 0, uniform = 0;
    for (uint32_t i = 0; i < desc->binding_count; i++) {
        kf_binding_kind kind = desc->bindings[i];
        if (kind != KF_BINDING_STORAGE_READ && kind != KF_BINDING_STORAGE_READ_WRITE &&
            kind != KF_BINDING_UNIFORM) {
            return kf__context_fail(
                ctx, KF_ERROR_INVALID_ARGUMENT,
                "kf_pipeline_get: binding %u has kind %d, not a kf_binding_kind", i, (int)kind);
        }
        if (kind == KF_BINDING_UNIFORM) {
            uniform++;
        } else {
            storage++;
        }
    }
    if (storage > ctx->limits.max_storage_buffers_per_shader_stage) {
        return kf__context_fail(ctx, KF_ERROR_LIMIT,
                                "kf_pipeline_get: %u storage bindings; this device allows "
                                "maxStorageBuffersPerShaderStage = %u",
                                storage, ctx->limits.max_storage_buffers_per_shader_stage);
    }
    if (uniform > ctx->limits.max_uniform_buffers_per_shader_stage) {
        return kf__context_fail(ctx, KF_ERROR_LIMIT,
                                "kf_pipeline_get: %u uniform bindings; this device allows "
                                "maxUniformBuffersPerShaderStage = %u",
                                uniform, ctx->limits.max_uniform_buffers_per_shader_stage);
    }
    return KF_OK;
}

/* The shader module of p, its compile errors reported with the compiler's messages. */
static kf_status build_module(kf_context *ctx, kf_pipeline *p) {
    wg_shader_source_wgsl source = {{NULL, WG_STYPE_SHADER_SOURCE_WGSL}, {p->wgsl, WG_STRLEN}};
    wg_shader_module_desc md = {&source.chain, {"kfuse kernel", WG_STRLEN}};
    kf__context_scope_push(ctx);
    p->module = ctx->api.device_create_shader_module(ctx->device, &md);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_COMPILE, "WGSL");
    if (st == KF_ERROR_COMPILE) {
        return compile_error(ctx, p->module, p->wgsl, p->entry_point);
    }
    return st;
}

/* The bind group layout and pipeline layout of p, inside the caller's error scope. */
static kf_status build_layouts(kf_context *ctx, kf_pipeline *p) {
    wg_bind_group_layout_entry *entries = NULL;
    if (p->binding_count) {
        entries = calloc(p->binding_count, sizeof *entries);
        if (!entries) {
            return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                    "kf_pipeline_get: out of host memory");
        }
    }
    for (uint32_t i = 0; i < p->binding_count; i++) {
        entries[i].binding = i;
        entries[i].visibility = WG_STAGE_COMPUTE;
        entries[i].buffer.type = binding_type(p->bindings[i]);
    }
    wg_bind_group_layout_desc bgl = {
        NULL, {"kfuse bindings", WG_STRLEN}, p->binding_count, entries};
    p->bind_group_layout = ctx->api.device_create_bind_group_layout(ctx->device, &bgl);
    wg_pipeline_layout_desc pl = {NULL, {"kfuse layout", WG_STRLEN}, 1, &p->bind_group_layout, 0};
    p->layout = ctx->api.device_create_pipeline_layout(ctx->device, &pl);
    free(entries);
    return KF_OK;
}

#define NO_PIPELINE "kf_pipeline_get: the WGSL compiled but no pipeline could be made of it"

/* The compute pipeline descriptor of p; *constants (freed by the caller after the create call)
 * holds its override constants. */
static kf_status pipeline_desc(kf_context *ctx, const kf_pipeline *p, wg_compute_pipeline_desc *cp,
                               wg_constant_entry **constants) {
    *constants = NULL;
    if (p->constant_count) {
        *constants = calloc(p->constant_count, sizeof **constants);
        if (!*constants) {
            return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                    "kf_pipeline_get: out of host memory");
        }
    }
    for (uint32_t i = 0; i < p->constant_count; i++) {
        (*constants)[i].key = (wg_string){p->constants[i].name, WG_STRLEN};
        (*constants)[i].value = p->constants[i].value;
    }
    memset(cp, 0, sizeof *cp);
    cp->label = (wg_string){"kfuse pipeline", WG_STRLEN};
    cp->layout = p->layout;
    cp->compute.module = p->module;
    cp->compute.entry_point = (wg_string){p->entry_point, WG_STRLEN};
    cp->compute.constant_count = p->constant_count;
    cp->compute.constants = *constants;
    return KF_OK;
}

static kf_status build(kf_context *ctx, kf_pipeline *p) {
    kf_status st = build_module(ctx, p);
    if (st != KF_OK) {
        return st;
    }
    wg_compute_pipeline_desc cp;
    wg_constant_entry *constants = NULL;
    kf__context_scope_push(ctx);
    st = build_layouts(ctx, p);
    if (st == KF_OK) {
        st = pipeline_desc(ctx, p, &cp, &constants);
    }
    if (st == KF_OK) {
        p->handle = ctx->api.device_create_compute_pipeline(ctx->device, &cp);
    }
    kf_status popped = kf__context_scope_pop(ctx, KF_ERROR_COMPILE, NO_PIPELINE);
    st = st != KF_OK ? st : popped;
    free(constants);
    if (st == KF_OK) {
        ctx->stats.pipelines_compiled++;
    }
    return st;
}

/* Everything of p but the pipeline itself (kf__pipeline_get_many's first pass). */
static kf_status build_all_but_pipeline(kf_context *ctx, kf_pipeline *p) {
    kf_status st = build_module(ctx, p);
    if (st != KF_OK) {
        return st;
    }
    kf__context_scope_push(ctx);
    st = build_layouts(ctx, p);
    kf_status popped = kf__context_scope_pop(ctx, KF_ERROR_COMPILE, NO_PIPELINE);
    return st != KF_OK ? st : popped;
}

/* --- many at once: kf_graph_compile's pipelines on the implementation's worker threads --- */

bool kf__context_set_pipeline_async(kf_context *ctx, int mode) {
    if (!ctx) {
        return false;
    }
    ctx->pipeline_async = mode < 0 ? -1 : mode > 0 ? 1 : 0;
    bool wanted = ctx->pipeline_async > 0;
    if (ctx->pipeline_async == 0) {
        const char *env = getenv("KF_PIPELINE_ASYNC");
        wanted = !env || (strcmp(env, "0") != 0 && strcmp(env, "off") != 0);
    }
    return wanted && ctx->impl && ctx->impl->async_pipelines &&
           ctx->api.device_create_compute_pipeline_async;
}

/* What the create callback leaves for the waiting thread (callback memory, see
 * kf__callback_alloc: a wait that times out leaves WebGPU owing the call). */
typedef struct pipeline_created {
    bool done;
    uint32_t status;
    wg_compute_pipeline handle;
    char message[1024];
} pipeline_created;

static void on_pipeline_created(uint32_t status, wg_compute_pipeline pipeline, wg_string message,
                                void *user1, void *user2) {
    (void)user2;
    pipeline_created *r = user1;
    r->status = status;
    r->handle = pipeline;
    kf__wg_string_copy(r->message, sizeof r->message, message);
    /* Dawn ends its messages with a newline; the list of failures has its own. */
    for (size_t n = strlen(r->message);
         n && (r->message[n - 1] == '\n' || r->message[n - 1] == ' '); n--) {
        r->message[n - 1] = '\0';
    }
    r->done = true;
}

/* One pipeline being made: the first descriptor index it is for, and its request. */
typedef struct pending_pipeline {
    kf_pipeline *p;
    uint32_t first;
    pipeline_created *created; /* async only */
    wg_future future;
} pending_pipeline;

/* Appends "label: message" to the failures text (the context's last error at the end). */
static void note_failure(text_builder *failures, uint32_t *failed, const char *const *labels,
                         uint32_t i, const char *message) {
    if (labels && labels[i]) {
        text_printf(failures, "%s  %s: %s", *failed ? "\n" : "", labels[i], message);
    } else {
        text_printf(failures, "%s  pipeline %u: %s", *failed ? "\n" : "", i, message);
    }
    (*failed)++;
}

static kf_status status_of_created(uint32_t status) {
    switch (status) {
    case WG_CREATE_PIPELINE_VALIDATION_ERROR:
        return KF_ERROR_COMPILE;
    case WG_CREATE_PIPELINE_CANCELLED:
        return KF_ERROR_DEVICE_LOST;
    default:
        return KF_ERROR_INTERNAL;
    }
}

kf_status kf__pipeline_get_many(kf_context *ctx, const kf_pipeline_desc *descs,
                                const char *const *labels, uint32_t count, kf_pipeline **out) {
    if (!ctx || (count && (!descs || !out))) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "kf__pipeline_get_many: %s is NULL",
                                !ctx     ? "ctx"
                                : !descs ? "descs"
                                         : "out");
    }
    for (uint32_t i = 0; i < count; i++) {
        out[i] = NULL;
    }
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK || count == 0) {
        return st;
    }
    pending_pipeline *pending = calloc(count, sizeof *pending);
    uint32_t *which = calloc(count, sizeof *which); /* descs[i] -> pending index + 1; 0: none */
    if (!pending || !which) {
        free(pending);
        free(which);
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                "kf__pipeline_get_many: out of host memory");
    }
    bool async = kf__context_set_pipeline_async(ctx, ctx->pipeline_async);
    text_builder failures = {0};
    uint32_t failed = 0, pending_count = 0;
    kf_status first = KF_OK;
#define FAIL(i, status)                                                                            \
    do {                                                                                           \
        note_failure(&failures, &failed, labels, (i), ctx->error);                                 \
        first = first == KF_OK ? (status) : first;                                                 \
    } while (0)

    /* Everything but the pipeline itself, in order: modules and layouts are quick, and a WGSL
     * error is reported here with its kernel's label. */
    for (uint32_t i = 0; i < count; i++) {
        const kf_pipeline_desc *d = &descs[i];
        st = check_desc(ctx, d);
        if (st != KF_OK) {
            FAIL(i, st);
            continue;
        }
        const char *entry = d->entry_point ? d->entry_point : "main";
        uint64_t hash = hash_key(d->wgsl, entry, d);
        kf_pipeline *p = cache_find(ctx, hash, d->wgsl, entry, d);
        if (p) {
            ctx->stats.pipeline_cache_hits++;
            out[i] = p;
            continue;
        }
        for (uint32_t j = 0; j < pending_count && !which[i]; j++) {
            if (same_key(pending[j].p, hash, d->wgsl, entry, d)) {
                which[i] = j + 1;
            }
        }
        if (which[i]) {
            ctx->stats.pipeline_cache_hits++;
            continue;
        }
        p = calloc(1, sizeof *p);
        if (!p || !copy_key(p, d->wgsl, entry, d)) {
            pipeline_free(ctx, p);
            kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
            FAIL(i, KF_ERROR_OUT_OF_MEMORY);
            continue;
        }
        p->ctx = ctx;
        p->hash = hash;
        st = async ? build_all_but_pipeline(ctx, p) : build(ctx, p);
        if (st != KF_OK) {
            pipeline_free(ctx, p);
            FAIL(i, st);
            continue;
        }
        pending[pending_count] = (pending_pipeline){p, i, NULL, {0}};
        which[i] = ++pending_count;
    }

    /* Every pipeline requested before the first wait, so the implementation's workers make them
     * side by side; then each waited for. */
    if (async) {
        for (uint32_t j = 0; j < pending_count; j++) {
            pending_pipeline *q = &pending[j];
            wg_compute_pipeline_desc cp;
            wg_constant_entry *constants = NULL;
            q->created = kf__callback_alloc(sizeof *q->created);
            if (!q->created || pipeline_desc(ctx, q->p, &cp, &constants) != KF_OK) {
                kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
                FAIL(q->first, KF_ERROR_OUT_OF_MEMORY);
                kf__callback_release(ctx, q->created, true);
                q->created = NULL;
                pipeline_free(ctx, q->p);
                q->p = NULL;
                continue;
            }
            wg_create_compute_pipeline_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY,
                                                             on_pipeline_created, q->created, NULL};
            q->future = ctx->api.device_create_compute_pipeline_async(ctx->device, &cp, info);
            free(constants);
        }
        for (uint32_t j = 0; j < pending_count; j++) {
            pending_pipeline *q = &pending[j];
            if (!q->created) {
                continue;
            }
            st = kf__context_wait(ctx, q->future, "creating a pipeline");
            bool done = st == KF_OK && q->created->done;
            if (done && q->created->status == WG_CREATE_PIPELINE_SUCCESS && q->created->handle) {
                q->p->handle = q->created->handle;
                ctx->stats.pipelines_compiled++;
                ctx->stats.pipelines_async++;
            } else {
                if (done) {
                    st = status_of_created(q->created->status);
                    kf__context_fail(ctx, st, NO_PIPELINE ": %s",
                                     q->created->message[0] ? q->created->message : "(no message)");
                    if (q->created->handle) {
                        ctx->api.compute_pipeline_release(q->created->handle);
                    }
                }
                FAIL(q->first, st == KF_OK ? KF_ERROR_INTERNAL : st);
                pipeline_free(ctx, q->p);
                q->p = NULL;
            }
            kf__callback_release(ctx, q->created, done);
            q->created = NULL;
        }
    }

    for (uint32_t j = 0; j < pending_count; j++) {
        kf_pipeline *p = pending[j].p;
        if (p && !cache_insert(ctx, p)) {
            kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
            FAIL(pending[j].first, KF_ERROR_OUT_OF_MEMORY);
            pipeline_free(ctx, p);
            pending[j].p = NULL;
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        if (which[i]) {
            out[i] = pending[which[i] - 1].p;
        }
    }
#undef FAIL
    if (failed) {
        kf__context_fail(ctx, first, "%u of %u pipelines failed:\n%s", failed, count,
                         failures.data ? failures.data : "(out of host memory)");
    }
    free(failures.data);
    free(pending);
    free(which);
    return first;
}

kf_status kf_pipeline_get(kf_context *ctx, const kf_pipeline_desc *desc, kf_pipeline **out) {
    if (out) {
        *out = NULL;
    }
    if (!ctx || !desc || !out) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_pipeline_get: %s is NULL",
                                !ctx    ? "ctx"
                                : !desc ? "desc"
                                        : "out");
    }
    *out = NULL;
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    st = check_desc(ctx, desc);
    if (st != KF_OK) {
        return st;
    }
    const char *entry = desc->entry_point ? desc->entry_point : "main";
    uint64_t hash = hash_key(desc->wgsl, entry, desc);
    kf_pipeline *p = cache_find(ctx, hash, desc->wgsl, entry, desc);
    if (p) {
        ctx->stats.pipeline_cache_hits++;
        *out = p;
        return KF_OK;
    }
    p = calloc(1, sizeof *p);
    if (!p || !copy_key(p, desc->wgsl, entry, desc)) {
        pipeline_free(ctx, p);
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_pipeline_get: out of host memory");
    }
    p->ctx = ctx;
    p->hash = hash;
    st = build(ctx, p);
    if (st == KF_OK && !cache_insert(ctx, p)) {
        st = kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_pipeline_get: out of host memory");
    }
    if (st != KF_OK) {
        pipeline_free(ctx, p);
        return st;
    }
    *out = p;
    return KF_OK;
}
