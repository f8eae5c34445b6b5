/* kf_shared_load_uniform (workgroupUniformLoad): a loop whose trip count one invocation reads
 * from storage and hands to the whole workgroup through workgroup memory, with barriers in its
 * body, runs on the GPU and in the interpreter and gives every invocation the right sum; the
 * WGSL holds the uniform load and no barrier of its own before it; the same kernel with a plain
 * kf_shared_load does not compile on the GPU (Tint's uniformity analysis rejects the barriers);
 * the index must be a literal, and a stage cannot have one. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

enum { LANES = 64, GROUPS = 3 };

/* Workgroup g: invocation 0 reads n = trips[g]; all loop n times, each round adding the
 * neighbour's round value (shared, between two barriers); out[g * LANES + l] = the sum. */
static kf_kernel *trips_kernel(bool uniform) {
    kf_kernel_desc desc = {.name = uniform ? "trips_uniform" : "trips_plain",
                           .workgroup_size = {LANES, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type u = kf_type_scalar(KF_SCALAR_U32);
    kf_binding trips = kf_kernel_storage(k, "trips", u, KF_ACCESS_READ);
    kf_binding out = kf_kernel_storage(k, "out", u, KF_ACCESS_READ_WRITE);
    kf_shared count = kf_kernel_workgroup(k, "count", u, 1);
    kf_shared cells = kf_kernel_workgroup(k, "cells", u, LANES);
    uint32_t grid[3] = {GROUPS, 1, 1};
    kf_kernel_set_grid(k, grid);
    kf_val l = kf_let(k, "l", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val g = kf_let(k, "g", kf_workgroup_linear(k));
    kf_if(k, kf_binary(k, KF_OP_EQ, l, kf_lit_u32(k, 0)));
    kf_shared_store(k, count, kf_lit_u32(k, 0), kf_load(k, trips, g));
    kf_end(k);
    kf_val n;
    if (uniform) {
        n = kf_shared_load_uniform(k, count, kf_lit_u32(k, 0));
    } else {
        kf_barrier(k);
        n = kf_shared_load(k, count, kf_lit_u32(k, 0));
    }
    kf_var sum = kf_declare(k, "sum", u, kf_lit_u32(k, 0));
    kf_val next = kf_binary(k, KF_OP_MOD, kf_add(k, l, kf_lit_u32(k, 1)), kf_lit_u32(k, LANES));
    kf_val r = kf_for(k, "r", kf_lit_u32(k, 0), n, kf_lit_u32(k, 1));
    kf_shared_store(k, cells, l, kf_add(k, kf_mul(k, r, kf_lit_u32(k, 1000)), l));
    kf_barrier(k);
    kf_assign(k, sum, kf_add(k, kf_read(k, sum), kf_shared_load(k, cells, next)));
    kf_barrier(k);
    kf_end(k);
    kf_store(k, out, kf_add(k, kf_mul(k, g, kf_lit_u32(k, LANES)), l), kf_read(k, sum));
    return k;
}

static const uint32_t trip_counts[GROUPS] = {3, 0, 7};

static bool check(const uint32_t *out, const char *where) {
    for (uint32_t g = 0; g < GROUPS; g++) {
        for (uint32_t l = 0; l < LANES; l++) {
            uint32_t want = 0;
            for (uint32_t r = 0; r < trip_counts[g]; r++) {
                want += r * 1000 + (l + 1) % LANES;
            }
            if (out[g * LANES + l] != want) {
                kt_fail(__FILE__, __LINE__, "%s: out[%u][%u] = %u, want %u", where, g, l,
                        out[g * LANES + l], want);
                return false;
            }
        }
    }
    return true;
}

KT_CPU_TEST(unit, uniform_load_interpreter_and_wgsl) {
    kf_kernel *k = trips_kernel(true);
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    uint32_t trips[GROUPS], out[GROUPS * LANES];
    memcpy(trips, trip_counts, sizeof trips);
    memset(out, 0xff, sizeof out);
    kf_host_buffer b[2] = {{trips, sizeof trips}, {out, sizeof out}};
    kf_interp_desc d = {.buffers = b, .buffer_count = 2};
    KT_CHECK(kf_kernel_interpret(k, &d) == KF_OK, "%s", kf_kernel_error(k));
    KT_CHECK(check(out, "interpreter"), "interpreter");
    char *w = kf_kernel_emit_wgsl(k);
    KT_CHECK(w && strstr(w, "workgroupUniformLoad(&count[0u])"), "no uniform load in:\n%s", w);
    /* the uniform load is the barrier: none printed right before it */
    const char *at = w ? strstr(w, "workgroupUniformLoad") : NULL;
    const char *bar = w ? strstr(w, "workgroupBarrier") : NULL;
    KT_CHECK(at && (!bar || bar > at), "a barrier before the uniform load:\n%s", w);
    free(w);
    kf_kernel_destroy(k);

    /* the index must be a literal; a stage (element-wise) cannot hold one */
    kf_kernel_desc desc = {.name = "bad", .workgroup_size = {LANES, 1, 1}};
    k = kf_kernel_create(&desc);
    kf_shared s = kf_kernel_workgroup(k, "s", kf_type_scalar(KF_SCALAR_U32), LANES);
    kf_shared_load_uniform(k, s, kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    KT_CHECK(kf_kernel_status(k) != KF_OK && strstr(kf_kernel_error(k), "must be a literal"),
             "a non-literal index accepted: %s", kf_kernel_error(k));
    kf_kernel_destroy(k);
    kf_kernel_desc stage = {.name = "stage",
                            .workgroup_size = {LANES, 1, 1},
                            .input = kf_type_scalar(KF_SCALAR_F32),
                            .output = kf_type_scalar(KF_SCALAR_F32)};
    k = kf_kernel_create(&stage);
    s = kf_kernel_workgroup(k, "s", kf_type_scalar(KF_SCALAR_U32), 4);
    kf_shared_load_uniform(k, s, kf_lit_u32(k, 0));
    KT_CHECK(kf_kernel_status(k) != KF_OK, "a stage accepted a uniform load");
    kf_kernel_destroy(k);
}

/* Runs k on ctx; false if it did not run (the error in *err). */
static bool run_gpu(kf_context *ctx, kf_kernel *k, uint32_t *out, const char **err) {
    kf_buffer *bufs[2] = {0};
    bool ok = kf_buffer_create(ctx, sizeof trip_counts, &bufs[0]) == KF_OK &&
              kf_buffer_upload(bufs[0], 0, trip_counts, sizeof trip_counts) == KF_OK &&
              kf_buffer_create(ctx, GROUPS * LANES * 4, &bufs[1]) == KF_OK &&
              kf_buffer_upload(bufs[1], 0, out, GROUPS * LANES * 4) == KF_OK;
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 2};
    if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
        *err = kf_context_last_error(ctx);
        ok = false;
    }
    ok = ok && kf_buffer_download(bufs[1], 0, out, GROUPS * LANES * 4) == KF_OK;
    kf_buffer_destroy(bufs[0]);
    kf_buffer_destroy(bufs[1]);
    return ok;
}

KT_TEST(unit, uniform_load_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t out[GROUPS * LANES];
    memset(out, 0xff, sizeof out);
    const char *err = "";
    kf_kernel *k = trips_kernel(true);
    KT_CHECK(run_gpu(ctx, k, out, &err), "run: %s", err);
    KT_CHECK(check(out, "GPU"), "GPU");
    kf_kernel_destroy(k);
    /* a plain load's value is not uniform to Tint: the loop's barriers do not compile */
    k = trips_kernel(false);
    KT_CHECK(!run_gpu(ctx, k, out, &err) && err && strstr(err, "uniform"),
             "the plain load's kernel ran or failed otherwise: %s", err ? err : "");
    kf_kernel_destroy(k);
}
