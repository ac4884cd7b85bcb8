"""Prints `passed failed errors skipped` from a pytest JUnit XML report.

A test the `flaky` plugin reran appears once per run in the report: its
last outcome counts, once.
"""

import sys
import xml.etree.ElementTree as ET

outcome = {}
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    tags = {child.tag for child in case}
    if "failure" in tags:
        result = "failed"
    elif "error" in tags:
        result = "errors"
    elif "skipped" in tags:
        result = "skipped"
    else:
        result = "passed"
    outcome[(case.get("classname"), case.get("name"))] = result
counts = [sum(1 for r in outcome.values() if r == k) for k in ("passed", "failed", "errors", "skipped")]
print(*counts)
