// The thread-local last error. Every failing path sets it through fail(),
// which formats with fmt and returns the status, so a check reads
//     if (x < 0) return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_seqs ({}) < 1", x);
#pragma once

#include <fmt/format.h>

#include <string>

#include "gdn/gdn.h"

namespace gdn {

void set_last_error(std::string message);
void clear_last_error();
// The calling thread's last error (gdn_last_error() returns it).
const char* last_error_cstr();

template <class... Args>
gdn_status_t fail(gdn_status_t status, fmt::format_string<Args...> format, Args&&... args) {
    set_last_error(fmt::format(format, std::forward<Args>(args)...));
    return status;
}

}  // namespace gdn
