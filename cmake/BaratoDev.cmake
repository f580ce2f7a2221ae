# Compile settings for barato's own targets. Linked PRIVATE-ly by tests, examples and benchmarks;
# nothing here reaches a user who links barato::barato.
include(GNUInstallDirs)
add_library(barato_dev INTERFACE)
target_link_libraries(barato_dev INTERFACE barato::barato)
target_compile_options(barato_dev INTERFACE -Wall -Wextra -Wpedantic $<$<BOOL:${BARATO_WERROR}>:-Werror>)
# GCC 12 warns inside its own avx512fintrin.h (`_mm512_undefined_epi32`, GCC PR 105593) whenever
# xsimd's exp/shift kernels or AVX-512 intrinsics are inlined; a false positive in a system
# header, fixed in GCC 13. Clang (also part of the build matrix) keeps both warnings on.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(barato_dev INTERFACE -Wno-maybe-uninitialized -Wno-uninitialized)
  endif()
endif()
if(BARATO_NATIVE)
  target_compile_options(barato_dev INTERFACE -march=native)
endif()
# LLVM's linker where the toolchain can use it: CI links ~160 programs per build, and under the
# sanitizers GNU ld takes 0.7 s per test against lld's 0.3 s. Output is the same program; a machine
# without lld keeps its default linker.
option(BARATO_USE_LLD "Link barato's own programs with lld when available" ON)
if(BARATO_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld BARATO_HAVE_LLD)
  if(BARATO_HAVE_LLD)
    target_link_options(barato_dev INTERFACE -fuse-ld=lld)
  endif()
endif()
if(BARATO_SANITIZE)
  target_compile_options(barato_dev INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(barato_dev INTERFACE -fsanitize=address,undefined)
endif()

# Called at the end of each CMakeLists.txt that adds tests. Under the sanitizers with clang,
# LeakSanitizer reports the thread-team bookkeeping LLVM's OpenMP runtime (libomp) keeps until exit;
# tests/support/lsan.supp names that library only, so a leak in barato's or a test's own code still
# fails. (set_tests_properties reaches only the calling directory's tests.)
function(barato_sanitizer_test_env)
  if(BARATO_SANITIZE)
    get_property(dir_tests DIRECTORY PROPERTY TESTS)
    if(dir_tests)
      set_tests_properties(${dir_tests} PROPERTIES ENVIRONMENT
        "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/support/lsan.supp")
    endif()
  endif()
endfunction()
find_package(OpenMP)
if(OpenMP_CXX_FOUND)
  target_link_libraries(barato_dev INTERFACE OpenMP::OpenMP_CXX)
endif()
find_package(Threads REQUIRED)
target_link_libraries(barato_dev INTERFACE Threads::Threads)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

# A tutorial or benchmark program: an executable, or with BARATO_CHECK_ONLY_UNRUN an object library
# compiled with -fsyntax-only. The front end still parses and instantiates everything the program
# uses, so every diagnostic (-Werror) is kept; code generation, which under -O0 with the sanitizers'
# instrumentation is 80 % of such a file's compile (tutorial_speculative: 21 s against 3.7 s), and
# the link are skipped. cmake/syntax_only.sh leaves an empty file where the object file would be, so
# the step is not repeated until a source or header changes.
function(barato_add_program name)
  if(BARATO_CHECK_ONLY_UNRUN)
    add_library(${name} OBJECT ${ARGN})
    target_compile_options(${name} PRIVATE -fsyntax-only)
    set_target_properties(${name} PROPERTIES CXX_COMPILER_LAUNCHER "sh;${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh")
  else()
    add_executable(${name} ${ARGN})
  endif()
endfunction()

# Precompiled headers shared by programs with the same flags: Eigen/Core and xsimd parse in 1.4 s
# and 1.0 s per translation unit (all of barato reaches them), and CI compiles every test, tool and
# tutorial twice. barato_add_shared_pch(<target> [headers...]) is an object library that compiles
# the common headers (plus any given) once; each program sharing its flags (links, include
# directories, definitions: the caller sets them identical) then takes
# target_precompile_headers(<program> REUSE_FROM <target>). A mismatch is a compile error
# (-Winvalid-pch under -Werror), not a silent reparse.
option(BARATO_PCH "Precompile the third-party and standard headers shared by barato's tests and programs" ON)
set(BARATO_PCH_COMMON_HEADERS
  <Eigen/Core> <xsimd/xsimd.hpp>
  <algorithm> <array> <cmath> <concepts> <cstddef> <cstdint> <cstring> <filesystem> <fstream> <limits>
  <memory_resource> <random> <span> <string> <string_view> <type_traits> <utility> <vector>)
function(barato_add_shared_pch target)
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${target}_anchor.cpp
       CONTENT "// anchor for the precompiled header ${target}\n")
  add_library(${target} OBJECT ${CMAKE_CURRENT_BINARY_DIR}/${target}_anchor.cpp)
  target_precompile_headers(${target} PRIVATE ${BARATO_PCH_COMMON_HEADERS} ${ARGN})
endfunction()

# barato_program_settings(<target> <pch target> [include dirs...]): the flags a group of programs
# shares (barato_dev, the include directories, the data directory's default) and the group's shared
# precompiled header (none for the precompiled header's own target, nor when <pch target> is "").
function(barato_program_settings target pch)
  target_link_libraries(${target} PRIVATE barato_dev)
  target_include_directories(${target} PRIVATE ${ARGN})
  target_compile_definitions(${target} PRIVATE BARATO_DEFAULT_DATA_DIR="${PROJECT_SOURCE_DIR}/../shared/data")
  if(BARATO_PCH AND pch AND NOT target STREQUAL pch)
    target_precompile_headers(${target} REUSE_FROM ${pch})
  endif()
endfunction()
