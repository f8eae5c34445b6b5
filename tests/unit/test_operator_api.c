/* The operator accessors of the public header: kf_operator is opaque, and a program that only
 * includes kfuse.h reaches every operator's name, class, verification table and kernels. */
#include "harness.h"

#include <string.h>

KT_CPU_TEST(unit, operator_accessors_read_every_op) {
    KT_CHECK(kf_op_count() >= 32, "%u operators", kf_op_count());
    for (uint32_t i = 0; i < kf_op_count(); i++) {
        const kf_operator *op = kf_op_at(i);
        const char *name = kf_op_name(op);
        KT_CHECK(name && name[0], "op %u has a name", i);
        KT_CHECK(kf_op_find(name) == op, "kf_op_find(%s) finds it", name);
        KT_CHECK(kf_op_about(op) && kf_op_about(op)[0], "%s has an about line", name);
        kf_op_class c = kf_op_class_of(op);
        KT_CHECK(c >= KF_OP_CLASS_ELEMENTWISE && c <= KF_OP_CLASS_LAYOUT, "%s: class %d", name,
                 (int)c);
        KT_CHECK(kf_op_case_count(op) > 0, "%s has cases", name);
        KT_CHECK(kf_op_case_at(op, kf_op_case_count(op)) == NULL, "%s: past the table is NULL",
                 name);
        KT_CHECK(kf_op_tolerance(op, KF_DTYPE_F16) >= kf_op_tolerance(op, KF_DTYPE_F32) &&
                     kf_op_tolerance(op, KF_DTYPE_F32) >= 0,
                 "%s tolerances", name);
        const kf_op_case *oc = kf_op_case_at(op, 0);
        kf_kernel *k = kf_op_kernel_forward(op, oc->shapes, &oc->params, KF_DTYPE_F32);
        KT_CHECK(k && kf_kernel_status(k) == KF_OK, "%s: a forward kernel for its first case",
                 name);
        kf_kernel_destroy(k);
    }
    KT_CHECK(kf_op_name(NULL) == NULL && kf_op_case_count(NULL) == 0 &&
                 kf_op_kernel_forward(NULL, NULL, NULL, KF_DTYPE_F32) == NULL,
             "NULL operator");
}

KT_CPU_TEST(unit, operator_spec_forward_computes_the_spec) {
    const kf_operator *op = kf_op_find("scale");
    kf_shape s = kf_shape_1d(7);
    kf_tensor *x = NULL, *y = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &x));
    KT_CHECK_OK(kf_tensor_create(&s, &y));
    for (uint32_t i = 0; i < 7; i++) {
        x->data[i] = kt_rand_f32(-2.0f, 2.0f);
    }
    kf_op_params p = {0};
    p.alpha = 3.0f;
    const kf_tensor *in[1] = {x};
    KT_CHECK_OK(kf_op_spec_forward(op, in, &p, y));
    for (uint32_t i = 0; i < 7; i++) {
        KT_CHECK(y->data[i] == 3.0f * x->data[i], "y[%u] = %g, x = %g", i, (double)y->data[i],
                 (double)x->data[i]);
    }
    KT_CHECK(kf_op_spec_forward(NULL, in, &p, y) == KF_ERROR_INVALID_ARGUMENT, "NULL op");
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
}
