"""Node configuration: precedence of sources, validation messages, the dial map, edge checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cluster.config import ConfigError, NodeConfig, parse_controllers
from cluster.dialmap import DialMap
from cluster.validation import Invalid, check_replication_factor, check_topic_name

BASE = {"node_id": "n1", "data_dir": "/tmp/x"}


def test_sources_apply_in_order_defaults_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "node.toml"
    file.write_text('listen = "127.0.0.2:7002"\nweight = 2.0\nrack = "file"\ntick_ms = 20\n')
    config = NodeConfig.load(
        file=str(file),
        environ={"FLOTILLA_RACK": "env", "FLOTILLA_TICK_MS": "30"},
        overrides={**BASE, "tick_ms": 40, "rack": None},
    )
    assert config.listen == "127.0.0.2:7002"  # file
    assert config.weight == 2.0  # file
    assert config.rack == "env"  # env over file; a None flag does not override
    assert config.tick_ms == 40  # flag over env
    assert config.fsync == "always"  # default
    assert config.advertised == "127.0.0.2:7002"


def test_controllers_require_a_secret() -> None:
    controllers = parse_controllers("n1=127.0.0.1:7101,n2=127.0.0.2:7101")
    with pytest.raises(ConfigError, match="FLOTILLA_CLUSTER_SECRET"):
        NodeConfig.load(environ={}, overrides={**BASE, "controllers": controllers})
    config = NodeConfig.load(
        environ={"FLOTILLA_CLUSTER_SECRET": "s3cret"},
        overrides={**BASE, "controllers": "n1=127.0.0.1:7101"},
    )
    assert config.is_controller and config.controllers == {"n1": "127.0.0.1:7101"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"node_id": ""}, "node_id is required"),
        ({"node_id": "a/b"}, "member id 'a/b' is invalid"),
        ({"listen": "nohost"}, "listen='nohost' is not HOST:PORT"),
        ({"listen": "h:99999"}, "port in 1..65535"),
        ({"weight": 0}, "weight=0.0 must be > 0"),
        ({"tick_ms": "fast"}, "tick_ms='fast' is not a valid int"),
        ({"fsync": "sometimes"}, "fsync policy 'sometimes' is not valid"),
        # replicated writes are always fsynced before they are acknowledged or answered: a
        # policy that would not do so is refused rather than silently ignored
        ({"fsync": "never"}, "fsync='never' is not supported on a node; valid: 'always'"),
        ({"fsync": "interval:100"}, "fsync='interval:100' is not supported on a node"),
        ({"heartbeat_ticks": 10}, "heartbeat_ticks=10 must be below election_ticks=10"),
        ({"controllers": "n1"}, "controllers entry 'n1' is not ID=HOST:PORT"),
        ({"colour": "blue"}, "unknown setting"),
        ({"max_inflight_produce": 0}, "max_inflight_produce=0 must be > 0"),
        (
            {"max_inflight_request_bytes": 1024},
            "max_inflight_request_bytes=1024 must be at least max_message_bytes=16777216",
        ),
        (
            {"produce_timeout_ms": 200_000},
            "produce_timeout_ms=200000 must be at most max_produce_timeout_ms=120000",
        ),
        ({"max_streams_per_connection": -1}, "max_streams_per_connection=-1 must be > 0"),
        ({"timer_log_retention_ms": 999}, "timer_log_retention_ms=999 must be >= 1000"),
    ],
)
def test_bad_settings_name_the_field(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        NodeConfig.load(environ={}, overrides={**BASE, **overrides})


def test_a_bad_config_file_is_reported(tmp_path: Path) -> None:
    file = tmp_path / "bad.toml"
    file.write_text("listen = [")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        NodeConfig.load(file=str(file), environ={}, overrides=BASE)
    with pytest.raises(ConfigError, match="cannot be read"):
        NodeConfig.load(file=str(tmp_path / "missing.toml"), environ={}, overrides=BASE)


def test_the_dial_map_is_re_read_when_it_changes_and_keeps_the_last_good_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dial.json"
    dial = DialMap(str(path), recheck_s=0)
    assert dial.address_for("n2", "127.0.0.2:7001") == "127.0.0.2:7001"  # no file yet
    path.write_text(json.dumps({"n2": "127.0.0.1:9002"}))
    assert dial.address_for("n2", "127.0.0.2:7001") == "127.0.0.1:9002"
    assert dial.address_for("n3", "127.0.0.3:7001") == "127.0.0.3:7001"
    path.write_text('{"n2": "127.0.0.1:9')  # a half-written file
    os.utime(path, ns=(1, 1))
    assert dial.address_for("n2", "127.0.0.2:7001") == "127.0.0.1:9002"
    path.write_text(json.dumps({"n2": "127.0.0.1:9999"}))
    assert dial.address_for("n2", "127.0.0.2:7001") == "127.0.0.1:9999"
    path.unlink()
    assert dial.address_for("n2", "127.0.0.2:7001") == "127.0.0.2:7001"


def test_the_dial_map_file_is_looked_at_no_more_than_every_recheck_interval(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dial.json"
    path.write_text(json.dumps({"n2": "127.0.0.1:9002"}))
    now = [100.0]
    dial = DialMap(str(path), recheck_s=0.2, clock=lambda: now[0])
    assert dial.address_for("n2", "a:1") == "127.0.0.1:9002"
    path.write_text(json.dumps({"n2": "127.0.0.1:9999"}))
    now[0] += 0.1  # within the interval: the map in hand is used without a stat
    assert dial.address_for("n2", "a:1") == "127.0.0.1:9002"
    now[0] += 0.15  # past it: the change is seen
    assert dial.address_for("n2", "a:1") == "127.0.0.1:9999"


@pytest.mark.parametrize(
    "name", ["", "a/b", "..", ".", "x" * 201, "../etc", "white space", "naïve"]
)
def test_bad_topic_names_are_refused(name: str) -> None:
    with pytest.raises(Invalid, match="use 1 to 200 characters"):
        check_topic_name(name)


def test_good_topic_names_pass() -> None:
    for name in ["orders", "a.b-c_d", "x" * 200, "...x"]:
        assert check_topic_name(name) == name


def test_replication_factor_is_bounded_by_live_members() -> None:
    assert check_replication_factor(3, 3) == 3
    with pytest.raises(Invalid, match="exceeds the 2 live member"):
        check_replication_factor(3, 2)
    with pytest.raises(Invalid, match=r"use 1\.\.7"):
        check_replication_factor(0, 3)


def test_raft_listen_and_advertise() -> None:
    base = {"node_id": "n1", "data_dir": "d"}
    assert NodeConfig.load(environ={}, overrides=base).raft_advertised == ""
    config = NodeConfig.load(environ={}, overrides={**base, "raft_listen": "127.0.0.1:7201"})
    assert config.raft_advertised == "127.0.0.1:7201"
    config = NodeConfig.load(
        environ={"FLOTILLA_RAFT_ADVERTISE": "127.0.0.2:7201"},
        overrides={**base, "raft_listen": "127.0.0.1:7201"},
    )
    assert config.raft_advertised == "127.0.0.2:7201"
    with pytest.raises(ConfigError, match="raft_listen='7201' is not HOST:PORT"):
        NodeConfig.load(environ={}, overrides={**base, "raft_listen": "7201"})
    with pytest.raises(ConfigError, match=r"raft_advertise=.* needs raft_listen"):
        NodeConfig.load(environ={}, overrides={**base, "raft_advertise": "127.0.0.1:7201"})
    with pytest.raises(ConfigError, match=r"raft_listens on 0\.0\.0\.0:7201 without TLS"):
        NodeConfig.load(environ={}, overrides={**base, "raft_listen": "0.0.0.0:7201"})


def test_a_raft_port_on_every_interface_is_advertised_at_the_advertised_host() -> None:
    config = NodeConfig.load(
        environ={},
        overrides={
            "node_id": "n1", "data_dir": "d", "insecure": True, "listen": "0.0.0.0:7001",
            "advertise": "10.0.0.5:7001", "raft_listen": "0.0.0.0:7201",
        },
    )  # fmt: skip
    assert config.raft_advertised == "10.0.0.5:7201"
