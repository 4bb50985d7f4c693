#!/usr/bin/env python3
"""Integration tests for what deploy/ ships beside the source tree: `ninja install`
into a staging root gives a daemon that runs from its installed files alone (dashboard
and example specs from PREFIX/share/ddpbench, the worker beside the daemon), and
deploy/systemd/'s units (one node; a cluster's leader and follower) pass systemd's own
checker against that install.

Decision: installed with DESTDIR into a temporary root, never into the machine's /usr,
so the test leaves the system as it found it; the unit is checked with its ExecStart
pointed at the staged binary, the only line that depends on where the root is.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness import BUILD, SOURCE, Daemon, check, run_cases

STAGE = tempfile.mkdtemp(prefix="ddpb-install-")
PREFIX = "/usr/local"  # meson's default prefix, and the unit's paths


def staged(*parts):
    return os.path.join(STAGE + PREFIX, *parts)


def test_install_stages_programs_dashboard_examples_docs():
    p = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet",
                        "--destdir", STAGE], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"meson install failed: {p.stdout}{p.stderr}")
    for rel in ("bin/ddpbenchd", "bin/ddpbench-worker", "bin/ddpbench", "bin/ddpbench-data"):
        check(os.access(staged(rel), os.X_OK), f"{rel} not installed executable")
    for rel in ("share/ddpbench/web/index.html", "share/ddpbench/schema/examples/allreduce-cpu.json",
                "share/doc/ddpbench/README.md", "share/doc/ddpbench/LICENSE"):
        check(os.path.isfile(staged(rel)), f"{rel} not installed")
    # the worker's modules (the GPU ones in a CUDA build) in libdir/ddpbench, where an
    # installed worker looks for them (worker/module/module.h)
    for m in ("ddpb_train.so", "ddpb_cuda.so", "ddpb_comm_nccl.so"):
        if os.path.exists(os.path.join(BUILD, "worker", m)):
            found = [os.path.join(d, m) for d, _, files in os.walk(staged())
                     if os.path.basename(d) == "ddpbench" and m in files]
            check(found, f"{m} not installed in libdir/ddpbench")


def test_installed_daemon_runs_from_its_own_files():
    d = Daemon(binary=staged("bin", "ddpbenchd"),
               extra_args=["--web-dir", staged("share", "ddpbench", "web")])
    try:
        status, page, _ = d.request("GET", "/")
        check(status == 200 and "<html" in page.lower(), f"dashboard: {status}")
        names = [e["name"] for e in d.get("/v1/examples")["items"]]
        check("allreduce-cpu.json" in names or "allreduce-cpu" in names,
              f"examples not served from the install: {names}")
        exp = d.submit({"workload": "collective", "world_size": 1, "min_bytes": "4K",
                        "max_bytes": "8K", "iters": 2, "warmup": 1})
        done = d.wait_experiment(exp["id"], timeout=60)
        check(done["status"] == "succeeded", f"installed worker run: {done}")
    finally:
        d.close()


def test_systemd_units_verify_against_the_install():
    """The single-node unit and the cluster's leader and follower units."""
    tool = shutil.which("systemd-analyze")
    check(tool is not None, "systemd-analyze missing: deploy/install-deps.sh installs systemd")
    for name in ("ddpbenchd.service", "ddpbenchd-leader.service", "ddpbenchd-follower.service"):
        with open(os.path.join(SOURCE, "deploy", "systemd", name)) as f:
            unit = f.read()
        check(PREFIX + "/bin/ddpbenchd" in unit, f"{name} does not start the installed daemon")
        path = os.path.join(STAGE, name)
        with open(path, "w") as f:  # the Assert/EnvironmentFile paths are checked at start only
            f.write(unit.replace(PREFIX + "/bin/ddpbenchd", staged("bin", "ddpbenchd")))
        p = subprocess.run([tool, "verify", path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and not p.stderr.strip(),
              f"systemd-analyze verify {name}: rc {p.returncode}: {p.stderr}")
    with open(os.path.join(SOURCE, "deploy", "systemd", "ddpbenchd-follower.service")) as f:
        follower = f.read()
    check("--join ${DDPB_LEADER}" in follower and "KillMode=mixed" in follower,
          "the follower joins its leader and drains on stop")


def test_k8s_manifests_are_consistent():
    """deploy/k8s: every document parses and names its kind; workloads' selectors match
    their pod labels, every mount has its volume, every $(VAR) in args is set in env, every
    --flag is one the built ddpbenchd accepts, and the Service selects the leader's pods.
    Every pod runs as a non-root user, the image's own (the Dockerfile's USER)."""
    import yaml
    helptext = subprocess.run([os.path.join(BUILD, "daemon", "ddpbenchd"), "--help"],
                              capture_output=True, text=True, timeout=30).stdout
    flags = set(re.findall(r"--([a-z-]+)", helptext))
    docs = []
    k8s = os.path.join(SOURCE, "deploy", "k8s")
    for name in sorted(os.listdir(k8s)):
        if name.endswith(".yaml"):
            with open(os.path.join(k8s, name)) as f:
                docs += [(name, d) for d in yaml.safe_load_all(f) if d]
    kinds = {d["kind"] for _, d in docs}
    check({"Namespace", "Deployment", "DaemonSet", "Service"} <= kinds, kinds)
    pods = {}
    for name, d in docs:
        check(d.get("apiVersion") and d["metadata"].get("name"), f"{name}: apiVersion, name")
        if d["kind"] != "Namespace":
            check(d["metadata"].get("namespace") == "ddpbench", f"{name}: namespace")
        if d["kind"] in ("Deployment", "DaemonSet"):
            tpl = d["spec"]["template"]
            labels = tpl["metadata"]["labels"]
            sel = d["spec"]["selector"]["matchLabels"]
            check(sel.items() <= labels.items(), f"{name}: selector {sel} vs labels {labels}")
            pods[d["metadata"]["name"]] = labels
            sec = tpl["spec"].get("securityContext", {})
            check(sec.get("runAsNonRoot") is True and sec.get("runAsUser", 0) != 0,
                  f"{name}: pods must run as non-root: {sec}")
            with open(os.path.join(k8s, "Dockerfile")) as f:
                users = re.findall(r"^USER (\d+)", f.read(), re.M)
            check(users and users[-1] == str(sec["runAsUser"]),
                  f"{name}: the image's USER {users} is not runAsUser {sec['runAsUser']}")
            vols = {v["name"] for v in tpl["spec"].get("volumes", [])}
            for c in tpl["spec"]["containers"]:
                check(c.get("image") and c.get("command"), f"{name}: image and command")
                mounts = {m["name"] for m in c.get("volumeMounts", [])}
                check(mounts <= vols, f"{name}: mounts {mounts - vols} have no volume")
                env = {e["name"] for e in c.get("env", [])}
                for a in c.get("args", []):
                    for var in re.findall(r"\$\((\w+)\)", a):
                        check(var in env, f"{name}: $({var}) not in env")
                    if a.startswith("--"):
                        check(a[2:] in flags, f"{name}: ddpbenchd has no {a}")
    svc = [d for _, d in docs if d["kind"] == "Service"][0]
    check(svc["spec"]["selector"].items() <= pods["ddpbench-leader"].items(),
          "the Service selects the leader")
    follower = [d for _, d in docs if d["kind"] == "DaemonSet"][0]
    args = follower["spec"]["template"]["spec"]["containers"][0]["args"]
    join = args[args.index("--join") + 1]
    check(svc["metadata"]["name"] in join, f"followers join the Service: {join}")


if __name__ == "__main__":
    try:
        rc = run_cases([test_install_stages_programs_dashboard_examples_docs,
                        test_installed_daemon_runs_from_its_own_files,
                        test_systemd_units_verify_against_the_install,
                        test_k8s_manifests_are_consistent])
    finally:
        shutil.rmtree(STAGE, ignore_errors=True)
    sys.exit(rc)
