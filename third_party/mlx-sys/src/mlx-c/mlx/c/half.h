/* Copyright © 2023-2024 Apple Inc. */

#ifndef MLX_HALF_H
#define MLX_HALF_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) || defined(__aarch64__)
#define HAS_FLOAT16
#include <arm_fp16.h>
typedef __fp16 float16_t;
#endif

#if defined(__ARM_FEATURE_BF16) || defined(__aarch64__)
#define HAS_BFLOAT16
#include <arm_bf16.h>
typedef __bf16 bfloat16_t;
#endif

/* vauban patch 4: elsewhere (x86_64) the C types are 16-bit storage: the
 * values cross the C API only by pointer and are bit-copied to and from
 * MLX's own float16_t and bfloat16_t. Clang (bindgen) has __fp16 on every
 * target as a storage-only type, which is what mlx-rs expects the binding
 * of float16_t to be; gcc, compiling mlx-c, gets a 16-bit integer of the
 * same size and alignment. */
#ifndef HAS_FLOAT16
#define HAS_FLOAT16
#if defined(__clang__)
typedef __fp16 float16_t;
#else
#include <stdint.h>
typedef uint16_t float16_t;
#endif
#endif
#ifndef HAS_BFLOAT16
#define HAS_BFLOAT16
#include <stdint.h>
typedef uint16_t bfloat16_t;
#endif

#ifdef __cplusplus
}
#endif

#endif
