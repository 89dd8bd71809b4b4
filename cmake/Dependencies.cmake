# Every dependency comes from a Debian package (tools/bootstrap.sh installs
# them); nothing is fetched at configure time.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.4)  # 2.4: CPU kinds
find_package(tomlplusplus 3 REQUIRED)
find_package(CLI11 2 REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # model config, tokenizer.json, container index
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)  # container checksums (XXH3-64)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)  # tokenizers' split regexes (Unicode properties)
# coli serve's HTTP server (libcpp-httplib-dev, a compiled library: its .pc
# carries the feature defines its header must be read with). Without it coli
# builds, and `coli serve` says what to install.
pkg_check_modules(CPP_HTTPLIB IMPORTED_TARGET cpp-httplib)
if(NOT CPP_HTTPLIB_FOUND)
  message(WARNING "cpp-httplib not found (Debian: libcpp-httplib-dev): coli serve will only say so")
endif()
# Vulkan: headers and glslc at build time only; the loader is opened at run time.
# (FindVulkan would also demand libvulkan.so, which the build never links.)
find_path(COLI_VULKAN_INCLUDE_DIR vulkan/vulkan.h REQUIRED)
add_library(coli_vulkan_headers INTERFACE)
target_include_directories(coli_vulkan_headers SYSTEM INTERFACE ${COLI_VULKAN_INCLUDE_DIR})
find_program(COLI_GLSLC glslc REQUIRED)
# SPIRV-Cross (C API) reflects the compiled shaders in tests.
pkg_check_modules(SPIRV_CROSS IMPORTED_TARGET spirv-cross-c-shared)
if(COLI_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(COLI_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
