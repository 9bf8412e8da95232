"""The dialogs: first run, settings (and its tabs), a model's download, training a recurrent head,
the race of two answers."""
