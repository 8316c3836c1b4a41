# llguidance, the constrained-decoding engine of structured outputs (docs/structured_outputs.md):
# a Rust crate built by cargo into a static library with a C interface. third_party/llguidance
# pins it (Cargo.toml, Cargo.lock); scripts/setup.sh installs cargo and fetches the crates, and the
# build runs offline. Its output stays in the build folder (cargo/), and its header, llguidance.h,
# is taken from the fetched crate at configure time (llguidance/include), never copied into the
# repository. The result is the imported target `llguidance`.
find_program(CARGO cargo HINTS $ENV{HOME}/.cargo/bin)
if(NOT CARGO)
  message(FATAL_ERROR "cargo not found (needed to build llguidance): run scripts/setup.sh")
endif()

set(SHARDLM_LLG_CRATE ${PROJECT_SOURCE_DIR}/third_party/llguidance)
set(SHARDLM_LLG_TARGET_DIR ${CMAKE_BINARY_DIR}/cargo)
set(SHARDLM_LLG_LIBRARY ${SHARDLM_LLG_TARGET_DIR}/release/libshardlm_llguidance.a)
set(SHARDLM_LLG_INCLUDE ${CMAKE_BINARY_DIR}/llguidance/include)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${SHARDLM_LLG_CRATE}/Cargo.toml ${SHARDLM_LLG_CRATE}/Cargo.lock)

# Where cargo fetched the pinned llguidance: its package's manifest_path in `cargo metadata`.
execute_process(
  COMMAND ${CARGO} metadata --format-version 1 --locked --offline
          --manifest-path ${SHARDLM_LLG_CRATE}/Cargo.toml
  OUTPUT_VARIABLE llg_metadata ERROR_VARIABLE llg_metadata_error RESULT_VARIABLE llg_metadata_rc)
if(NOT llg_metadata_rc EQUAL 0)
  message(FATAL_ERROR "cargo metadata failed for ${SHARDLM_LLG_CRATE} (run scripts/setup.sh, "
                      "which fetches the crates):\n${llg_metadata_error}")
endif()
string(JSON llg_packages LENGTH "${llg_metadata}" packages)
set(llg_manifest "")
math(EXPR llg_last "${llg_packages} - 1")
foreach(i RANGE ${llg_last})
  string(JSON llg_name GET "${llg_metadata}" packages ${i} name)
  if(llg_name STREQUAL "llguidance")
    string(JSON llg_manifest GET "${llg_metadata}" packages ${i} manifest_path)
    break()
  endif()
endforeach()
if(NOT llg_manifest)
  message(FATAL_ERROR "cargo metadata for ${SHARDLM_LLG_CRATE} lists no llguidance package")
endif()
get_filename_component(llg_source_dir "${llg_manifest}" DIRECTORY)
configure_file(${llg_source_dir}/llguidance.h ${SHARDLM_LLG_INCLUDE}/llguidance.h COPYONLY)
message(STATUS "llguidance: ${llg_source_dir}")

# cargo decides itself what to rebuild; the touch makes the library newer than its inputs even
# when cargo finds nothing to do, so that ninja does not run it again.
add_custom_command(
  OUTPUT ${SHARDLM_LLG_LIBRARY}
  COMMAND ${CARGO} build --release --locked --offline --quiet
          --manifest-path ${SHARDLM_LLG_CRATE}/Cargo.toml --target-dir ${SHARDLM_LLG_TARGET_DIR}
  COMMAND ${CMAKE_COMMAND} -E touch ${SHARDLM_LLG_LIBRARY}
  DEPENDS ${SHARDLM_LLG_CRATE}/Cargo.toml ${SHARDLM_LLG_CRATE}/Cargo.lock ${SHARDLM_LLG_CRATE}/src/lib.rs
  COMMENT "Building llguidance (cargo)"
  VERBATIM)
add_custom_target(llguidance_cargo DEPENDS ${SHARDLM_LLG_LIBRARY})

add_library(llguidance STATIC IMPORTED GLOBAL)
# The native libraries a Rust staticlib needs (cargo rustc -- --print native-static-libs:
# -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc).
set_target_properties(llguidance PROPERTIES
  IMPORTED_LOCATION ${SHARDLM_LLG_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${SHARDLM_LLG_INCLUDE}
  INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
add_dependencies(llguidance llguidance_cargo)
