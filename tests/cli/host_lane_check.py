"""Checks a run's Chrome trace against its summary: the "TENANT <-> host"
lanes hold every hand-off (and swap) summary.json counts, each as a copy out
then a copy back, one after another on a tenant's link.

  host_lane_check.py OUT POLICY
"""
import json
import os
import re
import sys

out, policy = sys.argv[1], sys.argv[2]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


with open(os.path.join(out, "summary.json")) as f:
    memory = json.load(f)["policies"][policy]["memory"]
slug = re.sub(r"[^a-z0-9]", "_", policy.lower())
with open(os.path.join(out, "trace_%s.json" % slug)) as f:
    events = json.load(f)["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
copies = [e for e in events if e.get("cat") == "host_copy"]
handed = [e for e in copies if e["name"].startswith("hand-off") and e["args"]["direction"] == "to host"]
want = memory.get("handed_off_sequences", 0)
if want == 0:
    fail("%s: summary.json counts no hand-off: nothing to check" % policy)
if sum(e["args"]["sequences"] for e in handed) != want:
    fail("%s: the trace hands off %d sequences, summary.json %d" %
         (policy, sum(e["args"]["sequences"] for e in handed), want))
gib = sum(e["args"]["bytes"] for e in handed) / 2**30
if abs(gib - memory["handoff_gib"]) > 1e-6 * max(1.0, gib):
    fail("%s: the trace hands off %.6f GiB, summary.json %.6f" % (policy, gib, memory["handoff_gib"]))
by_lane = {}
for e in copies:
    if not lanes.get(e["tid"], "").endswith(" <-> host"):
        fail("a host copy on lane %r" % lanes.get(e["tid"]))
    by_lane.setdefault(e["tid"], []).append(e)
for tid, es in by_lane.items():
    es.sort(key=lambda e: (e["ts"], e["args"]["direction"] != "to host"))
    for a, b in zip(es, es[1:]):
        if b["ts"] < a["ts"] + a["dur"] - 1e-3:
            fail("%s: %s at %.3f us starts before %s ends at %.3f us" %
                 (lanes[tid], b["name"], b["ts"], a["name"], a["ts"] + a["dur"]))
    for a, b in zip(es[0::2], es[1::2]):
        if (a["args"]["direction"], b["args"]["direction"]) != ("to host", "from host") or a["args"] != {**b["args"], "direction": "to host"}:
            fail("%s: a copy out at %.3f us is not followed by its copy back" % (lanes[tid], a["ts"]))
print("ok: %d hand-offs (%d sequences, %.3f GiB) on %d host lane(s)" % (len(handed), want, gib, len(by_lane)))
