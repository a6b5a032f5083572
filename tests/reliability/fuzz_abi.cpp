// The libFuzzer entry point of the C ABI fuzz target (see fuzz_harness.cpp
// for what is checked, fuzz_case.hpp for the input format). Built with
// clang -fsanitize=fuzzer,address,undefined by scripts/fuzz.sh; the same
// function is driven over the committed corpus by fuzz_replay.cpp in every
// build, so the corpus and each regression input are a ctest test.
#include <cstddef>
#include <cstdint>

#include "fuzz_case.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    gdn_fuzz::FuzzCase c;
    gdn_fuzz::Reader reader(data, size);
    gdn_fuzz::transfer(reader, c);
    gdn_fuzz::run_case(c);
    return 0;
}
