/* IEEE binary16 <-> binary32 conversion (round to nearest even), shared by the interpreter, GPU
 * tensors, plans and .npy I/O. */
#ifndef KF_UTIL_HALF_H
#define KF_UTIL_HALF_H

#include <stdint.h>

uint16_t kf__half_from_float(float f);
float kf__half_to_float(uint16_t h);

#endif
