"""Models that see, in the terminal as a user runs it: `hearth search` and `pull` against a hub repo with
projectors, `hearth import` pairing the projector beside a model, `hearth models` marking it, and `hearth chat
--image` answering a picture (and refusing a file that is not one, or a model that cannot see)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.engine.catalog.test_catalog_cli import hearth, one_clear_line
from tests.engine.catalog.test_vision_catalog import F16, MODEL_FILE, REPO, vision_hub  # noqa: F401 (a fixture)
from tests.engine.fit.speed_figures import keep_figures
from tests.engine.server import tiny_vision
from tests.engine.server.vision_fixtures import QUESTION, checkerboard, gradient


@pytest.fixture
def env(vision_hub, tmp_path):  # noqa: F811
    vision_hub.reset()
    environ = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    return {**environ, "HF_ENDPOINT": vision_hub.url, "HEARTH_HOME": str(keep_figures(tmp_path / "home")), "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


def test_search_and_pull_show_and_fetch_the_projector_and_models_marks_it(env, tmp_path):
    found = hearth(env, "search", "tiny", "--no-fit")
    assert found.returncode == 0, found.stderr
    assert f"{REPO}  [gguf,vision]" in found.stdout and "TheOrg/Tiny-Text-GGUF  [gguf]" in found.stdout
    pulled = hearth(env, "pull", REPO)
    assert pulled.returncode == 0, pulled.stderr
    assert "[vision]" in pulled.stdout and f"With the projector {F16}" in pulled.stdout
    folder = tmp_path / "home" / "models" / "TheOrg" / "Tiny-Vision-GGUF"
    assert (folder / MODEL_FILE).is_file() and (folder / F16).read_bytes() == tiny_vision.MMPROJ_PATH.read_bytes()
    listed = hearth(env, "models")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(f"{REPO}:Q8_0"))
    assert line.rstrip().endswith("[vision]")
    (entry,) = [m for m in json.loads(hearth(env, "models", "--json").stdout) if m["name"] == f"{REPO}:Q8_0"]
    assert entry["capabilities"] == ["tools", "vision"] and entry["mmproj"] == str(folder / F16)  # as `hearth show` says
    refused = hearth(env, "pull", f"{REPO}:Q8_0", "--mmproj-variant", "Q4_0")
    assert "has no projector 'Q4_0'; choose one of: F16, BF16 (or none)" in one_clear_line(refused)


def test_import_pairs_the_projector_beside_and_chat_sends_pictures(env, tmp_path):
    folder = tmp_path / "lmstudio" / "TheOrg" / "Tiny-Vision-GGUF"
    folder.mkdir(parents=True)
    shutil.copy(tiny_vision.MODEL_PATH, folder / MODEL_FILE)
    shutil.copy(tiny_vision.MMPROJ_PATH, folder / "mmproj-tiny-vision-f16.gguf")
    imported = hearth(env, "import", str(folder / MODEL_FILE), "--name", "eyes")
    assert imported.returncode == 0, imported.stderr
    assert "It sees: paired with the projector" in imported.stdout
    pictures = {}
    for name, png in (("check.png", checkerboard()), ("gradient.png", gradient())):
        (tmp_path / name).write_bytes(png)
        pictures[name] = str(tmp_path / name)

    def ask(*images: str) -> str:
        args = [a for path in images for a in ("--image", path)]
        out = hearth(env, "chat", "--local", QUESTION, "--model", "eyes", "-t", "0", "--max-tokens", "8", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    seen = ask(pictures["check.png"])
    assert seen != ask(pictures["gradient.png"])  # it sees which picture it was given
    # a picture's path in the message is sent as the picture, as `ollama run` sends it (the message without it)
    named = hearth(env, "chat", "--local", f"{QUESTION} '{pictures['check.png']}'", "--model", "eyes", "-t", "0",
                   "--max-tokens", "8")  # fmt: skip
    assert named.returncode == 0 and named.stdout == seen and f"Added image '{pictures['check.png']}'" in named.stderr

    (tmp_path / "notes.png").write_text("not a picture")
    broken = hearth(env, "chat", QUESTION, "--model", "eyes", "--image", str(tmp_path / "notes.png"))
    assert "notes.png is not a readable image" in one_clear_line(broken)
    blind = hearth(env, "import", str(folder / MODEL_FILE), "--name", "blind", "--no-mmproj")
    assert blind.returncode == 0 and "It sees" not in blind.stdout
    refused = hearth(env, "chat", QUESTION, "--model", "blind", "--image", pictures["check.png"])
    assert "Model 'blind' cannot see images" in one_clear_line(refused)


def test_a_picture_goes_as_a_data_url_part_and_comes_back_as_the_same_bytes(tmp_path):
    from engine.commands.chat_images import chat_messages, image_part, user_message
    from engine.errors import InvalidRequest
    from engine.types import MEDIA_MARKER

    (tmp_path / "a.png").write_bytes(checkerboard())
    turn = user_message("Look.", [image_part(tmp_path / "a.png")])
    assert turn["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    (message,) = chat_messages([turn])
    assert message.content == "Look." + MEDIA_MARKER and message.media[0].data == checkerboard()
    with pytest.raises(InvalidRequest, match="Cannot read the image .*gone.png"):
        image_part(tmp_path / "gone.png")
    from engine.commands.chat_images import pictures_in

    (tmp_path / "my pic.png").write_bytes(gradient())
    spaced = str(tmp_path / "my pic.png").replace(" ", "\\ ")
    text, parts = pictures_in(f"Compare and/or 1/2 {tmp_path}/a.png with {spaced}, not {tmp_path}/gone.png or "
                              f"https://x.org/b.png.")  # fmt: skip
    assert text == f"Compare and/or 1/2  with , not {tmp_path}/gone.png or https://x.org/b.png." and len(parts) == 2
    assert parts[1] == image_part(tmp_path / "my pic.png")
    # as `ollama run` finds them too: a path with plain spaces, in quotes after an apostrophe, in backticks, with 's
    (tmp_path / "rv pics").mkdir()
    (tmp_path / "rv pics" / "my pic.png").write_bytes(gradient())
    spaced, plain = tmp_path / "rv pics" / "my pic.png", tmp_path / "a.png"
    for said, left, path in ((f"What's in '{spaced}'?", "What's in ?", spaced), (f"What is in {spaced}", "What is in", spaced),
                             (f"Look at `{plain}`.", "Look at .", plain), (f"Is {plain}'s square red?", "Is 's square red?", plain),
                             (f"In {plain}'s, what?", "In 's, what?", plain)):  # fmt: skip
        assert pictures_in(said) == (left, [image_part(path)]), said
    assert pictures_in("   indented\n  x = 1") == ("   indented\n  x = 1", [])  # no picture: the text as it was
    many = [tmp_path / f"p{i}.png" for i in range(16)]  # as many as a message takes, each attached
    for path in many:
        path.write_bytes(gradient())
    assert len(pictures_in("Describe " + " ".join(map(str, many)))[1]) == 16
    missing = " ".join(f"/static/img/icon{i}.png" for i in range(12))  # paths to no file do not crowd out a real one
    assert pictures_in(f"{missing} What is in {plain}?") == (f"{missing} What is in ?", [image_part(plain)])
    nested = tmp_path / "b" / Path(*tmp_path.parts[1:]) / "a.png"  # a path that holds the other's whole name
    nested.parent.mkdir(parents=True)
    nested.write_bytes(gradient())
    assert pictures_in(f"Compare {plain} with {nested}") == ("Compare  with", [image_part(plain), image_part(nested)])
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(InvalidRequest, match="notes.png is not a readable image"):
        pictures_in(f"Read {tmp_path}/notes.png")
