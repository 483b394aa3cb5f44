# Build-speed settings shared by every build tree (Release, ASan, TSan, fuzz). They change how
# objects are produced, never what is produced: turning any of them off builds the same binaries.
#
# - Compiler cache: every C, C++ and CUDA compile goes through ccache when it is installed, with
#   its cache outside the tree (ccache's own default, ~/.cache/ccache, or $CCACHE_DIR), so a clean
#   clone on a machine that built before recompiles only what changed. Paths under the source
#   tree are hashed relative to it (base_dir) and the working directory is left out of the hash
#   (hash_dir off), so two clones in different folders share their objects.
# - Linker: mold where it is installed (several times faster than ld.bfd on the test binaries,
#   each of which links gRPC, RocksDB and abseil statically or as many shared libraries).
include_guard(GLOBAL)

option(STRATA_CCACHE "Compile through ccache when it is installed" ON)
option(STRATA_MOLD "Link with mold when it is installed" ON)

if(STRATA_CCACHE)
  find_program(STRATA_CCACHE_PROGRAM ccache)
  if(STRATA_CCACHE_PROGRAM)
    # ccache 4.7 reads its settings from the environment only, so the launcher sets them.
    set(strata_ccache_launcher ${CMAKE_COMMAND} -E env
      CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
      CCACHE_NOHASHDIR=true
      CCACHE_MAXSIZE=24G
      ${STRATA_CCACHE_PROGRAM})
    foreach(lang C CXX CUDA)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${strata_ccache_launcher})
    endforeach()
  endif()
endif()

if(STRATA_MOLD)
  find_program(STRATA_MOLD_PROGRAM mold)
  if(STRATA_MOLD_PROGRAM)
    add_link_options(-fuse-ld=mold)
  endif()
endif()
