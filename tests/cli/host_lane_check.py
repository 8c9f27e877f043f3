"""Checks a run's Chrome trace against its summary: the "TENANT <-> host"
lanes hold every hand-off (and swap) summary.json counts, each as a copy out
then a copy back, one after another on a tenant's link, none starting after
the run's span.

  host_lane_check.py OUT POLICY [--queued]

--queued: the host link is too slow for the load, so some hand-offs booked
in the window never start inside it: the trace must show fewer than
summary.json counts (and still none past the span).
"""
import json
import os
import re
import sys

out, policy = sys.argv[1], sys.argv[2]
queued = "--queued" in sys.argv[3:]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


with open(os.path.join(out, "summary.json")) as f:
    entry = json.load(f)["policies"][policy]
memory, span_us = entry["memory"], entry["span_s"] * 1e6
slug = re.sub(r"[^a-z0-9]", "_", policy.lower())
with open(os.path.join(out, "trace_%s.json" % slug)) as f:
    events = json.load(f)["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
copies = [e for e in events if e.get("cat") == "host_copy"]
handed = [e for e in copies if e["name"].startswith("hand-off") and e["args"]["direction"] == "to host"]
want = memory.get("handed_off_sequences", 0)
if want == 0:
    fail("%s: summary.json counts no hand-off: nothing to check" % policy)
drawn = sum(e["args"]["sequences"] for e in handed)
gib = sum(e["args"]["bytes"] for e in handed) / 2**30
if queued:
    if not 0 < drawn < want:
        fail("%s: the trace hands off %d sequences, expected some but fewer than summary.json's %d" %
             (policy, drawn, want))
elif drawn != want:
    fail("%s: the trace hands off %d sequences, summary.json %d" % (policy, drawn, want))
elif abs(gib - memory["handoff_gib"]) > 1e-6 * max(1.0, gib):
    fail("%s: the trace hands off %.6f GiB, summary.json %.6f" % (policy, gib, memory["handoff_gib"]))
late = [e for e in copies if e["ts"] > span_us + 1e-3]
if late:
    fail("%s: %d host copies start after the run's span (%.3f s), the first at %.3f s" %
         (policy, len(late), span_us / 1e6, late[0]["ts"] / 1e6))
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
    # Each copy out is followed by its copy back, but the last may be
    # alone: its copy back starts after the run's span.
    for k in range(0, len(es), 2):
        a = es[k]
        if a["args"]["direction"] != "to host":
            fail("%s: a copy back at %.3f us follows no copy out" % (lanes[tid], a["ts"]))
        if k + 1 == len(es):
            if a["ts"] + a["dur"] <= span_us - 1e-3:
                fail("%s: the copy out at %.3f us has no copy back, though it ends inside the span" %
                     (lanes[tid], a["ts"]))
            continue
        b = es[k + 1]
        if b["args"]["direction"] != "from host" or a["args"] != {**b["args"], "direction": "to host"}:
            fail("%s: a copy out at %.3f us is not followed by its copy back" % (lanes[tid], a["ts"]))
print("ok: %d hand-offs (%d of %d sequences, %.3f GiB) on %d host lane(s)" % (len(handed), drawn, want, gib, len(by_lane)))
