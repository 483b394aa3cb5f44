# Build helpers shared by every directory. Each target gets the repo root as its include root
# (includes are written from the root: #include "core/chunk_key.h"), C++20, and the project's
# warning set (-Wall -Wextra -Werror) on our own sources only.

include_guard(GLOBAL)

function(strata_apply_target_options target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>)
  if(STRATA_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer
        -fno-sanitize-recover=all>)
    target_link_options(${target} PUBLIC -fsanitize=${STRATA_SANITIZE})
  endif()
endfunction()

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
  else()
    add_library(${ARG_NAME} INTERFACE ${ARG_HDRS})
    target_include_directories(${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS})
    target_compile_features(${ARG_NAME} INTERFACE cxx_std_20)
  endif()
endfunction()

# strata_cc_test(NAME n SRCS a_test.cc ... DEPS dep ... LABELS unit ...)
# One ctest entry per test binary; labels default to "unit". Tests run from the build tree.
function(strata_cc_test)
  if(NOT STRATA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  strata_apply_target_options(${ARG_NAME})
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME} ${ARG_ARGS})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
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
