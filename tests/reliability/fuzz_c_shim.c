/* Calls with enum parameters holding any int32, as a C caller may pass them
 * (in C an enum object may hold any value of its compatible integer type; in
 * C++ the fuzz harness could not even form such an argument without undefined
 * behaviour of its own). */
#include <string.h>

#include "gdn/gdn.h"

gdn_status_t gdn_fuzz_probe_raw(int32_t backend, int32_t device, gdn_caps_t* caps) {
    gdn_backend_t b;
    memcpy(&b, &backend, sizeof b);
    return gdn_probe(b, device, caps);
}

const char* gdn_fuzz_status_string_raw(int32_t status) {
    gdn_status_t s;
    memcpy(&s, &status, sizeof s);
    return gdn_status_string(s);
}
