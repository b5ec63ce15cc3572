"""Base URLs with or without ``/v1`` (issue 14 item 11): one helper for ask, serve and the backends."""

from __future__ import annotations

import pytest

from clanker_rag._exceptions import ConfigError
from clanker_rag._urls import parse_base_url


@pytest.mark.parametrize(
    ("url", "prefix", "normalised"),
    [
        ("http://127.0.0.1:8080", "", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1", "", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1/", "", "http://127.0.0.1:8080"),
        ("https://h.example/api/v1", "/api", "https://h.example/api"),
        ("http://h/v1x", "/v1x", "http://h/v1x"),
    ],
)
def test_v1_suffix_is_dropped(url: str, prefix: str, normalised: str) -> None:
    base = parse_base_url(url)
    assert base.prefix == prefix and base.url == normalised
    assert base.path("/v1/completions") == prefix + "/v1/completions"


def test_parts_and_credentials() -> None:
    base = parse_base_url("https://user:pw@h.example:8443/v1")
    assert (base.scheme, base.host, base.port, base.has_credentials) == ("https", "h.example", 8443, True)
    assert base.url == "https://h.example:8443"  # credentials never travel in the normalised URL


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://h/", "http://", "http://h:99999", "http://h:port"])
def test_bad_urls_are_config_errors_naming_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match="--upstream"):
        parse_base_url(url, what="--upstream")
