# Installs barato into a temporary prefix, then configures and builds tests/consumer/project
# against it with find_package(barato CONFIG) and runs the result.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer check: command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/barato-build -DCMAKE_CXX_COMPILER=${CXX}
    -DBARATO_BUILD_TESTS=OFF -DBARATO_BUILD_EXAMPLES=OFF -DBARATO_BUILD_BENCHMARKS=OFF
    -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/barato-build)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/project -B ${WORK_DIR}/consumer-build
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)
message(STATUS "consumer check passed")
