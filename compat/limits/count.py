"""Prints `passed failed errors skipped` from a pytest JUnit XML report."""

import sys
import xml.etree.ElementTree as ET

passed = failed = errors = skipped = 0
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    tags = {child.tag for child in case}
    if "failure" in tags:
        failed += 1
    elif "error" in tags:
        errors += 1
    elif "skipped" in tags:
        skipped += 1
    else:
        passed += 1
print(passed, failed, errors, skipped)
