# check_basenames.cmake — no two library source files share a basename
# (docs/internals.md, "Layers"): a reader who meets `stats.c` in a
# message or a profile must know which one. Run by ctest as
#   cmake -DROOT=<source dir> "-DLAYERS=api;ops;..." -P check_basenames.cmake
# Fails naming every basename found in more than one layer folder.
set(seen "")
set(dups "")
foreach(layer ${LAYERS})
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/${layer}/*.c ${ROOT}/${layer}/*.h)
  foreach(f ${files})
    get_filename_component(base ${f} NAME)
    string(MAKE_C_IDENTIFIER "${base}" var)
    if(DEFINED first_${var})
      list(APPEND dups "${base}: ${first_${var}} and ${f}")
    else()
      set(first_${var} ${f})
    endif()
  endforeach()
endforeach()
if(dups)
  list(JOIN dups "\n  " text)
  message(FATAL_ERROR "library files that share a basename:\n  ${text}")
endif()
list(LENGTH LAYERS n)
message(STATUS "basenames unique across ${n} layers")
