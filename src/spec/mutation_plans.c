/* The fused plans the mutation campaign (src/fuse/mutation.c) runs beside the operator checks,
 * written in the graph language: this layer may parse them, the campaign's may not (the layering
 * runs spec -> fuse; docs/architecture.md). */
#include "spec/spec_internal.h"

#include <stdio.h>
#include <string.h>

/* The fused plans every mutant meets: deep ones (2 and 3 layer MLPs), norms feeding softmax,
 * element-wise chains side by side, f16, two training graphs. Small shapes, primes among them, so
 * a check is fast. */
static const char *const plan_texts[KF__MUTATION_PLANS] = {
    "x: f32[24, 40]; w1: f32[40, 72]; b1: f32[72]; w2: f32[72, 10]; b2: f32[10]\n"
    "h = matmul(x, w1) |> add(b1) |> gelu\n"
    "y = matmul(h, w2) |> add(b2) |> softmax\nout y",
    "x: f32[13, 48]; w1: f32[48, 64]; b1: f32[64]; w2: f32[64, 33]; b2: f32[33]\n"
    "w3: f32[33, 7]\n"
    "h1 = matmul(x, w1) |> add(b1) |> silu\nh2 = matmul(h1, w2) |> add(b2) |> tanh\n"
    "y = matmul(h2, w3) |> log_softmax\nout y",
    "x: f32[9, 130]; g: f32[130]; b: f32[130]\n"
    "h = layernorm(x, g, b) |> gelu\ny = rmsnorm(h) |> softmax |> scale(3)\n"
    "m = max(y)\ns = sum(h) |> sqrt\nout y, m, s",
    "x: f32[37, 21]; r: f32[21]; c: f32[37, 1]; z: f32[37, 21]\n"
    "a = x |> mul(r) |> add(c) |> exp\nb = z |> sigmoid |> sub(r) |> abs\n"
    "d = z |> maximum(x) |> leaky_relu\nout a, b, d",
    "x: f16[16, 40]; w: f16[40, 24]; b: f16[24]\n"
    "y = matmul(x, w) |> add(b) |> relu |> softmax\nout y",
    "x: f32[11, 64]; w: f32[64, 64]; b: f32[64]\n"
    "t = transpose(x) |> mul(2)\nh = matmul(x, w) |> add(b) |> square |> mean\nout t, h",
    /* a training step's graph: forward, loss and every weight's gradient (kf_graph_grad) */
    "x: f32[12, 20]; w1: f32[20, 36]; b1: f32[36]; w2: f32[36, 5]; b2: f32[5]\n"
    "h = matmul(x, w1) |> add(b1) |> gelu\nlogits = matmul(h, w2) |> add(b2)\n"
    "loss = mean(mean(square(logits)))\ndw1, db1, dw2, db2 = grad(loss, w1, b1, w2, b2)\n"
    "out loss, dw1, db1, dw2, db2",
    /* a classifier's step: the loss with dlogits in one kernel, a linear layer's and a norm's
     * weight and bias gradients each in one (the backward rules' kernels with two outputs) */
    "x: f32[12, 20]; labels: i32[12]; w: f32[20, 7]; b: f32[7]; g: f32[20]; c: f32[20]\n"
    "h = layernorm(x, g, c)\nlogits = matmul(h, w) |> add(b)\n"
    "loss = cross_entropy(logits, labels)\ndw, db, dg, dc = grad(loss, w, b, g, c)\n"
    "out loss, dw, db, dg, dc",
};

kf_status kf__mutation_plans_parse(kf_graph *out[KF__MUTATION_PLANS], char *msg, size_t msg_size) {
    if (msg && msg_size) {
        msg[0] = '\0';
    }
    for (uint32_t i = 0; i < KF__MUTATION_PLANS; i++) {
        out[i] = NULL;
    }
    for (uint32_t i = 0; i < KF__MUTATION_PLANS; i++) {
        kf_spec_error err;
        kf_status st = kf_spec_parse(plan_texts[i], strlen(plan_texts[i]), &out[i], &err);
        if (st != KF_OK) {
            if (msg && msg_size) {
                snprintf(msg, msg_size, "mutation plan %u, line %u: %s", i + 1, err.line,
                         err.message);
            }
            kf__mutation_plans_destroy(out);
            return st;
        }
    }
    return KF_OK;
}

void kf__mutation_plans_destroy(kf_graph *plans[KF__MUTATION_PLANS]) {
    for (uint32_t i = 0; i < KF__MUTATION_PLANS; i++) {
        kf_graph_destroy(plans[i]);
        plans[i] = NULL;
    }
}
