"""Embedders: text in, L2-normalised float32 vectors out.

Two implementations of one ``Embedder`` protocol:

- ``StaticEmbedder`` (default): a model2vec static model shipped inside the package under
  ``proxy/models/`` (distilled from all-MiniLM-L6-v2 by ``scripts/distill_model.py``; ADR 0020).
  A sentence is the normalised mean of its token vectors: numpy only, offline, ~0.01 ms a query
  (its words' pieces memoised, adr/0127).
- ``OpenAIEmbedder``: any OpenAI-compatible ``POST {url}/embeddings`` over an injected
  ``httpx.AsyncClient`` (the app's lifespan owns it).

Texts without a single known token (``""``, whitespace) embed to the zero vector: it has
similarity 0 with everything, which is the honest answer, and it is never sent upstream (OpenAI
rejects empty inputs). A vector size that differs from the configured or stored one is a
``ConfigError`` at start: ``prepare_embedder`` starts the embedder (a remote one learns its real
size) and checks, ``check_dimensions`` checks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np

from proxy.defaults import UPSTREAM_URL as DEFAULT_OPENAI_URL
from proxy.defaults import WORD_PIECES_KEPT as WORDS_KEPT
from proxy.defaults import WORD_PIECES_MEMO_TEXT_CHARS as MEMO_TEXT_CHARS
from proxy.errors import ConfigError, EmbedderError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
DEFAULT_STATIC_MODEL = "minilm-l6-static"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
# Work below this many characters runs inline: measured (bench/embed.py, ADR 0021), a thread hop
# costs more than the encoding itself, and the loop is blocked for well under a millisecond.
INLINE_MAX_CHARS = 4_000
# Bulk work goes to a thread in chunks, so memory stays bounded and the loop gets the GIL back.
STATIC_CHUNK_TEXTS = 512
OPENAI_BATCH_TEXTS = 256
# Native sizes of well-known hosted models, used until the startup probe has answered.
KNOWN_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
ERROR_BODY_CHARS = 300
PROBE_TEXT = "memproxy dimension probe"
# ASCII text the BERT normaliser changes beyond lowercasing: control characters it deletes
# (joining the words around them). A query holding one takes the tokenizer itself.
ASCII_DELETED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# BERT pre-tokens of lowercased ASCII: runs of letters and digits, each punctuation character
# alone (every printable ASCII character that is neither is punctuation to BERT); whitespace
# splits.
ASCII_PRE_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
# A batch this small (a captured turn: the user's message and the answer) is embedded a text at a
# time on the one-text path: model2vec's batch ``encode`` cost 0.37 ms for such a pair on the
# event loop, the one-text path 0.08 ms, and each row gets the bits the text has alone (as a
# query of it does).
SMALL_BATCH_TEXTS = 8
WARM_UP_TEXT = "warm up"
LOGGER = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors; ``dimensions`` is the length of every vector it returns."""

    name: str
    dimensions: int

    async def start(self) -> None:
        """Get ready at start: learn what only the backend can tell, pay first-use costs."""
        ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(len(texts), dimensions)`` float32 rows, each L2-normalised (or zero)."""
        ...


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise each row in place as float32; zero rows stay zero."""
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def resolve_model_dir(model: str | None) -> Path:
    """Map a model setting to a directory: a name under ``proxy/models/`` or a path."""
    name = model or DEFAULT_STATIC_MODEL
    shipped = MODELS_DIR / name
    path = shipped if shipped.is_dir() else Path(name).expanduser()
    # model2vec falls back to downloading from a hub when a path is missing: never let it try.
    if not (path / "model.safetensors").is_file() or not (path / "tokenizer.json").is_file():
        shipped_names = sorted(p.name for p in MODELS_DIR.iterdir() if p.is_dir())
        raise ConfigError(
            f"embedder model {name!r} is neither a model shipped in proxy/models "
            f"({', '.join(shipped_names)}) nor a model2vec directory with model.safetensors "
            "and tokenizer.json",
            param="embedder.model",
        )
    return path


class StaticEmbedder:
    """model2vec static embeddings from a local directory; CPU-bound, no I/O after loading."""

    def __init__(self, model: str | None = None, *, dimensions: int | None = None) -> None:
        """Load the model; ``dimensions`` below the native size keeps the leading PCA axes."""
        from model2vec import StaticModel

        path = resolve_model_dir(model)
        loaded = StaticModel.from_pretrained(
            path, force_download=False, normalize=True, quantize_to="float32", max_length=None
        )
        width = int(loaded.dim)
        if dimensions is not None and not 0 < dimensions <= width:
            raise ConfigError(
                f"embedder.dimensions is {dimensions}, but the static model {path.name!r} has "
                f"{width} dimensions; use at most {width}",
                param="embedder.dimensions",
            )
        self._model: Any = loaded
        # A plain model (no token remapping or weights) is a lookup table: one query can skip
        # ``encode``'s batching, truncation toggling and progress bar (half its cost, 40 -> 20 us).
        self._table: np.ndarray | None = (
            loaded.embedding if loaded.token_mapping is None and loaded.weights is None else None
        )
        self._width = dimensions or width
        self.dimensions: int = self._width
        self.name: str = f"static:{path.name}:{self._width}"
        # A BERT word-piece tokenizer splits lowercased ASCII at whitespace and punctuation and
        # encodes each piece alone, so a word's ids can be kept (``ascii_ids``).
        self._pieces: dict[str, list[int]] | None = None
        self._specials: tuple[str, ...] = ()
        self._words: dict[str, list[int]] = {}
        if self._table is not None:
            specials = bert_ascii_specials(loaded.tokenizer)
            if specials is not None:
                # Known once, here: a fresh process's questions met words it had not seen in
                # 34-97 % of its first 600 requests, a tokenizer call each (~5 us warm, ~10x
                # that on a served request's cold caches); 1 % with the vocabulary's words.
                self._words = whole_word_ids(loaded.tokenizer)
                self._pieces, self._specials = dict(self._words), specials

    async def start(self) -> None:
        """Embed once now: the tokenizer's first call costs what a request should not pay."""
        self.embed_sync([WARM_UP_TEXT])

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Encode on the calling thread; see ``embed`` for the contract."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        table = self._table
        if table is not None and len(texts) <= SMALL_BATCH_TEXTS:
            if len(texts) == 1:
                return self.embed_one(texts[0], table)
            return np.concatenate([self.embed_one(text, table) for text in texts])
        raw = self._model.encode(list(texts), normalize=False, use_multiprocessing=False)
        # PCA axes are ordered by variance, so truncating keeps the most informative ones.
        return normalise_rows(raw[:, : self._width])

    def embed_one(self, text: str, table: np.ndarray) -> np.ndarray:
        """One text of a plain model: the normalised mean of its token rows, as ``encode``.

        The same float32 operations as ``mean`` and ``normalise_rows`` (bit-identical, tested)
        on one row without their Python layers; a query's request paid ~50 us, 20 of it there.
        """
        ids = self.ascii_ids(text)
        if ids is None:
            ids = self._model.tokenize([text])[0]
        if not ids:
            return np.zeros((1, self._width), dtype=np.float32)
        row: np.ndarray = np.add.reduce(table[ids], axis=0)  # a float32 table (quantize_to)
        row /= len(ids)  # ``mean``: the float32 sum divided by the count, in place
        row = row[: self._width]
        norm = np.sqrt(np.add.reduce(row * row))  # ``np.linalg.norm`` of one row
        if norm > 0:
            row = row / norm
        return row[None, :]

    def ascii_ids(self, text: str) -> list[int] | None:
        """The model's token ids of an ASCII ``text`` from memoised word pieces; ``None`` when
        the tokenizer itself must say (not ASCII, or a character its normaliser deletes).

        BERT's normaliser lowercases ASCII and deletes control characters; its pre-tokenizer
        splits at whitespace and makes each punctuation character a word; word pieces are
        found within one word. So a text's ids are its words' ids in order, and a question's
        words recur (~25 us a query in the tokenizer, ~3 us from the memo).
        """
        pieces = self._pieces
        if (
            pieces is None
            or len(text) > MEMO_TEXT_CHARS
            or not text.isascii()
            or ASCII_DELETED.search(text) is not None
            or any(special in text for special in self._specials)  # matched before splitting
        ):
            return None
        ids: list[int] = []
        for word in ASCII_PRE_TOKEN.findall(text.lower()):
            known = pieces.get(word)
            if known is None:
                if len(pieces) >= len(self._words) + WORDS_KEPT:
                    pieces.clear()
                    pieces.update(self._words)
                known = pieces[word] = self._model.tokenize([word])[0]
            ids += known
        return ids

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Encode inline when small (a thread hop would cost more), else in a worker thread."""
        if sum(len(text) for text in texts) <= INLINE_MAX_CHARS:
            return self.embed_sync(texts)
        chunks = [
            await asyncio.to_thread(self.embed_sync, texts[i : i + STATIC_CHUNK_TEXTS])
            for i in range(0, len(texts), STATIC_CHUNK_TEXTS)
        ]
        return np.concatenate(chunks)


def whole_word_ids(tokenizer: Any) -> dict[str, list[int]]:
    """The ids of a word-piece vocabulary's whole words (``tokenizers.Tokenizer``), as the
    tokenizer gives each word alone: a word in the vocabulary is its own longest match, one
    token. Only words ``ascii_ids`` looks up (a run of lowercase letters and digits, or one
    punctuation character) and no longer than the model reads as a word."""
    try:
        model = tokenizer.model
        longest, prefix = int(model.max_input_chars_per_word), str(model.continuing_subword_prefix)
        vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=False)
    except (AttributeError, TypeError, ValueError):
        return {}
    return {
        word: [token]
        for word, token in vocab.items()
        if len(word) <= longest
        and not word.startswith(prefix)
        and word.isascii()
        and ASCII_PRE_TOKEN.fullmatch(word) is not None
    }


def bert_ascii_specials(tokenizer: Any) -> tuple[str, ...] | None:
    """The added tokens (``[UNK]``, ``[PAD]``: found in the raw text first) of ``tokenizer``
    (a ``tokenizers.Tokenizer``) when it is an uncased BERT word-piece one, whose ids of other
    ASCII text ``StaticEmbedder.ascii_ids`` reproduces from single words; else ``None``."""
    try:
        config = json.loads(tokenizer.to_str())
    except (AttributeError, TypeError, ValueError):
        return None
    normalizer = config.get("normalizer") or {}
    if not (
        normalizer.get("type") == "BertNormalizer"
        and normalizer.get("lowercase") is True
        and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
        and (config.get("model") or {}).get("type") == "WordPiece"
    ):
        return None
    added = config.get("added_tokens") or []
    if any(token.get("normalized") for token in added):
        return None  # matched after lowercasing: a raw-text search would miss "[unk]"
    return tuple(str(token["content"]) for token in added)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint, batched, over an injected client."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        model: str = DEFAULT_OPENAI_MODEL,
        url: str = DEFAULT_OPENAI_URL,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = OPENAI_BATCH_TEXTS,
    ) -> None:
        """``url`` is the API base ending in ``/v1``; ``dimensions`` is sent when set."""
        if dimensions is not None and dimensions <= 0:
            raise ConfigError("embedder.dimensions must be positive", param="embedder.dimensions")
        self._client = client
        self._model = model
        self._endpoint = url.rstrip("/")
        if not self._endpoint.endswith("/embeddings"):
            self._endpoint += "/embeddings"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._requested = dimensions
        self._batch_size = batch_size
        # 0 until known: the configured size, a well-known model's size, or the probe's answer.
        self.dimensions: int = dimensions or KNOWN_OPENAI_DIMENSIONS.get(model, 0)
        self.name: str = f"openai:{model}:{self.dimensions}"

    async def probe(self) -> int:
        """Embed one text at start; its size becomes ``dimensions``, or a ConfigError.

        An unreachable endpoint raises ``EmbedderError`` (the caller decides whether to start
        degraded); a size other than the configured one is a ``ConfigError``.
        """
        vectors = await self._request([PROBE_TEXT], check_width=False)
        width = int(vectors.shape[1])
        if self._requested is not None and width != self._requested:
            raise ConfigError(
                f"embedder.dimensions is {self._requested}, but {self._model} at "
                f"{self._endpoint} returns {width}-dimensional vectors (does it accept "
                "the 'dimensions' parameter?)",
                param="embedder.dimensions",
            )
        self.dimensions = width
        self.name = f"openai:{self._model}:{width}"
        return width

    async def start(self) -> None:
        """Probe for the real size; an endpoint unreachable now is tolerated when the size is
        already known (configured or a well-known model): chat requests degrade until it comes
        back. When the size is unknown nothing can be checked or created: a ``ConfigError``."""
        try:
            await self.probe()
        except EmbedderError as exc:
            if not self.dimensions:
                raise ConfigError(
                    f"cannot learn the embedder's vector size: {exc.message}; set "
                    "embedder.dimensions or make the endpoint reachable",
                    param="embedder.url",
                ) from exc
            LOGGER.warning("embedder probe failed, starting degraded: %s", exc.message)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed in batches of ``batch_size``; empty texts are not sent and come back zero."""
        if self.dimensions == 0:
            # Only reached when the startup probe could not answer; never a ConfigError here.
            try:
                await self.probe()
            except ConfigError as exc:
                raise EmbedderError(exc.message) from exc
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        for start in range(0, len(todo), self._batch_size):
            rows = todo[start : start + self._batch_size]
            out[rows] = await self._request([texts[i] for i in rows])
        return out

    async def _request(self, batch: list[str], *, check_width: bool = True) -> np.ndarray:
        """POST one batch and return its rows in input order, normalised."""
        body: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self._requested is not None:
            body["dimensions"] = self._requested
        try:
            response = await self._client.post(self._endpoint, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise EmbedderError(
                f"embeddings request to {self._endpoint} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 400:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} answered {response.status_code}: "
                f"{response.text[:ERROR_BODY_CHARS]}"
            )
        return normalise_rows(self._parse(response, len(batch), check_width))

    def _parse(self, response: httpx.Response, expected_rows: int, check_width: bool) -> np.ndarray:
        """Read ``data[].embedding`` ordered by ``index``; anything else is an EmbedderError."""
        try:
            items = sorted(response.json()["data"], key=lambda item: int(item["index"]))
            matrix = np.asarray([item["embedding"] for item in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} sent an unreadable body: {exc}"
            ) from exc
        if matrix.ndim != 2 or matrix.shape[0] != expected_rows:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} returned {matrix.shape[0]} vectors "
                f"for {expected_rows} inputs"
            )
        if check_width and matrix.shape[1] != self.dimensions:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} returned {matrix.shape[1]}-dimensional "
                f"vectors, expected {self.dimensions}"
            )
        return matrix


def check_dimensions(embedder: Embedder, expected: int | None, *, what: str = "collection") -> None:
    """Raise ``ConfigError`` when ``embedder`` does not make ``expected``-sized vectors."""
    if expected is not None and embedder.dimensions != expected:
        raise ConfigError(
            f"the embedder {embedder.name!r} makes {embedder.dimensions}-dimensional vectors, "
            f"but the {what} holds {expected}-dimensional ones; configure the embedder the "
            "collection was built with, or use a new collection / data directory",
            param="embedder.dimensions",
        )


async def prepare_embedder(embedder: Embedder, expected: int | None) -> None:
    """Startup: ``embedder.start()`` (a remote one probes for its real size), then
    ``check_dimensions``."""
    await embedder.start()
    check_dimensions(embedder, expected)


def create_embedder(
    kind: str,
    model: str | None = None,
    url: str | None = None,
    api_key: str | None = None,
    dimensions: int | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> Embedder:
    """Build the configured embedder (``kind`` is ``static`` or ``openai``)."""
    if kind == "static":
        return StaticEmbedder(model, dimensions=dimensions)
    if kind == "openai":
        if http_client is None:
            raise ConfigError("the openai embedder needs an HTTP client", param="embedder.kind")
        return OpenAIEmbedder(
            http_client,
            model=model or DEFAULT_OPENAI_MODEL,
            url=url or DEFAULT_OPENAI_URL,
            api_key=api_key,
            dimensions=dimensions,
        )
    raise ConfigError(
        f"embedder.kind must be 'static' or 'openai', not {kind!r}", param="embedder.kind"
    )
