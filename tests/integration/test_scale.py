#!/usr/bin/env python3
"""1,000 experiments submitted at once from 32 concurrent clients are all stored, with
distinct ids, listed exactly once across pages, and can all be cancelled at once; the
daemon stays healthy and its database intact."""
import concurrent.futures
import http.client
import json
import os
import subprocess
import sys
import time

from harness import Daemon, check, run_cases

N = 1000
CLIENTS = 32
TINY = {"workload": "collective", "world_size": 1, "min_bytes": "8", "max_bytes": "8",
        "iters": 1, "warmup": 0}


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def test_thousand_concurrent_submissions():
    d = Daemon(cpu_slots=2)
    port = d.info["http_port"]
    try:
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            replies = list(pool.map(lambda i: post(port, "/v1/experiments",
                                                   dict(TINY, name=f"scale-{i:04d}")), range(N)))
        elapsed = time.time() - t0
        bad = [r for r in replies if r[0] != 201]
        check(not bad, f"{len(bad)} submissions failed, first: {bad[:1]}")
        ids = [r[1]["id"] for r in replies]
        check(len(set(ids)) == N, "ids are distinct")
        print(f"  {N} submissions from {CLIENTS} clients in {elapsed:.2f}s ({N / elapsed:.0f}/s)")
        seen = []
        for offset in range(0, N + 200, 200):
            page = d.get(f"/v1/experiments?name=scale-&limit=200&offset={offset}")
            check(page["total"] == N, page["total"])
            seen += [e["id"] for e in page["items"]]
        check(sorted(seen) == sorted(ids), "every experiment listed exactly once")
        names = {e["name"] for e in (d.get(f"/v1/experiments/{i}") for i in ids[:50])}
        check(len(names) == 50, "stored as submitted")
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            cancels = list(pool.map(lambda i: post(port, f"/v1/experiments/{i}/cancel", None), ids))
        check(all(s in (202, 409) for s, _ in cancels), {s for s, _ in cancels})
        deadline = time.time() + 120
        while time.time() < deadline:
            h = d.get("/healthz")
            if h["runs"]["queued"] == 0 and h["runs"]["active"] == 0:
                break
            time.sleep(0.2)
        done = d.get("/v1/experiments?name=scale-&status=cancelled&limit=1")["total"]
        ok = d.get("/v1/experiments?name=scale-&status=succeeded&limit=1")["total"]
        check(done + ok == N, f"{done} cancelled + {ok} succeeded != {N}")
        check(done > N // 2, f"most were still queued when cancelled ({done})")
        integrity = subprocess.run(["sqlite3", os.path.join(d.state_dir, "ddpbench.db"),
                                    "PRAGMA integrity_check"], capture_output=True, text=True)
        check(integrity.stdout.strip() == "ok", integrity.stdout + integrity.stderr)
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(run_cases([test_thousand_concurrent_submissions]))
