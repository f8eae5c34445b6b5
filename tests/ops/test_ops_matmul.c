/* matmul: the spec against products worked out by hand and across transposes, shape errors,
 * spec_backward against finite differences, the tiled kernels against the spec on the GPU over
 * the verification table (f32 and f16, forward and both backward kernels), the open store phase
 * (an element-wise tail composed into the kernel's yield), and NaN propagation on the device. */
#include "harness.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_status spec_forward(const kf_operator *op, const kf_op_params *p, kf_tensor *a,
                              kf_tensor *b, kf_tensor **out) {
    kf_shape shapes[2] = {a->shape, b->shape}, s;
    char msg[256];
    kf_status st = kf_op_shape(op, shapes, p, &s, msg, sizeof msg);
    if (st != KF_OK) {
        return st;
    }
    if ((st = kf_tensor_create(&s, out)) != KF_OK) {
        return st;
    }
    const kf_tensor *in[2] = {a, b};
    return op->spec_forward(in, p, *out);
}

/* x^T as a new tensor. */
static kf_tensor *transposed(const kf_tensor *x) {
    kf_shape s = kf_shape_2d(x->shape.dims[1], x->shape.dims[0]);
    kf_tensor *t;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return NULL;
    }
    for (uint32_t i = 0; i < x->shape.dims[0]; i++) {
        for (uint32_t j = 0; j < x->shape.dims[1]; j++) {
            t->data[(uint64_t)j * x->shape.dims[0] + i] =
                x->data[(uint64_t)i * x->shape.dims[1] + j];
        }
    }
    return t;
}

KT_CPU_TEST(ops, matmul_spec_by_hand) {
    const kf_operator *mm = kf_op_find("matmul");
    KT_CHECK(mm && mm->op_class == KF_OP_CLASS_MATMUL, "matmul is registered");
    kf_shape sa = kf_shape_2d(2, 3), sb = kf_shape_2d(3, 2);
    kf_tensor *a, *b, *c = NULL;
    KT_CHECK_OK(kf_tensor_create(&sa, &a));
    KT_CHECK_OK(kf_tensor_create(&sb, &b));
    const float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
    memcpy(a->data, av, sizeof av);
    memcpy(b->data, bv, sizeof bv);
    kf_op_params p = {0};
    KT_CHECK_OK(spec_forward(mm, &p, a, b, &c));
    const float want[] = {58, 64, 139, 154};
    for (int i = 0; i < 4; i++) {
        KT_CHECK(c->data[i] == want[i], "c[%d] = %g, want %g", i, c->data[i], want[i]);
    }
    /* dc = ones: da = dc b^T (row sums of b), db = a^T dc (column sums of a) */
    kf_tensor *dc, *da, *db;
    KT_CHECK_OK(kf_tensor_constant(&c->shape, 1.0f, &dc));
    KT_CHECK_OK(kf_tensor_create(&sa, &da));
    KT_CHECK_OK(kf_tensor_create(&sb, &db));
    const kf_tensor *in[2] = {a, b};
    kf_tensor *grads[2] = {da, db};
    KT_CHECK_OK(mm->spec_backward(in, c, dc, &p, grads));
    const float want_da[] = {15, 19, 23, 15, 19, 23}, want_db[] = {5, 5, 7, 7, 9, 9};
    for (int i = 0; i < 6; i++) {
        KT_CHECK(da->data[i] == want_da[i], "da[%d] = %g, want %g", i, da->data[i], want_da[i]);
        KT_CHECK(db->data[i] == want_db[i], "db[%d] = %g, want %g", i, db->data[i], want_db[i]);
    }
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
    kf_tensor_destroy(c);
    kf_tensor_destroy(dc);
    kf_tensor_destroy(da);
    kf_tensor_destroy(db);
}

/* Every transpose combination of stored a^T / b^T gives the plain product, and so do the
 * gradients, transposed back into the stored layouts. */
KT_CPU_TEST(ops, matmul_spec_transposes_agree) {
    const kf_operator *mm = kf_op_find("matmul");
    kf_shape sa = kf_shape_2d(5, 7), sb = kf_shape_2d(7, 3);
    kf_tensor *a, *b, *ref = NULL;
    KT_CHECK_OK(kf_tensor_create(&sa, &a));
    KT_CHECK_OK(kf_tensor_create(&sb, &b));
    kf_tensor_fill_random(a, kt_rand_u64(), -1, 1);
    kf_tensor_fill_random(b, kt_rand_u64(), -1, 1);
    kf_op_params plain = {0};
    KT_CHECK_OK(spec_forward(mm, &plain, a, b, &ref));
    kf_tensor *at = transposed(a), *bt = transposed(b);
    KT_CHECK(at && bt, "transposes");
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            kf_op_params p = {.transpose_a = ta != 0, .transpose_b = tb != 0};
            kf_tensor *c = NULL;
            KT_CHECK_OK(spec_forward(mm, &p, ta ? at : a, tb ? bt : b, &c));
            KT_CHECK(kf_tensor_approx_eq(c, ref, 1e-6),
                     "ta=%d tb=%d differs from the plain "
                     "product",
                     ta, tb);
            kf_tensor_destroy(c);
        }
    }
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
    kf_tensor_destroy(at);
    kf_tensor_destroy(bt);
    kf_tensor_destroy(ref);
}

KT_CPU_TEST(ops, matmul_shape_errors) {
    const kf_operator *mm = kf_op_find("matmul");
    char msg[256];
    kf_shape out;
    kf_shape bad[2] = {kf_shape_2d(64, 128), kf_shape_2d(96, 32)};
    KT_CHECK(kf_op_shape(mm, bad, &(kf_op_params){0}, &out, msg, sizeof msg) == KF_ERROR_SHAPE,
             "inner dims that differ are a shape error");
    KT_CHECK(strstr(msg, "inner dims") && strstr(msg, "64x128") && strstr(msg, "96x32"),
             "the message names both shapes: %s", msg);
    kf_shape ok_t[2] = {kf_shape_2d(128, 64), kf_shape_2d(32, 128)};
    KT_CHECK_OK(kf_op_shape(mm, ok_t, &(kf_op_params){.transpose_a = true, .transpose_b = true},
                            &out, msg, sizeof msg));
    KT_CHECK(out.rank == 2 && out.dims[0] == 64 && out.dims[1] == 32, "a^T b^T is 64x32");
    kf_shape vec[2] = {kf_shape_1d(4), kf_shape_2d(4, 4)};
    KT_CHECK(kf_op_shape(mm, vec, &(kf_op_params){0}, &out, msg, sizeof msg) == KF_ERROR_SHAPE,
             "a vector is not a matrix");
}

KT_CPU_TEST(ops, matmul_gradient_matches_finite_differences) {
    const kf_operator *mm = kf_op_find("matmul");
    for (uint32_t i = 0; i < mm->case_count; i++) {
        const kf_op_case *tc = &mm->cases[i];
        /* two spec products per input element: the small cases cover every transpose */
        if (kf_shape_elements(&tc->shapes[0]) + kf_shape_elements(&tc->shapes[1]) > 2000) {
            continue;
        }
        kf_verify_case vc = {.op = mm, .params = tc->params, .seed = kt_rand_u64()};
        memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
        kf_verify_result res;
        kf_status st = kf_op_check_gradient(&vc, &res);
        KT_CHECK(st == KF_OK && res.passed, "matmul %s: %s (error %.3g, tolerance %.3g)",
                 tc->note ? tc->note : "", res.message, res.max_rel_error, res.tolerance);
    }
}

static void verify_matmul(kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    const kf_operator *mm = kf_op_find("matmul");
    if (dtype == KF_DTYPE_F16) {
        kf_adapter_info info;
        KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
        if (!info.has_f16) {
            printf("    (matmul f16: the adapter has no shader-f16; skipped)\n");
            return;
        }
    }
    for (uint32_t i = 0; i < mm->case_count; i++) {
        const kf_op_case *tc = &mm->cases[i];
        for (int backward = 0; backward < 2; backward++) {
            kf_verify_case vc = {.op = mm,
                                 .params = tc->params,
                                 .dtype = dtype,
                                 .backward = backward != 0,
                                 .seed = kt_rand_u64()};
            memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
            kf_verify_result res;
            kf_status st = kf_op_verify(ctx, &vc, &res);
            KT_CHECK(st == KF_OK && res.passed,
                     "matmul %s %s (%s): %s -> %s (error %.3g, tolerance %.3g, seed %llu)",
                     backward ? "backward" : "forward", kf_dtype_str(dtype),
                     tc->note ? tc->note : "", res.message, kf_status_str(st), res.max_rel_error,
                     res.tolerance, (unsigned long long)vc.seed);
        }
    }
}

KT_TEST(ops, matmul_verify_f32) {
    verify_matmul(KF_DTYPE_F32);
}

KT_TEST(ops, matmul_verify_f16) {
    verify_matmul(KF_DTYPE_F16);
}

/* ---------------------------------------------------------------------------------------- */
/* The open store phase and NaN on the device                                               */
/* ---------------------------------------------------------------------------------------- */

static kf_val tail_fn(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    /* 2x + 1, then relu: an affine epilogue and an activation */
    kf_val y = kf_add(k, kf_mul(k, x, kf_lit_f32(k, 2)), kf_lit_f32(k, 1));
    return kf_call2(k, KF_FN_MAX, y, kf_lit_f32(k, 0));
}

/* Runs `k` (bindings a, b, then the store's out) on a and b; the output is poisoned first. */
static kf_status run_ab(kf_context *ctx, kf_kernel *k, const kf_tensor *a, const kf_tensor *b,
                        kf_tensor *out) {
    kf_gpu_tensor *ga = NULL, *gb = NULL, *gc = NULL;
    kf_status st = kf_gpu_tensor_from(ctx, a, KF_DTYPE_F32, &ga);
    if (st == KF_OK) {
        st = kf_gpu_tensor_from(ctx, b, KF_DTYPE_F32, &gb);
    }
    if (st == KF_OK) {
        st = kf_gpu_tensor_create(ctx, &out->shape, KF_DTYPE_F32, &gc);
    }
    if (st == KF_OK) {
        st = kf_buffer_fill_u32(gc->buffer, 0x7fc00000u);
    }
    if (st == KF_OK) {
        kf_buffer *bufs[3] = {ga->buffer, gb->buffer, gc->buffer};
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
        st = kf_kernel_run(ctx, k, &launch);
    }
    if (st == KF_OK) {
        st = kf_gpu_tensor_to(gc, out);
    }
    kf_gpu_tensor_destroy(ga);
    kf_gpu_tensor_destroy(gb);
    kf_gpu_tensor_destroy(gc);
    return st;
}

KT_TEST(ops, matmul_store_phase_takes_a_tail) {
    KT_NEED_GPU(ctx);
    const kf_operator *mm = kf_op_find("matmul");
    kf_shape shapes[2] = {kf_shape_2d(37, 19), kf_shape_2d(23, 19)};
    kf_op_params p = {.transpose_b = true};
    kf_tensor *a, *b, *ref = NULL, *got;
    KT_CHECK_OK(kf_tensor_create(&shapes[0], &a));
    KT_CHECK_OK(kf_tensor_create(&shapes[1], &b));
    kf_tensor_fill_random(a, kt_rand_u64(), -1, 1);
    kf_tensor_fill_random(b, kt_rand_u64(), -1, 1);
    KT_CHECK_OK(spec_forward(mm, &p, a, b, &ref));
    for (uint64_t i = 0; i < kf_tensor_size(ref); i++) {
        ref->data[i] = fmaxf(2 * ref->data[i] + 1, 0);
    }
    KT_CHECK_OK(kf_tensor_create(&ref->shape, &got));

    kf_kernel *base = mm->kernel_forward(shapes, &p, KF_DTYPE_F32);
    KT_CHECK(base && kf_kernel_status(base) == KF_OK, "matmul kernel: %s",
             base ? kf_kernel_error(base) : "NULL");
    uint32_t wg[3];
    kf_kernel_workgroup_size(base, wg);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *tail = kf_kernel_map("affine_relu", f32, f32, wg, tail_fn, NULL);
    kf_kernel *fused = kf_kernel_then(base, tail);
    KT_CHECK(fused && kf_kernel_status(fused) == KF_OK, "matmul |> tail: %s",
             fused ? kf_kernel_error(fused) : "NULL");
    kf_status st = run_ab(ctx, fused, a, b, got);
    /* The measure verification uses (floor: 1% of the rms): 2x + 1 cancels to nearly zero for
     * some elements, where a fixed floor of 1e-3 turned f32 rounding into a failure. */
    double err = kf_max_rel_error(got->data, ref->data, kf_tensor_size(ref),
                                  kf__verify_floor(ref->data, kf_tensor_size(ref)));
    kf_kernel_destroy(base);
    kf_kernel_destroy(tail);
    kf_kernel_destroy(fused);
    KT_CHECK_OK(st);
    KT_CHECK(err <= mm->tolerance_f32, "fused matmul + tail: error %.3g", err);
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
    kf_tensor_destroy(ref);
    kf_tensor_destroy(got);
}

KT_TEST(ops, matmul_nan_propagates_on_device) {
    KT_NEED_GPU(ctx);
    const kf_operator *mm = kf_op_find("matmul");
    kf_shape shapes[2] = {kf_shape_2d(20, 18), kf_shape_2d(18, 21)};
    kf_op_params p = {0};
    kf_tensor *a, *b, *ref = NULL, *got;
    KT_CHECK_OK(kf_tensor_create(&shapes[0], &a));
    KT_CHECK_OK(kf_tensor_create(&shapes[1], &b));
    kf_tensor_fill_random(a, kt_rand_u64(), -1, 1);
    kf_tensor_fill_random(b, kt_rand_u64(), -1, 1);
    a->data[3 * 18 + 17] = NAN;      /* row 3 of c is NaN */
    b->data[5 * 21 + 20] = INFINITY; /* column 20 of c is +-inf or NaN */
    KT_CHECK_OK(spec_forward(mm, &p, a, b, &ref));
    KT_CHECK_OK(kf_tensor_create(&ref->shape, &got));
    kf_kernel *k = mm->kernel_forward(shapes, &p, KF_DTYPE_F32);
    kf_status st = run_ab(ctx, k, a, b, got);
    kf_kernel_destroy(k);
    KT_CHECK_OK(st);
    /* kf_max_rel_error treats NaN against NaN and equal infinities as equal, a mismatch as
     * infinite error */
    /* The measure verification uses (floor: 1% of the rms): 2x + 1 cancels to nearly zero for
     * some elements, where a fixed floor of 1e-3 turned f32 rounding into a failure. */
    double err = kf_max_rel_error(got->data, ref->data, kf_tensor_size(ref),
                                  kf__verify_floor(ref->data, kf_tensor_size(ref)));
    KT_CHECK(err <= mm->tolerance_f32, "NaN and inf follow the spec: error %.3g", err);
    KT_CHECK(isnan(got->data[3 * 21 + 0]), "a NaN in a's row 3 makes c's row 3 NaN");
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
    kf_tensor_destroy(ref);
    kf_tensor_destroy(got);
}

/* ---- batched (rank 3 and 4) ---- */

/* Matrix `index` of a tensor's batch, as a rank-2 tensor of its last two dims. */
static kf_tensor *matrix_of(const kf_tensor *x, uint32_t index) {
    uint32_t r = x->shape.rank;
    kf_shape s = kf_shape_2d(x->shape.dims[r - 2], x->shape.dims[r - 1]);
    kf_tensor *t;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return NULL;
    }
    uint64_t n = kf_shape_elements(&s);
    memcpy(t->data, x->data + index * n, n * sizeof(float));
    return t;
}

/* The batched spec against the rank-2 spec (checked by hand above) product by product, forward
 * and backward: a [2, 1, 5, 7] and b [3, 7, 4] broadcast to a [2, 3] batch; da is the sum of the
 * 3 products' rank-2 da along the axis a was broadcast, db the sum of the 2 along b's, with and
 * without transposes. */
KT_CPU_TEST(ops, matmul_batched_spec_is_products_of_the_rank2_spec) {
    const kf_operator *mm = kf_op_find("matmul");
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            kf_op_params p = {.transpose_a = ta != 0, .transpose_b = tb != 0};
            kf_shape sa = ta ? (kf_shape)SHAPE4(2, 1, 7, 5) : (kf_shape)SHAPE4(2, 1, 5, 7);
            kf_shape sb = tb ? (kf_shape)SHAPE3(3, 4, 7) : (kf_shape)SHAPE3(3, 7, 4);
            kf_tensor *a, *b, *c = NULL, *dc, *da, *db;
            KT_CHECK_OK(kf_tensor_create(&sa, &a));
            KT_CHECK_OK(kf_tensor_create(&sb, &b));
            kf_tensor_fill_random(a, kt_rand_u64(), -1, 1);
            kf_tensor_fill_random(b, kt_rand_u64(), -1, 1);
            KT_CHECK_OK(spec_forward(mm, &p, a, b, &c));
            kf_shape want = SHAPE4(2, 3, 5, 4);
            KT_CHECK(c && kf_shape_eq(&c->shape, &want), "the result is [2, 3, 5, 4]");
            KT_CHECK_OK(kf_tensor_create(&c->shape, &dc));
            kf_tensor_fill_random(dc, kt_rand_u64(), -1, 1);
            KT_CHECK_OK(kf_tensor_create(&sa, &da));
            KT_CHECK_OK(kf_tensor_create(&sb, &db));
            const kf_tensor *in[2] = {a, b};
            kf_tensor *grads[2] = {da, db};
            KT_CHECK_OK(mm->spec_backward(in, c, dc, &p, grads));
            /* the sums of the rank-2 gradients, accumulated here */
            double sum_a[2][35] = {{0}}, sum_b[3][28] = {{0}};
            for (uint32_t i = 0; i < 2; i++) {
                for (uint32_t j = 0; j < 3; j++) {
                    kf_tensor *ai = matrix_of(a, i), *bj = matrix_of(b, j), *ci = NULL;
                    kf_tensor *dci = matrix_of(dc, i * 3 + j), *cij = matrix_of(c, i * 3 + j);
                    KT_CHECK_OK(spec_forward(mm, &p, ai, bj, &ci));
                    KT_CHECK(kf_tensor_approx_eq(ci, cij, 1e-6), "product (%u, %u) ta=%d tb=%d", i,
                             j, ta, tb);
                    kf_tensor *dai, *dbj;
                    KT_CHECK_OK(kf_tensor_create(&ai->shape, &dai));
                    KT_CHECK_OK(kf_tensor_create(&bj->shape, &dbj));
                    const kf_tensor *in2[2] = {ai, bj};
                    kf_tensor *g2[2] = {dai, dbj};
                    KT_CHECK_OK(mm->spec_backward(in2, ci, dci, &p, g2));
                    for (uint32_t e = 0; e < 35; e++) {
                        sum_a[i][e] += dai->data[e];
                    }
                    for (uint32_t e = 0; e < 28; e++) {
                        sum_b[j][e] += dbj->data[e];
                    }
                    kf_tensor *all[] = {ai, bj, ci, dci, cij, dai, dbj};
                    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
                        kf_tensor_destroy(all[t]);
                    }
                }
            }
            for (uint32_t e = 0; e < 70; e++) {
                double want_a = sum_a[e / 35][e % 35];
                KT_CHECK(fabs(da->data[e] - want_a) <= 1e-5 * (1 + fabs(want_a)),
                         "da[%u] = %g, want %g (ta=%d tb=%d)", e, da->data[e], want_a, ta, tb);
            }
            for (uint32_t e = 0; e < 84; e++) {
                double want_b = sum_b[e / 28][e % 28];
                KT_CHECK(fabs(db->data[e] - want_b) <= 1e-5 * (1 + fabs(want_b)),
                         "db[%u] = %g, want %g (ta=%d tb=%d)", e, db->data[e], want_b, ta, tb);
            }
            kf_tensor *all[] = {a, b, c, dc, da, db};
            for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
                kf_tensor_destroy(all[t]);
            }
        }
    }
}

/* A batch with b shared by every product (and a not transposed) is one [B*M, K] x [K, N]
 * product: the same kernel (WGSL and grid) as the rank-2 product, tiled and register-blocked,
 * for the forward and both gradients. */
KT_CPU_TEST(ops, matmul_batch_with_shared_b_is_one_product) {
    const kf_operator *mm = kf_op_find("matmul");
    const struct {
        kf_shape batched[2], flat[2];
        kf_op_params p;
    } cases[] = {
        {.batched = {SHAPE3(3, 7, 13), SHAPE2(13, 5)}, .flat = {SHAPE2(21, 13), SHAPE2(13, 5)}},
        {.batched = {SHAPE4(2, 2, 32, 24), SHAPE3(1, 24, 72)},
         .flat = {SHAPE2(128, 24), SHAPE2(24, 72)}},
        {.batched = {SHAPE3(3, 7, 13), SHAPE2(5, 13)},
         .flat = {SHAPE2(21, 13), SHAPE2(5, 13)},
         .p = {.transpose_b = true}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int which = -1; which < 2; which++) {
            kf_kernel *kb =
                which < 0 ? kf_op_kernel_forward(mm, cases[c].batched, &cases[c].p, KF_DTYPE_F32)
                          : mm->kernel_backward(cases[c].batched, &cases[c].p, KF_DTYPE_F32,
                                                (uint32_t)which);
            kf_kernel *kf = which < 0
                                ? kf_op_kernel_forward(mm, cases[c].flat, &cases[c].p, KF_DTYPE_F32)
                                : mm->kernel_backward(cases[c].flat, &cases[c].p, KF_DTYPE_F32,
                                                      (uint32_t)which);
            char *wb = kb ? kf_kernel_emit_wgsl(kb) : NULL,
                 *wf = kf ? kf_kernel_emit_wgsl(kf) : NULL;
            KT_CHECK(wb && wf && !strcmp(wb, wf), "case %zu (%d): the batched kernel differs:\n%s",
                     c, which, wb ? wb : "");
            uint32_t gb[3], gf[3];
            mm->grid(cases[c].batched, &cases[c].p, which, gb);
            mm->grid(cases[c].flat, &cases[c].p, which, gf);
            KT_CHECK(!memcmp(gb, gf, sizeof gb), "case %zu (%d): grids differ", c, which);
            kf_free(wb);
            kf_free(wf);
            kf_kernel_destroy(kb);
            kf_kernel_destroy(kf);
        }
    }
}

KT_CPU_TEST(ops, matmul_batched_shape_errors) {
    const kf_operator *mm = kf_op_find("matmul");
    char msg[256];
    kf_shape out;
    kf_shape bad[2] = {SHAPE3(3, 4, 5), SHAPE3(2, 5, 6)};
    KT_CHECK(kf_op_shape(mm, bad, &(kf_op_params){0}, &out, msg, sizeof msg) == KF_ERROR_SHAPE,
             "batch dims 3 and 2 do not broadcast");
    KT_CHECK(strstr(msg, "batch dims") && strstr(msg, "3x4x5") && strstr(msg, "2x5x6"),
             "the message names both shapes: %s", msg);
    kf_shape vec[2] = {SHAPE1(5), SHAPE3(2, 5, 6)};
    KT_CHECK(kf_op_shape(mm, vec, &(kf_op_params){0}, &out, msg, sizeof msg) == KF_ERROR_SHAPE &&
                 strstr(msg, "rank 2 to 4"),
             "a vector is refused: %s", msg);
    kf_shape ok[2] = {SHAPE4(2, 1, 4, 5), SHAPE3(3, 6, 5)};
    KT_CHECK_OK(kf_op_shape(mm, ok, &(kf_op_params){.transpose_b = true}, &out, msg, sizeof msg));
    kf_shape want = SHAPE4(2, 3, 4, 6);
    KT_CHECK(kf_shape_eq(&out, &want), "[2,1,4,5] x [3,6,5]^T is [2,3,4,6]");
}
