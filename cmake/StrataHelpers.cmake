# Build helpers shared by every directory. Each target gets the repo root as its include root
# (includes are written from the root: #include "core/chunk_key.h"), C++20, and the project's
# warning set (-Wall -Wextra -Werror) on our own sources only.

include_guard(GLOBAL)

# CMake 3.25 does not know nvcc's C++20 flag (nvcc >= 12 accepts it); without this, a target with
# cxx_std_20 and CUDA sources fails to configure ("requires the language dialect CUDA20").
if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0
   AND NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

function(strata_apply_target_options target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>)
  # clang's -Wall has -Woverloaded-virtual, which gRPC's generated raw-method mixins trip
  # (WithRawCallbackMethod_Lookup); GCC keeps it out of -Wall.
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wno-overloaded-virtual>)
  # CUDA sources (kernels/ only): device-side warnings are errors, and the host compiler sees the
  # same warning set as our C++ sources. Whole-program compilation (no relocatable device code).
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings
      -Xcompiler=-Wall,-Wextra,-Werror,-Wno-missing-field-initializers>)
  if(STRATA_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer
        -fno-sanitize-recover=all>)
    target_link_options(${target} PUBLIC -fsanitize=${STRATA_SANITIZE})
  endif()
  # Under ThreadSanitizer each executable reports abseil's locks and gRPC's hand-offs to TSan
  # (below).
  if(TARGET strata_tsan_annotations)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_link_libraries(${target} PRIVATE strata_tsan_annotations)
    endif()
  endif()
endfunction()

# ThreadSanitizer (STRATA_SANITIZE=thread, `make test-tsan`). Debian's abseil and gRPC are not
# built with TSan, so absl::Mutex, CondVar and Notification, and gRPC's completion queues,
# synchronize nothing that TSan can see: every access under a Mutex would be reported as a race.
# tests/tsan/ defines their entry points in each executable, in TSan's annotations around the
# libraries' own; the executable exports them so that the shared libraries (gRPC's locks and
# calls) bind to them too. No link dependency on gRPC: its wrappers are reached only through it.
if(STRATA_SANITIZE MATCHES "(^|,)thread(,|$)")
  add_library(strata_tsan_annotations OBJECT
    ${PROJECT_SOURCE_DIR}/tests/tsan/absl_sync_annotations.cc
    ${PROJECT_SOURCE_DIR}/tests/tsan/grpc_annotations.cc)
  target_link_libraries(strata_tsan_annotations PUBLIC absl::synchronization absl::time
    ${CMAKE_DL_LIBS})
  target_include_directories(strata_tsan_annotations PRIVATE
    $<TARGET_PROPERTY:gRPC::grpc,INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_features(strata_tsan_annotations PUBLIC cxx_std_20)
  target_compile_options(strata_tsan_annotations PRIVATE -Wall -Wextra -Werror
    -fsanitize=${STRATA_SANITIZE})
  foreach(symbols _ZN4absl*5Mutex* _ZN4absl*7CondVar* _ZN4absl*12Notification*
                  _ZNK4absl*12Notification* grpc_call_start_batch grpc_server_request_call
                  grpc_server_request_registered_call grpc_completion_queue_next
                  grpc_completion_queue_pluck)
    target_link_options(strata_tsan_annotations INTERFACE
      "LINKER:--export-dynamic-symbol=${symbols}")
  endforeach()
endif()

# strata_cc_library(NAME n SRCS a.cc ... HDRS a.h ... CUDA_SRCS k.cu ... DEPS dep ...)
# A library without sources becomes an INTERFACE library.
function(strata_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;CUDA_SRCS;DEPS" ${ARGN})
  set(srcs ${ARG_SRCS})
  if(STRATA_WITH_CUDA AND ARG_CUDA_SRCS)
    list(APPEND srcs ${ARG_CUDA_SRCS})
  endif()
  if(srcs)
    add_library(${ARG_NAME} STATIC ${srcs} ${ARG_HDRS})
    target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
    strata_apply_target_options(${ARG_NAME})
    if(STRATA_WITH_CUDA AND ARG_CUDA_SRCS)
      set_target_properties(${ARG_NAME} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
      target_link_libraries(${ARG_NAME} PUBLIC CUDA::cudart_static)
    endif()
  else()
    add_library(${ARG_NAME} INTERFACE ${ARG_HDRS})
    target_include_directories(${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS})
    target_compile_features(${ARG_NAME} INTERFACE cxx_std_20)
  endif()
endfunction()

# strata_cc_test(NAME n SRCS a_test.cc ... DEPS dep ... LABELS unit ...)
# One ctest entry per test case, named <binary>.<Suite>.<Case>, found by running the binary with
# --gtest_list_tests after it links; labels default to "unit" (one label: the properties below
# take no lists). A case that skips itself (GTEST_SKIP with its reason) is reported by ctest as
# skipped, never as passed, while the binary's other cases count as passed or failed on their own;
# scripts/test-summary.sh lists the skips with their reasons. Tests run from the build tree.
include(GoogleTest)
function(strata_cc_test)
  if(NOT STRATA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  strata_apply_target_options(${ARG_NAME})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  gtest_discover_tests(${ARG_NAME}
    TEST_PREFIX "${ARG_NAME}."
    EXTRA_ARGS ${ARG_ARGS}
    DISCOVERY_TIMEOUT 120
    # Names end in the parameter's index (Suite/Case/0), not its bytes.
    NO_PRETTY_VALUES
    NO_PRETTY_TYPES
    PROPERTIES
      LABELS "${ARG_LABELS}"
      TIMEOUT ${ARG_TIMEOUT}
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

# strata_python_tests(NAME n SCRIPT script.py LABELS l ... TIMEOUT s [RESOURCE_LOCK r]
#                     [ENVIRONMENT VAR=value ...]): the cases of a Python unittest script, one
# ctest entry each (n.<Class>.<case>), as gtest cases get, so that a case that skips (it prints
# "[  SKIPPED ]") is reported as skipped without hiding the cases that passed. The script lists
# its cases with --list and runs those it is given. One that cannot list them is registered
# whole, so that ctest shows why. Without a Python 3 interpreter nothing is registered (and the
# configure log says so).
function(strata_python_tests)
  if(NOT STRATA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;SCRIPT;TIMEOUT;RESOURCE_LOCK" "LABELS;ENVIRONMENT" ${ARGN})
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "${ARG_NAME}: no Python 3 interpreter; not registered")
    return()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ARG_SCRIPT})
  execute_process(
    COMMAND ${Python3_EXECUTABLE} ${ARG_SCRIPT} --list
    OUTPUT_VARIABLE cases
    RESULT_VARIABLE list_result
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(names "")
  if(NOT list_result EQUAL 0 OR cases STREQUAL "")
    add_test(NAME ${ARG_NAME} COMMAND ${Python3_EXECUTABLE} ${ARG_SCRIPT})
    list(APPEND names ${ARG_NAME})
  else()
    string(REPLACE "\n" ";" cases "${cases}")
    foreach(test_case IN LISTS cases)
      add_test(NAME ${ARG_NAME}.${test_case}
        COMMAND ${Python3_EXECUTABLE} ${ARG_SCRIPT} ${test_case})
      list(APPEND names ${ARG_NAME}.${test_case})
    endforeach()
  endif()
  set_tests_properties(${names} PROPERTIES
    LABELS "${ARG_LABELS}"
    TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${ARG_ENVIRONMENT}"
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  if(ARG_RESOURCE_LOCK)
    set_tests_properties(${names} PROPERTIES RESOURCE_LOCK ${ARG_RESOURCE_LOCK})
  endif()
endfunction()

# strata_cc_bench(NAME n SRCS a_bench.cc ... DEPS dep ...): a Google Benchmark binary.
function(strata_cc_bench)
  if(NOT STRATA_BUILD_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  strata_apply_target_options(${ARG_NAME})
endfunction()

# strata_cc_fuzz(NAME n SRCS a_fuzz.cc ... DEPS dep ...): a libFuzzer binary (STRATA_BUILD_FUZZ,
# clang only). Its libraries are instrumented through STRATA_SANITIZE (fuzzer-no-link,...); the
# target itself links libFuzzer's main.
function(strata_cc_fuzz)
  if(NOT STRATA_BUILD_FUZZ)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  strata_apply_target_options(${ARG_NAME})
  target_compile_options(${ARG_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${ARG_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
endfunction()
