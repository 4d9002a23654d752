# CUDA benchmarks (built only with the CUDA runtime): the dense GEMM peak MFU is measured against,
# and device copy bandwidth. Run on a GPU: build/bench/cuda_peak_bench [N...].
if(TARGET shardrt_cuda)
  add_executable(cuda_peak_bench ${CMAKE_CURRENT_LIST_DIR}/cuda_peak.c)
  target_link_libraries(cuda_peak_bench PRIVATE shardrt_cuda)
  target_include_directories(cuda_peak_bench PRIVATE ${PROJECT_SOURCE_DIR}/runtime/cuda)
  shardc_warnings(cuda_peak_bench)
endif()
