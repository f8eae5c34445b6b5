/* Backward fusions: the bias gradient as a second output of a kernel that reads dY
 * (src/fuse/rules/bias_grad.c), a loss and its gradient in one kernel (rules/classifier.c), a
 * norm's backward in two kernels. Each case: the dispatch count fused and unfused, kf_plan_verify
 * of both plans (every group, each side of a multi-output group on its own, and every output
 * against the unfused composition of the CPU specs), and the fused outputs against the unfused
 * plan's on the same inputs. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s\n%s", err.line, err.column, err.message,
                text);
        return NULL;
    }
    return g;
}

typedef struct expect {
    uint32_t fused, unfused;
    uint32_t checks;       /* the fused report's group checks (a multi-output group: one each) */
    const char *explained; /* a phrase the fused plan's explain holds, or NULL */
    uint32_t max_bindings; /* kf_compile_options.max_storage_buffers (0: the device's) */
} expect;

/* Compiles program fused and unfused, verifies both with one seed, compares the fused outputs
 * with the unfused ones, and checks the dispatch counts. */
static void expect_plan(const char *program, expect want) {
    kf_context *ctx = kt_context();
    if (!ctx) {
        kt_fail(__FILE__, __LINE__, "no WebGPU adapter: run scripts/setup.sh");
        return;
    }
    kf_graph *g = parse(program);
    if (!g) {
        return;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options fo = {.max_storage_buffers = want.max_bindings};
    kf_compile_options uo = {.no_fuse = true};
    kf_status st = kf_graph_compile(ctx, g, &fo, &pf);
    if (st == KF_OK) {
        st = kf_graph_compile(ctx, g, &uo, &pu);
    }
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s: %s\n%s", kf_status_str(st),
                kf_context_last_error(ctx), program);
        kf_plan_destroy(pf);
        kf_graph_destroy(g);
        return;
    }
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    kf_status sf = kf_plan_verify(pf, seed, &rf);
    kf_status su = kf_plan_verify(pu, seed, &ru);
    char *text = kf_plan_explain(pf, false);
    if (sf != KF_OK || su != KF_OK) {
        kt_fail(__FILE__, __LINE__, "verify fused: %s, unfused: %s\n%s\n%s", kf_status_str(sf),
                kf_status_str(su), program, text ? text : "");
        for (uint32_t i = 0; i < rf.group_count; i++) {
            fprintf(stderr, "    group %u (%s -> %s): err %.3g tol %.3g%s\n", rf.groups[i].dispatch,
                    rf.groups[i].ops, rf.groups[i].result, rf.groups[i].max_rel_error,
                    rf.groups[i].tolerance, rf.groups[i].passed ? "" : " FAILED");
        }
    }
    for (uint32_t o = 0; sf == KF_OK && su == KF_OK && o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        kf_tensor_create(&shape, &a);
        kf_tensor_create(&shape, &b);
        bool got = a && b && kf_plan_get_output(pf, name, a) == KF_OK &&
                   kf_plan_get_output(pu, name, b) == KF_OK;
        double rms = 0.0;
        uint64_t count = got ? kf_tensor_size(b) : 0;
        for (uint64_t i = 0; i < count; i++) {
            rms += (double)b->data[i] * b->data[i];
        }
        rms = count && isfinite(rms) ? sqrt(rms / (double)count) : 0.0;
        double err = got ? kf_max_rel_error(a->data, b->data, count, 0.01 * rms) : INFINITY;
        double tol = INFINITY;
        for (uint32_t r = 0; r < rf.output_count; r++) {
            tol = rf.outputs[r].index == o ? rf.outputs[r].tolerance : tol;
        }
        KT_CHECK(err <= tol, "%s: output %s, fused against unfused: %.3g (tolerance %.3g)", program,
                 name, err, tol);
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s = {0}, su_ = {0};
    kf_plan_summary_get(pf, &s);
    kf_plan_summary_get(pu, &su_);
    KT_CHECK(s.dispatches == want.fused && su_.dispatches == want.unfused,
             "%s\n    dispatches: fused %u (want %u), unfused %u (want %u)\n%s", program,
             s.dispatches, want.fused, su_.dispatches, want.unfused, text ? text : "");
    KT_CHECK(!want.checks || rf.total_groups == want.checks,
             "%s: %u group checks (want %u: each side on its own)", program, rf.total_groups,
             want.checks);
    KT_CHECK(!want.explained || (text && strstr(text, want.explained)),
             "%s: explain does not say '%s':\n%s", program, want.explained, text ? text : "");
    KT_CHECK(s.bytes <= s.unfused_bytes, "fused moves more bytes than unfused");
    kf_free(text);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
}

/* dW = X^T dY and db = sum_leading(dY): one dispatch, db summed from the dY tiles the product
 * loads (and dW^T = dY^T X likewise). Shapes: 1x1x1; primes below a tile; several 16-row steps of M
 * with a ragged last one, several tile rows of dW (only the first sums) and tile columns (each sums
 * its own); and a moderate case. */
KT_TEST(fusion, bias_gradient_rides_in_the_dw_matmul) {
    const uint32_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {70, 33, 40}, {256, 128, 96}};
    char program[512];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint32_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
        snprintf(program, sizeof program,
                 "x: f32[%u,%u]\ndy: f32[%u,%u]\ndw = matmul(x, dy, transpose_a=true)\n"
                 "db = sum_leading(dy)\nout dw, db\n",
                 m, k, m, n);
        expect_plan(
            program,
            (expect){.fused = 1, .unfused = 2, .checks = 2, .explained = "matmul + bias gradient"});
    }
    /* dW^T = dY^T X (a weight stored [out, in], read with transpose_b): dY is A, read
     * transposed, and the first column of tiles sums it */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint32_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
        snprintf(program, sizeof program,
                 "x: f32[%u,%u]\ndy: f32[%u,%u]\ndwt = matmul(dy, x, transpose_a=true)\n"
                 "db = sum_leading(dy)\nout dwt, db\n",
                 m, k, m, n);
        expect_plan(program, (expect){.fused = 1, .unfused = 2, .checks = 2});
    }
    /* Past 2^24 multiply-adds an f32 dW runs on the register-blocked kernel, far faster than
     * the tiled one that sums: db keeps a dispatch of its own (column_sums.c, SUMS_MAX_FLOPS). */
    expect_plan("x: f32[1024,128]\ndy: f32[1024,160]\ndw = matmul(x, dy, transpose_a=true)\n"
                "db = sum_leading(dy)\nout dw, db\n",
                (expect){.fused = 2, .unfused = 2, .checks = 2});
    /* (2: the loss is not an output, so only its gradient runs: sum's gradient of the seed is a
     * constant, mul's is r itself, so dY = r tanh'(pre) is the forward matmul's epilogue; then
     * dW with db) */
    expect_plan("x: f32[29,17]\nw: f32[11,17]\nb: f32[11]\nr: f32[29,11]\n"
                "y = matmul(x, w, transpose_b=true) |> add(b) |> tanh\n"
                "loss = sum(sum(mul(y, r)))\ndw, db = grad(loss, w, b)\nout dw, db\n",
                (expect){.fused = 2, .unfused = 12, .explained = "-> dw f32[11x17], db f32[11]"});
    /* with an epilogue on dW and a prologue on X (h = gelu(pre) recomputed in the loads) */
    expect_plan(
        "pre: f32[37,19]\ndy: f32[37,23]\n"
        "dw = matmul(gelu(pre), dy, transpose_a=true) |> scale(0.5)\n"
        "db = sum_leading(dy)\nout dw, db\n",
        (expect){
            .fused = 1, .unfused = 4, .checks = 2, .explained = "matmul prologue + bias gradient"});
    /* a linear layer's gradients through grad(): dW and db in one dispatch (and tanh's
     * pre-activation saved by the forward kernel: src/fuse/rules/activation_save.c) */
    expect_plan("x: f32[29,17]\nw: f32[17,11]\nb: f32[11]\nr: f32[29,11]\n"
                "y = matmul(x, w) |> add(b) |> tanh\nloss = sum(sum(mul(y, r)))\n"
                "dw, db = grad(loss, w, b)\nout dw, db\n",
                (expect){.fused = 2,
                         .unfused = 12,
                         .explained = "matmul + sum_leading -> dw f32[17x11], db f32[11]"});
}

KT_TEST(fusion, bias_gradient_legality) {
    /* the product reads the sum (its X is x + db): merging would read db before writing it */
    expect_plan("x: f32[8,5]\ndy: f32[8,5]\ndb = sum_leading(dy)\n"
                "dw = matmul(add(x, db), dy, transpose_a=true)\nout dw, db\n",
                (expect){.fused = 2, .unfused = 3});
    /* dY's rows not the product's K axis (dY read as a plain A, or as a transposed B): its
     * column sums are not what the tiles hold */
    expect_plan("x: f32[9,5]\ndy: f32[6,9]\ndw = matmul(dy, x)\ndb = sum_leading(dy)\n"
                "out dw, db\n",
                (expect){.fused = 2, .unfused = 2});
    expect_plan("x: f32[9,5]\ndy: f32[6,5]\ndw = matmul(x, dy, transpose_b=true)\n"
                "db = sum_leading(dy)\nout dw, db\n",
                (expect){.fused = 2, .unfused = 2});
    /* dY read twice by the product (dY dY, plain): its second input is the one summed */
    expect_plan("dy: f32[9,9]\nw = matmul(dy, dy)\ndb = sum_leading(dy)\nout w, db\n",
                (expect){.fused = 1, .unfused = 2, .checks = 2});
    /* the binding budget: a, b, the sums and out are 4; with 3 the sum stays a kernel */
    expect_plan("x: f32[9,5]\ndy: f32[9,6]\ndw = matmul(x, dy, transpose_a=true)\n"
                "db = sum_leading(dy)\nout dw, db\n",
                (expect){.fused = 2, .unfused = 2, .max_bindings = 3});
    expect_plan("x: f32[9,5]\ndy: f32[9,6]\ndw = matmul(x, dy, transpose_a=true)\n"
                "db = sum_leading(dy)\nout dw, db\n",
                (expect){.fused = 1, .unfused = 2, .max_bindings = 4});
}

/* layernorm and rmsnorm backward (dx, dw, db): dx one row kernel, dw with db riding along in
 * the column kernel: two. Shapes: one row; primes; three chunks of 256 rows; more columns than
 * a workgroup; a moderate case. */
KT_TEST(fusion, norm_backward_is_two_kernels) {
    const uint32_t shapes[][2] = {{1, 1}, {7, 13}, {600, 7}, {3, 300}, {257, 129}};
    const char *norms[] = {"layernorm", "rmsnorm"};
    char program[640];
    for (size_t n = 0; n < 2; n++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            uint32_t r = shapes[i][0], c = shapes[i][1];
            snprintf(program, sizeof program,
                     "x: f32[%u,%u]\nw: f32[%u]\nb: f32[%u]\ndy: f32[%u,%u]\n"
                     "dx = %s_grad_x(x, w, dy=dy)\ndw = %s_grad_w(x, w, dy=dy)\n"
                     "db = sum_leading(dy)\nout dx, dw, db\n",
                     r, c, c, c, r, c, norms[n], norms[n]);
            expect_plan(program, (expect){.fused = 2,
                                          .unfused = 3,
                                          .checks = 3,
                                          .explained = "reduction + bias gradient"});
        }
    }
    /* through grad(): forward layernorm |> mul(r) and two sums; the sums' gradients are constant
     * and mul's is r itself (no dispatch), then the norm's backward in two: dx, and dw with db */
    expect_plan("x: f32[37,29]\nw: f32[29]\nb: f32[29]\nr: f32[37,29]\n"
                "y = layernorm(x, w, b)\nloss = sum(sum(mul(y, r)))\n"
                "dx, dw, db = grad(loss, x, w, b)\nout loss, dx, dw, db\n",
                (expect){.fused = 5,
                         .unfused = 10,
                         .explained = "layernorm_grad_w + sum_leading -> dw f32[29], db"});
}

/* cross_entropy and its gradient: one kernel for the loss and dlogits (the seed baked in), and
 * what follows fuses as before (the bias gradient of the logits' bias rides in dW). */
KT_TEST(fusion, classifier_loss_and_gradient_in_one_kernel) {
    const uint32_t shapes[][2] = {{1, 1}, {7, 13}, {600, 3}, {5, 300}, {257, 129}};
    char program[512];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        snprintf(program, sizeof program,
                 "logits: f32[%u,%u]\nlabels: i32[%u]\nloss = cross_entropy(logits, labels)\n"
                 "dl = grad(loss, logits)\nout loss, dl\n",
                 shapes[i][0], shapes[i][1], shapes[i][0]);
        expect_plan(
            program,
            (expect){.fused = 1, .unfused = 3, .checks = 2, .explained = "loss + gradient"});
    }
    /* a constant chain on the seed (a scaled loss) is still a constant; the scale is the loss
     * kernel's tail */
    expect_plan("logits: f32[19,7]\nlabels: i32[19]\nloss = cross_entropy(logits, labels)\n"
                "total = scale(loss, 0.25)\ndl = grad(total, logits)\nout total, dl\n",
                (expect){.fused = 1, .unfused = 5, .checks = 2, .explained = "loss + gradient"});
    /* dy that depends on the loss (d square(loss) = 2 loss): the gradient waits for the loss */
    expect_plan("logits: f32[19,7]\nlabels: i32[19]\nloss = cross_entropy(logits, labels)\n"
                "total = square(loss)\ndl = grad(total, logits)\nout total, dl\n",
                (expect){.fused = 3, .unfused = 5});
    /* past one workgroup's share (2^16 logits) the parallel gradient kernel stays */
    expect_plan("logits: f32[300,257]\nlabels: i32[300]\nloss = cross_entropy(logits, labels)\n"
                "dl = grad(loss, logits)\nout loss, dl\n",
                (expect){.fused = 2, .unfused = 3});
}

/* The digits MLP's training graph (examples/digits/mlp.kf with its gradients): 7 dispatches
 * (14 unfused): matmul |> add, gelu, matmul |> add, the loss with dlogits, matmul |> gelu_grad,
 * dW2 + db2, dW1 + db1. */
KT_TEST(fusion, digits_training_graph_backward_fusions) {
    expect_plan("x: f32[64,64]\nlabels: i32[64]\nw1: f32[64,128]\nb1: f32[128]\n"
                "w2: f32[128,10]\nb2: f32[10]\n"
                "h = matmul(x, w1) |> add(b1) |> gelu\nlogits = matmul(h, w2) |> add(b2)\n"
                "loss = cross_entropy(logits, labels)\n"
                "dw1, db1, dw2, db2 = grad(loss, w1, b1, w2, b2)\nout loss, dw1, db1, dw2, db2\n",
                /* 6: gelu in the first matmul's kernel, its pre-activation saved as a side
                 * (src/fuse/rules/activation_save.c); 10 checks: 6 results and 4 sides */
                (expect){.fused = 6,
                         .unfused = 14,
                         .checks = 10,
                         .explained = "-> dw1 f32[64x128], db1 f32[128]"});
}
