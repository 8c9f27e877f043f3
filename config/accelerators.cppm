// Accelerator type tables and fitted roofline efficiencies from TOML
// (configs/accelerators/*.toml; docs/config.md "Accelerator types").
// Errors are one line naming the file, the line and the key:
// "configs/accelerators/x.toml:4: accelerator.peak_tflops: expected a
// number > 0, got -1". Never throws; safe from any thread.
module;
#include <string>
#include <string_view>
#include <vector>

export module slicesched.config.accelerators;
import slicesched.hardware.roofline;
import slicesched.core.status;

export namespace slicesched {

// Data shipped with slicesched, found from the running executable, never
// from the working folder: an installed binary (`cmake --install`) reads
// <prefix>/share/slicescheduler/ beside its bin/, a build tree's binary the
// source tree it was built from (compiled in).
//   default_accelerator_dir: where type names are looked up when a config
//     does not say (accelerators/, or configs/accelerators/).
//   default_validation_csv: TensorRT-LLM's published A100 figures that
//     `slicesched validate` replays (validation/trtllm_a100.csv, or
//     data/validation/trtllm_a100.csv).
std::string default_accelerator_dir();
std::string default_validation_csv();

// One `[accelerator]` table.
Result<AcceleratorType> load_accelerator_type(const std::string& path);
// The type called `name` (its name or an alias) among the type files of
// `dir`, or, when `name` ends in ".toml", that file itself (relative to
// `dir`). Unknown: NotFound naming the known types.
Result<AcceleratorType> find_accelerator_type(std::string_view name, const std::string& dir);

// A `[roofline]` file: fitted efficiencies per kind of work.
Result<RooflineFit> load_roofline_fit(const std::string& path);
// The same as TOML text (what `bench roofline --write` saves), with
// `comment` lines at the top.
std::string roofline_fit_toml(const RooflineFit& fit, const std::vector<std::string>& comment);
// The fit file a config uses when it names none.
inline std::string default_roofline_fit(const std::string& dir) { return dir + "/roofline-fit.toml"; }

}  // namespace slicesched
