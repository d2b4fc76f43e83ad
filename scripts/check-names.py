#!/usr/bin/env python3
# Copyright 2026 The Strata Authors.
"""Fails on a name that does not match its place.

Three rules (docs/development.md, "Names match places"):

  guards      Every header's include guard spells its path: STRATA_, then
              the path without src/ or include/strata/ (the include roots),
              upper-cased, every character but a letter or digit as '_',
              then a trailing '_'. src/agent/store/parity_store.h ->
              STRATA_AGENT_STORE_PARITY_STORE_H_; tests/harness/cluster.h ->
              STRATA_TESTS_HARNESS_CLUSTER_H_.
  namespaces  Every file under src/<top>/ opens its named namespaces as
              strata::<top> or one nested in it (strata::agent::metric),
              in the one-line form. The core library (src/engine, src/format,
              src/util) and the public headers (include/strata/) are
              `strata` or one nested in it that names no other top folder.
  paths       Every repository path in a comment (C++, Python, shell, CMake,
              YAML) or a document (*.md) exists: one from the root (a top
              folder: src/ tests/ docs/ ...); a relative one that names a
              C++ file (or starts with a folder of src/), which must be the
              end of a real path (agent/node/goodput.h, node/goodput.h); one
              that goes up (../), which must stay in the repository; a
              relative Markdown link; every source a CMakeLists.txt names.

It prints each problem as "file:line: ..." and exits 1.

    scripts/check-names.py [ROOT]      check a tree (default: .)
    scripts/check-names.py --self-test plant one fault of each kind in a
                                       copy of the tree; each must be caught
"""
import io
import os
import re
import shutil
import sys
import tempfile
import tokenize

TOPS = ('src', 'tests', 'docs', 'python', 'scripts', 'bench', 'examples', 'fuzz', 'deploy',
        'include')
CORE = ('engine', 'format', 'util')  # the core library: namespace strata
CPP = ('.h', '.cc', '.cpp', '.cu')
HASH_COMMENTS = ('.sh', '.yaml', '.yml', '.toml', '.cfg', '.service', '.cmake')
SYSTEM_INCLUDES = ('/usr/include', '/usr/local/include', '/usr/include/x86_64-linux-gnu')
SKIP_DIRS = {'__pycache__', 'node_modules', 'third_party'}
UNREAD = 'corpus'  # the fuzzers' inputs: named by docs, never read here
SOURCE_EXT = r'(?:h|cc|cpp|cu|py|md|sh|txt|yaml|yml|toml|json)'

# A path from the repository root: a top folder, then at least one more part.
ROOT_PATH = re.compile(r'(?<![\w./~$@-])((?:%s)/[\w.+-]+(?:/[\w.+-]+)*/?)' % '|'.join(TOPS))
# A relative path: folders, then a file's name with a source extension
# (checked when it names a C++ file or starts with a folder of src/).
REL_PATH = re.compile(r'(?<![\w./~$@-])((?:[a-z_]+/)+[\w+-]+\.%s)(?![\w/])' % SOURCE_EXT)
# A path up from the file's folder: it must stay in the repository.
UP_PATH = re.compile(r'(?<![\w./-])((?:\.\./)+[\w.+-]+(?:/[\w.+-]+)*)')
MD_LINK = re.compile(r'\]\(([^)\s#]+)(?:#[^)]*)?\)')
CMAKE_SOURCE = re.compile(r'(?<![\w./${}-])([\w/+-]+\.(?:cc|cpp|cu|h))\b')


def walk(root):
    """Every file of ours under root, as a path relative to it."""
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(('.', 'build')) and
                         d not in SKIP_DIRS and not d.endswith('.egg-info') and
                         (rel != '.' or d in TOPS))
        for f in sorted(files):
            yield os.path.normpath(os.path.join(rel, f))


# --------------------------------------------------------------------------
# C and C++: comments and code, apart.

def split_cpp(text):
    """(code, comments): two strings as long as text, each with the other's
    characters (and string literals, in code) blanked; newlines kept."""
    code, comments = [], []
    i, n = 0, len(text)

    def put(c, into):
        keep = c if c == '\n' else ' '
        code.append(c if into == 'code' else keep)
        comments.append(c if into == 'comment' else keep)

    while i < n:
        c = text[i]
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                put(text[i], 'comment')
                i += 1
        elif text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
            for ch in text[i:end]:
                put(ch, 'comment')
            i = end
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(')' + m.group(1) + '"', i) if m else -1
            end = n if end < 0 else end + len(m.group(1)) + 2
            for ch in text[i:end]:
                put(ch, 'string')
            i = end
        elif c in '"\'' and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1  # a digit separator (1'000) is not a character literal
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            for ch in text[i:j + 1]:
                put(ch, 'string')
            i = j + 1
        else:
            put(c, 'code')
            i += 1
    return ''.join(code), ''.join(comments)


def hash_comments(text):
    """The text of every '#' comment (a '#' at a line's start or after a space)."""
    out = []
    for line in text.split('\n'):
        m = re.search(r'(?:^|\s)#(.*)$', line)
        out.append(m.group(1) if m else '')
    return '\n'.join(out)


def python_comments(text):
    """Comments and docstrings (a string that is a statement of its own)."""
    lines = [''] * (text.count('\n') + 1)
    previous = tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            is_doc = tok.type == tokenize.STRING and previous in (
                tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
            if tok.type == tokenize.COMMENT or is_doc:
                for k, part in enumerate(tok.string.split('\n')):
                    lines[tok.start[0] - 1 + k] += ' ' + part
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                previous = tok.type
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return hash_comments(text)
    return '\n'.join(lines)


# --------------------------------------------------------------------------
# The three rules.

def expected_guard(path):
    for prefix in ('src/', 'include/strata/'):
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    return 'STRATA_' + re.sub(r'[^A-Za-z0-9]', '_', path).upper() + '_'


def check_guard(path, text):
    m = re.search(r'^#ifndef (\w+)\s*\n#define (\w+)', text, re.MULTILINE)
    want = expected_guard(path)
    if not m:
        return [f'{path}:1: no include guard; want {want}']
    line = text[:m.start()].count('\n') + 1
    if m.group(1) != want or m.group(2) != want:
        return [f'{path}:{line}: include guard {m.group(1)} does not spell the path; want {want}']
    return []


def namespace_root(path):
    """The namespace a file's code must be in (or nested in), or None."""
    parts = path.split('/')
    if parts[0] == 'include':
        return 'strata'
    if parts[0] != 'src' or len(parts) < 3:
        return None
    return 'strata' if parts[1] in CORE else 'strata::' + parts[1]


def forward_declarations(code, start):
    """True if the namespace body from `start` only declares classes (a
    third-party namespace's `class App;`)."""
    end = code.find('}', start)
    return end >= 0 and re.fullmatch(r'(\s*(class|struct)\s+\w+\s*;)*\s*', code[start:end])


def check_namespaces(path, code, tops):
    root = namespace_root(path)
    if root is None:
        return []
    problems, depth = [], 0
    pattern = re.compile(r'\bnamespace\s+([\w:]+)\s*\{|\bnamespace\s*\{|[{}]|^[ \t]*#.*$',
                         re.MULTILINE)
    for m in pattern.finditer(code):
        token = m.group(0)
        if token.lstrip().startswith('#'):
            continue  # a preprocessor line
        if token == '}':
            depth -= 1
            continue
        if m.group(1) and depth == 0 and not forward_declarations(code, m.end()):
            name = m.group(1)
            parts = name.split('::')
            ok = name == root or name.startswith(root + '::')
            if ok and root == 'strata' and len(parts) > 1 and parts[1] in tops:
                ok = False  # strata::agent in the core library
            if not ok:
                line = code[:m.start()].count('\n') + 1
                want = root if root != 'strata' else 'strata (or strata::X, X no top folder)'
                problems.append(f'{path}:{line}: namespace {name} does not match its folder; '
                                f'want {want}')
        depth += 1
    return problems


def system_header(token):
    return any(os.path.exists(os.path.join(d, token)) for d in SYSTEM_INCLUDES)


def existing(root, base, candidate):
    full = os.path.normpath(os.path.join(root, base, candidate))
    inside = os.path.commonpath([os.path.abspath(root), os.path.abspath(full)]) == \
        os.path.abspath(root)
    return inside and os.path.exists(full)


def clean(token):
    token = re.sub(r'(:\d+(?:-\d+)?)+$', '', token)  # file.cc:42, file.cc:166-242
    return token.rstrip('.,;:')


def check_paths(root, path, text, src_tops, tails):
    """Paths in `text` (comment text, aligned by line with the file)."""
    problems = []
    here = os.path.dirname(path)
    for number, line in enumerate(text.split('\n'), 1):
        seen = set()
        for m in ROOT_PATH.finditer(line):
            token = clean(m.group(1))
            seen.add(m.start(1))
            if '/' in token and not existing(root, '', token):
                problems.append(f'{path}:{number}: names {token}, which does not exist')
        for m in REL_PATH.finditer(line):
            token = clean(m.group(1))
            if m.start(1) in seen:
                continue
            if token.split('/')[0] not in src_tops and not token.endswith(CPP):
                continue  # only a C++ file's name is ours whatever its folder
            if token.endswith('.h') and system_header(token):
                continue
            if token not in tails and not existing(root, here, token):
                problems.append(f'{path}:{number}: names {token}, which is the end of no '
                                'path in the repository')
        for m in UP_PATH.finditer(line):
            token = clean(m.group(1))
            if not existing(root, here, token):
                problems.append(f'{path}:{number}: names {token}, which is not in the '
                                'repository')
        if path.endswith('.md'):
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z]+:', target) or target.startswith('/'):
                    continue  # a URL
                if not existing(root, here, target):
                    problems.append(f'{path}:{number}: links to {target}, which does not exist')
    return problems


def check_cmake_sources(root, path, text):
    problems = []
    here = os.path.dirname(path)
    code = '\n'.join(re.sub(r'(^|\s)#.*$', '', line) for line in text.split('\n'))
    for number, line in enumerate(code.split('\n'), 1):
        for m in CMAKE_SOURCE.finditer(line):
            if not existing(root, here, m.group(1)):
                problems.append(f'{path}:{number}: names {m.group(1)}, which is not in {here}/')
    return problems


def check(root, only=None):
    """Every problem of the tree at root (of the file `only`, if given)."""
    src = os.path.join(root, 'src')
    src_tops = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))} \
        if os.path.isdir(src) else set()
    src_tops.add('strata')  # include/strata/
    # Every way to write the end of a path of ours: agent/node/goodput.h,
    # node/goodput.h; a relative path in a comment must be one of them.
    paths = list(walk(root))
    tails = {'/'.join(p.split('/')[i:]) for p in paths for i in range(len(p.split('/')))}
    problems = []
    for path in [only] if only else paths:
        if ('/' + UNREAD + '/') in path:
            continue
        full = os.path.join(root, path)
        name = os.path.basename(path)
        try:
            with open(full, encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if path.endswith(CPP):
            code, comments = split_cpp(text)
            if path.endswith('.h'):
                problems += check_guard(path, text)
            problems += check_namespaces(path, code, src_tops - {'strata'})
            problems += check_paths(root, path, comments, src_tops, tails)
        elif path.endswith('.md'):
            problems += check_paths(root, path, text, src_tops, tails)
        elif path.endswith('.py') or (name.find('.') < 0 and text.startswith('#!') and
                                      'python' in text.split('\n', 1)[0]):
            problems += check_paths(root, path, python_comments(text), src_tops, tails)
        elif name == 'CMakeLists.txt':
            problems += check_paths(root, path, hash_comments(text), src_tops, tails)
            problems += check_cmake_sources(root, path, text)
        elif path.endswith(HASH_COMMENTS) or name in ('Makefile', 'Dockerfile') or \
                (name.find('.') < 0 and text.startswith('#!')):
            problems += check_paths(root, path, hash_comments(text), src_tops, tails)
    return problems


# --------------------------------------------------------------------------
# The self-test: a copy of the tree with one fault planted at a time.

def copy_tree(root):
    """A copy of what check() reads (the fuzz inputs as empty files)."""
    def ignore(folder, names):
        if os.path.basename(folder) == UNREAD:
            return names
        top = os.path.samefile(folder, root)
        return [n for n in names if os.path.isdir(os.path.join(folder, n)) and (
            n.startswith(('.', 'build')) or n in SKIP_DIRS or
            n.endswith('.egg-info') or (top and n not in TOPS))]

    copy = os.path.join(tempfile.mkdtemp(prefix='check-names-'), 'tree')
    shutil.copytree(root, copy, ignore=ignore, symlinks=True)
    for path in walk(root):
        if ('/' + UNREAD + '/') in path:
            os.makedirs(os.path.dirname(os.path.join(copy, path)), exist_ok=True)
            open(os.path.join(copy, path), 'w').close()  # its name is enough
    return copy


def self_test(root):
    def edit(path, old, new):
        def apply(copy):
            full = os.path.join(copy, path)
            with open(full, encoding='utf-8') as f:
                text = f.read()
            if old not in text:
                raise AssertionError(f'{path} no longer holds {old!r}; update the self-test')
            with open(full, 'w', encoding='utf-8') as f:
                f.write(text.replace(old, new, 1))
        return apply

    op_h, op_cc = 'src/wire/op.h', 'src/wire/op.cc'
    planted = {
        'a guard from before a move': (
            'src/agent/store/parity_store.h',
            edit('src/agent/store/parity_store.h', 'STRATA_AGENT_STORE_PARITY_STORE_H_',
                 'STRATA_AGENT_PARITY_STORE_H_')),
        'a namespace of another folder': (
            op_cc, edit(op_cc, 'namespace strata::wire {', 'namespace strata::net {')),
        'the whole namespace strata outside the core': (
            op_cc, edit(op_cc, 'namespace strata::wire {', 'namespace strata {')),
        'strata::agent in the core library': (
            'src/util/clock.h', edit('src/util/clock.h', 'namespace strata {',
                                     'namespace strata::agent {')),
        'a moved file in a C++ comment, relative to src/': (
            op_h, edit(op_h, '#define STRATA_WIRE_OP_H_\n',
                       '#define STRATA_WIRE_OP_H_\n// See agent/goodput.h.\n')),
        'a moved file in a C++ comment, from the root': (
            op_cc, edit(op_cc, '\n', '\n// src/agent/coordinator.cc:42 decides.\n')),
        'a missing doc in a Markdown file': (
            'README.md', edit('README.md', '\n', '\nSee docs/nowhere.md.\n')),
        'a broken relative Markdown link': (
            'docs/development.md', edit('docs/development.md', '\n',
                                         '\n[layers](../src/nowhere/README.md)\n')),
        'a missing script in a Python comment': (
            'scripts/check-layers.py', edit('scripts/check-layers.py', '\nimport os\n',
                                            '\nimport os  # see scripts/gone.py\n')),
        'a source property naming a file that moved': (
            'src/CMakeLists.txt', edit('src/CMakeLists.txt', 'util/hash_avx2.cc PROPERTIES',
                                       'util/hash_avx512.cc PROPERTIES')),
    }
    ignored = {  # a path in code, not in a comment, is not the check's business
        'a path in a C++ string': (op_cc, edit(op_cc, '\n', '\nconst char* kX = "src/a/b.h";\n')),
    }
    failures = []
    copy = copy_tree(root)
    try:
        before = check(copy)
        if before:
            failures.append('the tree itself fails: ' + '; '.join(before[:5]))
        for what, (path, apply) in {**planted, **ignored}.items():
            with open(os.path.join(copy, path), encoding='utf-8') as f:
                original = f.read()
            apply(copy)
            found = check(copy, only=path)
            with open(os.path.join(copy, path), 'w', encoding='utf-8') as f:
                f.write(original)
            named = [p for p in found if p.startswith(path + ':')]
            if what in planted and not named:
                failures.append(f'{what} ({path}) was not caught')
            if what in ignored and found:
                failures.append(f'{what} was refused: {found[:3]}')
    finally:
        shutil.rmtree(os.path.dirname(copy))
    for f in failures:
        print('check-names self-test: ' + f)
    return 1 if failures else 0


def main(argv):
    args = argv[1:]
    if args[:1] == ['--self-test']:
        return self_test(args[1] if len(args) > 1 else '.')
    root = args[0] if args else '.'
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f'check-names: {len(problems)} problem(s); see "Names match places" in '
              'docs/development.md')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
