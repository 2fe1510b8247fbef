# Runs one libFuzzer binary for a bounded time (ctest's driver for the `fuzz` tests).
#   cmake -DFUZZER=bin -DWORK_DIR=dir -DSECONDS=n -DSEEDS="dir;dir" [-DDICT=file] -P run_fuzzer.cmake
# New inputs go to WORK_DIR/corpus (fresh each run), never into the checked-in seed folders; a
# crashing input is written to WORK_DIR/ and its path printed.
foreach(_var FUZZER WORK_DIR SECONDS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_fuzzer.cmake: ${_var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR}/corpus)
file(MAKE_DIRECTORY ${WORK_DIR}/corpus)
set(_args -max_total_time=${SECONDS} -rss_limit_mb=1024 -malloc_limit_mb=1024 -timeout=10 -seed=1
    -print_final_stats=1 -artifact_prefix=${WORK_DIR}/)
if(DEFINED DICT)
  list(APPEND _args -dict=${DICT})
endif()
set(ENV{ASAN_OPTIONS} "detect_leaks=1:abort_on_error=0")
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")
execute_process(COMMAND ${FUZZER} ${_args} ${WORK_DIR}/corpus ${SEEDS} RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${_rc}); the crashing input is in ${WORK_DIR}/")
endif()
