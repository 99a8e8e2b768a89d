// spdlog and fmt, compiled into ddprun's own binaries instead of loaded from libspdlog.so and libfmt.so.
//
// Why: on start-up the dynamic linker resolves every symbol those two libraries (and the libstdc++.so they pull in)
// import and export; for ddprun that was about 2-3 ms of the ~20 ms of CPU an agent spends before it joins a
// rendezvous. Debian ships both as
// compiled libraries whose implementation is also in headers: spdlog's `*-inl.h` files, which its own compiled
// build includes once each (spdlog's src/*.cpp, SPDLOG_COMPILED_LIB), and fmt's `format-inl.h` (fmt's
// src/format.cc). This file is that one inclusion, for the parts ddprun uses; the explicit instantiations are
// the templates the headers declare `extern` in a compiled build. Every other file sees the same headers with
// the same definitions (target ddprun_spdlog), so there is one copy of each function.
#include <fmt/format-inl.h>

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE

template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;
// The registry's default logger writes to a colour sink on stdout.
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
