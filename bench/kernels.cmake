# CPU kernel benchmarks (runtime/kernels). Run by hand; numbers in docs/performance.md.
#   bench_kernels [threads] [reps]   every kernel on GPT-2 124M shapes, the measured peak, MFU bound
#   bench_gemm_<blas> [reps]         sgemm GFLOP/s on the same shapes, one binary per BLAS build
add_executable(bench_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels_bench.c)
target_link_libraries(bench_kernels PRIVATE shardrt)
shardc_warnings(bench_kernels)

# The same GEMM source against each BLAS build that is installed (Debian: libopenblas-pthread-dev,
# libopenblas-openmp-dev, libblis-openmp-dev), to choose by measurement.
find_package(OpenMP REQUIRED COMPONENTS C)
set(_arch /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
foreach(variant "openblas;openblas-pthread;openblas" "openblas_omp;openblas-openmp;openblas" "blis;blis-openmp;blis")
  list(GET variant 0 _name)
  list(GET variant 1 _dir)
  list(GET variant 2 _lib)
  find_library(BENCH_BLAS_${_name} NAMES ${_lib} PATHS ${_arch}/${_dir} NO_DEFAULT_PATH)
  find_path(BENCH_CBLAS_${_name} cblas.h PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/${_dir} NO_DEFAULT_PATH)
  if(BENCH_BLAS_${_name} AND BENCH_CBLAS_${_name})
    add_executable(bench_gemm_${_name} ${CMAKE_CURRENT_SOURCE_DIR}/kernels_gemm.c)
    target_include_directories(bench_gemm_${_name} SYSTEM PRIVATE ${BENCH_CBLAS_${_name}})
    target_link_libraries(bench_gemm_${_name} PRIVATE ${BENCH_BLAS_${_name}} OpenMP::OpenMP_C)
    shardc_warnings(bench_gemm_${_name})
  endif()
endforeach()

# The cost model's CPU profile (docs/planner.md): bench_calibrate PROFILE [threads]
add_executable(bench_calibrate ${CMAKE_CURRENT_SOURCE_DIR}/calibrate.c ${CMAKE_CURRENT_SOURCE_DIR}/calibrate_llvm.c)
target_link_libraries(bench_calibrate PRIVATE shardc_codegen shardrt ${CMAKE_DL_LIBS})
shardc_warnings(bench_calibrate)

# The fp32 ceiling of a CPU step (docs/performance.md, "Where the CPU step goes"):
#   bench_sgemm_peak [threads] [gflop] [reps]   sgemm at 1024..4096, FMA and bf16-dot loop peaks
if(BENCH_BLAS_openblas_omp AND BENCH_CBLAS_openblas_omp)
  add_executable(bench_sgemm_peak ${CMAKE_CURRENT_SOURCE_DIR}/sgemm_peak.c)
  target_include_directories(bench_sgemm_peak SYSTEM PRIVATE ${BENCH_CBLAS_openblas_omp})
  target_link_libraries(bench_sgemm_peak PRIVATE ${BENCH_BLAS_openblas_omp} OpenMP::OpenMP_C)
  if(SHARDC_NATIVE)
    target_compile_options(bench_sgemm_peak PRIVATE -march=native)
  endif()
  shardc_warnings(bench_sgemm_peak)
endif()

# The bf16 GEMM of `precision bf16` (runtime/ops/gemm_dnnl.c) against the f32 one on GPT-2 shapes:
#   bench_gemm_bf16 [threads] [reps]
add_executable(bench_gemm_bf16 ${CMAKE_CURRENT_SOURCE_DIR}/gemm_bf16.c)
target_link_libraries(bench_gemm_bf16 PRIVATE shardrt)
shardc_warnings(bench_gemm_bf16)

# Gradient-accumulation fusion (passes/gacc.c): a layer's weight-gradient GEMMs, then the sums' adds,
# against the GEMMs accumulating into the sums, one thread: bench_gacc_kernels [rounds] [reps]
add_executable(bench_gacc_kernels ${CMAKE_CURRENT_SOURCE_DIR}/gacc_kernels.c)
target_link_libraries(bench_gacc_kernels PRIVATE shardrt)
shardc_warnings(bench_gacc_kernels)

# The CPU attention at a few shapes, 1..N threads, with sgemm for scale (docs/performance.md, "CPU
# attention, register-blocked"): bench_attn [threads] [reps]
add_executable(bench_attn ${CMAKE_CURRENT_SOURCE_DIR}/attn_bench.c)
target_link_libraries(bench_attn PRIVATE shardrt)
shardc_warnings(bench_attn)
