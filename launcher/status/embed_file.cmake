# cmake -DINPUT=<file> -DOUTPUT=<file.cpp> -DNAMESPACE=<ns> -DFUNCTION=<name> -P embed_file.cmake
# Writes a C++ source whose function `std::string_view NAMESPACE::FUNCTION()` returns INPUT's bytes,
# so the program needs no file at run time. Bytes as hex: no escaping of the content can go wrong.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
# One line of C++ per line of the input.
string(REPLACE "'\\x0a'," "'\\x0a',\n  " bytes "${bytes}")
file(WRITE "${OUTPUT}"
"// Generated from ${INPUT} by embed_file.cmake; do not edit.
#include <string_view>

namespace ${NAMESPACE} {
namespace {
const char kBytes[] = {
  ${bytes}'\\0'
};
}  // namespace

std::string_view ${FUNCTION}() { return std::string_view(kBytes, ${size}); }

}  // namespace ${NAMESPACE}
")
