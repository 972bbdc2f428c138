"""Faults of a real worker under its supervisor: a model file that went bad after it was registered
is refused at load without a crash; a worker SIGKILLed during a model load or a download is
restarted, the model loads, and the download resumes where it stopped."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time

import httpx
import pytest

from engine.catalog.registry import ModelRegistry
from engine.starter import STARTER_NAME
from engine.worker.supervisor import WorkerEvent, WorkerSupervisor
from tests.engine.catalog.conftest import TINY, _fake_hub, hub, make_gguf  # noqa: F401 - the fixtures
from tests.engine.catalog.test_downloads import Q4, served


class Watched:
    """A supervised worker and the events it reported."""

    def __init__(self, home, hub_url: str) -> None:
        self.readies = 0
        self.events: list[WorkerEvent] = []
        self._cond = threading.Condition()
        self.sup = WorkerSupervisor(
            env={"HEARTH_HOME": str(home), "HF_ENDPOINT": hub_url},
            extra_args=["--backend", "llamacpp", "--ctx", "512", "--parallel", "2", "--threads", "1"],
            log_path=home / "worker.log",
            on_event=self._on_event,
            startup_timeout=180,
            initial_backoff=0.2,
        )
        self.sup.start()

    def _on_event(self, event: WorkerEvent) -> None:
        with self._cond:
            self.events.append(event)
            self.readies += event.kind == "ready"
            self._cond.notify_all()

    def kill_and_wait_for_restart(self) -> None:
        before = self.readies
        os.kill(self.sup.pid, signal.SIGKILL)
        with self._cond:
            assert self._cond.wait_for(lambda: self.readies > before, 180), [e.kind for e in self.events]

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.sup.base_url.removesuffix("/v1"), headers=self.sup.headers(), timeout=120)

    def state(self, name: str) -> str:
        with self.http() as c:
            return next((m["state"] for m in c.get("/api/models").json()["models"] if m["name"] == name), "missing")


def chat(c: httpx.Client, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}
    return c.post("/v1/chat/completions", json=body)


@pytest.fixture(scope="module")
def home(tmp_path_factory, starter_path):
    home = tmp_path_factory.mktemp("faults-home")
    registry = ModelRegistry(home)
    registry.register(starter_path, name="victim")  # a second name for the starter's file
    for name in ("cut", "hostile"):  # sound when registered; they go bad below
        make_gguf(home / f"{name}.gguf", label="Q8_0", n_floats=65536)
        registry.register(home / f"{name}.gguf", name=name)
    registry.close()
    return home


@pytest.fixture(scope="module")
def worker(home, _fake_hub):  # noqa: F811
    w = Watched(home, _fake_hub.url)
    yield w
    w.sup.stop()


def test_a_model_file_damaged_after_import_is_refused_at_load_and_the_worker_lives(worker, home):
    cut = home / "cut.gguf"
    with cut.open("r+b") as f:
        f.truncate(cut.stat().st_size // 2)  # a disk or copy error after it was registered
    hostile = home / "hostile.gguf"
    with hostile.open("r+b") as f:
        f.seek(8)
        f.write(struct.pack("<Q", 1 << 62))  # a header that claims 2**62 tensors
    crashes_before = [e.kind for e in worker.events].count("crashed")  # the other tests kill it on purpose
    with worker.http() as c:
        for name, words in (("cut", "lies past the end of the file"), ("hostile", "declares 4611686018427387904 tensors")):
            r = chat(c, name)
            assert 400 <= r.status_code < 600, r.text
            message = r.json()["error"]["message"]
            assert words in message and f"{name}.gguf" in message and "download or copy it again" in message
        assert c.get("/health").status_code == 200
        assert chat(c, STARTER_NAME).status_code == 200  # the worker serves on
    assert [e.kind for e in worker.events].count("crashed") == crashes_before


def test_a_worker_killed_while_loading_a_model_loads_it_after_the_restart(worker):
    result: list[object] = []

    def load() -> None:
        try:
            with worker.http() as c:
                result.append(c.post("/api/models/load", json={"model": "victim"}).status_code)
        except httpx.HTTPError as exc:
            result.append(exc)

    # "victim" names the starter's file: while the starter is loaded (another test asked it something), "victim"
    # answers from its weights at once, with no load to catch
    with worker.http() as c:
        c.post("/api/models/unload", json={"model": STARTER_NAME})
    for _ in range(5):  # a load takes well under a second: catch it in the act
        thread = threading.Thread(target=load)
        thread.start()
        deadline = time.monotonic() + 30
        while worker.state("victim") != "loading" and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if worker.state("victim") == "loading":
            break
        thread.join()
        with worker.http() as c:
            c.post("/api/models/unload", json={"model": "victim"})
    else:
        pytest.fail("never saw the model loading")
    worker.kill_and_wait_for_restart()
    thread.join(30)
    assert isinstance(result[-1], httpx.HTTPError)  # the load was cut off with the worker

    with worker.http() as c:
        r = c.post("/api/models/load", json={"model": "victim"})
        assert r.status_code == 200 and r.json()["state"] == "loaded", r.text
        answer = chat(c, "victim")
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]


def test_a_worker_killed_mid_download_resumes_it_after_the_restart(worker, home, hub):  # noqa: F811
    hub.throttle[Q4] = 0.05
    with worker.http() as c:
        job = c.post("/api/downloads", json={"repo": TINY, "variant": "Q4_K_M"}).json()

        def progress(client: httpx.Client) -> dict:
            return next(d for d in client.get("/api/downloads").json()["downloads"] if d["id"] == job["id"])

        deadline = time.monotonic() + 60
        while progress(c)["bytes_done"] < 100_000:
            assert time.monotonic() < deadline, progress(c)
            time.sleep(0.05)
    worker.kill_and_wait_for_restart()
    hub.throttle.clear()

    with worker.http() as c:
        deadline = time.monotonic() + 60
        while (status := progress(c))["state"] != "done":  # the API's word for completed
            assert status["state"] in ("queued", "running", "paused") and time.monotonic() < deadline, status
            time.sleep(0.1)
        names = {m["name"] for m in c.get("/api/models").json()["models"]}
    assert f"{TINY}:Q4_K_M" in names
    resumed_at = hub.ranges(Q4)[-1]
    assert resumed_at is not None and resumed_at.startswith("bytes=") and resumed_at != "bytes=0-"
    registry = ModelRegistry(home)
    try:
        assert registry.get(f"{TINY}:Q4_K_M").path.read_bytes() == served(hub, Q4)
    finally:
        registry.close()
