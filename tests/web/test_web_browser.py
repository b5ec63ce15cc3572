"""The pages in a real browser: headless Debian Chromium driven by Selenium, loopback only, nothing fetched.

A missing browser fails these tests (scripts/install puts Chromium and its driver in place); they never skip.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.helpers._chat_chunks import text_chunks, tool_call_chunks
from tests.helpers._web_site import Site, browse_site, knowledge, native_site, proxy_site

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 10.0  # the longest any page step may take; live trace updates get 1 second


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), f"{path} is missing: scripts/install installs chromium and chromium-driver"
    # Selenium Manager stays offline and quiet; it has nothing to find with both paths given.
    saved = {name: os.environ.get(name) for name in ("SE_OFFLINE", "SE_AVOID_STATS")}
    os.environ.update(SE_OFFLINE="true", SE_AVOID_STATS="true")
    with tempfile.TemporaryDirectory(prefix="clanker-rag-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={profile}",
        ):  # fmt: skip
            options.add_argument(flag)
        driver = webdriver.Chrome(service=ChromeService(executable_path=CHROMEDRIVER), options=options)
        try:
            yield driver
        finally:
            driver.quit()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def wait(driver: webdriver.Chrome, seconds: float = WAIT) -> WebDriverWait[webdriver.Chrome]:
    return WebDriverWait(driver, seconds, poll_frequency=0.05)


def search(driver: webdriver.Chrome, site: Site, query: str) -> list[Any]:
    driver.get(site.url + "/")
    box = wait(driver).until(lambda d: d.find_element(By.ID, "q"))
    assert driver.switch_to.active_element == box  # the query box has the focus
    box.send_keys(query, Keys.ENTER)
    return wait(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#hits .hit") or False)


def test_typing_a_query_and_enter_shows_hits_with_their_sources(browser: webdriver.Chrome) -> None:
    with browse_site() as site:
        hits = search(browser, site, "gateway port")
        assert hits[0].find_element(By.CSS_SELECTOR, ".source").text == "docs/ports.md"
        marks = [m.text.lower() for m in hits[0].find_elements(By.TAG_NAME, "mark")]
        assert "gateway" in marks and "port" in marks
        hits[0].find_element(By.CSS_SELECTOR, "button").click()
        rows = wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".explain tbody tr") or False)
        assert {r.find_element(By.TAG_NAME, "th").text for r in rows} >= {"gateway", "port"}


def test_a_hit_opens_its_source_with_the_chunk_in_place(browser: webdriver.Chrome) -> None:
    with browse_site() as site:
        hit = search(browser, site, "licence")[0]
        hit.find_element(By.CSS_SELECTOR, ".source").click()
        chunk = wait(browser).until(lambda d: d.find_element(By.ID, "chunk"))
        assert browser.current_url.startswith(site.url + "/sources#")
        assert "released under the MIT licence" in chunk.text
        assert browser.find_element(By.CSS_SELECTOR, "#viewer h2").text == "docs/licence.md"


def test_a_proxied_request_appears_on_the_trace_page_within_a_second(browser: webdriver.Chrome) -> None:
    with proxy_site() as site:
        browser.get(site.url + "/trace")
        wait(browser).until(lambda d: d.find_element(By.ID, "status").text == "live")
        threading.Thread(target=site.chat, args=("Which port does the gateway use?",)).start()
        record = wait(browser, 1.0).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#records .record") or False)[0]
        wait(browser, 1.0).until(lambda d: record.find_elements(By.CSS_SELECTOR, ".inj .query"))
        assert "port" in record.find_element(By.CSS_SELECTOR, ".inj .query").text
        assert "docs/ports.md" in [c.text for c in record.find_elements(By.CSS_SELECTOR, ".passages td.source")]
        assert record.find_element(By.CSS_SELECTOR, ".question").text == "Which port does the gateway use?"


def test_the_playground_streams_through_the_proxy_and_marks_the_injection(browser: webdriver.Chrome) -> None:
    with proxy_site() as site:
        browser.get(site.url + "/trace")
        browser.find_element(By.CSS_SELECTOR, ".playground summary").click()
        browser.find_element(By.ID, "play-prompt").send_keys("Which port does the gateway use?")
        out, records = browser.find_element(By.ID, "play-out"), browser.find_element(By.ID, "records")
        box_and_list = (out.rect["height"], records.rect["y"])
        browser.find_element(By.ID, "play-send").click()
        wait(browser).until(lambda d: "The gateway uses port 7341." in d.find_element(By.ID, "play-out").text)
        wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#records .record"))
        marker = browser.find_element(By.CSS_SELECTOR, "#play-out .inline-block")
        assert "port" in marker.text
        # The answer streamed into a box of fixed size, and the request's record went in below it: nothing moved.
        assert (out.rect["height"], records.rect["y"]) == box_and_list
        assert site.upstream is not None and site.upstream.requests
        # The playground's keep-alive connection ends at the proxy's header deadline, before the test does.
        wait(browser).until(lambda d: site.server.header_deadlines.expired > 0)


def test_a_document_holding_markup_shows_as_text_and_runs_nothing(browser: webdriver.Chrome) -> None:
    with browse_site() as site:
        hit = search(browser, site, "beware gateway notes")[0]
        assert hit.find_element(By.CSS_SELECTOR, ".source").text == "notes/hostile.html"
        assert "<script>alert(1)</script>" in hit.find_element(By.CSS_SELECTOR, "pre.text").text
        assert browser.find_elements(By.CSS_SELECTOR, "#hits img, #hits script") == []
        hit.find_element(By.CSS_SELECTOR, ".source").click()
        doc = wait(browser).until(lambda d: d.find_element(By.ID, "doc"))
        assert "<img src=x onerror=\"document.title='pwned'\">" in doc.text
        assert browser.find_elements(By.CSS_SELECTOR, "#viewer img, #viewer script") == []
        assert browser.title != "pwned"
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.accept()


def test_a_page_from_another_origin_cannot_read_the_endpoints(browser: webdriver.Chrome) -> None:
    with browse_site() as site, browse_site() as other:
        # A page on another origin (another port of loopback) tries to read this server's data.
        browser.get(other.url + "/")
        wait(browser).until(lambda d: d.find_element(By.ID, "q"))
        script = """
            const done = arguments[arguments.length - 1];
            fetch(arguments[0]).then(r => r.text()).then(t => done("read: " + t), e => done("failed: " + e));
        """
        result = browser.execute_async_script(script, site.url + "/clanker-rag/sources")
        assert result.startswith("failed"), result
        # The same page reads its own server's endpoint.
        own = browser.execute_async_script(script, other.url + "/clanker-rag/sources")
        assert own.startswith("read: ") and "docs/ports.md" in own


def test_with_a_token_the_page_asks_for_it_and_then_searches(browser: webdriver.Chrome) -> None:
    with browse_site(token="browser-Token_1") as site:
        browser.get(site.url + "/")
        browser.execute_script("sessionStorage.clear()")
        box = wait(browser).until(lambda d: d.find_element(By.ID, "q"))
        box.send_keys("gateway", Keys.ENTER)
        token = wait(browser).until(lambda d: d.find_element(By.ID, "token"))
        assert browser.find_elements(By.CSS_SELECTOR, "#hits .hit") == []
        token.send_keys("browser-Token_1", Keys.ENTER)
        hits = wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#hits .hit") or False)
        assert hits[0].find_element(By.CSS_SELECTOR, ".source").text == "docs/ports.md"
        browser.execute_script("sessionStorage.clear()")


def test_the_content_security_policy_blocks_inline_script(browser: webdriver.Chrome) -> None:
    with browse_site() as site:
        browser.get(site.url + "/")
        wait(browser).until(lambda d: d.find_element(By.ID, "q"))
        ran = browser.execute_script(
            """
            window.__inline = false;
            const s = document.createElement('script');
            s.textContent = 'window.__inline = true';
            document.body.append(s);
            return window.__inline;
            """
        )
        assert ran is False


def _narrow(driver: webdriver.Chrome, width: int) -> None:
    """Lay pages out ``width`` CSS pixels wide (a desktop viewport: nothing is zoomed out to fit)."""
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def _overflow(driver: webdriver.Chrome) -> tuple[int, int]:
    width: list[int] = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    return width[0], width[1]


def test_a_long_passage_or_query_never_widens_a_phone_sized_page(browser: webdriver.Chrome) -> None:
    unbroken = "x" * 400  # no place to break a line
    kb = knowledge()
    kb.add_text(
        f"The gateway port notes: {unbroken} and more on the gateway port.", "docs/" + "nested-dir/" * 12 + "a.md"
    )
    query = "gateway port " + "_".join(["gateway"] * 40)  # one unbroken word
    answers = (
        tool_call_chunks([("call_1", "retrieve", json.dumps({"query": query}))], [40], text="Checking. "),
        tool_call_chunks([("call_2", "retrieve", '{"query": "licence"}')], [4]),
        text_chunks("Port 7341 [1]. ", unbroken),
    )
    with native_site(*answers, kb=kb) as (site, _):
        site.chat("Which port? " + query)
        _narrow(browser, 390)
        try:
            hits = search(browser, site, query)
            hits[0].find_element(By.CSS_SELECTOR, "button").click()  # the score's explanation too
            wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".explain tbody tr"))
            assert unbroken in hits[0].find_element(By.CSS_SELECTOR, "pre.text").get_attribute("textContent")
            width, viewport = _overflow(browser)
            assert viewport == 390 and width <= viewport

            browser.get(site.url + "/trace")
            injections = wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".inj")) == 2 or False)
            assert injections
            for summary in browser.find_elements(By.CSS_SELECTOR, "#records details > summary"):
                summary.click()  # the blocks as injected and the whole answer, opened
            assert unbroken in browser.find_element(By.ID, "records").text
            width, viewport = _overflow(browser)
            assert viewport == 390 and width <= viewport
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
