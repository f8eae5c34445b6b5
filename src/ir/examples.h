/* Named example kernels built with the public builder: what `kfuse wgsl NAME` prints, what the
 * golden WGSL files hold, and what the docs show. */
#ifndef KF_IR_EXAMPLES_H
#define KF_IR_EXAMPLES_H

#include "kfuse.h"

typedef struct kf__example {
    const char *name;
    const char *about;
    kf_kernel *(*build)(void);
} kf__example;

uint32_t kf__example_count(void);
const kf__example *kf__example_at(uint32_t index);
/* The example's kernel (the caller destroys it), or NULL when the name is unknown. */
kf_kernel *kf__example_build(const char *name);

/* The pieces, for tests that run them on inputs they choose. */
kf_val kf__example_gelu_tanh(kf_kernel *k, kf_val x, void *user); /* 0.5 x (1 + tanh(...)) */
kf_val kf__example_relu(kf_kernel *k, kf_val x, void *user);
kf_val kf__example_affine(kf_kernel *k, kf_val x, void *user); /* x * 2 + 1 */
/* C = A (m x kdim) * B (kdim x n) with overrides m, n, k; bindings a, b, out; yields C[row, col]
 * at row * n + col from a loop over rows (two yields per invocation). Grid: 16x16 workgroups
 * over (n, m / 2). */
kf_kernel *kf__example_matmul(void);
/* A stage adding bias[index % n] (override n), for matmul |> bias. */
kf_kernel *kf__example_bias(void);

#endif
