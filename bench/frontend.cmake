# Front-end compile time (parse + lower + inline), GPT-3 175B included.
add_executable(frontend_bench ${CMAKE_CURRENT_LIST_DIR}/frontend_bench.c)
target_link_libraries(frontend_bench PRIVATE shardc_passes shardc_frontend shardc_ir)
shardc_warnings(frontend_bench)
