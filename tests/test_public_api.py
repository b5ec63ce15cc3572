import importlib
import pkgutil
from pathlib import Path

import clanker_rag


def test_all_is_sorted_and_complete():
    assert clanker_rag.__all__ == sorted(clanker_rag.__all__)
    for name in clanker_rag.__all__:
        assert getattr(clanker_rag, name) is not None, name
    # every lazily re-exported name is in __all__, and __all__ holds nothing else
    assert set(clanker_rag._LAZY) | {"__version__", "retrieve"} == set(clanker_rag.__all__)
    # each re-export is the object of its home module
    for name, module in clanker_rag._LAZY.items():
        home = importlib.import_module(f"clanker_rag.{module}")
        assert getattr(clanker_rag, name) is getattr(home, name)
        assert name in home.__all__, f"{name} missing from clanker_rag.{module}.__all__"


def test_unknown_attribute_raises_attribute_error():
    import pytest

    with pytest.raises(AttributeError):
        clanker_rag.NoSuchThing  # noqa: B018


def test_exceptions_share_one_base():
    from clanker_rag import _exceptions

    for name in _exceptions.__all__:
        cls = getattr(_exceptions, name)
        assert issubclass(cls, clanker_rag.ClankerRagError)
        assert name in _exceptions.__doc__


def test_private_modules_import_without_optional_deps():
    for info in pkgutil.walk_packages(clanker_rag.__path__, "clanker_rag."):
        if info.name != "clanker_rag.__main__":
            importlib.import_module(info.name)


def test_install_hints_name_this_checkout() -> None:
    """A missing extra's hint is a line that works pasted anywhere: from a clone it installs the clone's own extra."""
    from clanker_rag._exceptions import install_hint

    checkout = Path(__file__).resolve().parents[1]
    assert (checkout / "pyproject.toml").is_file()
    assert install_hint("mcp") == f"pip install -e '{checkout}[mcp]'"


def test_the_controller_s_settings_are_public_and_its_signature_stays_small() -> None:
    """``RagController``'s grouped settings are exported, so callers can build them; the rest are plain keywords."""
    import dataclasses
    import inspect

    for name in ("BlockLayout", "Hooks", "Limits", "Triggers"):
        cls = getattr(clanker_rag, name)
        assert dataclasses.is_dataclass(cls), name  # frozen and checked: tests/stream/test_settings.py
    params = inspect.signature(clanker_rag.RagController).parameters
    assert len(params) <= 12
    assert [p.annotation for p in params.values() if p.name in ("triggers", "limits", "layout", "hooks")] == [
        "Triggers",
        "Limits",
        "BlockLayout",
        "Hooks",
    ]
