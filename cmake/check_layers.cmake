# Include-graph check of include/barato: every `#include "barato/<area>/..."` must point to the same
# area or to an area strictly below it in the layer order (ARCHITECTURE.md):
#
#   core < simd < {nn, kv} < quant < attention < sample < {spec, batch, plan, distill}
#
# Areas of one rank (nn, kv; spec, batch, plan, distill) may not include each other either, so the area graph has no cycle.
# Headers directly under include/barato (the umbrella barato.hpp) may include everything.
# Run: cmake -DSOURCE_DIR=<repo> -P cmake/check_layers.cmake (ctest test `include_layers`).
# Fails naming every offending file and line.
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED SOURCE_DIR)
  get_filename_component(SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
set(root "${SOURCE_DIR}/include/barato")

# Line number of the first line of `file` equal to `text` (file(STRINGS) drops empty lines, so count
# the newlines before it).
function(line_number file text out)
  file(READ "${file}" content)
  string(FIND "${content}" "${text}" pos)
  string(SUBSTRING "${content}" 0 ${pos} before)
  string(REGEX MATCHALL "\n" newlines "${before}")
  list(LENGTH newlines n)
  math(EXPR n "${n} + 1")
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# rank of each area: an include must go to a strictly lower rank (or stay in its own area)
set(rank_core 0)
set(rank_simd 1)
set(rank_nn 2)
set(rank_kv 2)
set(rank_quant 3)
set(rank_attention 4)
set(rank_sample 5)
set(rank_spec 6)
set(rank_batch 6)
set(rank_plan 6)
set(rank_distill 6)

file(GLOB_RECURSE headers RELATIVE "${root}" "${root}/*.hpp")
list(SORT headers)
set(errors "")
set(edges 0)
foreach(rel IN LISTS headers)
  if(NOT rel MATCHES "^([a-z_]+)/")
    continue()  # an umbrella header at the top of include/barato
  endif()
  set(from "${CMAKE_MATCH_1}")
  if(NOT DEFINED rank_${from})
    string(APPEND errors "include/barato/${rel}: area '${from}' has no place in the layer order (cmake/check_layers.cmake)\n")
    continue()
  endif()
  file(STRINGS "${root}/${rel}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]barato/([a-z_]+)/")
      continue()
    endif()
    set(to "${CMAKE_MATCH_1}")
    math(EXPR edges "${edges} + 1")
    if(to STREQUAL from)
      continue()
    endif()
    line_number("${root}/${rel}" "${line}" line_no)
    if(NOT DEFINED rank_${to})
      string(APPEND errors "include/barato/${rel}:${line_no}: includes unknown area '${to}': ${line}\n")
    elseif(NOT rank_${to} LESS rank_${from})
      string(APPEND errors "include/barato/${rel}:${line_no}: ${from} (rank ${rank_${from}}) must not include ${to} (rank ${rank_${to}}): ${line}\n")
    endif()
  endforeach()
endforeach()

if(edges EQUAL 0)
  message(FATAL_ERROR "check_layers: no #include \"barato/...\" lines found under ${root}")
endif()
if(NOT errors STREQUAL "")
  message(FATAL_ERROR "check_layers: includes against the layer order "
                      "core < simd < {nn, kv} < quant < attention < sample < {spec, batch, plan, distill}:\n${errors}")
endif()
list(LENGTH headers n_headers)
message(STATUS "check_layers: ${n_headers} headers, ${edges} includes, all downward")
