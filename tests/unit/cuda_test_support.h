// For tests that link the CUDA kernels: REQUIRE_CUDA() skips a test on a
// machine without a CUDA device (the reason as the skip message), and fails
// it instead when COLI_REQUIRE_CUDA=1 (the GPU machine's runs set it).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/cuda_kernels.h"

#define REQUIRE_CUDA()                                                                        \
  do {                                                                                        \
    const ::coli::kernels::cuda::CudaDeviceCount found = ::coli::kernels::cuda::cuda_device_count(); \
    if (found.devices == 0) {                                                                 \
      const char* required = std::getenv("COLI_REQUIRE_CUDA");                                \
      if (required && std::string(required) == "1") FAIL() << found.reason;                   \
      GTEST_SKIP() << found.reason;                                                           \
    }                                                                                         \
  } while (0)
