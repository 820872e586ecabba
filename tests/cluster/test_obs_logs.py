"""The node's log format (logfmt and JSON, one line per record), its configuration (flag over
`FLOTILLA_LOG` over INFO) and the burst budget that keeps 1,000 elections from writing 1,000
lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from cluster import logs
from cluster.logs import EventBudget, JsonFormatter, LogConfigError, LogfmtFormatter, event


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter("n1"))
    logger = logging.getLogger("flotilla.test-obs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, str]]:
    return [logs.parse_logfmt(line) for line in stream.getvalue().splitlines()]


def test_an_event_is_one_logfmt_line_whose_fields_parse_back(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    event(logger, "election_won", topic="t", partition=3, term=7, voters=["n1", "n2"])
    event(logger, "odd", text='a "quoted" value\nwith = signs', empty="", flag=True)
    try:
        raise ValueError("boom")
    except ValueError as error:
        logger.warning("plain message %s", "here", exc_info=error)
    rows = stream.getvalue().splitlines()
    assert len(rows) == 3, rows  # a traceback stays on its record's line
    first, second, third = lines(stream)
    assert rows[0].startswith("ts=") and " level=info node=n1 event=election_won " in rows[0]
    assert first["topic"] == "t" and first["partition"] == "3" and first["term"] == "7"
    assert first["voters"] == "n1,n2" and first["logger"] == "flotilla.test-obs"
    assert second["text"] == 'a "quoted" value\nwith = signs' and second["empty"] == ""
    assert second["flag"] == "true"
    assert third["level"] == "warning" and third["msg"] == "plain message here"
    assert "ValueError: boom" in third["exc"] and "Traceback" in third["exc"]


def test_json_format_is_one_object_per_line() -> None:
    formatter = JsonFormatter("n2")
    record = logging.LogRecord("flotilla.node", logging.INFO, __file__, 1, "node_started", (), None)
    record.event = "node_started"
    record.fields = {"listen": "127.0.0.1:7001", "controller": True, "join": ("a", "b")}
    text = formatter.format(record)
    assert "\n" not in text
    parsed = json.loads(text)
    assert (
        parsed["node"] == "n2" and parsed["level"] == "info" and parsed["event"] == "node_started"
    )
    assert parsed["controller"] is True and parsed["join"] == ["a", "b"]
    assert parsed["ts"].endswith("Z")


def test_the_flag_wins_over_the_environment_and_info_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("grpc").level)
    try:
        monkeypatch.delenv(logs.LOG_ENV, raising=False)
        assert logs.configure("n1") == logging.INFO
        monkeypatch.setenv(logs.LOG_ENV, "debug")
        assert logs.configure("n1") == logging.DEBUG
        assert logs.configure("n1", "error") == logging.ERROR  # the flag wins
        assert logging.getLogger("grpc").level == logging.ERROR
        logs.configure("n1", "debug")
        for library in ("grpc", "pysyncobj"):  # chatty libraries stay at WARNING
            assert logging.getLogger(library).getEffectiveLevel() == logging.WARNING
        assert isinstance(root.handlers[0].formatter, LogfmtFormatter)
        logs.configure("n1", "info", "json")
        assert isinstance(root.handlers[0].formatter, JsonFormatter) and len(root.handlers) == 1
        monkeypatch.setenv(logs.LOG_ENV, "loud")
        with pytest.raises(
            LogConfigError, match="FLOTILLA_LOG='loud' is not a log level; use one of debug"
        ):
            logs.configure("n1")
        with pytest.raises(LogConfigError, match="--log-format='xml'"):
            logs.configure("n1", "info", "xml")
        assert isinstance(root.handlers[0].formatter, JsonFormatter)  # a refusal changed nothing
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        logging.getLogger("grpc").setLevel(saved[2])
        logging.getLogger("pysyncobj").setLevel(logging.NOTSET)


def test_the_election_budget_lets_a_few_lines_through_then_one_summary_a_second(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    clock = FakeClock()
    budget = EventBudget(logger, "elections_summary", per_window=20, window_s=1.0, clock=clock)
    for partition in range(1000):  # 1,000 partitions elect at once
        name = "election_won" if partition % 4 else "election_lost"
        budget(name, topic="t", partition=partition, term=2)
    assert len(lines(stream)) == 20
    clock.now += 0.5
    budget.tick()
    assert len(lines(stream)) == 20  # the window is not over yet
    clock.now += 0.6
    budget.tick()  # no further event: the summary still goes out
    rows = lines(stream)
    assert len(rows) == 21, rows[20:]
    summary = rows[20]
    assert summary["event"] == "elections_summary"
    assert (summary["election_won"], summary["election_lost"]) == ("750", "250")
    assert (summary["logged"], summary["suppressed"]) == ("20", "980")
    # a quiet second: no summary; the next burst gets a fresh budget
    clock.now += 5
    budget.tick()
    for partition in range(3):
        budget("election_won", topic="t", partition=partition, term=3)
    clock.now += 1.5
    budget.tick()
    rows = lines(stream)
    assert [row["event"] for row in rows[21:]] == ["election_won"] * 3  # nothing held: no summary
