# The Python package (python/, docs/python.md): the extension fluxrt._fluxrt over the public API,
# and the tree it runs from in the build (<build>/python/fluxrt: the package's .py files and the
# demo model linked in, the extension built there), which tests/python's pytest cases import.
#
# FLUXRT_PYTHON: ON, OFF or AUTO (on when the Python headers and pybind11 are found). Off under
# sanitizers: an instrumented extension cannot be loaded into an uninstrumented python3.
set(FLUXRT_PYTHON "AUTO" CACHE STRING
    "Build the Python extension: ON, OFF or AUTO (when Python3 headers and pybind11 are found)")
set_property(CACHE FLUXRT_PYTHON PROPERTY STRINGS ON OFF AUTO)

# One interpreter for the extension, its tests and the other Python tests (Layering.*). Debian's
# /usr/bin/python3 unless one is named (-DPython3_EXECUTABLE=..., as pip's build backend does):
# the packages scripts/setup installs (pytest, numpy, Pillow) are importable from it alone, while
# the python3 first in PATH may be a pyenv or conda one without them.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()

set(FLUXRT_PYTHON_ENABLED OFF)
if(FLUXRT_PYTHON STREQUAL "OFF")
  return()
endif()
if(FLUXRT_SANITIZE)
  if(FLUXRT_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "FLUXRT_PYTHON=ON cannot be combined with FLUXRT_SANITIZE")
  endif()
  message(STATUS "Python extension: off (sanitizer build)")
  return()
endif()

set(_required)
if(FLUXRT_PYTHON STREQUAL "ON")
  set(_required REQUIRED)
endif()
find_package(Python3 ${_required} COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  # pybind11 from Debian (pybind11-dev), else the one installed for this interpreter (pip's build
  # environment when `pip install .` builds the package).
  execute_process(COMMAND ${Python3_EXECUTABLE} -m pybind11 --cmakedir OUTPUT_VARIABLE _pybind11_dir
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_package(pybind11 2.10 CONFIG ${_required} HINTS ${_pybind11_dir})
endif()
if(NOT Python3_FOUND OR NOT pybind11_FOUND)
  message(STATUS "Python extension: off (needs python3-dev and pybind11-dev)")
  return()
endif()
message(STATUS "Python extension: on (${Python3_EXECUTABLE}, pybind11 ${pybind11_VERSION})")
set(FLUXRT_PYTHON_ENABLED ON)
add_subdirectory(python)
