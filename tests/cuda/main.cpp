// The GPU test program: without a CUDA device it prints "skipped: no device"
// and exits 77 (ctest's SKIP_RETURN_CODE), except when only listing tests
// (catch_discover_tests lists them at build time, where there is no GPU).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "cuda_support.hpp"

int main(int argc, char** argv) {
    bool listing = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--list", 0) == 0 || a == "-l" || a == "-h" || a == "--help" || a == "-?")
            listing = true;
    }
    if (!listing && !gdn_cuda_test::device_present()) {
        std::printf("skipped: no device\n");
        return 77;
    }
    if (!listing) {
        GDN_CUDA_CHECK(cudaSetDevice(gdn_cuda_test::test_device()));
        std::printf("device %d\n", gdn_cuda_test::test_device());
    }
    return Catch::Session().run(argc, argv);
}
