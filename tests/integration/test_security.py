#!/usr/bin/env python3
"""Integration tests for the request guard over real HTTP (api/guard.h): what a web page
the researcher happens to open can make a browser send to ddpbenchd, and what a
DNS-rebinding page can read, are refused; non-browser clients pass untouched. And the files
a spec may make the workers read (issue 31): dataset.path only beneath --data-dir, one
answer for missing and forbidden, a FIFO failing the run at once, control characters in a
logged path escaped, the script engine's one answer for missing and outside, its
--scripts-dir refused when others may write it, its execve failure an error event.

Decision: each attack is sent the way a browser would send it (the headers it sets
itself: Host, Origin, a "simple" Content-Type) with http.client, whose headers are
exactly what the test writes, and each refusal is checked to have stored nothing.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import DAEMON, Daemon, Skip, check, run_cases

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


TEXT = {"workload": "train", "model": "gpt2-tiny", "seq_len": 32, "batch_size": 4,
        "steps": 2, "warmup_steps": 1, "trace_steps": 0}


def text_spec(path):
    return dict(TEXT, dataset={"name": "text", "path": path, "samples": 16})


def test_dataset_path_beneath_data_dirs_only():
    """/etc/shadow, /proc, "..", a symlink out of the data folder and a missing file get the
    same 400 naming dataset.path (the path aside), and the default --data-dir (state/data)
    takes a file; a FIFO inside fails its run at once, naming it, instead of blocking."""
    d = Daemon(cpu_slots=1)
    try:
        data = os.path.join(d.state_dir, "data")
        os.makedirs(data, exist_ok=True)  # the daemon makes it (test_config checks that)
        os.symlink("/etc/passwd", os.path.join(data, "passwd"))
        bad = ["/etc/shadow", "/etc/passwd", "/proc/self/environ",
               os.path.join(data, "..", "ddpbench.db"), os.path.join(data, "passwd"),
               os.path.join(data, "missing.txt")]
        answers = set()
        for path in bad:
            status, body, _ = d.request("POST", "/v1/experiments", text_spec(path))
            check(status == 400 and body["error"]["field"] == "dataset.path", (path, body))
            msg = body["error"]["message"]
            check("not found or not allowed" in msg and path in msg, msg)
            answers.add(msg.replace(path, "PATH"))
        check(len(answers) == 1, answers)  # no oracle: one answer whatever the reason
        check(experiment_count(d) == 0, "a refused spec was stored")
        with open(os.path.join(data, "corpus.txt"), "w") as f:
            f.write("a small corpus of text to train a tiny model on. " * 40)
        d.run_succeeds(text_spec(os.path.join(data, "corpus.txt")), timeout=120)
        fifo = os.path.join(data, "fifo.txt")
        os.mkfifo(fifo)
        t0 = time.time()
        d.run_fails(text_spec(fifo), "not a regular file", timeout=60)
        check(time.time() - t0 < 30, f"a FIFO held the run {time.time() - t0:.0f} s")
    finally:
        d.close()


def test_control_characters_in_a_path_are_logged_escaped():
    """A dataset file named with a newline and a terminal escape: the run's failure, which
    the daemon logs with the path, is one line with them as \\xNN."""
    d = Daemon(cpu_slots=1)
    try:
        name = "evil\n00:00:00.000 E ddpbenchd forged.c:1 forged\x1b[2J.txt"
        os.makedirs(os.path.join(d.state_dir, "data"), exist_ok=True)
        fifo = os.path.join(d.state_dir, "data", name)
        os.mkfifo(fifo)
        d.run_fails(text_spec(fifo), "not a regular file", timeout=60)
        log = d.daemon_log()
        check("\x1b" not in log and "\nforged" not in log and
              not any(line.startswith("00:00:00.000 E") for line in log.splitlines()), log)
        check("evil\\x0a00:00:00.000 E ddpbenchd forged.c:1 forged\\x1b[2J.txt" in log, log)
    finally:
        d.close()


def test_script_engine_answers_and_scripts_dir():
    """engine script: a missing script and one outside --scripts-dir get one answer; a
    --scripts-dir writable by group or others stops the daemon at start; a script the
    kernel cannot execute fails its run with the bootstrap's error event, no traceback."""
    allowed = tempfile.mkdtemp(prefix="ddpb-scripts-")
    with open(os.path.join(os.path.dirname(allowed), "outside-ddpb.py"), "w") as f:
        f.write("print('must not run')\n")
    with open(os.path.join(allowed, "run.sh"), "w") as f:  # not executable
        f.write("#!/bin/sh\nexit 0\n")
    d = Daemon(cpu_slots=1, extra_args=["--scripts-dir", allowed])
    spec = {"workload": "train", "model": "mnist-cnn", "batch_size": 8, "steps": 2,
            "warmup_steps": 1, "engine": "script"}
    try:
        answers = set()
        for script in ("../outside-ddpb.py", "nothere.py"):
            status, body, _ = d.request("POST", "/v1/experiments", dict(spec, script=script))
            check(status == 400 and body["error"]["field"] == "script", (script, body))
            answers.add(body["error"]["message"].replace(script, "S"))
        check(len(answers) == 1 and "not found or not allowed" in answers.pop(), answers)
        run = d.run_fails(dict(spec, script="run.sh"), "cannot execute run.sh", timeout=60)
        check("Traceback" not in (run["error"] or ""), run)
    finally:
        d.close()
        os.unlink(os.path.join(os.path.dirname(allowed), "outside-ddpb.py"))
    os.chmod(allowed, 0o777)
    r = subprocess.run([DAEMON, "--port", "0", "--store-port", "0", "--state-dir",
                        tempfile.mkdtemp(prefix="ddpb-it-"), "--scripts-dir", allowed],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "writable by group or others" in r.stderr, (r.returncode,
                                                                          r.stderr))
    shutil.rmtree(allowed, ignore_errors=True)


def test_python_engines_read_datasets_guarded():
    """engines/ddpb_data.py, which the framework engines load MNIST and CIFAR with: a gzip
    inflating past the cap is refused while streaming, a FIFO fails at once (the alarm
    fails the test if it blocks), a symlinked file is not followed, and with
    DDPB_DATA_DIRS a file outside reads as not found or not allowed."""
    import gzip
    import signal
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "engines"))
    try:
        import ddpb_data
    except ImportError as ex:  # numpy comes with the engines (install-deps.sh --engines)
        raise Skip(f"engines/ddpb_data.py needs {ex.name}: install-deps.sh --engines")
    tmp = tempfile.mkdtemp(prefix="ddpb-pydata-")
    old = os.environ.pop("DDPB_DATA_DIRS", None)
    try:
        bomb = os.path.join(tmp, "bomb.gz")
        with gzip.open(bomb, "wb") as g:
            for _ in range(4):
                g.write(bytes(1 << 20))
        with open(bomb, "rb") as f:
            try:
                ddpb_data._gunzip_capped(f, bomb, cap=1 << 20)
                check(False, "a gzip past its cap was inflated")
            except ValueError as ex:
                check("more than 1048576 bytes" in str(ex), ex)
        check(ddpb_data.GZ_MAX_BYTES <= 256 << 20, ddpb_data.GZ_MAX_BYTES)
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        signal.signal(signal.SIGALRM, signal.default_int_handler)
        signal.alarm(10)
        try:
            ddpb_data._read_maybe_gz(fifo)
            check(False, "a FIFO was read")
        except ValueError as ex:
            check("not a regular file" in str(ex), ex)
        finally:
            signal.alarm(0)
        os.symlink("/etc/passwd", os.path.join(tmp, "link"))
        inside = os.path.join(tmp, "ok")
        with open(inside, "wb") as f:
            f.write(b"bytes")
        os.environ["DDPB_DATA_DIRS"] = os.path.realpath(tmp)
        check(ddpb_data._read_maybe_gz(inside) == b"bytes", "a file inside")
        for path in (os.path.join(tmp, "link"), "/etc/passwd", os.path.join(tmp, "none")):
            try:
                ddpb_data._read_maybe_gz(path)
                check(False, f"{path} was read")
            except FileNotFoundError as ex:
                check("not found or not allowed" in str(ex), ex)
    finally:
        os.environ.pop("DDPB_DATA_DIRS", None)
        if old is not None:
            os.environ["DDPB_DATA_DIRS"] = old
        shutil.rmtree(tmp, ignore_errors=True)


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


        test_dataset_path_beneath_data_dirs_only,
        test_control_characters_in_a_path_are_logged_escaped,
        test_script_engine_answers_and_scripts_dir,
        test_python_engines_read_datasets_guarded,
    ]))
