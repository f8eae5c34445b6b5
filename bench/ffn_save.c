/* The seeds' FFN activation save (fusedSaveFFNActivations): gate, up and hidden (ffn_dim floats
 * per token each) and residual1 (dim floats per token) copied to their saved buffers.
 *
 * kf_save_activations records, submits and waits in one call, so it cannot be handed to
 * kf_context_time. This file builds the copy kernel src/fuse/save.c builds, through the public IR,
 * for all pairs at once (fused: what kf_save_activations dispatches) and for one pair at a time
 * (unfused: what calling kf_save_activations once per pair dispatches), and times both sequences
 * with kf_context_time in interleaved rounds: the same bytes, the same kernel body, the same
 * clock. It first runs
 * kf_save_activations itself and checks its copies and dispatch count, then checks the
 * benchmark's own copies too, so the timed kernels are known to do the work. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#define PAIRS 4
#define WORKGROUP 256u
#define POISON 0x7fc00000u

/* One kernel copying pairs [0, count) over one linear index space, segment after segment: the
 * same kernel as src/fuse/save.c's copy_kernel. */
static kf_kernel *copy_kernel(const uint64_t *sizes, uint32_t count, uint32_t lanes,
                              uint64_t *total) {
    kf_kernel_desc desc = {.name = "save_activations", .workgroup_size = {WORKGROUP, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type elem = lanes > 1 ? kf_type_vec(KF_SCALAR_U32, lanes) : kf_type_scalar(KF_SCALAR_U32);
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    uint64_t offset = 0;
    for (uint32_t i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "src%u", i);
        kf_binding src = kf_kernel_storage(k, name, elem, KF_ACCESS_READ);
        snprintf(name, sizeof name, "dst%u", i);
        kf_binding dst = kf_kernel_storage(k, name, elem, KF_ACCESS_READ_WRITE);
        uint64_t n = sizes[i] / (4u * lanes);
        kf_val lo = kf_lit_u32(k, (uint32_t)offset);
        kf_val hi = kf_lit_u32(k, (uint32_t)(offset + n));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_GE, idx, lo),
                           kf_binary(k, KF_OP_LT, idx, hi)));
        kf_val at = offset ? kf_sub(k, idx, lo) : idx;
        kf_store(k, dst, at, kf_load(k, src, at));
        kf_end(k);
        offset += n;
    }
    *total = offset;
    return k;
}

/* vec4 copies where every size of one call allows them, as kf_save_activations decides. */
static uint32_t lanes_for(const uint64_t *sizes, uint32_t count) {
    for (uint32_t i = 0; i < count; i++) {
        if (sizes[i] % 16 != 0) {
            return 1;
        }
    }
    return 4;
}

/* Dispatches copying pairs [first, first + count) in batches of at most per_dispatch pairs, as
 * one call of kf_save_activations on those pairs would. Returns the number made, 0 on failure. */
static uint32_t make_dispatches(kf_context *ctx, const uint64_t *sizes, kf_buffer *const *bufs,
                                uint32_t first, uint32_t count, uint32_t per_dispatch,
                                kf_dispatch *out, char *msg, size_t msg_size) {
    uint32_t lanes = lanes_for(sizes + first, count);
    uint32_t made = 0;
    for (uint32_t b = first; b < first + count; b += per_dispatch) {
        uint32_t n = first + count - b < per_dispatch ? first + count - b : per_dispatch;
        uint64_t total = 0;
        kf_kernel *k = copy_kernel(sizes + b, n, lanes, &total);
        kf_status st = k ? kf_kernel_status(k) : KF_ERROR_OUT_OF_MEMORY;
        if (st == KF_OK) {
            uint64_t groups = (total + WORKGROUP - 1) / WORKGROUP;
            kf_kernel_launch launch = {.buffers = bufs + 2 * b, .buffer_count = 2 * n};
            launch.groups[0] = (uint32_t)(groups ? groups : 1);
            launch.groups[1] = launch.groups[2] = 1;
            st = kf_kernel_dispatch(ctx, k, &launch, &out[made]);
        }
        if (st != KF_OK) {
            snprintf(msg, msg_size, "copy kernel: %s: %s", kf_status_str(st),
                     k && kf_kernel_status(k) != KF_OK ? kf_kernel_error(k)
                                                       : kf_context_last_error(ctx));
            kf_kernel_destroy(k);
            return 0;
        }
        kf_kernel_destroy(k);
        made++;
    }
    return made;
}

/* NaN in every dst, so a copy that did not happen shows. */
static kf_status poison(kf_buffer *const *bufs) {
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < PAIRS && st == KF_OK; i++) {
        st = kf_buffer_fill_u32(bufs[2 * i + 1], POISON);
    }
    return st;
}

/* Each dst must hold its src's bytes exactly; msg names `what` and the pair otherwise. */
static bool check_copies(kf_buffer *const *bufs, const uint64_t *sizes, float *const *host,
                         void *scratch, const char *what, char *msg, size_t msg_size) {
    for (uint32_t i = 0; i < PAIRS; i++) {
        kf_status st = kf_buffer_download(bufs[2 * i + 1], 0, scratch, sizes[i]);
        if (st != KF_OK) {
            snprintf(msg, msg_size, "%s: reading pair %u back: %s", what, i, kf_status_str(st));
            return false;
        }
        if (memcmp(scratch, host[i], sizes[i]) != 0) {
            snprintf(msg, msg_size, "%s: pair %u was not copied exactly", what, i);
            return false;
        }
    }
    return true;
}

/* A sequence of dispatches to time as one submission. */
typedef struct sequence {
    kf_context *ctx;
    const char *what;
    const kf_dispatch *ds;
    uint32_t count;
} sequence;

static kf_status time_sequence(void *user, uint32_t which, kf_timing *out) {
    const sequence *s = (const sequence *)user + which;
    return kf_context_time(s->ctx, s->ds, s->count, 1, out);
}

void kf_bench_run_ffn_save(kf_context *ctx, const kf_bench_case *c, uint32_t repeat, uint64_t seed,
                           kf_bench_result *r) {
    uint64_t sizes[PAIRS];
    for (uint32_t i = 0; i < PAIRS; i++) {
        sizes[i] = (uint64_t)c->tokens * (i < 3 ? c->ffn_dim : c->dim) * 4u;
    }
    kf_buffer *bufs[2 * PAIRS] = {0};
    float *host[PAIRS] = {0};
    void *scratch = malloc(sizes[0] > sizes[3] ? sizes[0] : sizes[3]);
    kf_status st = scratch ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < PAIRS && st == KF_OK; i++) {
        host[i] = malloc(sizes[i]);
        kf_tensor t = {.shape = kf_shape_1d((uint32_t)(sizes[i] / 4)), .data = host[i]};
        if (!host[i]) {
            st = KF_ERROR_OUT_OF_MEMORY;
            break;
        }
        kf_tensor_fill_random(&t, seed + i, -4.0f, 4.0f);
        st = kf_buffer_create(ctx, sizes[i], &bufs[2 * i]);
        if (st == KF_OK) {
            st = kf_buffer_create(ctx, sizes[i], &bufs[2 * i + 1]);
        }
        if (st == KF_OK) {
            st = kf_buffer_upload(bufs[2 * i], 0, host[i], sizes[i]);
        }
    }
    if (st != KF_OK) {
        r->skipped = st == KF_ERROR_LIMIT || st == KF_ERROR_OUT_OF_MEMORY;
        r->failed = !r->skipped;
        snprintf(r->note, sizeof r->note, "buffers: %s: %s", kf_status_str(st),
                 kf_context_last_error(ctx));
        goto done;
    }
    kf_copy_pair pairs[PAIRS];
    for (uint32_t i = 0; i < PAIRS; i++) {
        pairs[i] = (kf_copy_pair){bufs[2 * i], bufs[2 * i + 1], sizes[i]};
    }

    /* The library's own fused save: its copies and its dispatch count. */
    uint32_t library_dispatches = 0;
    st = poison(bufs);
    if (st == KF_OK) {
        st = kf_save_activations(ctx, pairs, PAIRS, &library_dispatches);
    }
    if (st != KF_OK) {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "kf_save_activations: %s: %s", kf_status_str(st),
                 kf_context_last_error(ctx));
        goto done;
    }
    if (!check_copies(bufs, sizes, host, scratch, "kf_save_activations", r->note, sizeof r->note)) {
        r->failed = true;
        goto done;
    }

    kf_adapter_info info;
    uint32_t per_dispatch = 4; /* save.c's fallback limit of 8 storage buffers */
    if (kf_context_adapter_info(ctx, &info) == KF_OK && info.max_storage_buffers_per_stage) {
        per_dispatch = info.max_storage_buffers_per_stage / 2;
    }
    per_dispatch = per_dispatch > PAIRS ? PAIRS : per_dispatch ? per_dispatch : 1;
    kf_dispatch fused[PAIRS], unfused[PAIRS];
    uint32_t fused_count =
        make_dispatches(ctx, sizes, bufs, 0, PAIRS, per_dispatch, fused, r->note, sizeof r->note);
    uint32_t unfused_count = 0;
    for (uint32_t i = 0; i < PAIRS && fused_count; i++) {
        uint32_t made = make_dispatches(ctx, sizes, bufs, i, 1, 1, &unfused[unfused_count], r->note,
                                        sizeof r->note);
        if (!made) {
            unfused_count = 0;
            break;
        }
        unfused_count += made;
    }
    if (!fused_count || !unfused_count) {
        r->failed = true;
        goto done;
    }
    if (fused_count != library_dispatches) {
        r->failed = true;
        snprintf(r->note, sizeof r->note,
                 "the benchmark's fused save makes %u dispatches, kf_save_activations %u: "
                 "bench/ffn_save.c no longer mirrors src/fuse/save.c",
                 fused_count, library_dispatches);
        goto done;
    }
    sequence variants[2] = {{ctx, "fused copies", fused, fused_count},
                            {ctx, "unfused copies", unfused, unfused_count}};
    for (uint32_t v = 0; v < 2; v++) {
        st = poison(bufs);
        if (st == KF_OK) {
            st = kf_context_run(ctx, variants[v].ds, variants[v].count);
        }
        if (st != KF_OK) {
            r->failed = true;
            snprintf(r->note, sizeof r->note, "%s: %s: %s", variants[v].what, kf_status_str(st),
                     kf_context_last_error(ctx));
            goto done;
        }
        if (!check_copies(bufs, sizes, host, scratch, variants[v].what, r->note, sizeof r->note)) {
            r->failed = true;
            goto done;
        }
    }
    kf_timing timing[2];
    st = kf_bench_interleave(2, repeat, time_sequence, variants, timing);
    if (st != KF_OK) {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "timing the copies: %s: %s", kf_status_str(st),
                 kf_context_last_error(ctx));
        goto done;
    }
    r->fused = timing[0];
    r->unfused = timing[1];
    r->dispatches_fused = fused_count;
    r->dispatches_unfused = unfused_count;
    r->work = 0.0;
    for (uint32_t i = 0; i < PAIRS; i++) {
        r->work += 2.0 * (double)sizes[i];
    }
    r->bytes_fused = r->bytes_unfused = (uint64_t)r->work;
    r->max_rel_diff = 0.0; /* both were checked bit for bit */
done:
    for (uint32_t i = 0; i < 2 * PAIRS; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    for (uint32_t i = 0; i < PAIRS; i++) {
        free(host[i]);
    }
    free(scratch);
}
