/* kf_buffer: device buffers, and copies between them and the host at any byte offset and size.
 *
 * WebGPU copies move whole 4-byte words, so a buffer is allocated rounded up to 4 bytes and a
 * transfer that starts or ends inside a word goes through that word: an upload reads the edge
 * word back, merges the new bytes in and writes the word (the bytes around the range keep their
 * values); a download copies the covering words and hands back only the bytes asked for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

/* Bounds the host and driver memory one transfer holds at a time. */
#define KF__CHUNK_BYTES (64ull << 20)
#define KF__STAGING_MIN (64ull << 10)

#define KF__ALL_USAGES (WG_USAGE_STORAGE | WG_USAGE_UNIFORM | WG_USAGE_COPY_SRC | WG_USAGE_COPY_DST)

static uint64_t round_up4(uint64_t n) {
    return (n + 3) & ~(uint64_t)3;
}

kf_status kf_buffer_create(kf_context *ctx, uint64_t size, kf_buffer **out) {
    if (out) {
        *out = NULL;
    }
    if (!ctx || !out) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_buffer_create: %s is NULL",
                                ctx ? "out" : "ctx");
    }
    *out = NULL;
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    if (size == 0) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_buffer_create: size is 0; a buffer holds at least 1 byte");
    }
    if (size > UINT64_MAX - 3 || round_up4(size) > ctx->limits.max_buffer_size) {
        return kf__context_fail(ctx, KF_ERROR_LIMIT,
                                "kf_buffer_create: %llu bytes is above this device's maxBufferSize "
                                "(%llu bytes on %s)",
                                (unsigned long long)size,
                                (unsigned long long)ctx->limits.max_buffer_size, ctx->info.device);
    }
    kf_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                "kf_buffer_create: out of host memory");
    }
    buf->ctx = ctx;
    kf__context_hold(ctx);
    buf->next_live = ctx->live_buffers;
    if (ctx->live_buffers) {
        ctx->live_buffers->prev_live = buf;
    }
    ctx->live_buffers = buf;
    buf->size = size;
    buf->alloc_size = round_up4(size);
    wg_buffer_desc bd = {NULL, {"kfuse buffer", WG_STRLEN}, KF__ALL_USAGES, buf->alloc_size, 0};
    wg_dawn_fake_buffer_oom fake = {{NULL, ctx->impl->stype_fake_buffer_oom}, 0, 0, 1};
    if (ctx->fake_oom) {
        bd.next = &fake.chain;
        ctx->fake_oom = false;
    }
    kf__context_scope_push(ctx);
    buf->handle = ctx->api.device_create_buffer(ctx->device, &bd);
    st = kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "kf_buffer_create");
    if (st != KF_OK || !buf->handle) {
        if (st == KF_OK) {
            st = kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                  "kf_buffer_create: the device could not allocate %llu bytes",
                                  (unsigned long long)size);
        }
        kf_buffer_destroy(buf);
        return st;
    }
    *out = buf;
    return KF_OK;
}

static void buffer_release(kf_buffer *buf) {
    if (buf->handle) {
        buf->ctx->api.buffer_destroy(buf->handle);
        buf->ctx->api.buffer_release(buf->handle);
        buf->handle = NULL;
    }
}

static void buffer_free(kf_buffer *buf) {
    kf_context *ctx = buf->ctx;
    buffer_release(buf); /* NULL already when the context was destroyed, and for a view */
    kf_buffer *of = buf->view_of;
    if (buf->prev_live) {
        buf->prev_live->next_live = buf->next_live;
    } else {
        ctx->live_buffers = buf->next_live;
    }
    if (buf->next_live) {
        buf->next_live->prev_live = buf->prev_live;
    }
    free(buf);
    kf__buffer_drop(of);
    kf__context_let_go(ctx);
}

void kf__context_buffers_release(kf_context *ctx) {
    for (kf_buffer *buf = ctx->live_buffers; buf; buf = buf->next_live) {
        buffer_release(buf);
    }
}

void kf_buffer_destroy(kf_buffer *buf) {
    if (!buf) {
        return;
    }
    if (buf->holds) {
        buf->destroyed = true; /* a plan still reads or writes it: the last drop frees it */
        return;
    }
    buffer_free(buf);
}

void kf__buffer_hold(kf_buffer *buf) {
    if (buf) {
        buf->holds++;
    }
}

void kf__buffer_drop(kf_buffer *buf) {
    if (!buf || buf->holds == 0) {
        return;
    }
    if (--buf->holds == 0 && buf->destroyed) {
        buffer_free(buf);
    }
}

uint64_t kf_buffer_size(const kf_buffer *buf) {
    return buf ? buf->size : 0;
}

kf_status kf_buffer_view(kf_buffer *buf, uint64_t offset, uint64_t size, kf_buffer **out) {
    if (out) {
        *out = NULL;
    }
    if (!buf || !out) {
        return kf__context_fail(buf ? buf->ctx : NULL, KF_ERROR_INVALID_ARGUMENT,
                                "kf_buffer_view: %s is NULL", buf ? "out" : "buf");
    }
    kf_context *ctx = buf->ctx;
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    if (buf->destroyed) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_buffer_view: the buffer was destroyed");
    }
    if (size == 0 || offset > buf->size || size > buf->size - offset) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_buffer_view: %llu bytes at offset %llu do not fit in a buffer "
                                "of %llu bytes%s",
                                (unsigned long long)size, (unsigned long long)offset,
                                (unsigned long long)buf->size,
                                size ? "" : " (a view holds 1 or more)");
    }
    /* WebGPU binds and copies whole words, so never less than 4 */
    uint32_t align = ctx->limits.min_storage_buffer_offset_alignment;
    align = align > 4 ? align : 4;
    uint64_t base = buf->view_offset + offset;
    if (base % align) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_buffer_view: offset %llu is not a multiple of this device's "
                                "minStorageBufferOffsetAlignment (%u bytes)",
                                (unsigned long long)base, align);
    }
    kf_buffer *v = calloc(1, sizeof *v);
    if (!v) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_buffer_view: out of host memory");
    }
    kf_buffer *of = buf->view_of ? buf->view_of : buf;
    v->ctx = ctx;
    kf__context_hold(ctx);
    v->next_live = ctx->live_buffers;
    if (ctx->live_buffers) {
        ctx->live_buffers->prev_live = v;
    }
    ctx->live_buffers = v;
    v->size = size;
    v->alloc_size = round_up4(size);
    v->view_of = of;
    v->view_offset = base;
    kf__buffer_hold(of);
    *out = v;
    return KF_OK;
}

wg_buffer kf__buffer_handle(const kf_buffer *buf, uint64_t *offset) {
    if (offset) {
        *offset = buf->view_offset;
    }
    return buf->view_of ? buf->view_of->handle : buf->handle;
}

const kf_buffer *kf__buffer_base(const kf_buffer *buf) {
    return buf->view_of ? buf->view_of : buf;
}

bool kf__buffer_overlap(const kf_buffer *a, const kf_buffer *b, bool *same) {
    const kf_buffer *ra = a->view_of ? a->view_of : a, *rb = b->view_of ? b->view_of : b;
    *same = ra == rb && a->view_offset == b->view_offset && a->size == b->size;
    return ra == rb && a->view_offset < b->view_offset + b->size &&
           b->view_offset < a->view_offset + a->size;
}

void kf__context_staging_destroy(kf_context *ctx) {
    if (ctx->staging) {
        ctx->api.buffer_destroy(ctx->staging);
        ctx->api.buffer_release(ctx->staging);
        ctx->staging = NULL;
        ctx->staging_size = 0;
    }
}

static kf_status ensure_staging(kf_context *ctx, uint64_t size) {
    if (ctx->staging && ctx->staging_size >= size) {
        return KF_OK;
    }
    uint64_t want = KF__STAGING_MIN;
    while (want < size) {
        want *= 2;
    }
    kf__context_staging_destroy(ctx);
    wg_buffer_desc bd = {
        NULL, {"kfuse staging", WG_STRLEN}, WG_USAGE_MAP_READ | WG_USAGE_COPY_DST, want, 0};
    kf__context_scope_push(ctx);
    wg_buffer staging = ctx->api.device_create_buffer(ctx->device, &bd);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "staging buffer");
    if (st != KF_OK) {
        if (staging) {
            ctx->api.buffer_release(staging);
        }
        return st;
    }
    ctx->staging = staging;
    ctx->staging_size = want;
    return KF_OK;
}

/* Checks the common arguments of upload and download. */
static kf_status check_range(const kf_buffer *buf, uint64_t offset, const void *data, uint64_t size,
                             const char *what) {
    if (!buf) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_context *ctx = buf->ctx;
    if (size && !data) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "%s: data is NULL", what);
    }
    if (offset > buf->size || size > buf->size - offset) {
        return kf__context_fail(
            ctx, KF_ERROR_INVALID_ARGUMENT,
            "%s: %llu bytes at offset %llu do not fit in a buffer of %llu bytes", what,
            (unsigned long long)size, (unsigned long long)offset, (unsigned long long)buf->size);
    }
    return kf__context_check(ctx);
}

/* Writes whole words: offset and size are multiples of 4. */
static kf_status write_words(kf_buffer *buf, uint64_t offset, const uint8_t *data, uint64_t size) {
    kf_context *ctx = buf->ctx;
    kf__context_scope_push(ctx);
    for (uint64_t done = 0; done < size; done += KF__CHUNK_BYTES) {
        uint64_t n = size - done < KF__CHUNK_BYTES ? size - done : KF__CHUNK_BYTES;
        uint64_t base;
        wg_buffer handle = kf__buffer_handle(buf, &base);
        ctx->api.queue_write_buffer(ctx->queue, handle, base + offset + done, data + done,
                                    (size_t)n);
    }
    return kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "kf_buffer_upload");
}

typedef struct map_result {
    bool done;
    uint32_t status;
    char message[512];
} map_result;

static void on_mapped(uint32_t status, wg_string message, void *user1, void *user2) {
    (void)user2;
    map_result *r = user1;
    r->done = true;
    r->status = status;
    kf__wg_string_copy(r->message, sizeof r->message, message);
}

/* Reads the words [begin, end) (multiples of 4) into host memory, keeping the bytes in
 * [want_lo, want_hi) at out[...-want_lo]. */
static kf_status read_words(kf_buffer *buf, uint64_t begin, uint64_t end, uint64_t want_lo,
                            uint64_t want_hi, uint8_t *out) {
    kf_context *ctx = buf->ctx;
    for (uint64_t c0 = begin; c0 < end; c0 += KF__CHUNK_BYTES) {
        uint64_t c1 = end - c0 < KF__CHUNK_BYTES ? end : c0 + KF__CHUNK_BYTES;
        uint64_t n = c1 - c0;
        kf_status st = ensure_staging(ctx, n);
        if (st != KF_OK) {
            return st;
        }
        wg_command_encoder enc = ctx->api.device_create_command_encoder(ctx->device, NULL);
        uint64_t base;
        wg_buffer handle = kf__buffer_handle(buf, &base);
        ctx->api.command_encoder_copy_buffer_to_buffer(enc, handle, base + c0, ctx->staging, 0, n);
        wg_command_buffer cmd = ctx->api.command_encoder_finish(enc, NULL);
        ctx->api.command_encoder_release(enc);
        st = kf__context_submit(ctx, cmd, "kf_buffer_download");
        ctx->api.command_buffer_release(cmd);
        if (st != KF_OK) {
            return st;
        }
        map_result *r = kf__callback_alloc(sizeof *r);
        if (!r) {
            return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                    "kf_buffer_download: out of host memory");
        }
        wg_map_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_mapped, r, NULL};
        st = kf__context_wait(
            ctx, ctx->api.buffer_map_async(ctx->staging, WG_MAP_READ, 0, (size_t)n, info),
            "kf_buffer_download");
        if (st == KF_OK && r->status != WG_REQUEST_SUCCESS) {
            st = kf__context_check(ctx);
            if (st == KF_OK) {
                st = kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                      "kf_buffer_download: mapping the staging buffer failed: %s",
                                      r->message);
            }
            kf__callback_release(ctx, r, true);
            return st;
        }
        kf__callback_release(ctx, r, st == KF_OK);
        if (st != KF_OK) {
            return st;
        }
        const uint8_t *mapped = ctx->api.buffer_get_const_mapped_range(ctx->staging, 0, (size_t)n);
        if (!mapped) {
            ctx->api.buffer_unmap(ctx->staging);
            return kf__context_fail(ctx, KF_ERROR_INTERNAL, "kf_buffer_download: no mapped range");
        }
        uint64_t lo = want_lo > c0 ? want_lo : c0;
        uint64_t hi = want_hi < c1 ? want_hi : c1;
        if (lo < hi) {
            memcpy(out + (lo - want_lo), mapped + (lo - c0), (size_t)(hi - lo));
        }
        ctx->api.buffer_unmap(ctx->staging);
    }
    return KF_OK;
}

/* Read-modify-write of the word at `word` (a multiple of 4): bytes [lo, hi) of it become src. */
static kf_status patch_word(kf_buffer *buf, uint64_t word, const uint8_t *src, unsigned lo,
                            unsigned hi) {
    uint8_t bytes[4];
    kf_status st = read_words(buf, word, word + 4, word, word + 4, bytes);
    if (st != KF_OK) {
        return st;
    }
    memcpy(bytes + lo, src, hi - lo);
    return write_words(buf, word, bytes, 4);
}

kf_status kf_buffer_upload(kf_buffer *buf, uint64_t offset, const void *data, uint64_t size) {
    kf_status st = check_range(buf, offset, data, size, "kf_buffer_upload");
    if (st != KF_OK || size == 0) {
        return st;
    }
    const uint8_t *bytes = data;
    uint64_t end = offset + size;
    uint64_t mid_lo = round_up4(offset);
    uint64_t mid_hi = end & ~(uint64_t)3;
    if (mid_lo < mid_hi) {
        st = write_words(buf, mid_lo, bytes + (mid_lo - offset), mid_hi - mid_lo);
        if (st != KF_OK) {
            return st;
        }
    }
    if (offset % 4) {
        uint64_t word = offset & ~(uint64_t)3;
        unsigned lo = (unsigned)(offset - word);
        unsigned hi = end - word < 4 ? (unsigned)(end - word) : 4;
        st = patch_word(buf, word, bytes, lo, hi);
        if (st != KF_OK) {
            return st;
        }
    }
    if (end % 4 && mid_hi >= mid_lo) {
        st = patch_word(buf, mid_hi, bytes + (mid_hi - offset), 0, (unsigned)(end - mid_hi));
    }
    if (st == KF_OK) {
        buf->ctx->stats.upload_bytes += size;
    }
    return st;
}

kf_status kf_buffer_download(kf_buffer *buf, uint64_t offset, void *data, uint64_t size) {
    kf_status st = check_range(buf, offset, data, size, "kf_buffer_download");
    if (st != KF_OK || size == 0) {
        return st;
    }
    uint64_t end = offset + size;
    st = read_words(buf, offset & ~(uint64_t)3, round_up4(end), offset, end, data);
    if (st == KF_OK) {
        buf->ctx->stats.download_bytes += size;
    }
    return st;
}

kf_status kf_buffer_fill_u32(kf_buffer *buf, uint32_t pattern) {
    if (!buf) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__context_check(buf->ctx);
    if (st != KF_OK) {
        return st;
    }
    uint64_t chunk = buf->alloc_size < (4ull << 20) ? buf->alloc_size : (4ull << 20);
    uint32_t *words = malloc((size_t)chunk);
    if (!words) {
        return kf__context_fail(buf->ctx, KF_ERROR_OUT_OF_MEMORY,
                                "kf_buffer_fill_u32: out of host memory");
    }
    for (uint64_t i = 0; i < chunk / 4; i++) {
        words[i] = pattern;
    }
    /* A view ends where its bytes end: the rest of its last word is another region's. */
    uint64_t whole = buf->view_of ? buf->size & ~(uint64_t)3 : buf->alloc_size;
    for (uint64_t done = 0; done < whole && st == KF_OK; done += chunk) {
        uint64_t n = whole - done < chunk ? whole - done : chunk;
        st = write_words(buf, done, (const uint8_t *)words, n);
    }
    if (st == KF_OK) {
        buf->ctx->stats.upload_bytes += whole;
    }
    if (st == KF_OK && whole < buf->size) {
        st = kf_buffer_upload(buf, whole, &pattern, buf->size - whole);
    }
    free(words);
    return st;
}
