# frugal_module(NAME DEPS dep...): one static library per folder of src/frugal, built from every
# .cc file in that folder and its sub-folders, so adding a file needs no CMake edit and a broken
# module never stops the others from building.
function(frugal_module name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS" ${ARGN})
  if(NOT ARG_DIR)
    set(ARG_DIR ${name})
  endif()
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_DIR}/*.cc)
  if(NOT srcs)
    # A header-only or not-yet-populated module still gives dependents its include path.
    add_library(frugal_${name} INTERFACE)
    target_include_directories(frugal_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(frugal_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(frugal_${name} STATIC ${srcs})
  target_include_directories(frugal_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(frugal_${name} PRIVATE ${FRUGAL_WARNINGS})
  target_link_libraries(frugal_${name} PUBLIC ${ARG_DEPS})
endfunction()

# The small real models tests read: ../shared/models beside the checkout, or the workplace copy
# when the checkout lives elsewhere (a clean clone in a temporary folder).
if(EXISTS ${PROJECT_SOURCE_DIR}/../shared/models)
  get_filename_component(FRUGAL_SHARED_MODELS ${PROJECT_SOURCE_DIR}/../shared/models ABSOLUTE)
elseif(EXISTS /work/shared/models)
  set(FRUGAL_SHARED_MODELS /work/shared/models)
else()
  set(FRUGAL_SHARED_MODELS ${PROJECT_SOURCE_DIR}/../shared/models)
endif()

set(FRUGAL_TEST_TIMEOUT 180 CACHE STRING "seconds one test may run before ctest fails it")

# frugal_test(NAME DEPS dep...): one GoogleTest binary per folder of tests/.
function(frugal_test name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cc)
  if(NOT srcs)
    return()
  endif()
  add_executable(${name}_tests ${srcs})
  target_compile_options(${name}_tests PRIVATE ${FRUGAL_WARNINGS})
  target_include_directories(${name}_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name}_tests PRIVATE ${ARG_DEPS} GTest::gtest_main)
  target_compile_definitions(${name}_tests PRIVATE
    FRUGAL_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    FRUGAL_SHARED_MODELS_DIR="${FRUGAL_SHARED_MODELS}"
    FRUGAL_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # A per-test limit in seconds, not ctest's default 1500: a hang fails fast and names the test.
  # The slowest test (a whole-model evaluation) takes under 40 s on CI's two cores. The asan
  # preset sets 600: sanitized code runs several times slower, and the slowest sanitized test
  # (SpeculativeSampling.JointLawOfTwoTokensEqualsPlainSampling, 15,000 sampled requests) took
  # 142 s alone and over 180 s beside other work on the same two cores.
  gtest_discover_tests(${name}_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${name} TIMEOUT ${FRUGAL_TEST_TIMEOUT})
endfunction()
