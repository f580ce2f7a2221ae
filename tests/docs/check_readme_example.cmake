# Fails when README.md's first ```cpp block under "## Using barato in your project" differs from
# tests/docs/readme_example.cpp (which the test docs_readme_example compiles and runs), so the
# documented example cannot drift from code that builds.
# Usage: cmake -DREADME=README.md -DEXAMPLE=tests/docs/readme_example.cpp -P check_readme_example.cmake
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)
set(section "## Using barato in your project")
string(FIND "${readme}" "${section}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no section '${section}'")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
set(fence "```cpp\n")
string(FIND "${readme}" "${fence}" open)
if(open EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cpp block under '${section}'")
endif()
string(LENGTH "${fence}" fence_len)
math(EXPR begin "${open} + ${fence_len}")
string(SUBSTRING "${readme}" ${begin} -1 readme)
string(FIND "${readme}" "\n```" close)
if(close EQUAL -1)
  message(FATAL_ERROR "${README}: the ```cpp block under '${section}' is not closed")
endif()
math(EXPR len "${close} + 1")  # keep the block's last newline
string(SUBSTRING "${readme}" 0 ${len} block)
if(NOT block STREQUAL example)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/readme_block.cpp" "${block}")
  message(FATAL_ERROR "README.md's example differs from ${EXAMPLE}; the README block is in "
                      "${CMAKE_CURRENT_BINARY_DIR}/readme_block.cpp (diff the two, then update one)")
endif()
message(STATUS "README example == ${EXAMPLE}")
