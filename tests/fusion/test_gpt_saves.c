/* The transformer block's training plan (issue 14 item 6): what its backward reads from its
 * forward, and how the plan keeps each value, per part (attention, FFN); explain's listing of it;
 * and explain's reads lines (each tensor once, never the group's own output, i32 named i32). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/plan_internal.h"
#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"
#include "harness.h"

/* One pre-norm layer of examples/chargpt/gpt.kf (bench/torch_gpt_step.py writes the same) at
 * edge sizes: 2 sequences of 13 tokens (prime), width 24 in 2 heads of 12, an FFN of 40;
 * loss = sum(h2 * r), so backward starts from dh2 = r. */
static const char *block_text =
    "x: f32[26, 24]\n"
    "r: f32[26, 24]\n"
    "wqkv: f32[24, 72]\n"
    "wproj: f32[24, 24]\n"
    "wup: f32[24, 40]\n"
    "wdown: f32[40, 24]\n"
    "qkv = rmsnorm(x) |> matmul(wqkv)\n"
    "q = slice(qkv, axis=-1, start=0, length=24) |> reshape(shape=[2, 13, 2, 12]) |> "
    "permute(axes=[0, 2, 1, 3])\n"
    "k = slice(qkv, axis=-1, start=24, length=24) |> reshape(shape=[2, 13, 2, 12]) |> "
    "permute(axes=[0, 2, 1, 3])\n"
    "v = slice(qkv, axis=-1, start=48, length=24) |> reshape(shape=[2, 13, 2, 12]) |> "
    "permute(axes=[0, 2, 1, 3])\n"
    "a = attention(q, k, v, causal=true) |> permute(axes=[0, 2, 1, 3]) |> "
    "reshape(shape=[26, 24])\n"
    "h1 = matmul(a, wproj) |> add(x)\n"
    "h2 = rmsnorm(h1) |> matmul(wup) |> gelu |> matmul(wdown) |> add(h1)\n"
    "loss = mul(h2, r) |> sum |> sum\n"
    "dx, dwqkv, dwproj, dwup, dwdown = grad(loss, x, wqkv, wproj, wup, wdown)\n"
    "out h2, dx, dwqkv, dwproj, dwup, dwdown\n";

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

/* The first forward node running operator `name` (its id), 0 if none. */
static uint32_t find_op(const kf_plan *p, const char *name) {
    for (uint32_t id = 1; id < p->graph->node_count; id++) {
        const kf__node *n = &p->graph->nodes[id];
        if (n->kind == KF__NODE_OP && !strcmp(n->op->name, name)) {
            return id;
        }
    }
    return 0;
}

/* Every explain dispatch's reads line names each tensor once and never one the dispatch writes
 * (its line's "-> ..." part). Returns false with the dispatch's text in *bad. */
static bool reads_are_clean(const char *text, char *bad, size_t bad_size) {
    for (const char *d = strstr(text, "\ndispatch "); d; d = strstr(d + 1, "\ndispatch ")) {
        const char *end = strstr(d + 1, "\ndispatch ");
        const char *reads = strstr(d, "  reads:  ");
        if (!reads || (end && reads > end)) {
            continue;
        }
        const char *line_end = strchr(reads, '\n');
        char names[32][96];
        uint32_t count = 0;
        for (const char *s = reads + 10; s < line_end && count < 32;) {
            const char *sp = strchr(s, ' ');
            if (!sp || sp > line_end) {
                break;
            }
            snprintf(names[count], sizeof names[count], "%.*s", (int)(sp - s), s);
            count++;
            const char *comma = strstr(sp, ", ");
            s = comma && comma < line_end ? comma + 2 : line_end;
        }
        for (uint32_t i = 0; i < count; i++) {
            bool twice = false;
            for (uint32_t j = 0; j < i; j++) {
                twice |= !strcmp(names[i], names[j]);
            }
            /* what the dispatch writes: after "-> " (and ", ") on its header lines */
            char written[128];
            snprintf(written, sizeof written, "-> %.95s ", names[i]);
            const char *w = strstr(d, written);
            char side[128];
            snprintf(side, sizeof side, "], %.95s ", names[i]);
            const char *s2 = strstr(d, side);
            bool own = (w && w < reads) || (s2 && s2 < reads);
            if (twice || own) {
                int shown = line_end - d < 1024 ? (int)(line_end - d) : 1024;
                snprintf(bad, bad_size, "%.95s %s in:%.*s", names[i],
                         twice ? "listed twice" : "is its own output", shown, d);
                return false;
            }
        }
    }
    return true;
}

/* Compares every output of p with ref's (relative 1e-4 against 1% of the output's largest
 * magnitude; p's outputs poisoned with NaN first). */
static void same_outputs(const kf_graph *g, kf_plan *p, kf_plan *ref) {
    for (uint32_t o = 0; o < kf_graph_output_count(g); o++) {
        const char *name = NULL;
        kf_shape s;
        KT_CHECK_OK(kf_graph_output_info(g, o, &name, &s, NULL));
        kf_tensor *want = NULL, *got = NULL;
        KT_CHECK_OK(kf_tensor_create(&s, &want));
        KT_CHECK_OK(kf_tensor_create(&s, &got));
        uint64_t n = kf_tensor_size(got);
        for (uint64_t e = 0; e < n; e++) {
            got->data[e] = NAN;
        }
        KT_CHECK_OK(kf_plan_get_output(ref, name, want));
        KT_CHECK_OK(kf_plan_get_output(p, name, got));
        double big = 0;
        for (uint64_t e = 0; e < n; e++) {
            big = fmax(big, fabs((double)want->data[e]));
        }
        for (uint64_t e = 0; e < n; e++) {
            double err = fabs((double)got->data[e] - want->data[e]) /
                         fmax(fabs((double)want->data[e]), 0.01 * big);
            KT_CHECK(err <= 1e-4, "%s[%llu] = %.9g, unfused %.9g", name, (unsigned long long)e,
                     (double)got->data[e], (double)want->data[e]);
        }
        kf_tensor_destroy(want);
        kf_tensor_destroy(got);
    }
}

KT_TEST(fusion, gpt_block_backward_reads_are_kept_or_side_outputs_no_save_dispatch) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse(block_text);
    kf_compile_options opts = {.no_prime = true},
                       split = {.no_prime = true, .activations = KF_ACTIVATIONS_SPLIT},
                       unfused = {.no_prime = true, .no_fuse = true};
    kf_plan *p = NULL, *ps = NULL, *ref = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, &opts, &p));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &split, &ps));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &unfused, &ref));
    char *text = kf_plan_explain(p, false);
    KT_CHECK(text, "explain");
    /* No save dispatch: nothing the backward reads is overwritten or left unwritten. */
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        KT_CHECK(p->order[d] != UINT32_MAX, "dispatch %u is a save copy:\n%s", d + 1, text);
    }
    /* FFN: gelu's pre-activation (the up product itself, no bias) is a side output of the
     * kernel `matmul |> gelu`: one dispatch writes both. */
    uint32_t gelu = find_op(p, "gelu");
    uint32_t pre = p->graph->nodes[gelu].inputs[0];
    int32_t gg = p->group_of[gelu];
    KT_CHECK(gg >= 0 && p->group_of[pre] == gg, "gelu and its pre-activation in one group:\n%s",
             text);
    const kf__group *up = &p->groups[gg];
    KT_CHECK(up->root == pre && up->result == gelu && up->side_count == 1 && up->sides[0] == pre,
             "matmul |> gelu writes gelu and, beside it, the product:\n%s", text);
    /* Attention: its output is read in place (permute |> reshape in the loads) by the output
     * projection and by that weight's gradient; no group writes the view. */
    uint32_t att = find_op(p, "attention");
    uint32_t readers = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || !grp->root) {
            continue;
        }
        for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
            readers += grp->prologue[i] && grp->prologue_in[i] == att;
        }
    }
    KT_CHECK(readers == 2, "the attention output is read in place by %u kernels, want 2:\n%s",
             readers, text);
    /* The count: split (before the side output) has gelu as a dispatch of its own. */
    kf_plan_summary s, ss;
    KT_CHECK_OK(kf_plan_summary_get(p, &s));
    KT_CHECK_OK(kf_plan_summary_get(ps, &ss));
    KT_CHECK(ss.dispatches == s.dispatches + 1, "%u dispatches, split %u", s.dispatches,
             ss.dispatches);
    /* Explain: the totals and, per part, each value and how it is kept. */
    char line[256];
    snprintf(line, sizeof line, "attention#%u f32[2x2x13x12] (2496 B): kept: dispatch ", att);
    const char *want[] = {
        /* the graph's inputs (x, the weights) are not listed: they are never overwritten */
        /* (the loss sum(sum(h2 * r)) gives h2 the gradient r: nothing of it is read back) */
        /* q, k and v are the qkv product read in place (src/fuse/rules/strided.c): one value */
        "backward reads from forward: 7 values, 21.3 KiB; 5 kept where the forward writes "
        "them, 2 side outputs of forward kernels, 0 recomputed, 0 copied (0 save dispatches)",
        "  block 1 attention:\n    rmsnorm#",
        line,
        "  block 1 FFN:\n    add#",
        "(4160 B): a side output of dispatch ",
        "(matmul |> gelu), no dispatch of its own; read by dispatch",
    };
    for (uint32_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        KT_CHECK(strstr(text, want[i]), "explain lacks '%s':\n%s", want[i], text);
    }
    /* attention's row statistics: a side output of the attention dispatch, listed with its part */
    const char *lse = strstr(text, "    attention_lse#");
    const char *ffn = strstr(text, "  block 1 FFN:");
    KT_CHECK(lse && ffn && lse < ffn && strstr(lse, "a side output of dispatch"),
             "lse with the attention part, as a side output:\n%s", text);
    char bad[2048];
    KT_CHECK(reads_are_clean(text, bad, sizeof bad), "%s", bad);
    const char *listing = strstr(text, "backward reads from forward");
    printf("    %s", listing ? listing : "");
    kf_free(text);
    /* The same numbers as the unfused plan, and every group (the side output on its own) proved
     * against the CPU specs. */
    const char *inputs[] = {"x", "r", "wqkv", "wproj", "wup", "wdown"};
    for (uint32_t i = 0; i < 6; i++) {
        kf_tensor *t = NULL;
        KT_CHECK_OK(kf_plan_random_input(ref, inputs[i], kt_rand_u64(), &t));
        KT_CHECK_OK(kf_plan_set_input(ref, inputs[i], t));
        KT_CHECK_OK(kf_plan_set_input(p, inputs[i], t));
        kf_tensor_destroy(t);
    }
    KT_CHECK_OK(kf_plan_run(ref));
    KT_CHECK_OK(kf_plan_run(p));
    same_outputs(g, p, ref);
    kf_plan_report rep;
    kf_status st = kf_plan_verify(p, kt_rand_u64(), &rep);
    KT_CHECK(st == KF_OK, "verify: %s", kf_context_last_error(ctx));
    kf_plan_destroy(p);
    kf_plan_destroy(ps);
    kf_plan_destroy(ref);
    kf_graph_destroy(g);
}

/* Explain's reads lines: an i32 tensor is i32, and a view a prologue reads in place is listed
 * once (its kernel binds it for the root's input and for the view's own loads). */
KT_TEST(fusion, explain_names_i32_and_lists_each_read_once) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse("table: f32[11, 12]\n"
                        "ids: i32[2, 3]\n"
                        "w: f32[12, 5]\n"
                        "e = embedding(table, ids) |> permute(axes=[1, 0, 2]) |> "
                        "reshape(shape=[6, 12])\n"
                        "y = matmul(e, w)\n"
                        "out y\n");
    kf_compile_options opts = {.no_prime = true};
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, &opts, &p));
    char *text = kf_plan_explain(p, false);
    KT_CHECK(text && strstr(text, "ids i32[2x3]"), "explain names ids as i32:\n%s", text);
    KT_CHECK(!strstr(text, "backward reads"), "no backward, no listing:\n%s", text);
    KT_CHECK(strstr(text, "permute |> reshape |> matmul"), "the view is a prologue:\n%s", text);
    char bad[2048];
    KT_CHECK(reads_are_clean(text, bad, sizeof bad), "%s", bad);
    kf_free(text);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}

/* kf_plan_dispatch_info_get, the per-dispatch rows of kfuse_bench_gpt: each dispatch's line is
 * explain's, its bytes add up to the plan's, and its root says what it is (the block's dense
 * products, attention forward and backward, the rest). */
KT_TEST(fusion, gpt_block_dispatch_info_matches_explain) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse(block_text);
    kf_compile_options opts = {.no_prime = true};
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, &opts, &p));
    char *text = kf_plan_explain(p, false);
    KT_CHECK(text, "explain");
    kf_plan_summary sum;
    KT_CHECK_OK(kf_plan_summary_get(p, &sum));
    uint64_t bytes = 0;
    uint32_t matmuls = 0, attention = 0, groups_with_matmul_root = 0;
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        kf_plan_dispatch_info info;
        memset(&info, 0x55, sizeof info);
        KT_CHECK_OK(kf_plan_dispatch_info_get(p, d, &info));
        KT_CHECK(info.label[0] && !strchr(info.label, '\n') && strlen(info.label) < 256,
                 "dispatch %u: label '%.255s'", d + 1, info.label);
        const kf__group *grp = &p->groups[p->order[d]];
        if (grp->kind != KF__GROUP_HORIZONTAL) {
            char head[128];
            snprintf(head, sizeof head, "\ndispatch %u  %.60s", d + 1, info.label);
            KT_CHECK(strstr(text, head), "dispatch %u: '%s' is not explain's line:\n%s", d + 1,
                     info.label, text);
        } else {
            KT_CHECK(!strncmp(info.label, "horizontal: ", 12) && strstr(info.label, "; "),
                     "dispatch %u: a horizontal group lists its members: '%s'", d + 1, info.label);
        }
        const kf__compiled *c = grp->compiled;
        KT_CHECK(info.bytes == c->bytes && info.bytes > 0, "dispatch %u: %llu bytes, explain %llu",
                 d + 1, (unsigned long long)info.bytes, (unsigned long long)c->bytes);
        KT_CHECK(info.grid[0] == c->grid[0] && info.grid[1] == c->grid[1] &&
                     info.grid[2] == c->grid[2],
                 "dispatch %u: grid", d + 1);
        bool mm = grp->root && p->graph->nodes[grp->root].op->op_class == KF_OP_CLASS_MATMUL;
        KT_CHECK(info.matmul == mm &&
                     (!grp->root || !strcmp(info.root, p->graph->nodes[grp->root].op->name)),
                 "dispatch %u: root '%s', matmul %d", d + 1, info.root, info.matmul);
        KT_CHECK(grp->root || !info.root[0], "dispatch %u: element-wise with root '%s'", d + 1,
                 info.root);
        groups_with_matmul_root += mm;
        matmuls += info.matmul;
        attention += !strncmp(info.root, "attention", 9);
        bytes += info.bytes;
    }
    /* forward 4 products, backward 8 (dX and dW of each); attention forward and its gradients */
    KT_CHECK(matmuls == 12 && groups_with_matmul_root == 12, "%u matmul dispatches:\n%s", matmuls,
             text);
    KT_CHECK(attention >= 2, "%u attention dispatches:\n%s", attention, text);
    KT_CHECK(bytes == sum.bytes, "dispatch bytes add up to %llu, the plan's %llu",
             (unsigned long long)bytes, (unsigned long long)sum.bytes);
    kf_plan_dispatch_info info;
    KT_CHECK(kf_plan_dispatch_info_get(p, p->dispatch_count, &info) == KF_ERROR_INVALID_ARGUMENT,
             "an index past the dispatches");
    kf_free(text);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}

/* Which roots of p read node `view` through a strided view of `source` in place
 * (src/fuse/rules/strided.c), counted; *copied: a live group writes the view. */
static uint32_t strided_readers(const kf_plan *p, uint32_t view, uint32_t source, bool *copied) {
    uint32_t readers = 0;
    *copied = false;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD) {
            continue;
        }
        *copied |= kf__group_writes(grp, view);
        const kf__node *root = grp->root ? &p->graph->nodes[grp->root] : NULL;
        for (uint32_t i = 0; root && i < root->input_count; i++) {
            readers += root->inputs[i] == view && grp->strided[i] &&
                       kf__group_input_node(p, grp, i) == source;
        }
    }
    return readers;
}

/* The block's attention part copies no view (issue 14 item 2): q, k and v, the qkv product
 * sliced, reshaped and permuted to heads, are read in place through their strides by the forward
 * (with its lse), dq's and dk/dv's kernels, and the attention output's permute |> reshape by the
 * projection's loads and by its weight gradient's, split-K's partial products included. Where a
 * kernel cannot read a view in place (an element-wise exp of q besides attention) it is still
 * copied. Plans only (no pipelines); gpt_block_backward_reads... runs and verifies the block. */
KT_TEST(fusion, gpt_block_attention_reads_its_views_in_place_no_view_copy) {
    KT_NEED_GPU(ctx);
    kf_compile_options opts = {.no_prime = true};
    for (uint32_t variant = 0; variant < 3; variant++) {
        char text_buf[2048];
        const char *spec = block_text;
        if (variant == 1) {
            /* 128 tokens: split-K forced into 2 slices of 64 (the H200's 4096-token block) */
            snprintf(text_buf, sizeof text_buf, "%s",
                     "x: f32[128, 16]\nr: f32[128, 16]\nwqkv: f32[16, 48]\nwproj: f32[16, 16]\n"
                     "qkv = rmsnorm(x) |> matmul(wqkv)\n"
                     "q = slice(qkv, axis=-1, start=0, length=16) |> "
                     "reshape(shape=[2, 64, 2, 8]) |> permute(axes=[0, 2, 1, 3])\n"
                     "k = slice(qkv, axis=-1, start=16, length=16) |> "
                     "reshape(shape=[2, 64, 2, 8]) |> permute(axes=[0, 2, 1, 3])\n"
                     "v = slice(qkv, axis=-1, start=32, length=16) |> "
                     "reshape(shape=[2, 64, 2, 8]) |> permute(axes=[0, 2, 1, 3])\n"
                     "a = attention(q, k, v, causal=true) |> permute(axes=[0, 2, 1, 3]) |> "
                     "reshape(shape=[128, 16])\n"
                     "h1 = matmul(a, wproj) |> add(x)\n"
                     "loss = mul(h1, r) |> sum |> sum\n"
                     "dx, dwqkv, dwproj = grad(loss, x, wqkv, wproj)\n"
                     "out h1, dx, dwqkv, dwproj\n");
            spec = text_buf;
            setenv("KF_SPLIT_K_SLICES", "2", 1);
        } else if (variant == 2) {
            /* exp(q) besides attention: q must be in memory for the element-wise kernel */
            const char *out = strstr(block_text, "out h2");
            snprintf(text_buf, sizeof text_buf, "%.*se = exp(q)\nout e, %s",
                     (int)(out - block_text), block_text, out + 4);
            spec = text_buf;
        }
        kf_graph *g = parse(spec);
        kf_plan *p = NULL;
        KT_CHECK_OK(kf_graph_compile(ctx, g, &opts, &p));
        unsetenv("KF_SPLIT_K_SLICES");
        char *text = kf_plan_explain(p, false);
        KT_CHECK(text, "explain");
        uint32_t att = find_op(p, "attention");
        const kf__node *an = &p->graph->nodes[att];
        uint32_t qkv =
            p->graph->nodes[p->graph->nodes[p->graph->nodes[an->inputs[0]].inputs[0]].inputs[0]]
                .inputs[0]; /* permute <- reshape <- slice <- the product */
        KT_CHECK(!strcmp(p->graph->nodes[qkv].op->name, "matmul"), "q's source is the product");
        for (uint32_t i = 0; i < 3; i++) {
            bool copied = false;
            uint32_t readers = strided_readers(p, an->inputs[i], qkv, &copied);
            bool want_copy = variant == 2 && i == 0;
            /* the forward (lse its second output), dq with g', dk with dv */
            KT_CHECK(want_copy ? copied && readers == 0 : !copied && readers == 3,
                     "variant %u, input %u: %u kernels read it in place, copied %d:\n%s", variant,
                     i, readers, copied, text);
        }
        KT_CHECK(strstr(text, "  in place: ") && strstr(text, " = slice |> reshape |> permute of "),
                 "explain lists the views read in place:\n%s", text);
        if (variant == 2) {
            KT_CHECK(strstr(text, "view copy (read more than once)") ||
                         strstr(text, "view copy (an output)"),
                     "exp's q is a copy:\n%s", text);
        } else {
            KT_CHECK(!strstr(text, "view copy"), "variant %u copies a view:\n%s", variant, text);
            /* the attention output: a prologue of the projection and of dW's product */
            uint32_t readers = 0;
            for (uint32_t gi = 0; gi < p->group_count; gi++) {
                const kf__group *grp = &p->groups[gi];
                for (uint32_t i = 0; grp->kind != KF__GROUP_DEAD && i < KF_NODE_MAX_INPUTS; i++) {
                    readers += grp->prologue[i] && grp->prologue_in[i] == att;
                }
            }
            KT_CHECK(readers == 2, "variant %u: the attention output in %u prologues:\n%s", variant,
                     readers, text);
            KT_CHECK(variant == 0 || strstr(text, "split-K sum"), "split:\n%s", text);
        }
        kf_free(text);
        kf_plan_destroy(p);
        kf_graph_destroy(g);
    }
}
