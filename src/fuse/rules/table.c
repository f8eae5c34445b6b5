/* The fusion rules the planner knows, in the order it asks them to open a group at a node.
 * A new rule: its file in this folder, its declaration in rule.h and one line here. */
#include "fuse/rules/rule.h"

const kf__fusion_rule *const kf__fusion_rules[] = {
    &kf__rule_split_k,         /* few output tiles, long K: partial products and their sum */
    &kf__rule_matmul_epilogue, /* matmul |> element-wise, in the matmul's store phase */
    &kf__rule_reduction_tail,  /* row reduction |> element-wise */
    &kf__rule_gather_tail,     /* embedding |> element-wise, in the gather's store phase */
    &kf__rule_layout,          /* transpose: a group of its own */
    &kf__rule_elementwise,     /* element-wise chains and trees */
    &kf__rule_activation_save, /* a pre-activation backward reads: saved or recomputed */
    &kf__rule_strided,         /* views read in place through strides by the kernels that can */
    &kf__rule_prologue,        /* element-wise producers in a matmul's or reduction's loads */
    &kf__rule_rmsnorm_matmul,  /* rmsnorm in the following matmul's loads and store phase */
    &kf__rule_classifier,      /* a loss and its gradient in one kernel (fused classifier) */
    &kf__rule_companion,       /* attention_lse as a second output of attention's kernel */
    &kf__rule_bias_grad,       /* sum_leading(dY) as a second output of a kernel reading dY */
    &kf__rule_horizontal,      /* independent element-wise groups in one dispatch */
};

const uint32_t kf__fusion_rule_count =
    (uint32_t)(sizeof kf__fusion_rules / sizeof kf__fusion_rules[0]);
