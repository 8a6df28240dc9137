# The CLI's layering (docs/architecture.md): tools/megac parses flags, calls driver/ and prints;
# it includes no runtime/ or passes/ header (the driver's headers re-export the runtime names it
# spells). ctest's megac_cli_includes_test runs `cmake -DDIR=tools/megac -P CheckIncludes.cmake`
# and fails naming every such include.
file(GLOB_RECURSE files "${DIR}/*.cpp" "${DIR}/*.h")
set(found "")
foreach(file IN LISTS files)
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<](runtime|passes)/")
  foreach(line IN LISTS lines)
    file(RELATIVE_PATH name "${DIR}/../.." "${file}")
    string(APPEND found "\n  ${name}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "tools/megac includes runtime/ or passes/ headers; call driver/ instead "
                      "(a driver header re-exports the names the CLI needs):${found}")
endif()
list(LENGTH files count)
message(STATUS "tools/megac: ${count} files, no runtime/ or passes/ include")
