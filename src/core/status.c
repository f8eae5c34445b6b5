#include "kfuse.h"

#include <stdlib.h>

const char *kf_status_str(kf_status status) {
    switch (status) {
    case KF_OK:
        return "ok";
    case KF_ERROR_INVALID_ARGUMENT:
        return "invalid argument";
    case KF_ERROR_NO_LIBRARY:
        return "no WebGPU library";
    case KF_ERROR_NO_ADAPTER:
        return "no WebGPU adapter";
    case KF_ERROR_NO_DEVICE:
        return "device creation failed";
    case KF_ERROR_LIMIT:
        return "above device limit";
    case KF_ERROR_OUT_OF_MEMORY:
        return "out of memory";
    case KF_ERROR_COMPILE:
        return "shader compile error";
    case KF_ERROR_VALIDATION:
        return "validation error";
    case KF_ERROR_DEVICE_LOST:
        return "device lost";
    case KF_ERROR_TYPE:
        return "type error";
    case KF_ERROR_SHAPE:
        return "shape error";
    case KF_ERROR_PARSE:
        return "parse error";
    case KF_ERROR_IO:
        return "I/O error";
    case KF_ERROR_UNSUPPORTED:
        return "unsupported on this device";
    case KF_ERROR_MISMATCH:
        return "results differ beyond tolerance";
    case KF_ERROR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

void kf_free(void *ptr) {
    free(ptr);
}

#define KF__STR2(x) #x
#define KF__STR(x) KF__STR2(x)

uint32_t kf_version(void) {
    return KF_VERSION_HEX;
}

const char *kf_version_string(void) {
    return KF__STR(KF_VERSION_MAJOR) "." KF__STR(KF_VERSION_MINOR) "." KF__STR(KF_VERSION_PATCH);
}
