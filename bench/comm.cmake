# bench/comm.cmake — included from bench/CMakeLists.txt: collective bandwidth vs OpenMPI.
add_executable(comm_bench ${CMAKE_CURRENT_LIST_DIR}/comm_bench.c)
target_link_libraries(comm_bench PRIVATE shardrt)
shardc_warnings(comm_bench)
# the in-node link of pipeline transfers, for the cost model's profile (bench/pp_bubble.sh)
add_executable(p2p_link ${CMAKE_CURRENT_LIST_DIR}/p2p_link.c)
target_link_libraries(p2p_link PRIVATE shardrt)
shardc_warnings(p2p_link)
