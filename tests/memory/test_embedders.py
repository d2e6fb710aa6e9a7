"""Embedders: the shipped static model for real, the OpenAI client against a fake server."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.errors import ConfigError, EmbedderError
from proxy.memory.embedders import (
    DEFAULT_STATIC_MODEL,
    INLINE_MAX_CHARS,
    MEMO_TEXT_CHARS,
    MODELS_DIR,
    SMALL_BATCH_TEXTS,
    STATIC_CHUNK_TEXTS,
    Embedder,
    OpenAIEmbedder,
    StaticEmbedder,
    bert_ascii_specials,
    check_dimensions,
    create_embedder,
    prepare_embedder,
    resolve_model_dir,
    whole_word_ids,
)

SHIPPED_DIMENSIONS = 256
MAX_MODEL_BYTES = 16_000_000
FAKE_URL = "http://embeddings.test/v1"
FAKE_NATIVE_DIMENSIONS = 12


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    """The shipped model, loaded once for the module."""
    return StaticEmbedder()


def norms(vectors: np.ndarray) -> np.ndarray:
    return np.asarray(np.linalg.norm(vectors, axis=1))


# --- the shipped model ------------------------------------------------------------------------


def test_shipped_model_fits_the_size_limit_and_carries_its_license() -> None:
    path = MODELS_DIR / DEFAULT_STATIC_MODEL
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert size < MAX_MODEL_BYTES
    assert "Apache License" in (path / "LICENSE").read_text(encoding="utf-8")
    assert "all-MiniLM-L6-v2" in (path / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "texts",
    [
        ["hello"],
        ["I moved to Berlin in 2021.", "My sister's name is Ana.", "We adopted a cat."],
        ["a much longer memory " * 200],
        ["emoji 🎉 and ümlauts", "数字 and 中文"],
    ],
)
async def test_static_shapes_dtype_and_unit_norm(static: StaticEmbedder, texts: list[str]) -> None:
    vectors = await static.embed(texts)
    assert vectors.shape == (len(texts), SHIPPED_DIMENSIONS)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(norms(vectors), 1.0, atol=1e-5)


async def test_static_is_deterministic_across_calls_instances_and_batches(
    static: StaticEmbedder,
) -> None:
    texts = ["Caroline went to a support group.", "Melanie painted a sunrise.", "x"]
    first = await static.embed(texts)
    again = await StaticEmbedder().embed(texts)
    alone = np.vstack([await static.embed([text]) for text in texts])
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first, alone, atol=1e-6)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=200) | st.sampled_from(["", "  ", "zzqqxx", "x" * 3000, "日本語"]))
def test_static_single_text_fast_path_equals_the_batch_path(
    static: StaticEmbedder, text: str
) -> None:
    alone = static.embed_sync([text])
    in_batch = static.embed_sync([text, "another sentence to make it a batch"])[:1]
    np.testing.assert_allclose(alone, in_batch, atol=1e-6)
    assert alone.dtype == np.float32
    assert alone.shape == (1, static.dimensions)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=120) | st.sampled_from(["", "x" * 1500, "日本語"]), max_size=8))
def test_a_small_batch_gets_each_texts_own_bits(static: StaticEmbedder, texts: list[str]) -> None:
    # A captured turn (two texts) takes the one-text path row by row: the same bits as each text
    # alone, which is what model2vec's tokens and numpy's mean give it.
    assert len(texts) <= SMALL_BATCH_TEXTS
    batch = static.embed_sync(texts)
    assert batch.shape == (len(texts), static.dimensions)
    assert batch.dtype == np.float32
    for row, text in zip(batch, texts, strict=True):
        assert row.tobytes() == reference_row(static, text).tobytes()


def test_a_small_batch_skips_the_models_batch_encode(
    static: StaticEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("batch encode called")

    monkeypatch.setattr(static._model, "encode", refuse)
    static.embed_sync(["What did Caroline research?", "adoption agencies"])


def reference_row(static: StaticEmbedder, text: str) -> np.ndarray:
    """One text as model2vec's ``tokenize`` and numpy's ``mean`` and ``linalg.norm`` give it."""
    model = static._model
    ids = model.tokenize([text])[0]
    table = model.embedding
    row = table[ids].mean(axis=0) if ids else np.zeros(table.shape[1])
    vector = np.asarray(row, dtype=np.float32)[None, : static.dimensions].copy()
    size = np.linalg.norm(vector, axis=1, keepdims=True)
    np.divide(vector, size, out=vector, where=size > 0)
    return vector


ASCII_PIECES = [
    *"aZ9 .,'!?-_/\t\n\r\x00\x0b\x0c\x1f\x7f",
    *["Caroline", "LGBTQ", "don't", "[MASK]", "[CLS]", "[UNK]", "[mask]", "x" * 120, "2023"],
]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.sampled_from(ASCII_PIECES), max_size=25).map("".join)
    | st.text(max_size=60)
    | st.text(st.characters(max_codepoint=127), max_size=60)
)
def test_static_one_text_is_bit_identical_to_the_models_tokens_and_numpys_mean(
    static: StaticEmbedder, text: str
) -> None:
    # adr/0127: memoised word pieces and one-row float32 arithmetic, the same bits as before.
    assert static.ascii_ids(text) in (None, static._model.tokenize([text])[0])
    alone = static.embed_sync([text])
    assert alone.dtype == np.float32
    assert alone.tobytes() == reference_row(static, text).tobytes()


def tokenizer_calls(static: StaticEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The texts ``static``'s tokenizer is given from now on, call by call."""
    seen: list[list[str]] = []
    tokenize = static._model.tokenize

    def spy(texts: list[str]) -> list[list[int]]:
        seen.append(texts)
        return tokenize(texts)  # type: ignore[no-any-return]

    monkeypatch.setattr(static._model, "tokenize", spy)
    return seen


def test_static_known_words_skip_the_tokenizer(
    static: StaticEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    static.embed_sync(["When did Caroline go to the support group?"])
    seen = tokenizer_calls(static, monkeypatch)
    static.embed_sync(["When did Caroline go to the GROUP?"])
    assert seen == []
    static.embed_sync(["When did the xylophonist go?"])  # one word not met before
    assert seen == [["xylophonist"]]
    seen.clear()
    static.embed_sync(["Caroline [UNK] group"])  # an added token: the tokenizer decides
    assert seen == [["Caroline [UNK] group"]]


def test_static_vocabulary_words_skip_the_tokenizer_from_the_first_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Known at load, not met once each by requests: a fresh process asks the tokenizer nothing
    # for words its vocabulary holds whole.
    fresh = StaticEmbedder()
    seen = tokenizer_calls(fresh, monkeypatch)
    fresh.embed_sync(["When did Caroline go to the LGBTQ support group?"])
    assert seen == [["lgbtq"]]  # not a vocabulary word: two pieces, from the tokenizer


def test_a_full_memo_keeps_the_vocabulary_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.memory.embedders.WORDS_KEPT", 2)
    fresh = StaticEmbedder()
    fresh.embed_sync(["lgbtq xylophonist zqwordone"])  # three new words: emptied once
    seen = tokenizer_calls(fresh, monkeypatch)
    fresh.embed_sync(["When did Caroline go to the support group?"])
    assert seen == []


def test_whole_word_ids_are_the_tokenizers_own(static: StaticEmbedder) -> None:
    words = whole_word_ids(static._model.tokenizer)
    assert len(words) > 20_000  # the shipped model's vocabulary
    tokenize = static._model.tokenize
    assert all(tokenize([word])[0] == ids for word, ids in words.items())


def test_whole_word_ids_of_a_tokenizer_without_a_word_piece_model_are_none() -> None:
    assert whole_word_ids(object()) == {}


def test_a_tokenizer_other_than_uncased_bert_keeps_the_model_path() -> None:
    class Cased:
        def to_str(self) -> str:
            return json.dumps(
                {
                    "normalizer": {"type": "BertNormalizer", "lowercase": False},
                    "pre_tokenizer": {"type": "BertPreTokenizer"},
                    "model": {"type": "WordPiece"},
                }
            )

    assert bert_ascii_specials(Cased()) is None
    assert bert_ascii_specials(object()) is None


def test_added_tokens_matched_after_lowercasing_keep_the_model_path() -> None:
    # A normalised added token matches "[unk]" too, which a search of the raw text would miss.
    def bert(normalized: bool) -> object:
        class Uncased:
            def to_str(self) -> str:
                return json.dumps(
                    {
                        "normalizer": {"type": "BertNormalizer", "lowercase": True},
                        "pre_tokenizer": {"type": "BertPreTokenizer"},
                        "model": {"type": "WordPiece"},
                        "added_tokens": [{"content": "[UNK]", "normalized": normalized}],
                    }
                )

        return Uncased()

    assert bert_ascii_specials(bert(False)) == ("[UNK]",)
    assert bert_ascii_specials(bert(True)) is None


def test_a_long_text_goes_to_the_tokenizer_whole(
    static: StaticEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A memory being written: its words would fill the memo and cost a call each.
    seen = tokenizer_calls(static, monkeypatch)
    long_text = " ".join(f"zqword{i}" for i in range(200))
    assert len(long_text) > MEMO_TEXT_CHARS
    static.embed_sync([long_text])
    assert seen == [[long_text]]


@pytest.mark.parametrize(
    ("anchor", "similar", "unrelated"),
    [
        ("I adopted a puppy last week", "We got a new dog recently", "The quarterly taxes are due"),
        (
            "My favourite food is sushi",
            "I love eating Japanese raw fish",
            "The car needs new tyres",
        ),
        ("She is training for a marathon", "He runs long distances every day", "Paint the fence"),
        ("Where do you work now?", "What is your current job?", "The river flooded the village"),
        ("I'm allergic to peanuts", "Nuts give me a bad reaction", "We watched a movie at home"),
    ],
)
async def test_static_places_similar_sentences_closer_than_unrelated_ones(
    static: StaticEmbedder, anchor: str, similar: str, unrelated: str
) -> None:
    a, s, u = await static.embed([anchor, similar, unrelated])
    assert float(a @ s) > float(a @ u) + 0.1


@pytest.mark.parametrize("texts", [[], [""], ["   "], ["", "words here", "\n\t"]])
async def test_static_empty_input(static: StaticEmbedder, texts: list[str]) -> None:
    vectors = await static.embed(texts)
    assert vectors.shape == (len(texts), SHIPPED_DIMENSIONS)
    for text, vector in zip(texts, vectors, strict=True):
        expected = 1.0 if text.strip() else 0.0
        assert float(np.linalg.norm(vector)) == pytest.approx(expected, abs=1e-5)


async def test_static_bulk_path_matches_inline_across_chunk_boundaries(
    static: StaticEmbedder,
) -> None:
    texts = [f"memory number {i} about topic {i % 7}" for i in range(STATIC_CHUNK_TEXTS * 2 + 3)]
    assert sum(map(len, texts)) > INLINE_MAX_CHARS  # so embed() takes the thread path
    bulk = await static.embed(texts)
    assert bulk.shape == (len(texts), SHIPPED_DIMENSIONS)
    np.testing.assert_allclose(bulk, static.embed_sync(texts), atol=1e-6)


async def test_static_fewer_dimensions_keeps_leading_axes(static: StaticEmbedder) -> None:
    small = StaticEmbedder(dimensions=64)
    texts = ["first memory", "second memory"]
    vectors = await small.embed(texts)
    assert small.dimensions == 64
    assert small.name != static.name
    assert vectors.shape == (2, 64)
    np.testing.assert_allclose(norms(vectors), 1.0, atol=1e-5)
    full = await static.embed(texts)
    cosine = np.sum(full[:, :64] / norms(full[:, :64])[:, None] * vectors, axis=1)
    np.testing.assert_allclose(cosine, 1.0, atol=1e-5)


async def test_static_short_queries_stay_on_the_loop_and_bulk_goes_to_a_thread(
    static: StaticEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[int] = []

    async def counting_to_thread(func: Callable[..., Any], /, *args: Any) -> Any:
        hops.append(len(args[0]))
        return func(*args)

    monkeypatch.setattr("proxy.memory.embedders.asyncio.to_thread", counting_to_thread)
    await static.embed(["a short query about my dog"])
    assert hops == []
    await static.embed(["x" * (INLINE_MAX_CHARS + 1)])
    assert hops == [1]


def test_static_model_loads_without_touching_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    assert StaticEmbedder().embed_sync(["offline"]).shape == (1, SHIPPED_DIMENSIONS)


@pytest.mark.parametrize("dimensions", [0, -1, SHIPPED_DIMENSIONS + 1])
def test_static_rejects_impossible_dimensions(dimensions: int) -> None:
    with pytest.raises(ConfigError, match="dimensions") as info:
        StaticEmbedder(dimensions=dimensions)
    assert info.value.param == "embedder.dimensions"


@pytest.mark.parametrize("model", ["no-such-model", "/nonexistent/dir"])
def test_unknown_static_model_is_a_config_error_not_a_download(model: str) -> None:
    with pytest.raises(ConfigError, match=DEFAULT_STATIC_MODEL):
        resolve_model_dir(model)


def test_static_model_by_path(tmp_path: Path) -> None:
    assert resolve_model_dir(str(MODELS_DIR / DEFAULT_STATIC_MODEL)) == (
        MODELS_DIR / DEFAULT_STATIC_MODEL
    )
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError):
        resolve_model_dir(str(tmp_path))  # no tokenizer.json beside it


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=80), max_size=8))
def test_static_rows_are_unit_or_zero_for_any_text(
    static: StaticEmbedder, texts: list[str]
) -> None:
    vectors = static.embed_sync(texts)
    assert vectors.shape == (len(texts), SHIPPED_DIMENSIONS)
    assert np.isfinite(vectors).all()
    for n in norms(vectors):
        assert n == pytest.approx(1.0, abs=1e-5) or n == 0.0


# --- a fake OpenAI-compatible embeddings server -----------------------------------------------


def fake_vector(text: str, width: int) -> list[float]:
    """A deterministic, deliberately unnormalised vector for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(digest[i % len(digest)]) + 1.0 for i in range(width)]


@dataclass
class FakeEmbeddings:
    """Records requests; answers like OpenAI unless told to misbehave."""

    status: int = 200
    honour_dimensions: bool = True
    shuffle: bool = False
    drop_one: bool = False
    raw_body: bytes | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.raw_body is not None:
            return Response(self.raw_body, media_type="application/json")
        if self.status != 200:
            error = {"message": "fake failure", "type": "server_error", "param": None}
            return JSONResponse({"error": error}, status_code=self.status)
        width = body.get("dimensions", FAKE_NATIVE_DIMENSIONS)
        if not self.honour_dimensions:
            width = FAKE_NATIVE_DIMENSIONS
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(text, width)}
            for i, text in enumerate(inputs)
        ]
        if self.shuffle:
            data.reverse()
        if self.drop_one:
            data.pop()
        return JSONResponse({"object": "list", "data": data, "model": body["model"]})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/embeddings", self.endpoint, methods=["POST"])])


@pytest.fixture
def fake() -> FakeEmbeddings:
    return FakeEmbeddings()


@pytest.fixture
async def client(fake: FakeEmbeddings) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app())) as http:
        yield http


MakeOpenAI = Callable[..., OpenAIEmbedder]


@pytest.fixture
def make_openai(client: httpx.AsyncClient) -> MakeOpenAI:
    def make(**kwargs: Any) -> OpenAIEmbedder:
        kwargs.setdefault("model", "fake-embed")
        kwargs.setdefault("url", FAKE_URL)
        return OpenAIEmbedder(client, **kwargs)

    return make


def expected_rows(texts: list[str], width: int) -> np.ndarray:
    rows = np.array([fake_vector(t, width) for t in texts], dtype=np.float32)
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True))


async def test_openai_batches_in_order_and_normalises(
    fake: FakeEmbeddings, make_openai: MakeOpenAI
) -> None:
    embedder = make_openai(dimensions=FAKE_NATIVE_DIMENSIONS, batch_size=4, api_key="sk-test")
    texts = [f"text {i}" for i in range(10)]
    fake.shuffle = True  # servers may answer out of order; `index` decides
    vectors = await embedder.embed(texts)
    assert [len(r["input"]) for r in fake.requests] == [4, 4, 2]
    assert [t for r in fake.requests for t in r["input"]] == texts
    assert all(h["authorization"] == "Bearer sk-test" for h in fake.headers)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected_rows(texts, FAKE_NATIVE_DIMENSIONS), atol=1e-6)


async def test_openai_passes_dimensions_through_only_when_configured(
    fake: FakeEmbeddings, make_openai: MakeOpenAI
) -> None:
    await make_openai(dimensions=5).embed(["a"])
    await make_openai().embed(["b"])  # size learnt from the (lazy) probe
    assert fake.requests[0]["dimensions"] == 5
    assert all("dimensions" not in r for r in fake.requests[1:])
    assert fake.requests[0]["model"] == "fake-embed"
    assert "authorization" not in fake.headers[0]


@pytest.mark.parametrize("texts", [[], [""], ["", "  ", "\n"]])
async def test_openai_never_sends_empty_texts(
    fake: FakeEmbeddings, make_openai: MakeOpenAI, texts: list[str]
) -> None:
    vectors = await make_openai(dimensions=8).embed(texts)
    assert vectors.shape == (len(texts), 8)
    assert not vectors.any()
    assert fake.requests == []


async def test_openai_mixes_empty_and_real_texts(
    fake: FakeEmbeddings, make_openai: MakeOpenAI
) -> None:
    vectors = await make_openai(dimensions=8).embed(["", "real", " "])
    assert fake.requests[0]["input"] == ["real"]
    np.testing.assert_allclose(norms(vectors), [0.0, 1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
async def test_openai_error_statuses_raise_embedder_error(
    fake: FakeEmbeddings, make_openai: MakeOpenAI, status: int
) -> None:
    fake.status = status
    with pytest.raises(EmbedderError, match=str(status)) as info:
        await make_openai(dimensions=8).embed(["hello"])
    assert "fake failure" in info.value.message
    assert info.value.status == 503  # what the memories API answers with


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda f: setattr(f, "raw_body", b"not json"), "unreadable"),
        (lambda f: setattr(f, "raw_body", json.dumps({"data": [{}]}).encode()), "unreadable"),
        (lambda f: setattr(f, "drop_one", True), "1 vectors for 2 inputs"),
        (lambda f: setattr(f, "honour_dimensions", False), "expected 8"),
    ],
)
async def test_openai_malformed_answers_raise_embedder_error(
    fake: FakeEmbeddings,
    make_openai: MakeOpenAI,
    setup: Callable[[FakeEmbeddings], None],
    message: str,
) -> None:
    setup(fake)
    with pytest.raises(EmbedderError, match=message):
        await make_openai(dimensions=8).embed(["one", "two"])


async def test_openai_transport_failure_is_an_embedder_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
        embedder = OpenAIEmbedder(http, url=FAKE_URL, dimensions=8)
        with pytest.raises(EmbedderError, match="ConnectError"):
            await embedder.embed(["hello"])


async def test_openai_probe_learns_the_size(make_openai: MakeOpenAI) -> None:
    embedder = make_openai()
    assert embedder.dimensions == 0
    await prepare_embedder(embedder, expected=FAKE_NATIVE_DIMENSIONS)
    assert embedder.dimensions == FAKE_NATIVE_DIMENSIONS
    assert embedder.name.endswith(f":{FAKE_NATIVE_DIMENSIONS}")


async def test_openai_probe_rejects_a_server_ignoring_dimensions(
    fake: FakeEmbeddings, make_openai: MakeOpenAI
) -> None:
    fake.honour_dimensions = False
    with pytest.raises(ConfigError, match=r"embedder\.dimensions is 64") as info:
        await prepare_embedder(make_openai(dimensions=64), expected=64)
    assert info.value.param == "embedder.dimensions"


async def test_prepare_rejects_a_collection_of_another_size(make_openai: MakeOpenAI) -> None:
    with pytest.raises(ConfigError, match=r"12-dimensional.*384-dimensional"):
        await prepare_embedder(make_openai(), expected=384)


async def test_prepare_tolerates_an_unreachable_endpoint_only_when_the_size_is_known(
    fake: FakeEmbeddings, make_openai: MakeOpenAI
) -> None:
    fake.status = 503
    await prepare_embedder(make_openai(model="text-embedding-3-small"), expected=1536)
    with pytest.raises(ConfigError, match="cannot learn"):
        await prepare_embedder(make_openai(), expected=None)


async def test_prepare_static_checks_without_probing(static: StaticEmbedder) -> None:
    await prepare_embedder(static, expected=SHIPPED_DIMENSIONS)
    await prepare_embedder(static, expected=None)
    with pytest.raises(ConfigError, match=r"256-dimensional.*1536-dimensional"):
        await prepare_embedder(static, expected=1536)


def test_check_dimensions(static: StaticEmbedder) -> None:
    check_dimensions(static, SHIPPED_DIMENSIONS)
    with pytest.raises(ConfigError, match="static:minilm-l6-static"):
        check_dimensions(static, 128)


# --- the factory ------------------------------------------------------------------------------


async def test_create_embedder_builds_both_kinds(client: httpx.AsyncClient) -> None:
    static = create_embedder("static", None, None, None, None, None)
    assert isinstance(static, StaticEmbedder)
    assert isinstance(static, Embedder)
    remote = create_embedder("openai", None, FAKE_URL, "sk", 8, client)
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.dimensions == 8
    assert remote.name == "openai:text-embedding-3-small:8"
    assert (await remote.embed(["hi"])).shape == (1, 8)


@pytest.mark.parametrize(
    ("kind", "with_client", "param"),
    [("openai", False, "embedder.kind"), ("sentencepiece", True, "embedder.kind")],
)
def test_create_embedder_config_errors(
    client: httpx.AsyncClient, kind: str, with_client: bool, param: str
) -> None:
    with pytest.raises(ConfigError) as info:
        create_embedder(kind, None, None, None, None, client if with_client else None)
    assert info.value.param == param


def test_openai_rejects_non_positive_dimensions(client: httpx.AsyncClient) -> None:
    with pytest.raises(ConfigError):
        OpenAIEmbedder(client, dimensions=0)
