"""The Models page's load settings dialog (the fit plan follows the values; saving reaches the worker) and its
"Model folders" section (add, offline, back, remove), against the session's real worker."""

from __future__ import annotations

import os

from engine.server.api_models import LoadSettings
from engine.starter import STARTER_NAME
from tests.app.test_models_page import table_rows


def _call(qtbot, call):
    with qtbot.waitSignal(call.succeeded, timeout=30_000) as blocker:
        pass
    return blocker.args[0]


def test_the_settings_dialog_follows_the_values_with_the_fit_plan_and_saves_them(qtbot, window):
    window.nav.select(1)
    page = window.models_page
    page.engine_ready()
    qtbot.waitUntil(lambda: STARTER_NAME in table_rows(page), timeout=10_000)
    page.view.selectRow(list(table_rows(page)).index(STARTER_NAME))
    page.settings_button.click()
    from app.widgets.model_settings_dialog import ModelSettingsDialog

    (dialog,) = [d for d in page.findChildren(ModelSettingsDialog) if d.isVisible()]
    try:
        qtbot.waitUntil(lambda: dialog.fit_facts is not None, timeout=30_000)
        assert dialog.settings().n_ctx is None  # nothing saved: Hearth chooses
        dialog.ctx.setValue(1536)
        dialog.kv_type.setCurrentText("q8_0")
        qtbot.waitUntil(lambda: dialog.fit_facts is not None and dialog.fit_facts.n_ctx == 1536, timeout=30_000)
        assert dialog.fit_facts.kv_type == "q8_0" and dialog.fit_label.text().startswith("Fits: ")
        assert "1,536" in dialog.fit_label.text()
        # how fast it would answer with these values, with the basis (the tests' fixed figures for this machine)
        assert "\nSpeed: about " in dialog.fit_label.text() and "GB/s measured" in dialog.fit_label.text()
        assert "with all 1,536" in dialog.fit_label.text()
        dialog.ctx.setValue(1 << 20)  # the plan follows: a million tokens, or what would fit instead
        qtbot.waitUntil(lambda: dialog.fit_facts is not None and (dialog.fit_facts.n_ctx == 1 << 20 or not dialog.fit_facts.fits),
                        timeout=30_000)  # fmt: skip
        said = "1,048,576" if dialog.fit_facts.fits else "Does not fit: "
        assert said in dialog.fit_label.text()
        dialog.ctx.setValue(1536)
        with qtbot.waitSignal(dialog.saved, timeout=30_000) as saved:
            dialog.buttons.accepted.emit()
        assert saved.args[0].settings.n_ctx == 1536 and not dialog.isVisible()
        assert "every load of" in page.message.text()
        answer = _call(qtbot, window.api.model_settings(STARTER_NAME))
        assert (answer.settings.n_ctx, answer.settings.kv_type, answer.settings.cpu_moe) == (1536, "q8_0", None)
    finally:  # the session's worker goes on with its own settings
        _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings()))
        dialog.close()


def _open_dialog(qtbot, window):
    from app.widgets.model_settings_dialog import ModelSettingsDialog

    window.nav.select(1)
    page = window.models_page
    page.engine_ready()
    qtbot.waitUntil(lambda: STARTER_NAME in table_rows(page), timeout=10_000)
    page.view.selectRow(list(table_rows(page)).index(STARTER_NAME))
    page.settings_button.click()
    (dialog,) = [d for d in page.findChildren(ModelSettingsDialog) if d.isVisible()]
    qtbot.waitUntil(lambda: dialog.fit_facts is not None, timeout=30_000)  # the saved settings are shown by then
    return dialog


def test_the_speculative_decoding_choice_is_saved_with_the_rest_and_shown_again(qtbot, window):
    dialog = _open_dialog(qtbot, window)
    try:
        assert dialog.speculative.currentText() == "Automatic" and dialog.settings().speculative is None
        assert [dialog.speculative.itemText(i) for i in range(dialog.speculative.count())] == [
            "Automatic", "Prompt lookup", "Off"]  # fmt: skip
        dialog.speculative.setCurrentText("Off")
        with qtbot.waitSignal(dialog.saved, timeout=30_000) as saved:
            dialog.buttons.accepted.emit()
        assert saved.args[0].settings.speculative == "off"
        answer = _call(qtbot, window.api.model_settings(STARTER_NAME))
        assert (answer.settings.speculative, answer.settings.n_ctx, answer.settings.kv_type) == ("off", None, None)
        again = _open_dialog(qtbot, window)
        assert again.speculative.currentText() == "Off"
        again.speculative.setCurrentText("Prompt lookup")
        with qtbot.waitSignal(again.saved, timeout=30_000):
            again.buttons.accepted.emit()
        assert _call(qtbot, window.api.model_settings(STARTER_NAME)).settings.speculative == "ngram"
        _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings(speculative="auto")))
        kept = _open_dialog(qtbot, window)  # saved as "auto" (by `hearth load`): shown as Automatic, kept so
        assert kept.speculative.currentText() == "Automatic" and kept.settings().speculative == "auto"
        kept.close()
        _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings(speculative=f"draft:{STARTER_NAME}")))
        drafts = _open_dialog(qtbot, window)  # a draft model (`hearth load --speculative draft:MODEL`): shown, kept
        assert drafts.speculative.currentText() == f"Draft model: {STARTER_NAME}"
        assert drafts.settings().speculative == f"draft:{STARTER_NAME}"
        drafts.close()
    finally:  # the session's worker goes on with its own settings
        _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings()))
        dialog.close()


def test_model_folders_are_added_shown_offline_and_removed(qtbot, window, tmp_path, starter_path):
    window.nav.select(1)
    page = window.models_page
    page.engine_ready()
    section = page.folders
    qtbot.waitUntil(lambda: len(section.folders) == 1, timeout=10_000)
    assert section.folders[0].downloads and "downloads go here" in section.list.item(0).text()
    drive = tmp_path / "drive"
    (drive / "UiOrg" / "Folder-GGUF").mkdir(parents=True)
    os.link(starter_path, drive / "UiOrg" / "Folder-GGUF" / "model-Q4_1.gguf")
    name = "UiOrg/Folder-GGUF:Q4_1"
    try:
        section.add(str(drive))
        qtbot.waitUntil(lambda: len(section.folders) == 2, timeout=30_000)
        assert section.list.item(1).text() == f"{drive}  —  1 model"
        qtbot.waitUntil(lambda: name in table_rows(page), timeout=30_000)  # the page's list follows
        drive.rename(tmp_path / "unplugged")
        section.refresh()
        qtbot.waitUntil(lambda: len(section.folders) == 2 and not section.folders[1].online, timeout=30_000)
        assert "offline" in section.list.item(1).text()
        page.models.refresh()
        qtbot.waitUntil(lambda: name not in table_rows(page), timeout=30_000)
        (tmp_path / "unplugged").rename(drive)
        page.models.refresh()
        qtbot.waitUntil(lambda: name in table_rows(page), timeout=30_000)
        section.list.setCurrentRow(1)
        section.remove_button.click()
        qtbot.waitUntil(lambda: len(section.folders) == 1, timeout=30_000)
        qtbot.waitUntil(lambda: name not in table_rows(page), timeout=30_000)
        assert (drive / "UiOrg" / "Folder-GGUF" / "model-Q4_1.gguf").is_file()
    finally:
        if len(section.folders) > 1:
            _call(qtbot, window.api.remove_folder(str(drive)))


def test_a_folder_listing_asked_before_an_add_is_not_shown_over_the_add(qtbot, window, tmp_path):
    """The page asks for the folders (opening it), then the user adds one and its answer comes first: the older
    listing's answer, arriving after, must not take the new folder off the list again."""
    from app.widgets.model_folders import ModelFoldersSection
    from engine.server.api_models import ModelFolder

    section = ModelFoldersSection(window.api)
    qtbot.addWidget(section)
    old = [ModelFolder(path="/models", online=True, downloads=True)]
    new = [*old, ModelFolder(path=str(tmp_path), online=True, models=1)]
    listing, add = section._ask(), section._ask()  # the order the two calls were made in
    section.set_folders(new, add)  # the add answered first
    section.set_folders(old, listing)
    assert [f.path for f in section.folders] == ["/models", str(tmp_path)]
    assert section.list.item(1).text() == f"{tmp_path}  —  1 model"
    section.set_folders(old, section._ask())  # a listing asked after the add is shown
    assert [f.path for f in section.folders] == ["/models"]


def test_saving_the_dialog_keeps_the_settings_it_does_not_show(qtbot, window):
    # `hearth load --parallel 2 --save` saved a slot count the dialog has no field for: saving the dialog keeps it
    _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings(n_seq_max=2, n_ctx=1024)))
    dialog = _open_dialog(qtbot, window)
    try:
        dialog.ctx.setValue(1536)
        with qtbot.waitSignal(dialog.saved, timeout=30_000):
            dialog.buttons.accepted.emit()
        answer = _call(qtbot, window.api.model_settings(STARTER_NAME))
        assert (answer.settings.n_seq_max, answer.settings.n_ctx) == (2, 1536)
    finally:  # the session's worker goes on with its own settings
        _call(qtbot, window.api.save_model_settings(STARTER_NAME, LoadSettings()))
        dialog.close()
