"""Settings ▸ Generation's sampling rows, generated from SamplingParams' declaration (rules.py): a
spin box per tuned field, in its range, with its label and what turns it off beside it (a field
declared ``beside`` another shares that one's row: the penalty's window). Then the switch for the
model's recommended sampling and what it does to those fields: while it is on, each field the
model's files set (models/recommended_sampling.py) shows the model's value, greyed, with where it
came from; the user's own value is kept aside and saved unchanged, and comes back when the switch
is turned off."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractSpinBox, QCheckBox, QDoubleSpinBox, QWidget

from draftscope.gui.form_widgets import double_spin, hint, int_spin, row
from draftscope.rules import SAMPLING_FIELDS, SamplingField

MODEL_SAMPLING_TEXT = "Use the model's recommended sampling where it has one"
MODEL_SAMPLING_HINT = (
    "A model's files may recommend how to sample it (a GGUF's metadata, a generation_config.json); "
    "off, the values below are used as set"
)


def sampling_spins() -> dict[str, QAbstractSpinBox]:
    """A spin box for each tuned field (name -> box, in the declared order), named ``topPSpin`` for top_p."""
    return {name: _spin(name, declared) for name, declared in SAMPLING_FIELDS.items()}


def _spin(name: str, declared: SamplingField) -> QAbstractSpinBox:
    first, *rest = name.split("_")
    object_name = first + "".join(part.capitalize() for part in rest) + "Spin"
    allowed = declared.range
    if declared.whole:
        spin = int_spin(object_name, int(allowed.low), int(allowed.high))
    else:
        spin = double_spin(object_name, allowed.low, allowed.high, declared.step)
        if allowed.open_low:  # the least it shows above the open end
            spin.setMinimum(allowed.low + 10 ** -spin.decimals())
    spin.setSpecialValueText(declared.low_text)
    return spin


def sampling_rows(spins: dict[str, QAbstractSpinBox]) -> list[tuple[str, QWidget]]:
    """(label, row) for the form: each field's box with what turns it off beside it; a field
    declared ``beside`` another on that one's row, between its own words ("over the last" ... "tokens")."""
    rows = []
    for name, declared in SAMPLING_FIELDS.items():
        if declared.beside:
            continue
        widgets: list[QWidget] = [spins[name]]
        joined = [(other, d) for other, d in SAMPLING_FIELDS.items() if d.beside == name]
        for other, d in joined:
            widgets += [hint(d.label), spins[other], hint(d.unit)]
        off = hint(f"({declared.off})" if joined and declared.off else declared.off)
        off.setToolTip(declared.what)
        rows.append((f"{declared.label}:", row(*widgets, off, stretch_first=False)))
    return rows


class ModelSamplingRows:
    """The switch and its note, over ``fields`` (setting name -> its spin box: ``sampling_spins``)."""

    def __init__(self, fields: dict[str, QAbstractSpinBox]) -> None:
        self.fields = fields
        self.check = QCheckBox(MODEL_SAMPLING_TEXT, objectName="modelSamplingCheck", toolTip=MODEL_SAMPLING_HINT)
        self.note = hint("", wrap=True, objectName="modelSamplingNote")
        self.recommended = None  # the model's ModelSampling (None: it recommends nothing)
        self.kept: dict[str, float] = {}  # the user's values of the fields now showing the model's
        self.check.toggled.connect(self._show_source)

    def show_settings(self, settings, recommended) -> None:
        """After the fields show ``settings``' values: the switch, and the model's values where it is on."""
        self.recommended, self.kept = recommended, {}
        self.check.blockSignals(True)
        self.check.setChecked(settings.model_sampling)
        self.check.blockSignals(False)
        self._show_source(settings.model_sampling)

    def model_values(self) -> dict:
        """The values the model sets that the fields show now (none while the switch is off)."""
        if not self.check.isChecked() or self.recommended is None:
            return {}
        return {name: value for name, value in self.recommended.values.items() if name in self.fields}

    def _show_source(self, _on: bool = True) -> None:
        model = self.model_values()
        for name, spin in self.fields.items():
            if name in model:
                self.kept.setdefault(name, spin.value())
                spin.setValue(model[name])
            elif name in self.kept:
                spin.setValue(self.kept.pop(name))
            spin.setEnabled(name not in model)
            spin.setToolTip(f"the model's recommendation ({self.recommended.origin})" if name in model else "")
        self.note.setText(self._note_text(model))

    def _note_text(self, model: dict) -> str:
        if self.recommended is None:
            return "This model's files recommend no sampling: the values below are used."
        names = ", ".join(name.replace("_", " ") for name in SAMPLING_FIELDS if name in self.recommended.values)
        if not model:
            return f"The model recommends {names} (from {self.recommended.origin}): not used."
        return f"From the model ({self.recommended.origin}): {names}."

    def values(self, original) -> dict:
        """The user's own values of the fields (those showing the model's: as they were before);
        a float the spin box rounds keeps ``original``'s exact value while untouched."""
        out = {}
        for name, spin in self.fields.items():
            value = self.kept.get(name, spin.value())
            exact = getattr(original, name)
            if isinstance(spin, QDoubleSpinBox) and round(exact, spin.decimals()) == value:
                value = exact
            out[name] = value
        return {**out, "model_sampling": self.check.isChecked()}
