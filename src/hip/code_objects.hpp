// The device code of the HIP backend: one code object (an AMDGPU ELF, linked
// by clang-19) per gfx target, embedded in the library at build time
// (src/hip/CMakeLists.txt generates the table) and loaded with
// hipModuleLoadData on the device whose gcnArchName matches.
#pragma once

#include <cstddef>

namespace gdn::hip {

struct CodeObject {
    const char* arch;            // "gfx1151"
    const unsigned char* begin;  // the ELF image
    const unsigned char* end;
};

extern const CodeObject kCodeObjects[];
extern const size_t kNumCodeObjects;

}  // namespace gdn::hip
