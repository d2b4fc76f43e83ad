#!/usr/bin/env python3
# Copyright 2026 The Strata Authors.
"""Fails on an include that goes up the architecture.

Every folder of src/ that holds code has a README.md with one line

    May include: util, format, agent/config

naming the folders (relative to src/) whose headers its files may include.
A file may also include headers of its own folder, the public headers
(include/strata/) and system headers. This script reads those lines, checks
that together they form no cycle, and checks every #include "..." of every
file under src/ against its folder's line. It prints each violation as
"file:line: includes X, but <folder> may include only ..." and exits 1.

    scripts/check-layers.py [SRC_DIR]     check a tree (default: ./src)
    scripts/check-layers.py --self-test   prove it catches what it should
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
MAY_INCLUDE = re.compile(r'^May include:(.*)$', re.MULTILINE)
CODE_SUFFIXES = ('.h', '.cc', '.cpp', '.cu')
PUBLIC = 'strata'  # include/strata/: the public API, open to everyone


def read_rules(src):
    """{folder: set of folders it may include}, and a list of problems."""
    rules, problems = {}, []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        if not any(f.endswith(CODE_SUFFIXES) for f in files):
            continue
        folder = os.path.relpath(root, src)
        readme = os.path.join(root, 'README.md')
        if not os.path.exists(readme):
            problems.append(f'{root}: no README.md saying what it owns and may include')
            continue
        with open(readme, encoding='utf-8') as f:
            found = MAY_INCLUDE.findall(f.read())
        if len(found) != 1:
            problems.append(f'{readme}: needs exactly one "May include:" line')
            continue
        text = re.sub(r'\(.*?\)', '', found[0])  # "(nothing of ours)" and the like
        rules[folder] = {w.strip() for w in text.split(',') if w.strip()}
    for folder, allowed in rules.items():
        for dep in sorted(allowed - set(rules)):
            problems.append(f'src/{folder}/README.md: may include "{dep}", which is no folder of code')
    return rules, problems


def find_cycle(rules):
    """A list of folders forming a cycle of "may include", or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = 'open'
        stack.append(node)
        for dep in sorted(rules.get(node, ())):
            if state.get(dep) == 'open':
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 'done'
        return None

    for node in sorted(rules):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def check(src):
    rules, problems = read_rules(src)
    cycle = find_cycle(rules)
    if cycle:
        problems.append('the "May include" lines form a cycle: ' + ' -> '.join(cycle))
    for folder, allowed in sorted(rules.items()):
        directory = os.path.join(src, folder)
        for name in sorted(os.listdir(directory)):
            if not name.endswith(CODE_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding='utf-8') as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = os.path.dirname(m.group(1))
                    if target in (folder, PUBLIC) or target in allowed:
                        continue
                    if not os.path.isdir(os.path.join(src, target)):
                        continue  # not one of ours (a generated or third-party header)
                    problems.append(f'{path}:{number}: includes "{m.group(1)}", but {folder}/ may '
                                    f'include only: {", ".join(sorted(allowed)) or "nothing of ours"}')
    return problems


def self_test():
    """The checker must pass a good tree and fail each kind of bad one."""
    def tree(files):
        root = tempfile.mkdtemp(prefix='check-layers-')
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'w', encoding='utf-8') as f:
                f.write(text)
        return root

    good = {
        'low/README.md': 'May include: (nothing)\n',
        'low/a.h': '#include <vector>\n#include "strata/status.h"\n',
        'high/README.md': 'May include: low\n',
        'high/b.cc': '#include "high/b.h"\n#include "low/a.h"\n',
        'high/b.h': '',
    }
    cases = {
        'an upward include': {**good, 'low/a.cc': '#include "high/b.h"\n'},
        'a folder without a README': {**good, 'side/c.cc': '#include "low/a.h"\n'},
        'a cycle of rules': {**good, 'low/README.md': 'May include: high\n'},
        'a rule naming no folder': {**good, 'high/README.md': 'May include: low, nowhere\n'},
    }
    failures = []
    if check(tree(good)):
        failures.append('a good tree was refused: ' + '; '.join(check(tree(good))))
    for what, files in cases.items():
        if not check(tree(files)):
            failures.append(f'{what} was not caught')
    for f in failures:
        print('check-layers self-test: ' + f)
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    src = argv[1] if len(argv) > 1 else 'src'
    problems = check(src)
    for p in problems:
        print(p)
    if problems:
        print(f'check-layers: {len(problems)} problem(s); see the README.md of each folder')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
