# coli_warnings(target): the project's warning set, errors with COLI_WERROR.
function(coli_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wno-missing-field-initializers)
  # GCC 12 at -O3 reports impossible overlaps in std::string concatenation
  # (GCC bug 105329, fixed in 13); everything else stays an error.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(COLI_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(COLI_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
endfunction()
