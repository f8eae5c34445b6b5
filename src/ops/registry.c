/* The operator table: every verified operator, from the list in ops/op_list.h. */
#include "ops/ops_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const kf_operator *const table[] = {
#define KF__OP(NAME) &kf__op_##NAME,
#include "ops/op_list.h"
#undef KF__OP
};
#define TABLE_SIZE (sizeof table / sizeof table[0])

uint32_t kf_op_count(void) {
    return (uint32_t)TABLE_SIZE;
}

const kf_operator *kf_op_at(uint32_t index) {
    return index < TABLE_SIZE ? table[index] : NULL;
}

const kf_operator *kf_op_find(const char *name) {
    for (size_t i = 0; name && i < TABLE_SIZE; i++) {
        if (!strcmp(table[i]->name, name)) {
            return table[i];
        }
    }
    return NULL;
}

static bool input_present(const kf__input *in, const kf_op_params *p) {
    if (!in->optional) {
        return true;
    }
    bool present = false;
    memcpy(&present, (const char *)p + in->present, sizeof present);
    return present;
}

uint32_t kf_op_arity(const kf_operator *op, const kf_op_params *p) {
    if (!op) {
        return 0;
    }
    if (!op->inputs) {
        return op->arity;
    }
    kf_op_params zero = {0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < op->input_count; i++) {
        n += input_present(&op->inputs[i], p ? p : &zero);
    }
    return n;
}

kf_status kf_op_shape(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                      kf_shape *out, char *msg, size_t msg_size) {
    if (msg && msg_size) {
        msg[0] = '\0';
    }
    if (!op || !in || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_op_params zero = {0};
    return op->shape(in, p ? p : &zero, out, msg, msg_size);
}

const char *kf_op_name(const kf_operator *op) {
    return op ? op->name : NULL;
}

const char *kf_op_about(const kf_operator *op) {
    return op ? op->about : NULL;
}

kf_op_class kf_op_class_of(const kf_operator *op) {
    return op ? op->op_class : (kf_op_class)0;
}

uint32_t kf_op_case_count(const kf_operator *op) {
    return op ? op->case_count : 0;
}

const kf_op_case *kf_op_case_at(const kf_operator *op, uint32_t index) {
    return op && index < op->case_count ? &op->cases[index] : NULL;
}

double kf_op_tolerance(const kf_operator *op, kf_dtype dtype) {
    if (!op) {
        return 0.0;
    }
    return dtype == KF_DTYPE_F16 ? op->tolerance_f16 : op->tolerance_f32;
}

kf_kernel *kf_op_kernel_forward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype) {
    if (!op || !in || !op->kernel_forward) {
        return NULL;
    }
    kf_op_params zero = {0};
    return op->kernel_forward(in, p ? p : &zero, dtype);
}

kf_status kf_op_spec_forward(const kf_operator *op, const kf_tensor *const *in,
                             const kf_op_params *p, kf_tensor *out) {
    if (!op || !in || !out || !op->spec_forward) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_op_params zero = {0};
    return op->spec_forward(in, p ? p : &zero, out);
}

/* ---- parameter descriptions ------------------------------------------------------------------ */

static double field_get(const kf_op_params *p, const kf__param *d) {
    const char *base = (const char *)p + d->offset;
    if (d->type == KF_PARAM_TYPE_INT_LIST) {
        return (double)p->list_count; /* the list lives in p->list: its count says it is there */
    }
    if (d->type == KF_PARAM_TYPE_FLOAT) {
        float f;
        memcpy(&f, base, sizeof f);
        return (double)f;
    }
    if (d->type == KF_PARAM_TYPE_BOOL) {
        bool b;
        memcpy(&b, base, sizeof b);
        return b ? 1.0 : 0.0;
    }
    int32_t i;
    memcpy(&i, base, sizeof i);
    return (double)i;
}

static void field_set(kf_op_params *p, const kf__param *d, double v) {
    char *base = (char *)p + d->offset;
    if (d->type == KF_PARAM_TYPE_FLOAT) {
        float f = (float)v;
        memcpy(base, &f, sizeof f);
    } else if (d->type == KF_PARAM_TYPE_BOOL) {
        bool b = v != 0.0;
        memcpy(base, &b, sizeof b);
    } else if (d->type == KF_PARAM_TYPE_INT) {
        int32_t i = (int32_t)v;
        memcpy(base, &i, sizeof i);
    }
    p->given |= d->given;
}

double kf__param_value(const kf_op_params *p, const kf__param *d) {
    double v = field_get(p, d);
    return (p->given & d->given) || v != 0.0 ? v : d->default_value;
}

static void say(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *msg, size_t msg_size, const char *fmt, ...) {
    if (!msg || !msg_size) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
}

/* "eps > 0", "alpha is a finite number", "exact is 0 or 1" into buf. */
static const char *range_str(const kf__param *d, char *buf, size_t size) {
    if (d->type == KF_PARAM_TYPE_BOOL) {
        snprintf(buf, size, "%s is 0 or 1", d->name);
    } else if (d->type == KF_PARAM_TYPE_INT_LIST) {
        snprintf(buf, size, "%s is a list of at most %d whole numbers, each %.9g..%.9g", d->name,
                 KF_MAX_DIMS, d->min, d->max);
    } else if (d->min <= -3.4e38 && d->max >= 3.4e38) {
        snprintf(buf, size, "%s is any finite %s", d->name,
                 d->type == KF_PARAM_TYPE_INT ? "whole number" : "number");
    } else if (d->max >= 3.4e38) {
        snprintf(buf, size, "%s %s %.9g%s", d->name, d->min_exclusive ? ">" : ">=", d->min,
                 d->type == KF_PARAM_TYPE_INT ? ", whole" : "");
    } else {
        snprintf(buf, size, "%.9g %s %s <= %.9g%s", d->min, d->min_exclusive ? "<" : "<=", d->name,
                 d->max, d->type == KF_PARAM_TYPE_INT ? ", whole" : "");
    }
    return buf;
}

/* "alpha, beta" or "no parameters", for messages. */
static const char *names_str(const kf_operator *op, char *buf, size_t size) {
    if (!op->param_count) {
        snprintf(buf, size, "%s takes no parameters", op->name);
        return buf;
    }
    size_t used = (size_t)snprintf(buf, size, "%s takes", op->name);
    for (uint32_t i = 0; i < op->param_count && used < size; i++) {
        used +=
            (size_t)snprintf(buf + used, size - used, "%s %s", i ? "," : "", op->params[i].name);
    }
    return buf;
}

/* Whether v is a valid value of d; msg says why not. */
static bool param_valid(const kf_operator *op, const kf__param *d, double v, char *msg,
                        size_t msg_size) {
    char range[128];
    bool whole = v == floor(v);
    bool in_range = v <= d->max && (d->min_exclusive ? v > d->min : v >= d->min);
    if (d->type == KF_PARAM_TYPE_BOOL && !(v == 0.0 || v == 1.0)) {
        say(msg, msg_size, "%s: %s = %.9g is not a bool (%s)", op->name, d->name, v,
            range_str(d, range, sizeof range));
        return false;
    }
    if (d->type == KF_PARAM_TYPE_INT && !whole) {
        say(msg, msg_size, "%s: %s = %.9g is not a whole number (%s)", op->name, d->name, v,
            range_str(d, range, sizeof range));
        return false;
    }
    if (!in_range) { /* NaN lands here too */
        say(msg, msg_size, "%s: %s = %.9g is out of range (%s)", op->name, d->name, v,
            range_str(d, range, sizeof range));
        return false;
    }
    return true;
}

const kf__param *kf__param_find(const kf_operator *op, const char *name) {
    for (uint32_t i = 0; op && name && i < op->param_count; i++) {
        if (!strcmp(op->params[i].name, name)) {
            return &op->params[i];
        }
    }
    return NULL;
}

uint32_t kf_op_param_count(const kf_operator *op) {
    return op ? op->param_count : 0;
}

kf_status kf_op_param_info_at(const kf_operator *op, uint32_t index, kf_op_param_info *out) {
    if (!op || !out || index >= op->param_count) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__param *d = &op->params[index];
    *out = (kf_op_param_info){.name = d->name,
                              .about = d->about,
                              .type = d->type,
                              .default_value = d->default_value,
                              .min = d->min,
                              .max = d->max,
                              .min_exclusive = d->min_exclusive,
                              .given = d->given};
    return KF_OK;
}

kf_status kf_op_param_set(const kf_operator *op, kf_op_params *p, const char *name, double value,
                          char *msg, size_t msg_size) {
    say(msg, msg_size, "%s", "");
    if (!op || !p || !name) {
        say(msg, msg_size, "kf_op_param_set: %s is NULL", !op ? "op" : !p ? "params" : "name");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__param *d = kf__param_find(op, name);
    if (!d) {
        char names[256];
        say(msg, msg_size, "%s: unknown parameter '%s' (%s)", op->name, name,
            names_str(op, names, sizeof names));
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (d->type == KF_PARAM_TYPE_INT_LIST) {
        say(msg, msg_size, "%s: %s is a list ([...]; kf_op_param_set_list), not a number %.9g",
            op->name, name, value);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!param_valid(op, d, value, msg, msg_size)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    field_set(p, d, value);
    return KF_OK;
}

/* Whether values[0..count) are a valid value of list parameter d; msg says why not. */
static bool list_valid(const kf_operator *op, const kf__param *d, const int32_t *values,
                       uint32_t count, char *msg, size_t msg_size) {
    char range[160];
    if (count > KF_MAX_DIMS) {
        say(msg, msg_size, "%s: %s has %u entries (%s)", op->name, d->name, count,
            range_str(d, range, sizeof range));
        return false;
    }
    for (uint32_t i = 0; i < count; i++) {
        if ((double)values[i] < d->min || (double)values[i] > d->max) {
            say(msg, msg_size, "%s: %s[%u] = %d is out of range (%s)", op->name, d->name, i,
                (int)values[i], range_str(d, range, sizeof range));
            return false;
        }
    }
    return true;
}

kf_status kf_op_param_set_list(const kf_operator *op, kf_op_params *p, const char *name,
                               const int32_t *values, uint32_t count, char *msg, size_t msg_size) {
    say(msg, msg_size, "%s", "");
    if (!op || !p || !name || (count && !values)) {
        say(msg, msg_size, "kf_op_param_set_list: %s is NULL",
            !op     ? "op"
            : !p    ? "params"
            : !name ? "name"
                    : "values");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__param *d = kf__param_find(op, name);
    if (!d) {
        char names[256];
        say(msg, msg_size, "%s: unknown parameter '%s' (%s)", op->name, name,
            names_str(op, names, sizeof names));
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (d->type != KF_PARAM_TYPE_INT_LIST) {
        say(msg, msg_size, "%s: %s takes a number, not a list", op->name, name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!list_valid(op, d, values, count, msg, msg_size)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(p->list, 0, sizeof p->list);
    if (count) {
        memcpy(p->list, values, sizeof *values * count);
    }
    p->list_count = count;
    p->given |= d->given;
    return KF_OK;
}

double kf_op_param_value(const kf_operator *op, const kf_op_params *p, uint32_t index) {
    if (!op || index >= op->param_count) {
        return NAN;
    }
    kf_op_params zero = {0};
    return kf__param_value(p ? p : &zero, &op->params[index]);
}

kf_status kf_op_params_check(const kf_operator *op, const kf_op_params *p, char *msg,
                             size_t msg_size) {
    say(msg, msg_size, "%s", "");
    if (!op) {
        say(msg, msg_size, "kf_op_params_check: op is NULL");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!p) {
        return KF_OK;
    }
    uint32_t known = 0;
    for (uint32_t i = 0; i < op->param_count; i++) {
        const kf__param *d = &op->params[i];
        known |= d->given;
        double v = field_get(p, d);
        if (d->type == KF_PARAM_TYPE_INT_LIST) {
            if (((p->given & d->given) || v != 0.0) &&
                !list_valid(op, d, p->list, p->list_count, msg, msg_size)) {
                return KF_ERROR_INVALID_ARGUMENT;
            }
            continue;
        }
        if (((p->given & d->given) || v != 0.0) && !param_valid(op, d, v, msg, msg_size)) {
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    if (p->given & ~known) {
        char names[256];
        say(msg, msg_size, "%s: kf_op_params.given marks parameters 0x%x it does not take (%s)",
            op->name, p->given & ~known, names_str(op, names, sizeof names));
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return KF_OK;
}

uint32_t kf_op_input_count(const kf_operator *op) {
    if (!op) {
        return 0;
    }
    return op->inputs ? op->input_count : op->arity;
}

kf_status kf_op_input_info(const kf_operator *op, uint32_t index, const char **name,
                           bool *optional) {
    static const char *const generic[] = {"a", "b", "c", "d"};
    if (!op || index >= kf_op_input_count(op)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (name) {
        *name = op->inputs ? op->inputs[index].name : index < 4 ? generic[index] : "input";
    }
    if (optional) {
        *optional = op->inputs ? op->inputs[index].optional : false;
    }
    return KF_OK;
}

uint32_t kf__op_index_classes(const kf_operator *op, const kf_shape *in) {
    if (op && op->index_classes) {
        return op->index_classes(in);
    }
    return in[0].rank ? in[0].dims[in[0].rank - 1] : 1;
}

kf_dtype kf__op_input_dtype(const kf_operator *op, uint32_t i, kf_dtype dtype) {
    if ((op->index_inputs >> i) & 1u) {
        return KF_DTYPE_I32;
    }
    return (op->f32_inputs >> i) & 1u ? KF_DTYPE_F32 : dtype;
}

kf_dtype kf__op_output_dtype(const kf_operator *op, kf_dtype dtype) {
    return op->f32_output ? KF_DTYPE_F32 : dtype;
}

bool kf__input_present(const kf_operator *op, uint32_t index, const kf_op_params *p) {
    if (!op->inputs) {
        return index < op->arity;
    }
    kf_op_params zero = {0};
    return index < op->input_count && input_present(&op->inputs[index], p ? p : &zero);
}

void kf__input_set_present(const kf_operator *op, uint32_t index, kf_op_params *p) {
    if (op->inputs && index < op->input_count && op->inputs[index].optional) {
        bool yes = true;
        memcpy((char *)p + op->inputs[index].present, &yes, sizeof yes);
    }
}
