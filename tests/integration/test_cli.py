#!/usr/bin/env python3
"""The `ddpbench` command-line client against the real daemon: submit --watch to the end
and its results table, ls, show, runs, export (CSV byte for byte as the API sends it, and
JSON), compare, cancel (from the CLI, and from elsewhere under a watching CLI), rm, every
--json output parsing as JSON, and the exit statuses scripts rely on: 0 success, 1 the
experiment ended cancelled/failed, 2 usage, 3 the daemon refused (4xx: message and field
on stderr), 4 unreachable; a daemon with a token refuses the CLI without it."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import BUILD, Daemon, check, run_cases

CLI = os.path.join(BUILD, "cli", "ddpbench")
SMALL = {"name": "cli-small", "workload": "collective", "min_bytes": "4K", "max_bytes": "64K",
         "factor": 4, "iters": 5, "warmup": 1, "repeats": 3, "sweep": {"world_size": [1, 2]}}
LONG = {"name": "cli-long", "workload": "collective", "world_size": 1, "min_bytes": "16M",
        "max_bytes": "16M", "iters": 5000, "warmup": 0, "timeout_s": 300}
TMP = tempfile.mkdtemp(prefix="ddpb-cli-")


def spec_file(spec, name):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def env_without_ddpb(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPB_")}
    env.update(extra)
    return env


def cli(url, *args, env=None, timeout=120, stdin=None):
    """Runs the CLI; returns the CompletedProcess (text)."""
    argv = [CLI] + (["--url", url] if url else []) + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin,
                          env=env or env_without_ddpb())


def ok(r, what):
    check(r.returncode == 0, f"{what}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def raw_get(url):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()


def wait_running(d, exp_id, timeout=60):
    """The first run of exp_id once all its ranks are up."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        exp = d.get(f"/v1/experiments/{exp_id}")
        run = exp["runs"][0]
        if run["status"] == "running":
            return run["id"]
        time.sleep(0.05)
    raise AssertionError(f"experiment {exp_id} never ran: {d.daemon_log()}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_submit_watch_then_read_commands():
    d = Daemon(cpu_slots=2)
    try:
        r = ok(cli(d.url, "submit", spec_file(SMALL, "small.json"), "--watch"), "submit --watch")
        m = re.search(r"experiment (\d+) submitted: 2 runs", r.stdout)
        check(m, r.stdout)
        a = int(m.group(1))
        check(re.search(rf"experiment {a} succeeded: 2/2 runs finished", r.stdout), r.stdout)
        check("busbw GB/s" in r.stdout and "world_size" in r.stdout and "64K" in r.stdout, r.stdout)
        check("\r" not in r.stdout and "\033" not in r.stdout, "no terminal codes in a pipe")
        check(d.get(f"/v1/experiments/{a}")["status"] == "succeeded", "stored as succeeded")

        # without --watch: the id alone on stdout (spec from stdin), for scripts
        r = ok(cli(d.url, "submit", "-", stdin=json.dumps(dict(SMALL, name="cli-second"))),
               "submit -")
        check(re.fullmatch(r"\d+\n", r.stdout), repr(r.stdout))
        b = int(r.stdout)
        d.wait_experiment(b)

        r = ok(cli(d.url, "ls"), "ls")
        check(re.search(rf"^\s*{a}\s+cli-small\s+collective\s+succeeded\s+2/2", r.stdout, re.M), r.stdout)
        check(re.search(rf"^\s*{b}\s+cli-second", r.stdout, re.M), r.stdout)
        page = json.loads(ok(cli(d.url, "ls", "--name", "second", "--json"), "ls --json").stdout)
        check([x["id"] for x in page["items"]] == [b] and page["total"] == 1, page)
        r = ok(cli(d.url, "ls", "--limit", "1"), "ls --limit")
        check("of 2 (--offset 1 for more)" in r.stdout, r.stdout)

        r = ok(cli(d.url, "show", str(a)), "show")
        exp = d.get(f"/v1/experiments/{a}")
        for run in exp["runs"]:
            check(re.search(rf"^\s*{run['id']}\s+\d+\s+world_size={run['world_size']}\s+"
                            rf"{run['world_size']}\s+succeeded\s+100.0%", r.stdout, re.M), r.stdout)
        check("results grouped by [\"world_size\"]" in r.stdout and " +- " in r.stdout, r.stdout)
        shown = json.loads(ok(cli(d.url, "show", str(a), "--json"), "show --json").stdout)
        check(shown["experiment"]["id"] == a and shown["results"]["rows"], shown.keys())

        csv_api = raw_get(f"{d.url}/v1/experiments/{a}/results?format=csv")
        r = subprocess.run([CLI, "--url", d.url, "export", str(a), "--csv"], capture_output=True,
                           env=env_without_ddpb())
        check(r.returncode == 0 and r.stdout == csv_api, "export --csv is the API's CSV byte for byte")
        out = os.path.join(TMP, "a.csv")
        ok(cli(d.url, "export", str(a), "--csv", "-o", out), "export -o")
        with open(out, "rb") as f:
            check(f.read() == csv_api, "export -o writes the same bytes")
        grouped = raw_get(f"{d.url}/v1/experiments/{a}/results?group_by=op&format=csv")
        r = subprocess.run([CLI, "--url", d.url, "export", str(a), "--csv", "--group-by", "op"],
                           capture_output=True, env=env_without_ddpb())
        check(r.stdout == grouped, "group_by passed through")
        table = json.loads(ok(cli(d.url, "export", str(a), "--json"), "export --json").stdout)
        check(table == d.get(f"/v1/experiments/{a}/results"), "export --json is the API's table")

        r = ok(cli(d.url, "compare", str(a), str(b)), "compare")
        check(f"#{a}  cli-small" in r.stdout and f"#{b}  cli-second" in r.stdout, r.stdout)
        check(f"vs #{a}" in r.stdout and "busbw GB/s" in r.stdout, r.stdout)
        rows = [ln for ln in r.stdout.splitlines() if re.match(rf"^\s*({a}|{b})\s+\d", ln)]
        check(len(rows) == 2 * len(table["rows"]), r.stdout)
        tables = json.loads(ok(cli(d.url, "compare", str(a), str(b), "--json"), "compare --json").stdout)
        check([t["experiment"] for t in tables] == [a, b], tables)

        run_id = exp["runs"][1]["id"]
        r = ok(cli(d.url, "runs", str(run_id)), "runs")
        check(f"run {run_id}  experiment {a}" in r.stdout and "allreduce" in r.stdout, r.stdout)
        check(re.search(r"^\s*1\s+\S+.*done", r.stdout, re.M) and "environment" in r.stdout, r.stdout)
        run = json.loads(ok(cli(d.url, "runs", str(run_id), "--json"), "runs --json").stdout)
        check(run["id"] == run_id and len(run["collectives"]) == 9, run)

        created = json.loads(ok(cli(d.url, "--json", "submit", spec_file(dict(SMALL, name="j"), "j.json")),
                                "submit --json").stdout)
        check(created["id"] > b and len(created["runs"]) == 2, created)
        d.wait_experiment(created["id"])

        r = ok(cli(d.url, "rm", str(b)), "rm")
        check(f"deleted experiment {b} (2 runs)" in r.stdout, r.stdout)
        status, _, _ = d.request("GET", f"/v1/experiments/{b}")
        check(status == 404, status)
        r = cli(d.url, "show", str(b))
        check(r.returncode == 3 and "404 not_found" in r.stderr, (r.returncode, r.stderr))
        gone = json.loads(ok(cli(d.url, "--json", "rm", str(created["id"])), "rm --json").stdout)
        check(gone["deleted"] == created["id"], gone)
    finally:
        d.close()


def test_cancel_from_cli_and_from_elsewhere():
    d = Daemon(cpu_slots=2)
    try:
        long_path = spec_file(LONG, "long.json")
        exp_id = int(ok(cli(d.url, "submit", long_path), "submit long").stdout)
        wait_running(d, exp_id)
        r = ok(cli(d.url, "cancel", str(exp_id)), "cancel")
        check(f"experiment {exp_id}: cancel requested" in r.stdout, r.stdout)
        check(d.wait_experiment(exp_id, timeout=30)["status"] == "cancelled", "ends cancelled")
        r = cli(d.url, "cancel", str(exp_id))  # nothing left to cancel: 409
        check(r.returncode == 3 and "409 conflict" in r.stderr, (r.returncode, r.stderr))

        # a watching CLI whose experiment is cancelled by someone else exits 1
        p = subprocess.Popen([CLI, "--url", d.url, "submit", long_path, "--watch"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env_without_ddpb())
        try:
            first = p.stdout.readline()
            m = re.match(r"experiment (\d+) submitted", first)
            check(m, first)
            watched = int(m.group(1))
            wait_running(d, watched)
            status, body, _ = d.request("POST", f"/v1/experiments/{watched}/cancel")
            check(status == 202, (status, body))
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        check(p.returncode == 1, f"exit {p.returncode}: {out} {err}")
        check(re.search(rf"experiment {watched} cancelled", out), out)

        # one run, waiting until it has stopped
        exp_id = int(ok(cli(d.url, "submit", long_path), "submit long").stdout)
        run_id = wait_running(d, exp_id)
        r = ok(cli(d.url, "cancel", "--run", str(run_id), "--wait"), "cancel --run --wait")
        check(f"run {run_id} cancelled" in r.stdout, r.stdout)
        check(d.get(f"/v1/runs/{run_id}")["status"] == "cancelled", "run cancelled")
        ok(cli(d.url, "rm", str(exp_id)), "rm after cancel")
    finally:
        d.close()


def test_exit_statuses_for_mistakes():
    d = Daemon(cpu_slots=2)
    try:
        r = cli(d.url, "submit", spec_file({"workload": "collective", "world_size": 0}, "bad.json"))
        check(r.returncode == 3, (r.returncode, r.stderr))
        check("400 invalid (field world_size)" in r.stderr, r.stderr)
        r = cli(d.url, "submit", "-", stdin="{not json")
        check(r.returncode == 3 and "400 invalid" in r.stderr, (r.returncode, r.stderr))
        r = cli(d.url, "ls", "--status", "bogus")
        check(r.returncode == 3 and "field status" in r.stderr, (r.returncode, r.stderr))
        r = cli(d.url, "show", "987654")
        check(r.returncode == 3 and "404" in r.stderr, (r.returncode, r.stderr))
        for args in (["ls", "--bogus"], [], ["show"], ["export", "1"], ["frob"]):
            r = cli(d.url, *args)
            check(r.returncode == 2 and "ddpbench --help" in r.stderr, (args, r.returncode, r.stderr))
        r = cli(d.url, "submit", os.path.join(TMP, "missing.json"))
        check(r.returncode == 2 and "cannot open" in r.stderr, (r.returncode, r.stderr))
        r = ok(cli(None, "--help"), "--help")
        check("Exit status" in r.stdout, r.stdout)
        # nothing listening: 4, quickly; DDPB_URL is the default URL
        dead = f"http://127.0.0.1:{free_port()}"
        t0 = time.time()
        r = cli(dead, "ls")
        check(r.returncode == 4 and "cannot reach" in r.stderr, (r.returncode, r.stderr))
        r = cli(None, "show", "1", env=env_without_ddpb(DDPB_URL=dead))
        check(r.returncode == 4 and dead in r.stderr, (r.returncode, r.stderr))
        r = cli(dead, "submit", spec_file(SMALL, "small2.json"), "--watch")
        check(r.returncode == 4, (r.returncode, r.stderr))
        check(time.time() - t0 < 15, "unreachable fails fast")
    finally:
        d.close()


def test_token_required_for_mutations():
    token = "cli-token-0123456789abcdef"
    tokfile = os.path.join(TMP, "token")
    with open(tokfile, "w") as f:
        f.write(token + "\n")
    os.chmod(tokfile, 0o600)  # a secret file only its owner reads (else refused at start)
    d = Daemon(cpu_slots=2, extra_args=["--token-file", tokfile])
    try:
        path = spec_file(dict(SMALL, sweep={"world_size": [1]}), "tok.json")
        r = cli(d.url, "submit", path)
        check(r.returncode == 3 and "401 unauthorized" in r.stderr, (r.returncode, r.stderr))
        r = cli(d.url, "--token", "wrong-token-0123456789", "submit", path)
        check(r.returncode == 3, (r.returncode, r.stderr))
        exp_id = int(ok(cli(d.url, "--token-file", tokfile, "submit", path), "with --token-file").stdout)
        ok(cli(d.url, "ls"), "reads need no token")
        d.wait_experiment(exp_id)
        r = cli(d.url, "rm", str(exp_id))
        check(r.returncode == 3 and "401" in r.stderr, (r.returncode, r.stderr))
        ok(cli(d.url, "rm", str(exp_id), env=env_without_ddpb(DDPB_TOKEN=token)), "DDPB_TOKEN")
    finally:
        d.close()


if __name__ == "__main__":
    try:
        rc = run_cases([
            test_submit_watch_then_read_commands,
            test_cancel_from_cli_and_from_elsewhere,
            test_exit_statuses_for_mistakes,
            test_token_required_for_mutations,
        ])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
