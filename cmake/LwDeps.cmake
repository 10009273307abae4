# Third-party libraries. Normally the Debian packages (scripts/setup.sh installs them). A
# machine without them (the GPU machine of the device tool, which has no package access) can
# point LW_DEPS_DIR at a folder made by scripts/gather_deps.sh: GoogleTest's source and the
# header-only forms of spdlog, fmt, CLI11 and nlohmann-json.
set(LW_DEPS_DIR "" CACHE PATH "Folder made by scripts/gather_deps.sh (empty: use system packages)")

if(LW_DEPS_DIR)
  if(NOT EXISTS "${LW_DEPS_DIR}/googletest/CMakeLists.txt" OR NOT EXISTS "${LW_DEPS_DIR}/include/spdlog/spdlog.h")
    message(FATAL_ERROR "LW_DEPS_DIR=${LW_DEPS_DIR} does not hold googletest/ and include/spdlog; make it with scripts/gather_deps.sh")
  endif()
  add_library(lw_spdlog INTERFACE)
  target_include_directories(lw_spdlog SYSTEM INTERFACE ${LW_DEPS_DIR}/include)
  target_compile_definitions(lw_spdlog INTERFACE FMT_HEADER_ONLY)
  set(LW_SPDLOG lw_spdlog)
  add_library(lw_cli11 INTERFACE)
  target_include_directories(lw_cli11 SYSTEM INTERFACE ${LW_DEPS_DIR}/include)
  add_library(CLI11::CLI11 ALIAS lw_cli11)
  add_library(lw_json INTERFACE)
  target_include_directories(lw_json SYSTEM INTERFACE ${LW_DEPS_DIR}/include)
  add_library(nlohmann_json::nlohmann_json ALIAS lw_json)
  if(LW_BUILD_TESTS)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory(${LW_DEPS_DIR}/googletest ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
  endif()
else()
  find_package(spdlog REQUIRED)
  # The compiled library where a program using it links: a source that includes spdlog.h then
  # compiles its declarations only (about 4 s less each on the 2-core CI machine, a few dozen
  # sources per build). A distribution's compiled spdlog can lag its fmt headers (Debian sid's
  # spdlog 1.15 was built against fmt 11 while libfmt-dev ships fmt 12): then the header-only form.
  if(TARGET spdlog::spdlog AND NOT DEFINED CACHE{LW_SPDLOG_COMPILED_LINKS})
    try_compile(LW_SPDLOG_COMPILED_LINKS
                SOURCE_FROM_CONTENT spdlog_probe.cpp
                [=[#include <spdlog/sinks/stdout_color_sinks.h>
                   #include <spdlog/spdlog.h>
                   int main() {
                     auto l = spdlog::stderr_color_mt("probe");
                     l->set_level(spdlog::level::from_str("off"));
                     l->info("{} {:.3f} {}", 1, 2.5, "x");
                     return 0;
                   }]=]
                LINK_LIBRARIES spdlog::spdlog
                CXX_STANDARD 20)
    message(STATUS "lightwave: the compiled spdlog links: ${LW_SPDLOG_COMPILED_LINKS}")
  endif()
  if(LW_SPDLOG_COMPILED_LINKS)
    set(LW_SPDLOG spdlog::spdlog)
  elseif(TARGET spdlog::spdlog_header_only)
    set(LW_SPDLOG spdlog::spdlog_header_only)
  else()
    set(LW_SPDLOG spdlog::spdlog)
  endif()
  find_package(CLI11 REQUIRED)
  find_package(nlohmann_json 3.10 REQUIRED)
  if(LW_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
endif()
