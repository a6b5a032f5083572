// Device code of the HIP backend, compiled once per gfx target (src/hip/CMakeLists.txt).
#include "kernels.hpp"
