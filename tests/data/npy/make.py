#!/usr/bin/env python3
"""Regenerates the .npy fixtures of tests/unit/test_npy.c (made with numpy 1.24; np.save's layout
has been stable since numpy 1.9, apart from the header's growth padding, which kfuse also writes).
Run from this folder: python3 make.py"""
import numpy as np

np.save('f32_2x3.npy', (np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1))
np.save('f16_3.npy', np.array([1.0, -2.5, 65504], dtype=np.float16))
np.save('f32_scalar.npy', np.array(3.25, dtype=np.float32))
with open('f32_7_v2.npy', 'wb') as f:
    np.lib.format.write_array(f, np.arange(7, dtype=np.float32), version=(2, 0))
np.save('f32_fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save('f64_2.npy', np.array([1.5, 2.5]))
np.save('f32_be.npy', np.array([1.5, 2.5], dtype='>f4'))
np.save('i32_4.npy', np.array([0, 3, -2, 7], dtype=np.int32))
np.save('f32_4d.npy', np.arange(12, dtype=np.float32).reshape(2, 1, 3, 2))
