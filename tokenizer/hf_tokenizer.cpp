// load_hf_tokenizer: Hugging Face's `tokenizers` library (the Rust library
// behind transformers' fast tokenizers, through its Python API) behind
// Tokenizer, called through an embedded CPython. It is the one kept
// implementation of tokenizer.json reachable from Debian 12 and PyPI; no C++
// port is packaged, and a hand-written BPE is ruled out (docs/live.md,
// "Checkpoints and tokenizers").
//
// This is the only translation unit that includes Python.h: its macros and
// C names stay out of the rest of the project, and only this file rebuilds
// when the Python headers change.
module;
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.tokenizer;

namespace slicesched {

namespace {

namespace fs = std::filesystem;

// Holds the GIL for its scope. PyGILState works from any thread, including
// HTTP threads Python has never seen, and nests.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// An owned reference; destroy it only while holding the GIL.
struct Decref {
  void operator()(PyObject* o) const { Py_XDECREF(o); }
};
using Ref = std::unique_ptr<PyObject, Decref>;

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The pending Python exception as "Type: message" on one line, cleared.
// Needs the GIL.
std::string python_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  Ref t(type), v(value), tb(trace);
  if (!t) return "unknown Python error";
  std::string out = reinterpret_cast<PyTypeObject*>(t.get())->tp_name;
  if (v) {
    Ref s(PyObject_Str(v.get()));
    const char* text = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    if (text && *text) out += std::string(": ") + text;
    PyErr_Clear();  // a failing str() must not leave a second exception behind
  }
  return one_line(out);
}

// Where `import tokenizers` looks first: SLICESCHED_PYTHONPATH (the
// platform's path list) when set, else the .venv site-packages CMake found
// (SLICESCHED_PYTHON_SITE). Prepended, so the venv's packages win over
// anything of the same name in the system Python's dist-packages.
std::string site_path() {
  if (const char* env = std::getenv("SLICESCHED_PYTHONPATH"); env && *env) return env;
#ifdef SLICESCHED_PYTHON_SITE
  return SLICESCHED_PYTHON_SITE;
#else
  return {};
#endif
}

// The embedded interpreter, started once per process on first use, never
// finalized (HTTP threads may still hold tokenizers at exit; Python's own
// finalization would race them). `error` is set when it cannot start or
// cannot import `tokenizers`; it then stays unusable for the process.
struct Interpreter {
  std::string error;
  PyObject* tokenizer_class = nullptr;  // tokenizers.Tokenizer, owned forever
};

std::string start(Interpreter& it) {
  const std::string paths = site_path();
  const std::string fix =
      " (run scripts/setup.sh to install it into .venv, or set SLICESCHED_PYTHONPATH to the "
      "site-packages folder that holds it)";
  const bool ours = !Py_IsInitialized();
  PyGILState_STATE joined{};
  if (ours) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    // serve installs its own SIGINT and SIGTERM handlers; Python's would
    // take SIGINT for KeyboardInterrupt.
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    // The standard library of the libpython we link (Debian's), not that of
    // whichever python3 comes first on PATH (the venv's is a different
    // build): pin the prefix unless the user sets PYTHONHOME.
#ifdef SLICESCHED_PYTHON_HOME
    if (const char* home = std::getenv("PYTHONHOME"); !home || !*home) {
      PyStatus st = PyConfig_SetBytesString(&config, &config.home, SLICESCHED_PYTHON_HOME);
      if (PyStatus_Exception(st)) {
        PyConfig_Clear(&config);
        return std::string("cannot configure the embedded Python: ") + (st.err_msg ? st.err_msg : "?");
      }
    }
#endif
    // Extension modules (tokenizers' abi3 library) take the interpreter's
    // symbols from the global scope. When libpython came in with a library
    // opened RTLD_LOCAL (the live runtime, cli/live_runtime.hpp) they are
    // not there: make the libpython this code links global.
    if (Dl_info info{}; dladdr(reinterpret_cast<void*>(&Py_InitializeFromConfig), &info) != 0 && info.dli_fname)
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    PyStatus st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st))
      return std::string("cannot start the embedded Python (") + PY_VERSION + "): " + (st.err_msg ? st.err_msg : "?");
  } else {
    joined = PyGILState_Ensure();  // someone else embedded Python in this process
  }
  // From here this thread holds the GIL; released below in every case.
  std::string error;
  if (!paths.empty()) {
    PyObject* sys_path = PySys_GetObject("path");  // borrowed
    std::size_t begin = 0;
    Py_ssize_t at = 0;
    while (sys_path && begin <= paths.size()) {
      std::size_t end = paths.find(':', begin);
      if (end == std::string::npos) end = paths.size();
      if (end > begin) {
        Ref dir(PyUnicode_DecodeFSDefaultAndSize(paths.data() + begin, static_cast<Py_ssize_t>(end - begin)));
        if (!dir || PyList_Insert(sys_path, at++, dir.get()) != 0) {
          error = "cannot extend the embedded Python's sys.path: " + python_error();
          break;
        }
      }
      begin = end + 1;
    }
  }
  if (error.empty()) {
    Ref module(PyImport_ImportModule("tokenizers"));
    if (!module)
      error = "the Python package `tokenizers` cannot be imported by the embedded Python " PY_VERSION
              " (sys.path first: " +
              (paths.empty() ? std::string("nothing added") : paths) + "): " + python_error() + fix;
    else if (!(it.tokenizer_class = PyObject_GetAttrString(module.get(), "Tokenizer")))
      error = "the Python package `tokenizers` has no Tokenizer: " + python_error() + fix;
  }
  // Let other threads take the GIL; every call below takes it with Gil.
  if (ours)
    PyEval_SaveThread();
  else
    PyGILState_Release(joined);
  return error;
}

const Interpreter& interpreter() {
  // A function-local static: started by exactly one thread, the others wait.
  static const Interpreter it = [] {
    Interpreter i;
    i.error = start(i);
    return i;
  }();
  return it;
}

// GPT-2's bytes_to_unicode inverted: the byte each code point below 324
// spells in a byte-level BPE's pieces (printable bytes as themselves, the
// rest as 256, 257, ... in byte order); -1 where none.
int byte_of_code_point(std::uint32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> a;
    a.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      a[static_cast<std::size_t>(printable ? b : 256 + n++)] = b;
    }
    return a;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

// The code points of UTF-8 text (which Python hands out well formed).
std::vector<std::uint32_t> code_points(std::string_view s) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    std::uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int k = 1; k < n && i + static_cast<std::size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

// Whether a tokenizer.json's decoder undoes GPT-2's byte-level spelling.
bool byte_level_decoder(const nlohmann::json& d) {
  if (!d.is_object()) return false;
  if (d.value("type", "") == "ByteLevel") return true;
  if (d.value("type", "") == "Sequence" && d.contains("decoders") && d["decoders"].is_array())
    for (const auto& e : d["decoders"])
      if (byte_level_decoder(e)) return true;
  return false;
}

class HfTokenizer final : public Tokenizer {
 public:
  // Takes the references; called with the GIL held.
  // `add_bos`, `add_eos`: tokenizer_config.json's add_bos_token and
  // add_eos_token (-1: absent).
  HfTokenizer(std::string path, PyObject* tok, std::int64_t vocab, std::int64_t bos, std::int64_t eos, int add_bos,
              int add_eos)
      : path_(std::move(path)), tok_(tok), vocab_(vocab), bos_(bos), eos_(eos), add_bos_(add_bos), add_eos_(add_eos) {
    encode_kw_.reset(Py_BuildValue("{s:O}", "add_special_tokens", Py_False));
    prompt_kw_.reset(Py_BuildValue("{s:O}", "add_special_tokens", Py_True));
    // Special tokens (BOS, EOS, chat markers) are not in a reply's text: vLLM's
    // default (skip_special_tokens), and what sentencepiece does with its
    // control pieces.
    decode_kw_.reset(Py_BuildValue("{s:O}", "skip_special_tokens", Py_True));
    encode_.reset(PyObject_GetAttrString(tok_.get(), "encode"));
    decode_.reset(PyObject_GetAttrString(tok_.get(), "decode"));
    id_to_token_.reset(PyObject_GetAttrString(tok_.get(), "id_to_token"));
    if (!encode_kw_ || !prompt_kw_ || !decode_kw_ || !encode_ || !decode_ || !id_to_token_)
      throw std::runtime_error(python_error());
    // Its decoder, from the file's own JSON: how a piece spells its bytes.
    Ref json(PyObject_CallMethod(tok_.get(), "to_str", nullptr));
    const char* text = json ? PyUnicode_AsUTF8(json.get()) : nullptr;
    if (!text) throw std::runtime_error(python_error());
    const nlohmann::json whole = nlohmann::json::parse(text, nullptr, false);
    byte_level_ = !whole.is_discarded() && whole.contains("decoder") && byte_level_decoder(whole["decoder"]);
  }

  ~HfTokenizer() override {
    Gil gil;
    encode_.reset(), decode_.reset(), id_to_token_.reset(), encode_kw_.reset(), prompt_kw_.reset(), decode_kw_.reset(),
        tok_.reset();
  }

  std::vector<std::int64_t> encode(std::string_view text) const override { return encode_with(text, encode_kw_); }

  // What the file's post-processor adds (transformers' default for a
  // PreTrainedTokenizerFast), BOS and EOS then as add_bos_token and
  // add_eos_token say where the config sets them (as LlamaTokenizerFast
  // rebuilds its post-processor).
  std::vector<std::int64_t> encode_prompt(std::string_view text) const override {
    std::vector<std::int64_t> ids = encode_with(text, prompt_kw_);
    const bool has_bos = bos_ >= 0 && !ids.empty() && ids.front() == bos_;
    if (add_bos_ == 1 && bos_ >= 0 && !has_bos) ids.insert(ids.begin(), bos_);
    if (add_bos_ == 0 && has_bos) ids.erase(ids.begin());
    const bool has_eos = eos_ >= 0 && !ids.empty() && ids.back() == eos_;
    if (add_eos_ == 1 && eos_ >= 0 && !has_eos) ids.push_back(eos_);
    if (add_eos_ == 0 && has_eos && ids.size() > 1) ids.pop_back();
    return ids;
  }

  std::vector<std::int64_t> encode_with(std::string_view text, const Ref& kw) const {
    Gil gil;
    // "replace": bytes that are not UTF-8 become U+FFFD, which a byte-level
    // model spells and others map to their unknown token.
    Ref str(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
    Ref args(str ? PyTuple_Pack(1, str.get()) : nullptr);
    Ref enc(args ? PyObject_Call(encode_.get(), args.get(), kw.get()) : nullptr);
    Ref ids(enc ? PyObject_GetAttrString(enc.get(), "ids") : nullptr);
    Ref seq(ids ? PySequence_Fast(ids.get(), "Encoding.ids is not a sequence") : nullptr);
    if (!seq) throw std::runtime_error(path_ + ": encode: " + python_error());
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.get());
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      const long long id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq.get(), i));
      if (id == -1 && PyErr_Occurred()) throw std::runtime_error(path_ + ": encode: " + python_error());
      out.push_back(id);
    }
    return out;
  }

  std::string decode(std::span<const std::int64_t> ids) const override {
    for (std::int64_t id : ids)
      if (id < 0 || id >= vocab_)
        throw std::out_of_range(path_ + ": token id " + std::to_string(id) + " is outside the tokenizer's [0, " +
                                std::to_string(vocab_) + ")");
    Gil gil;
    Ref list(PyList_New(static_cast<Py_ssize_t>(ids.size())));
    if (!list) throw std::runtime_error(path_ + ": decode: " + python_error());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      PyObject* id = PyLong_FromLongLong(ids[i]);
      if (!id) throw std::runtime_error(path_ + ": decode: " + python_error());
      PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), id);  // steals id
    }
    Ref args(PyTuple_Pack(1, list.get()));
    Ref text(args ? PyObject_Call(decode_.get(), args.get(), decode_kw_.get()) : nullptr);
    Py_ssize_t size = 0;
    const char* utf8 = text ? PyUnicode_AsUTF8AndSize(text.get(), &size) : nullptr;
    if (!utf8) throw std::runtime_error(path_ + ": decode: " + python_error());
    return std::string(utf8, static_cast<std::size_t>(size));
  }

  // The piece's own spelling: byte-level pieces through GPT-2's table (a
  // piece outside it, an added token, is its decoded text), others as
  // piece_bytes spells them.
  std::string token_bytes(std::int64_t id) const override {
    if (id < 0 || id >= vocab_)
      throw std::out_of_range(path_ + ": token id " + std::to_string(id) + " is outside the tokenizer's [0, " +
                              std::to_string(vocab_) + ")");
    std::string piece;
    {
      Gil gil;
      Ref t(PyObject_CallFunction(id_to_token_.get(), "L", static_cast<long long>(id)));
      if (!t) throw std::runtime_error(path_ + ": id_to_token: " + python_error());
      if (t.get() == Py_None) return Tokenizer::token_bytes(id);
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(t.get(), &size);
      if (!utf8) throw std::runtime_error(path_ + ": id_to_token: " + python_error());
      piece.assign(utf8, static_cast<std::size_t>(size));
    }
    if (byte_level_) {
      std::string out;
      for (const std::uint32_t cp : code_points(piece)) {
        const int b = byte_of_code_point(cp);
        if (b < 0) return Tokenizer::token_bytes(id);
        out += static_cast<char>(b);
      }
      return out;
    }
    return piece_bytes(piece);
  }

  std::int64_t vocab_size() const override { return vocab_; }
  std::int64_t bos_id() const override { return bos_; }
  std::int64_t eos_id() const override { return eos_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  Ref tok_, encode_, decode_, id_to_token_, encode_kw_, prompt_kw_, decode_kw_;
  std::int64_t vocab_, bos_, eos_;
  int add_bos_, add_eos_;
  bool byte_level_ = false;
};

// The text of tokenizer_config.json's `key`: a string, or an AddedToken
// written as {"content": ...}; empty when absent or null.
Result<std::string> special_token(const nlohmann::json& config, const char* key, const std::string& file) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return InvalidArgument(file + ": " + key + " is neither a string nor {\"content\": string}");
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_hf_tokenizer(const std::string& file) {
  // BOS and EOS are not in tokenizer.json; transformers takes them from
  // tokenizer_config.json beside it, and so do we (before starting Python,
  // so a bad config costs nothing).
  std::string specials[2];
  int add_bos = -1, add_eos = -1;  // (absent: what the post-processor adds)
  const fs::path config_file = fs::path(file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config_file, ec)) {
    nlohmann::json config;
    try {
      std::ifstream in(config_file);
      config = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument(config_file.string() + ": not JSON (" + one_line(e.what()) + ")");
    }
    if (!config.is_object()) return InvalidArgument(config_file.string() + ": not a JSON object");
    const char* keys[2] = {"bos_token", "eos_token"};
    for (int i = 0; i < 2; ++i) {
      auto s = special_token(config, keys[i], config_file.string());
      if (!s.ok()) return s.status();
      specials[i] = std::move(s).value();
    }
    for (auto [key, flag] : {std::pair{"add_bos_token", &add_bos}, std::pair{"add_eos_token", &add_eos}})
      if (const auto a = config.find(key); a != config.end() && !a->is_null()) {
        if (!a->is_boolean())
          return InvalidArgument(config_file.string() + ": " + key + ": expected true or false, got " + a->dump());
        *flag = a->get<bool>() ? 1 : 0;
      }
  }

  const Interpreter& it = interpreter();
  if (!it.error.empty()) return FailedPrecondition(file + ": cannot read a tokenizer.json: " + it.error);
  Gil gil;
  Ref tok(PyObject_CallMethod(it.tokenizer_class, "from_file", "s", file.c_str()));
  if (!tok)
    return InvalidArgument(file + ": Hugging Face tokenizers cannot load it (" + python_error() +
                           "); give a tokenizer.json from the model's checkpoint");
  Ref vocab_obj(PyObject_CallMethod(tok.get(), "get_vocab_size", "O", Py_True));
  const long long vocab = vocab_obj ? PyLong_AsLongLong(vocab_obj.get()) : -1;
  if (vocab < 0) return InvalidArgument(file + ": get_vocab_size: " + python_error());
  std::int64_t ids[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    if (specials[i].empty()) continue;
    Ref id(PyObject_CallMethod(tok.get(), "token_to_id", "s", specials[i].c_str()));
    if (!id) return InvalidArgument(file + ": token_to_id: " + python_error());
    if (id.get() == Py_None)
      return InvalidArgument(config_file.string() + ": " + (i == 0 ? "bos_token" : "eos_token") + " '" + specials[i] +
                             "' is not in " + file + "'s vocabulary");
    ids[i] = PyLong_AsLongLong(id.get());
    if (ids[i] == -1 && PyErr_Occurred()) return InvalidArgument(file + ": token_to_id: " + python_error());
  }
  try {
    return std::shared_ptr<const Tokenizer>(
        std::make_shared<HfTokenizer>(file, tok.release(), vocab, ids[0], ids[1], add_bos, add_eos));
  } catch (const std::exception& e) {
    return Internal(file + ": " + e.what());
  }
}

}  // namespace slicesched

// ---- Chat templates: Hugging Face's Jinja templates through jinja2 ----

namespace slicesched {

namespace {

// What transformers does in apply_chat_template (its
// _compile_jinja_template): an ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks and the loopcontrols extension, a tojson
// filter that keeps non-ASCII, and the globals raise_exception and
// strftime_now; render() gets messages, add_generation_prompt and the
// special tokens. Compiled templates are cached by their text.
constexpr const char* kChatRenderer = R"PY(
import json
from datetime import datetime
from jinja2.exceptions import TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

def _raise_exception(message):
    raise TemplateError(message)

def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def _strftime_now(fmt):
    return datetime.now().strftime(fmt)

_compiled = {}

def _template(template):
    t = _compiled.get(template)
    if t is None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        t = _compiled[template] = env.from_string(template)
    return t

def check(template):
    try:
        _template(template)
    except TemplateSyntaxError as e:
        raise TemplateError(f"line {e.lineno}: {e.message}") from None

def render(template, messages_json, bos_token, eos_token):
    return _template(template).render(messages=json.loads(messages_json), add_generation_prompt=True,
                                      bos_token=bos_token, eos_token=eos_token, tools=None, documents=None)
)PY";

// The renderer's two functions, made once and kept; or why they cannot be.
struct ChatRenderer {
  PyObject* render = nullptr;
  PyObject* check = nullptr;
  std::string error;
};

ChatRenderer make_chat_renderer() {
  ChatRenderer r;
  Ref globals(PyDict_New());
  if (globals) PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  Ref done(globals ? PyRun_String(kChatRenderer, Py_file_input, globals.get(), globals.get()) : nullptr);
  if (!done) {
    r.error = "the Python package `jinja2` cannot be used by the embedded Python (" + python_error() +
              "; run scripts/setup.sh to install it into .venv)";
    return r;
  }
  PyObject* render = PyDict_GetItemString(globals.get(), "render");  // borrowed
  PyObject* check = PyDict_GetItemString(globals.get(), "check");
  if (!render || !check) {
    r.error = "the chat renderer has no render() or check()";
    return r;
  }
  Py_INCREF(render);
  Py_INCREF(check);
  r.render = render;
  r.check = check;
  return r;
}

// Called with the GIL held. Not a static initialiser: the renderer's
// Python code may hand the GIL to another thread, which would then wait on
// the initialiser's guard while holding the GIL. (Two threads may both make
// it; the GIL orders their assignments, and either result serves.)
const ChatRenderer& chat_renderer() {
  static ChatRenderer r;
  if (!r.render && r.error.empty()) r = make_chat_renderer();
  return r;
}

}  // namespace

Status check_chat_template(const std::string& tmpl) {
  const Interpreter& it = interpreter();
  if (!it.error.empty()) return FailedPrecondition("cannot compile a chat template: " + it.error);
  Gil gil;
  const ChatRenderer& r = chat_renderer();
  if (!r.check) return FailedPrecondition(r.error);
  Ref out(PyObject_CallFunction(r.check, "s", tmpl.c_str()));
  if (!out) return InvalidArgument(python_error());
  return Status::Ok();
}

Result<std::string> render_chat_template(const std::string& tmpl, const std::string& messages_json,
                                         const std::string& bos, const std::string& eos) {
  const Interpreter& it = interpreter();
  if (!it.error.empty()) return FailedPrecondition("cannot render a chat template: " + it.error);
  Gil gil;
  const ChatRenderer& r = chat_renderer();
  if (!r.render) return FailedPrecondition(r.error);
  Ref out(PyObject_CallFunction(r.render, "ssss", tmpl.c_str(), messages_json.c_str(), bos.c_str(), eos.c_str()));
  if (!out) return InvalidArgument(python_error());
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(out.get(), &n);
  if (!text) return Internal("the chat template's output is not text: " + python_error());
  return std::string(text, static_cast<std::size_t>(n));
}

}  // namespace slicesched
