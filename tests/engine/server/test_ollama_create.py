"""Ollama's model building on Hearth's registry: /api/create (from a model, or from files sent to /api/blobs),
/api/copy, and what /api/show then says. In process, nothing loaded: the models' answers are checked with the
`ollama` client in test_ollama.py."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from fastapi.testclient import TestClient

from engine.errors import InvalidRequest
from engine.server import ServerSettings, create_app
from tests.engine.catalog.conftest import make_gguf
from tests.engine.server.vision_fixtures import b64, checkerboard

STARTER = "smollm2-135m-instruct"
GO_TEMPLATE = (
    "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ range .Messages }}{{ if eq .Role \"user\" }}"
    "<|im_start|>user\n{{ .Content }}<|im_end|>\n<|im_start|>assistant\n{{ else if eq .Role \"assistant\" }}{{ .Content }}"
    "<|im_end|>\n{{ end }}{{ end }}"
)
MAX_BODY = 64 * 1024  # the uploads below are larger: a file sent to /api/blobs is not a request body


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    home = tmp_path_factory.mktemp("create-home")
    registry = ModelRegistry(home)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1))
    with TestClient(create_app(ServerSettings(max_body_bytes=MAX_BODY), manager), base_url="http://127.0.0.1") as client:
        client.registry = registry  # type: ignore[attr-defined]
        client.home = home  # type: ignore[attr-defined]
        yield client
    manager.close()
    registry.close()


def create(api, **body):
    return api.post("/api/create", json={"stream": False, **body})


def show(api, name: str) -> dict:
    r = api.post("/api/show", json={"model": name})
    assert r.status_code == 200, r.text
    return r.json()


def upload(api, data: bytes) -> str:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert api.head(f"/api/blobs/{digest}").status_code == 404
    assert api.post(f"/api/blobs/{digest}", content=data).status_code == 201
    assert api.head(f"/api/blobs/{digest}").status_code == 200
    return digest


def test_a_model_made_from_another_has_its_own_modelfile_and_shares_the_files(api):
    lines = api.post("/api/create", json={
        "model": "mario:latest", "from": STARTER, "system": "You are Mario.", "license": ["MIT", "Apache-2.0"],
        "parameters": {"temperature": 0.2, "top_k": 5, "stop": ["<|im_end|>", "Luigi"], "num_ctx": 1024},
        "messages": [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "It's-a me!"}],
    })  # fmt: skip
    assert lines.status_code == 200 and lines.headers["content-type"].startswith("application/x-ndjson")
    assert [line["status"] for line in map(__import__("json").loads, lines.text.splitlines())][-2:] == ["writing manifest", "success"]
    assert "mario:latest" in [m["name"] for m in api.get("/api/tags").json()["models"]]
    shown = show(api, "mario")
    assert shown["system"] == "You are Mario." and shown["license"] == "MIT\nApache-2.0"
    assert shown["messages"] == [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "It's-a me!"}]
    assert shown["details"]["parent_model"] == STARTER and shown["details"]["family"] == "llama"
    assert [line.split() for line in shown["parameters"].splitlines()] == [
        ["temperature", "0.2"], ["top_k", "5"], ["stop", '"<|im_end|>"'], ["stop", '"Luigi"'], ["num_ctx", "1024"]]  # fmt: skip
    assert shown["parameters"].startswith("temperature" + " " * 20 + "0.2")  # in 30 columns, as Ollama's
    assert shown["modelfile"].splitlines()[1:4] == [f"FROM {STARTER}", "SYSTEM You are Mario.", "PARAMETER temperature 0.2"]
    from engine.catalog.modelfile import parse

    again = parse(shown["modelfile"])  # what it shows, a Modelfile reader reads back (Ollama's writes it so)
    assert (again.base, again.system, again.license) == (STARTER, "You are Mario.", ["MIT", "Apache-2.0"])
    assert again.parameters == {"temperature": 0.2, "top_k": 5, "stop": ["<|im_end|>", "Luigi"], "num_ctx": 1024}
    assert again.messages == shown["messages"]
    assert "<|im_start|>" in shown["template"]  # the GGUF's own, none given
    mario, starter = api.registry.get("mario"), api.registry.get(STARTER)
    assert mario.path == starter.path and mario.derived_from == STARTER and mario.source == "import"  # the starter's own: never deleted
    from engine.model_defaults import ModelDefaults

    defaults = ModelDefaults.from_info(mario.origin_info)
    assert defaults.system == "You are Mario." and defaults.n_ctx == 1024 and len(defaults.messages) == 2
    # built on again: parameters over the base's, the rest kept unless given; a copy keeps them all
    assert create(api, model="mario-hot", **{"from": "mario"}, parameters={"temperature": 1.5}).json() == {"status": "success"}
    hot = show(api, "mario-hot")
    assert ["temperature", "1.5"] in [line.split() for line in hot["parameters"].splitlines()]
    assert ["top_k", "5"] in [line.split() for line in hot["parameters"].splitlines()] and hot["system"] == "You are Mario."
    assert hot["details"]["parent_model"] == "mario"
    assert api.post("/api/copy", json={"source": "mario-hot:latest", "destination": "luigi"}).status_code == 200
    luigi = show(api, "luigi")
    assert luigi["parameters"] == hot["parameters"] and luigi["details"]["parent_model"] == "mario-hot"
    # made again under the same name: replaced (as Ollama's create replaces a model)
    assert create(api, model="luigi", **{"from": STARTER}, system="You are Luigi.").status_code == 200
    assert show(api, "luigi")["system"] == "You are Luigi." and show(api, "luigi")["parameters"] == ""
    for name in ("mario", "mario-hot", "luigi"):
        assert api.request("DELETE", "/api/delete", json={"model": name}).status_code == 200
    assert starter.path.exists() and api.registry.get(STARTER) is not None


def test_an_ollama_template_is_translated_and_a_bad_one_refused(api):
    assert create(api, model="templated", **{"from": STARTER}, template=GO_TEMPLATE, system="Be brief.").status_code == 200
    shown = show(api, "templated")
    assert shown["template"] == GO_TEMPLATE and 'TEMPLATE """' in shown["modelfile"]
    from engine.chat_template import ChatTemplate
    from engine.types import ChatMessage

    model = api.registry.get("templated")
    assert model.chat_template is not None and model.has_chat_template
    text = ChatTemplate(model.chat_template).render((ChatMessage("user", "Hi"),))
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")  # its SYSTEM, as Ollama renders it
    r = create(api, model="broken", **{"from": STARTER}, template="{{ if .System }}unclosed")
    assert r.status_code == 400 and r.json()["error"].startswith("The template cannot be used (")
    assert api.registry.get("broken") is None
    api.request("DELETE", "/api/delete", json={"model": "templated"})


@pytest.mark.parametrize(
    ("body", "status", "starts"),
    [
        ({"from": STARTER, "parameters": {"temprature": 1}}, 400, "'parameters.temprature' is not a Modelfile parameter"),
        ({"from": STARTER, "parameters": {"temperature": -1}}, 400, "'parameters.temperature' must be 0 or more"),
        ({"from": STARTER, "parameters": {"stop": [1]}}, 400, "'parameters.stop' must be a string or a list of strings"),
        ({"from": STARTER, "parameters": {"num_ctx": 3}}, 400, "'parameters.num_ctx'"),
        ({"from": STARTER, "parameters": {"num_predict": 1.5}}, 400, "'parameters.num_predict' must be a whole number"),
        ({"from": STARTER, "messages": [{"role": "tool", "content": "x"}]}, 400, "'messages[0]' must have a role of"),
        ({"from": STARTER, "license": ["MIT", 3]}, 400, ""),
        ({"from": STARTER, "quantize": "q4_K_M"}, 400, "Hearth does not quantize models"),
        ({"from": STARTER, "adapters": {"a.gguf": "sha256:" + "0" * 64}}, 400, "LoRA adapters are not supported"),
        ({"modelfile": "FROM ./model.gguf"}, 400, "FROM ./model.gguf names a file on the client's machine"),
        ({"modelfile": f"FROM {STARTER}\nPARAMETER temperature hot"}, 400, "Modelfile line 2: PARAMETER temperature must be a number"),
        ({"modelfile": f"FROM {STARTER}\nADAPTER ./lora.gguf"}, 400, "LoRA adapters are not supported"),
        ({}, 400, "Neither 'from' nor 'files' was given"),
        ({"from": "no-such-model"}, 404, "Model 'no-such-model' is not found"),
        ({"from": "no/such/model"}, 404, "Model 'no/such/model' is not found"),  # nor a Hub repo, to pull
        ({"files": {"m.gguf": "sha256:abc"}}, 400, "'sha256:abc' is not a digest"),
        ({"files": {"m.gguf": "sha256:" + "1" * 64}}, 400, "No file was sent for 'm.gguf'"),
        ({"files": {}}, 400, "'files' is empty"),
    ],
)
def test_what_create_cannot_do_is_refused_in_ollamas_shape_and_registers_nothing(api, body, status, starts):
    r = create(api, model="refused", **body)
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and r.json()["error"].startswith(starts)
    assert api.registry.get("refused") is None


def test_names_that_cannot_be_made(api):
    assert create(api, model="two words", **{"from": STARTER}).json()["error"].startswith("'two words' cannot name a model")
    assert create(api, **{"from": STARTER}).json()["error"] == "'model' is required; name the model to create."
    taken = create(api, model=STARTER, **{"from": STARTER}, system="Hi")  # a model's own name: its own defaults
    assert taken.status_code == 200 and show(api, STARTER)["system"] == "Hi"
    assert api.registry.get(STARTER).derived_from is None
    create(api, model=STARTER, **{"from": STARTER}, system="", parameters={"temperature": 0.5})  # "" is not given
    assert show(api, STARTER)["system"] == "Hi" and show(api, STARTER)["parameters"].split() == ["temperature", "0.5"]
    api.registry.derive(api.registry.get(STARTER), STARTER, {})  # back as it came
    create(api, model="other", **{"from": STARTER})
    refused = create(api, model=STARTER, **{"from": "other"})
    assert refused.status_code == 400 and refused.json()["error"].startswith(f"A model named '{STARTER}' is already registered")
    copied = api.post("/api/copy", json={"source": "other", "destination": STARTER})
    assert copied.status_code == 400 and api.registry.get(STARTER).derived_from is None
    missing = api.post("/api/copy", json={"source": "nothing", "destination": "x"})
    assert missing.status_code == 404 and missing.json()["error"].startswith("There is no model 'nothing' to copy")
    api.request("DELETE", "/api/delete", json={"model": "other"})


def test_a_model_built_from_files_sent_to_the_port_owns_them(api, tmp_path):
    data = make_gguf(tmp_path / "tiny.gguf", label="Q8_0", n_floats=40_000)  # larger than a request body may be
    assert len(data) > MAX_BODY
    assert api.post("/api/blobs/sha256:" + "0" * 64, content=data).json()["error"].startswith(
        f"The file's SHA-256 is {hashlib.sha256(data).hexdigest()}, not the digest it was sent to"
    )
    assert api.post("/api/blobs/md5:abc", content=b"x").status_code == 400
    digest = upload(api, data)
    assert api.post(f"/api/blobs/{digest}", content=b"").status_code == 200  # here already: its body left unread
    r = create(api, model="tiny:q8", files={"Tiny-Q8_0.gguf": digest}, system="Small.", parameters={"temperature": 0})
    assert r.json() == {"status": "success"}, r.text
    model = api.registry.get("tiny:q8")
    assert model.source == "upload" and model.owns_files and model.path.name == "Tiny-Q8_0.gguf"
    assert model.path.parent.parent == api.home / "models" / "created" and model.path.read_bytes() == data
    assert api.head(f"/api/blobs/{digest}").status_code == 404  # moved, not copied
    shown = show(api, "tiny:q8")
    assert shown["system"] == "Small." and shown["details"]["quantization_level"] == "Q8_0"
    # a copy shares the files: they go with the last of the two
    assert api.post("/api/copy", json={"source": "tiny:q8", "destination": "tiny-copy"}).status_code == 200
    assert api.request("DELETE", "/api/delete", json={"model": "tiny:q8"}).status_code == 200 and model.path.exists()
    assert api.request("DELETE", "/api/delete", json={"model": "tiny-copy"}).status_code == 200
    assert not model.path.exists() and not model.path.parent.exists()


def test_files_that_make_no_model_are_refused_and_stay_to_be_sent_again(api, tmp_path):
    text = upload(api, b"not a model at all")
    refused = create(api, model="bad", files={"notes.txt": text})
    assert refused.status_code == 400 and refused.json()["error"].startswith("'notes.txt' is not a GGUF file")
    one = upload(api, make_gguf(tmp_path / "a.gguf", label="Q8_0", n_floats=1000, seed=1))
    two = upload(api, make_gguf(tmp_path / "b.gguf", label="Q8_0", n_floats=1000, seed=2))
    refused = create(api, model="bad", files={"a.gguf": one, "b.gguf": two})
    assert refused.status_code == 400 and refused.json()["error"].startswith("'files' holds 2 models (a.gguf, b.gguf)")
    assert create(api, model="bad", files={"../a.gguf": one, "a.gguf": two}).json()["error"] == "'files' names two files 'a.gguf'; give each file once."
    broken = upload(api, b"GGUF" + b"\xff" * 64)  # a GGUF's magic, and nothing readable after it
    refused = create(api, model="bad", files={"broken.gguf": broken})
    assert refused.status_code == 400 and api.registry.get("bad") is None
    for digest in (text, one, two, broken):
        assert api.head(f"/api/blobs/{digest}").status_code == 200  # still there for the next try
    assert create(api, model="bad", files={"a.gguf": one, "b.gguf": one}).json()["error"].startswith(f"'files' names {one} twice")
    assert create(api, model="bad", files={"a" * 300 + ".gguf": one}).json()["error"].endswith("cannot name a file; give the file's own name.")
    assert create(api, model="bad", files={'a?.gguf': one}).status_code == 400
    # a split model: every part, of one split
    first, second = (upload(api, make_gguf(tmp_path / f"s{i}.gguf", label="Q8_0", n_floats=500, seed=i + 10, split=(i, 3))) for i in range(2))
    refused = create(api, model="bad", files={"m-00001-of-00003.gguf": first, "m-00002-of-00003.gguf": second})
    assert refused.json()["error"] == "'files' holds 2 of the 3 parts of m (part 3 is missing); send every part."
    refused = create(api, model="bad", files={"m-00001-of-00003.gguf": first, "n-00002-of-00003.gguf": second})
    assert refused.json()["error"].startswith("'files' holds 2 models (m-00001-of-00003.gguf, n-00002-of-00003.gguf)")
    assert not list((api.home / "models" / "created").glob("bad*"))
    shutil.rmtree(api.home / "blobs")


def test_an_upload_made_again_leaves_nothing_of_the_one_it_replaces(api, tmp_path):
    first = upload(api, make_gguf(tmp_path / "v1.gguf", label="Q8_0", n_floats=1000, seed=21))
    projector = upload(api, _projector(tmp_path / "mmproj.gguf"))
    assert create(api, model="seer", files={"v.gguf": first, "mmproj-v.gguf": projector}).status_code == 200
    old = api.registry.get("seer")
    assert old.mmproj is not None and old.mmproj.parent == old.path.parent
    assert "vision" in show(api, "seer")["capabilities"]
    again = upload(api, make_gguf(tmp_path / "v2.gguf", label="Q8_0", n_floats=1000, seed=22))
    assert create(api, model="seer", files={"v.gguf": again}).status_code == 200
    assert not old.path.parent.exists()  # its model file and projector went with it
    new = api.registry.get("seer")
    assert new.path.exists() and new.mmproj is None
    assert api.request("DELETE", "/api/delete", json={"model": "seer"}).status_code == 200
    assert not new.path.parent.exists()


def test_old_uploads_are_swept_and_a_part_of_one_in_progress_is_kept(tmp_path):
    import os
    import time

    from engine.server.ollama_create import sweep_blobs

    folder = tmp_path / "blobs"
    folder.mkdir()
    names = ("sha256-" + "a" * 64, "sha256-" + "b" * 64, ".upload-old", ".upload-new", "other")
    for name in names:
        (folder / name).write_bytes(b"x")
    day_ago = time.time() - 25 * 3600
    for name in ("sha256-" + "a" * 64, ".upload-old", "other"):
        os.utime(folder / name, (day_ago, day_ago))
    sweep_blobs(folder)
    assert sorted(p.name for p in folder.iterdir()) == [".upload-new", "other", "sha256-" + "b" * 64]


def test_removing_a_download_leaves_its_files_to_a_model_made_from_it(tmp_path):
    from engine.catalog.registry import ModelRegistry

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    folder = registry.home / "models" / "TheOrg" / "Tiny-GGUF"
    base = registry.register(_tiny(folder), source="hub", repo="TheOrg/Tiny-GGUF", variant="Q8_0")
    made = registry.derive(base, "mine", {"defaults": {"temperature": 0.1}})
    assert made.source == "hub" and made.derived_from == base.name and made.created
    assert made.repo is None and registry.resolve("TheOrg/Tiny-GGUF") == base  # the repo's name still names the download
    registry.remove(base.name, delete_files=True)
    assert made.path.exists()
    registry.remove("mine", delete_files=True)
    assert not made.path.exists()
    # made again over a name that alone used a download's files: they go, as Ollama prunes the layers it replaced
    base = registry.register(_tiny(folder), source="hub", repo="TheOrg/Tiny-GGUF", variant="Q8_0")
    registry.derive(base, "mine", {})
    registry.remove(base.name, delete_files=True)
    other = registry.register(_tiny(registry.home / "elsewhere"), name="other")
    registry.derive(other, "mine", {})
    assert not base.path.exists() and other.path.exists()
    with pytest.raises(InvalidRequest, match="'other' is already registered"):
        registry.derive(registry.get("mine"), "other", {})
    registry.close()


def _projector(path):
    """A GGUF that is a multimodal projector by its header (a clip one, ``general.type`` mmproj)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_tensor("v.patch_embd.weight", np.zeros(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def _tiny(folder):
    folder.mkdir(parents=True, exist_ok=True)
    make_gguf(folder / "tiny.Q8_0.gguf", label="Q8_0", n_floats=1000)
    return folder / "tiny.Q8_0.gguf"


def test_an_older_clients_modelfile_text_is_read_as_its_fields(api, tmp_path):
    text = f"""# an older client sends the Modelfile itself
FROM {STARTER}:latest
PARAMETER temperature 0.3
PARAMETER stop "<|im_end|>"
PARAMETER stop Luigi
system \"\"\"You are Mario.
Keep it short.\"\"\"
MESSAGE user Who are you?
"""
    assert create(api, model="old-mario", modelfile=text).json() == {"status": "success"}
    shown = show(api, "old-mario")
    assert shown["system"] == "You are Mario.\nKeep it short." and shown["messages"] == [{"role": "user", "content": "Who are you?"}]
    assert [line.split(None, 1) for line in shown["parameters"].splitlines()] == [
        ["temperature", "0.3"], ["stop", '"<|im_end|>"'], ["stop", '"Luigi"']]  # fmt: skip
    digest = upload(api, make_gguf(tmp_path / "t.gguf", label="Q8_0", n_floats=1000, seed=5))
    assert create(api, model="old-file", modelfile=f"FROM @{digest}").json() == {"status": "success"}  # sent first, as they did
    assert api.registry.get("old-file").source == "upload"
    for name in ("old-mario", "old-file"):
        api.request("DELETE", "/api/delete", json={"model": name})


def test_a_model_made_again_answers_with_its_new_settings_without_a_restart(api):
    def chat(**options) -> dict:
        r = api.post("/api/chat", json={"model": "again", "stream": False, "options": options,
                                        "messages": [{"role": "user", "content": "Name a colour."}]})  # fmt: skip
        assert r.status_code == 200, r.text
        return r.json()

    assert create(api, model="again", **{"from": STARTER}, parameters={"num_predict": 3, "temperature": 0}).status_code == 200
    try:
        assert chat()["eval_count"] == 3
        loaded = next(lm for lm in api.app.state.manager.loaded() if lm.model.name == "again")
        assert create(api, model="again", **{"from": STARTER}, parameters={"num_predict": 2, "temperature": 0}).status_code == 200
        first = chat()
        assert first["eval_count"] == 2  # the new defaults at once, the model still loaded as it was
        assert next(lm for lm in api.app.state.manager.loaded() if lm.model.name == "again") is loaded
        template = "{{ range .Messages }}{{ .Content }}\n{{ end }}"  # another template: loaded anew with it
        assert create(api, model="again", **{"from": STARTER}, template=template, parameters={"num_predict": 2}).status_code == 200
        plain = chat(temperature=0)
        assert next(lm for lm in api.app.state.manager.loaded() if lm.model.name == "again") is not loaded
        assert plain["prompt_eval_count"] < first["prompt_eval_count"]  # no ChatML markers around the one message
    finally:
        api.request("DELETE", "/api/delete", json={"model": "again"})


def test_a_model_made_with_its_own_defaults_answers_from_the_weights_its_base_loaded(api):
    """As Ollama's models share a runner: one load for both names, each answering with its own settings; the base
    unloaded, the other still answers from those weights; both gone, nothing of them stays loaded."""
    def chat(model: str) -> dict:
        r = api.post("/api/chat", json={"model": model, "stream": False, "options": {"temperature": 0, "num_predict": 4},
                                        "messages": [{"role": "user", "content": "Name a colour."}]})  # fmt: skip
        assert r.status_code == 200, r.text
        return r.json()

    manager = api.app.state.manager
    assert create(api, model="pirate", **{"from": STARTER}, system="Talk like a pirate.").status_code == 200
    try:
        base = chat(STARTER)
        pirate = chat("pirate")
        assert pirate["prompt_eval_count"] != base["prompt_eval_count"]  # its own system prompt
        entries = {lm.model.name: lm for lm in manager.loaded()}
        shared = entries["pirate"].backend
        assert entries[STARTER].backend is shared
        shown = {m["name"]: m for m in api.get("/api/ps").json()["models"]}
        assert {"pirate:latest", f"{STARTER}:latest"} <= set(shown)
        stats = {e["name"]: e for e in api.get("/api/stats").json()["loaded"]}  # `hearth ps` counts the load once
        assert stats["pirate"]["shares_weights_with"] == [STARTER] and stats[STARTER]["shares_weights_with"] == ["pirate"]
        assert stats["pirate"]["size_bytes"] == stats[STARTER]["size_bytes"]
        gauges = [line.split()[0] for line in api.get("/metrics").text.splitlines()
                  if line.startswith("hearth_requests_running{") and ("pirate" in line or STARTER in line)]  # fmt: skip
        assert gauges == [f'hearth_requests_running{{model="{STARTER}"}}'], gauges  # one engine, counted once
        # a refusal of the shared weights names the model asked for, not the one that loaded them
        r = api.post("/api/chat", json={"model": "pirate", "stream": False,
                                        "messages": [{"role": "user", "content": "What is this?", "images": [b64(checkerboard())]}]})  # fmt: skip
        assert r.status_code == 400 and "Model 'pirate' cannot read images" in r.json()["error"], r.text
        r = api.post("/api/embed", json={"model": "pirate", "input": "a colour"})
        assert r.status_code == 200 and len(r.json()["embeddings"]) == 1, r.text
        r = api.post("/api/models/unload", json={"model": STARTER})  # `hearth unload`, the app's Unload
        assert r.status_code == 200 and r.json()["unloaded"] and r.json()["weights_kept_for"] == ["pirate"]
        assert [lm.model.name for lm in manager.loaded() if lm.backend is shared] == ["pirate"]
        assert chat("pirate")["eval_count"] == 4
        chat(STARTER)  # loaded again: from the same weights
        r = api.post("/api/generate", json={"model": "pirate", "keep_alive": 0})  # `ollama stop`
        assert r.status_code == 200 and r.json()["done_reason"] == "unload"
        assert [lm.model.name for lm in manager.loaded() if lm.backend is shared] == [STARTER]
        r = api.post("/api/models/unload", json={"model": STARTER})
        assert r.json()["unloaded"] and r.json()["weights_kept_for"] == []
    finally:
        api.request("DELETE", "/api/delete", json={"model": "pirate"})
    assert not any(lm.backend is shared for lm in manager.loaded())


def test_a_file_served_by_its_path_stays_loaded_beside_a_registered_model_of_its_name(tmp_path, starter_path):
    import os

    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path / "home")
    manager = ModelManager(registry, options=LoadOptions(n_ctx=256, n_seq_max=1))
    try:
        mine = tmp_path / "mine" / f"{STARTER}.gguf"  # `hearth serve --model PATH`: a file with the starter's name
        mine.parent.mkdir()
        os.link(starter_path, mine)
        served = manager.load(str(mine), allow_paths=True)
        assert served.model.source == "path" and served.model.name == STARTER
        assert manager.acquire(STARTER) is served  # not loaded again from the registered starter's file
        manager.release(served)
    finally:
        manager.close()
        registry.close()


def test_the_model_list_and_a_delete_say_whose_files_stay(api, tmp_path):
    digest = upload(api, make_gguf(tmp_path / "own.gguf", label="Q8_0", n_floats=1000, seed=31))
    assert create(api, model="own", files={"own.gguf": digest}).status_code == 200
    assert create(api, model="own-hot", **{"from": "own"}, parameters={"temperature": 1.2}).status_code == 200
    listed = {m["name"]: m for m in api.get("/api/models").json()["models"]}
    assert listed["own-hot"]["made_from"] == "own" and listed[STARTER]["made_from"] is None
    assert not listed["own"]["deletes_files"] and not listed["own-hot"]["deletes_files"]  # each uses them
    assert not listed[STARTER]["deletes_files"]  # the starter ships with Hearth
    path = api.registry.get("own").path
    gone = api.delete("/api/models/own")
    assert gone.json() == {"deleted": "own", "files_kept": True,
                           "message": f"Removed own; its files at {path} were left in place."}  # fmt: skip
    assert {m["name"]: m for m in api.get("/api/models").json()["models"]}["own-hot"]["deletes_files"]
    assert api.delete("/api/models/own-hot").json() == {"deleted": "own-hot"} and not path.exists()


def test_a_remote_providers_model_is_no_base_for_a_local_one(api):
    remotes = api.app.state.remotes
    remotes.store.add("acme", "http://127.0.0.1:9/v1")  # (never reached: its name alone says whose the model is)
    try:
        refused = create(api, model="mine", **{"from": "acme/big-model"})
        assert refused.status_code == 400 and refused.json()["error"] == (
            "'acme/big-model' is a remote provider's model; make a model from a local one (a Hub repo of that name: "
            "hf.co/acme/big-model).")  # fmt: skip
    finally:
        remotes.store.remove("acme")


def test_a_variant_in_another_variants_folder_keeps_its_file_when_that_one_goes(tmp_path):
    from engine.catalog.registry import ModelRegistry
    from tests.engine.catalog.conftest import llama_config, make_safetensors

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    folder = registry.home / "models" / "TheOrg" / "Mixed"  # a repo of safetensors (the BF16 variant) and a GGUF
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(llama_config(layers=2, heads=4, kv_heads=2, hidden=64, ctx=512))
    (folder / "model.safetensors").write_bytes(make_safetensors(1000))
    make_gguf(folder / "mixed.Q2_K.gguf", label="Q8_0", n_floats=1000)
    whole = registry.register(folder, source="hub", repo="TheOrg/Mixed", variant="BF16")
    gguf = registry.register(folder / "mixed.Q2_K.gguf", source="hub", repo="TheOrg/Mixed", variant="Q2_K")
    assert registry.shares_files(whole) and registry.shares_files(gguf)
    registry.remove(whole.name, delete_files=True)
    assert gguf.path.exists()
    registry.remove(gguf.name, delete_files=True)
    assert not gguf.path.exists()
    registry.close()
