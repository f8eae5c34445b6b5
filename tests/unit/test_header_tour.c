/* include/kfuse.h opens with a tour: the code between the markers below, which the header shows
 * verbatim (checked here), and which runs here as a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

// tour begin
static kf_val relu(kf_kernel *k, kf_val x, void *user) { // the body of an element-wise stage
    (void)user;
    return kf_call2(k, KF_FN_MAX, x, kf_lit_f32(k, 0.0f));
}

static int tour(void) {
    kf_context *ctx;
    kf_context_desc desc = {0}; // zero means default everywhere
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        return 1; // desc.error_out, when given, says what to install
    }
    // Kernels are values: an operator's kernel composed with a stage is one kernel.
    kf_shape mm_shapes[2] = {kf_shape_2d(64, 128), kf_shape_2d(128, 256)};
    kf_kernel *mm = kf_op_kernel_forward(kf_op_find("matmul"), mm_shapes, NULL, KF_DTYPE_F32);
    uint32_t wg[3];
    kf_kernel_workgroup_size(mm, wg);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *act = kf_kernel_map("relu", f32, f32, wg, relu, NULL);
    kf_kernel *fused = kf_kernel_then(mm, act); // matmul |> relu, one kernel
    char *wgsl = kf_kernel_emit_wgsl(fused);    // or kf_kernel_run(ctx, fused, &launch)

    // Or let the planner fuse a lazy graph, run it, and prove it against the CPU specs.
    kf_graph *g = kf_graph_create();
    kf_shape xs = kf_shape_2d(64, 128), ws = kf_shape_2d(128, 256), bs = kf_shape_1d(256);
    kf_node x = kf_graph_input(g, "x", &xs, KF_DTYPE_F32);
    kf_node w = kf_graph_input(g, "w", &ws, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &bs, KF_DTYPE_F32);
    kf_node h = kf_graph_add(g, kf_graph_matmul(g, x, w), b);
    kf_graph_output(g, "y", kf_graph_unary(g, "gelu", h));
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan); // gelu runs in the store phase
    kf_plan_report report;
    if (st == KF_OK) {
        st = kf_plan_verify(plan, 42, &report); // fresh inputs, outputs poisoned, all compared
    }
    // Then run it on your data as often as you like.
    kf_tensor *xt = NULL, *y = NULL;
    kf_shape ys = kf_shape_2d(64, 256);
    if (st == KF_OK) {
        st = kf_plan_random_input(plan, "x", 1, &xt); // stands for your tensor
    }
    if (st == KF_OK) {
        st = kf_plan_set_input(plan, "x", xt); // w and b keep the values verify drew
    }
    if (st == KF_OK) {
        st = kf_plan_run(plan);
    }
    if (st == KF_OK && (st = kf_tensor_create(&ys, &y)) == KF_OK) {
        st = kf_plan_get_output(plan, "y", y);
    }
    if (st != KF_OK) {
        fprintf(stderr, "%s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
    }
    kf_tensor_destroy(xt);
    kf_tensor_destroy(y);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_free(wgsl);
    kf_kernel_destroy(fused);
    kf_kernel_destroy(act);
    kf_kernel_destroy(mm);
    kf_context_destroy(ctx);
    return st == KF_OK && wgsl ? 0 : 1;
}
// tour end

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

KT_TEST(unit, header_tour_runs) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    KT_CHECK(tour() == 0, "the header's tour failed");
}

/* Each line of the tour appears in the header's opening comment as " * " + line, in order. */
KT_CPU_TEST(unit, header_tour_is_in_the_header) {
    char *header = slurp(KF_SOURCE_DIR "/include/kfuse.h");
    char *self = slurp(KF_SOURCE_DIR "/tests/unit/test_header_tour.c");
    KT_CHECK(header && self, "cannot read the header or this file");
    char *comment_end = strstr(header, "*/");
    char *begin = strstr(self, "// tour begin\n");
    char *end = begin ? strstr(begin, "// tour end\n") : NULL;
    KT_CHECK(comment_end && begin && end, "markers missing");
    *comment_end = '\0';
    char *at = header;
    uint32_t lines = 0;
    for (char *line = begin + strlen("// tour begin\n"); line < end;) {
        char *nl = strchr(line, '\n');
        char want[256];
        int len = (int)(nl - line);
        snprintf(want, sizeof want, len ? "\n * %.*s\n" : "\n *\n", len, line);
        char *found = strstr(at, want);
        KT_CHECK(found, "the header's tour lacks (or reorders) line %u:\n%.*s", lines + 1, len,
                 line);
        at = found + strlen(want) - 1;
        line = nl + 1;
        lines++;
    }
    KT_CHECK(lines > 30, "%u tour lines", lines);
    free(header);
    free(self);
}
