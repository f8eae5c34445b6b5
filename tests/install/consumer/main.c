/* A program of a kfuse user, built against an installed kfuse only (tests/install/test.sh):
 * loads the Dawn installed beside libkfuse, runs matmul |> add |> gelu fused and proves it. */
#include <kfuse.h>
#include <stdio.h>

int main(void) {
    char err[2048] = "";
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    kf_context *ctx = NULL;
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "consumer: %s\n", err);
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("library: %s (%s)\n", info.library, info.library_source);
    kf_graph *g = kf_graph_create();
    kf_shape xs = kf_shape_2d(33, 64), ws = kf_shape_2d(64, 17), bs = kf_shape_1d(17);
    kf_node x = kf_graph_input(g, "x", &xs, KF_DTYPE_F32);
    kf_node w = kf_graph_input(g, "w", &ws, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &bs, KF_DTYPE_F32);
    kf_node in[2] = {kf_graph_matmul(g, x, w), b};
    kf_graph_output(g, "y", kf_graph_unary(g, "gelu", kf_graph_op(g, "add", in, 2, NULL)));
    kf_plan *plan = NULL;
    kf_plan_report report;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    if (st == KF_OK) {
        st = kf_plan_verify(plan, 1, &report);
    }
    if (st != KF_OK) {
        fprintf(stderr, "consumer: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
    } else {
        printf("matmul |> add |> gelu verified (max rel error %.3g)\n",
               report.outputs[0].max_rel_error);
    }
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_context_destroy(ctx);
    return st == KF_OK ? 0 : 1;
}
