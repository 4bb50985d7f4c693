#!/usr/bin/env python3
"""The report as a reader gets it (issue 35 item 7): two small strategy sweeps (ddp, naive,
horovod, zero1 at world sizes 1 and 2), predicted over a small collective sweep's fits,
joined by GET /v1/experiments/{a}/report?with={b}, printed to PDF by headless Chromium and
read back page by page with pdftotext:
- the summary exists and comes first, before the findings and every results section;
- the findings are labelled: a heading naming each experiment, topic headings (Scaling,
  Model agreement), and each experiment's results section after them; the appendix last;
- no page is empty, none holds only headings, and none ends on a heading (a heading is
  kept with what follows it);
- no finding ranks strategies at world size 1 (the same computation there);
- every number of the summary and findings is written by the one rule: at most three
  significant digits (integers whole), no share below 0.01 % written out;
- the results rows carry pred_verdict by its definition (contract 2: within_noise when the
  measured step's CI is as wide as the error, else hit within 15 %, else miss).
REPORT_PDF_KEEP=dir keeps the HTML, the PDF and the page texts there, to look at."""
import html as htmllib
import os
import re
import shutil
import subprocess
import tempfile

from harness import Daemon, check, run_cases

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
COLL = {"name": "fits", "workload": "collective", "world_size": 2, "min_bytes": "4K",
        "max_bytes": "1M", "factor": 4, "iters": 4, "warmup": 1,
        "sweep": {"op": ["allreduce", "reduce_scatter", "all_gather"]}}
TRAIN = {"workload": "train", "model": "mnist-cnn", "batch_size": 16, "steps": 8,
         "warmup_steps": 2, "trace_steps": 0, "eval": False, "dataset": {"samples": 256}}
SWEEP = {"strategy": ["ddp", "naive", "horovod", "zero1"], "world_size": [1, 2]}


def pdf_pages(pdf):
    """The text of each page of pdf, as pdftotext -layout reads it."""
    info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True).stdout
    n = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
    return [subprocess.run(["pdftotext", "-layout", "-f", str(p), "-l", str(p), pdf, "-"],
                           capture_output=True, text=True, check=True).stdout
            for p in range(1, n + 1)]


def headings(page_html):
    """The text of every h1..h4 of the page, whitespace folded."""
    return [re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", "", h))).strip()
            for h in re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", page_html, re.S)]


def fold(s):
    return re.sub(r"\s+", " ", s).strip()


def check_verdicts(rows):
    judged = 0
    for r in rows:
        if r["pred_step_ms"] is None or r["step_ms_ci95"] is None:
            check(r["pred_verdict"] is None, r)
            continue
        err = abs(r["pred_step_err"])
        noise = r["step_ms_ci95"] / r["step_ms_mean"]
        want = "within_noise" if noise >= err else "hit" if err <= 0.15 else "miss"
        check(r["pred_verdict"] == want, (r["strategy"], r["world_size"], err, noise,
                                          r["pred_verdict"]))
        judged += 1
    check(judged >= 4, f"{judged} rows judged")


def check_numbers(text):
    """Every decimal of text has at most three significant digits; no sliver of a share."""
    for m in re.finditer(r"(?<![\w.])(\d+)\.(\d+)(?![\w.])", text):
        whole, frac = m.group(1), m.group(2)
        digits = (whole.lstrip("0") + frac) if whole.strip("0") else frac.lstrip("0")
        check(len(digits) <= 3, f"{m.group(0)} has more than three significant digits: "
                                f"...{text[max(0, m.start() - 60):m.end() + 20]}...")
    check(not re.search(r"\b0\.00\d*\s*%", text), "a share under 0.01 % written out")


def test_report_prints_as_a_paper_section():
    d = Daemon(cpu_slots=2)
    keep = os.environ.get("REPORT_PDF_KEEP")
    try:
        coll = d.run_experiment(COLL, timeout=120)
        check(coll["status"] == "succeeded", coll["status"])
        a = d.run_experiment(dict(TRAIN, name="sweep A", sweep=SWEEP), timeout=300)
        b = d.run_experiment(dict(TRAIN, name="sweep B", repeats=2, batch_size=32,
                                  sweep={"strategy": ["ddp", "zero1"], "world_size": [1, 2]}),
                             timeout=300)
        check(a["status"] == "succeeded" and b["status"] == "succeeded",
              [(r["status"], r["error"]) for r in a["runs"] + b["runs"]])
        for e in (a, b):
            check_verdicts(d.get(f"/v1/experiments/{e['id']}/results")["rows"])
        status, page, _ = d.request("GET", f"/v1/experiments/{a['id']}/report?with={b['id']}")
        check(status == 200, status)
        # the findings in the page: none about one rank, where strategies cannot differ
        items = [fold(htmllib.unescape(t)) for t in
                 re.findall(r"<li data-(?:rule|summary)='[a-z_]+'>(.*?)</li>", page, re.S)]
        check(len(items) >= 4, items)
        check(not [t for t in items if t.startswith("At world size 1,")
                   or "at 1 ranks" in t], items)
        heads = headings(page)
        with tempfile.TemporaryDirectory() as tmp:
            out = keep or tmp
            os.makedirs(out, exist_ok=True)
            src, pdf = os.path.join(out, "report.html"), os.path.join(out, "report.pdf")
            with open(src, "w") as f:
                f.write(page)
            r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                "--disable-dev-shm-usage", "--no-pdf-header-footer",
                                f"--print-to-pdf={pdf}", "file://" + src],
                               capture_output=True, text=True, timeout=90)
            check(r.returncode == 0 and os.path.getsize(pdf) > 0, r.stderr[-2000:])
            pages = pdf_pages(pdf)
            if keep:
                for i, p in enumerate(pages):
                    with open(os.path.join(out, f"page{i + 1}.txt"), "w") as f:
                        f.write(p)
        check(len(pages) >= 2, len(pages))
        # no page empty, none only headings, none ending on a heading
        for i, p in enumerate(pages):
            lines = [fold(x) for x in p.splitlines() if x.strip()]
            body = [x for x in lines if x not in heads]
            check(len(body) >= 2, f"page {i + 1} is empty or only headings: {lines}")
            check(lines[-1] not in heads or i == len(pages) - 1,
                  f"page {i + 1} ends on the heading {lines[-1]!r}")
        text = fold("\n".join(pages))
        name_a, name_b = f"Experiment {a['id']}: sweep A", f"Experiment {b['id']}: sweep B"
        at = {k: text.find(k) for k in ("Summary", "Findings", name_a, name_b, "Scaling",
                                        "Model agreement", "Setup", "Appendix")}
        check(all(v >= 0 for v in at.values()), at)
        # the summary first, then the findings by experiment and topic, then the sections
        check(at["Summary"] < at["Findings"] < at[name_a] < at["Scaling"] < at["Setup"]
              < at["Appendix"], at)
        check(text.find(name_b, at["Findings"]) < at["Setup"], "B's findings heading")
        check(text.count(name_a) >= 3 and text.count(name_b) >= 3, "experiment headings")
        summary = text[at["Summary"]:at["Findings"]]
        check(len(summary) > 80 and re.search(r"\d", summary), summary)
        findings = text[at["Summary"]:at["Setup"]]
        check("At world size 1," not in findings, findings)
        check("hit" in findings or "miss" in findings or "within noise" in findings, findings)
        check("median" in findings and "worst" in findings, "the error distribution")
        check_numbers(findings)
        check_numbers(" ".join(items))
    finally:
        d.close()


if __name__ == "__main__":
    raise SystemExit(run_cases([test_report_prints_as_a_paper_section]))
