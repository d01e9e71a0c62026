#!/bin/sh
# check-layers — the layout is the architecture: fails when a C file
# includes a project header against the table of allowed dependencies
# below, when an include does not name its folder, when two modules
# include each other through any chain (a cycle), when orchestrator/ code
# compares a step kind's or an executor's name, or when engine, store,
# runs or exec code compares a state's or an outcome's name (lib/states.h
# has their enums).
#
# The folders, lowest first (orchestrator/README.md says why this order).
# A folder may include its own headers and those of the folders listed
# after its name; nothing else. Peers (deploy, monitor, schedule; api,
# cli) do not include each other. There are no exceptions: change the
# code, or change this table in a commit that says why.
#
# A module is a .c and its .h (x.c + x.h); a .c with no header of its
# own (exec_local.c, store_dev.c, config_kinds.c) and an x_priv.h belong
# to the module of the longest prefix that has one (exec, store, config).
# Run by make check (and so by make test); `tests/check-layers.sh -v`
# also prints the module graph's size.
cd "$(dirname "$0")/.." || exit 2
exec python3 - "$@" <<'EOF'
import glob, os, re, sys

LAYERS = """
lib:
plan:     lib
store:    lib plan
runs:     lib plan store
exec:     lib plan store
deploy:   lib plan store exec
monitor:  lib plan store exec
schedule: lib plan store runs exec
engine:   lib plan store runs exec deploy monitor schedule
steps:    lib plan store runs exec deploy monitor schedule engine
api:      lib plan store runs exec deploy monitor schedule engine steps
cli:      lib plan store runs exec deploy monitor schedule engine steps
daemon:   lib plan store runs exec deploy monitor schedule engine steps api cli
"""
allowed = {}
for line in LAYERS.strip().splitlines():
    name, deps = line.split(":")
    allowed[name.strip()] = set(deps.split()) | {name.strip()}

def folder_of(path):
    parts = path.split("/")
    if parts[0] == "orchestrator":
        return parts[1]
    return parts[0]

def header_path(inc):
    """The file an include names (includes are relative to . or orchestrator/)."""
    for root in ("orchestrator/", ""):
        if os.path.isfile(root + inc):
            return root + inc
    return None

files = sorted(glob.glob("orchestrator/*/*.[ch]") + glob.glob("steps/*.[ch]") +
               glob.glob("api/*.[ch]") + glob.glob("cli/*.[ch]"))
errors = []
for f in glob.glob("orchestrator/*.[ch]"):
    errors.append(f"{f}: a source file at orchestrator/'s top level: it belongs in a folder")
for f in files:
    if folder_of(f) not in allowed:
        errors.append(f"{f}: folder '{folder_of(f)}' is not in check-layers.sh's table")

def module_of(path):
    d, base = os.path.split(path)
    stem = base[:-2]
    if stem.endswith("_priv"):
        stem = stem[:-5]
    cand = stem
    while True:
        if os.path.isfile(os.path.join(d, cand + ".h")):
            return os.path.join(d, cand)
        if "_" not in cand:
            return os.path.join(d, stem)
        cand = cand.rsplit("_", 1)[0]

inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
graph = {}
for f in files:
    src = open(f, encoding="utf-8", errors="replace").read()
    me = module_of(f)
    graph.setdefault(me, set())
    for lineno, line in enumerate(src.splitlines(), 1):
        m = inc_re.match(line)
        if not m:
            continue
        inc = m.group(1)
        if "/" not in inc:
            errors.append(f"{f}:{lineno}: #include \"{inc}\" does not name its folder")
            continue
        h = header_path(inc)
        if h is None:
            continue  # generated or outside the tree
        if folder_of(f) in allowed and folder_of(h) not in allowed[folder_of(f)]:
            errors.append(f"{f}:{lineno}: {folder_of(f)}/ may not include {inc} "
                          f"({folder_of(h)}/ is not below it)")
        other = module_of(h)
        if other != me:
            graph[me].add(other)

# cycles between modules (Tarjan's strongly connected components)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in sorted(graph.get(v, ())):
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in sorted(graph):
    if v not in index:
        strong(v)
for comp in sccs:
    errors.append("include cycle between modules: " + " <-> ".join(comp))

# no kind or executor name compared in the core
NAMES = "run|train|evaluate|gate|label|register|cache|deploy|local|podman|docker|slurm|noop|test"
name_re = re.compile(r'(strn?cmp\s*\([^;]*"(' + NAMES + r')"|==\s*&(exec|kind)_[a-z]+|&(exec|kind)_[a-z]+\s*==)')
for f in files:
    if not f.startswith("orchestrator/"):
        continue
    for lineno, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        if name_re.search(line):
            errors.append(f"{f}:{lineno}: compares a kind's or executor's name: {line.strip()}")

# outcomes and states are enums (lib/states.h) in the core: their names are
# for SQL and JSON only (parsers of a user's words, such as monitor/'s
# `on_hang: restart`, and the other folders' own vocabularies are not checked)
STATES = "succeeded|failed|waiting|stopped|stopping|lost|restart|running|ready|blocked|skipped|pending"
state_re = re.compile(r'strn?cmp\s*\([^;]*"(' + STATES + r')"')
for f in files:
    if folder_of(f) not in ("engine", "store", "runs", "exec"):
        continue
    for lineno, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        if state_re.search(line):
            errors.append(f"{f}:{lineno}: compares a state's or outcome's name (use lib/states.h): {line.strip()}")

if "-v" in sys.argv:
    print(f"check-layers: {len(graph)} modules, {sum(len(v) for v in graph.values())} dependencies")
if errors:
    print("\n".join(errors))
    print(f"check-layers: {len(errors)} problem(s)")
    sys.exit(1)
print("check-layers: clean")
EOF
