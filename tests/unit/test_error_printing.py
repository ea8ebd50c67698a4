"""An inventory error never prints a value raw that would reorder or hide what a terminal shows."""

from kiln.inventory.errors import InventoryError, printable


def test_bidi_zero_width_and_control_characters_are_escaped_in_every_field():
    error = InventoryError("hosts\u202e.yml", "cpu_b\u202egnp", "group 'a\u200bb'\x1b[31m red", 3)
    text = str(error)
    assert all(c not in text for c in "\u202e\u200b\x1b")
    assert text == "hosts\\u202e.yml:3: cpu_b\\u202egnp: group 'a\\u200bb'\\x1b[31m red"
    assert error.as_dict()["key"] == "cpu_b\\u202egnp"


def test_ordinary_text_is_unchanged():
    assert printable("gpu[01:04] ümlaut 日本 — ok") == "gpu[01:04] ümlaut 日本 — ok"
