// Internal: status reporting shared by the C API and the instantiations.
#pragma once

#include "fused_swiglu.h"

namespace fused_swiglu::capi {

// Records the message returned by fsw_last_error() for this thread and returns `status`.
fsw_status fail(fsw_status status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Clears the last error of this thread.
void clear_error();

}  // namespace fused_swiglu::capi
