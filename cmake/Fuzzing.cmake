# COLI_FUZZ=ON: every target is instrumented for libFuzzer (coverage only;
# the harnesses link the fuzzer's main) and built with AddressSanitizer and
# UndefinedBehaviorSanitizer, which abort on the first finding so the fuzzer
# reports it as a crash. Clang only: GCC has no libFuzzer.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "COLI_FUZZ=ON needs clang (configure with -DCMAKE_CXX_COMPILER=clang++; "
                      "Debian: apt-get install clang libclang-rt-14-dev); found ${CMAKE_CXX_COMPILER_ID}")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
