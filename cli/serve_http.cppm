// `slicesched serve CONFIG --listen HOST:PORT`: the live run of one policy
// behind the HTTP front end (serving/). Completions go to the online tenant
// bound to their model, batch lines to its offline tenant; the engine runs
// until a signal drains (or cancels) it.
module;
#include <atomic>
#include <string>

export module slicesched.cli.serve_http;
import slicesched.cli.live;
import slicesched.compose.run;
import slicesched.config;
import slicesched.core.calibration;
import slicesched.core.plugin;

export namespace slicesched::cli {

// Runs `policy` of `cfg` behind an HTTP server on `listen` ("HOST:PORT")
// until `stop` becomes 1 (drain: no new requests, admitted ones finish,
// batch results are written) or 2 (cancel: unfinished requests end with an
// error; unfinished batch lines stay pending in the store). `wake` is set,
// for the duration of the call, to the counter a signal handler must bump
// after changing `stop` (the engine's wait ends on it). `batch_store`: the
// SQLite file ("": batch API off). Throws std::runtime_error with one line
// on a bad address, a store that cannot be opened, or a failed run.
// The front end's options from the command line.
struct HttpExtras {
  std::string chat_template;  // a Jinja file overriding every model's chat template ("": theirs)
  std::string api_key;        // "": /v1/* open; else Bearer auth on it
};
PolicyRun serve_http(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                     const CalibrationProfile* prior, const std::string& listen, const std::string& batch_store,
                     const LiveRunOptions& base, std::atomic<std::atomic<int>*>& wake, const HttpExtras& extras = {});

}  // namespace slicesched::cli
