#!/usr/bin/env python3
"""Prints a short table of a ctest JUnit report: one row per test suite, then the failures."""
import collections
import sys
import xml.etree.ElementTree as ET


def main(path):
    root = ET.parse(path).getroot()
    suites = collections.OrderedDict()
    failures = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        suite = name.split(".")[0]
        status = case.get("status", "run")
        if case.find("failure") is not None or status == "fail":
            status = "fail"
            failures.append(name)
        elif case.find("skipped") is not None or status in ("notrun", "disabled"):
            status = "skip"
        else:
            status = "pass"
        row = suites.setdefault(suite, collections.Counter())
        row[status] += 1
        row["time"] += float(case.get("time", 0) or 0)
    print(f"{'suite':<24} {'pass':>5} {'fail':>5} {'skip':>5} {'seconds':>8}")
    total = collections.Counter()
    for suite, row in suites.items():
        print(f"{suite:<24} {row['pass']:>5} {row['fail']:>5} {row['skip']:>5} {row['time']:>8.2f}")
        total.update(row)
    print(f"{'TOTAL':<24} {total['pass']:>5} {total['fail']:>5} {total['skip']:>5} {total['time']:>8.2f}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
