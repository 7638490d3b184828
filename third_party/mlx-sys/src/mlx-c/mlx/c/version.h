/* Copyright © 2023-2024 Apple Inc. */

#ifndef MLX_VERSION_H
#define MLX_VERSION_H

#include "mlx/c/string.h"

#ifdef __cplusplus
extern "C" {
#endif

int mlx_version(mlx_string* str_);

#ifdef __cplusplus
}
#endif

#endif
