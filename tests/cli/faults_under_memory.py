"""Faults with little HBM to spare (found by an outside probe, thirteenth
session): what a lost accelerator, or one yet to be lost, does to a run whose
batches wait for memory.

  faults_under_memory.py SLICESCHED DATA_DIR WORK_DIR

1. A fault yet to come, on an accelerator the policy never uses, changes
   nothing: Static-Online's requests are the same with and without it (a
   request that fit nowhere waited for the fault before failing).
2. After a GPU is lost for good, a batch whose other placements need it and
   whose last one is out of HBM preempts what fills that one: every online
   request arriving after the loss gets its first token and none fails (the
   run stalled until its window closed, then failed every request as
   "no placement left").
3. With every accelerator lost the run fails, and every request is done or
   failed, counted as the faults' (requests not yet arrived were neither).
4. Without faults, a prompt that fits alone never fails out of memory behind
   the cache of its lane's finished sequences.
5. The same as 3 under swap preemption (swapped-out sequences were neither).
6. A request only a lost accelerator could run fails at once, as the loss's
   (it waited for the window's end, or failed as out of memory).
7. A request that fits nowhere, lost accelerators included, fails out of
   memory, not as the loss's.
"""
import csv
import json
import os
import subprocess
import sys

slicesched, data, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


# The measured H100 profiles every case plays.
GROUND_TRUTH = """[ground_truth]
layers = "{data}/profiles/llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv"
layers_model = "llama3-8b"
layers_type = "H100"
transfers = "{data}/profiles/vidur_network_h100_dgx_send_recv.csv"
""".format(data=data)

HEAD = """name = "{name}"
seed = 3
duration_s = 60
[cluster]
link_classes = [{{ name = "nvlink", bandwidth_gbps = 300.0, latency_us = 5.0 }}]
accelerators = [{{ name_prefix = "gpu", count = 4, type = "H100", hbm_gib = {hbm} }}]
{ground_truth}[[tenants]]
name = "online0"
priority = 10
lanes = {lanes}
stream = {{ trace = "{data}/traces/AzureLLMInferenceTrace_code.csv", duration_s = 60 }}
"""


def run(name, text, *extra, ok=True):
    path = os.path.join(work, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    out = os.path.join(work, name + "_out")
    p = subprocess.run([slicesched, "simulate", path, "--out", out, *extra], capture_output=True, text=True)
    if (p.returncode == 0) != ok:
        fail("%s: exit %d, expected %s:\n%s%s" % (name, p.returncode, "0" if ok else "non-zero", p.stdout, p.stderr))
    return out


def rows(out, policy):
    with open(os.path.join(out, "requests_%s.csv" % policy)) as f:
        return list(csv.DictReader(f))


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


# 1. A fault to come on gpu3, which Static-Online (on gpu0 and gpu1) never uses.
static = HEAD.format(name="fault_to_come", hbm=15.7, lanes=2, data=data, ground_truth=GROUND_TRUTH) + """
[[policies]]
name = "Static-Online"
tenants = ["online0"]
placement = { plugin = "static" }
partition_sets = [{ plugin = "explicit", groups = [["gpu0", "gpu1"]], tenants = { online0 = [0] } }]
"""
fault = '\n[[faults]]\naccelerator = "gpu3"\nat_s = 59\nduration_s = 0.5\n'
without = rows(run("no_fault", static), "static_online")
with_fault = rows(run("fault_to_come", static + fault), "static_online")
if not any(r["error"].startswith("out of memory") for r in without):
    fail("no request failed out of memory without the fault: the case tests nothing")
if with_fault != without:
    diff = [(a["id"], a["done_s"], a["error"][:40], b["done_s"], b["error"][:40])
            for a, b in zip(without, with_fault) if a != b]
    fail("a fault at 59 s on unused gpu3 changed %d request(s), e.g. (id, done, error) without/with: %s"
         % (len(diff), diff[:3]))

# 2. gpu3 lost for good at 30 s: the pairs left are gpu0 + gpu1 only.
slice_ = HEAD.format(name="lost_for_good", hbm=17, lanes=4, data=data, ground_truth=GROUND_TRUTH) + """
[[faults]]
accelerator = "gpu3"
at_s = 30
[[tenants]]
name = "offline0"
online = false
lanes = 4
stream = { constant_rate = 10.0, duration_s = 60, input_tokens = 1024, output_tokens = 64 }
[[policies]]
name = "SliceScheduler"
tenants = ["online0", "offline0"]
placement = { plugin = "simulation-guided" }
partition_sets = [{ plugin = "pairs" }, { plugin = "quads" }]
scheduler = { issued_budget = 64, batch_cap = 6 }
"""
out = run("lost_for_good", slice_)
reqs = rows(out, "slicescheduler")
failed = [r for r in reqs if r["error"]]
if failed:
    fail("%d request(s) failed after gpu3 was lost, e.g. %r" % (len(failed), failed[0]["error"]))
late = [r for r in reqs if r["tenant"] == "online0" and float(r["arrival_s"]) > 31]
if not late or any(not r["first_token_s"] for r in late):
    fail("%d of %d online requests arriving after the loss got no first token"
         % (sum(1 for r in late if not r["first_token_s"]), len(late)))
with open(os.path.join(out, "accelerators_slicescheduler.csv")) as f:
    busy = {r["accelerator"]: float(r["utilization"]) for r in csv.DictReader(f)}
if busy["gpu0"] < 0.8 or busy["gpu1"] < 0.8:
    fail("gpu0 and gpu1 were only %.0f %% and %.0f %% busy: the pair left idled" % (100 * busy["gpu0"],
                                                                                   100 * busy["gpu1"]))

# 3. Every accelerator lost at 10 s, Static-Online the SLO baseline.
every = "".join('\n[[faults]]\naccelerator = "gpu%d"\nat_s = 10\n' % a for a in range(4))
out = run("every_lost", static.replace("hbm_gib = 15.7", "hbm_gib = 80") + every, ok=False)
s = summary(out)
entry = s["policies"]["Static-Online"]
reqs = rows(out, "static_online")
neither = [r["id"] for r in reqs if not r["done_s"] and not r["error"]]
if neither:
    fail("%d request(s) neither done nor failed after every accelerator was lost, e.g. %s" % (len(neither), neither[:3]))
errored = sum(1 for r in reqs if r["error"])
if not entry.get("failed") or entry["faults"]["failed_requests"] != errored or entry["requests_failed"] != errored:
    fail("failed=%r, faults.failed_requests=%d, requests_failed=%d, but %d requests carry an error"
         % (entry.get("failed"), entry["faults"]["failed_requests"], entry["requests_failed"], errored))
if "Static-Online failed" not in s["slo_basis"]:
    fail("slo_basis should say the baseline failed, got %r" % s["slo_basis"])

# 4. No fault: a 7,500-token prompt that fits alone on 16-GiB H100s, after the
# lane's last request finished (its cache was held until each layer group
# ran again, and one such prompt of fifteen failed out of memory).
big = """name = "stale_cache"
seed = 5
duration_s = 30
[cluster]
link_classes = [{{ name = "nvlink", bandwidth_gbps = 300.0, latency_us = 5.0 }}]
accelerators = [{{ name_prefix = "gpu", count = 3, type = "H100", hbm_gib = 16 }}]
{ground_truth}[[tenants]]
name = "online0"
priority = 10
stream = {{ poisson_rate = 2.0, duration_s = 30, input_tokens = 300, output_tokens = 40 }}
[[tenants]]
name = "big"
priority = 5
online = false
lanes = 1
stream = {{ constant_rate = 0.5, duration_s = 30, input_tokens = 7500, output_tokens = 100 }}
[[policies]]
name = "SliceScheduler"
tenants = ["online0", "big"]
placement = {{ plugin = "simulation-guided" }}
partition_sets = [{{ plugin = "singles" }}, {{ plugin = "all" }}]
""".format(data=data, ground_truth=GROUND_TRUTH)
reqs = rows(run("stale_cache", big), "slicescheduler")
failed = [(r["id"], r["error"]) for r in reqs if r["error"]]
if failed:
    fail("%d request(s) failed though each fits alone, e.g. %s" % (len(failed), failed[0]))

# 5. Swap preemption, then every accelerator lost: the sequences on the
# host link or in host memory end too (they were neither done nor failed).
swap = """name = "swap_all_lost"
seed = 3
duration_s = 40
[cluster]
link_classes = [{{ name = "nvlink", bandwidth_gbps = 300.0, latency_us = 5.0 }}, {{ name = "pcie", bandwidth_gbps = 25.0, latency_us = 10.0 }}]
host_link = "pcie"
accelerators = [{{ name_prefix = "gpu", count = 4, type = "H100", hbm_gib = 17 }}]
{ground_truth}
[[tenants]]
name = "online0"
priority = 10
lanes = 2
preemption_mode = "swap"
stream = {{ poisson_rate = 3.0, duration_s = 40, input_tokens = 1500, output_tokens = 48 }}
[[tenants]]
name = "online1"
priority = 10
lanes = 2
preemption_mode = "swap"
stream = {{ poisson_rate = 2.0, duration_s = 40, input_tokens = 3000, output_tokens = 24 }}
[[tenants]]
name = "offline0"
online = false
lanes = 2
preemption_mode = "swap"
stream = {{ constant_rate = 4.0, duration_s = 40, input_tokens = 2048, output_tokens = 64 }}
[[policies]]
name = "SliceScheduler"
tenants = ["online0", "online1", "offline0"]
placement = {{ plugin = "simulation-guided" }}
partition_sets = [{{ plugin = "singles" }}, {{ plugin = "pairs" }}, {{ plugin = "quads" }}]
instances = {{ offline0 = 2 }}
prefill_lanes = {{ online0 = 0, online1 = 0 }}
co_batch = {{ riders = {{ offline0 = ["online0", "online1"] }}, slowdown = 2.0, keep_riders = true }}
scheduler = {{ issued_budget = 64, batch_cap = 6 }}

[[faults]]
accelerator = "gpu1"
at_s = 3
duration_s = 4

[[faults]]
accelerator = "gpu0"
at_s = 8

[[faults]]
accelerator = "gpu1"
at_s = 12

[[faults]]
accelerator = "gpu2"
at_s = 12

[[faults]]
accelerator = "gpu3"
at_s = 14
""".format(data=data, ground_truth=GROUND_TRUTH)
out = run("swap_all_lost", swap, ok=False)
entry = summary(out)["policies"]["SliceScheduler"]
reqs = rows(out, "slicescheduler")
neither = [r["id"] for r in reqs if not r["done_s"] and not r["error"]]
if neither or entry["requests_done"] + entry["requests_failed"] != entry["requests_total"]:
    fail("swap, every accelerator lost: %d request(s) neither done nor failed (%s); done %d + failed %d of %d"
         % (len(neither), neither[:3], entry["requests_done"], entry["requests_failed"], entry["requests_total"]))

# 6. gpu0 lost for good at 5 s. Static-Online pins online0 to gpu0 + gpu1:
# each request from then on fails at once, as the loss's (it waited for
# the window's end). And where only the lost 40-GiB gpu0 could hold a big
# request, it fails as lost, not as out of memory.
pinned = HEAD.format(name="pinned_lost", hbm=80, lanes=2, data=data, ground_truth=GROUND_TRUTH) + """
[[faults]]
accelerator = "gpu0"
at_s = 5
[[policies]]
name = "Static-Online"
tenants = ["online0"]
placement = { plugin = "static" }
partition_sets = [{ plugin = "explicit", groups = [["gpu0", "gpu1"]], tenants = { online0 = [0] } }]
"""
out = run("pinned_lost", pinned)
entry = summary(out)["policies"]["Static-Online"]
reqs = rows(out, "static_online")
after = [r for r in reqs if float(r["arrival_s"]) > 5.5]
slow = [r["id"] for r in after if not r["error"].startswith("no placement left")
        or float(r["done_s"]) - float(r["arrival_s"]) > 0.01]
if not after or slow:
    fail("%d of %d requests arriving after the loss did not fail at once as lost, e.g. %s"
         % (len(slow), len(after), slow[:3]))
if entry["faults"]["failed_requests"] != sum(1 for r in reqs if r["error"]):
    fail("faults.failed_requests %d, but %d requests failed" % (entry["faults"]["failed_requests"],
                                                               sum(1 for r in reqs if r["error"])))
only_lost = big.replace('accelerators = [{ name_prefix = "gpu", count = 3, type = "H100", hbm_gib = 16 }]',
                        'accelerators = [{ name = "gpu0", type = "H100", hbm_gib = 40 }, '
                        '{ name = "gpu1", type = "H100", hbm_gib = 16 }]').replace(
    'constant_rate = 0.5, duration_s = 30, input_tokens = 7500', 'constant_rate = 1.0, duration_s = 30, '
    'input_tokens = 6000').replace('[{ plugin = "singles" }, { plugin = "all" }]', '[{ plugin = "singles" }]') + """
[[faults]]
accelerator = "gpu0"
at_s = 5
"""
out = run("only_lost_fits", only_lost)
entry = summary(out)["policies"]["SliceScheduler"]
reqs = rows(out, "slicescheduler")
lost = sum(1 for r in reqs if r["error"].startswith("no placement left"))
if entry["memory"]["oom_failed_requests"] or not lost or entry["faults"]["failed_requests"] != lost:
    fail("a request only the lost gpu0 could hold: %d failed as lost, faults.failed_requests %d, "
         "memory.oom_failed_requests %d" % (lost, entry["faults"]["failed_requests"],
                                            entry["memory"]["oom_failed_requests"]))
# 7. Two 15.3-GiB H100s and 7,000-token prompts (found by an outside probe,
# sixteenth session): no request fits even with both GPUs, so each fails out
# of memory; with g0 lost at 5 s, those arriving after were blamed on the
# loss ("no placement left", faults.failed_requests). They fail out of
# memory still.
never_fits = """name = "never_fits"
seed = 5
duration_s = 20
[model]
name = "llama3-8b"
groups = 2
[cluster]
link_classes = [{ name = "nvlink", bandwidth_gbps = 300.0, latency_us = 5.0 }]
accelerators = [{ name_prefix = "g", count = 2, type = "H100", hbm_gib = 15.3 }]
[ground_truth]
[[faults]]
accelerator = "g0"
at_s = 5
[[tenants]]
name = "long"
stream = { poisson_rate = 1.0, duration_s = 20, input_tokens = 7000, output_tokens = 20 }
[[policies]]
name = "SliceScheduler"
tenants = ["long"]
placement = { plugin = "simulation-guided" }
partition_sets = [{ plugin = "singles" }, { plugin = "pairs" }]
"""
out = run("never_fits", never_fits)
entry = summary(out)["policies"]["SliceScheduler"]
reqs = rows(out, "slicescheduler")
blamed = [r["id"] for r in reqs if not r["error"].startswith("out of memory")]
if blamed or entry["faults"]["failed_requests"] or entry["memory"]["oom_failed_requests"] != len(reqs):
    fail("requests that fit nowhere, a GPU lost: %d not failed out of memory (e.g. %s), faults.failed_requests %d, "
         "memory.oom_failed_requests %d of %d" % (len(blamed), blamed[:3], entry["faults"]["failed_requests"],
                                                 entry["memory"]["oom_failed_requests"], len(reqs)))

print("ok: a fault to come changes nothing, the pair left after a loss serves, every request of a run that lost "
      "everything ends (swapped ones too), a prompt that fits alone never fails behind a finished cache, and a "
      "request only a lost accelerator could run fails at once as the loss's, one that fits nowhere as out of memory")
