/* The seeds' FFN activation save (fusedSaveFFNActivations): gate, up and hidden (ffn_dim floats
 * per token each) and residual1 (dim floats per token) copied to their saved buffers.
 *
 * kf_save_activations records, submits and waits in one call; kf_save_activations_record gives
 * the same dispatches without running them. This file records them for all pairs at once (fused)
 * and for one pair at a time (unfused: what calling kf_save_activations once per pair
 * dispatches), and times both sequences with kf_context_time in interleaved rounds. It first runs
 * kf_save_activations itself and checks its copies and dispatch count, then checks the timed
 * sequences' copies too, so the timed kernels are known to do the work. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#define PAIRS 4
#define POISON 0x7fc00000u

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

    /* The same dispatches, recorded instead of run, so they can be timed: all pairs in one call
     * (fused) against one call per pair (what a caller without the fused save dispatches). */
    kf_dispatch fused[PAIRS], unfused[PAIRS];
    kf_buffer *fused_bindings[2 * PAIRS], *unfused_bindings[2 * PAIRS];
    uint32_t fused_count = 0, unfused_count = 0;
    st = kf_save_activations_record(ctx, pairs, PAIRS, fused_bindings, fused, &fused_count);
    for (uint32_t i = 0; i < PAIRS && st == KF_OK; i++) {
        uint32_t made = 0;
        st = kf_save_activations_record(ctx, &pairs[i], 1, &unfused_bindings[2 * i],
                                        &unfused[unfused_count], &made);
        unfused_count += made;
    }
    if (st != KF_OK) {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "kf_save_activations_record: %s: %s", kf_status_str(st),
                 kf_context_last_error(ctx));
        goto done;
    }
    if (fused_count != library_dispatches) {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "recorded %u dispatches, kf_save_activations ran %u",
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
