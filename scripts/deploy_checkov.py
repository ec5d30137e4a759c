#!/usr/bin/env python3
"""Runs checkov on rendered overlays and holds the result against deploy/checkov-exceptions.yaml.

  deploy_checkov.py CHECKOV DIR      DIR holds one rendered file per overlay (<overlay>.yaml)

Fails on a failed check that no exception covers for that overlay (and resource), and on
an exception that matched no failure (no longer needed: remove it).
"""
import json
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXCEPTIONS = ROOT / "deploy/checkov-exceptions.yaml"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    checkov, directory = sys.argv[1], pathlib.Path(sys.argv[2])
    overlays = sorted(p.stem for p in directory.glob("*.yaml"))
    exceptions = yaml.safe_load(EXCEPTIONS.read_text())["exceptions"]
    for e in exceptions:
        if not (e.get("check") and e.get("overlays") and str(e.get("reason", "")).strip()):
            print(f"{EXCEPTIONS.name}: every exception needs check, overlays and a reason: {e}")
            return 1
    run = subprocess.run([checkov, "--directory", str(directory), "--framework", "kubernetes",
                          "--output", "json", "--quiet", "--compact", "--skip-download"],
                         capture_output=True, text=True)
    if run.returncode not in (0, 1) or not run.stdout.strip():
        print(run.stdout[-2000:], run.stderr[-4000:], sep="\n")
        print(f"checkov did not run (exit {run.returncode})")
        return 1
    reports = json.loads(run.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed, passed = [], 0
    for report in reports:
        results = report.get("results") or {}
        summary = report.get("summary") or {}
        passed += summary.get("passed", 0)
        if summary.get("parsing_errors"):
            print(f"checkov could not parse {summary['parsing_errors']} file(s)")
            return 1
        for check in results.get("failed_checks") or []:
            overlay = pathlib.Path(check["file_path"]).stem
            failed.append((overlay, check["check_id"], check["resource"], check.get("check_name", "")))
    used = set()
    unexcused = []
    for overlay, check_id, resource, name in failed:
        match = next((i for i, e in enumerate(exceptions)
                      if e["check"] == check_id and overlay in e["overlays"]
                      and (not e.get("resources") or resource in e["resources"])), None)
        if match is None:
            unexcused.append(f"{overlay}: {check_id} {name}: {resource}")
        else:
            used.add(match)
    stale = [f"{e['check']} ({', '.join(e['overlays'])})" for i, e in enumerate(exceptions) if i not in used]
    for line in unexcused:
        print(f"FAIL checkov {line}")
    for line in stale:
        print(f"FAIL {EXCEPTIONS.relative_to(ROOT)}: exception {line} matched no failed check; remove it")
    print(f"checkov: {', '.join(overlays)}: {passed} passed, {len(failed)} failed "
          f"({len(failed) - len(unexcused)} of them listed in {EXCEPTIONS.relative_to(ROOT)}: "
          f"{', '.join(sorted({e['check'] for e in exceptions}))})")
    return 1 if unexcused or stale else 0


if __name__ == "__main__":
    sys.exit(main())
