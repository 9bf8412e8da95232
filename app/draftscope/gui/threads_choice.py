"""Settings ▸ Generation ▸ Threads as a list that reads top to bottom: Automatic, every core, one
core left free, then fewer, down to one; Automatic says what it chose for the model that runs. The
setting keeps its meaning (``threads``: 0 is automatic, else that many threads); a value from a
settings file past this computer's cores is offered as it is, so opening and closing the dialog
never changes it."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from draftscope.sysinfo import usable_cores


def thread_choices(cores: int) -> list[tuple[str, int]]:
    """(words, setting) for each choice on a computer with ``cores`` usable cores."""
    # what Automatic picks is known only once a model has loaded (show_choice then says it)
    out = [("Automatic (all cores or one left free)" if cores > 1 else "Automatic (1 core)", 0)]
    for n in range(cores, 0, -1):
        if n == cores:
            words = f"All {n} cores" if n > 1 else "1 core"
        elif n == cores - 1:
            words = f"{n} (one core left free)"
        else:
            words = f"{n} ({cores - n} cores left free)"
        out.append((words, n))
    return out


class ThreadsCombo(QComboBox):
    """The Threads choice; ``value()`` and ``setValue()`` speak the setting (0: automatic)."""

    def __init__(self, cores: int | None = None) -> None:
        super().__init__(objectName="threadsCombo")
        self.cores = cores or usable_cores()
        for words, value in thread_choices(self.cores):
            self.addItem(words, value)

    def show_choice(self, choice) -> None:
        """The Automatic row says what the engine chose at load (engine/auto_threads.py ThreadsChoice:
        "Automatic (chose 1: 12% faster than 2)"); as it was where nothing was chosen (None)."""
        if choice is not None:
            self.setItemText(self.findData(0), f"Automatic ({choice.words()})")

    def value(self) -> int:
        return int(self.currentData())

    def setValue(self, threads: int) -> None:  # as a spin box's, so the form reads the same
        index = self.findData(threads)
        if index < 0:  # more threads than this computer's cores (a settings file from another one)
            self.addItem(f"{threads} (more than this computer's {self.cores} cores)", threads)
            index = self.count() - 1
        self.setCurrentIndex(index)
