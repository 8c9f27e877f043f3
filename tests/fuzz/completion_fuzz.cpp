// libFuzzer target: a POST /v1/completions body as the HTTP front end
// parses it (serving/api.cpp): any bytes give a request or an OpenAI-style
// error with a message, never an exception or a crash, and a request's ids
// are inside the model's vocabulary.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

import slicesched.serving.api;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const slicesched::serving::ServedModel models[] = {{.name = "llama-tiny",
                                                             .vocab = 512,
                                                             .context_window = 2048,
                                                             .request_tokens_max = 1024,
                                                             .online = {0},
                                                             .offline = {1}}};
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = slicesched::serving::parse_completion(body, std::span(models));
  if (auto* e = std::get_if<slicesched::serving::ApiError>(&parsed)) {
    if (e->message.empty() || e->status < 400) __builtin_trap();
  } else {
    const auto& r = std::get<slicesched::serving::CompletionRequest>(parsed);
    for (std::int64_t id : r.prompt)
      if (id < 0 || id >= models[0].vocab) __builtin_trap();
  }
  return 0;
}
