/* Plan inputs and outputs bound to regions of GPU tensors (kf_plan_bind_input_at /
 * kf_plan_bind_output_at, on kf_buffer_view): several parameters packed in one tensor, an output
 * written into part of one with the bytes around it untouched, in-place updates of a region,
 * and every refusal (misaligned, out of range, wrong dtype, overlapping regions) naming the
 * culprit. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0x7fc00000u

static kf_plan *compile(kf_context *ctx, const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    kf_plan *p = NULL;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "parse: %u:%u: %s\n", err.line, err.column, err.message);
        return NULL;
    }
    if (kf_graph_compile(ctx, g, NULL, &p) != KF_OK) {
        fprintf(stderr, "compile: %s\n", kf_context_last_error(ctx));
        p = NULL;
    }
    kf_graph_destroy(g);
    return p;
}

static uint32_t alignment(kf_context *ctx) {
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    return info.min_storage_buffer_offset_alignment > 4 ? info.min_storage_buffer_offset_alignment
                                                        : 4;
}

static uint64_t align_up(uint64_t n, uint64_t a) {
    return (n + a - 1) / a * a;
}

static void fill_random(float *v, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        v[i] = kt_rand_f32(-1.0f, 1.0f);
    }
}

/* y = gelu(x @ w + b), with w and b packed in one tensor (b at the first aligned byte after w)
 * and y written into the middle of a poisoned tensor; against the same plan on host tensors. */
KT_TEST(fusion, bind_regions_packed_params_and_an_output_inside_a_tensor) {
    KT_NEED_GPU(ctx);
    enum { M = 13, K = 7, N = 29 }; /* primes: no tile or vec4 multiple */
    kf_plan *p = compile(ctx, "x: f32[13, 7]\nw: f32[7, 29]\nb: f32[29]\n"
                              "y = matmul(x, w) |> add(b) |> gelu\nout y\n");
    kf_plan *ref = compile(ctx, "x: f32[13, 7]\nw: f32[7, 29]\nb: f32[29]\n"
                                "y = matmul(x, w) |> add(b) |> gelu\nout y\n");
    KT_CHECK(p && ref, "compile");
    uint64_t a = alignment(ctx);
    uint64_t w_at = 0, b_at = align_up(K * N * 4, a);
    uint64_t params_floats = (b_at + N * 4) / 4;
    float *params = malloc(params_floats * 4);
    for (uint64_t i = 0; i < params_floats; i++) {
        params[i] = NAN; /* the padding between w and b: read by no kernel */
    }
    fill_random(params + w_at / 4, K * N);
    fill_random(params + b_at / 4, N);
    kf_tensor *xh = NULL, *wh = NULL, *bh = NULL, *yh = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {M, K}}, &xh));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {K, N}}, &wh));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {N}}, &bh));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {M, N}}, &yh));
    fill_random(xh->data, M * K);
    memcpy(wh->data, params + w_at / 4, K * N * 4);
    memcpy(bh->data, params + b_at / 4, N * 4);

    kf_tensor *packed_host = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {(uint32_t)params_floats}}, &packed_host));
    memcpy(packed_host->data, params, params_floats * 4);
    kf_gpu_tensor *packed = NULL, *x = NULL, *out = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, packed_host, KF_DTYPE_F32, &packed));
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, xh, KF_DTYPE_F32, &x));
    /* y lands at the second aligned slot of a tensor with room before and after it */
    uint64_t y_at = a, out_floats = (align_up(a + M * N * 4, a) + a) / 4;
    KT_CHECK_OK(
        kf_gpu_tensor_create(ctx, &(kf_shape){1, {(uint32_t)out_floats}}, KF_DTYPE_F32, &out));
    KT_CHECK_OK(kf_buffer_fill_u32(out->buffer, POISON));

    KT_CHECK_OK(kf_plan_bind_input(p, "x", x));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "w", packed, w_at));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "b", packed, b_at));
    KT_CHECK_OK(kf_plan_bind_output_at(p, "y", out, y_at));
    kf_context_stats s0, s1;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    KT_CHECK_OK(kf_plan_run(p));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.upload_bytes == s0.upload_bytes && s1.download_bytes == s0.download_bytes,
             "a run on bound regions moved bytes");

    KT_CHECK_OK(kf_plan_set_input(ref, "x", xh));
    KT_CHECK_OK(kf_plan_set_input(ref, "w", wh));
    KT_CHECK_OK(kf_plan_set_input(ref, "b", bh));
    KT_CHECK_OK(kf_plan_run(ref));
    KT_CHECK_OK(kf_plan_get_output(ref, "y", yh));
    uint32_t *got = malloc(out_floats * 4);
    KT_CHECK_OK(kf_buffer_download(out->buffer, 0, got, out_floats * 4));
    for (uint64_t i = 0; i < out_floats; i++) {
        bool inside = i >= y_at / 4 && i < y_at / 4 + M * N;
        if (!inside) {
            KT_CHECK(got[i] == POISON, "word %llu outside y's region written (0x%08x)",
                     (unsigned long long)i, got[i]);
            continue;
        }
        float v;
        memcpy(&v, &got[i], 4);
        float want = yh->data[i - y_at / 4];
        KT_CHECK(memcmp(&v, &want, 4) == 0, "y[%llu] = %g, the host-tensor plan gives %g",
                 (unsigned long long)(i - y_at / 4), (double)v, (double)want);
    }
    /* kf_plan_get_output reads the region back */
    kf_tensor *back = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {M, N}}, &back));
    KT_CHECK_OK(kf_plan_get_output(p, "y", back));
    KT_CHECK(memcmp(back->data, yh->data, M * N * 4) == 0, "kf_plan_get_output of a region");
    /* The tensors may go first: the plan keeps their memory (ASan checks the rest). */
    kf_gpu_tensor_destroy(packed);
    kf_gpu_tensor_destroy(out);
    KT_CHECK_OK(kf_plan_run(p));
    KT_CHECK_OK(kf_plan_get_output(p, "y", back));
    KT_CHECK(memcmp(back->data, yh->data, M * N * 4) == 0, "a run after the tensors' destroy");
    kf_plan_destroy(p);
    kf_plan_destroy(ref);
    kf_gpu_tensor_destroy(x);
    kf_tensor_destroy(back);
    kf_tensor_destroy(packed_host);
    kf_tensor_destroy(xh);
    kf_tensor_destroy(wh);
    kf_tensor_destroy(bh);
    kf_tensor_destroy(yh);
    free(params);
    free(got);
}

/* w = w - 0.125 dw for two parameters that live in one tensor, each updated in its own region
 * in place; the bytes between them untouched. */
KT_TEST(fusion, bind_regions_in_place_update_of_packed_params) {
    KT_NEED_GPU(ctx);
    enum { N0 = 37, N1 = 1031 };
    kf_plan *p = compile(ctx, "w0: f32[37]\ndw0: f32[37]\nw1: f32[1031]\ndw1: f32[1031]\n"
                              "n0 = sub(w0, scale(dw0, 0.125))\nout n0\n"
                              "n1 = sub(w1, scale(dw1, 0.125))\nout n1\n");
    KT_CHECK(p, "compile");
    uint64_t a = alignment(ctx);
    uint64_t at0 = 0, at1 = align_up(N0 * 4, a), total = (at1 + N1 * 4) / 4;
    kf_tensor *wh = NULL, *dwh = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {(uint32_t)total}}, &wh));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {(uint32_t)total}}, &dwh));
    fill_random(wh->data, total);
    fill_random(dwh->data, total);
    kf_gpu_tensor *w = NULL, *dw = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, wh, KF_DTYPE_F32, &w));
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, dwh, KF_DTYPE_F32, &dw));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "w0", w, at0));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "w1", w, at1));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "dw0", dw, at0));
    KT_CHECK_OK(kf_plan_bind_input_at(p, "dw1", dw, at1));
    kf_status st = kf_plan_bind_output_at(p, "n0", w, at0);
    KT_CHECK(st == KF_OK, "in place into w0's region: %s", kf_context_last_error(ctx));
    st = kf_plan_bind_output_at(p, "n1", w, at1);
    KT_CHECK(st == KF_OK, "in place into w1's region: %s", kf_context_last_error(ctx));
    for (int step = 0; step < 2; step++) {
        KT_CHECK_OK(kf_plan_run(p));
        for (uint64_t i = 0; i < total; i++) {
            bool updated = i < N0 || (i >= at1 / 4 && i < at1 / 4 + N1);
            if (updated) {
                wh->data[i] = wh->data[i] - dwh->data[i] * 0.125f;
            }
        }
    }
    kf_tensor *got = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {(uint32_t)total}}, &got));
    KT_CHECK_OK(kf_gpu_tensor_to(w, got));
    for (uint64_t i = 0; i < total; i++) {
        KT_CHECK(fabsf(got->data[i] - wh->data[i]) <= 1e-6f * fmaxf(1.0f, fabsf(wh->data[i])),
                 "w[%llu] = %g, want %g", (unsigned long long)i, (double)got->data[i],
                 (double)wh->data[i]);
    }
    kf_tensor_destroy(got);
    kf_plan_destroy(p);
    kf_gpu_tensor_destroy(w);
    kf_gpu_tensor_destroy(dw);
    kf_tensor_destroy(wh);
    kf_tensor_destroy(dwh);
}

KT_TEST(fusion, bind_regions_refused_with_the_culprit_named) {
    KT_NEED_GPU(ctx);
    kf_plan *p = compile(ctx, "x: f32[5, 3]\nw: f32[3, 4]\ny = matmul(x, w)\nout y\n"
                              "z = relu(x)\nout z\n");
    KT_CHECK(p, "compile");
    uint64_t a = alignment(ctx);
    kf_gpu_tensor *big = NULL, *ints = NULL;
    uint32_t floats = (uint32_t)(4 * a / 4 + 64);
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){1, {floats}}, KF_DTYPE_F32, &big));
    /* i32, not f16: every device has it (f16 needs shader-f16) */
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){1, {64}}, KF_DTYPE_I32, &ints));
    char want[128];

    /* misaligned: the message names the device's alignment */
    kf_status st = kf_plan_bind_input_at(p, "w", big, a + 4);
    const char *msg = kf_context_last_error(ctx);
    snprintf(want, sizeof want, "minStorageBufferOffsetAlignment (%llu bytes)",
             (unsigned long long)a);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "input w") && strstr(msg, want),
             "misaligned: %s: %s", kf_status_str(st), msg);

    /* out of range: w (48 bytes) at the last aligned offset that leaves less than 48 */
    uint64_t late = (uint64_t)floats * 4 - a;
    late -= late % a;
    while ((uint64_t)floats * 4 - late >= 48) {
        late += a;
    }
    st = kf_plan_bind_input_at(p, "w", big, late);
    msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "input w") && strstr(msg, "48 bytes") &&
                 strstr(msg, "f32 3x4"),
             "out of range: %s: %s", kf_status_str(st), msg);
    st = kf_plan_bind_input_at(p, "w", big, UINT64_MAX - 3);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "offset near 2^64: %s", kf_status_str(st));

    /* dtype: both named */
    st = kf_plan_bind_input_at(p, "w", ints, 0);
    msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_TYPE && strstr(msg, "input w") && strstr(msg, "f32") &&
                 strstr(msg, "i32"),
             "dtype: %s: %s", kf_status_str(st), msg);

    /* no such input / output, NULL tensor */
    st = kf_plan_bind_input_at(p, "nope", big, 0);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_context_last_error(ctx), "'nope'"),
             "unknown input: %s", kf_context_last_error(ctx));
    st = kf_plan_bind_output_at(p, "nope", big, 0);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_context_last_error(ctx), "'nope'"),
             "unknown output: %s", kf_context_last_error(ctx));
    st = kf_plan_bind_input_at(p, "w", NULL, 0);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_context_last_error(ctx), "input w"),
             "NULL tensor: %s", kf_context_last_error(ctx));

    /* an output whose region overlaps another output's */
    KT_CHECK_OK(kf_plan_bind_output_at(p, "y", big, 0));
    st = kf_plan_bind_output_at(p, "z", big, 0);
    msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "y") && strstr(msg, "z") &&
                 strstr(msg, "overlapping"),
             "two outputs in one region: %s: %s", kf_status_str(st), msg);
    /* an output region over the matmul's operand: an element read after it was written */
    KT_CHECK_OK(kf_plan_bind_output_at(p, "y", big, 2 * a));
    st = kf_plan_bind_input_at(p, "w", big, 2 * a);
    msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "output y") && strstr(msg, "input w"),
             "matmul into its operand's region: %s: %s", kf_status_str(st), msg);
    KT_CHECK_OK(kf_plan_bind_output(p, "y", NULL));
    KT_CHECK_OK(kf_plan_bind_output(p, "z", NULL));

    /* element-wise in place: exactly x's region is accepted, a region overlapping it by part is
     * not (an invocation would read an element another one already wrote) */
    kf_plan *q = compile(ctx, "x: f32[5, 3]\nz = relu(x)\nout z\n");
    KT_CHECK(q, "compile");
    KT_CHECK_OK(kf_plan_bind_input_at(q, "x", big, a));
    st = kf_plan_bind_output_at(q, "z", big, a);
    KT_CHECK(st == KF_OK, "relu in place over exactly x's region: %s", kf_context_last_error(ctx));
    KT_CHECK_OK(kf_plan_bind_output(q, "z", NULL));
    if (a < 60) { /* x is 60 bytes: the next aligned offset is inside it */
        st = kf_plan_bind_output_at(q, "z", big, 2 * a);
        msg = kf_context_last_error(ctx);
        KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "output z") &&
                     strstr(msg, "input x") && strstr(msg, "overlap"),
                 "relu over part of x's region: %s: %s", kf_status_str(st), msg);
    }
    /* right after x: no byte shared, but the dispatch would bind one buffer read-only and
     * read-write, which WebGPU refuses: the run is refused, naming both (the binding itself is
     * accepted, since binding another output in place could still make it legal) */
    KT_CHECK_OK(kf_plan_bind_output_at(q, "z", big, a + align_up(60, a)));
    st = kf_plan_run(q);
    msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "output z") && strstr(msg, "input x") &&
                 strstr(msg, "one dispatch"),
             "relu next to x in one tensor: %s: %s", kf_status_str(st), msg);
    /* z in another tensor runs, and x's region is read where it is */
    kf_gpu_tensor *zt = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){2, {5, 3}}, KF_DTYPE_F32, &zt));
    KT_CHECK_OK(kf_plan_bind_output(q, "z", zt));
    float xs[15], zs[15];
    fill_random(xs, 15);
    KT_CHECK_OK(kf_buffer_upload(big->buffer, a, xs, sizeof xs));
    KT_CHECK_OK(kf_plan_run(q));
    KT_CHECK_OK(kf_buffer_download(zt->buffer, 0, zs, sizeof zs));
    for (int i = 0; i < 15; i++) {
        KT_CHECK(zs[i] == (xs[i] > 0 ? xs[i] : 0.0f), "relu(x[%d]) = %g, x %g", i, (double)zs[i],
                 (double)xs[i]);
    }
    kf_plan_destroy(q);
    kf_gpu_tensor_destroy(zt);
    kf_plan_destroy(p);
    kf_gpu_tensor_destroy(big);
    kf_gpu_tensor_destroy(ints);
}

/* kf_buffer_view on its own: offsets are the view's, fill stops at its last byte, a view of a
 * view is a view of the buffer, and the buffer may be destroyed first. */
KT_TEST(unit, buffer_view_transfers_and_bounds) {
    KT_NEED_GPU(ctx);
    uint64_t a = alignment(ctx);
    uint64_t size = 4 * a;
    kf_buffer *buf = NULL, *v = NULL, *vv = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, size, &buf));
    KT_CHECK_OK(kf_buffer_fill_u32(buf, POISON));
    KT_CHECK_OK(kf_buffer_view(buf, a, 2 * a - 2, &v)); /* ends inside a word */
    KT_CHECK(kf_buffer_size(v) == 2 * a - 2, "view size");
    KT_CHECK_OK(kf_buffer_fill_u32(v, 0x01020304u));
    uint8_t bytes[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = (uint8_t)kt_rand_u64();
    }
    KT_CHECK_OK(kf_buffer_upload(v, 5, bytes, 3));
    KT_CHECK_OK(kf_buffer_view(v, a, 8, &vv));
    uint32_t word = 0xdeadbeefu;
    KT_CHECK_OK(kf_buffer_upload(vv, 4, &word, 4));
    uint8_t *all = malloc(size);
    KT_CHECK_OK(kf_buffer_download(buf, 0, all, size));
    for (uint64_t i = 0; i < size; i++) {
        uint8_t want;
        uint32_t poison = POISON, fill = 0x01020304u;
        if (i < a || i >= a + 2 * a - 2) {
            want = ((uint8_t *)&poison)[i % 4];
        } else if (i >= a + 5 && i < a + 8) {
            want = bytes[i - a - 5];
        } else if (i >= 2 * a + 4 && i < 2 * a + 8) {
            want = ((uint8_t *)&word)[i - 2 * a - 4];
        } else {
            want = ((uint8_t *)&fill)[(i - a) % 4];
        }
        KT_CHECK(all[i] == want, "byte %llu: 0x%02x, want 0x%02x", (unsigned long long)i, all[i],
                 want);
    }
    uint32_t back = 0;
    KT_CHECK_OK(kf_buffer_download(vv, 4, &back, 4));
    KT_CHECK(back == word, "download through a view of a view");
    kf_status st = kf_buffer_view(buf, a / 2 + 2, 4, &vv);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && vv == NULL &&
                 strstr(kf_context_last_error(ctx), "minStorageBufferOffsetAlignment"),
             "misaligned view: %s", kf_context_last_error(ctx));
    st = kf_buffer_view(buf, a, size, &vv);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_context_last_error(ctx), "do not fit"),
             "view past the end: %s", kf_context_last_error(ctx));
    st = kf_buffer_view(buf, 0, 0, &vv);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "empty view: %s", kf_status_str(st));
    st = kf_buffer_upload(v, 2 * a - 4, &word, 4);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "upload past the view's end: %s", kf_status_str(st));
    kf_buffer_destroy(buf); /* the views keep its memory */
    KT_CHECK_OK(kf_buffer_download(v, 0, &back, 4));
    KT_CHECK(back == 0x01020304u, "a view after its buffer's destroy: 0x%08x", back);
    kf_buffer_destroy(v);
    free(all);
}
