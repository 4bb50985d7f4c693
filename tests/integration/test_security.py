#!/usr/bin/env python3
"""Integration tests for the request guard over real HTTP (api/guard.h): what a web page
the researcher happens to open can make a browser send to ddpbenchd, and what a
DNS-rebinding page can read, are refused; non-browser clients pass untouched.

Decision: each attack is sent the way a browser would send it (the headers it sets
itself: Host, Origin, a "simple" Content-Type) with http.client, whose headers are
exactly what the test writes, and each refusal is checked to have stored nothing.
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile

from harness import DAEMON, Daemon, check, run_cases

SPEC = {"workload": "collective", "world_size": 1, "min_bytes": "4K", "max_bytes": "4K",
        "iters": 1, "warmup": 0}


def raw(d, method, path, body=None, headers=()):
    """(status, JSON body or text, headers) with exactly the given headers (Host included
    when named: http.client adds its own only when none is given)."""
    port = d.info["http_port"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    hdrs = dict(headers)
    conn.putrequest(method, path, skip_host="Host" in hdrs, skip_accept_encoding=True)
    for k, v in hdrs.items():
        conn.putheader(k, v)
    data = body.encode() if isinstance(body, str) else body
    if data is not None:
        conn.putheader("Content-Length", str(len(data)))
    conn.endheaders(data)
    r = conn.getresponse()
    payload = r.read()
    conn.close()
    text = payload.decode("utf-8", "replace")
    if r.getheader("Content-Type", "").startswith("application/json"):
        return r.status, json.loads(text), r
    return r.status, text, r


def submit_as_browser(d, origin, ctype="application/json"):
    """POST the spec as a page at origin (None: no Origin header) would make a browser send
    it to the daemon's own address: (status, body, response)."""
    headers = {"Host": f"127.0.0.1:{d.info['http_port']}", "Content-Type": ctype}
    if origin:
        headers["Origin"] = origin
    return raw(d, "POST", "/v1/experiments", json.dumps(SPEC), headers)


def experiment_count(d):
    return len(d.get("/v1/experiments")["items"])


def test_cross_site_simple_post_is_refused_and_stores_nothing():
    d = Daemon(cpu_slots=1)
    try:
        port = d.info["http_port"]
        before = experiment_count(d)
        status, body, _ = submit_as_browser(d, "http://evil.example", "text/plain")
        check(status == 403 and body["error"]["field"] == "Origin", (status, body))
        check("--cors-origin" in body["error"]["message"], body)
        status, body, _ = submit_as_browser(d, None, "text/plain")
        check(status == 415 and body["error"]["code"] == "unsupported_media_type", (status, body))
        check(experiment_count(d) == before, "a refused request stored an experiment")
        # the dashboard's own origin, with JSON, is a normal submit
        status, body, _ = submit_as_browser(d, f"http://127.0.0.1:{port}")
        check(status == 201, (status, body))
        exp_id = body["id"]
        d.wait_experiment(exp_id)
        status, body, _ = raw(d, "DELETE", f"/v1/experiments/{exp_id}", None,
                              {"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example"})
        check(status == 403, (status, body))
        check(d.get(f"/v1/experiments/{exp_id}")["id"] == exp_id, "deleted cross-site")
    finally:
        d.close()


def test_cors_origin_may_mutate():
    d = Daemon(cpu_slots=1, extra_args=["--cors-origin", "http://lab.example:8080"])
    try:
        status, body, r = submit_as_browser(d, "http://lab.example:8080")
        check(status == 201, (status, body))
        check(r.getheader("Access-Control-Allow-Origin") == "http://lab.example:8080", r.getheaders())
        d.wait_experiment(body["id"])
    finally:
        d.close()


def test_rebound_host_cannot_read():
    d = Daemon(cpu_slots=1, extra_args=["--allow-host", "lab.example"])
    try:
        port = d.info["http_port"]
        status, body, _ = raw(d, "GET", "/v1/experiments", None,
                              {"Host": f"attacker.example:{port}"})
        check(status == 403 and body["error"]["field"] == "Host", (status, body))
        status, text, _ = raw(d, "GET", "/", None, {"Host": f"attacker.example:{port}"})
        check(status == 403 and "ddpbench" not in str(text).lower().replace("ddpbenchd", ""),
              (status, text))
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"LAB.example:{port}",
                     f"{d.get('/healthz').get('node', 'localhost')}:{port}"):
            status, _, _ = raw(d, "GET", "/v1/experiments", None, {"Host": host})
            check(status == 200, (host, status))
    finally:
        d.close()


def test_nul_and_bad_utf8_in_paths():
    d = Daemon(cpu_slots=1)
    try:
        exp = d.submit(SPEC)
        d.wait_experiment(exp["id"])
        ok, _, _ = raw(d, "GET", f"/v1/experiments/{exp['id']}", None, {"Host": "127.0.0.1"})
        check(ok == 200, ok)
        for path in (f"/v1/experiments/{exp['id']}%00", "/index.html%00.js",
                     "/v1/experiments/%FF", "/%FF%FE.js", "/v1/runs/1%00/steps"):
            status, body, r = raw(d, "GET", path, None, {"Host": "127.0.0.1"})
            check(status == 404, (path, status, body))
            check(r.getheader("Content-Type", "").startswith("application/json") and
                  body["error"]["code"] == "not_found", (path, body))
        status, body, _ = raw(d, "GET", "/v1/experiments?status=%FF", None, {"Host": "127.0.0.1"})
        check(status == 400 and body["error"]["field"] == "status", (status, body))
    finally:
        d.close()


def test_405_names_allowed_methods():
    d = Daemon(cpu_slots=1)
    try:
        status, body, r = raw(d, "PUT", "/v1/experiments", "{}",
                              {"Host": "127.0.0.1", "Content-Type": "application/json"})
        check(status == 405, (status, body))
        check(r.getheader("Allow") == "GET, POST", r.getheaders())
    finally:
        d.close()


def test_token_scheme_is_case_insensitive_and_curl_json_works():
    token = "0123456789abcdef0123"
    fd, path = tempfile.mkstemp()
    os.write(fd, token.encode())
    os.close(fd)
    d = Daemon(cpu_slots=1, extra_args=["--token-file", path])
    try:
        url = d.url + "/v1/experiments"
        for scheme in ("bearer", "BEARER", "Bearer"):
            r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--json", json.dumps(SPEC),
                                "-H", f"Authorization: {scheme} {token}", url],
                               capture_output=True, text=True, timeout=60)
            body, _, code = r.stdout.rpartition("\n")
            check(code == "201", (scheme, code, body))
            d.wait_experiment(json.loads(body)["id"])
        r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--json", json.dumps(SPEC), url],
                           capture_output=True, text=True, timeout=60)
        check(r.stdout.endswith("401"), r.stdout)
    finally:
        d.close()
        os.unlink(path)


def secret_file(text, mode=0o600):
    fd, path = tempfile.mkstemp(prefix="ddpb-secret-")
    os.write(fd, text.encode())
    os.close(fd)
    os.chmod(path, mode)
    return path


def test_read_token_guards_reads():
    """--read-token (issue 31): every GET of data (the API, /metrics) needs the read or the
    admin token; /healthz and the dashboard stay open; the read token mutates nothing."""
    admin, read = "admin-token-0123456789", "read-token-0123456789"
    paths = [secret_file(admin), secret_file(read)]
    d = Daemon(cpu_slots=1, extra_args=["--token-file", paths[0], "--read-token", paths[1]])
    try:
        for path in ("/v1/experiments", "/v1/nodes", "/metrics", "/v1/vocabulary"):
            status, body, _ = d.request("GET", path)
            check(status == 401 and "--read-token" in body["error"]["message"], (path, status, body))
            for tok in (read, admin):
                status, _, _ = d.request("GET", path, headers={"Authorization": f"Bearer {tok}"})
                check(status == 200, (path, tok, status))
        for path in ("/healthz", "/"):
            status, _, _ = d.request("GET", path)
            check(status == 200, (path, status))
        status, _, _ = d.request("POST", "/v1/experiments", body=SPEC,
                                 headers={"Authorization": f"Bearer {read}"})
        check(status == 401, status)
    finally:
        d.close()
        for p in paths:
            os.unlink(p)


def test_open_token_file_refused():
    """A token file group or others may read is refused at start naming it and its mode
    (issue 31 defect 8; DDPB_TOKEN leaving the environment is test_config's)."""
    path = secret_file("0123456789abcdef0123", 0o644)
    try:
        r = subprocess.run([DAEMON, "--token-file", path, "--port", "0"], capture_output=True,
                           text=True, timeout=30)
        check(r.returncode != 0 and path in r.stderr and "0644" in r.stderr,
              (r.returncode, r.stderr))
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(run_cases([
        test_cross_site_simple_post_is_refused_and_stores_nothing,
        test_cors_origin_may_mutate,
        test_rebound_host_cannot_read,
        test_nul_and_bad_utf8_in_paths,
        test_405_names_allowed_methods,
        test_token_scheme_is_case_insensitive_and_curl_json_works,
        test_read_token_guards_reads,
        test_open_token_file_refused,
    ]))
