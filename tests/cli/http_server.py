"""Starts `slicesched serve CONFIG --listen 127.0.0.1:0` for the HTTP tests
and finds the port it bound from its "listening on" line. Standard library
only."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


class Server:
    def __init__(self, slicesched, config, store=None, out=None, extra=()):
        cmd = [slicesched, "serve", config, "--listen", "127.0.0.1:0"]
        if store:
            cmd += ["--batch-store", store]
        if out:
            cmd += ["--out", out]
        cmd += list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr = []
        self.url = None
        for line in self.proc.stderr:
            self.stderr.append(line)
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            self.proc.wait()
            raise SystemExit("the server did not start:\n" + "".join(self.stderr))
        # Keep reading, so the server never blocks on a full pipe.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def get(self, path):
        """(status, headers, body bytes)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def post(self, path, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise SystemExit("no VmRSS")

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` and waits; returns the exit status."""
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=120)
        self._reader.join(timeout=10)
        return rc

    def log(self):
        return "".join(self.stderr)


def check(cond, what, server=None):
    if not cond:
        msg = "FAIL: " + what
        if server is not None:
            msg += "\n--- server log ---\n" + server.log()
        raise SystemExit(msg)
    print("ok:", what)


def wait_batch(get_batch, until, what):
    """Polls get_batch() until until(batch) (the test's own timeout bounds it)."""
    while True:
        b = get_batch()
        if until(b):
            return b
        time.sleep(0.2)


def stream_completion(port, ids, max_tokens, model="llama-tiny"):
    """A streamed /v1/completions of token ids: (sent, first token time, token ids), monotonic seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": max_tokens, "stream": True})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, tokens = None, []
    while True:
        line = resp.fp.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: {"):
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("token_ids"):
                if first is None:
                    first = time.monotonic()
                tokens += ev["choices"][0]["token_ids"]
    conn.close()
    return t0, first, tokens


def fresh_dir(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def tmpfs_or_skip(work, size):
    """A fresh WORK/disk with a tmpfs of SIZE mounted on it; where none can
    be mounted (not root, no CAP_SYS_ADMIN) says why and exits 77 (ctest:
    skipped). The caller unmounts it."""
    fresh_dir(work)
    disk = os.path.join(work, "disk")
    os.makedirs(disk)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", disk], capture_output=True, text=True)
    if m.returncode != 0:
        print("SKIP: cannot mount a tmpfs here:", (m.stderr or m.stdout).strip())
        sys.exit(77)
    return disk
