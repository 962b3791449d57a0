# CTest "package: installed consumer": install the build tree into a fresh prefix, check that
# the installed headers need nothing but the public dependencies, then configure, build and
# run docs/examples/consumer against that prefix alone.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -P installed_consumer.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "installed_consumer.cmake needs -D${var}=...")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# Installed headers: no test or binding framework; asio only behind the asynchronous API.
file(GLOB_RECURSE headers RELATIVE ${prefix}/include/onnx_light ${prefix}/include/onnx_light/*.h)
list(LENGTH headers count)
if(count LESS 20)
  message(FATAL_ERROR "only ${count} headers were installed under ${prefix}/include/onnx_light")
endif()
foreach(h ${headers})
  file(READ ${prefix}/include/onnx_light/${h} text)
  if(text MATCHES "#include [<\"](doctest|pybind11)")
    message(FATAL_ERROR "installed header ${h} includes ${CMAKE_MATCH_1}")
  endif()
  if(text MATCHES "#include [<\"]asio" AND NOT h MATCHES "^(executor/async_run|state/async_state)\\.h$")
    message(FATAL_ERROR "installed header ${h} includes asio outside the asynchronous API")
  endif()
endforeach()
message(STATUS "${count} installed headers checked")

run("configure consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/docs/examples/consumer
    -B ${WORK_DIR}/consumer -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run("run consumer" ${WORK_DIR}/consumer/consumer)
message(STATUS "${last_output}")
