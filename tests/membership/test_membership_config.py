"""SwimConfig: memberlist's LAN defaults in ticks, validation, and the documented formulas."""

from __future__ import annotations

import pytest

from membership import ConfigError, SwimConfig


def test_defaults_are_memberlist_lan_in_100_ms_ticks_but_for_retransmit_mult() -> None:
    config = SwimConfig()
    assert config == SwimConfig.lan(tick_ms=100)
    assert config.seconds(config.probe_interval_ticks) == 1.0
    assert config.seconds(config.probe_timeout_ticks) == 0.5
    assert config.seconds(config.push_pull_interval_ticks) == 30.0
    assert (config.indirect_checks, config.retransmit_mult) == (3, 6)
    assert (config.suspicion_mult, config.suspicion_max_timeout_mult) == (4, 6)
    assert config.awareness_max_multiplier == 8
    assert config.max_packet_bytes == 1400


def test_lan_rescales_durations_for_another_tick_length() -> None:
    config = SwimConfig.lan(tick_ms=50)
    assert (config.probe_interval_ticks, config.probe_timeout_ticks) == (20, 10)
    assert config.push_pull_interval_ticks == 600
    assert config.seconds(config.probe_interval_ticks) == 1.0


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"probe_interval_ticks": 0}, "probe_interval_ticks=0"),
        ({"indirect_checks": -1}, "indirect_checks=-1"),
        ({"tick_ms": True}, "tick_ms=True"),
        ({"probe_timeout_ticks": 10}, "smaller than probe_interval_ticks=10"),
        ({"nack_timeout_percent": 120}, "1..100"),
        ({"max_packet_bytes": 64}, "at least 128"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(
    overrides: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        SwimConfig(**overrides)  # type: ignore[arg-type]


def test_lan_refuses_a_bad_tick_length() -> None:
    with pytest.raises(ConfigError, match="tick_ms=0"):
        SwimConfig.lan(tick_ms=0)


def test_formulas_match_memberlist() -> None:
    config = SwimConfig(retransmit_mult=4)
    # retransmit_mult · ceil(log10(n + 1))
    assert [config.retransmit_limit(n) for n in (1, 8, 9, 32, 64, 99, 100)] == [
        4,
        4,
        4,
        8,
        8,
        8,
        12,
    ]
    # suspicion_mult · max(1, log10 n) · probe interval, in ticks, rounded up
    assert config.suspicion_min_timeout_ticks(8) == 40
    assert config.suspicion_min_timeout_ticks(32) == 61
    assert config.suspicion_min_timeout_ticks(64) == 73
    assert config.suspicion_max_timeout_ticks(32) == 6 * 61
    assert [config.expected_confirmations(n) for n in (2, 3, 4, 64)] == [0, 0, 2, 2]
    assert [config.push_pull_interval_for(n) for n in (8, 32, 33, 64, 128)] == [
        300,
        300,
        600,
        600,
        900,
    ]
    assert config.nack_timeout_ticks == 4


def test_crash_detection_bound_is_rounds_plus_max_suspicion() -> None:
    config = SwimConfig()
    assert config.crash_detection_bound_ticks(16) == 2 * 15 * 10 + 6 * 49 + 1
    stretched = config.crash_detection_bound_ticks(16, awareness_multiplier=2)
    assert stretched == 2 * 15 * 20 + 6 * 49 + 1
