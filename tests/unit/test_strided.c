/* Strided layouts of views (kf__view_strided, src/ops/view.c), which the planner folds into a
 * reader's index math instead of copying the view (src/fuse/rules/strided.c): a chain of views
 * applied by their CPU specs to a tensor holding each element's own index must give, at every
 * element, offset + sum_k i_k stride_k of the composed layout; and the views that are no strided
 * view of their input (a reshape merging dims a permute separated, a concat, slice_grad) say so. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ops/ops_internal.h"

typedef struct view_step {
    const kf_operator *op;
    int32_t list[KF_MAX_DIMS]; /* reshape's shape, permute's axes */
    uint32_t list_count;
    int32_t axis, start, length; /* slice */
} view_step;

static kf_op_params params_of(const view_step *s) {
    kf_op_params p = {0};
    if (s->list_count) {
        memcpy(p.list, s->list, sizeof p.list);
        p.list_count = s->list_count;
        p.given = KF_PARAM_LIST;
    } else {
        p.axis = s->axis;
        p.start = s->start;
        p.length = s->length;
        p.given = KF_PARAM_AXIS | KF_PARAM_START | KF_PARAM_LENGTH;
    }
    return p;
}

/* Applies the steps to iota(from) by the specs and through the layouts; *strided: how many steps
 * had a layout (where all did, the values are checked element by element). */
static void run_chain(const kf_shape *from, const view_step *steps, uint32_t count,
                      uint32_t *strided) {
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(from, &t));
    for (uint64_t e = 0; e < kf_tensor_size(t); e++) {
        t->data[e] = (float)e;
    }
    kf__strided l;
    kf__strided_contiguous(from, &l);
    *strided = 0;
    bool ok = true;
    for (uint32_t i = 0; i < count; i++) {
        kf_op_params p = params_of(&steps[i]);
        kf_shape out;
        KT_CHECK_OK(steps[i].op->shape(&t->shape, &p, &out, NULL, 0));
        kf_tensor *y = NULL;
        KT_CHECK_OK(kf_tensor_create(&out, &y));
        const kf_tensor *in[1] = {t};
        KT_CHECK_OK(steps[i].op->spec_forward(in, &p, y));
        ok = ok && kf__view_strided(steps[i].op, &t->shape, &p, &l);
        kf_tensor_destroy(t);
        t = y;
        *strided += ok;
    }
    if (ok) {
        for (uint32_t d = 0; d < t->shape.rank; d++) {
            KT_CHECK(l.rank == t->shape.rank && l.dims[d] == t->shape.dims[d], "dim %u", d);
        }
        for (uint64_t e = 0; e < kf_tensor_size(t); e++) {
            uint64_t at = l.offset, rest = e;
            for (uint32_t d = l.rank; d-- > 0;) {
                at += rest % l.dims[d] * l.strides[d];
                rest /= l.dims[d];
            }
            KT_CHECK((double)t->data[e] == (double)at,
                     "element %llu: the view holds %g, the layout %llu", (unsigned long long)e,
                     (double)t->data[e], (unsigned long long)at);
        }
    }
    kf_tensor_destroy(t);
}

static uint32_t chain_strided(const kf_shape *from, const view_step *steps, uint32_t count) {
    uint32_t strided = 0;
    run_chain(from, steps, count, &strided);
    return strided;
}

#define RESHAPE(...)                                                                               \
    { &kf__op_reshape, {__VA_ARGS__}, sizeof((int32_t[]){__VA_ARGS__}) / 4, 0, 0, 0 }
#define PERMUTE(...)                                                                               \
    { &kf__op_permute, {__VA_ARGS__}, sizeof((int32_t[]){__VA_ARGS__}) / 4, 0, 0, 0 }
#define SLICE(AXIS, START, LENGTH)                                                                 \
    { &kf__op_slice, {0}, 0, AXIS, START, LENGTH }

KT_CPU_TEST(unit, strided_layouts_of_view_chains_match_the_views_specs) {
    /* the GPT's q, k and v: [B T, 3 C] sliced, split into heads, heads first */
    kf_shape qkv = {2, {26, 72}};
    for (int32_t part = 0; part < 3; part++) {
        view_step heads[] = {SLICE(-1, part * 24, 24), RESHAPE(2, 13, 2, 12), PERMUTE(0, 2, 1, 3)};
        KT_CHECK(chain_strided(&qkv, heads, 3) == 3, "q, k, v (part %d) are strided views", part);
    }
    /* heads merged back after a permute of their own (o's permute |> reshape), a reshape with -1
     * and dims of 1, a slice of a permute, a split of a sliced dim */
    kf_shape o = {4, {2, 3, 5, 4}};
    view_step back[] = {PERMUTE(0, 2, 1, 3), PERMUTE(0, 2, 1, 3), RESHAPE(-1, 3, 1, 20)};
    KT_CHECK(chain_strided(&o, back, 3) == 3, "two permutes undone, then merged");
    kf_shape o3 = {3, {3, 5, 4}};
    view_step sliced[] = {PERMUTE(2, 0, 1), SLICE(0, 1, 2), RESHAPE(2, 1, 3, 5)};
    KT_CHECK(chain_strided(&o3, sliced, 3) == 3, "a slice of a permute, a dim of 1 put in");
    kf_shape wide = {2, {6, 40}};
    view_step split[] = {SLICE(1, 8, 16), RESHAPE(6, 4, 4), PERMUTE(2, 0, 1)};
    KT_CHECK(chain_strided(&wide, split, 3) == 3, "a sliced dim split in two");
    /* not strided: merging dims a permute separated, or a slice's remainder with its outer dim */
    view_step merge[] = {PERMUTE(0, 2, 1, 3), RESHAPE(2, 5, 12)};
    KT_CHECK(chain_strided(&o, merge, 2) == 1, "merging permuted dims needs a copy");
    view_step rows[] = {SLICE(1, 0, 16), RESHAPE(96)};
    KT_CHECK(chain_strided(&wide, rows, 2) == 1, "flattening a column slice needs a copy");
    /* a concat reads two tensors, slice_grad writes zeros: neither has a layout */
    kf__strided l;
    kf__strided_contiguous(&wide, &l);
    kf_shape two[2] = {wide, wide};
    kf_op_params cat = {.axis = 0, .given = KF_PARAM_AXIS};
    KT_CHECK(!kf__view_strided(&kf__op_concat, two, &cat, &l) && l.strides[0] == 40,
             "concat has no layout and leaves it as it was");
}
