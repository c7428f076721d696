// Internal: status reporting shared by the C API and the instantiations.
//
// Each shared object (the core library and every config library) holds its own copy of the last
// error (hidden visibility): a config library's entry points report through ConfigEntry::last_error,
// and the core library copies that text into its own fsw_last_error().
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

#include "fused_swiglu.h"

namespace fused_swiglu::capi {

inline thread_local std::string g_last_error;

// Records the message returned by fsw_last_error() for this thread and returns `status`.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline fsw_status fail(fsw_status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  g_last_error = buf;
  return status;
}

// Clears the last error of this thread.
inline void clear_error() { g_last_error.clear(); }

// The last error of this thread in this shared object.
inline const char* last_error_text() { return g_last_error.c_str(); }

}  // namespace fused_swiglu::capi
