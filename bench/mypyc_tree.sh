#!/usr/bin/env bash
# An experiment, not a build step: a scratch copy of a commit with the pure hot modules compiled
# by mypyc, to A/B against the same commit uncompiled (docs/benchmarks.md, "mypyc").
#
#   bash bench/mypyc_tree.sh /tmp/mypyc-tree [COMMIT]
#   (cd /tmp/mypyc-tree && /path/to/.venv/bin/python bench/pipeline.py --skip-e2e --sizes 10000 \
#       --top-k 50 --requests 300)      # in process; run the same in the uncompiled copy
#   (cd /tmp/mypyc-tree && /path/to/.venv/bin/python bench/pipeline.py --sizes 10000 --top-k 50 \
#       --requests 300 --rounds 2 --baseline-tree /tmp/uncompiled-copy)   # served, interleaved
#
# Two source workarounds are applied to the copy only (mypyc 1.x/2.x limits, not bugs of ours):
# a frozen dataclass that is also Generic cannot be a native class (ranking.ScoredMemory: import
# fails with "attribute '__dict__' of 'type' objects is not writable"), and a decorated nested
# function read by another closure is unbound at run time (render.BlockTokens' last_word).
# records.py stays interpreted: proxy/memory/edge.py builds Candidate with object.__new__,
# which a native class refuses ("object.__new__(Candidate) is not safe").
set -euo pipefail
out=${1:?usage: mypyc_tree.sh OUT_DIR [COMMIT]}
commit=${2:-HEAD}
repo=$(git rev-parse --show-toplevel)
venv=${VENV:-$repo/.venv}
mkdir -p "$out"
git -C "$repo" archive "$commit" | tar -x -C "$out"
cd "$out"
"$venv/bin/python" - <<'EOF'
import pathlib

def patch(path: str, old: str, new: str) -> None:
    file = pathlib.Path(path)
    text = file.read_text()
    if old not in text:
        raise SystemExit(f"{path}: the workaround no longer applies; update bench/mypyc_tree.sh")
    file.write_text(text.replace(old, new, 1))

patch(
    "proxy/context/ranking.py",
    "@dataclass(frozen=True, slots=True)\nclass ScoredMemory(Generic[M]):",
    "from mypy_extensions import mypyc_attr\n\n\n@mypyc_attr(native_class=False)\n"
    "@dataclass(frozen=True, slots=True)\nclass ScoredMemory(Generic[M]):",
)
patch(
    "proxy/context/render.py",
    "        @functools.lru_cache(maxsize=LAST_WORDS_KEPT)\n"
    "        def last_word(word: str) -> int:\n"
    '            return count(f" {word}\\n") - count(" " + word)\n',
    "        def last_word_count(word: str) -> int:\n"
    '            return count(f" {word}\\n") - count(" " + word)\n\n'
    "        last_word = functools.lru_cache(maxsize=LAST_WORDS_KEPT)(last_word_count)\n",
)
EOF
context="assembler dedup words ranking render knapsack allocation profiles shortlist neighbours
  position documents tokens billing limits inject budget"
memory="fusion near record_cache edge_turns"
modules=()
for m in $context; do modules+=("proxy/context/$m.py"); done
for m in $memory; do modules+=("proxy/memory/$m.py"); done
"$venv/bin/mypyc" "${modules[@]}" >mypyc-build.log 2>&1
ls proxy/context/*.so proxy/memory/*.so
