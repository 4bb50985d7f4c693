#!/usr/bin/env python3
"""REST API contract: validation errors name their field (400), oversized bodies are 413
before the body is read, unknown ids 404 (and a rank a run lacks), wrong methods 405,
listing filters and pages, the pages of an experiment's runs, health, the spec schema,
the network profile stored on each run (--network-profile),
the static files that cannot be escaped, and connections that never complete a request
head (garbage, a trickle) cut off without harming event streams or keep-alive."""
import http.client
import json
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from harness import Daemon, check, raw_exchange, run_cases

D = None
TINY = {"name": "tiny", "workload": "collective", "world_size": 1, "min_bytes": "4K",
        "max_bytes": "4K", "iters": 1, "warmup": 0}


def expect_error(method, path, status, code, field=None, **kw):
    got, body, _ = D.request(method, path, **kw)
    check(got == status, f"{method} {path}: status {got}, want {status}: {body}")
    check(isinstance(body, dict) and "error" in body, f"no error object: {body}")
    err = body["error"]
    check(err["code"] == code, f"code {err['code']}, want {code}")
    check(err["message"], "empty message")
    if field is not None:
        check(err.get("field") == field, f"field {err.get('field')!r}, want {field!r}: {err}")
    return err


def test_invalid_specs_name_the_field():
    cases = [
        ({"workload": "collective", "world_size": 0}, "world_size"),
        ({"workload": "collective", "world_size": "2"}, "world_size"),
        ({"workload": "collective", "wold_size": 2}, "wold_size"),
        ({"workload": "nope"}, "workload"),
        ({}, "workload"),
        ({"workload": "collective", "min_bytes": "64M", "max_bytes": "4K"}, None),
        ({"workload": "collective", "min_bytes": "12Q"}, "min_bytes"),
        ({"workload": "collective", "sweep": {"world_size": [1, 0]}}, "sweep.world_size[1]"),
        ({"workload": "collective", "sweep": {"bogus": [1]}}, "sweep.bogus"),
        ({"workload": "collective", "iters": 2.5}, "iters"),
        # what runs where is decided at submit, not when the workers start
        ({"workload": "collective", "device": "cpu", "backend": "nccl"}, "backend"),
        ({"workload": "collective", "device": "cpu", "sweep": {"backend": ["tcp", "nccl"]}},
         "sweep"),
    ]
    for spec, field in cases:
        err = expect_error("POST", "/v1/experiments", 400, "invalid", field, body=spec)
        if field is None:
            check("min_bytes" in err["message"] or "max_bytes" in err["message"], err)
        if spec.get("device") == "cpu":
            check('device "cpu" has no backend "nccl"' in err["message"], err)


def test_malformed_bodies():
    expect_error("POST", "/v1/experiments", 400, "invalid", raw=b"{not json")
    expect_error("POST", "/v1/experiments", 400, "invalid", raw=b"[1,2,3]")
    expect_error("POST", "/v1/experiments", 400, "invalid", raw=b"")
    expect_error("POST", "/v1/experiments", 400, "invalid", raw=b"\xff\xfe\x00garbage")
    expect_error("POST", "/v1/experiments", 400, "invalid", raw=b'{"workload":"collective"} trailing')


def curl_post(data, *headers):
    """POSTs bytes with curl (which reads an early answer while still sending, as real
    clients do) and returns (status, parsed body)."""
    args = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST", "--data-binary", "@-",
            "-H", "Content-Type: application/json"]
    for h in headers:
        args += ["-H", h]
    out = subprocess.run(args + [D.url + "/v1/experiments"], input=data, capture_output=True,
                         timeout=60).stdout.decode()
    body, _, status = out.rpartition("\n")
    return int(status), json.loads(body) if body.strip() else None


def test_body_over_cap_is_413():
    big = b'{"workload": "collective", "description": "' + b"a" * (2 << 20) + b'"}'
    status, body = curl_post(big)
    check(status == 413 and body["error"]["code"] == "too_large", (status, body))
    # chunked (no Content-Length): discovered while reading, still a 413
    status, body = curl_post(big, "Transfer-Encoding: chunked")
    check(status == 413 and body["error"]["code"] == "too_large", (status, body))
    # announced as huge but never sent: answered from the header alone, at once
    s = socket.create_connection(("127.0.0.1", D.info["http_port"]), timeout=10)
    s.sendall(b"POST /v1/experiments HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
    reply = s.recv(4096).decode(errors="replace")
    s.close()
    check(reply.startswith("HTTP/1.1 413"), reply[:200])
    # a body just under the cap is read and judged on its content
    ok = b'{"workload": "collective", "description": "' + b"a" * 4000 + b'"}'
    status, body = curl_post(ok)
    check(status == 201, (status, body))
    check(D.get("/healthz")["status"] == "ok")


def mem_total_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_memory_checked_at_submit():
    """Sizes before memory: the issue's resnet50 on 3x4096x4096 with batch 65536 is refused
    (400, over the 1 TiB a rank may use, naming batch_size, the estimate in the message), and
    a point under that cap but over this node's physical memory is a 409 naming batch_size;
    neither stores anything."""
    before = D.get("/v1/experiments?limit=1")["total"]
    huge = {"workload": "train", "model": "resnet50", "batch_size": 65536,
            "dataset": {"name": "synthetic", "shape": [3, 4096, 4096]}}
    err = expect_error("POST", "/v1/experiments", 400, "invalid", "batch_size", body=huge)
    check("GiB" in err["message"] and "an estimate" in err["message"]
          and "1024 GiB a rank may use" in err["message"], err)
    big = {"workload": "train", "model": "resnet50", "batch_size": 4096,
           "dataset": {"name": "synthetic", "classes": 1000}}  # about 870 GiB a rank
    status, body, _ = D.request("POST", "/v1/experiments", body=big)
    if status == 409:
        err = body["error"]
        check(err["code"] == "conflict" and err["field"] == "batch_size", err)
        check("GiB of memory" in err["message"] and "an estimate" in err["message"], err)
        check(mem_total_gib() < 1024, f"refused on a node with {mem_total_gib():.0f} GiB")
        check(D.get("/v1/experiments?limit=1")["total"] == before, "nothing stored")
    else:  # only a node with that much memory takes it
        check(status == 201 and mem_total_gib() >= 800, (status, body, mem_total_gib()))
        D.request("POST", f"/v1/experiments/{body['id']}/cancel")
        D.request("DELETE", f"/v1/experiments/{body['id']}")


def test_not_found_and_methods():
    expect_error("GET", "/v1/experiments/999999", 404, "not_found")
    expect_error("GET", "/v1/experiments/abc", 404, "not_found")
    expect_error("GET", "/v1/experiments/-1", 404, "not_found")
    expect_error("GET", "/v1/runs/424242", 404, "not_found")
    expect_error("GET", "/v1/nothing", 404, "not_found")
    expect_error("DELETE", "/v1/experiments", 405, "method_not_allowed")
    expect_error("PUT", "/v1/runs/1", 405, "method_not_allowed")


def test_create_get_list_and_filters():
    ids = [D.submit(dict(TINY, name=f"list-{i}"))["id"] for i in range(3)]
    exp = D.get(f"/v1/experiments/{ids[0]}")
    check(exp["name"] == "list-0" and exp["n_runs"] == 1 and len(exp["runs"]) == 1, exp)
    check(exp["spec"]["iters"] == 1 and exp["spec"]["dtype"] == "float32", "defaults filled")
    page = D.get("/v1/experiments?limit=2&offset=0&name=list-")
    check(page["total"] >= 3 and len(page["items"]) == 2, page)
    check(page["items"][0]["id"] > page["items"][1]["id"], "newest first")
    page2 = D.get("/v1/experiments?limit=2&offset=2&name=list-")
    check(all(i["id"] not in [x["id"] for x in page["items"]] for i in page2["items"]), "pages overlap")
    for i in ids:
        D.wait_experiment(i, timeout=60)
    done = D.get("/v1/experiments?status=succeeded&workload=collective&limit=1000")
    check(set(ids) <= {i["id"] for i in done["items"]}, done)
    expect_error("GET", "/v1/experiments?status=bogus", 400, "invalid", "status")
    expect_error("GET", "/v1/experiments?limit=0", 400, "invalid", "limit")
    expect_error("GET", "/v1/experiments?limit=abc", 400, "invalid", "limit")
    expect_error("GET", "/v1/experiments?colour=red", 400, "invalid", "colour")
    # the generated documents take no argument: one they do not know is named, not ignored
    expect_error("GET", "/v1/vocabulary?colour=red", 400, "invalid", "colour")
    expect_error("GET", "/v1/spec/schema?colour=red", 400, "invalid", "colour")


def test_steps_of_a_rank_the_run_lacks():
    exp = D.submit(dict(TINY, name="two-ranks", world_size=2))
    run_id = exp["runs"][0]["id"]
    D.wait_experiment(exp["id"], timeout=60)
    got = D.get(f"/v1/runs/{run_id}/steps?rank=1")
    check(got["rows"] == [] and "rank" in got["columns"], got)  # a rank it has: a table
    for rank in (2, 99):  # not an empty table: a rank the run does not have
        err = expect_error("GET", f"/v1/runs/{run_id}/steps?rank={rank}", 404, "not_found",
                           "rank")
        check(f"no rank {rank}" in err["message"] and "world size is 2" in err["message"], err)


HEAD_CAP_S = 10  # api/http.c: HTTP_HEAD_CAP_S, the total time a request head may take


def raw_connect():
    return socket.create_connection(("127.0.0.1", D.info["http_port"]), timeout=30)


def wait_closed(s, limit):
    """Seconds until the server answers or closes s (reading what it sends), at most limit."""
    t0 = time.time()
    s.settimeout(limit)
    try:
        while s.recv(4096):
            pass
    except (socket.timeout, ConnectionResetError):
        pass
    return time.time() - t0


def test_garbage_is_cut_off_quickly():
    for junk in (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # a TLS hello
                 b"\x00\xffnot http at all\r\n\r\n", b"GET"):
        s = raw_connect()
        s.sendall(junk)
        took = wait_closed(s, 30)
        s.close()
        check(took < 5, f"{junk!r} held the connection {took:.1f} s")
    check(D.get("/healthz")["status"] == "ok")


def test_slow_head_is_cut_off_but_streams_and_keepalive_live():
    # an event stream opened first must outlive the head cap: its head was complete
    sse = raw_connect()
    sse.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(sse.recv(4096).startswith(b"HTTP/1.1 200"), "stream opened")
    # a keep-alive connection idle longer than a head may be idle still takes a request
    ka = http.client.HTTPConnection("127.0.0.1", D.info["http_port"], timeout=10)
    ka.request("GET", "/healthz")
    first = ka.getresponse()
    check(first.status == 200 and first.read(), "first request")
    # a head trickled a byte every half second: each byte resets the idle timer, the
    # total cap still ends it
    s = raw_connect()
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    t0, closed = time.time(), False
    while not closed and time.time() - t0 < HEAD_CAP_S + 10:
        try:
            s.sendall(b"a")
        except OSError:
            closed = True
            break
        readable, _, _ = select.select([s], [], [], 0.5)
        if readable:
            try:
                closed = s.recv(4096) == b""
            except OSError:
                closed = True
    took = time.time() - t0
    s.close()
    check(closed and took < HEAD_CAP_S + 5, f"trickle still open after {took:.1f} s")
    check(took > HEAD_CAP_S - 2, f"cut after {took:.1f} s: by the idle timer, not the cap")
    ka.request("GET", "/healthz")
    check(ka.getresponse().status == 200, "keep-alive connection still serves")
    ka.close()
    exp = D.submit(dict(TINY, name="seen-by-stream"))
    sse.settimeout(30)
    seen = b""
    mine = re.compile(rb'"id": ?%d\b' % exp["id"])
    while not mine.search(seen):
        chunk = sse.recv(65536)
        check(chunk, f"stream closed: {seen[-300:]!r}")
        seen += chunk
    sse.close()


def test_experiment_runs_paged():
    n = 250  # more than the default page of 100: 50 seeds x 5 repeat counts
    created = D.submit(dict(TINY, name="paged",
                            sweep={"seed": list(range(50)), "repeats": [1, 2, 3, 4, 5]}))
    eid = created["id"]
    D.request("POST", f"/v1/experiments/{eid}/cancel")
    check(len(created["runs"]) == 100 and created["runs_total"] == n, "201 carries page 1")
    check((created["runs_limit"], created["runs_offset"]) == (100, 0), created["runs_limit"])
    first = D.get(f"/v1/experiments/{eid}")
    check([r["point"] for r in first["runs"]] == list(range(100)), "default page, point order")
    check(first["runs_total"] == n == first["n_runs"], first["runs_total"])
    every = D.get(f"/v1/experiments/{eid}?runs_limit=1024")
    check([r["point"] for r in every["runs"]] == list(range(n)), "runs_limit=1024: all")
    check([r["id"] for r in every["runs"][:100]] == [r["id"] for r in first["runs"]],
          "a page is a slice of the whole")
    tail = D.get(f"/v1/experiments/{eid}?runs_limit=100&runs_offset=200")
    check([r["point"] for r in tail["runs"]] == list(range(200, n)), "last page is short")
    check((tail["runs_limit"], tail["runs_offset"], tail["runs_total"]) == (100, 200, n), tail)
    check(D.get(f"/v1/experiments/{eid}?runs_offset={n}")["runs"] == [], "past the end: empty")
    for bad in ("runs_limit=0", "runs_limit=1025", "runs_limit=abc", "runs_offset=-1"):
        expect_error("GET", f"/v1/experiments/{eid}?{bad}", 400, "invalid", bad.split("=")[0])
    expect_error("GET", f"/v1/experiments/{eid}?limit=5", 400, "invalid", "limit")


def test_health_and_schema():
    h = D.get("/healthz")
    check(h["status"] == "ok" and h["slots"]["total"] >= 1 and h["store"]["port"] > 0, h)
    schema = D.get("/v1/spec/schema")
    check(schema["type"] == "object" and "world_size" in schema["properties"], "schema")
    check(schema.get("additionalProperties") is False, "closed schema")


def test_network_profile_stored_and_shown():
    """A daemon without --network-profile stores null (the host network); one started with
    it stores the name on every run it accepts and shows it in the run, its experiment's
    page of runs, health, and results (JSON and CSV), a column of every table."""
    h = D.get("/healthz")
    check("network_profile" in h and h["network_profile"] is None, h)
    plain = D.submit(dict(TINY, name="host-net"))
    check(plain["runs"][0]["network_profile"] is None, plain["runs"][0])
    D.wait_experiment(plain["id"], timeout=60)
    check(D.get(f"/v1/runs/{plain['runs'][0]['id']}")["network_profile"] is None, "run: null")
    status, csv, _ = D.request("GET", f"/v1/experiments/{plain['id']}/results?format=csv")
    check(status == 200 and "network_profile" in csv.splitlines()[0].split(","), csv[:200])
    shaped = Daemon(cpu_slots=2, extra_args=["--network-profile", "10gbe"])
    try:
        check(shaped.get("/healthz")["network_profile"] == "10gbe", "health names the profile")
        exp = shaped.run_experiment(dict(TINY, name="shaped-net"), timeout=60)
        check(exp["status"] == "succeeded", exp)
        check([r["network_profile"] for r in exp["runs"]] == ["10gbe"], exp["runs"])
        check(shaped.get(f"/v1/runs/{exp['runs'][0]['id']}")["network_profile"] == "10gbe", "run")
        table = shaped.get(f"/v1/experiments/{exp['id']}/results")
        check("network_profile" in table["columns"] and table["rows"], table)
        check(all(r["network_profile"] == "10gbe" for r in table["rows"]), table["rows"])
        status, csv, _ = shaped.request("GET", f"/v1/experiments/{exp['id']}/results?format=csv")
        lines = csv.splitlines()
        col = lines[0].split(",").index("network_profile")
        check(status == 200 and all(line.split(",")[col] == "10gbe" for line in lines[1:]), csv)
    finally:
        shaped.close()
    state = tempfile.mkdtemp(prefix="ddpb-it-")
    try:
        Daemon(state_dir=state, extra_args=["--network-profile", "1 gbe"]).close()
        raise AssertionError("a profile name with a space was accepted")
    except RuntimeError as why:
        check("network-profile" in str(why), why)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_static_files_stay_inside_web():
    status, body, hdrs = D.request("GET", "/")
    check(status == 200 and "text/html" in hdrs["Content-Type"] and "ddpbench" in body, body[:200])
    for path in ("/../meson.build", "/%2e%2e/meson.build", "/..%2fmeson.build", "//etc/passwd",
                 "/./index.html", "/nonexistent.js"):
        reply = raw_exchange(D.info["http_port"],
                             f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close"
                             "\r\n\r\n".encode())
        head = reply.split(b"\r\n", 1)[0].decode()
        check(" 404 " in head, f"{path}: {head}")
        check(b"project('ddpbench'" not in reply and b"root:" not in reply, f"{path} leaked")


def main():
    global D
    D = Daemon(cpu_slots=2)
    try:
        return run_cases([
            test_invalid_specs_name_the_field,
            test_malformed_bodies,
            test_body_over_cap_is_413,
            test_memory_checked_at_submit,
            test_not_found_and_methods,
            test_create_get_list_and_filters,
            test_steps_of_a_rank_the_run_lacks,
            test_garbage_is_cut_off_quickly,
            test_slow_head_is_cut_off_but_streams_and_keepalive_live,
            test_experiment_runs_paged,
            test_health_and_schema,
            test_network_profile_stored_and_shown,
            test_static_files_stay_inside_web,
        ])
    finally:
        D.close()


if __name__ == "__main__":
    sys.exit(main())
