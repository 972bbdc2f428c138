"""Search and repo listings through the real huggingface_hub client against the fake hub."""

from __future__ import annotations

import socket

import pytest

from engine.catalog.hub import HubClient
from engine.errors import HubAccessDenied, HubNotFound, HubRateLimited, HubUnavailable, InvalidRequest
from tests.engine.catalog.conftest import BIG, GATED, MLX_BIG, MLX_TINY, PRIVATE, ST_BIG, ST_TINY, TINY, TOKEN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_search_sorts_by_downloads_likes_or_recency(client, hub):
    by_downloads = [r.repo for r in client.search("llama", sort="downloads")]
    assert by_downloads[:3] == [ST_BIG, BIG, TINY]
    by_likes = [r.repo for r in client.search("llama", sort="likes", limit=2)]
    assert by_likes == [ST_BIG, BIG]
    recent = client.search("", sort="recent", limit=3)
    assert [r.repo for r in recent] == [MLX_TINY, MLX_BIG, TINY]
    assert recent[0].last_modified.isoformat().startswith("2025-06-01")
    asked = [r.query for r in hub.requests if r.path == "/api/models"]
    assert [q["sort"] for q in asked] == [["downloads"], ["likes"], ["lastModified"]]


def test_search_filters_by_format_and_names_variants(client):
    mlx = client.search("", format="mlx")
    assert {r.repo for r in mlx} == {MLX_TINY, MLX_BIG} and all(r.formats == ("mlx",) for r in mlx)
    gguf = {r.repo: r for r in client.search("llama", format="gguf")}
    assert set(gguf) == {TINY, BIG, GATED}  # the private repo stays hidden without a token
    assert gguf[TINY].variants == ("Q2_K", "Q4_K_M", "Q6_K", "Q8_0", "F16")
    assert gguf[GATED].gated
    assert {r.repo for r in client.search("", format="safetensors")} == {ST_TINY, ST_BIG}
    with pytest.raises(InvalidRequest, match="Sort by one of"):
        client.search("x", sort="stars")


def test_a_gguf_repo_lists_its_variants_with_sizes_and_sha256(client, hub):
    listing = client.repo(TINY)
    assert listing.revision == hub.repos[TINY].sha
    assert [v.name for v in listing.variants] == ["Q2_K", "Q4_K_M", "Q6_K", "Q8_0", "F16"]
    served = {f.path: f for f in hub.repos[TINY].files}
    q6 = listing.variant("q6_k")
    assert [f.path for f in q6.files] == ["tiny-llama.Q6_K-00001-of-00002.gguf", "tiny-llama.Q6_K-00002-of-00002.gguf"]
    for f in q6.files:
        assert f.sha256 == served[f.path].sha256 and f.size == len(served[f.path].data)
    assert q6.size_bytes == sum(len(served[f.path].data) for f in q6.files)
    assert all(f.path != "README.md" for v in listing.variants for f in v.files)
    with pytest.raises(InvalidRequest, match="several variants; name one as TheOrg/Tiny-Llama-GGUF:VARIANT"):
        listing.variant(None)
    with pytest.raises(InvalidRequest, match="no variant 'Q9_K'"):
        listing.variant("Q9_K")


def test_mlx_and_safetensors_repos_list_one_variant_with_configs(client):
    mlx = client.repo(MLX_TINY).variant()
    assert (mlx.name, mlx.format) == ("4bit", "mlx")
    assert {f.path for f in mlx.files} == {"config.json", "model.safetensors", "tokenizer_config.json"}
    config = next(f for f in mlx.files if f.path == "config.json")
    assert config.sha256 is None and config.blob_id  # small files are checked by their git hash
    st = client.repo(ST_TINY).variant()
    assert (st.name, st.format) == ("BF16", "safetensors")
    assert ".gitattributes" not in {f.path for f in st.files}


def test_large_files_report_their_listed_sizes(client):
    listing = client.repo(BIG)
    assert listing.variant("F16").size_bytes == 16_070_000_000
    assert listing.parameters == 8_030_261_248


def test_missing_private_and_malformed_repos_are_clear_errors(client, hub):
    with pytest.raises(HubNotFound, match=r"There is no model 'TheOrg/Nope' .*`hearth search`"):
        client.repo("TheOrg/Nope")
    with pytest.raises(HubNotFound, match="set HF_TOKEN if it is private"):
        client.repo(PRIVATE)
    assert HubClient(endpoint=hub.url, token=TOKEN).repo(PRIVATE).variant().name == "Q4_K_M"
    assert hub.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(HubAccessDenied, match="refused the token"):
        HubClient(endpoint=hub.url, token="hf_wrong").repo(PRIVATE)
    with pytest.raises(InvalidRequest, match="write it as owner/name"):
        client.repo("just-a-name")


def test_rate_limits_and_a_dead_hub_are_one_sentence(client, hub):
    hub.rate_limited = True
    with pytest.raises(HubRateLimited, match="rate-limiting"):
        client.repo(TINY)
    with pytest.raises(HubRateLimited):
        client.search("llama")
    dead = HubClient(endpoint=f"http://127.0.0.1:{free_port()}", timeout=2)
    for call in (lambda: dead.repo(TINY), lambda: dead.search("llama")):
        with pytest.raises(HubUnavailable, match="Could not reach the model hub") as err:
            call()
        assert str(err.value).count(".") >= 1 and "\n" not in str(err.value)


def test_a_hub_that_does_not_answer_times_out_with_a_clear_error(hub):
    hub.stall = 2.0
    impatient = HubClient(endpoint=hub.url, timeout=0.5)
    with pytest.raises(HubUnavailable, match="did not answer in time"):
        impatient.repo(TINY)
