/* Views in plans: a reshape of a value in memory is free (no dispatch: its reader binds the same
 * buffer), a permute, slice or concat is read in place by the element-wise loads of its readers,
 * and a view is copied only where its reader cannot read it strided (a matmul, a reduction),
 * which explain says. Each: fewer dispatches, and the same numbers as the unfused plan (views
 * move values exactly, so what a group computes on them agrees within its tolerance) and as the
 * CPU specs (kf_plan_verify). */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

/* Fused and unfused plans of program, both verified on the same inputs and their outputs
 * compared element by element; the fused dispatch count must be `want` (unfused: `unfused`), and
 * `needle` (may be NULL) must appear in the fused plan's explain text. */
static void expect_views(const char *program, uint32_t want, uint32_t unfused, const char *needle) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse(program);
    if (!g) {
        return;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options no_fuse = {.no_fuse = true};
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &pf));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &no_fuse, &pu));
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    char *text = pf ? kf_plan_explain(pf, false) : NULL;
    KT_CHECK(pf && kf_plan_verify(pf, seed, &rf) == KF_OK, "fused plan fails verification: %s\n%s",
             kf_context_last_error(ctx), text ? text : "");
    KT_CHECK(pu && kf_plan_verify(pu, seed, &ru) == KF_OK, "unfused plan fails verification: %s",
             kf_context_last_error(ctx));
    for (uint32_t o = 0; pf && pu && o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        KT_CHECK_OK(kf_tensor_create(&shape, &a));
        KT_CHECK_OK(kf_tensor_create(&shape, &b));
        KT_CHECK_OK(kf_plan_get_output(pf, name, a));
        KT_CHECK_OK(kf_plan_get_output(pu, name, b));
        uint64_t n = kf_tensor_size(a);
        double err = kf_max_rel_error(a->data, b->data, n, 0.01);
        KT_CHECK(err <= rf.outputs[o].tolerance, "%s: fused and unfused differ by %.3g (tol %.3g)",
                 name, err, rf.outputs[o].tolerance);
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s = {0};
    if (pf) {
        kf_plan_summary_get(pf, &s);
    }
    KT_CHECK(s.dispatches == want && s.unfused_dispatches == unfused,
             "%s\n    dispatches: fused %u (want %u), unfused %u (want %u)\n%s", program,
             s.dispatches, want, s.unfused_dispatches, unfused, text ? text : "");
    KT_CHECK(!needle || (text && strstr(text, needle)), "'%s' not in:\n%s", needle ? needle : "",
             text ? text : "");
    kf_free(text);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
}

KT_TEST(fusion, reshape_of_a_value_in_memory_is_free) {
    /* read by two kernels (so no prologue takes it): each binds x's buffer as a 12x32 matrix */
    expect_views("x: f32[4, 96]\nw: f32[32, 16]\nr = reshape(x, shape=[12, -1])\n"
                 "y = matmul(r, w)\nz = transpose(r)\nout y, z\n",
                 2, 3, "reads:  x f32[4x96]");
    /* through a reduction's result and into a reduction, and chained */
    expect_views("x: f32[6, 35]\ns = sum(x) |> reshape(shape=[2, 3]) |> reshape(shape=[3, 2])\n"
                 "y = softmax(s)\n",
                 2, 4, NULL);
}

/* A free reshape of a value a later pass moves into another group (cross_entropy's gradient, a
 * side of the fused classifier): its readers still run after that group (levels follow the
 * buffer's writer, not the group the value had when the reshape was freed). */
KT_TEST(fusion, a_free_reshape_is_ordered_after_its_buffers_writer) {
    expect_views("x: f32[12, 16]\nw: f32[16, 7]\nl: i32[3, 4]\n"
                 "logits = matmul(tanh(x), w) |> matmul(transpose(w)) |> matmul(w)\n"
                 "    |> reshape(shape=[3, 4, 7])\n"
                 "loss = cross_entropy(logits, l)\n"
                 "dw = grad(loss, w)\nout loss, dw\n",
                 12, 18, "reads:  cross_entropy_grad");
}

KT_TEST(fusion, permute_is_read_in_place_by_element_wise_loads) {
    /* [B, T, H, D] -> [B, H, T, D], a bias and an activation: one kernel, strided loads */
    expect_views("x: f32[2, 7, 3, 16]\nb: f32[16]\n"
                 "y = permute(x, axes=[0, 2, 1, 3]) |> add(b) |> gelu\n",
                 1, 3, "views read in place");
    /* heads split and merged back around an element-wise op: reshape |> permute chains */
    expect_views("x: f32[5, 24]\n"
                 "h = reshape(x, shape=[5, 3, 8]) |> permute(axes=[1, 0, 2]) |> scale(2)\n"
                 "y = permute(h, axes=[1, 0, 2]) |> reshape(shape=[5, 24]) |> add(x)\n",
                 2, 6, NULL); /* the scaled value is permuted: it is written first */
}

KT_TEST(fusion, split_qkv_slices_are_read_in_place) {
    /* q, k, v from one [T, 3C] tensor, combined element-wise: one dispatch reading qkv once */
    expect_views("qkv: f32[9, 48]\n"
                 "q = slice(qkv, axis=-1, start=0, length=16)\n"
                 "k = slice(qkv, axis=-1, start=16, length=16)\n"
                 "v = slice(qkv, axis=-1, start=32, length=16)\n"
                 "y = mul(k, v) |> add(q) |> tanh\n",
                 1, 6, "views read in place");
    /* concat of two inputs then element-wise, and a slice of the concat (a chain of views) */
    expect_views("a: f32[3, 5, 7]\nb: f32[3, 2, 7]\n"
                 "c = concat(a, b, axis=1) |> slice(axis=1, start=4, length=3) |> exp\n",
                 1, 3, NULL);
}

KT_TEST(fusion, a_permute_of_the_last_two_axes_is_a_matmul_transpose_flag) {
    /* both operands, and a transpose flag already set: one matmul dispatch, no copy */
    expect_views("a: f32[19, 7]\nb: f32[19, 13]\n"
                 "y = matmul(permute(a, axes=[1, 0]), permute(b, axes=[-1, 0]), transpose_b=true)\n"
                 "|> add(1)\n",
                 1, 4, "reads:  a f32[19x7], b f32[19x13]");
    /* a permute read by something else too stays a value of its own */
    expect_views("a: f32[5, 6]\nw: f32[5, 3]\nt = permute(a, axes=[1, 0])\n"
                 "y = matmul(t, w)\nz = t |> exp\nout y, z\n",
                 2, 3, NULL);
}

/* The backward of a q, k, v split: each slice's zero-padded gradient (slice_grad, a view that
 * is 0 outside the slice) and their sum, in one kernel reading the three gradients in place. */
KT_TEST(fusion, slice_gradients_sum_in_one_dispatch) {
    expect_views("x: f32[5, 12]\ndq: f32[5, 4]\ndk: f32[5, 4]\ndv: f32[5, 4]\n"
                 "y = add(slice_grad(x, dq, axis=1, start=0, length=4),\n"
                 "        slice_grad(x, dk, axis=1, start=4, length=4))\n"
                 "    |> add(slice_grad(x, dv, axis=1, start=8, length=4))\n",
                 1, 5, "slice_grad |> slice_grad |> add");
}

/* Heads merged back before the output projection ([H, T, D] -> [T, H, D] -> [T, C]) and a
 * permuted row reduction: the permute runs in the kernel's loads (a prologue loading its
 * input at the permuted element), no copy. */
KT_TEST(fusion, a_permute_is_read_in_place_by_a_matmul_or_reduction_prologue) {
    expect_views("x: f32[4, 6, 8]\nw: f32[32, 5]\n"
                 "y = permute(x, axes=[1, 0, 2]) |> reshape(shape=[6, 32]) |> matmul(w)\n",
                 1, 3, "matmul prologue");
    expect_views("x: f32[3, 5, 7]\ny = permute(x, axes=[2, 0, 1]) |> scale(2) |> softmax\n", 1, 3,
                 "reduction prologue");
}

KT_TEST(fusion, views_a_matmul_reads_are_copied_and_explain_says_why) {
    expect_views("x: f32[8, 40]\nw: f32[16, 5]\n"
                 "y = matmul(slice(x, axis=1, start=8, length=16), w)\n",
                 2, 2, "view copy (a matmul loads it contiguously)");
    expect_views("x: f32[8, 40]\ny = slice(x, axis=1, start=8, length=16) |> softmax\n", 2, 2,
                 "view copy (a row reduction loads it contiguously)");
    /* read by two kernels: written once, like any value read twice */
    expect_views("x: f32[4, 6]\nw: f32[4, 3]\nt = slice(x, axis=1, start=1, length=4)\n"
                 "y = matmul(t, w)\nz = t |> exp\nout y, z\n",
                 3, 3, "view copy (read more than once)");
    /* a view that is an output is written as itself */
    expect_views("x: f32[3, 4]\ny = permute(x, axes=[1, 0])\n", 1, 1, "view copy (an output)");
}

/* A small attention-shaped training graph: embedding, qkv split, heads, matmuls, gradients of
 * the table and the weight. Fused against unfused and the specs. */
KT_TEST(fusion, views_in_a_training_graph_match_unfused) {
    expect_views("ids: i32[2, 6]\nparam emb: f32[13, 16]\nparam w: f32[16, 48]\n"
                 "x = embedding(emb, ids) |> reshape(shape=[12, 16])\n"
                 "qkv = matmul(x, w)\n"
                 "q = slice(qkv, axis=1, start=0, length=16) |> reshape(shape=[2, 6, 2, 8])\n"
                 "k = slice(qkv, axis=1, start=16, length=16) |> reshape(shape=[2, 6, 2, 8])\n"
                 "v = slice(qkv, axis=1, start=32, length=16)\n"
                 "h = mul(permute(q, axes=[0, 2, 1, 3]), permute(k, axes=[0, 2, 1, 3]))\n"
                 "o = permute(h, axes=[0, 2, 1, 3]) |> reshape(shape=[12, 16]) |> add(v)\n"
                 "loss = mean(mean(o |> square))\n"
                 "demb, dw = grad(loss, emb, w)\n"
                 "out loss, demb, dw\n",
                 15, 38, "slice_grad |> add");
}
