// `plan`: objectives over a run's figures ("ttft_p90_s<=1.0") and the
// search for the smallest integer value of a key at which they all hold.
module;
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

export module slicesched.planning.search;
import slicesched.core.status;

export namespace slicesched::planning {

struct Objective {
  std::string figure;  // a name of figure_names()
  enum class Op { kLe, kGe, kLt, kGt } op = Op::kLe;
  double bound = 0;
  std::string text;  // as given
  bool holds(double value) const;
};

// "FIGURE<=X", ">=", "<", ">": fails naming the argument on an unknown
// figure (listing them), a missing operator or a bound that is not a number.
Result<Objective> parse_objective(const std::string& arg);

// "KEY=LO..HI" with integers LO <= HI (every integer between), or
// "KEY=V1,V2,..." with ascending integers, one or more (those only: a tensor-parallel
// group's sizes, 2,4,8, where 3 is no valid value). Values are searched by
// their index, 0 to count() - 1.
struct VaryRange {
  std::string key;
  std::int64_t lo = 0, hi = 0;     // the smallest and largest value
  std::vector<std::int64_t> list;  // the values given as a list (empty: LO..HI)
  std::int64_t count() const { return list.empty() ? hi - lo + 1 : static_cast<std::int64_t>(list.size()); }
  std::int64_t at(std::int64_t index) const {
    return list.empty() ? lo + index : list[static_cast<std::size_t>(index)];
  }
};
Result<VaryRange> parse_vary(const std::string& arg);

struct SearchStep {
  std::int64_t value = 0;
  bool holds = false;
};

struct SearchResult {
  std::optional<std::int64_t> answer;  // the smallest value that holds; none in range
  std::vector<SearchStep> steps;       // in the order tried
  bool monotone = true;                // false: a value above the answer was seen to fail
};

// Bisection for the smallest v in [lo, hi] with holds(v), assuming holds is
// monotone (once true, true above). Tries hi, then lo, then halves; the
// answer's lower neighbour is always tried (it fails), and its upper one
// too when it is in range, as a check of monotonicity. Each value is
// evaluated at most once.
SearchResult smallest_holding(std::int64_t lo, std::int64_t hi, const std::function<bool(std::int64_t)>& holds);

}  // namespace slicesched::planning
