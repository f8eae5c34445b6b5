/* The bounds check of every dispatch (kf_context_desc.check_bounds, $KF_CHECK_BOUNDS, on in every
 * test): an out-of-bounds kernel that lavapipe runs without a word is refused, naming the kernel,
 * binding, index and length; a kernel whose indices come from data is checked on the data the
 * dispatches before it wrote; a large dispatch is sampled at its edges. Each test makes its own
 * contexts: a violation on the shared one fails the test that caused it (tests/harness.c). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ir/ir_internal.h"
#include "ops/operator.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

static kf_type f32t(void) {
    return kf_type_scalar(KF_SCALAR_F32);
}

static kf_type u32t(void) {
    return kf_type_scalar(KF_SCALAR_U32);
}

/* A context with the check on or off whatever $KF_CHECK_BOUNDS says (the runner sets it), with
 * `work` as $KF_CHECK_BOUNDS_WORK (NULL: the default). */
static kf_context *context_with_check(bool on, const char *work) {
    char *saved = getenv("KF_CHECK_BOUNDS") ? strdup(getenv("KF_CHECK_BOUNDS")) : NULL;
    setenv("KF_CHECK_BOUNDS", "0", 1);
    if (work) {
        setenv("KF_CHECK_BOUNDS_WORK", work, 1);
    }
    kf_context_desc desc = {0};
    desc.check_bounds = on;
    kf_context *ctx = NULL;
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        ctx = NULL;
    }
    if (saved) {
        setenv("KF_CHECK_BOUNDS", saved, 1);
        free(saved);
    } else {
        unsetenv("KF_CHECK_BOUNDS");
    }
    if (work) {
        unsetenv("KF_CHECK_BOUNDS_WORK");
    }
    return ctx;
}

/* y[i] = 2 x[i], i the global index, no guard: in bounds exactly when both hold the grid's
 * invocations (the proof, made for the buffers it is dispatched with, shows that). */
static kf_kernel *scale(void) {
    kf_kernel_desc d = {0};
    d.name = "scale_by_two";
    d.workgroup_size[0] = 64;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", f32t(), KF_ACCESS_READ);
    kf_binding y = kf_kernel_storage(k, "y", f32t(), KF_ACCESS_READ_WRITE);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_store(k, y, i, kf_mul(k, kf_load(k, x, i), kf_lit_f32(k, 2.0f)));
    return k;
}

/* Dispatches scale for `groups` x 64 elements, then points the dispatch at views of `short_len`
 * elements (as a caller re-binding a kf_dispatch to other buffers may): the WGSL has no guard,
 * so the GPU reads and writes past the views. Returns the status of kf_context_run and the
 * floats of y's whole buffer (the view, then its guard band) after it. */
static kf_status run_rebound(kf_context *ctx, uint32_t groups, uint32_t short_len, float *y_all,
                             const float *x, char *err, size_t err_size) {
    uint32_t n = groups * 64;
    kf_kernel *k = scale();
    kf_buffer *full[2] = {NULL, NULL}, *whole[2] = {NULL, NULL}, *view[2] = {NULL, NULL};
    kf_status st = KF_OK;
    for (int b = 0; b < 2 && st == KF_OK; b++) {
        st = kf_buffer_create(ctx, (uint64_t)n * 4, &full[b]);
        if (st == KF_OK) {
            st = kf_buffer_create(ctx, (uint64_t)n * 4, &whole[b]);
        }
        if (st == KF_OK) {
            st = kf_buffer_view(whole[b], 0, (uint64_t)short_len * 4, &view[b]);
        }
    }
    if (st == KF_OK) {
        st = kf_buffer_upload(whole[0], 0, x, (uint64_t)n * 4);
    }
    if (st == KF_OK) {
        st = kf_buffer_fill_u32(whole[1], 0x7fc00000u); /* poison: NaN */
    }
    kf_dispatch d = {0};
    kf_kernel_launch l = {0};
    l.buffers = full;
    l.buffer_count = 2;
    l.groups[0] = groups;
    if (st == KF_OK) {
        st = kf_kernel_dispatch(ctx, k, &l, &d);
    }
    if (st == KF_OK) {
        d.buffers = view;
        st = kf_context_run(ctx, &d, 1);
        snprintf(err, err_size, "%s", st == KF_OK ? "" : kf_context_last_error(ctx));
        if (kf_buffer_download(whole[1], 0, y_all, (uint64_t)n * 4) != KF_OK) {
            st = KF_ERROR_INTERNAL;
        }
    } else {
        snprintf(err, err_size, "setup: %s", kf_context_last_error(ctx));
    }
    for (int b = 0; b < 2; b++) {
        kf_buffer_destroy(view[b]);
        kf_buffer_destroy(whole[b]);
        kf_buffer_destroy(full[b]);
    }
    kf_kernel_destroy(k);
    return st;
}

static bool is_poison(float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return bits == 0x7fc00000u;
}

KT_TEST(unit, bounds_check_refuses_an_out_of_bounds_dispatch_lavapipe_runs_silently) {
    enum { GROUPS = 4, N = GROUPS * 64, SHORT = 200 };
    float x[N], y[N];
    for (uint32_t i = 0; i < N; i++) {
        x[i] = kt_rand_f32(-4, 4);
    }
    char err[1024];
    /* unchecked: the GPU runs it and says nothing */
    kf_context *plain = context_with_check(false, NULL);
    KT_CHECK(plain, "no GPU context");
    kf_status st = run_rebound(plain, GROUPS, SHORT, y, x, err, sizeof err);
    kf_context_destroy(plain);
    KT_CHECK(st == KF_OK, "without the check: %s (%s)", kf_status_str(st), err);
    uint32_t past = 0;
    for (uint32_t i = SHORT; i < N; i++) {
        past += !is_poison(y[i]);
    }
    printf("    unchecked: kf_context_run ok; %u of the %u floats past the view's end were "
           "written\n",
           past, N - SHORT);
    /* checked: refused before it runs, with the culprit named */
    kf_context *ctx = context_with_check(true, NULL);
    KT_CHECK(ctx, "no GPU context");
    st = run_rebound(ctx, GROUPS, SHORT, y, x, err, sizeof err);
    const kf__bounds_check_stats *cs = kf__context_bounds_check_stats(ctx);
    uint64_t violations = cs->violations;
    kf_context_destroy(ctx);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "checked run: %s (%s)", kf_status_str(st), err);
    KT_CHECK(violations == 1, "%llu violations counted", (unsigned long long)violations);
    const char *want[] = {
        "bounds check",       "kernel 'scale_by_two'", "load from 'x'",           "index 200",
        "holds 200 elements", "workgroup 3,0,0",       "proof found it in bounds"};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        KT_CHECK(strstr(err, want[w]), "the message lacks \"%s\": %s", want[w], err);
    }
    for (uint32_t i = 0; i < N; i++) {
        KT_CHECK(is_poison(y[i]), "y[%u] = %g: the refused dispatch ran", i, (double)y[i]);
    }
}

KT_TEST(unit, bounds_check_samples_a_large_dispatch_at_its_edges) {
    /* 2048 workgroups, one element short: only the last workgroup's last invocation is out of
     * bounds, and a budget of one workgroup's work still finds it (the edges run first) */
    enum { GROUPS = 2048, N = GROUPS * 64 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    KT_CHECK(x && y, "out of memory");
    for (uint32_t i = 0; i < N; i++) {
        x[i] = kt_rand_f32(-4, 4);
    }
    kf_context *ctx = context_with_check(true, "64");
    if (!ctx) {
        free(x);
        free(y);
    }
    KT_CHECK(ctx, "no GPU context");
    char err[1024];
    kf_status st = run_rebound(ctx, GROUPS, N - 1, y, x, err, sizeof err);
    kf__bounds_check_stats cs = *kf__context_bounds_check_stats(ctx);
    kf_context_destroy(ctx);
    free(x);
    free(y);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "%s (%s)", kf_status_str(st), err);
    KT_CHECK(strstr(err, "index 131071") && strstr(err, "workgroup 2047,0,0"), "%s", err);
    KT_CHECK(cs.sampled == 1 && cs.workgroups == GROUPS && cs.workgroups_run < 16,
             "sampled %llu, %llu of %llu workgroups run", (unsigned long long)cs.sampled,
             (unsigned long long)cs.workgroups_run, (unsigned long long)cs.workgroups);
}

/* ids_out[i] = ids_in[i] (the first dispatch), then y[i] = x[ids_out[i]] (the second): the
 * second's index comes from what the first wrote, so its check must read that back. */
static kf_kernel *copy_ids(void) {
    kf_kernel_desc d = {0};
    d.name = "copy_ids";
    d.workgroup_size[0] = 64;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding src = kf_kernel_storage(k, "src", u32t(), KF_ACCESS_READ);
    kf_binding dst = kf_kernel_storage(k, "dst", u32t(), KF_ACCESS_READ_WRITE);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_store(k, dst, i, kf_load(k, src, i));
    return k;
}

static kf_kernel *gather(void) {
    kf_kernel_desc d = {0};
    d.name = "gather";
    d.workgroup_size[0] = 64;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", f32t(), KF_ACCESS_READ);
    kf_binding ids = kf_kernel_storage(k, "ids", u32t(), KF_ACCESS_READ);
    kf_binding y = kf_kernel_storage(k, "y", f32t(), KF_ACCESS_READ_WRITE);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_store(k, y, i, kf_load(k, x, kf_load(k, ids, i)));
    return k;
}

KT_TEST(unit, bounds_check_reads_back_what_an_index_depends_on) {
    enum { N = 128, BAD = 5 };
    kf_context *ctx = context_with_check(true, NULL);
    KT_CHECK(ctx, "no GPU context");
    uint32_t ids[N];
    float x[N];
    for (uint32_t i = 0; i < N; i++) {
        ids[i] = (uint32_t)(kt_rand_u64() % N);
        x[i] = kt_rand_f32(-1, 1);
    }
    for (uint32_t b = 0; b < BAD; b++) {
        ids[(b * 37 + 3) % N] = N + b; /* past x's end: the emitted guard clamps these loads */
    }
    kf_kernel *kc = copy_ids(), *kg = gather();
    kf_buffer *src = NULL, *mid = NULL, *xb = NULL, *yb = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof ids, &src));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof ids, &mid));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &xb));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &yb));
    KT_CHECK_OK(kf_buffer_upload(src, 0, ids, sizeof ids));
    KT_CHECK_OK(kf_buffer_upload(xb, 0, x, sizeof x));
    KT_CHECK_OK(kf_buffer_fill_u32(mid, 0)); /* before the copy: every id in bounds */
    kf_buffer *cb[2] = {src, mid}, *gb[3] = {xb, mid, yb};
    kf_kernel_launch lc = {0}, lg = {0};
    lc.buffers = cb;
    lc.buffer_count = 2;
    lg.buffers = gb;
    lg.buffer_count = 3;
    lc.groups[0] = lg.groups[0] = N / 64;
    kf_dispatch d[2];
    KT_CHECK_OK(kf_kernel_dispatch(ctx, kc, &lc, &d[0]));
    KT_CHECK_OK(kf_kernel_dispatch(ctx, kg, &lg, &d[1]));
    kf_context_stats before, after;
    KT_CHECK_OK(kf_context_stats_get(ctx, &before));
    kf_status st = kf_context_run(ctx, d, 2);
    KT_CHECK_OK(kf_context_stats_get(ctx, &after));
    kf__bounds_check_stats cs = *kf__context_bounds_check_stats(ctx);
    float y[N];
    KT_CHECK_OK(kf_buffer_download(yb, 0, y, sizeof y));
    kf_buffer *all[4] = {src, mid, xb, yb};
    for (int b = 0; b < 4; b++) {
        kf_buffer_destroy(all[b]);
    }
    kf_kernel_destroy(kc);
    kf_kernel_destroy(kg);
    kf_context_destroy(ctx);
    KT_CHECK(st == KF_OK, "%s", kf_status_str(st));
    KT_CHECK(cs.data_dispatches == 1 && cs.dispatches == 2, "%llu dispatches, %llu read back",
             (unsigned long long)cs.dispatches, (unsigned long long)cs.data_dispatches);
    for (uint32_t i = 0; i < N; i++) {
        float want = x[ids[i] < N ? ids[i] : N - 1];
        KT_CHECK(y[i] == want, "y[%u] = %g, want %g", i, (double)y[i], (double)want);
    }
    /* the ids the copy wrote, not the zeros before it: one clamped load per bad id */
    KT_CHECK(cs.guards_fired == BAD, "%llu guarded loads out of bounds, want %d",
             (unsigned long long)cs.guards_fired, BAD);
    /* the check's read-back and split are not the caller's: one submission, nothing downloaded */
    KT_CHECK(after.submissions == before.submissions + 1 &&
                 after.download_bytes == before.download_bytes &&
                 after.dispatches == before.dispatches + 2,
             "stats moved: %llu submissions, %llu bytes downloaded",
             (unsigned long long)(after.submissions - before.submissions),
             (unsigned long long)(after.download_bytes - before.download_bytes));
}

/* Every operator's forward kernel (f32, its first and last verification shapes) whose addresses do
 * not depend on data, checked computing only what its addresses depend on (on zeros, as the check
 * runs it) and computing everything (on non-zero data): the same verdict, the same workgroups run,
 * the same guarded accesses out of bounds and the same addresses, in order (a hash). A slice that
 * left out a value some index needs would read garbage there and differ. */
KT_CPU_TEST(unit, bounds_check_addresses_only_agrees_with_computing_everything) {
    uint32_t compared = 0, skipped = 0;
    uint64_t workgroups = 0;
    for (uint32_t o = 0; o < kf_op_count(); o++) {
        const kf_operator *op = kf_op_at(o);
        /* the first shape, f32 and f16 (later shapes are larger: seconds of interpreting) */
        for (uint32_t half = 0; op->kernel_forward && op->case_count && half < 2; half++) {
            const kf_op_case *cs = &op->cases[0];
            kf_dtype dt = half ? KF_DTYPE_F16 : KF_DTYPE_F32;
            kf_shape out;
            if (kf_op_shape(op, cs->shapes, &cs->params, &out, NULL, 0)) {
                continue;
            }
            kf_kernel *k = op->kernel_forward(cs->shapes, &cs->params, dt);
            if (!k || kf__op_kernel_lengths(k, op, cs->shapes, &cs->params, dt) != KF_OK ||
                !(k->grid[0] || k->grid[1] || k->grid[2])) {
                skipped++;
                kf_kernel_destroy(k);
                continue;
            }
            kf__checker *c = kf__checker_new(k, NULL, NULL);
            uint32_t n = kf_kernel_binding_count(k);
            kf_host_buffer hb[16] = {{0}};
            bool ok = c && n <= 16;
            for (uint32_t b = 0; ok && b < n; b++) {
                kf_binding_info info;
                ok =
                    kf_kernel_binding_info(k, b, &info) == KF_OK && info.kind != KF_BINDING_UNIFORM;
                uint32_t lanes =
                    ok && info.elem.lanes > 1 ? (info.elem.lanes == 3 ? 4 : info.elem.lanes) : 1;
                hb[b].size = kf__kernel_binding_length(k, b) *
                             (info.elem.scalar == KF_SCALAR_F16 ? 2u : 4u) * lanes;
                hb[b].data = ok ? calloc(hb[b].size ? hb[b].size : 1, 1) : NULL;
                ok = ok && hb[b].data;
            }
            if (!ok || kf__checker_needs_data(c)) {
                skipped++;
                if (ok && !half) {
                    printf("    %s: addresses depend on data\n", op->name);
                }
            } else {
                kf_interp_desc d = {0};
                d.buffers = hb;
                d.buffer_count = n;
                memcpy(d.groups, k->grid, sizeof d.groups);
                for (int g = 0; g < 3; g++) {
                    d.groups[g] = d.groups[g] ? d.groups[g] : 1;
                }
                kf__check_result slim, full;
                kf_status s1 = kf__checker_run(c, &d, 20000, &slim);
                for (uint32_t b = 0; b < n; b++) {
                    /* non-zero data (its values are no address's: any will do) */
                    memset(hb[b].data, 0x3c + (int)(kt_rand_u64() % 3), (size_t)hb[b].size);
                }
                kf__checker_compute_all(c, true);
                kf_status s2 = kf__checker_run(c, &d, 20000, &full);
                compared++;
                workgroups += full.checked;
                KT_CHECK(
                    s1 == s2 && slim.checked == full.checked &&
                        slim.guards_fired == full.guards_fired &&
                        slim.address_hash == full.address_hash && !slim.repeat && !full.repeat,
                    "%s: addresses only %s (%llu workgroups, %llu guards fired), everything %s "
                    "(%llu, %llu): %s",
                    op->name, kf_status_str(s1), (unsigned long long)slim.checked,
                    (unsigned long long)slim.guards_fired, kf_status_str(s2),
                    (unsigned long long)full.checked, (unsigned long long)full.guards_fired,
                    kf__checker_message(c));
                KT_CHECK(s1 == KF_OK, "%s: %s", op->name, kf__checker_message(c));
            }
            for (uint32_t b = 0; b < n && b < 16; b++) {
                free(hb[b].data);
            }
            kf__checker_free(c);
            kf_kernel_destroy(k);
        }
    }
    printf("    %u operator kernels compared (%llu workgroups), %u skipped (indices from data, or "
           "no grid)\n",
           compared, (unsigned long long)workgroups, skipped);
    KT_CHECK(compared >= 100, "only %u operator kernels compared", compared);
}

/* One pipeline, kernels proved for other lengths: attention_grad_q's WGSL does not depend on the
 * number of heads (it only sets the grid), so a plan over 2 x 3 heads and one over 1 x 2 compile to
 * one pipeline, whose first checker was proved for q of 816 elements. The second plan's q holds
 * 272: it must be checked by its own kernel's proof, not refused for the first one's lengths. */
KT_TEST(unit, bounds_check_one_pipeline_serves_kernels_proved_for_other_lengths) {
    static const char *const programs[2] = {
        "q: f32[2, 3, 17, 8]\nk: f32[2, 3, 17, 8]\nv: f32[2, 3, 17, 8]\ng: f32[2, 3, 17, 10]\n"
        "dq = attention_grad_q(q, k, v, g)\nout dq\n",
        "q: f32[1, 2, 17, 8]\nk: f32[1, 2, 17, 8]\nv: f32[1, 2, 17, 8]\ng: f32[1, 2, 17, 10]\n"
        "dq = attention_grad_q(q, k, v, g)\nout dq\n"};
    kf_context *ctx = context_with_check(true, NULL);
    KT_CHECK(ctx, "no GPU context");
    if (!ctx) {
        return;
    }
    /* the premise: both kernels emit one WGSL text */
    const kf_operator *op = kf_op_find("attention_grad_q");
    char *wgsl[2] = {NULL, NULL};
    for (int i = 0; i < 2 && op; i++) {
        kf_shape in[4];
        for (int j = 0; j < 4; j++) {
            in[j] = (kf_shape){4, {i ? 1u : 2u, i ? 2u : 3u, 17, j == 3 ? 10u : 8u}};
        }
        kf_kernel *k = kf__op_kernel_for(ctx, op, in, NULL, KF_DTYPE_F32);
        wgsl[i] = k ? kf_kernel_emit_wgsl(k) : NULL;
        kf_kernel_destroy(k);
    }
    KT_CHECK(wgsl[0] && wgsl[1] && !strcmp(wgsl[0], wgsl[1]),
             "the two head counts emit different WGSL: the test proves nothing");
    kf_free(wgsl[0]);
    kf_free(wgsl[1]);
    kf_plan *plans[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        kf_graph *g = NULL;
        kf_spec_error err = {0};
        KT_CHECK_OK(kf_spec_parse(programs[i], strlen(programs[i]), &g, &err));
        KT_CHECK(g && kf_graph_compile(ctx, g, NULL, &plans[i]) == KF_OK, "compile %d: %s", i,
                 kf_context_last_error(ctx));
        kf_graph_destroy(g);
    }
    /* both plans exist before either runs, then each runs twice, interleaved */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 2 && plans[i]; i++) {
            kf_plan_report r;
            KT_CHECK(kf_plan_verify(plans[i], kt_rand_u64(), &r) == KF_OK, "plan %d: %s", i,
                     kf_context_last_error(ctx));
        }
    }
    const kf__bounds_check_stats *cs = kf__context_bounds_check_stats(ctx);
    KT_CHECK(cs->violations == 0 && cs->dispatches > 0, "%llu violations in %llu dispatches",
             (unsigned long long)cs->violations, (unsigned long long)cs->dispatches);
    kf_plan_destroy(plans[0]);
    kf_plan_destroy(plans[1]);
    kf_context_destroy(ctx);
}
