// The nvcc-built half of gdn_tests_hip_emu behind plain C++ (emu_cuda.cu):
// the HIP kernels' source compiled against the WMMA emulation, memory, launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hip/params.hpp"

namespace gdn::hiptest::cuda_emu {

bool available(std::string* why);  // a CUDA device is present
const char* device_name();
void* alloc(size_t bytes);         // aborts on failure (test infrastructure)
void release(void* p);
void upload(void* dst, const void* src, size_t bytes);
void download(void* dst, const void* src, size_t bytes);
void fill(void* dst, int byte, size_t bytes);
// 0, or a CUDA error code (error_string says what).
int launch(hip::Kernel kernel, unsigned grid, unsigned block, const hip::KernelParams& p);
int wmma_tile(const uint16_t* A, const uint16_t* B, const float* C, float* D);  // device pointers
int synchronize();
const char* error_string(int code);
unsigned wmma_operand_faults();

}  // namespace gdn::hiptest::cuda_emu
