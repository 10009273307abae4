// Boost.Context's ucontext fibers (used under AddressSanitizer, since they annotate every stack
// switch for it) keep the running record in a per-thread pointer whose definition lives in the
// Boost.Context library only when that library was built for ucontext; Debian builds it for
// fcontext. This supplies it: each OS thread starts on a record of its own main context.
#include <boost/context/fiber.hpp>

namespace boost::context::detail {

fiber_activation_record*& fiber_activation_record::current() noexcept {
  thread_local fiber_activation_record main_context;
  thread_local fiber_activation_record* running = &main_context;
  return running;
}

}  // namespace boost::context::detail
