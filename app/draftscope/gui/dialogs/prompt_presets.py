"""The system prompt's presets (Settings ▸ Generation): the built-in ones and the user's own.
Choosing one fills the prompt; the picker names the preset the prompt's text is (Custom when it is
none); the prompt's text can be saved as a preset under a name, and a user's preset deleted."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from draftscope.gui.form_widgets import hint, row, show_error
from draftscope.storage.presets import BUILTIN_PRESETS, MAX_PRESETS, preset_problem
from draftscope.storage.settings import MAX_SYSTEM_PROMPT

CUSTOM = "Custom text"


class PresetPicker:
    """Widgets for the form beside ``prompt`` (the system prompt's edit): ``chooser`` (the preset
    combo and Delete) and ``saver`` (a name and Save as preset). ``user``: the user's presets."""

    def __init__(self, prompt: QPlainTextEdit) -> None:
        self.prompt = prompt
        self.user: dict[str, str] = {}
        self._syncing = False  # the combo follows the text: no filling back
        self.combo = QComboBox(objectName="presetCombo")
        self.combo.setMinimumWidth(220)
        self.combo.currentIndexChanged.connect(self._chosen)
        self.delete_button = QPushButton("Delete", objectName="deletePresetButton")
        self.delete_button.setToolTip("Delete this preset of yours (the built-in ones stay)")
        self.delete_button.clicked.connect(self._delete)
        self.chooser = row(self.combo, self.delete_button, stretch_first=False)
        self.name_edit = QLineEdit(objectName="presetNameEdit")
        self.name_edit.setPlaceholderText("a name for the prompt above")
        self.name_edit.returnPressed.connect(self._save)
        self.save_button = QPushButton("Save as preset", objectName="savePresetButton")
        self.save_button.clicked.connect(self._save)
        self.status = hint("", wrap=True, objectName="presetStatus")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.saver = QWidget()
        column = QVBoxLayout(self.saver)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(row(self.name_edit, self.save_button))
        column.addWidget(self.status)
        self.status.hide()
        prompt.textChanged.connect(self._sync)
        self.show_presets({})

    def presets(self) -> dict[str, str]:
        """Every preset the picker offers, built-in first."""
        return {**BUILTIN_PRESETS, **self.user}

    def show_presets(self, user: dict[str, str]) -> None:
        """Offer the built-in presets and ``user``'s; select the one the prompt holds."""
        self.user = dict(user)
        self._syncing = True
        try:
            self.combo.clear()
            for name, text in BUILTIN_PRESETS.items():
                self._add(name, text)
            if self.user:
                self.combo.insertSeparator(self.combo.count())
            for name in sorted(self.user, key=str.casefold):
                self._add(name, self.user[name])
            self.combo.insertSeparator(self.combo.count())
            self.combo.addItem(CUSTOM, "")  # no preset's name is empty
        finally:
            self._syncing = False
        self._sync()

    def _add(self, name: str, text: str) -> None:
        self.combo.addItem(name, name)
        tip = text if len(text) <= 400 else text[:400] + "…"
        self.combo.setItemData(
            self.combo.count() - 1, tip or "No system prompt: the model's own default", Qt.ItemDataRole.ToolTipRole
        )

    def _chosen(self, _index: int) -> None:
        name = self.combo.currentData()
        self.delete_button.setEnabled(name in self.user)
        if self._syncing or not name:
            return
        text = self.presets()[name]
        if self.prompt.toPlainText() != text:
            self.prompt.setPlainText(text)

    def _sync(self) -> None:
        """Select the preset the prompt's text is (the chosen one first), else Custom."""
        text, name = self.prompt.toPlainText(), self.combo.currentData()
        if not (name and self.presets().get(name) == text):
            name = next((n for n, t in self.presets().items() if t == text), "")
        self._syncing = True
        try:
            self.combo.setCurrentIndex(self.combo.findData(name))
        finally:
            self._syncing = False
        self._chosen(self.combo.currentIndex())

    def _save(self) -> None:
        name, text = self.name_edit.text().strip(), self.prompt.toPlainText()
        why = preset_problem(name, text, max_text=MAX_SYSTEM_PROMPT)
        if why is None and not text.strip():
            why = "the system prompt is empty: write the prompt to save first"
        if why is None and name not in self.user and len(self.user) >= MAX_PRESETS:
            why = f"at most {MAX_PRESETS} presets: delete one first"
        if why is not None:
            self._say(why[:1].upper() + why[1:] + ".", error=True)
            return
        self.show_presets({**self.user, name: text})
        self.combo.setCurrentIndex(self.combo.findData(name))
        self.name_edit.clear()
        self._say(f"Saved as {name!r} (kept when you press OK).")

    def _delete(self) -> None:
        name = self.combo.currentData()
        if name not in self.user:
            return
        self.show_presets({k: v for k, v in self.user.items() if k != name})
        self._say(f"Deleted {name!r} (the prompt's text stays; OK keeps the change).")

    def _say(self, text: str, *, error: bool = False) -> None:
        show_error(self.status, error)
        self.status.setEnabled(error)  # a hint's grey unless it is an error
        self.status.setText(text)
        self.status.show()
