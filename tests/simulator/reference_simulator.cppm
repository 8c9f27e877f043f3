// The independent reference the differential test
// (tests/simulator/differential_test.cpp) compares the global simulator
// against: a frozen copy of the simulator's straightforward implementation
// from before its fast event loop (binary heaps for events and ready queues,
// one event per operator and transfer). It follows the same rules (one
// operator per accelerator; higher priority, then earlier issue; no
// preemption; transfers one at a time per port, oldest first) by the
// obvious route, so the two agreeing exactly over random snapshots checks
// the fast one. It is deliberately kept apart from simulator/: fix a bug
// here only when the rule itself changed, never to make the test pass.
module;
#include <cstdint>

export module slicesched.testing.reference_simulator;
import slicesched.simulator.global_simulator;
import slicesched.core.estimator;
import slicesched.core.gmg;

export namespace slicesched::testing {

// What simulate(gmg, est, opt) must return, field for field. Keeps nothing
// between calls.
SimulationResult reference_simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt);

}  // namespace slicesched::testing
