// Choosing between an op's implementations ("paths"). An op checks its arguments once, then
// select<Paths>(caps, shape, requested) names the implementation to run:
//   1. the caller's explicit argument, when it is not `automatic`;
//   2. else the op's environment variable (LW_GEMM_PATH=tiled, LW_ATTENTION_PATH=portable),
//      which forces one path for testing and measuring;
//   3. else the op's own automatic choice, Paths::choose(caps, shape).
// A forced name that is unknown is refused with the list of valid ones, and a forced path
// this build or device cannot run is refused with the reason: never a silent fallback.
//
// An op describes its paths in one traits struct (see AttentionPaths in ops/attention.h):
//   struct MyPaths {
//     using Path = MyPath;    // an enum with a member `automatic` (the op's own choice)
//     using Shape = MyShape;  // what the automatic choice looks at
//     static constexpr const char* op = "my op";
//     static constexpr const char* env = "LW_MY_PATH";
//     static constexpr PathName<MyPath> names[] = {{MyPath::automatic, "automatic"}, ...};
//     static Availability available(const gpu::DeviceCaps&, MyPath);  // of a path other than automatic
//     static MyPath choose(const gpu::DeviceCaps&, const MyShape&);    // an available path
//   };
// Whether a path exists in this build is a fact of the target's own source file (a target
// without the fast kernels compiles a small file whose query says so, as vendor_gemm_host.cpp
// does for the vendor library), so ops code holds no `#if LW_TARGET_*`.
#pragma once
#include <concepts>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "gpu/device_caps.h"

namespace lw::ops {

// Whether this build and device can run a path; when not, why (shown to whoever forced it).
struct Availability {
  bool ok = true;
  std::string reason;
  static Availability yes() { return {}; }
  static Availability no(std::string why) { return {false, std::move(why)}; }
};

template <class Path>
struct PathName {
  Path path;
  const char* name;
};

// Where a selection came from: the op's choice, the caller's argument, the environment.
enum class PathOrigin { automatic, argument, environment };

template <class Path>
struct Selection {
  Path path;
  PathOrigin origin = PathOrigin::automatic;
  // Forced paths run as asked or fail; only the op's own choice may take a fallback.
  bool forced() const { return origin != PathOrigin::automatic; }
};

template <class P>
concept OpPaths = requires(const gpu::DeviceCaps& caps, const typename P::Shape& shape, typename P::Path path) {
  { P::op } -> std::convertible_to<const char*>;
  { P::env } -> std::convertible_to<const char*>;
  P::names[0].name;
  { P::available(caps, path) } -> std::same_as<Availability>;
  { P::choose(caps, shape) } -> std::same_as<typename P::Path>;
  P::Path::automatic;
};

template <OpPaths P>
const char* path_name(typename P::Path path) {
  for (const auto& n : P::names)
    if (n.path == path) return n.name;
  return "?";
}

// "automatic, vendor, gemv, tiled".
template <OpPaths P>
std::string path_names() {
  std::string s;
  for (const auto& n : P::names) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

// The path called `name`; `where` says where the name came from, for the error.
template <OpPaths P>
typename P::Path parse_path(std::string_view name, const std::string& where) {
  for (const auto& n : P::names)
    if (name == n.name) return n.path;
  LW_FAIL(where << ": unknown " << P::op << " path '" << name << "'; valid: " << path_names<P>());
}

// Every path but automatic that this build and device can run.
template <OpPaths P>
std::vector<typename P::Path> available_paths(const gpu::DeviceCaps& caps) {
  std::vector<typename P::Path> out;
  for (const auto& n : P::names)
    if (n.path != P::Path::automatic && P::available(caps, n.path).ok) out.push_back(n.path);
  return out;
}

template <OpPaths P>
Selection<typename P::Path> select(const gpu::DeviceCaps& caps, const typename P::Shape& shape,
                                   typename P::Path requested) {
  using Path = typename P::Path;
  const char* env = std::getenv(P::env);
  // The message is built only on failure: select runs on every call of the op.
  auto require = [&](Path path, PathOrigin origin) {
    const Availability a = P::available(caps, path);
    LW_CHECK(a.ok, (origin == PathOrigin::environment ? std::string(P::env) + "=" + env
                    : origin == PathOrigin::argument  ? std::string(P::op) + " (path argument)"
                                                      : std::string(P::op) + " (automatic choice)")
                       << ": the " << P::op << " path '" << path_name<P>(path) << "' cannot run on device "
                       << caps.device << " (" << caps.arch << "): " << a.reason);
  };
  if (requested != Path::automatic) {
    require(requested, PathOrigin::argument);
    return {requested, PathOrigin::argument};
  }
  if (env != nullptr && *env != '\0') {
    const Path forced = parse_path<P>(env, std::string(P::env) + "=" + env);
    if (forced != Path::automatic) {
      require(forced, PathOrigin::environment);
      return {forced, PathOrigin::environment};
    }
  }
  const Path chosen = P::choose(caps, shape);
  require(chosen, PathOrigin::automatic);  // a failure here is a bug in choose, not a user error
  return {chosen, PathOrigin::automatic};
}

// " (forced by LW_GEMM_PATH)", " (path argument)" or "": for the op's own messages about a path.
template <OpPaths P>
std::string origin_note(const Selection<typename P::Path>& s) {
  switch (s.origin) {
    case PathOrigin::argument: return " (path argument)";
    case PathOrigin::environment: return std::string(" (forced by ") + P::env + ")";
    case PathOrigin::automatic: break;
  }
  return "";
}

}  // namespace lw::ops
