"""Chat histories to import and export, shared by the storage and window tests: a filled history
file and a ChatGPT export with an abandoned branch."""

from __future__ import annotations

from draftscope.storage import HistoryStore


def filled(path) -> HistoryStore:
    """A history of two conversations: one with an attached file and its answer's figures, one plain."""
    store = HistoryStore(path)
    a = store.create_conversation("Colours")
    store.add_message(
        a,
        "user",
        "Name a colour",
        files=[{"name": "palette.md", "kind": "text", "text": "red, teal", "tokens": 4, "passages": []}],
    )
    store.add_message(
        a,
        "assistant",
        "Teal.",
        stats={"tokens": 3, "tau": 1.5, "seed": 42, "steps": 2},
        drafters={"drafters": ["context"]},
    )
    b = store.create_conversation("Sums")
    store.add_message(b, "user", "2+2?")
    store.add_message(b, "assistant", "4")
    return store


def chatgpt_export() -> list:
    """A ChatGPT conversations.json of one conversation whose current branch skips an abandoned answer."""

    def node(id_, parent, children, role=None, text=None):
        message = (
            None
            if role is None
            else {
                "author": {"role": role},
                "create_time": 1700000000.0,
                "content": {"content_type": "text", "parts": [text]},
            }
        )
        return {"id": id_, "parent": parent, "children": children, "message": message}

    return [
        {
            "title": "Trip to Lisbon",
            "create_time": 1700000000.5,
            "update_time": 1700000100.0,
            "current_node": "a2",
            "mapping": {
                "root": node("root", None, ["s"]),
                "s": node("s", "root", ["u1"], "system", "You are ChatGPT"),
                "u1": node("u1", "s", ["a1", "a1b"], "user", "Plan a day in Lisbon"),
                "a1b": node("a1b", "u1", [], "assistant", "an abandoned branch"),
                "a1": node("a1", "u1", ["u2"], "assistant", "Start at Belém."),
                "u2": node("u2", "a1", ["a2"], "user", "And lunch?"),
                "a2": node("a2", "u2", [], "assistant", "Pastéis de nata."),
            },
        }
    ]
