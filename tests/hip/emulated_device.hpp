// A Device whose kernels are the HIP kernels' source built for another
// machine (nvcc or host fibers): validation and path choice as the library
// makes them, then src/hip/launch.hpp's launches.
#pragma once

#include "device.hpp"
#include "hip/launch.hpp"

namespace gdn::hiptest {

class EmulatedDevice : public Device {
public:
    gdn_caps_t caps(bool wmma) const override;
    gdn_status_t run(const gdn_caps_t& caps, const gdn_problem_t& problem,
                     const gdn_tensors_t& tensors, PathChoice* path) override;
    ~EmulatedDevice() override;

protected:
    virtual gdn_status_t launch(const hip::Launch& l, const hip::KernelParams& p) = 0;
    virtual void fill(void* dst, int byte, size_t bytes) = 0;
    virtual gdn_status_t synchronize() = 0;

private:
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
};

}  // namespace gdn::hiptest
