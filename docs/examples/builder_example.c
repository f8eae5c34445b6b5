/* Row sums of a matrix, through tanh, as one kernel: build a producer and a stage, compose them
 * with |>, print the WGSL, run it on the GPU and in the CPU interpreter, compare.
 * Build: cc builder_example.c $(pkg-config --cflags --libs kfuse) -lm */
#include <kfuse.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 1000, COLS = 37 };

/* A producer: invocation r sums row r of x (cols is an override) and yields the sum at r. */
static kf_kernel *row_sums(void) {
    kf_kernel_desc desc = {0};
    desc.name = "row_sums";
    desc.workgroup_size[0] = 64;
    desc.output = kf_type_scalar(KF_SCALAR_F32); /* it has a store phase */
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_binding x = kf_kernel_storage(k, "x", f32, KF_ACCESS_READ);
    kf_val rows = kf_kernel_override(k, "rows", u32, 1);
    kf_val cols = kf_kernel_override(k, "cols", u32, 1);
    kf_val row = kf_let(k, "row", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, row, rows));
    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0.0f));
    kf_val c = kf_for(k, "c", kf_lit_u32(k, 0), cols, kf_lit_u32(k, 1));
    kf_val v = kf_load(k, x, kf_add(k, kf_mul(k, row, cols), c));
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), v));
    kf_end(k); /* for */
    kf_kernel_yield(k, kf_read(k, acc), row);
    kf_end(k); /* if */
    return k;  /* no error checks above: the first error, if any, is kept on k */
}

/* The element-wise part, the seeds' mapK: In -> tanh(In / 4). */
static kf_val squash(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    return kf_call1(k, KF_FN_TANH, kf_div(k, x, kf_lit_f32(k, 4.0f)));
}

int main(void) {
    kf_kernel *sums = row_sums();
    const uint32_t wg[3] = {64, 1, 1}; /* |> needs equal workgroup sizes */
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *tanh4 = kf_kernel_map("tanh4", f32, f32, wg, squash, NULL);
    kf_kernel *fused = kf_kernel_then(sums, tanh4); /* sums |> tanh4: tanh runs in the store */
    if (kf_kernel_status(fused) != KF_OK) {
        fprintf(stderr, "%s\n", kf_kernel_error(fused));
        return 1;
    }
    char *wgsl = kf_kernel_emit_wgsl(fused);
    printf("%s\n", wgsl);
    kf_free(wgsl);

    /* inputs, and the launch both runs share: bindings x, out; one invocation per row */
    float *x = malloc(sizeof(float) * ROWS * COLS);
    float *gpu = malloc(sizeof(float) * ROWS), *cpu = malloc(sizeof(float) * ROWS);
    for (int i = 0; i < ROWS * COLS; i++) {
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    }
    kf_constant shape[2] = {{"rows", ROWS}, {"cols", COLS}};

    /* on the CPU */
    kf_host_buffer host[2] = {{x, sizeof(float) * ROWS * COLS}, {cpu, sizeof(float) * ROWS}};
    kf_interp_desc idesc = {0};
    idesc.buffers = host;
    idesc.buffer_count = 2;
    idesc.elements = ROWS; /* invocations; the groups follow from the workgroup size */
    idesc.constants = shape;
    idesc.constant_count = 2;
    if (kf_kernel_interpret(fused, &idesc) != KF_OK) {
        fprintf(stderr, "interpreter: %s\n", kf_kernel_error(fused));
        return 1;
    }

    /* on the GPU */
    kf_context *ctx = NULL;
    kf_context_desc cdesc = {0};
    if (kf_context_create(&cdesc, &ctx) != KF_OK) {
        fprintf(stderr, "no WebGPU device: run scripts/setup.sh\n");
        return 1;
    }
    kf_buffer *bufs[2] = {NULL, NULL};
    kf_buffer_create(ctx, sizeof(float) * ROWS * COLS, &bufs[0]);
    kf_buffer_create(ctx, sizeof(float) * ROWS, &bufs[1]);
    kf_buffer_upload(bufs[0], 0, x, sizeof(float) * ROWS * COLS);
    kf_buffer_fill_u32(bufs[1], 0x7fc00000u); /* NaN: an element not written shows */
    kf_kernel_launch launch = {0};
    launch.buffers = bufs;
    launch.buffer_count = 2;
    launch.elements = ROWS;
    launch.constants = shape;
    launch.constant_count = 2;
    kf_status st = kf_kernel_run(ctx, fused, &launch);
    if (st == KF_OK) {
        st = kf_buffer_download(bufs[1], 0, gpu, sizeof(float) * ROWS);
    }
    if (st != KF_OK) {
        fprintf(stderr, "GPU: %s: %s\n", kf_status_str(st), kf_kernel_error(fused));
        return 1;
    }

    /* the same numbers, and what float64 says */
    double worst = 0, worst_ref = 0;
    for (int r = 0; r < ROWS; r++) {
        double sum = 0;
        for (int c = 0; c < COLS; c++) {
            sum += x[r * COLS + c];
        }
        worst = fmax(worst, fabs((double)gpu[r] - cpu[r]));
        worst_ref = fmax(worst_ref, fabs((double)gpu[r] - tanh(sum / 4.0)));
    }
    printf("GPU vs interpreter: max abs difference %.3g; GPU vs float64: %.3g\n", worst, worst_ref);

    for (int i = 0; i < 2; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    kf_context_destroy(ctx);
    kf_kernel_destroy(sums);
    kf_kernel_destroy(tanh4);
    kf_kernel_destroy(fused);
    free(x);
    free(gpu);
    free(cpu);
    return worst <= 1e-6 && worst_ref <= 1e-5 ? 0 : 1;
}
