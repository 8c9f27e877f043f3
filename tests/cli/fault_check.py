"""Checks from a run's --out folder that a [[faults]] entry really happened:
the lost accelerator starts no operator after the fault, the run went on past
it on the others, and summary.json counts what the loss cost.

  fault_check.py OUT POLICY ACCELERATOR FAULT_RUN_S [--counted]

FAULT_RUN_S is when the fault comes on the run's clock (at_s / time_scale).
--counted: also require summary.json's faults counters (replaced operators
plus rebuilt sequences plus failed requests) to be above zero, for a run long
and busy enough that the loss must have taken something.
"""
import json
import os
import re
import sys

out, policy, accel, fault_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
counted = "--counted" in sys.argv[5:]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
entry = summary["policies"].get(policy)
if entry is None:
    fail("summary.json has no policy %r (has %s)" % (policy, sorted(summary["policies"])))
if entry["span_s"] <= fault_s:
    fail("%s: the run ended at %.3f s, before the fault at %.3f s: it never saw it" % (policy, entry["span_s"], fault_s))
faults = entry["faults"]
cost = faults["replaced_ops"] + faults["rebuilt_sequences"] + faults["failed_requests"]
if counted and cost == 0:
    fail("%s: summary.json counts nothing lost to the fault (%s)" % (policy, faults))

slug = re.sub(r"[^a-z0-9]", "_", policy.lower())
with open(os.path.join(out, "trace_%s.json" % slug)) as f:
    trace = json.load(f)["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in trace if e.get("ph") == "M" and e.get("name") == "thread_name"}
# The process is named for the policy (Perfetto showed "Process 1").
if [e["args"]["name"] for e in trace if e.get("name") == "process_name"] != [policy]:
    fail("the trace does not name its process %r" % policy)
lost = [tid for tid, name in lanes.items() if name == accel]
if not lost:
    fail("the trace has no lane named %r" % accel)
fault_us = fault_s * 1e6
ops = [e for e in trace if e.get("ph") == "X" and e.get("cat") == "op"]
after = [e for e in ops if e["tid"] == lost[0] and e["ts"] > fault_us + 1]
if after:
    fail("%s: %s started %d operator(s) after it was lost at %.3f s (first at %.3f s)" %
         (policy, accel, len(after), fault_s, after[0]["ts"] / 1e6))
others_after = [e for e in ops if e["tid"] != lost[0] and e["ts"] > fault_us]
if not others_after:
    fail("%s: no accelerator ran anything after the fault at %.3f s (the trace ends before it?)" % (policy, fault_s))
print("%s: %s lost at %.3f s; %d operators ran on the others after it; faults %s" %
      (policy, accel, fault_s, len(others_after), faults))
print("PASS")
