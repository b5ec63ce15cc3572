import importlib
import pkgutil

import clanker_rag


def test_all_is_sorted_and_complete():
    assert clanker_rag.__all__ == sorted(clanker_rag.__all__)
    for name in clanker_rag.__all__:
        assert hasattr(clanker_rag, name), name
    public = {n for n in vars(clanker_rag) if not n.startswith("_") and n not in ("annotations",)}
    modules = {n for n, v in vars(clanker_rag).items() if getattr(v, "__spec__", None) is not None}
    # every public attribute that is not a submodule is exported
    assert public - modules - set(clanker_rag.__all__) == set()


def test_exceptions_share_one_base():
    from clanker_rag import _exceptions

    for name in _exceptions.__all__:
        cls = getattr(_exceptions, name)
        assert issubclass(cls, clanker_rag.ClankerRagError)
        assert name in _exceptions.__doc__


def test_private_modules_import_without_optional_deps():
    for info in pkgutil.iter_modules(clanker_rag.__path__):
        importlib.import_module(f"clanker_rag.{info.name}")
