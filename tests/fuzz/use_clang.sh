#!/bin/sh
# CMake compiler and linker launcher for the fuzz targets. The project may be compiled by g++,
# which has no libFuzzer; CMake calls `use_clang.sh CLANGXX "FLAGS" <project compiler> <args>`
# and this runs clang++ with the sanitizer flags and the same arguments instead. The arguments
# (includes, defines, the link line with fluxrt_core's dependencies) stay CMake's own.
clang="$1"
flags="$2"
shift 3
# $flags is unquoted on purpose: it holds several options.
exec "$clang" $flags "$@"
