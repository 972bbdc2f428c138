"""The worker's catalog services: one download manager, built once, however many threads ask."""

from __future__ import annotations

import threading

import pytest

from engine.catalog.download_job import DownloadState
from engine.catalog.downloads import DownloadManager
from engine.catalog.services import CatalogServices
from engine.errors import InvalidRequest, Overloaded
from tests.engine.catalog.conftest import TINY
from tests.engine.catalog.test_downloads import Q4, wait_until


def test_threads_racing_for_the_downloads_get_one_manager_that_resumes_once(registry, client, hub):
    hub.throttle[Q4] = 0.05
    first = DownloadManager(registry, hub=client)
    job = first.start(TINY, "Q4_K_M")
    wait_until(lambda: job.status().bytes_done > 50_000)
    first.close()  # left for the next worker to resume, as after a quit
    hub.throttle.clear()

    built: list[DownloadManager] = []

    def make(reg, hub_client):
        manager = DownloadManager(reg, hub=hub_client)
        built.append(manager)
        return manager

    services = CatalogServices(registry, endpoint=hub.url, make_downloads=make)
    gate = threading.Barrier(8)
    seen: list[DownloadManager] = []

    def ask() -> None:
        gate.wait()
        seen.append(services.downloads)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert len(built) == 1 and len(seen) == 8 and all(m is built[0] for m in seen)
        (again,) = built[0].jobs()
        assert again.id == job.id and again.wait(30).state is DownloadState.COMPLETED
        assert registry.get(f"{TINY}:Q4_K_M") is not None
    finally:
        services.close()


def test_close_while_the_manager_is_being_built_closes_it(registry, client, hub):
    entered, release = threading.Event(), threading.Event()
    built: list[DownloadManager] = []

    def slow_make(reg, hub_client):
        manager = DownloadManager(reg, hub=hub_client)
        built.append(manager)
        entered.set()
        release.wait(10)
        return manager

    services = CatalogServices(registry, endpoint=hub.url, make_downloads=slow_make)
    asker = threading.Thread(target=lambda: services.downloads)
    asker.start()
    assert entered.wait(10)
    closer = threading.Thread(target=services.close)  # the worker stopping meanwhile
    closer.start()
    closer.join(0.3)
    release.set()
    asker.join(10)
    closer.join(10)
    (manager,) = built
    with pytest.raises(InvalidRequest, match="closed"):
        manager.start(TINY, "Q4_K_M")  # closed: it resumes and starts nothing after the worker stopped
    with pytest.raises(Overloaded, match="stopping"):
        _ = services.downloads


def test_a_worker_with_nothing_to_resume_builds_no_manager_until_one_is_asked_for(registry, client, hub):
    """Starting a worker resumes the downloads the last one left; with none, the manager and its Hub client (a
    second of imports in every worker) wait for the first request that needs them."""
    built: list[DownloadManager] = []

    def make(reg, hub_client):
        built.append(DownloadManager(reg, hub=hub_client))
        return built[-1]

    services = CatalogServices(registry, endpoint=hub.url, make_downloads=make)
    try:
        services.resume_downloads()
        assert built == []
        hub.throttle[Q4] = 0.05
        job = services.downloads.start(TINY, "Q4_K_M")  # asked for: built now
        wait_until(lambda: job.status().bytes_done > 50_000)
    finally:
        services.close()  # the download is left running, for the next worker
    hub.throttle.clear()
    again = CatalogServices(registry, endpoint=hub.url, make_downloads=make)
    try:
        again.resume_downloads()
        assert len(built) == 2
        (resumed,) = built[1].jobs()
        assert resumed.id == job.id and resumed.wait(30).state is DownloadState.COMPLETED
    finally:
        again.close()
