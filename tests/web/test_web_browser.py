"""The dashboard in a real browser: Playwright driving Debian's Chromium against the real
servers, with a real scheduler and worker where a page shows what they do.

Without Chromium or Playwright these tests are skipped, unless RSCHED_REQUIRE_BROWSER=1 (set by
.ci/run), which makes the skip a failure. RSCHED_SCREENSHOTS=1 saves the main pages into
docs/screenshots/. RSCHED_CHROMIUM names another Chromium binary.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import anyio
import pytest

import rsched
from rsched import Settings
from tests.support.paths import DOCS

CHROMIUM = os.environ.get("RSCHED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = DOCS / "screenshots"


def _missing() -> str | None:
    try:
        import fastapi  # noqa: F401
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    return None


_REASON = _missing()
if _REASON is not None:
    if os.environ.get("RSCHED_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"browser tests required (RSCHED_REQUIRE_BROWSER=1): {_REASON}")
    pytest.skip(f"browser tests skipped: {_REASON}", allow_module_level=True)

from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright  # noqa: E402

from tests.support.web import make_dead_letters, publish_event, serve, worker_thread  # noqa: E402
from tests.support.worker_app import fast_env  # noqa: E402

# One browser at a time: under pytest-xdist (make test) these tests share one worker, and so
# one Chromium, instead of starting one per worker and competing for the cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]
Web = Callable[..., str]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def web(settings: Settings) -> Iterator[Web]:
    with ExitStack() as stack:
        yield lambda **options: stack.enter_context(serve(settings, refresh_s=1, **options))


@pytest.fixture
def page(browser: Browser, web: Web) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    # Depends on ``web`` so that the server outlives the page (and its polling).
    yield pg
    context.close()
    assert not errors, errors  # no script error, no resource the CSP refused


def shot(page: Page, name: str) -> None:
    if os.environ.get("RSCHED_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=name != "schedules")


def seed(settings: Settings, n: int = 40) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        zones = ["UTC", "Europe/Rome", "America/New_York", "Asia/Tokyo"]
        for i in range(n):
            c.add(
                {
                    "id": f"sync-{i:03d}",
                    "task": ["feeds.poll", "billing.sync", "cache.warm"][i % 3],
                    "queue": ["default", "billing"][i % 2],
                    "every": 60 * (i + 1),
                    "timezone": zones[i % 4],
                }
            )
        c.add(
            {
                "id": "nightly-report",
                "task": "app.sleep",
                "payload": {"s": 0},
                "cron": "0 2 * * *",
                "timezone": "Europe/Rome",
                "description": "The nightly sales report for the finance team",
            }
        )


def start_processes(spawn: Callable[..., Any], settings: Settings) -> None:
    """A real scheduler (so a leader shows) and worker (so runs complete)."""
    env = fast_env(settings)
    scheduler = spawn("rsched._cli.scheduler_process", env=env)
    worker = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--queues",
        "default",
        env=env,
    )
    scheduler.wait_for("leader.acquired")
    worker.wait_for("event=worker.start")


def test_find_pause_and_trigger_a_schedule(
    page: Page, web: Web, settings: Settings, spawn: Callable[..., Any]
) -> None:
    seed(settings)
    start_processes(spawn, settings)
    base = web()

    page.goto(base + "/")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    leader = page.locator(".card", has=page.get_by_role("heading", name="Leader"))
    expect(leader).not_to_contain_text("none")
    expect(page.locator("#events")).to_contain_text("leader_changed")  # the scheduler said so
    expect(page.locator(".card", has_text="Schedules").first).to_contain_text("41")

    page.get_by_role("link", name="Schedules", exact=True).first.click()
    expect(page.locator("table.schedules tbody tr")).to_have_count(41)
    shot(page, "schedules")
    page.get_by_role("searchbox").fill("nightly")
    page.get_by_role("searchbox").press("Enter")
    expect(page.locator("table.schedules tbody tr")).to_have_count(1)
    page.get_by_role("link", name="nightly-report").click()
    expect(page.get_by_role("heading", name=re.compile("nightly-report"))).to_be_visible()

    page.get_by_label("pause note").fill("finance closes the quarter")
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash.ok")).to_contain_text("paused nightly-report")
    expect(page.locator("#live .state")).to_have_text("paused")
    expect(page.locator("#live .note")).to_have_text("finance closes the quarter")
    expect(page.get_by_role("button", name="Resume")).to_be_visible()

    page.get_by_role("button", name="Trigger now").click()
    expect(page.locator(".flash.ok")).to_contain_text("fired nightly-report@")
    history = page.locator("table.history tbody tr").first
    expect(history).to_contain_text("manual")
    # The worker runs it; the page's live part shows the outcome without a reload.
    expect(history.locator(".outcome")).to_have_text("completed", timeout=15_000)
    shot(page, "schedule")

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#live .state")).to_have_text("active")
    page.get_by_role("link", name="Overview").click()
    expect(page.locator(".card", has_text="Activity")).to_contain_text("1")
    shot(page, "overview")


def test_requeue_a_dead_letter(page: Page, web: Web, settings: Settings) -> None:
    # Playwright's sync API runs an event loop in this thread: the worker gets its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: anyio.run(make_dead_letters, settings, 3)).result()
    base = web()
    page.goto(base + "/queues")
    row = page.locator("tr", has_text="default")
    expect(row).to_contain_text("3")
    row.get_by_role("link", name="default").click()
    letters = page.locator("table.dead tbody tr")
    expect(letters).to_have_count(3)
    expect(letters.first).to_contain_text("ValueError: boom <b>")  # shown as text
    shot(page, "dead-letters")

    entry = letters.first.locator("code").inner_text()
    letters.first.get_by_role("checkbox").check()
    page.get_by_role("button", name="Requeue selected").click()
    expect(page.locator(".flash.ok")).to_contain_text("requeued 1 dead letter(s)")
    expect(letters).to_have_count(2)
    expect(page.locator("table.dead")).not_to_contain_text(entry)

    letters.first.locator("a").first.click()
    expect(page.locator("pre.traceback")).to_contain_text("ValueError")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Purge").click()
    expect(page.locator(".flash.ok")).to_contain_text("purged 1 dead letter(s)")
    expect(page.locator("table.dead tbody tr")).to_have_count(1)


def test_live_refresh_zone_and_escaping(page: Page, web: Web, settings: Settings) -> None:
    evil = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add({"id": "evil", "task": "t.x", "cron": "30 2 * * *", "description": evil})
    dialogs: list[str] = []

    def dialog(d: Dialog) -> None:
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    base = web()
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/_live/" in r.url else None)
    page.goto(base + "/schedules/evil")
    expect(page.locator(".description")).to_have_text(evil)
    assert page.title() != "owned"

    # Changed elsewhere, shown here within a refresh or two, without a reload.
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.pause("evil", "changed from the CLI")
    expect(page.locator("#live .state")).to_have_text("paused", timeout=5_000)
    assert len(polls) <= 6, polls  # one poll per second, no storm

    # A typed note survives refreshes: polling waits while the viewer edits.
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.resume("evil")
    expect(page.locator("#live .state")).to_have_text("active", timeout=5_000)
    page.get_by_label("pause note").fill("typing…")
    page.locator("h1").click()
    page.wait_for_timeout(2_500)
    expect(page.get_by_label("pause note")).to_have_value("typing…")

    # Times in the viewer's zone, the schedule's own beside them.
    page.get_by_label("time zone").fill("Asia/Tokyo")
    page.get_by_label("time zone").press("Enter")
    expect(page.locator("#live dd", has_text="JST").first).to_be_visible()
    page.goto(base + "/schedules")
    expect(page.locator("table.schedules")).to_contain_text("JST")
    assert not dialogs


def test_login_and_base_path(page: Page, web: Web, settings: Settings) -> None:
    seed(settings, 3)
    base = web(auth="admin:s3cret", base_path="/rsched")
    page.goto(base + "/schedules")
    expect(page).to_have_url(re.compile(r"/rsched/login\?next="))
    page.get_by_label("User").fill("admin")
    page.get_by_label("Password").fill("s3cret")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/rsched/schedules$"))
    page.get_by_role("link", name="sync-001").click()
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#live .state")).to_have_text("paused")
    page.get_by_label("confirm id").fill("sync-001")
    page.get_by_role("button", name="Remove").click()
    expect(page.locator(".flash.ok")).to_contain_text("removed sync-001")
    expect(page).to_have_url(re.compile(r"/rsched/schedules$"))
    expect(page.locator("table.schedules tbody tr")).to_have_count(3)


def test_overview_shows_a_late_schedule_and_recent_events(
    page: Page, web: Web, settings: Settings
) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add({"id": "tick", "task": "t.x", "every": 1, "misfire_grace_s": 0})
        c.add({"id": "calm", "task": "t.x", "every": 3600})
        c.add({"id": "held", "task": "t.x", "every": 60, "paused": True})
    publish_event(settings, "schedule_late", schedule_id="tick", reason="due 1s ago and not fired")
    base = web()
    page.goto(base + "/")
    health = page.locator("#health")
    expect(health).to_contain_text("no_leader")  # no scheduler runs: nothing fires tick
    late = health.locator("li", has_text="tick")
    expect(late.locator(".health")).to_have_text("late")
    expect(late).to_contain_text("not fired")
    expect(health).not_to_contain_text("calm")
    events = page.locator("#events tbody tr")
    expect(events).to_have_count(1)
    expect(events.first).to_contain_text("schedule_late")
    expect(events.first).to_contain_text("due 1s ago and not fired")

    page.get_by_role("link", name="Schedules", exact=True).first.click()
    states = {
        sid: page.locator("table.schedules tr", has_text=sid).locator(".health")
        for sid in ("tick", "calm", "held")
    }
    expect(states["tick"]).to_have_text("late")
    expect(states["calm"]).to_have_text("ok")
    expect(states["held"]).to_have_text("paused")
    page.get_by_role("link", name="tick").click()
    expect(page.locator("#live #health .health")).to_have_text("late")
    expect(page.locator("#live #health")).to_contain_text("not fired")


def test_workers_page_and_cancel_a_job(page: Page, web: Web, settings: Settings) -> None:
    base = web()
    with worker_thread(settings, concurrency=1) as worker:
        with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
            c.enqueue("web.wait", {"s": 60}, execution_id="run-1")
            c.enqueue("web.wait", {"s": 60}, execution_id="wait-2")
        page.goto(base + "/")
        expect(page.get_by_role("link", name="1 live worker(s)")).to_be_visible()
        page.get_by_role("link", name="Workers", exact=True).click()
        rows = page.locator("table.workers tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(worker.consumer)
        expect(rows.first).to_contain_text("web.wait")
        expect(rows.first.locator("td.jobs")).to_contain_text("run-1")  # within a refresh
        shot(page, "workers")

        rows.first.get_by_role("link", name="default").click()
        jobs = page.locator("#jobs tbody tr")
        expect(jobs).to_have_count(2)
        expect(jobs.first).to_contain_text("running")
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="cancel wait-2").click()
        expect(page.locator(".flash.ok")).to_contain_text("cancelled wait-2 (queued)")
        expect(jobs).to_have_count(1)
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="cancel run-1").click()
        expect(page.locator(".flash.ok")).to_contain_text("cancelling run-1")
        expect(page.locator("#jobs")).to_contain_text("no queued, running or delayed job")

    page.get_by_role("link", name="Workers").click()
    expect(page.locator("#live")).to_contain_text("no live worker")


def test_a_job_page_follows_its_progress_and_log(page: Page, web: Web, settings: Settings) -> None:
    base = web()
    with worker_thread(settings) as worker:
        with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
            c.enqueue("web.steps", {"n": 6, "s": 1}, execution_id="steps-1")
        page.goto(base + "/jobs/steps-1")
        expect(page.locator("#logs")).to_contain_text("step 0")
        expect(page.locator(".job-progress")).to_contain_text("of 6")
        expect(page.locator("#live")).to_contain_text("running")
        expect(page.locator("#logs")).to_contain_text("step 3")  # the page reloads its content
        expect(page.locator("#live")).to_contain_text("completed")
        expect(page.locator(".job-progress")).to_contain_text("100%")
        expect(page.locator("#attempts")).to_contain_text(worker.consumer)
        shot(page, "job")


def test_runs_page_shows_a_completed_run(
    page: Page, web: Web, settings: Settings, spawn: Callable[..., Any]
) -> None:
    seed(settings, 3)
    start_processes(spawn, settings)
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.trigger("nightly-report")
        c.enqueue("app.noop", {}, execution_id="one-off-1")
    base = web()
    page.goto(base + "/")
    page.get_by_role("link", name="Runs").click()
    rows = page.locator("table.runs-log tbody tr")
    nightly = rows.filter(has_text="nightly-report")
    expect(nightly.locator(".outcome")).to_have_text("completed", timeout=15_000)  # live part
    expect(rows.filter(has_text="one-off-1")).to_contain_text("enqueued")
    shot(page, "runs")

    page.get_by_label("schedule").fill("nightly-report")
    page.get_by_label("schedule").press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("app.sleep")
    page.get_by_label("since").fill("soon")
    page.get_by_label("since").press("Enter")
    expect(page.locator(".flash.bad")).to_contain_text("since")
    expect(rows.first).to_contain_text("no runs match")


def test_tick_schedules_of_a_label_and_pause_them(page: Page, web: Web, settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add_many(
            [
                {"id": f"bill-{n}", "task": "t", "every": 3600, "labels": {"team": "billing"}}
                for n in range(3)
            ]
            + [{"id": "other", "task": "t", "every": 3600}]
        )
    page.goto(web() + "/schedules")
    page.get_by_label("labels (k=v, comma-separated)").fill("team=billing")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("table.schedules tbody tr")).to_have_count(3)
    page.get_by_label("select all").check()
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash.ok")).to_contain_text("pause: 3 schedule(s): 3 paused")
    expect(page.locator("table.schedules .s-paused")).to_have_count(3)


def test_new_schedule_form_previews_and_adds(page: Page, web: Web, settings: Settings) -> None:
    base = web()
    page.goto(base + "/schedules")
    page.get_by_role("link", name="New schedule").click()
    page.get_by_role("textbox", name="id", exact=True).fill("weekday-digest")
    page.get_by_role("textbox", name="task", exact=True).fill("mail.digest")
    page.get_by_role("textbox", name="cron").fill("30 9 * * 1-5")
    page.get_by_role("combobox", name="zone").fill("Europe/Rome")
    preview = page.locator("#preview li")
    expect(preview).to_have_count(5)  # the htmx preview, as one types
    expect(preview.first).to_contain_text("CE")  # in the schedule's own zone too (CET/CEST)
    page.get_by_role("textbox", name="cron").fill("61 * * * *")
    expect(page.locator("#preview .bad")).to_contain_text("cron")
    page.get_by_role("textbox", name="cron").fill("30 9 * * 1-5")
    expect(preview).to_have_count(5)
    page.get_by_label("payload (JSON object)").fill('{"list": "ops"}')
    shot(page, "new-schedule")
    page.get_by_role("button", name="Add").click()
    expect(page.locator(".flash.ok")).to_contain_text("added weekday-digest")
    expect(page.get_by_role("heading", name=re.compile("weekday-digest"))).to_be_visible()


def test_a_flow_page_draws_its_steps_live_and_cancels_it(
    page: Page, web: Web, settings: Settings
) -> None:
    base = web()
    flow = rsched.chain(
        rsched.step("web.wait", {"s": 0}),
        rsched.group(rsched.step("web.wait", {"s": 0}) for _ in range(3)),
        rsched.step("web.wait", {"s": 60}),
    )
    with worker_thread(settings) as _, rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.run_flow(flow, flow_id="etl-nightly")
        page.goto(base + "/")
        page.get_by_role("link", name="Flows", exact=True).click()
        page.get_by_role("link", name="etl-nightly").click()
        boxes = page.locator("svg.flow-graph a.step")
        expect(boxes).to_have_count(5)
        expect(boxes.first).to_contain_text("#1 web.wait")
        # The page follows the flow: the last step, after the join, starts running.
        expect(page.locator('svg.flow-graph a.step[data-step="5"]')).to_have_class(
            re.compile("f-running")
        )
        expect(page.locator("svg.flow-graph a.step.f-completed")).to_have_count(4)
        shot(page, "flow")
        page.locator('svg.flow-graph a.step[data-step="2"]').click()
        expect(page.locator("h1")).to_contain_text("etl-nightly~2")
        page.get_by_role("link", name="etl-nightly").click()
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Cancel flow").click()
        expect(page.locator(".flash.ok")).to_contain_text("cancelled flow etl-nightly")
        expect(page.locator("#live")).to_contain_text("cancelled")
        expect(page.get_by_role("button", name="Cancel flow")).to_have_count(0)


def log_in(page: Page, url: str) -> None:
    """Open ``url`` of an app served with auth="admin:s3cret": its login form first."""
    page.goto(url)
    page.get_by_label("User").fill("admin")
    page.get_by_label("Password").fill("s3cret")
    page.get_by_role("button", name="Log in").click()


def answer(asked: list[str], accept: bool) -> Callable[[Dialog], None]:
    """A dialog handler that notes the question and accepts or dismisses it."""

    def on(d: Dialog) -> None:
        asked.append(d.message)
        if accept:
            d.accept()
        else:
            d.dismiss()

    return on


def test_rollback_button_on_a_schedule_page(
    page: Page, browser: Browser, web: Web, settings: Settings
) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add({"id": "nightly", "task": "app.noop", "cron": "0 2 * * *"})
        c.update("nightly", cron="0 5 * * *")  # generations 1 and 2 kept
    base = web(auth="admin:s3cret")
    log_in(page, base + "/schedules/nightly")
    expect(page.get_by_role("heading", name=re.compile("nightly"))).to_be_visible()
    changes = page.locator("#changes table.changes tbody tr")
    expect(changes).to_have_count(2)
    expect(changes.first).to_contain_text("cron 0 2 * * * -> 0 5 * * *")
    expect(page.get_by_role("button", name="Roll back to 2")).to_have_count(0)  # the current one

    # The button asks first: dismissed, nothing is written.
    asked: list[str] = []
    page.once("dialog", answer(asked, False))
    page.get_by_role("button", name="Roll back to 1").click()
    expect(changes).to_have_count(2)
    assert asked == [
        "Roll back nightly to the spec of generation 1? It is written as a new generation."
    ]

    page.once("dialog", answer(asked, True))
    page.get_by_role("button", name="Roll back to 1").click()
    expect(page.locator(".flash.ok")).to_contain_text(
        "rolled back nightly to the spec of generation 1: now generation 3"
    )
    expect(changes).to_have_count(3)
    newest = changes.first
    expect(newest.locator(".action")).to_have_text("rollback")
    expect(newest).to_contain_text("admin")
    expect(newest).to_contain_text("2 → 3")
    expect(newest).to_contain_text("cron 0 5 * * * -> 0 2 * * *")
    expect(page.locator("table.specs tbody tr").first).to_contain_text("3 (current)")
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        s = c.get("nightly")
        assert (s.cron, s.generation) == ("0 2 * * *", 3)
        last = c.audit("nightly", limit=1).items[0]
        assert (last.action, last.actor, last.source) == ("rollback", "admin", "web")
        assert (last.generation_before, last.generation_after) == (2, 3)

    # A form whose CSRF token is not the page's is refused (403), nothing written. In a page
    # of its own: the refusal is an error the browser logs, which `page` counts as a failure.
    context = browser.new_context()
    try:
        forged = context.new_page()
        log_in(forged, base + "/schedules/nightly")
        forged.locator("#changes form input[name=csrf_token]").first.evaluate(
            "field => { field.value = 'x'.repeat(32) }"
        )
        forged.once("dialog", answer(asked, True))
        with forged.expect_navigation() as refused:
            forged.get_by_role("button", name="Roll back to 2").click()
        response = refused.value
        assert response is not None
        assert response.status == 403
        expect(forged.locator("main")).to_contain_text("CSRF")
    finally:
        context.close()
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        assert c.get("nightly").generation == 3
        assert c.audit("nightly", limit=1).items[0].action == "rollback"

    # Read-only: the changes and kept specs shown, no button (the POST's refusal:
    # tests/web/test_web_audit.py).
    page.goto(web(read_only=True) + "/schedules/nightly")
    expect(changes).to_have_count(3)
    expect(page.locator("table.specs tbody tr")).to_have_count(3)
    expect(page.get_by_role("button", name=re.compile("Roll back"))).to_have_count(0)
