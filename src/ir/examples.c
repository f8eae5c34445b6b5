/* Example kernels, each built only with the public builder (so each is also a usage example). */
#include "ir/examples.h"

#include <string.h>

kf_val kf__example_affine(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    return kf_add(k, kf_mul(k, x, kf_lit_f32(k, 2.0f)), kf_lit_f32(k, 1.0f));
}

kf_val kf__example_relu(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    return kf_call2(k, KF_FN_MAX, x, kf_lit_f32(k, 0.0f));
}

kf_val kf__example_gelu_tanh(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    kf_val x3 = kf_mul(k, kf_mul(k, x, x), x);
    kf_val inner = kf_mul(k, kf_lit_f32(k, 0.7978845608f),
                          kf_add(k, x, kf_mul(k, kf_lit_f32(k, 0.044715f), x3)));
    kf_val half_x = kf_mul(k, kf_lit_f32(k, 0.5f), x);
    return kf_mul(k, half_x, kf_add(k, kf_lit_f32(k, 1.0f), kf_call1(k, KF_FN_TANH, inner)));
}

static kf_val gelu_erf(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    /* 0.5 x (1 + erf(x / sqrt(2))) */
    kf_val e = kf_call1(k, KF_FN_ERF, kf_mul(k, x, kf_lit_f32(k, 0.70710678f)));
    return kf_mul(k, kf_mul(k, kf_lit_f32(k, 0.5f), x), kf_add(k, kf_lit_f32(k, 1.0f), e));
}

static const uint32_t wg256[3] = {256, 1, 1};
static const uint32_t wg16x16[3] = {16, 16, 1};

static kf_kernel *build_demo_chain(void) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *a = kf_kernel_map("affine", f32, f32, wg256, kf__example_affine, NULL);
    kf_kernel *b = kf_kernel_map("relu", f32, f32, wg256, kf__example_relu, NULL);
    kf_kernel *c = kf_kernel_map("gelu", f32, f32, wg256, kf__example_gelu_tanh, NULL);
    kf_kernel *ab = a && b ? kf_kernel_then(a, b) : NULL;
    kf_kernel *abc = ab && c ? kf_kernel_then(ab, c) : NULL;
    kf_kernel_destroy(a);
    kf_kernel_destroy(b);
    kf_kernel_destroy(c);
    kf_kernel_destroy(ab);
    return abc;
}

static kf_kernel *build_identity(void) {
    return kf_kernel_identity(kf_type_scalar(KF_SCALAR_F32), wg256);
}

static kf_kernel *build_gelu_erf(void) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    return kf_kernel_map("gelu_erf", f32, f32, wg256, gelu_erf, NULL);
}

/* One workgroup sums 256 elements of x in workgroup memory (a tree with barriers) and yields
 * the sum at its workgroup index. */
static kf_kernel *build_reduce_sum(void) {
    kf_kernel_desc desc = {0};
    desc.name = "reduce_sum";
    memcpy(desc.workgroup_size, wg256, sizeof wg256);
    desc.output = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_binding x = kf_kernel_storage(k, "x", f32, KF_ACCESS_READ);
    kf_shared tile = kf_kernel_workgroup(k, "tile", f32, 256);
    kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val group = kf_let(k, "group", kf_workgroup_linear(k));
    kf_val gi = kf_let(k, "gi", kf_add(k, kf_mul(k, group, kf_lit_u32(k, 256)), li));
    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0.0f));
    kf_if(k, kf_binary(k, KF_OP_LT, gi, kf_binding_length(k, x)));
    kf_assign(k, acc, kf_load(k, x, gi));
    kf_end(k);
    kf_shared_store(k, tile, li, kf_read(k, acc));
    kf_barrier(k);
    kf_var stride = kf_declare(k, "stride", u32, kf_lit_u32(k, 128));
    kf_while(k);
    {
        kf_val s = kf_read(k, stride);
        kf_while_cond(k, kf_binary(k, KF_OP_GT, s, kf_lit_u32(k, 0)));
        kf_if(k, kf_binary(k, KF_OP_LT, li, s));
        kf_val mine = kf_shared_load(k, tile, li);
        kf_val other = kf_shared_load(k, tile, kf_add(k, li, s));
        kf_shared_store(k, tile, li, kf_add(k, mine, other));
        kf_end(k);
        kf_barrier(k);
        kf_assign(k, stride, kf_binary(k, KF_OP_SHR, s, kf_lit_u32(k, 1)));
    }
    kf_end(k);
    kf_if(k, kf_binary(k, KF_OP_EQ, li, kf_lit_u32(k, 0)));
    kf_kernel_yield(k, kf_shared_load(k, tile, kf_lit_u32(k, 0)), group);
    kf_end(k);
    return k;
}

kf_kernel *kf__example_matmul(void) {
    kf_kernel_desc desc = {0};
    desc.name = "naive_matmul";
    memcpy(desc.workgroup_size, wg16x16, sizeof wg16x16);
    desc.output = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_val m = kf_kernel_override(k, "m", u32, 64);
    kf_val n = kf_kernel_override(k, "n", u32, 64);
    kf_val kd = kf_kernel_override(k, "k", u32, 64);
    kf_binding a = kf_kernel_storage(k, "a", f32, KF_ACCESS_READ);
    kf_binding b = kf_kernel_storage(k, "b", f32, KF_ACCESS_READ);
    kf_val gid = kf_builtin_get(k, KF_BUILTIN_GLOBAL_ID);
    kf_val col = kf_let(k, "col", kf_extract(k, gid, 0));
    kf_val r = kf_for(k, "r", kf_lit_u32(k, 0), kf_lit_u32(k, 2), kf_lit_u32(k, 1));
    {
        kf_val row =
            kf_let(k, "row", kf_add(k, kf_mul(k, kf_extract(k, gid, 1), kf_lit_u32(k, 2)), r));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, row, m),
                           kf_binary(k, KF_OP_LT, col, n)));
        kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0.0f));
        kf_val i = kf_for(k, "i", kf_lit_u32(k, 0), kd, kf_lit_u32(k, 1));
        kf_val av = kf_load(k, a, kf_add(k, kf_mul(k, row, kd), i));
        kf_val bv = kf_load(k, b, kf_add(k, kf_mul(k, i, n), col));
        kf_assign(k, acc, kf_call3(k, KF_FN_FMA, av, bv, kf_read(k, acc)));
        kf_end(k);
        kf_kernel_yield(k, kf_read(k, acc), kf_add(k, kf_mul(k, row, n), col));
        kf_end(k);
    }
    kf_end(k);
    uint32_t grid[3] = {64 / 16, 64 / 32, 1};
    kf_kernel_set_grid(k, grid);
    return k;
}

kf_kernel *kf__example_bias(void) {
    kf_kernel_desc desc = {0};
    desc.name = "bias";
    memcpy(desc.workgroup_size, wg16x16, sizeof wg16x16);
    desc.input = desc.output = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_val n = kf_kernel_override(k, "n", kf_type_scalar(KF_SCALAR_U32), 64);
    kf_binding bias = kf_kernel_storage(k, "bias", kf_type_scalar(KF_SCALAR_F32), KF_ACCESS_READ);
    kf_val index = kf_kernel_index(k);
    kf_val b = kf_load(k, bias, kf_binary(k, KF_OP_MOD, index, n));
    kf_kernel_yield(k, kf_add(k, kf_kernel_input(k), b), index);
    return k;
}

static kf_kernel *build_matmul_bias_relu(void) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *mm = kf__example_matmul();
    kf_kernel *bias = kf__example_bias();
    kf_kernel *relu = kf_kernel_map("relu", f32, f32, wg16x16, kf__example_relu, NULL);
    kf_kernel *mb = mm && bias ? kf_kernel_then(mm, bias) : NULL;
    kf_kernel *mbr = mb && relu ? kf_kernel_then(mb, relu) : NULL;
    kf_kernel_destroy(mm);
    kf_kernel_destroy(bias);
    kf_kernel_destroy(relu);
    kf_kernel_destroy(mb);
    return mbr;
}

/* Each subgroup sums its elements with subgroupAdd; its first invocation stores the sum. */
static kf_kernel *build_subgroup_sum(void) {
    kf_kernel_desc desc = {0};
    desc.name = "subgroup_sum";
    memcpy(desc.workgroup_size, wg256, sizeof wg256);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_binding x = kf_kernel_storage(k, "x", f32, KF_ACCESS_READ);
    kf_binding sums = kf_kernel_storage(k, "sums", f32, KF_ACCESS_READ_WRITE);
    kf_val gi = kf_let(k, "gi", kf_global_linear(k));
    kf_val sg_size = kf_builtin_get(k, KF_BUILTIN_SUBGROUP_SIZE);
    kf_val lane = kf_builtin_get(k, KF_BUILTIN_SUBGROUP_INVOCATION_ID);
    kf_val total = kf_subgroup(k, KF_SUBGROUP_ADD, kf_load(k, x, gi), (kf_val){0, 0});
    kf_if(k, kf_binary(k, KF_OP_EQ, lane, kf_lit_u32(k, 0)));
    kf_store(k, sums, kf_div(k, gi, sg_size), total);
    kf_end(k);
    return k;
}

static const kf__example examples[] = {
    {"demo-chain", "map(x*2+1) |> map(relu) |> map(gelu, tanh form): the demo's chain, one kernel",
     build_demo_chain},
    {"identity", "the identity stage (neutral for |>)", build_identity},
    {"gelu-erf", "gelu in its erf form (kfuse's erf helper)", build_gelu_erf},
    {"reduce-sum", "a workgroup tree reduction in workgroup memory with barriers",
     build_reduce_sum},
    {"naive-matmul", "a small matmul producer whose store phase yields in a loop",
     kf__example_matmul},
    {"naive-matmul-bias-relu",
     "naive-matmul |> bias |> relu: stages inlined at the matmul's store phase",
     build_matmul_bias_relu},
    {"subgroup-sum", "per-subgroup sums with subgroupAdd (needs subgroups)", build_subgroup_sum},
};

uint32_t kf__example_count(void) {
    return (uint32_t)(sizeof examples / sizeof examples[0]);
}

const kf__example *kf__example_at(uint32_t index) {
    return index < kf__example_count() ? &examples[index] : NULL;
}

kf_kernel *kf__example_build(const char *name) {
    for (uint32_t i = 0; name && i < kf__example_count(); i++) {
        if (!strcmp(examples[i].name, name)) {
            return examples[i].build();
        }
    }
    return NULL;
}
