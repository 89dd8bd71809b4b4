# cmake --install: every program, the curated profiles (where the profile
# search path reads them), man pages and shell completions generated from
# --help, and the planner as a library (headers, CMake package coli::planner,
# pkg-config coli-planner). docs/install.md describes the layout.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(coli_programs coli coli-plan coli-probe)
foreach(program coli-sweep coli-make-synthetic coli-decode-bench coli-speed-bench)  # COLI_BUILD_BENCHMARKS
  if(TARGET ${program})
    list(APPEND coli_programs ${program})
  endif()
endforeach()
install(TARGETS ${coli_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# probe/profile/fleet_machine.cpp reads them relative to the programs.
file(GLOB coli_curated_profiles CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/profiles/*.toml)
install(FILES ${coli_curated_profiles} ${PROJECT_SOURCE_DIR}/profiles/README.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/coli/profiles)

# Man pages: help2man runs each program's --help and --version.
find_program(COLI_HELP2MAN help2man)
if(COLI_HELP2MAN)
  set(coli_man_pages)
  set(coli_summary_coli "convert Hugging Face MoE checkpoints, run them, manage fleet profiles")
  set(coli_summary_coli-plan "plan how to run a MoE model on a profiled machine")
  set(coli_summary_coli-probe "measure this machine and write its device profile")
  set(coli_summary_coli-sweep "run the engine over a grid of configurations and rank the planned one")
  set(coli_summary_coli-make-synthetic "write a random-weight MoE container of realistic shape")
  set(coli_summary_coli-decode-bench "MoE decode tok/s against the memory-bandwidth bound")
  set(coli_summary_coli-speed-bench "prefill and decode tok/s per backend")
  foreach(program ${coli_programs})
    set(page ${CMAKE_BINARY_DIR}/man/${program}.1)
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${COLI_HELP2MAN} --no-info --no-discard-stderr --section=1 --source=coli "--name=${coli_summary_${program}}"
              --output=${page} $<TARGET_FILE:${program}>
      DEPENDS ${program}
      COMMENT "Man page ${program}.1 from --help")
    list(APPEND coli_man_pages ${page})
  endforeach()
  add_custom_target(coli_man_pages ALL DEPENDS ${coli_man_pages})
  install(FILES ${coli_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: man pages are not generated (Debian package help2man)")
endif()

# Shell completions, from the same --help texts (CLI11 has no generator).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(coli_completion_files)
  foreach(program ${coli_programs})
    set(bash_file ${CMAKE_BINARY_DIR}/completions/bash/${program})
    set(zsh_file ${CMAKE_BINARY_DIR}/completions/zsh/_${program})
    add_custom_command(OUTPUT ${bash_file} ${zsh_file}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/completions.py $<TARGET_FILE:${program}> ${program}
              ${bash_file} ${zsh_file}
      DEPENDS ${program} ${PROJECT_SOURCE_DIR}/tools/completions.py
      COMMENT "Shell completions for ${program} from --help")
    list(APPEND coli_completion_files ${bash_file} ${zsh_file})
    install(FILES ${bash_file} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
    install(FILES ${zsh_file} DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/site-functions)
  endforeach()
  add_custom_target(coli_completions ALL DEPENDS ${coli_completion_files})
else()
  message(STATUS "python3 not found: shell completions are not generated")
endif()

# The planner library: one static archive of the planner and what it links
# (already compiled objects, so nothing builds twice), with its headers.
set(coli_planner_parts coli_planner coli_base coli_profile_io coli_model_input coli_kernels_reference coli_experts
    coli_backend_memory coli_container coli_shaders)
set(coli_planner_objects)
foreach(part ${coli_planner_parts})
  list(APPEND coli_planner_objects $<TARGET_OBJECTS:${part}>)
endforeach()
add_library(coli_planner_package STATIC ${coli_planner_objects})
set_target_properties(coli_planner_package PROPERTIES OUTPUT_NAME coli-planner EXPORT_NAME planner LINKER_LANGUAGE CXX)
target_include_directories(coli_planner_package INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# The container index reader inside it checksums with xxHash (Debian libxxhash-dev: -lxxhash).
target_link_libraries(coli_planner_package INTERFACE tomlplusplus::tomlplusplus $<INSTALL_INTERFACE:xxhash>)
target_compile_features(coli_planner_package INTERFACE cxx_std_20)
install(TARGETS coli_planner_package EXPORT coliTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(include_dir probe/include planner/include engine/experts/include engine/model/include engine/backend/include
        engine/container/include shaders/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${include_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
endforeach()
set(coli_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/coli)
install(EXPORT coliTargets NAMESPACE coli:: DESTINATION ${coli_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/install/coliConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/coliConfig.cmake INSTALL_DESTINATION ${coli_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/coliConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/coliConfig.cmake ${CMAKE_BINARY_DIR}/package/coliConfigVersion.cmake
        DESTINATION ${coli_cmake_dir})
# pkg-config: the prefix relative to the .pc file, so a relocated install works.
file(RELATIVE_PATH COLI_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" COLI_PC_TO_PREFIX "${COLI_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/install/coli-planner.pc.in ${CMAKE_BINARY_DIR}/package/coli-planner.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/coli-planner.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
