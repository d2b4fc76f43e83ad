#!/usr/bin/env python3
# Copyright 2026 The Strata Authors.
"""Fails when the two lists of the concurrent tests disagree.

`make test-tsan` runs tsan_tests with the Makefile's TSAN_FILTER, and
tsan_tests is built from tests/CMakeLists.txt's STRATA_CONCURRENT_TESTS
only. A suite named in the filter whose file is not in the list would run
under ThreadSanitizer nowhere, silently: gtest passes a filter that matches
no test. So:

  filter  every pattern of TSAN_FILTER matches a test (TEST, TEST_F, TEST_P
          or TYPED_TEST) defined in a file of STRATA_CONCURRENT_TESTS;
  files   every file of STRATA_CONCURRENT_TESTS defines a test that
          TSAN_FILTER matches (else it is compiled under TSan for nothing).

It prints each problem and exits 1.

    scripts/check-tsan-list.py [ROOT]       check a tree (default: .)
    scripts/check-tsan-list.py --self-test  plant one fault of each kind;
                                            each must be caught
"""
import fnmatch
import os
import re
import sys

TEST_RE = re.compile(r'^\s*(?:TEST|TEST_F|TEST_P|TYPED_TEST)\(\s*(\w+)\s*,\s*(\w+)\s*\)', re.M)


def tsan_filter(makefile_text):
    m = re.search(r'^TSAN_FILTER\s*\?=\s*(\S+)\s*$', makefile_text, re.M)
    if not m:
        raise SystemExit('check-tsan-list: no TSAN_FILTER in the Makefile')
    return m.group(1).split(':')


def concurrent_files(cmake_text):
    m = re.search(r'set\(STRATA_CONCURRENT_TESTS\s+([^)]*)\)', cmake_text)
    if not m:
        raise SystemExit('check-tsan-list: no STRATA_CONCURRENT_TESTS in tests/CMakeLists.txt')
    return m.group(1).split()


def problems(patterns, tests_by_file):
    """tests_by_file: file -> ["Suite.Name", ...]."""
    out = []
    for p in patterns:
        if not any(fnmatch.fnmatchcase(t, p) for ts in tests_by_file.values() for t in ts):
            out.append(f'Makefile: TSAN_FILTER pattern {p!r} matches no test of '
                       'STRATA_CONCURRENT_TESTS (tests/CMakeLists.txt): it runs under TSan nowhere')
    for f, ts in tests_by_file.items():
        if not any(fnmatch.fnmatchcase(t, p) for t in ts for p in patterns):
            out.append(f'tests/{f}: in STRATA_CONCURRENT_TESTS but no test of it matches '
                       'TSAN_FILTER (Makefile)')
    return out


def read_tests(root, files):
    tests = {}
    for f in files:
        with open(os.path.join(root, 'tests', f), encoding='utf-8') as fh:
            tests[f] = [f'{s}.{n}' for s, n in TEST_RE.findall(fh.read())]
    return tests


def check(root):
    with open(os.path.join(root, 'Makefile'), encoding='utf-8') as fh:
        patterns = tsan_filter(fh.read())
    with open(os.path.join(root, 'tests', 'CMakeLists.txt'), encoding='utf-8') as fh:
        files = concurrent_files(fh.read())
    return problems(patterns, read_tests(root, files))


def self_test(root):
    with open(os.path.join(root, 'Makefile'), encoding='utf-8') as fh:
        patterns = tsan_filter(fh.read())
    with open(os.path.join(root, 'tests', 'CMakeLists.txt'), encoding='utf-8') as fh:
        files = concurrent_files(fh.read())
    tests = read_tests(root, files)
    failed = []
    if problems(patterns, tests):
        failed.append('the tree as it is has problems; the self-test needs a clean one')
    # A suite in the filter whose file is left out of the list.
    planted = dict(tests)
    dropped = next(f for f in files if f.endswith('replication_test.cc'))
    del planted[dropped]
    if not any('Replication*' in p for p in problems(patterns, planted)):
        failed.append(f'a filter pattern left without its file ({dropped}) was not caught')
    # A file in the list that the filter does not name.
    planted = dict(tests, **{'agent/extra_test.cc': ['UnfilteredSuite.Runs']})
    if not any('agent/extra_test.cc' in p for p in problems(patterns, planted)):
        failed.append('a listed file no pattern matches was not caught')
    for f in failed:
        print(f'check-tsan-list self-test: {f}', file=sys.stderr)
    return 1 if failed else 0


def main(argv):
    if argv[1:2] == ['--self-test']:
        return self_test(argv[2] if len(argv) > 2 else '.')
    found = check(argv[1] if len(argv) > 1 else '.')
    for p in found:
        print(p, file=sys.stderr)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
