# The --cpu-kernels llvm backend's kernels against the C kernels, per kind (decides target_llvm.c's
# GENERATE table). Run by hand; numbers in docs/performance.md.
#   bench_llvm_kernels [threads=2] [reps=15]
add_executable(bench_llvm_kernels ${CMAKE_CURRENT_SOURCE_DIR}/llvm_kernels_bench.c)
target_link_libraries(bench_llvm_kernels PRIVATE shardc_codegen shardrt ${CMAKE_DL_LIBS})
shardc_warnings(bench_llvm_kernels)
