# ctest's InstalledPackage test (tests/api/CMakeLists.txt), run as cmake -P with BUILD_DIR,
# SOURCE_DIR, WORK_DIR, GENERATOR, CXX and SANITIZE (the build's FLUXRT_SANITIZE): installs the build into WORK_DIR/prefix, builds examples/
# against it with find_package(fluxrt) (shared and static), runs both on the installed demo model
# and checks that they write the very PNG the installed `fluxrt generate` writes for the same
# request; then compiles the public headers alone as C++17 and the example through pkg-config.
cmake_minimum_required(VERSION 3.25)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "exit ${rc}: ${cmd}\n${out}\n${err}")
  endif()
  set(RUN_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

# A sanitized libfluxrt loads only into programs built with the same sanitizers.
set(san_flags)
if(SANITIZE)
  string(REPLACE ";" "," san "${SANITIZE}")
  set(san_flags -fsanitize=${san} -fno-omit-frame-pointer)
endif()
string(REPLACE ";" " " san_flags_text "${san_flags}")

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB shared_lib ${prefix}/lib*/libfluxrt.so)
file(GLOB static_lib ${prefix}/lib*/libfluxrt.a)
file(GLOB pc_file ${prefix}/lib*/pkgconfig/fluxrt.pc)
foreach(f shared_lib static_lib pc_file)
  if(NOT ${f})
    message(FATAL_ERROR "cmake --install left no ${f} under ${prefix}")
  endif()
endforeach()
foreach(f include/fluxrt/engine.h include/fluxrt/version.h bin/fluxrt share/fluxrt/models/demo/model_index.json)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install left no ${prefix}/${f}")
  endif()
endforeach()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DFLUXRT_EXAMPLE_STATIC=ON
    "-DCMAKE_CXX_FLAGS=${san_flags_text}" "-DCMAKE_EXE_LINKER_FLAGS=${san_flags_text}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

# The same request three ways; the demo's 64x64 at 8 steps takes about a second each.
set(demo ${prefix}/share/fluxrt/models/demo)
set(prompt "a red circle on a blue background")
set(ENV{FLUXRT_CONFIG_DIR} "")
run(${WORK_DIR}/build/generate ${demo} ${WORK_DIR}/shared.png ${prompt} 64x64 8 7)
message(STATUS "generate: ${RUN_OUTPUT}")
run(${WORK_DIR}/build/generate_static ${demo} ${WORK_DIR}/static.png ${prompt} 64x64 8 7)
run(${prefix}/bin/fluxrt generate --model ${demo} --prompt ${prompt} --size 64x64 --steps 8 --seed 7 --quiet
    --out ${WORK_DIR}/cli --filename cli.png)
foreach(png static.png cli/cli.png)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/shared.png ${WORK_DIR}/${png}
                  RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${WORK_DIR}/${png} differs from ${WORK_DIR}/shared.png (the shared-library example's)")
  endif()
endforeach()

# Every public header together, as strict C++17 with nothing but the installed include folder.
file(WRITE ${WORK_DIR}/all_headers.cpp "#include <fluxrt/fluxrt.h>\nint main() { return fluxrt::version() ? 0 : 1; }\n")
run(${CXX} -std=c++17 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I${prefix}/include ${WORK_DIR}/all_headers.cpp)

find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  get_filename_component(pc_dir ${pc_file} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run(${PKG_CONFIG} --cflags --libs fluxrt)
  separate_arguments(pc_flags UNIX_COMMAND "${RUN_OUTPUT}")
  get_filename_component(lib_dir ${shared_lib} DIRECTORY)
  run(${CXX} -std=c++17 ${san_flags} ${SOURCE_DIR}/examples/generate.cpp ${pc_flags} -Wl,-rpath,${lib_dir}
      -o ${WORK_DIR}/generate_pc)
  # Linked and loadable: without arguments it prints its usage and exits 2.
  execute_process(COMMAND ${WORK_DIR}/generate_pc RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "the pkg-config build of the example exited ${rc} without arguments (expected 2)")
  endif()
else()
  message(STATUS "no pkg-config: the fluxrt.pc compile check skipped")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
