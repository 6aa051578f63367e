#pragma once
// Row-wise softmax / log-softmax (max-subtracted, fp32). In place allowed.

#include <cstdint>

namespace spindle::kernels {

void softmax(const float* x, float* y, int64_t rows, int64_t n);
void log_softmax(const float* x, float* y, int64_t rows, int64_t n);

}  // namespace spindle::kernels
