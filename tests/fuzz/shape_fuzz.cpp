// libFuzzer target: shape expressions, the templates' validator language
// (core/shape.cpp). The first bytes bind the dims; the rest is the text. A
// parsed expression must evaluate (or fail with a message), and print as
// text that parses back to the same value.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

import slicesched.core.shape;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace slicesched;
  const std::size_t bound = size < 8 ? size : 8;  // up to 8 dim values, one byte each
  const std::string_view text(reinterpret_cast<const char*>(data) + bound, size - bound);
  DimTable dims;
  auto expr = Expr::parse(text, dims);
  if (!expr.ok()) {
    if (expr.status().message().empty()) __builtin_trap();
    return 0;
  }
  Binding binding(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d)
    binding.set(static_cast<DimId>(d), d < bound ? static_cast<std::int64_t>(data[d]) * 1000003 : 7);
  auto value = expr->eval(binding, dims);
  if (!value.ok()) {
    if (value.status().message().empty()) __builtin_trap();
    return 0;
  }
  DimTable again;
  auto reparsed = Expr::parse(expr->to_string(dims), again);
  if (!reparsed.ok()) {
    // What it prints must parse, unless it nests deeper than the parser
    // allows (the text nests one level more than the input at most).
    if (reparsed.status().message().find("nested deeper than") != std::string::npos) return 0;
    __builtin_trap();
  }
  Binding rebound(again.size());
  for (std::size_t d = 0; d < again.size(); ++d)
    rebound.set(static_cast<DimId>(d),
                binding.values[static_cast<std::size_t>(dims.find(again.name(static_cast<DimId>(d))))]);
  auto revalue = reparsed->eval(rebound, again);
  if (!revalue.ok() || *revalue != *value) __builtin_trap();  // and mean the same
  return 0;
}
