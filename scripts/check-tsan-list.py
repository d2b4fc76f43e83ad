#!/usr/bin/env python3
# Copyright 2026 The Strata Authors.
"""Fails when the two lists of the concurrent tests disagree.

`make test-tsan` runs tsan_tests with the Makefile's TSAN_FILTER, and
tsan_tests is built from tests/CMakeLists.txt's STRATA_CONCURRENT_TESTS
only. A suite named in the filter whose file is not in the list would run
under ThreadSanitizer nowhere, silently: gtest passes a filter that matches
no test. So:

  filter  every pattern of TSAN_FILTER matches a test defined in a file of
          STRATA_CONCURRENT_TESTS, under the name gtest runs it by (TEST and
          TEST_F: Suite.Name; TEST_P: Inst/Suite.Name/0; TYPED_TEST:
          Suite/0.Name);
  files   every file of STRATA_CONCURRENT_TESTS defines a test that
          TSAN_FILTER matches (else it is compiled under TSan for nothing);
  others  no test of unit_tests' other files matches TSAN_FILTER: the
          filter means it to run under TSan, and tsan_tests lacks it.

It prints each problem and exits 1.

    scripts/check-tsan-list.py [ROOT]       check a tree (default: .)
    scripts/check-tsan-list.py --self-test  plant one fault of each kind;
                                            each must be caught
"""
import fnmatch
import os
import re
import sys

TEST_RE = re.compile(r'^\s*(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\(\s*(\w+)\s*,\s*(\w+)\s*\)',
                     re.M)
# The name gtest runs a test by, for the filter to match.
RUN_NAME = {'TEST': '{0}.{1}', 'TEST_F': '{0}.{1}', 'TEST_P': 'Inst/{0}.{1}/0',
            'TYPED_TEST': '{0}/0.{1}', 'TYPED_TEST_P': 'Inst/{0}/0.{1}'}


def fail(why):
    raise SystemExit(f'check-tsan-list: {why}')


def tsan_filter(makefile_text):
    m = re.search(r'^TSAN_FILTER\s*\?=[ \t]*(.*)$', makefile_text, re.M)
    if not m:
        fail('no TSAN_FILTER in the Makefile')
    value = m.group(1).strip()
    if not re.fullmatch(r'[\w*?./]+(:[\w*?./]+)*', value):
        fail(f'TSAN_FILTER is not one line of patterns joined by ":" (no continuation, no '
             f'negative part): {value!r}')
    return value.split(':')


def cmake_list(cmake_text, pattern, what):
    m = re.search(pattern, cmake_text)
    if not m:
        fail(f'no {what} in tests/CMakeLists.txt')
    return m.group(1).split()


def lists(root):
    """(TSAN_FILTER's patterns, STRATA_CONCURRENT_TESTS, unit_tests' other files)."""
    with open(os.path.join(root, 'Makefile'), encoding='utf-8') as fh:
        patterns = tsan_filter(fh.read())
    with open(os.path.join(root, 'tests', 'CMakeLists.txt'), encoding='utf-8') as fh:
        cmake = fh.read()
    concurrent = cmake_list(cmake, r'set\(STRATA_CONCURRENT_TESTS\s+([^)]*)\)',
                            'STRATA_CONCURRENT_TESTS')
    unit = cmake_list(cmake, r'add_executable\(unit_tests\s+([^)]*)\)', 'unit_tests')
    return patterns, concurrent, [f for f in unit if not f.startswith('${')]


def matches(test, patterns):
    return any(fnmatch.fnmatchcase(test, p) for p in patterns)


def problems(patterns, tests_by_file, other_tests):
    """tests_by_file: each file of STRATA_CONCURRENT_TESTS -> the names its
    tests run by; other_tests: the same for unit_tests' other files."""
    out = []
    for p in patterns:
        if not any(matches(t, [p]) for ts in tests_by_file.values() for t in ts):
            out.append(f'Makefile: TSAN_FILTER pattern {p!r} matches no test of '
                       'STRATA_CONCURRENT_TESTS (tests/CMakeLists.txt): it runs under TSan nowhere')
    for f, ts in tests_by_file.items():
        if not any(matches(t, patterns) for t in ts):
            out.append(f'tests/{f}: in STRATA_CONCURRENT_TESTS but no test of it matches '
                       'TSAN_FILTER (Makefile)')
    for f, ts in other_tests.items():
        for t in ts:
            if matches(t, patterns):
                out.append(f'tests/{f}: {t} matches TSAN_FILTER (Makefile) but its file is not in '
                           'STRATA_CONCURRENT_TESTS: it runs under TSan nowhere')
    return out


def read_tests(root, files):
    tests = {}
    for f in files:
        path = os.path.join(root, 'tests', f)
        try:
            with open(path, encoding='utf-8') as fh:
                text = fh.read()
        except OSError as e:
            fail(f'tests/{f} (named in tests/CMakeLists.txt): {e.strerror}')
        tests[f] = [RUN_NAME[kind].format(suite, name) for kind, suite, name in TEST_RE.findall(text)]
    return tests


def check(root):
    patterns, concurrent, others = lists(root)
    return problems(patterns, read_tests(root, concurrent), read_tests(root, others))


def self_test(root):
    patterns, files, others = lists(root)
    tests, other_tests = read_tests(root, files), read_tests(root, others)
    failed = []
    if problems(patterns, tests, other_tests):
        failed.append('the tree as it is has problems; the self-test needs a clean one')
    # A suite in the filter whose file is left out of the list.
    planted = dict(tests)
    dropped = next(f for f in files if f.endswith('replication_test.cc'))
    del planted[dropped]
    if not any('Replication*' in p for p in problems(patterns, planted, other_tests)):
        failed.append(f'a filter pattern left without its file ({dropped}) was not caught')
    # A file in the list that the filter does not name.
    planted = dict(tests, **{'agent/extra_test.cc': ['UnfilteredSuite.Runs']})
    if not any('agent/extra_test.cc' in p for p in problems(patterns, planted, other_tests)):
        failed.append('a listed file no pattern matches was not caught')
    # A suite the filter names in a file of unit_tests outside the list.
    planted = dict(other_tests, **{'agent/new_test.cc': ['ReplicationNewTest.Runs']})
    if not any('agent/new_test.cc' in p for p in problems(patterns, tests, planted)):
        failed.append('a filtered suite in a file outside the list was not caught')
    # A parameterized test runs as Inst/Suite.Name/0, which "Suite*" does not match.
    if not fnmatch.fnmatchcase(RUN_NAME['TEST_P'].format('WireX', 'Y'), '*/WireX.Y/*') or \
            matches(RUN_NAME['TEST_P'].format('WireX', 'Y'), ['WireX*']):
        failed.append('a TEST_P is not named as gtest runs it')
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
