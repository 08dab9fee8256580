"""The ``rsched`` command's argument parser: global options, subcommands and their handlers."""

from __future__ import annotations

import argparse
import re
from importlib import metadata
from typing import Any, NoReturn, get_args

from rsched._cli import audit as audit
from rsched._cli import bulk as bulk_commands
from rsched._cli import calendars as calendars
from rsched._cli import flows as flows
from rsched._cli import health as health
from rsched._cli import limits as limits
from rsched._cli import partitions as partitions
from rsched._cli import queues as queues
from rsched._cli import runs as runs
from rsched._cli import schedules as schedules
from rsched._cli import workers as workers
from rsched._cli.common import (
    Handler,
    LocalHandler,
    duration_s,
    iso_datetime,
    json_object,
    number,
    whole,
)
from rsched._core.errors import UsageError
from rsched._core.rules import DST_FOLDS, DST_GAPS, PRIORITIES
from rsched._core.schedule import Overlap
from rsched._core.settings import CLUSTER_HELP
from rsched._redis.durability import durability_flag

#: ``rsched scheduler …`` / ``rsched worker …`` / ``rsched demo …`` / ``rsched web …`` run these
#: modules' ``main`` (with their own options), and what ``rsched --help`` says of each.
DELEGATES = {
    "scheduler": ("rsched._cli.scheduler_process", "run the scheduler process"),
    "worker": ("rsched._cli.worker_process", "run the worker process"),
    "demo": (
        "rsched._devtools.demo.main",
        "run a scheduler, a worker and demo schedules, narrated",
    ),
    "web": ("rsched.web._main", "serve the dashboard and HTTP API (extra: rsched[web])"),
}

#: What argparse takes for a negative number rather than an option: -5, -0.5, -5m, -1h30m.
_NEGATIVE_VALUE = re.compile(r"^-\.?\d[\w.]*$")


class Parser(argparse.ArgumentParser):
    """argparse, with a bad value reported as one line naming the flag (UsageError, which
    ``--json`` prints as JSON) instead of the whole usage before the message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message.removeprefix('argument ')} (see {self.prog} --help)")


def _common() -> argparse.ArgumentParser:
    # SUPPRESS defaults let the options stand before or after the subcommand.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--redis-url",
        default=argparse.SUPPRESS,
        help="Redis URL (env RSCHED_REDIS_URL; default redis://127.0.0.1:6379/0)",
    )
    p.add_argument(
        "--prefix", default=argparse.SUPPRESS, help="key prefix (env RSCHED_PREFIX; default rsched)"
    )
    p.add_argument(
        "--partitions",
        type=whole,
        default=argparse.SUPPRESS,
        metavar="N",
        help="the deployment's number of partitions (env RSCHED_PARTITIONS; default: the "
        "stored one, 1 for a new deployment)",
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        default=argparse.SUPPRESS,
        help=CLUSTER_HELP,
    )
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    durability_flag(p, default=argparse.SUPPRESS)
    return p


def version() -> str:
    """The installed rsched's version."""
    try:
        return metadata.version("rsched")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _limit(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """``-n N`` / ``--limit N``: how many to show, the same two spellings on every command."""
    p.add_argument("-n", "--limit", type=whole, default=default, metavar="N", help=what)


def _sub(
    subs: Any, name: str, help_: str, examples: str, handler: Handler | None
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subs.add_parser(
        name,
        help=help_,
        description=help_,
        epilog="examples:\n" + examples.strip("\n"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common()],
    )
    # A value such as "-5m" is a (bad) value, not an option: the schedule then says why it is
    # wrong ("every: -5m is negative") instead of argparse's "expected one argument".
    p._negative_number_matcher = _NEGATIVE_VALUE
    p.set_defaults(handler=handler)
    return p


def _spec_options(p: argparse.ArgumentParser, *, update: bool = False) -> None:
    if update:
        p.add_argument("id", help="the schedule to change")
        p.add_argument("--file", help="read the fields to change from a JSON file ('-' for stdin)")
    else:
        p.add_argument("id", nargs="?", help="schedule id (letters, digits, '. _ - :')")
        p.add_argument("--file", help="read the whole schedule from a JSON file ('-' for stdin)")
    p.add_argument("--task", help="the handler name a worker runs")
    trigger = p.add_mutually_exclusive_group()
    trigger.add_argument("--cron", help="cron expression, e.g. '0 2 * * *' or '*/10 * * * * *'")
    # Durations reach the schedule as given: rsched.Schedule reads them and names the field.
    trigger.add_argument("--every", help="interval: 300, 90s, 5m, 1h30m")
    trigger.add_argument("--at", type=iso_datetime, help="one-off time, ISO 8601")
    p.add_argument("--tz", "--timezone", dest="timezone", help="IANA zone, e.g. Europe/Rome")
    _dst_options(p)
    p.add_argument("--queue", help="queue name (default: default)")
    p.add_argument("--priority", choices=PRIORITIES, help="high, normal (default) or low")
    p.add_argument("--payload", type=json_object, help="JSON object handed to the handler")
    p.add_argument("--start-at", type=iso_datetime, help="first possible run (ISO 8601)")
    p.add_argument("--end-at", type=iso_datetime, help="last possible run (ISO 8601)")
    p.add_argument("--max-runs", type=whole, help="complete after this many runs")
    p.add_argument("--max-retries", type=whole, help="retries after a failure (default 3)")
    p.add_argument("--retry-base", dest="retry_base_s", help="first delay (30s)")
    p.add_argument("--retry-multiplier", type=number, help="delay factor per retry (2; 1 = fixed)")
    p.add_argument("--retry-max", dest="retry_max_s", help="delay cap (1h)")
    p.add_argument("--retry-jitter", type=number, help="random share of each delay, 0-1 (0.2)")
    p.add_argument("--timeout", dest="timeout_s", help="job timeout (1h)")
    p.add_argument("--overlap", choices=list(get_args(Overlap)))
    p.add_argument(
        "--buffer-limit", type=whole, help="occurrences --overlap buffer_all holds back (100)"
    )
    p.add_argument("--misfire", choices=["run_once", "skip", "catch_up"])
    p.add_argument("--catch-up-limit", type=whole)
    p.add_argument(
        "--misfire-grace", dest="misfire_grace_s", help="lateness that is no misfire (60s)"
    )
    p.add_argument(
        "--debounce",
        help="run each job this long after its occurrence, and collapse occurrences that pile up "
        "(catch-up, backfill, triggers) into one job: 5s, 1m (at most 1d)",
    )
    p.add_argument(
        "--start-deadline",
        help="a job not started this long after its occurrence (workers busy or down) ends "
        "expired without running: 30s, 10m (at most 366d; default none)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        metavar="CALENDAR",
        help="skip the occurrences this exclusion calendar excludes (rsched calendar set); "
        "repeat for several" + ("; replaces the calendars it had" if update else ""),
    )
    p.add_argument(
        "--jitter",
        help="fire each occurrence a delay in [0, JITTER) after its time, the same for every "
        "scheduler (a hash of the execution id), always before the next: 30s, 5m (at most 7d)",
    )
    p.add_argument(
        "--pause-after-failures",
        metavar="N",
        help="pause the schedule after N runs in a row ended dead-lettered (default never)",
    )
    p.add_argument("--description")
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="K=V",
        help="a label to find it by (rsched ls --label), e.g. team=billing; repeat for several"
        + ("; replaces the labels it had" if update else ""),
    )
    _limit_option(p, "its jobs hold" + ("; replaces every limit it had" if update else ""))
    p.add_argument(
        "--paused",
        action="store_true",
        default=None,
        help="pause it (rsched pause / resume do the same)" if update else "create it paused",
    )
    if update:
        p.add_argument(
            "--clear",
            action="append",
            type=schedules.clearable,
            metavar="FIELD",
            help="set FIELD back to its default (none for start_at, end_at, max_runs, "
            "start_deadline, pause_after_failures, description, jitter; no calendars for "
            "exclude; cron's rule for dst_gap, "
            "dst_fold); repeat for several",
        )
        for name in ("start_at", "end_at", "max_runs", "description"):
            p.add_argument(
                "--no-" + name.replace("_", "-"),
                dest="clear",
                action="append_const",
                const=name,
                help=f"remove {name} (the same as --clear {name})",
            )


def _dst_options(p: argparse.ArgumentParser) -> None:
    """``--dst-gap`` and ``--dst-fold``: a cron schedule's DST rule (docs/dst.md)."""
    p.add_argument(
        "--dst-gap",
        choices=DST_GAPS,
        help="a wall time the spring-forward gap skips runs at the first instant after the gap "
        "(shift) or not that day (skip); default: cron's rule (shift for fixed times, skip "
        "for '*' and steps)",
    )
    p.add_argument(
        "--dst-fold",
        choices=DST_FOLDS,
        help="a wall time the fall-back fold repeats runs at its first occurrence, its last or "
        "both; default: cron's rule (first for fixed times, both for '*' and steps)",
    )


def _limit_option(p: argparse.ArgumentParser, whose: str) -> None:
    """``--limit KEY,concurrency=N,rate=100/m``, repeatable: a flow-control limit."""
    p.add_argument(
        "--limit",
        dest="limits",
        action="append",
        type=limits.limit_arg,
        metavar="LIMIT",
        help=f"a flow-control limit {whose} (docs/limits.md): the key, then concurrency=N "
        "(jobs of the key running at once, across workers) and/or rate=COUNT/PERIOD (starts "
        "in any window: 10/s, 100/m, 5000/h, 10/30s), comma-separated; {field} in the key is "
        "the payload's field, e.g. --limit 'customer:{customer_id},concurrency=1' --limit "
        "crm,rate=100/m; repeat for several",
    )


def _limit_commands(subs: Any) -> None:
    """``limits`` and ``limit waiting|set|clear``."""
    p = _sub(
        subs,
        "limits",
        "Flow-control limit keys in use and operators' overrides: the numbers in force, jobs "
        "holding each key, jobs waiting on it, starts in its rate window",
        "  rsched limits\n  rsched limits --match 'customer:*'\n  rsched limits --json",
        limits.cmd_limits,
    )
    p.add_argument("--match", metavar="GLOB", help="only keys the glob matches, e.g. 'customer:*'")
    limit = _sub(
        subs,
        "limit",
        "One limit key: the jobs waiting on it, or override its numbers at run time: waiting, "
        "set, clear",
        "  rsched limit waiting customer:42\n  rsched limit set crm --rate 50/m\n"
        "  rsched limit set 'customer:*' --concurrency 0\n  rsched limit clear crm",
        None,
    )
    lsubs = limit.add_subparsers(dest="limit_command", metavar="ACTION")
    p = _sub(
        lsubs,
        "waiting",
        "The jobs waiting on a limit key, in the order they will start (by level, then "
        "arrival), under the key's numbers in force, holders and waiting count",
        "  rsched limit waiting customer:42\n  rsched limit waiting crm -n 10\n"
        "  rsched limit waiting crm --json",
        limits.cmd_limit_waiting,
    )
    p.add_argument("key", metavar="KEY", help="a limit key as rsched limits lists it (no pattern)")
    _limit(p, 100, "how many, the first to start first (default 100)")
    p = _sub(
        lsubs,
        "set",
        "Set a limit key's numbers (or those of every key a pattern matches), over what its "
        "jobs declare; a number not given stays as declared",
        "  rsched limit set crm --rate 50/m\n"
        "  rsched limit set customer:42 --concurrency 5 --rate 10/s\n"
        "  rsched limit set 'customer:*' --concurrency 0   (pauses every customer key)\n"
        "  (a key's own override wins over a pattern's, a longer pattern over a shorter one)",
        limits.cmd_limit_set,
    )
    p.add_argument("key", metavar="KEY", help="a limit key, or a pattern where * matches any text")
    p.add_argument(
        "--concurrency",
        type=whole,
        metavar="N",
        help="jobs of the key running at once across workers (0 pauses the key)",
    )
    p.add_argument("--rate", metavar="COUNT/PERIOD", help="starts in any window: 10/s, 100/m")
    p = _sub(
        lsubs,
        "clear",
        "Remove an override set with rsched limit set: the declared numbers hold again",
        "  rsched limit clear crm\n  rsched limit clear 'customer:*'",
        limits.cmd_limit_clear,
    )
    p.add_argument("key", metavar="KEY", help="the key or pattern given to rsched limit set")


def _calendar_commands(subs: Any) -> None:
    """``calendars`` and ``calendar show|set|rm|import``."""
    _sub(
        subs,
        "calendars",
        "Exclusion calendars: the days and periods schedules naming them in --exclude skip",
        "  rsched calendars\n  rsched calendars --json",
        calendars.cmd_calendars,
    )
    cal = _sub(
        subs,
        "calendar",
        "One exclusion calendar: show, set, rm, import (a change applies to every schedule "
        "using it from its next occurrence on)",
        "  rsched calendar set bank-holidays --date 2026-12-25 --date 2026-12-26\n"
        "  rsched calendar set weekends --weekday sat --weekday sun\n"
        "  rsched calendar set freeze --range 2026-12-20..2027-01-06\n"
        "  rsched calendar import holidays-it holidays-it.ics\n"
        "  rsched calendar show bank-holidays\n  rsched calendar rm bank-holidays",
        None,
    )
    csubs = cal.add_subparsers(dest="calendar_command", metavar="ACTION")
    p = _sub(
        csubs,
        "show",
        "One calendar's dates, ranges and weekdays",
        "  rsched calendar show bank-holidays\n  rsched calendar show bank-holidays --json",
        calendars.cmd_calendar_show,
    )
    p.add_argument("name", metavar="NAME")
    p = _sub(
        csubs,
        "set",
        "Create or replace a calendar (each flag may repeat; what is not given is not kept). "
        "Dates and naive times are read in each schedule's own zone",
        "  rsched calendar set bank-holidays --date 2026-12-25 --date 2027-01-01\n"
        "  rsched calendar set weekends --weekday sat --weekday sun\n"
        "  rsched calendar set freeze --range 2026-12-20..2027-01-06   (whole days)\n"
        "  rsched calendar set window --range 2026-11-28T22:00..2026-11-29T02:00",
        calendars.cmd_calendar_set,
    )
    p.add_argument("name", metavar="NAME", help="letters, digits, '. _ - :'")
    p.add_argument("--date", dest="dates", action="append", metavar="YYYY-MM-DD")
    p.add_argument(
        "--range",
        dest="ranges",
        action="append",
        metavar="A..B",
        help="dates (whole days, both included) or ISO times (A included, B not; with an "
        "offset, an instant everywhere)",
    )
    p.add_argument("--weekday", dest="weekdays", action="append", metavar="DAY", help="mon..sun")
    p.add_argument("--description")
    p = _sub(
        csubs,
        "import",
        "Set a calendar from an iCalendar (.ics) file or a plain file of dates (one YYYY-MM-DD "
        "or A..B per line, # comments)",
        "  rsched calendar import holidays-it holidays-it.ics\n"
        "  rsched calendar import closures closures.txt --merge",
        calendars.cmd_calendar_import,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--merge", action="store_true", help="add to the calendar's dates instead of replacing"
    )
    p.add_argument("--description", help="default: the file's calendar name (X-WR-CALNAME)")
    p = _sub(
        csubs,
        "rm",
        "Remove a calendar (refused while a schedule's --exclude names it, naming them)",
        "  rsched calendar rm bank-holidays",
        calendars.cmd_calendar_rm,
    )
    p.add_argument("name", metavar="NAME")


def _workers_and_jobs(subs: Any) -> None:
    """``workers``, ``jobs``, ``job`` and ``cancel``."""
    _sub(
        subs,
        "workers",
        "Live workers: queues, tasks, running jobs, last heartbeat",
        "  rsched workers\n  rsched workers --json",
        workers.cmd_workers,
    )
    p = _sub(
        subs,
        "jobs",
        "Jobs that run, wait or are delayed, across queues and schedules",
        "  rsched jobs\n  rsched jobs --queue mail --state running\n"
        "  rsched jobs --state delayed -n 20",
        workers.cmd_jobs,
    )
    p.add_argument("--queue", help="only this queue (default: every queue)")
    p.add_argument("--state", choices=["queued", "running", "delayed"], help="only this state")
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="K=V",
        help="only jobs enqueued with this label; repeat for several (all must match)",
    )
    _limit(p, 50, "page size (default 50)")
    p.add_argument("--cursor", help="continue from a previous page")
    p = _sub(
        subs,
        "job",
        "One job: state, attempts, worker, progress, its schedule's history of it, its result; "
        "or its log",
        "  rsched job nightly@1715000000000\n  rsched job order-42 --json\n"
        "  rsched job order-42 --logs\n  rsched job order-42 --logs --follow",
        workers.cmd_job,
    )
    p.add_argument("execution_id")
    p.add_argument(
        "--logs",
        action="store_true",
        help="print its log instead (job.log and logging records inside its handler)",
    )
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="with --logs: keep printing new lines until the job ends (Ctrl-C stops)",
    )
    p.add_argument("--attempt", type=whole, metavar="N", help="with --logs: only attempt N")
    p = _sub(
        subs,
        "cancel",
        "Cancel queued, delayed or running jobs",
        "  rsched cancel order-42\n  rsched cancel --task mail.send --queue mail --dry-run\n"
        "  (queued or delayed: removed and recorded as cancelled;\n"
        "   running: its worker cancels the handler)",
        workers.cmd_cancel,
    )
    p.add_argument("execution_ids", nargs="*", metavar="EXECUTION_ID")
    bulk_commands.filter_options(p, "the jobs")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rsched",
        description="Manage rsched schedules, jobs and dead letters in Redis.",
        epilog=(
            "examples:\n"
            "  rsched add nightly --task reports.nightly --cron '0 2 * * *' --tz Europe/Rome\n"
            "  rsched update nightly --cron '30 2 * * *'\n"
            "  rsched cron '0 2 * * *' --tz Europe/Rome -n 10\n"
            "  rsched ls\n"
            "  rsched show nightly\n"
            "  rsched --json stats\n"
            "  rsched sync schedules.toml --dry-run\n"
            "  rsched scheduler --help\n"
            "  rsched demo\n\n"
            "exit codes: 0 ok, 1 error, 2 usage"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common()],
    )
    parser.add_argument("--version", action="version", version=f"rsched {version()}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")

    writes: tuple[tuple[str, str, Handler], ...] = (
        ("add", "Create a schedule (fails if the id exists)", schedules.cmd_add),
        (
            "upsert",
            "Create a schedule or replace its whole spec (fields left out go back to their "
            "defaults, and are reported)",
            schedules.cmd_upsert,
        ),
    )
    for name, what, handler in writes:
        p = _sub(
            subs,
            name,
            what,
            f"  rsched {name} nightly --task reports.nightly --cron '0 2 * * *' --tz Europe/Rome\n"
            f"  rsched {name} poll --task feeds.poll --every 5m --payload '{{\"feed\": 1}}'\n"
            f"  rsched {name} launch --task rocket.go --at 2030-01-01T09:00 --tz UTC\n"
            f"  rsched {name} --file nightly.json",
            handler,
        )
        _spec_options(p)

    p = _sub(
        subs,
        "update",
        "Change some fields of a schedule; every other field is kept",
        "  rsched update nightly --every 2h\n"
        "  rsched update nightly --cron '30 2 * * *' --tz Europe/Rome\n"
        "  rsched update nightly --no-end-at --clear max_retries\n"
        "  (a trigger flag replaces the trigger; --clear FIELD sets a field back to its default)",
        schedules.cmd_update,
    )
    _spec_options(p, update=True)

    several = "each id's result is shown; exit 1 when any id failed (the others are done)"
    p = _sub(
        subs,
        "rm",
        "Remove schedules",
        f"  rsched rm nightly\n  rsched rm a b c\n  rsched rm --label team=old --dry-run\n"
        f"  ({several})",
        schedules.cmd_rm,
    )
    p.add_argument("ids", nargs="*", metavar="ID")
    bulk_commands.filter_options(p, "the schedules")

    p = _sub(
        subs,
        "pause",
        "Pause schedules until resumed",
        f"  rsched pause nightly --note 'db migration'\n  rsched pause a b c\n"
        f"  rsched pause --label team=billing --queue reports\n  ({several})",
        schedules.cmd_pause,
    )
    p.add_argument("ids", nargs="*", metavar="ID")
    bulk_commands.filter_options(p, "the schedules")
    p.add_argument("--note", help="why (shown by ls and show)")

    p = _sub(
        subs,
        "resume",
        "Resume paused schedules",
        f"  rsched resume nightly\n  rsched resume a b c\n  rsched resume --label team=billing\n"
        f"  ({several})",
        schedules.cmd_resume,
    )
    p.add_argument("ids", nargs="*", metavar="ID")
    bulk_commands.filter_options(p, "the schedules")

    p = _sub(
        subs,
        "trigger",
        "Run one extra occurrence now (overlap policy applies)",
        f"  rsched trigger nightly\n  rsched trigger a b c\n  rsched trigger --task reports.run\n"
        f"  ({several})",
        schedules.cmd_trigger,
    )
    p.add_argument("ids", nargs="*", metavar="ID")
    bulk_commands.filter_options(p, "the schedules")

    p = _sub(
        subs,
        "cron",
        "Preview a cron expression's next fire times in a zone and in UTC (creates nothing)",
        "  rsched cron '0 2 * * *' --tz Europe/Rome\n"
        "  rsched cron '30 2 * * *' --tz America/New_York -n 400   (DST changes are marked)\n"
        "  rsched cron '30 1 * * *' --tz America/New_York --dst-fold both --after 2026-10-31\n"
        "  rsched cron '*/10 * * * * *' --after 2026-03-29T01:59:30 --tz Europe/Rome\n"
        "  rsched cron '0 9 * * mon-fri' --tz Europe/Rome --exclude holidays-it.ics",
        None,
    )
    local: LocalHandler = schedules.cmd_cron
    p.set_defaults(local=local)
    p.add_argument("expression", metavar="EXPR", help="5 fields, or 6 with seconds first")
    p.add_argument("--tz", "--timezone", dest="timezone", default="UTC", help="IANA zone (UTC)")
    _dst_options(p)
    _limit(p, 10, "how many fire times (default 10)")
    p.add_argument(
        "--exclude",
        action="append",
        metavar="FILE",
        help="an exclusion calendar file (ICS, or one YYYY-MM-DD or A..B per line): the times it "
        "excludes are left out; repeat for several",
    )
    p.add_argument(
        "--after",
        type=iso_datetime,
        metavar="TIME",
        help="start after TIME, not now (naive: in --tz)",
    )

    p = _sub(
        subs,
        "ls",
        "List schedules in next-run order",
        "  rsched ls\n  rsched ls --queue reports --paused\n  rsched ls --id-prefix nightly.\n"
        "  rsched ls --all --json",
        schedules.cmd_ls,
    )
    p.add_argument("--queue", help="only this queue's")
    p.add_argument("--task", help="only this task's")
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="K=V",
        help="only those carrying this label, in id order; repeat for several (all must match)",
    )
    p.add_argument(
        "--id-prefix",
        metavar="TEXT",
        help="only ids that start with TEXT, e.g. nightly. (--prefix is the key prefix)",
    )
    state = p.add_mutually_exclusive_group()
    state.add_argument("--paused", action="store_true", default=None, help="only paused ones")
    state.add_argument(
        "--active", dest="paused", action="store_false", default=None, help="only unpaused ones"
    )
    _limit(p, 50, "page size (default 50)")
    p.add_argument("--cursor", help="continue from a previous page")
    p.add_argument("--all", action="store_true", help="every page")

    p = _sub(
        subs,
        "show",
        "Spec, state, next five fire times and last runs of a schedule",
        "  rsched show nightly\n  rsched show nightly --json",
        schedules.cmd_show,
    )
    p.add_argument("id")

    p = _sub(
        subs,
        "next",
        "Next fire times",
        "  rsched next nightly\n  rsched next nightly -n 20",
        schedules.cmd_next,
    )
    p.add_argument("id")
    _limit(p, 5, "how many (default 5)")

    p = _sub(
        subs,
        "history",
        "Recent events of a schedule, newest first",
        "  rsched history nightly\n  rsched history nightly --status dead -n 50",
        schedules.cmd_history,
    )
    p.add_argument("id")
    _limit(p, 20, "how many events (default 20)")
    p.add_argument("--status", help="only this event: fired, skipped, completed, failed, dead, …")
    p.add_argument("--cursor", help="continue from a previous page (older events)")
    p.add_argument(
        "--specs",
        action="store_true",
        help="the schedule's kept specs instead (generation, when, who; docs/audit.md)",
    )

    p = _sub(
        subs,
        "rollback",
        "Write a kept spec of a schedule back, as a new generation",
        "  rsched history nightly --specs\n  rsched rollback nightly --generation 3",
        audit.cmd_rollback,
    )
    p.add_argument("id")
    p.add_argument(
        "--generation", type=whole, required=True, help="the generation whose spec to restore"
    )

    p = _sub(
        subs,
        "backfill",
        "Fire the occurrences of a past range (each at most once)",
        "  rsched backfill nightly --start 2026-05-01 --end 2026-05-07T23:59\n"
        "  (naive times are in the schedule's zone; overlap policy applies)",
        schedules.cmd_backfill,
    )
    p.add_argument("id")
    p.add_argument("--start", type=iso_datetime, required=True)
    p.add_argument("--end", type=iso_datetime, required=True)

    dead = _sub(
        subs,
        "dead",
        "Dead letters: ls, show, requeue, purge",
        "  rsched dead ls --queue default\n  rsched dead show 1715000000000-0\n"
        "  rsched dead requeue --all\n  rsched dead purge --task emails.send",
        None,
    )
    dsubs = dead.add_subparsers(dest="dead_command", metavar="ACTION")
    p = _sub(
        dsubs,
        "ls",
        "List dead letters of every queue, newest first",
        "  rsched dead ls\n  rsched dead ls --queue mail --task emails.send",
        queues.cmd_dead_ls,
    )
    p.add_argument("--queue", help="only this queue (default: every queue)")
    p.add_argument("--task")
    _limit(p, 50, "page size (default 50)")
    p.add_argument("--cursor", help="continue from a previous page")
    p = _sub(
        dsubs,
        "show",
        "One dead letter in full",
        "  rsched dead show 1715000000000-0",
        queues.cmd_dead_show,
    )
    p.add_argument("entry_id")
    p.add_argument("--queue", default="default")
    bulk: tuple[tuple[str, str, Handler], ...] = (
        ("requeue", "Put dead letters back on their queue", queues.cmd_dead_requeue),
        ("purge", "Delete dead letters", queues.cmd_dead_purge),
    )
    for name, what, handler in bulk:
        p = _sub(
            dsubs,
            name,
            what,
            f"  rsched dead {name} 1715000000000-0 1715000000001-0\n"
            f"  rsched dead {name} --task emails.send\n"
            f"  rsched dead {name} --all --queue mail\n"
            f"  rsched dead {name} --label order=42 --dry-run\n"
            "  (by ids: each id's result is shown; exit 1 when any id does not exist)",
            handler,
        )
        p.add_argument("entry_ids", nargs="*", metavar="ENTRY_ID")
        p.add_argument("--queue", default="default")
        p.add_argument("--task", help="only dead letters of this task")
        p.add_argument("--all", action="store_true", help="every dead letter of the queue")
        p.add_argument(
            "--label",
            dest="labels",
            action="append",
            metavar="K=V",
            help="only dead letters of jobs enqueued with this label; repeat for several",
        )
        p.add_argument(
            "--dry-run", action="store_true", help="print what is selected, change nothing"
        )

    p = _sub(
        subs,
        "enqueue",
        "Add a one-off job to a queue",
        '  rsched enqueue emails.send --payload \'{"to": "a@example.com"}\'\n'
        "  rsched enqueue reports.build --queue reports --delay 5m --priority low\n"
        "  rsched enqueue billing.charge --id order-42   (again: nothing added, says so)\n"
        "  rsched enqueue search.reindex --debounce-key reindex:42 --debounce 2s\n"
        "      (a burst of these: one job, the last one's payload, 2s after the last)",
        queues.cmd_enqueue,
    )
    p.add_argument("task", help="the handler name a worker runs")
    p.add_argument("--payload", type=json_object, help="JSON object handed to the handler")
    p.add_argument("--queue", default="default", help="queue name (default: default)")
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="K=V",
        help="a label to find the job by (rsched jobs --label), e.g. order=42; repeat for several",
    )
    p.add_argument(
        "--delay", type=queues.delay_s, default=0, help="hold it back: 30, 90s, 5m, 1h30m"
    )
    p.add_argument(
        "--id",
        dest="execution_id",
        help="your own execution id: while a job with it is queued, running or finished "
        "less than the dedup window ago, nothing is added",
    )
    p.add_argument(
        "--priority",
        choices=PRIORITIES,
        default="normal",
        help="workers take high first, low last (default: normal)",
    )
    p.add_argument("--max-retries", type=whole, default=3, help="retries after a failure (3)")
    p.add_argument(
        "--timeout", dest="timeout_s", type=duration_s, default=3600, help="job timeout (1h)"
    )
    _limit_option(p, "the job holds while it runs")
    p.add_argument(
        "--debounce-key",
        help="collapse the calls with this key (on this queue) into one job, with the last "
        "call's payload and options (give --debounce too)",
    )
    p.add_argument(
        "--debounce",
        help="run that job this long after the last call of the burst: 500ms, 2s, 5m (at most 1d)",
    )
    p.add_argument(
        "--start-deadline",
        help="not started this long after it falls due (workers busy or down), the job ends "
        "expired without running: 30s, 10m (at most 366d; default none)",
    )

    _sub(
        subs,
        "stats",
        "Counts, backlog, queues, leader",
        "  rsched stats\n  rsched stats --json",
        queues.cmd_stats,
    )

    _health_commands(subs)
    _workers_and_jobs(subs)
    _limit_commands(subs)
    _calendar_commands(subs)
    _sub(
        subs,
        "init",
        "Store the number of partitions of a new deployment (docs/scaling.md)",
        "  rsched init --partitions 16\n"
        "  (again with the same number: nothing to do; another number: refused)",
        partitions.cmd_init,
    )
    p = _sub(
        subs,
        "where",
        "The partition and keys of a schedule id or execution id, for redis-cli",
        "  rsched where nightly-report\n  rsched where order-42 --json",
        partitions.cmd_where,
    )
    p.add_argument("id", help="a schedule id or an execution id")

    p = _sub(
        subs,
        "runs",
        "Runs across every schedule and job: those in progress first, then by when they ended "
        "(or were skipped), newest first",
        "  rsched runs\n  rsched runs --status dead --since 1h\n"
        "  rsched runs --schedule nightly -n 50 --json\n  rsched runs --label order=42",
        runs.cmd_runs,
    )
    _limit(p, 20, "how many runs (default 20)")
    runs.add_parser(p)

    p = _sub(
        subs,
        "audit",
        "Changes of schedules, calendars and limits: who, when, from where, what (newest first)",
        "  rsched audit\n  rsched audit nightly\n  rsched audit --actor alice@ops-1 --since 1d\n"
        "  rsched audit --json -n 100",
        audit.cmd_audit,
    )
    _limit(p, 20, "how many changes (default 20)")
    audit.add_parser(p)

    flows.add_parsers(subs, _sub, _limit)

    p = _sub(
        subs,
        "script",
        "Print a Lua script as rsched runs it (includes inlined), for a worker in another "
        "language (docs/protocol.md); needs no Redis",
        "  rsched script            (the names)\n  rsched script complete > complete.lua\n"
        "  rsched script complete --sha",
        None,
    )
    script_local: LocalHandler = workers.cmd_script
    p.set_defaults(local=script_local)
    p.add_argument("name", nargs="?", metavar="NAME", help="a script of lua/ (none: list them)")
    p.add_argument("--sha", action="store_true", help="print its SHA1 (the EVALSHA name)")

    p = _sub(
        subs,
        "sync",
        "Make Redis match a TOML schedules file",
        "  rsched sync schedules.toml --dry-run\n  rsched sync schedules.toml\n"
        "  rsched sync schedules.toml --adopt   (take over same-id schedules made by the SDK)",
        schedules.cmd_sync,
    )
    p.add_argument("file")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--adopt", action="store_true", help="take over existing ids")

    for name, (_, what) in DELEGATES.items():
        subs.add_parser(name, help=f"{what} (see rsched {name} --help)")
    return parser


def _health_commands(subs: Any) -> None:
    p = _sub(
        subs,
        "monitor",
        "List unhealthy schedules (late, stuck, failing) and why; exit 1 when any",
        "  rsched monitor\n  rsched monitor --json\n  rsched monitor --watch   (Ctrl-C ends it)",
        health.cmd_monitor,
    )
    p.add_argument("--watch", action="store_true", help="refresh every few seconds")
    p.add_argument(
        "--interval",
        type=duration_s,
        default=health.WATCH_S,
        help="time between refreshes: 3, 10s, 1m (default 3s)",
    )
    p = _sub(
        subs,
        "health",
        "Check the deployment: exit 0 when healthy, 1 with the reasons",
        "  rsched health\n  rsched health --json\n"
        "  rsched health --max-overdue 5m --dead-letter-window 0   (no dead-letter check)",
        health.cmd_health,
    )
    p.add_argument("--max-due", type=health.count, help="schedules due at once (default 1000)")
    p.add_argument(
        "--max-overdue",
        type=health.duration_or_zero,
        help="lateness of the oldest due one (default 60s)",
    )
    p.add_argument(
        "--dead-letter-window",
        type=health.duration_or_zero,
        help="fail while the newest dead letter is younger (default 5m; 0: never)",
    )
    p = _sub(
        subs,
        "events",
        "Show the events stream: schedules turned late/failing/stuck/recovered, dead letters, "
        "leader changes",
        "  rsched events\n  rsched events --follow\n  rsched events --json -n 20",
        health.cmd_events,
    )
    _limit(p, 20, "how many of the newest events to show first (default 20)")
    p.add_argument("--after", help="only events after this event id")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
