// The contiguous split shared by every built-in partition set: a batch's ops
// (in topological order) are cut into consecutive runs, one per group member,
// so a pipeline crosses each link between members at most once.
module;
#include <cstddef>
#include <span>
#include <string>
#include <vector>

export module slicesched.plugins.partition_sets:contiguous;
import slicesched.core.plugin;

export namespace slicesched::plugins {

// A group of accelerators one candidate spans, with its label.
struct AccelGroup {
  std::string label;
  std::vector<AccelId> members;  // non-empty
};

// The mapping rule: op i of a batch of n ops runs on member floor(i * m / n)
// of a group of m. With n = 6 and m = 2: ops 0-2 on the first member, 3-5 on
// the second; with m = 4: members 0,0,1,2,2,3. With n < m the last members
// get nothing.
inline AccelId contiguous_member(std::span<const AccelId> members, std::size_t i, std::size_t n) {
  return members[i * members.size() / n];
}

// The candidate that places `batch` on `group` by the rule above, except
// that an operator whose weights its member lacks goes to the first member
// that holds them: a model spread over accelerators ([[models]] spread)
// holds each layer group's weights on one of them only, and an operator
// runs where its weights are. Where every member holds every weight (the
// usual case) this is the rule above.
// Written over `c`, reusing its buffers.
void contiguous_candidate_into(const AccelGroup& group, const Gmg& gmg, const Batch& batch, Candidate& c) {
  const std::size_t n = batch.ops.size();
  c.label = group.label;
  c.accel.clear();
  for (std::size_t i = 0; i < n; ++i) {
    AccelId a = contiguous_member(group.members, i, n);
    // Only missing weights move an operator: a lost member keeps its
    // operators (the placement waits for it, or fails them, as before).
    const OpId op = batch.ops[i];
    if (gmg.contains(op) && gmg.op(op).weight_bytes > 0 && !gmg.weights_on(gmg.op(op).kind, a))
      for (AccelId m : group.members)
        if (gmg.weights_on(gmg.op(op).kind, m)) {
          a = m;
          break;
        }
    c.accel.push_back(a);
  }
}

Candidate contiguous_candidate(const AccelGroup& group, const Gmg& gmg, const Batch& batch) {
  Candidate c;
  c.accel.reserve(batch.ops.size());
  contiguous_candidate_into(group, gmg, batch, c);
  return c;
}

// The members' names joined by '+', e.g. "gpu0+gpu1". Ids must be valid.
std::string names_label(const AcceleratorSet& accels, std::span<const AccelId> members) {
  std::string label;
  for (AccelId a : members) label += (label.empty() ? "" : "+") + accels[a].name;
  return label;
}

}  // namespace slicesched::plugins
