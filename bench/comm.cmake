# bench/comm.cmake — included from bench/CMakeLists.txt: collective bandwidth vs OpenMPI.
add_executable(comm_bench ${CMAKE_CURRENT_LIST_DIR}/comm_bench.c)
target_link_libraries(comm_bench PRIVATE shardrt)
shardc_warnings(comm_bench)
