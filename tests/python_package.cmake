# python_package.cmake — the kiln Python package's tests (python/tests) as
# one CTest test, `python_package`: /usr/bin/python3 -m pytest with the
# package from the source tree (python/) and KILN_LIBRARY pointing at the
# built libkiln. Skipped (77) when the interpreter lacks numpy, pytest or
# hypothesis (outside CI; in CI it fails, as numpy_diff does); the Torch
# comparisons skip without torch unless KILN_TEST_EXPECT_TORCH=1.

set(_kiln_pkg_dir ${PROJECT_SOURCE_DIR}/python)
set(_kiln_pkg_cmd ${KILN_PYTHON} -m pytest -q -p no:cacheprovider
    --junitxml=${CMAKE_CURRENT_BINARY_DIR}/python_package.xml
    ${_kiln_pkg_dir}/tests)
if(DEFINED ENV{CI})
  set(_kiln_pkg_exit 1)
else()
  set(_kiln_pkg_exit 77)
endif()
add_test(NAME python_package
  COMMAND sh -c "${KILN_PYTHON} -c 'import numpy, pytest, hypothesis' 2>/dev/null || { echo 'python_package: ${KILN_PYTHON} cannot import numpy, pytest and hypothesis (run scripts/setup.sh)'; exit ${_kiln_pkg_exit}; }; exec \"$@\"" sh ${_kiln_pkg_cmd}
  WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

set(_kiln_pkg_env
  "KILN_LIBRARY=$<TARGET_FILE:kiln>"
  "PYTHONPATH=${_kiln_pkg_dir}"
  "PYTHONDONTWRITEBYTECODE=1")
if(KILN_SANITIZE)
  # As numpy_diff (python.cmake): the ASan runtime and libstdc++ preloaded
  # into the interpreter, leak checking off (CPython leaks by LSan's rules).
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
    OUTPUT_VARIABLE _kiln_pkg_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libstdc++.so.6
    OUTPUT_VARIABLE _kiln_pkg_cxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND _kiln_pkg_env
    "LD_PRELOAD=${_kiln_pkg_asan}:${_kiln_pkg_cxx}"
    "ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0:verify_asan_link_order=0"
    "KILN_TEST_SCALE=0.3")
endif()
set_tests_properties(python_package PROPERTIES
  ENVIRONMENT "${_kiln_pkg_env}"
  SKIP_RETURN_CODE 77
  TIMEOUT 600
  LABELS python)
