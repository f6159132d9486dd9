# test_kir_llvm: the kernel IR builder/verifier and the LLVM CPU backend,
# built from their sources directly (not through kiln_passes) so it does
# not depend on the rest of passes/ compiling. Included by tests/CMakeLists.txt.
if(NOT KILN_CMOCKA)
  find_library(KILN_CMOCKA cmocka REQUIRED)
  find_path(KILN_CMOCKA_INCLUDE cmocka.h REQUIRED)
endif()
add_executable(test_kir_llvm
  ${PROJECT_SOURCE_DIR}/tests/test_kir_llvm.c
  ${PROJECT_SOURCE_DIR}/passes/kir.c
  ${PROJECT_SOURCE_DIR}/graph/fault.c
  ${PROJECT_SOURCE_DIR}/graph/env.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_jit.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_gemm.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_lower.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_math.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_stream.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_target.c
  ${PROJECT_SOURCE_DIR}/codegen_llvm/llvm_tile.c)
target_include_directories(test_kir_llvm PRIVATE
  ${PROJECT_SOURCE_DIR}/graph/include ${PROJECT_SOURCE_DIR}/graph ${PROJECT_SOURCE_DIR}/passes
  ${PROJECT_SOURCE_DIR}/codegen_llvm ${LLVM_INCLUDE_DIRS} ${KILN_CMOCKA_INCLUDE})
target_compile_options(test_kir_llvm PRIVATE ${KILN_WARNINGS})
target_link_libraries(test_kir_llvm PRIVATE ${KILN_LLVM_LIB} ${KILN_CMOCKA} m Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME kir_llvm COMMAND test_kir_llvm)
set_tests_properties(kir_llvm PROPERTIES ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
