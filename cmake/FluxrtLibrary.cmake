# libfluxrt: every layer in one library, shared (fluxrt::fluxrt) and static (fluxrt::fluxrt_static),
# for programs built against the public headers (include/fluxrt/, docs/api.md), and the install:
# headers, both libraries, the CMake package (find_package(fluxrt)), fluxrt.pc, the fluxrt command
# with its presets and the demo model.
#
# Both libraries are made from the layers' own object files (CMAKE_POSITION_INDEPENDENT_CODE is on
# for the whole tree), so they cost one archive and one link, never a second compile. The shared
# library carries its dependencies (oneDNN, OpenMP, ...) as its own DT_NEEDED entries: its users
# link it alone. The static one leaves them to its users; fluxrtConfig.cmake finds them when asked
# for the `static` component.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FLUXRT_LAYERS fluxrt_core fluxrt_io fluxrt_tokenizers fluxrt_backend_ref fluxrt_backend_cpu
    fluxrt_backend_cuda fluxrt_ops fluxrt_nn fluxrt_models fluxrt_pipelines fluxrt_runtime fluxrt_frontend)
set(_objects)
set(_deps)
foreach(_layer ${FLUXRT_LAYERS})
  list(APPEND _objects $<TARGET_OBJECTS:${_layer}>)
  get_target_property(_links ${_layer} LINK_LIBRARIES)
  foreach(_dep ${_links})
    if(NOT _dep MATCHES "^fluxrt_")
      list(APPEND _deps ${_dep})
    endif()
  endforeach()
endforeach()
# The HTTP API (include/fluxrt/http_api.h) is public too: its objects (apps/server, on the public
# API alone) go in beside the layers'; what it links besides them is header-only.
list(APPEND _objects $<TARGET_OBJECTS:fluxrt_http_api>)
list(REMOVE_DUPLICATES _deps)
# Header-only: nothing for a static library's users to link.
set(_link_deps ${_deps})
list(TRANSFORM _link_deps REPLACE "^(nlohmann_json::nlohmann_json)$" "$<BUILD_INTERFACE:\\1>")

add_library(fluxrt_shared SHARED ${_objects})
add_library(fluxrt_static STATIC ${_objects})
target_link_libraries(fluxrt_shared PRIVATE ${_deps})
target_link_libraries(fluxrt_static PRIVATE ${_link_deps})
set_target_properties(fluxrt_shared PROPERTIES OUTPUT_NAME fluxrt EXPORT_NAME fluxrt LINKER_LANGUAGE CXX
                                               VERSION ${PROJECT_VERSION}
                                               SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set_target_properties(fluxrt_static PROPERTIES OUTPUT_NAME fluxrt EXPORT_NAME fluxrt_static LINKER_LANGUAGE CXX)
foreach(_lib fluxrt_shared fluxrt_static)
  # The public headers alone: standard C++17 and nothing internal.
  target_include_directories(${_lib} INTERFACE
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${_lib} INTERFACE cxx_std_17)
endforeach()
add_library(fluxrt::fluxrt ALIAS fluxrt_shared)
add_library(fluxrt::fluxrt_static ALIAS fluxrt_static)

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/fluxrt)
install(TARGETS fluxrt_shared EXPORT fluxrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS fluxrt_static EXPORT fluxrtStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/fluxrt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/generated/fluxrt/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fluxrt)
install(EXPORT fluxrtTargets NAMESPACE fluxrt:: DESTINATION ${_cmake_dir})
install(EXPORT fluxrtStaticTargets NAMESPACE fluxrt:: DESTINATION ${_cmake_dir})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/fluxrtConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/fluxrtConfig.cmake INSTALL_DESTINATION ${_cmake_dir})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/fluxrtConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/fluxrtConfig.cmake ${CMAKE_BINARY_DIR}/fluxrtConfigVersion.cmake
        DESTINATION ${_cmake_dir})
# fluxrt.pc finds the prefix from its own folder (relocatable, as the CMake package is).
file(RELATIVE_PATH FLUXRT_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_SOURCE_DIR}/cmake/fluxrt.pc.in ${CMAKE_BINARY_DIR}/fluxrt.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/fluxrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The command, and what it finds next to itself in <prefix>/share/fluxrt (runtime/model_resolution.h:
# install_share_dir): the presets and the bundled demo model.
install(TARGETS fluxrt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/fluxrt/configs)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/models/demo DESTINATION ${CMAKE_INSTALL_DATADIR}/fluxrt/models)
