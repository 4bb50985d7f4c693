#!/usr/bin/env python3
"""Spec field transport (issue 30) through the REST API: the vocabulary and the schema list
it; a spec that cannot run with it is refused at submit, 400 naming transport (a backend or
engine with transports of its own, a forced TCP algorithm with shm, shm on ranks the spec
places on several nodes); a sweep over it expands to runs that each store their value and
succeed on backend tcp; results group by it (JSON and CSV) like any spec field. ddpbenchd's
--shm-dir must be an existing directory, refused at start naming the option otherwise.

Nothing here needs the worker to move bytes over shared memory: the sweep runs transport auto
and tcp only."""
import os
import shutil
import sys
import tempfile

from harness import Daemon, check, run_cases

D = None
SMALL = {"workload": "collective", "world_size": 2, "min_bytes": "4K", "max_bytes": "8K",
         "iters": 2, "warmup": 0}


def expect_400(spec, field, needle):
    status, body, _ = D.request("POST", "/v1/experiments", body=spec)
    check(status == 400, f"{spec}: status {status}, want 400: {body}")
    err = body["error"]
    check(err["code"] == "invalid" and err.get("field") == field, f"{spec}: {err}")
    check(needle in err["message"], f"{spec}: {needle!r} not in {err['message']!r}")


def test_vocabulary_and_schema_list_transport():
    v = D.get("/v1/vocabulary")
    rows = v["transports"]
    check([t["name"] for t in rows] == ["auto", "shm", "tcp"], rows)
    check(all(t["description"] for t in rows), rows)
    check([(t["shm"], t["tcp"]) for t in rows] == [(True, True), (True, False), (False, True)],
          rows)
    field = D.get("/v1/spec/schema")["properties"]["transport"]
    check(field["enum"] == ["auto", "shm", "tcp"] and field["default"] == "auto", field)
    check("backend" in field["description"], field)


def test_refused_specs_name_transport():
    cuda = {"device": "cuda", "backend": "nccl"}
    mpi = {"backend": "mpi", "launcher": "mpirun"}
    cases = [
        (dict(SMALL, transport="udp"), "transport", "got \"udp\""),
        (dict(SMALL, transport="shm", **cuda), "transport",
         'backend "nccl" has no transport "shm"'),
        (dict(SMALL, transport="tcp", **cuda), "transport",
         'backend "nccl" has no transport "tcp"'),
        (dict(SMALL, transport="shm", **mpi), "transport", 'backend "mpi" has no transport'),
        (dict(SMALL, transport="shm", algorithm="ring"), "transport",
         'algorithm "ring" has no transport "shm"'),
        ({"workload": "train", "engine": "pytorch", "transport": "shm"}, "transport",
         'engine "pytorch" has no transport "shm"'),
        (dict(SMALL, world_size=4, nodes=2, transport="shm"), "transport",
         "place the ranks on 2 nodes"),
        (dict(SMALL, world_size=4, ranks_per_node=1, transport="shm"), "transport",
         "place the ranks on 4 nodes"),
        (dict(SMALL, world_size=4, nodes=2, sweep={"transport": ["auto", "shm"]}), "sweep",
         'sweep point 2 of 2 {"transport":"shm"}'),
    ]
    before = D.get("/v1/experiments?limit=1")["total"]
    for spec, field, needle in cases:
        expect_400(spec, field, needle)
    check(D.get("/v1/experiments?limit=1")["total"] == before, "a refused spec stored something")


def test_sweep_stores_transport_and_groups_by_it():
    spec = dict(SMALL, name="transports", sweep={"transport": ["auto", "tcp"]})
    exp = D.run_experiment(spec, timeout=120)
    check(exp["status"] == "succeeded", exp)
    runs = exp["runs"]
    check([r["params"] for r in runs] == [{"transport": "auto"}, {"transport": "tcp"}], runs)
    for r, want in zip(runs, ("auto", "tcp")):
        run = D.get(f"/v1/runs/{r['id']}")
        check(run["spec"]["transport"] == want, run["spec"])
    # the default grouping is the swept fields; group_by=transport asks for it by name
    for query in ("", "?group_by=transport", "?group_by=transport,world_size"):
        table = D.get(f"/v1/experiments/{exp['id']}/results{query}")
        check(table["group_by"][0] == "transport", table["group_by"])
        check("transport" in table["columns"], table["columns"])
        check({row["transport"] for row in table["rows"]} == {"auto", "tcp"}, table["rows"])
        check(all(row["wrong"] == 0 for row in table["rows"]), table["rows"])
    status, csv, _ = D.request("GET",
                               f"/v1/experiments/{exp['id']}/results?group_by=transport&format=csv")
    lines = csv.splitlines()
    col = lines[0].split(",").index("transport")
    check(status == 200 and {line.split(",")[col] for line in lines[1:]} == {"auto", "tcp"}, csv)
    # an unswept spec stores the default, and group_by reads it there too
    one = D.run_experiment(dict(SMALL, name="default-transport"), timeout=120)
    check(one["status"] == "succeeded", one)
    check(D.get(f"/v1/runs/{one['runs'][0]['id']}")["spec"]["transport"] == "auto", one)
    rows = D.get(f"/v1/experiments/{one['id']}/results?group_by=transport")["rows"]
    check(rows and all(row["transport"] == "auto" for row in rows), rows)


def test_shm_dir_checked_at_start():
    state = tempfile.mkdtemp(prefix="ddpb-it-")
    shm = tempfile.mkdtemp(prefix="ddpb-shm-")
    try:
        for bad, why in ((os.path.join(shm, "missing"), "No such file"),
                         ("/etc/passwd", "not a directory")):
            try:
                Daemon(state_dir=state, extra_args=["--shm-dir", bad]).close()
                raise AssertionError(f"--shm-dir {bad} was accepted")
            except RuntimeError as err:
                check("--shm-dir" in str(err) and why in str(err), err)
        d = Daemon(cpu_slots=2, extra_args=["--shm-dir", shm])
        try:
            exp = d.run_experiment(dict(SMALL, name="shm-dir", transport="tcp"), timeout=120)
            check(exp["status"] == "succeeded", exp)
        finally:
            d.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


def main():
    global D
    D = Daemon(cpu_slots=2)
    try:
        return run_cases([
            test_vocabulary_and_schema_list_transport,
            test_refused_specs_name_transport,
            test_sweep_stores_transport_and_groups_by_it,
            test_shm_dir_checked_at_start,
        ])
    finally:
        D.close()


if __name__ == "__main__":
    sys.exit(main())
